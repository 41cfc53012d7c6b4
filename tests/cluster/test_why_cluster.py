"""``reconciler why`` over the demo's history on the dev cluster: every cycle the demo
recorded on its status branch, replayed from Git alone, equals its record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.cluster import KubeCluster

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.core.reporting.replay import outcome_history, outcome_of
from reconciler.runtime.why import History

pytestmark = pytest.mark.cluster


def test_why_replays_every_cycle_of_the_demo(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    if kube_cluster.dev is None:
        pytest.skip("the demo drives the dev cluster")
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "demo",
            "--workdir",
            str(tmp_path),
            "--state-dir",
            str(kube_cluster.dev.state_dir),
            "--interval",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-3000:]
    repo = str(tmp_path / "config")
    config = ConfigRepo(repo, "main", tmp_path / "cache")
    history = History(config, StatusBranch(config), keep=1000)
    assert len(history.commits) >= 3
    pending: set[str] = set()
    dispatched: set[str] = set()
    for cycle in history.every():
        assert cycle.differences() == [], cycle.commit
        pending |= {p.operation for p in cycle.decision.plan.pending}
        dispatched |= {d.operation for d in cycle.decision.plan.dispatch}
    # the demo's queues made work wait; a wait ends in a dispatch the history shows (the
    # cycle that dispatched may not be a commit's: a later cycle's write superseded it)
    assert pending and dispatched
    waited = sorted(pending & dispatched or pending)[0]
    changes, wrong = outcome_history(waited, history.every())
    assert not wrong
    assert changes[0].outcome.startswith("pending ")
    assert len(changes) >= 2 and not changes[-1].outcome.startswith("pending ")

    # the command: the cycle in which it waited, its reason and the check that decided
    first = next(c for c in history.every() if outcome_of(c.decision, waited).pending is not None)
    why = subprocess.run(
        [sys.executable, "-m", "reconciler", "why", waited, "--at", first.commit, "--repo", repo],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert why.returncode == 0, why.stderr
    out = why.stdout.splitlines()
    assert out[1].startswith("outcome: pending ")
    assert any(line.startswith("decided by: check ") for line in out)
    assert out[-1] == "replay: equals the record"
