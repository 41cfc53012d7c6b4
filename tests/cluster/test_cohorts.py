"""Cohort borrowing on the real control plane (docs/dispatch.md, "Cohorts"): the example's
gpu-pool cohort with team-a (2 GPUs, may borrow 2) and team-b (4 GPUs) given their quota
without flavors (tests/cluster/test_flavors.py and the demo borrow per flavor).

team-a's own 2 GPUs are taken by a long job; a 1 h-timeout team-a job borrows 2 of
team-b's idle GPUs; a later 4-GPU team-b job waits ``WaitingForLentQuota`` with the
borrower's end time (its Job's dispatched-at annotation plus 1 h), then starts in the first
cycle after the borrower finishes (simulated durations: the dev cluster's kwok stages)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support.reconciler_env import (
    GPU,
    commit_all,
    cycles_until_lent_quota_returns,
    gpu_op,
    make_reconciler,
    unflavored_teams,
)

from reconciler.adapters.kube import Kube
from reconciler.core.decision.render import ANNOTATION_DISPATCHED_AT
from reconciler.runtime.cycle import CycleResult

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


def test_team_a_borrows_team_b_idle_gpus_and_gives_them_back(kube: Kube, config_repo: Path) -> None:
    for path in config_repo.glob("projects/*/operations/*.yaml"):
        path.unlink()
    unflavored_teams(config_repo)
    ops = config_repo / "projects" / "vision" / "operations"
    (ops / "long.yaml").write_text(gpu_op("long", "team-a", 2, "600s"))
    (ops / "sweep.yaml").write_text(gpu_op("sweep", "team-a", 2, "20s", timeout="1h"))
    commit_all(config_repo, "team-a: a long job in its own quota, a 1h job that borrows")

    reconciler = make_reconciler(config_repo)
    try:
        first = reconciler.run_once()
        assert first.ok and first.plan is not None, first
        # the own-quota job in step 4, the borrower in step 4b (same commit: path order)
        assert first.dispatched == ("vision/long", "vision/sweep")
        queues = {q.name: q for q in first.plan.queues}
        assert (queues["team-a"].used_after[GPU], queues["team-a"].borrowed_after[GPU]) == (4, 2)
        assert queues["team-b"].lent_after[GPU] == 2
        job = kube.batch.read_namespaced_job("vision-sweep-g1", "team-a")
        dispatched_at = datetime.fromisoformat(
            job.metadata.annotations[ANNOTATION_DISPATCHED_AT].replace("Z", "+00:00")
        )
        assert job.spec.active_deadline_seconds == 3600

        (config_repo / "projects" / "language" / "operations" / "big.yaml").write_text(
            gpu_op("big", "team-b", 4, "5s")
        )
        commit_all(config_repo, "team-b: a job that needs all of its 4 GPUs")

        def each_wait(result: CycleResult, _n: int) -> None:
            assert result.plan is not None
            [big] = [p for p in result.plan.pending if p.operation == "language/big"]
            assert "2 of team-b's quota is lent in cohort gpu-pool" in big.message
            lent = {q.name: q.lent[GPU] for q in result.plan.queues if q.name == "team-b"}
            assert lent == {"team-b": 2}

        result = cycles_until_lent_quota_returns(
            reconciler,
            "language/big",
            "vision/sweep",
            dispatched_at + timedelta(hours=1),
            each_wait=each_wait,
        )
        assert result.plan is not None
        # started in the cycle that saw the borrower finish; team-a's own job still runs
        assert result.states["vision/long"].phase.active
        queues = {q.name: q for q in result.plan.queues}
        assert queues["team-a"].borrowed_after[GPU] == 0
        assert (queues["team-b"].used_after[GPU], queues["team-b"].lent_after[GPU]) == (4, 0)
    finally:
        reconciler.close()
