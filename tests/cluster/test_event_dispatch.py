"""Dispatch driven by events on the real control plane: ``reconciler run`` with a 30 s
interval creates the next operation's Job seconds after the one before completes, not at
its next interval; the status branch still follows. The fast version, with a virtual
clock: tests/runtime/test_event_cycles.py."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import client_context, commit_all, git, start_run

from reconciler.adapters.kube import Kube
from reconciler.core.reporting.status import operation_path

pytestmark = pytest.mark.cluster

INTERVAL = 30  # seconds: the fallback, far longer than what is asserted
WELL_BEFORE = 5.0  # seconds from the first Job's end to the second's creation, at most


def chain_repo(root: Path, kubeconfig: Path, namespace: str) -> Path:
    """Two 2 s operations under a queue that runs one at a time."""
    (root / "clusters").mkdir(parents=True)
    (root / "queues").mkdir()
    ops = root / "projects" / "chain" / "operations"
    ops.mkdir(parents=True)
    (root / "reconciler.yaml").write_text("kind: Org\nname: events\n")
    (root / "clusters" / "local.yaml").write_text(
        f"kind: Cluster\nname: local\nkubeconfig:\n  path: {kubeconfig}\n"
        f"context: {client_context(kubeconfig)}\n"
    )
    (root / "queues" / "serial.yaml").write_text(
        "kind: Queue\nname: serial\ncluster: local\nconcurrency: 1\n"
    )
    (root / "projects" / "chain" / "project.yaml").write_text(
        f"kind: Project\nname: chain\nnamespace: {namespace}\ndefaults:\n  queue: serial\n"
    )
    for name in ("first", "second"):
        (ops / f"{name}.yaml").write_text(
            f"kind: Operation\nname: {name}\nrun:\n  kind: job\n"
            "  container:\n    image: busybox\n    resources: {requests: {cpu: 10m}}\n"
            "  environment:\n    annotations: {reconciler.dev/simulated-duration: 2s}\n"
        )
    git(root, "init", "-q", "-b", "main")
    commit_all(root, "two ops, one at a time")
    return root


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def jobs(kube: Kube, namespace: str) -> dict[str, Any]:
    return {
        j["metadata"]["name"]: j
        for j in kube.list_managed("Job").items
        if j["metadata"]["namespace"] == namespace
    }


def ended_at(job: Any) -> datetime | None:
    """When the Job's first terminal condition was set (the apiserver's clock, 1 s steps)."""
    times = [
        stamp(c["lastTransitionTime"])
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True" and c.get("type") in ("SuccessCriteriaMet", "Complete")
    ]
    return min(times) if times else None


def test_a_job_that_completes_dispatches_the_next_well_before_the_interval(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path, namespace: str
) -> None:
    repo = chain_repo(tmp_path / "config", kube_cluster.kubeconfig, namespace)
    log = tmp_path / "run.log"
    proc = start_run(
        repo, kube_cluster.kubeconfig, log, interval=f"{INTERVAL}s", cache_dir=tmp_path / "cache"
    )
    try:
        first = "chain-first-g1"
        second = "chain-second-g1"
        wait_until(lambda: first in jobs(kube, namespace), timeout=60, what="the first Job")
        assert second not in jobs(kube, namespace)  # concurrency 1
        done = wait_until(
            lambda: ended_at(jobs(kube, namespace)[first]), timeout=60, what="the first to end"
        )
        created = wait_until(
            lambda: jobs(kube, namespace).get(second),
            timeout=INTERVAL,
            what="the second Job",
        )
        gap = (stamp(created["metadata"]["creationTimestamp"]) - done).total_seconds()
        # whole seconds on both sides: the gap is measured to within 1 s
        assert gap < WELL_BEFORE, f"the next Job came {gap:.0f} s after the first ended"
        # the status branch follows (written at most every 10 s: --interval, at most 10 s)
        wait_until(
            lambda: (
                "Succeeded"
                in git(repo, "show", f"reconciler/status:{operation_path('chain/second')}")
            ),
            timeout=60,
            what="the status of the second op",
        )
        text = log.read_text()
        assert "dispatched chain/second" in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
