"""``reconciler submit --push`` to a Git remote served on 127.0.0.1, then dispatched by
``reconciler run`` reading that remote; ``--watch`` and ``status OP --watch`` follow the
operation to its end and print its log's tail."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.git_daemon import git_daemon
from support.reconciler_env import commit_all, git, make_config_repo

from reconciler.adapters.kube import Kube

pytestmark = pytest.mark.cluster

OP = """\
kind: Operation
name: lr-try
presets: [a100, data]
run:
  container:
    command: [python, train.py]
    args: [--lr, "{{ params.lr }}"]
"""


@pytest.fixture
def served(tmp_path: Path, kube_cluster: KubeCluster) -> Iterator[str]:
    """The example config repo (pointed at the test cluster, its own operations removed)
    in a bare remote served by git daemon; its URL."""
    work = make_config_repo(tmp_path / "config", kube_cluster.kubeconfig)
    for op in work.glob("projects/*/operations/*.yaml"):
        op.unlink()
    commit_all(work, "no operations")
    root = tmp_path / "served"
    root.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(work), str(root / "config.git"))
    with git_daemon(root) as base:
        yield f"{base}/config.git"


def _env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Alice Example\n\temail = alice@example.com\n")
    return {**os.environ, "GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}


def _reconciler(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_submit_push_then_run_dispatches_it(
    served: str, kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    git(tmp_path, "clone", "-q", served, "clone")
    op = tmp_path / "lr-try.yaml"
    op.write_text(OP)
    done = _reconciler(
        "submit", str(op), "--project", "vision", "-P", "lr=0.1", "--push",
        "--repo", str(tmp_path / "clone"), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # team-a gives its quota per flavor: the plan line names the flavor assigned (its
    # preset pins A100)
    assert (
        "plan: vision/lr-try: queue team-a, cluster local, flavor a100: dispatched at the next "
        "cycle"
    ) in done.stdout
    run = _reconciler(
        "run", "--repo", served, "--once", "--cache-dir", str(tmp_path / "run-cache"),
        "--cluster-kubeconfig", f"local={kube_cluster.kubeconfig}", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    jobs = {j["metadata"]["name"]: j for j in kube.list_managed("Job").items}
    assert "vision-lr-try-g1" in jobs
    container = jobs["vision-lr-try-g1"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--lr", "0.1"]


def test_submit_watch_follows_it_to_its_end(
    served: str, kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    with (tmp_path / "run.log").open("w") as log:
        runner = subprocess.Popen(
            [
                sys.executable, "-m", "reconciler", "run", "--repo", served,
                "--interval", "1s", "--cache-dir", str(tmp_path / "rc"),
                "--cluster-kubeconfig", f"local={kube_cluster.kubeconfig}",
            ],
            stdout=subprocess.DEVNULL, stderr=log, text=True, env=env,
        )  # fmt: skip
    try:
        op = tmp_path / "lr-try.yaml"
        op.write_text(OP)
        done = _reconciler(
            "submit", str(op), "--project", "vision", "-P", "lr=0.2", "--push", "--watch",
            "--repo", served, "--cache-dir", str(tmp_path / "cache"), env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert any(
            line.endswith(
                "vision/lr-try: Succeeded, reason Completed "
                "(queue team-a, cluster local, generation 1)"
            )
            for line in lines
        ), done.stdout
        assert "--- last 20 lines of vision/lr-try's log ---" in lines
        assert lines[-1] == "step 3/3: done"

        again = _reconciler(
            "status", "vision/lr-try", "--watch", "--repo", served,
            "--cache-dir", str(tmp_path / "cache2"), env=env, timeout=60,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "vision/lr-try: Succeeded" in again.stdout
        assert again.stdout.splitlines()[-1] == "step 3/3: done"

        rerun = _reconciler(
            "rerun", "vision/lr-try", "--push", "--watch", "--repo", served,
            "--cache-dir", str(tmp_path / "cache"), env=env,
        )  # fmt: skip
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert "generation 2)" in rerun.stdout
        assert rerun.stdout.splitlines()[-1] == "step 3/3: done"
    finally:
        runner.terminate()
        runner.wait(timeout=30)
