"""``reconciler logs`` and Kube.read_logs read a finished pod's log through pods/log
(kwok serves it from the dev cluster's state dir)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until

from reconciler.adapters.kube import Kube, KubeError
from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import render_operation
from reconciler.devcluster.cluster import SIMULATED_LOG_LINES

pytestmark = pytest.mark.cluster

EXPECTED = "".join(f"{line}\n" for line in SIMULATED_LOG_LINES)


def _write_repo(root: Path, kubeconfig: Path, namespace: str) -> None:
    files = {
        "clusters/local.yaml": f"kind: Cluster\nkubeconfig:\n  path: {kubeconfig}\ncontext: dev\n",
        "queues/batch.yaml": "kind: Queue\ncluster: local\nconcurrency: 3\n",
        "projects/demo/project.yaml": (
            f"kind: Project\nnamespace: {namespace}\ndefaults:\n  queue: batch\n"
        ),
        "projects/demo/operations/hello.yaml": (
            "kind: Operation\nrun:\n  kind: job\n  container: {image: busybox}\n"
            "  environment:\n    annotations: {reconciler.dev/simulated-duration: 1s}\n"
        ),
        "projects/demo/operations/later.yaml": (
            "kind: Operation\nrun:\n  kind: job\n  container: {image: busybox}\n"
        ),
        "projects/demo/operations/huge.yaml": (
            "kind: Operation\nrun:\n  kind: job\n  container:\n    image: busybox\n"
            "    resources: {limits: {nvidia.com/gpu: 5}}\n"
        ),
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def _logs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", "logs", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_logs_of_a_finished_operation(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    if kube_cluster.dev is None:
        pytest.skip("the simulated log text is served by the dev cluster's kwok")
    _write_repo(tmp_path, kube_cluster.kubeconfig, namespace)
    repo = compile_repo(snapshot_worktree(tmp_path))
    assert repo.valid, repo.errors
    op = next(o for o in repo.operations if o.id == "demo/hello")
    kube = Kube(kube_cluster.api_client())

    missing = _logs("demo/hello", "--repo", str(tmp_path))
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: demo/hello: no workload on cluster local")
    assert "Traceback" not in missing.stderr

    rendered = render_operation(op, {}, config_version="c1", dispatched_at=datetime.now(UTC))
    kube.create_or_adopt(rendered.job)

    def finished_pod() -> str | None:
        pods = kube.list_labelled("Pod", f"job-name={rendered.name}", namespace)
        done = [p for p in pods if p["status"].get("phase") == "Succeeded"]
        return str(done[0]["metadata"]["name"]) if done else None

    pod = wait_until(finished_pod, timeout=60, what="the op's pod to succeed")
    assert kube.read_logs(namespace, pod) == EXPECTED
    assert kube.read_logs(namespace, pod, tail_lines=1) == EXPECTED.splitlines(True)[-1]
    with pytest.raises(KubeError) as err:
        kube.read_logs(namespace, pod, container="sidecar")
    assert err.value.status == 400

    out = _logs("demo/hello", "--repo", str(tmp_path))
    assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
    # --follow on a finished pod prints the log and returns
    followed = _logs("demo/hello", "--follow", "--repo", str(tmp_path))
    assert (followed.returncode, followed.stdout) == (0, EXPECTED), followed.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    kubeconfig = str(kube_cluster.kubeconfig)
    tail = _logs("demo/hello", "--tail", "2", "--kubeconfig", kubeconfig, "--repo", str(empty))
    assert tail.stdout == "".join(EXPECTED.splitlines(True)[-2:])  # not in that repo: all ns


def test_logs_errors_are_one_line_and_exit_1(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    _write_repo(tmp_path, kube_cluster.kubeconfig, namespace)
    cases = {
        ("demo/nope",): "error: demo/nope: no such operation in the config repo",
        ("nope",): "error: 'nope': expected PROJECT/OPERATION",
        ("demo/later",): "error: demo/later: no workload on cluster local, namespace " + namespace,
    }
    for args, message in cases.items():
        result = _logs(*args, "--repo", str(tmp_path))
        assert result.returncode == 1, result
        assert result.stderr.startswith(message), result.stderr
        assert "Traceback" not in result.stderr


def test_logs_of_an_unschedulable_pod_say_why(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    _write_repo(tmp_path, kube_cluster.kubeconfig, namespace)
    repo = compile_repo(snapshot_worktree(tmp_path))
    op = next(o for o in repo.operations if o.id == "demo/huge")
    kube = Kube(kube_cluster.api_client())
    rendered = render_operation(op, {}, config_version="c1", dispatched_at=datetime.now(UTC))
    kube.create_or_adopt(rendered.job)

    def unschedulable() -> bool:
        pods = kube.list_labelled("Pod", f"job-name={rendered.name}", namespace)
        return any(
            c.get("reason") == "Unschedulable"
            for p in pods
            for c in p["status"].get("conditions") or []
        )

    wait_until(unschedulable, timeout=60, what="the 5-GPU pod to be Unschedulable")
    result = _logs("demo/huge", "--repo", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.startswith("error: demo/huge: pod "), result.stderr
    assert "has not started: Unschedulable: " in result.stderr
    assert "Insufficient nvidia.com/gpu" in result.stderr


def test_logs_of_a_distributed_run_read_one_replica(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path, gang_nodes: list[str]
) -> None:
    """``--replica N`` reads the pod of index N (default 0). kwok serves one text for every
    pod, so the test checks which pods exist and that each index's log is read."""
    if kube_cluster.dev is None:
        pytest.skip("the simulated log text is served by the dev cluster's kwok")
    _write_repo(tmp_path, kube_cluster.kubeconfig, namespace)
    (tmp_path / "projects/demo/operations/gang.yaml").write_text(
        "kind: Operation\nrun:\n  kind: job\n  replicas: 3\n  container: {image: busybox}\n"
        "  environment:\n    nodeSelector: {reconciler.dev/pool: gang}\n"
        "    annotations: {reconciler.dev/simulated-duration: 1s}\n"
    )
    repo = compile_repo(snapshot_worktree(tmp_path))
    op = next(o for o in repo.operations if o.id == "demo/gang")
    kube = Kube(kube_cluster.api_client())
    rendered = render_operation(op, {}, config_version="c1", dispatched_at=datetime.now(UTC))
    for manifest in rendered.manifests:
        kube.create_or_adopt(manifest)

    def all_done() -> bool:
        pods = kube.list_labelled("Pod", f"job-name={rendered.name}", namespace)
        return len(pods) == 3 and all(p["status"].get("phase") == "Succeeded" for p in pods)

    wait_until(all_done, timeout=60, what="the 3 replicas to succeed")
    for args in ((), ("--replica", "0"), ("--replica", "2")):
        out = _logs("demo/gang", *args, "--repo", str(tmp_path))
        assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
    missing = _logs("demo/gang", "--replica", "3", "--repo", str(tmp_path))
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        "error: demo/gang: no pod for replica 3 (replicas: 0, 1, 2)"
    ), missing.stderr
