"""``reconciler run`` as real processes: two replicas with leader election, /metrics, and
an operation's logs and outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.processes import jobs_per_op as _jobs_per_op
from support.processes import lease_holder as _lease_holder
from support.processes import start as _start
from support.reconciler_env import commit_all, git, make_long_running, run_once

from reconciler.adapters.kube import Kube
from reconciler.core.reporting.status import operation_path
from reconciler.devcluster.cluster import free_port

pytestmark = pytest.mark.cluster


def test_two_replicas_one_dispatches_and_the_other_takes_over(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path, namespace: str
) -> None:
    make_long_running(config_repo, "vision")
    lease = [
        "--leader-elect",
        "--lease-kubeconfig",
        str(kube_cluster.kubeconfig),
        "--lease-namespace",
        namespace,
        "--lease-duration",
        "4",
        "--renew-deadline",
        "3",
        "--retry-period",
        "1",
    ]
    replicas = {
        name: _start(
            config_repo,
            kube_cluster.kubeconfig,
            tmp_path,
            name,
            *lease,
            "--identity",
            name,
            "--status-branch",
            "",
        )
        for name in ("a", "b")
    }
    try:
        leader = wait_until(lambda: _lease_holder(kube, namespace), timeout=30, what="a leader")
        wait_until(lambda: len(_jobs_per_op(kube)) >= 10, timeout=60, what="the first dispatches")
        assert set(_jobs_per_op(kube).values()) == {1}  # never dispatched twice
        follower = "b" if leader == "a" else "a"
        follower_log = (tmp_path / f"{follower}.log").read_text()
        assert "dispatched vision/" not in follower_log

        replicas[leader].send_signal(signal.SIGKILL)
        replicas[leader].wait(timeout=10)
        wait_until(
            lambda: _lease_holder(kube, namespace) == follower,
            timeout=15,
            what="the follower to take the Lease within the lease time",
        )
        (config_repo / "projects" / "vision" / "operations" / "late.yaml").write_text(
            "kind: Operation\nname: late\nqueue: batch\nrun:\n  container: {image: busybox}\n"
        )
        batch = config_repo / "queues" / "batch.yaml"
        batch.write_text(batch.read_text().replace("concurrency: 3", "concurrency: 10"))
        commit_all(config_repo, "a late op, after the leader died")
        wait_until(
            lambda: _jobs_per_op(kube).get("vision/late") == 1,
            timeout=30,
            what="the new leader to dispatch",
        )
        assert set(_jobs_per_op(kube).values()) == {1}
    finally:
        for proc in replicas.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


def test_metrics_and_readiness_over_http(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    port = free_port()
    proc = _start(
        config_repo, kube_cluster.kubeconfig, tmp_path, "metrics", "--http", f"127.0.0.1:{port}"
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=2) as resp:
                    return int(resp.status) == 200
            except OSError:
                return False

        wait_until(ready, timeout=60, what="/readyz")
        with urllib.request.urlopen(base + "/healthz", timeout=2) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(base + "/metrics", timeout=2) as resp:
            text = resp.read().decode()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        quota = {k: v for k, v in samples.items() if k[0] == "reconciler_queue_quota_used"}

        def gpu(name: str, queue: str, flavor: str) -> float | None:
            labels = (("flavor", flavor), ("queue", queue), ("resource", "nvidia.com/gpu"))
            return samples.get((name, labels))

        # a series per flavor: team-a's H100 and one borrowed from team-b, its A100
        used = "reconciler_queue_quota_used"
        assert (gpu(used, "team-a", "h100"), gpu(used, "team-a", "a100")) == (2, 1), quota
        assert gpu(used, "team-a", "") is None  # no sum series for a queue with flavors
        limit = "reconciler_queue_quota_limit"
        assert (gpu(limit, "team-b", "h100"), gpu(limit, "team-b", "a100")) == (2, 2)
        # a queue without flavors keeps its one series, flavor ""
        assert gpu(limit, "sandboxes", "") == 2
        dispatched = sum(
            v for (name, _), v in samples.items() if name == "reconciler_dispatched_total"
        )
        assert dispatched >= 10
        commit = git(config_repo, "rev-parse", "HEAD")
        assert samples[("reconciler_config_commit_info", (("commit", commit),))] == 1
        assert any(
            name == "reconciler_cycle_duration_seconds_count" and v >= 1
            for (name, _), v in samples.items()
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = [
        json.loads(line)
        for line in (tmp_path / "metrics.log").read_text().splitlines()
        if line.startswith("{")
    ]
    assert any("dispatched" in line["message"] for line in lines)


def test_logs_and_outputs_of_a_finished_operation(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    op = config_repo / "projects" / "vision" / "operations" / "dedupe.yaml"
    text = op.read_text()
    op.write_text(text + "\n" if not text.endswith("\n") else text)
    base = config_repo / "projects" / "vision" / "presets" / "base.yaml"
    base.write_text(
        base.read_text().replace(
            "reconciler.dev/simulated-duration: 3s",
            "reconciler.dev/simulated-duration: 1s\n"
            "      reconciler.dev/simulated-outputs: '{\"loss\": 0.25}'",
        )
    )
    commit_all(config_repo, "vision ops report a loss")
    proc = _start(config_repo, kube_cluster.kubeconfig, tmp_path, "logs")
    try:

        def outputs() -> dict[str, object] | None:
            try:
                record = git(
                    config_repo, "show", f"reconciler/status:{operation_path('vision/dedupe')}"
                )
            except subprocess.CalledProcessError:
                return None
            return {"ok": True} if "phase: Succeeded" in record and "loss: 0.25" in record else None

        wait_until(outputs, timeout=90, what="vision/dedupe Succeeded with outputs in status")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    logs = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "logs",
            "vision/dedupe",
            "--repo",
            str(config_repo),
            "--kubeconfig",
            str(kube_cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip()
    missing = subprocess.run(
        [sys.executable, "-m", "reconciler", "logs", "vision/nope", "--repo", str(config_repo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_plan_and_status_live_read_the_clusters(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    override = ["--cluster-kubeconfig", f"local={kube_cluster.kubeconfig}"]
    make_long_running(config_repo, "*")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reconciler", *args], capture_output=True, text=True, timeout=120
        )

    before = json.loads(
        cli("plan", "--repo", str(config_repo), "--live", *override, "-o", "json").stdout
    )
    assert len(before["dispatch"]) == 10
    once = run_once(
        config_repo,
        kube_cluster.kubeconfig,
        "--status-branch",
        "",
        cache_dir=tmp_path / "cache",
    )
    assert once.returncode == 0, once.stderr
    after = json.loads(
        cli("plan", "--repo", str(config_repo), "--live", *override, "-o", "json").stdout
    )
    assert after["dispatch"] == []  # what runs now is observed, not dispatched again
    team_a = next(q for q in after["queues"] if q["name"] == "team-a")
    assert team_a["active"] == 3 and team_a["used"] == {"nvidia.com/gpu": "3"}
    live = cli(
        "status",
        "vision/sweep-lr-0",
        "--repo",
        str(config_repo),
        "--live",
        "--cache-dir",
        str(tmp_path / "cache"),
        *override,
        "-o",
        "json",
    )
    assert live.returncode == 0, live.stderr
    record = json.loads(live.stdout)
    record = record[0] if isinstance(record, list) else record
    assert record.get("phase") in ("Dispatched", "Running"), record


def test_sigterm_right_after_a_job_finished_leaves_its_phase_on_the_branch(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """No cycle runs between the end of a Job and SIGTERM (a debounce and intervals of an
    hour): the shutdown decides over the watch caches once more and writes that."""
    proc = _start(
        config_repo,
        kube_cluster.kubeconfig,
        tmp_path,
        "term",
        "--debounce",
        "1h",
        "--status-interval",
        "1h",
        "--interval",
        "1h",
    )
    try:
        wait_until(
            lambda: "reconciler/status" in git(config_repo, "branch", "--list"),
            timeout=120,
            what="the first cycle's status",
        )

        def finished() -> list[str]:
            return [
                j["metadata"]["annotations"]["reconciler.dev/operation-id"]
                for j in kube.list_managed("Job").items
                if any(
                    c["type"] == "Complete" and c["status"] == "True"
                    for c in (j.get("status") or {}).get("conditions") or ()
                )
            ]

        wait_until(lambda: bool(finished()), timeout=120, what="a Job to finish")
        ended = finished()
        first = git(config_repo, "show", f"reconciler/status:{operation_path(ended[0])}")
        assert "phase: Succeeded" not in first  # the branch has not seen it yet
        time.sleep(1.0)  # the watch has shown it (tens of ms); no cycle has run
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    for op_id in ended:
        record = git(config_repo, "show", f"reconciler/status:{operation_path(op_id)}")
        assert "phase: Succeeded" in record, record
    log = (tmp_path / "term.log").read_text()
    assert "not on the branch" not in log
