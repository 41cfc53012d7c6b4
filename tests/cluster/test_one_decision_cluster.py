"""One decision path on the real control plane (issue 12, items 1 and 2): what ``plan``
and ``plan --live`` say is what the next ``run`` cycle creates."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.reconciler_env import TEMPLATE, client_context, git, make_reconciler

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.kube import Kube
from reconciler.core.plan import numbered
from reconciler.runtime.status import StatusPublisher

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


def _plan_json(repo: Path, *args: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "reconciler", "plan", "--repo", str(repo), "-o", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    data: dict[str, object] = json.loads(out.stdout)
    return data


def _commit(repo: Path, message: str, when: int) -> None:
    stamp = f"{when} +0000"
    env = dict(os.environ, GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
    git(repo, "add", "-A")
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", message],
        cwd=repo,
        env=env,
        check=True,
    )


def _reverse_history_repo(dest: Path, kubeconfig: Path) -> Path:
    """The example, its operation files committed one per commit in reverse path order,
    with runs long enough that nothing finishes during the test."""
    shutil.copytree(TEMPLATE, dest)
    cluster = dest / "clusters" / "local.yaml"
    cluster.write_text(
        cluster.read_text()
        .replace(
            "path: ~/.local/state/reconciler/dev-cluster/admin.kubeconfig", f"path: {kubeconfig}"
        )
        .replace("context: dev", f"context: {client_context(kubeconfig)}")
    )
    for base in dest.glob("projects/*/presets/base.yaml"):
        base.write_text(
            base.read_text().replace("simulated-duration: 20s", "simulated-duration: 600s")
        )
    ops = sorted(dest.glob("projects/*/operations/*.yaml"), reverse=True)
    hidden = {op: op.read_bytes() for op in ops}
    for op in ops:
        op.unlink()
    git(dest, "init", "-q", "-b", "main")
    when = 1_700_000_000
    _commit(dest, "queues, presets, projects", when)
    for op in ops:
        when += 60
        op.write_bytes(hidden[op])
        _commit(dest, f"add {op.name}", when)
    return dest


def test_plan_on_a_checkout_is_what_run_creates(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """Item 1: plan orders a checkout by first-commit time, as run does."""
    repo = _reverse_history_repo(tmp_path / "config", kube_cluster.kubeconfig)
    planned = _plan_json(repo)
    dispatch = [d["operation"] for d in planned["dispatch"]]  # type: ignore[attr-defined,index]
    assert "language/pretrain" in dispatch and "language/distill" not in dispatch

    reconciler = make_reconciler(repo)
    try:
        result = reconciler.run_once()
    finally:
        reconciler.close()
    assert sorted(result.dispatched) == sorted(dispatch)
    created = {
        j["metadata"]["annotations"]["reconciler.dev/operation-id"]
        for j in kube.list_managed("Job").items
    }
    assert created == set(dispatch)

    # A file not committed yet comes after the committed ones, in plan as in the docs.
    extra = repo / "projects" / "language" / "operations" / "aaa-new.yaml"
    extra.write_text(
        (repo / "projects" / "language" / "operations" / "distill.yaml")
        .read_text()
        .replace("name: distill", "name: aaa-new")
    )
    pending = [
        p["operation"]
        for p in _plan_json(repo)["pending"]  # type: ignore[attr-defined]
        if p["queue"] == "team-b"
    ]
    assert pending[-1] == "language/aaa-new", pending


def test_plan_live_after_a_generation_bump_holds_like_the_cycle(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """Item 2: the superseded run still holds its quota in plan --live as in the cycle."""
    repo = _reverse_history_repo(tmp_path / "config", kube_cluster.kubeconfig)
    reconciler = make_reconciler(repo, watch=False)
    try:
        first = reconciler.run_once()
        assert first.compiled is not None
        queues = {o.id: o.queue for o in first.compiled.operations}
        # an op that may not borrow (a timeout above the cohort's 2h): a re-run of one that
        # may (train-vit, 1h) borrows an idle team-b H100 instead of waiting for its old run
        may_borrow = {o.id for o in first.compiled.operations if (o.timeout or 0) <= 7200}
        full = {p.queue for p in first.plan.pending if p.reason.value == "QuotaExceeded"}  # type: ignore[union-attr]
        running = next(op for op in first.dispatched if queues[op] in full and op not in may_borrow)
        project, name = running.split("/")
        path = repo / "projects" / project / "operations" / f"{name}.yaml"
        path.write_text(
            path.read_text().replace("kind: Operation\n", "kind: Operation\ngeneration: 2\n")
        )
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"re-run {running}")
        live = _plan_json(repo, "--live")
        nxt = reconciler.run_once()
        # plan without --live, from the status that cycle wrote, says what the next does
        branch = StatusBranch(ConfigRepo(str(repo), cache_dir=tmp_path / "cache"))
        assert StatusPublisher(branch).publish(nxt) is not None
        recorded = _plan_json(repo)
        after = reconciler.run_once()
    finally:
        reconciler.close()
    assert after.plan is not None
    assert [d["operation"] for d in recorded["dispatch"]] == [  # type: ignore[attr-defined,index]
        d.operation for d in after.plan.dispatch
    ]
    assert [(p["operation"], p["reason"], p["position"]) for p in recorded["pending"]] == [  # type: ignore[attr-defined,index]
        (p.operation, str(p.reason), at) for at, p in numbered(after.plan.pending)
    ]
    assert {p["operation"]: p["reason"] for p in recorded["pending"]}[running] == "QuotaExceeded"  # type: ignore[attr-defined,index]
    assert nxt.plan is not None
    assert [d["operation"] for d in live["dispatch"]] == [  # type: ignore[attr-defined,index]
        d.operation for d in nxt.plan.dispatch
    ]
    assert [(p["operation"], p["reason"], p["position"]) for p in live["pending"]] == [  # type: ignore[attr-defined,index]
        (p.operation, str(p.reason), at) for at, p in numbered(nxt.plan.pending)
    ]
    assert running not in nxt.dispatched  # the old run holds the quota
    assert {p.operation: p.reason.value for p in nxt.plan.pending}[running] == "QuotaExceeded"
    assert nxt.stopped == ()
