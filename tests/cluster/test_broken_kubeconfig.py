"""A second cluster whose kubeconfig is broken, in every way a file can be: only that
cluster is unreachable, with a one-line reason; the real dev cluster's queues dispatch in
the cycle, and every view (``plan --live``, ``queues --live``, ``status --live``,
``serve``, ``logs``) answers without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.helpers import broken_kubeconfigs, wait_until
from support.reconciler_env import commit_all, make_reconciler

from reconciler.adapters.kube import Kube
from reconciler.devcluster.cluster import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def _add_far_cluster(repo: Path, kubeconfig: Path) -> None:
    files = {
        "clusters/far.yaml": f"kind: Cluster\nkubeconfig:\n  path: {kubeconfig}\n",
        "queues/far.yaml": "kind: Queue\ncluster: far\nconcurrency: 1\n",
        "projects/ext/project.yaml": "kind: Project\nnamespace: ext\ndefaults:\n  queue: far\n",
        "projects/ext/operations/hello.yaml": (
            "kind: Operation\nrun:\n  kind: job\n  container: {image: busybox}\n"
        ),
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    commit_all(repo, "a second cluster, far")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_broken_kubeconfig_stops_only_its_cluster(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    far = tmp_path / "far.kubeconfig"
    far.write_text("")
    _add_far_cluster(config_repo, far)
    cases = broken_kubeconfigs(kube_cluster.kubeconfig.read_text())
    reconciler = make_reconciler(config_repo)
    try:
        for case, content in cases.items():
            far.write_bytes(content)
            result = reconciler.run_once()
            assert result.plan is not None, (case, result.sync_error)
            health = {c.name: c for c in result.clusters}
            assert health["local"].reachable, case
            assert not health["far"].reachable, case
            assert health["far"].error and "\n" not in health["far"].error, case
            assert "ext/hello" not in result.dispatched, case
            # the dev cluster's queues dispatched (in the first case) and keep running
            assert kube.list_managed("Job").items, case
    finally:
        reconciler.close()

    # the views, on the file as it is last (each case costs a process per view: two)
    for case in ("truncated", "a-list"):
        far.write_bytes(cases[case])
        repo = ["--repo", str(config_repo), "--cache-dir", str(tmp_path / "cache")]
        for argv in (
            ["queues", "--live", *repo, "-o", "json"],
            ["plan", "--live", "--repo", str(config_repo)],
        ):
            out = _cli(*argv)
            assert out.returncode == 0, (case, argv, out.stderr)
            assert "Traceback" not in out.stderr, (case, argv)
            assert "cluster far cannot be read: cannot load kubeconfig" in out.stderr, (
                case,
                argv,
                out.stderr,
            )
        status = _cli("status", "--live", *repo)
        assert "Traceback" not in status.stderr, status.stderr
        assert status.returncode == 0, status.stderr
        assert "cluster far" in status.stderr, status.stderr
        assert "cannot load kubeconfig" in status.stderr, status.stderr
        logs = _cli("logs", "ext/hello", "--repo", str(config_repo))
        assert logs.returncode == 1, logs
        assert logs.stderr.startswith("error: cannot load kubeconfig"), logs.stderr
        assert len(logs.stderr.strip().splitlines()) == 1, logs.stderr

    # serve: its cycles read the config and answer; only far is unreachable
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "serve",
            "--repo",
            str(config_repo),
            "--cache-dir",
            str(tmp_path / "serve-cache"),
            "--http",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def queues() -> dict | None:  # type: ignore[type-arg]
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/v1/queues", timeout=5
                ) as resp:
                    return json.loads(resp.read()) if resp.status == 200 else None  # type: ignore[no-any-return]
            except OSError:
                return None

        data = wait_until(queues, timeout=120, what="serve to answer /api/v1/queues")
        names = {q["name"] for q in data["queues"]}
        assert {"far", "team-a"} <= names
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
