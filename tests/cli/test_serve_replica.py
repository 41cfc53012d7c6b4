"""Issue 12 item 4: a read-only replica (``serve``) whose cluster cannot be read starts from
the status branch, so it never shows work that has finished as using quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.git_commands import git
from support.helpers import http_get, refused_port, served_url, write_kubeconfig
from support.paths import ROOT

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import workload_name
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.status import render_status, status_changes, summarize_cycle
from reconciler.core.types import Phase

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.slow
def test_a_replica_with_its_cluster_down_shows_the_last_recorded_phases(
    template_remote: Path, tmp_path: Path
) -> None:
    remote = template_remote
    # The demo has finished: the leader recorded every operation Succeeded.
    config = ConfigRepo(str(remote), cache_dir=tmp_path / "leader-cache")
    compiled = compile_repo(config.sync())
    done = {
        op.id: WorkloadState(
            op.id,
            op.generation,
            op.cluster,
            op.namespace,
            workload_name(op.project, op.name, op.generation),
            "",
            Phase.SUCCEEDED,
            queue=op.queue,
        )
        for op in compiled.operations
    }
    status = StatusBranch(config)
    before = status.read()
    after = render_status(compiled, plan_repo(compiled, [], NOW), done)
    assert status.write(status_changes(before, after), summarize_cycle(before, after))
    commits = git(remote, "rev-list", "--count", "refs/heads/reconciler/status")

    # The cluster is gone: connections to it are refused.
    with refused_port() as port:
        kubeconfig = write_kubeconfig(tmp_path / "gone.kubeconfig", f"https://127.0.0.1:{port}")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        log = tmp_path / "serve.log"
        args = [sys.executable, "-m", "reconciler", "serve", "--repo", str(remote)]
        args += ["--cache-dir", str(tmp_path / "replica-cache"), "--http", "127.0.0.1:0"]
        args += ["--interval", "1s", "--cluster-kubeconfig", f"local={kubeconfig}"]
        proc = subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        try:
            url = served_url(log)
            view = json.loads(http_get(url + "/api/v1/queues"))
            operation = json.loads(http_get(url + "/api/v1/operations/language/pretrain"))
            page = http_get(url + "/")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    for row in view["queues"]:
        assert row["active"] == 0, row
        assert all(q["used"] == "0" for q in row["quota"]), row
    assert all(q["used"] == "0" for q in view["fleet"]["total"]["quota"])
    assert operation["phase"] == "Succeeded"
    assert "unreachable: local" in page
    # read, never written
    assert git(remote, "rev-list", "--count", "refs/heads/reconciler/status") == commits
