"""R2: ``reconciler run`` through outages. (a) The kube-apiserver of a dedicated dev cluster
stopped mid-run and started again; (b) the Git remote gone for a while. In both the
reconciler keeps running on the last good config, prunes nothing, reports the outage
(status, metrics, readiness) and recovers by itself."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.processes import jobs_per_op as _jobs_per_op
from support.processes import start as _start
from support.reconciler_env import commit_all, git, make_config_repo, make_long_running

from reconciler.adapters.kube import Kube
from reconciler.core.reporting.status import CLUSTERS_FILE, CONFIG_FILE, operation_path
from reconciler.devcluster.cluster import free_port

pytestmark = pytest.mark.cluster


def _metrics(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _get(base: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(base + path, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _status_file(repo: Path, path: str) -> dict[str, object] | None:
    try:
        data = yaml.safe_load(git(repo, "show", f"reconciler/status:{path}"))
    except subprocess.CalledProcessError:
        return None
    return data if isinstance(data, dict) else None


def _uids(kube: Kube) -> dict[str, str]:
    return {
        j["metadata"]["annotations"]["reconciler.dev/operation-id"]: j["metadata"]["uid"]
        for j in kube.list_managed("Job").items
    }


def _add_op(repo: Path, name: str) -> None:
    (repo / "projects" / "vision" / "operations" / f"{name}.yaml").write_text(
        f"kind: Operation\nname: {name}\nqueue: batch\nrun:\n  container: {{image: busybox}}\n"
    )
    batch = repo / "queues" / "batch.yaml"
    batch.write_text(batch.read_text().replace("concurrency: 3", "concurrency: 20"))
    commit_all(repo, f"add {name}")


@pytest.mark.timeout(240)
def test_apiserver_down_and_back_mid_run(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    if kube_cluster.dev is None:
        pytest.skip("stops an API server: needs a dev cluster of its own (the binaries)")
    from reconciler.devcluster.cluster import DevCluster
    from reconciler.devcluster.prerequisites import apply_prerequisites
    from reconciler.devcluster.shape import default_shape

    dev = DevCluster(tmp_path / "dev")  # its own: the session cluster is never disturbed
    dev.up(default_shape(gpu_nodes=2, cpu_nodes=1), progress=lambda _m: None)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = None
    try:
        kube = Kube(KubeCluster(dev.kubeconfig, dev).api_client())
        apply_prerequisites(kube.api)
        repo = make_config_repo(tmp_path / "config", dev.kubeconfig)
        make_long_running(repo, "*")
        proc = _start(repo, dev.kubeconfig, tmp_path, "run", "--http", f"127.0.0.1:{port}")
        wait_until(lambda: len(_jobs_per_op(kube)) >= 10, timeout=90, what="the first wave")
        before = _uids(kube)

        def health() -> list[tuple[object, object]]:
            # each entry also holds what a fleet queue needs (backends served, capacity)
            clusters = (_status_file(repo, CLUSTERS_FILE) or {}).get("clusters") or []
            return [(c.get("name"), c.get("reachable")) for c in clusters]  # type: ignore[union-attr]

        wait_until(
            lambda: health() == [("local", True)], timeout=30, what="cluster health in status"
        )

        dev.stop_component("kube-apiserver")
        _add_op(repo, "during-outage")  # a new commit while the cluster is away

        def reported_down() -> bool:
            clusters = (_status_file(repo, CLUSTERS_FILE) or {}).get("clusters") or [{}]
            return clusters[0].get("reachable") is False  # type: ignore[union-attr]

        wait_until(reported_down, timeout=60, what="the outage in the status branch")
        samples = _metrics(base)
        assert samples[("reconciler_cluster_up", (("cluster", "local"),))] == 0
        assert samples[("reconciler_cluster_errors_total", (("cluster", "local"),))] >= 1
        assert _get(base, "/healthz")[0] == 200  # alive, running on the last good config
        running = _status_file(repo, operation_path("vision/sweep-lr-0")) or {}
        # the last state seen holds, flagged; not Queued, so never dispatched again
        assert running.get("phase") in ("Dispatched", "Running"), running
        assert running.get("reason") == "ClusterUnreachable", running
        head = git(repo, "rev-parse", "HEAD")
        wait_until(  # it kept loading commits
            lambda: (_status_file(repo, CONFIG_FILE) or {}).get("applied") == head,
            timeout=30,
            what="the commit made during the outage in force",
        )
        assert proc.poll() is None

        dev.start_component("kube-apiserver")
        wait_until(
            lambda: _jobs_per_op(kube).get("vision/during-outage") == 1,
            timeout=90,
            what="a create after the API server is back",
        )
        after = _uids(kube)
        assert {op: after.get(op) for op in before} == before  # nothing pruned nor recreated
        assert set(_jobs_per_op(kube).values()) == {1}
        wait_until(
            lambda: _metrics(base)[("reconciler_cluster_up", (("cluster", "local"),))] == 1,
            timeout=30,
            what="reconciler_cluster_up back to 1",
        )
        wait_until(
            lambda: (
                not reported_down()
                and (_status_file(repo, operation_path("vision/sweep-lr-0")) or {}).get("reason")
                != "ClusterUnreachable"
            ),
            timeout=30,
            what="status to show the cluster back",
        )
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
        dev.down(progress=lambda _m: None)


@pytest.mark.timeout(180)
def test_git_remote_gone_and_back(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    make_long_running(config_repo, "*")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(
        config_repo, kube_cluster.kubeconfig, tmp_path, "run", "--http", f"127.0.0.1:{port}"
    )
    away = tmp_path / "remote-away"
    try:
        wait_until(lambda: _get(base, "/readyz")[0] == 200, timeout=90, what="ready")
        wait_until(lambda: len(_jobs_per_op(kube)) >= 10, timeout=60, what="the first wave")
        before = _uids(kube)
        errors0 = _metrics(base).get(("reconciler_git_sync_errors_total", ()), 0)

        shutil.move(config_repo, away)  # the remote is gone: fetches and pushes fail
        wait_until(lambda: _get(base, "/readyz")[0] == 503, timeout=30, what="/readyz to report it")
        _, body = _get(base, "/readyz")
        assert "config sync failing" in body, body
        time.sleep(3)  # a few cycles on the last good config
        assert _metrics(base)[("reconciler_git_sync_errors_total", ())] >= errors0 + 2
        assert _uids(kube) == before  # nothing pruned, nothing new
        assert proc.poll() is None
        _add_op(away, "after-outage")  # committed while the reconciler cannot see it

        shutil.move(away, config_repo)  # back: picked up by itself
        wait_until(
            lambda: _jobs_per_op(kube).get("vision/after-outage") == 1,
            timeout=30,
            what="the commit made during the outage to be dispatched",
        )
        wait_until(lambda: _get(base, "/readyz")[0] == 200, timeout=30, what="ready again")
        after = _uids(kube)
        assert {op: after.get(op) for op in before} == before
        assert set(_jobs_per_op(kube).values()) == {1}
        head = git(config_repo, "rev-parse", "HEAD")
        wait_until(  # the status is written by a thread of its own, at most every interval
            lambda: (_status_file(config_repo, CONFIG_FILE) or {}).get("applied") == head,
            timeout=30,
            what="the status branch to record the commit in force",
        )
    finally:
        if away.exists() and not config_repo.exists():
            shutil.move(away, config_repo)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
