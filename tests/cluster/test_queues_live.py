"""``reconciler queues --live`` against the real control plane: compiles, observes and
plans without dispatching anything."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import git, make_long_running, make_reconciler

from reconciler.adapters.kube import Kube
from reconciler.cli.main import cli
from reconciler.devcluster.cluster import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _live(repo: Path, cache: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(
        cli, ["queues", "--live", "--repo", str(repo), "--cache-dir", str(cache), "-o", "json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "live"
    return {q["name"]: q for q in data["queues"]}


def test_live_view_before_and_after_a_cycle(kube: Kube, config_repo: Path, tmp_path: Path) -> None:
    make_long_running(config_repo, "*")
    before = _live(config_repo, tmp_path / "cache")
    assert not kube.list_managed("Job").items  # read-only: nothing was created
    assert (before["team-a"]["active"], before["team-a"]["next"]) == (0, 3)
    assert before["team-a"]["quota"][0]["used"] == "0"

    reconciler = make_reconciler(config_repo)
    try:
        assert reconciler.run_once().ok
    finally:
        reconciler.close()
    after = _live(config_repo, tmp_path / "cache")
    assert (after["team-a"]["active"], after["team-a"]["next"]) == (3, 0)
    assert after["team-a"]["quota"][0] == {  # summed over its flavors
        "resource": "nvidia.com/gpu",
        "used": "3",
        "limit": "2",
        "borrowed": "1",  # train-vit on an H100 of team-b's, whose ops pin A100
        "lent": "0",
    }
    assert after["team-a"]["cohort"] == "gpu-pool"
    assert after["team-b"]["quota"][0]["used"] == "2"
    assert (after["batch"]["active"], after["batch"]["concurrency"]) == (3, 3)
    for name in ("team-a", "team-b", "batch"):
        q = after[name]
        assert q["running"] + q["waiting"] == q["active"]


def _fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_serve_is_read_only_and_blames_real_commits(
    kube: Kube, config_repo: Path, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "serve",
            "--repo",
            str(config_repo),
            "--http",
            f"127.0.0.1:{port}",
            "--interval",
            "1s",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--cluster-kubeconfig",
            f"local={kube_cluster.kubeconfig}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    try:
        wait_until(lambda: _fetch(base + "/api/v1/queues")[0] == 200, timeout=60, what="serve")
        # several cycles pass: still nothing created, the plan only shown
        wait_until(lambda: _fetch(base + "/readyz")[0] == 200, timeout=30, what="/readyz")
        time.sleep(2.5)
        assert not kube.list_managed("Job").items
        queues = {q["name"]: q for q in json.loads(_fetch(base + "/api/v1/queues")[1])["queues"]}
        assert (queues["team-a"]["active"], queues["team-a"]["next"]) == (0, 3)
        status, page = _fetch(base + "/")
        assert status == 200 and "read-only" in page and 'data-queue="team-a"' in page
        head = git(config_repo, "rev-parse", "HEAD")
        detail = json.loads(_fetch(base + "/api/v1/queues/team-a")[1])
        priority = {s["key"]: s for s in detail["settings"]}["priority"]
        assert priority["commit"] == head and priority["summary"] == "initial config"
        assert [p["position"] for p in detail["pendingOperations"]] == [1, 2, 3]
        assert len(detail["nextDispatch"]) == 3  # its H100, its A100, a borrowed H100
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert proc.returncode in (0, -signal.SIGTERM)
