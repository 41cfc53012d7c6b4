"""``reconciler demo --kubeconfig``: the example on a cluster it did not start (the
session's dev cluster, started separately): namespaced objects only, in namespaces it
labels as its own, deleted at the end; a namespace of that name it does not own is
refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.cluster import KubeCluster

from reconciler.adapters.kube import Kube

pytestmark = pytest.mark.cluster

OURS = ["reconciler-demo-team-a", "reconciler-demo-team-b"]


def _demo(kubeconfig: Path, workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "demo",
            "--kubeconfig",
            str(kubeconfig),
            "--workdir",
            str(workdir),
            "--interval",
            "1",
            "--timeout",
            "540",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _gone_or_going(core: client.CoreV1Api, name: str) -> bool:
    try:
        ns = core.read_namespace(name)
    except ApiException as exc:
        return exc.status == 404
    return ns.metadata.deletion_timestamp is not None


def test_demo_on_an_existing_cluster(kube: Kube, kube_cluster: KubeCluster, tmp_path: Path) -> None:
    core = client.CoreV1Api(kube.api)
    volumes = sorted(v.metadata.name for v in core.list_persistent_volume().items)
    demo = _demo(kube_cluster.kubeconfig, tmp_path / "run")
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-3000:]
    lines = demo.stdout.splitlines()
    assert "operations: 19 (19 Succeeded)" in lines
    assert (
        f"namespaces (labelled app.kubernetes.io/managed-by=reconciler-demo): {', '.join(OURS)}"
        in lines
    )
    assert f"deleted namespaces {', '.join(OURS)} (and everything in them)" in lines
    assert all(_gone_or_going(core, name) for name in OURS)
    # nothing cluster-scoped was made, and the cluster's own team namespaces were not used
    assert sorted(v.metadata.name for v in core.list_persistent_volume().items) == volumes
    jobs = kube.list_managed("Job").items
    assert not [j for j in jobs if j["metadata"]["namespace"] in ("team-a", "team-b")]


def test_a_namespace_it_does_not_own_is_refused(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube.api)
    name = "reconciler-demo-team-a"
    if not _gone_or_going(core, name):
        core.delete_namespace(name)
    import time

    deadline = time.monotonic() + 120
    while True:
        try:
            core.create_namespace({"metadata": {"name": name, "labels": {"team": "a"}}})
            break
        except ApiException as exc:
            if exc.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(1)
    try:
        demo = _demo(kube_cluster.kubeconfig, tmp_path / "run")
        assert demo.returncode == 1
        assert demo.stderr.strip() == (
            f"error: namespace {name} exists and is not the demo's "
            "(no label app.kubernetes.io/managed-by=reconciler-demo): not touching it"
        )
        assert "Traceback" not in demo.stdout + demo.stderr
        ns = core.read_namespace(name)
        assert ns.metadata.labels.get("team") == "a" and ns.metadata.deletion_timestamp is None
    finally:
        core.delete_namespace(name)
