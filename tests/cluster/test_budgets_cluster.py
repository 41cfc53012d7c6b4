"""Budgets on the real control plane (issue 16 §1, docs/budgets.md).

A queue with a daily GPU-hour budget, scaled to minutes: each operation takes 1 GPU with a
3-minute timeout, so it reserves 3 GPU-minutes (0.05 GPU-hours), and the budget is 10.5
GPU-minutes (0.175 GPU-hours) a day. Three operations are dispatched; the fourth waits
``BudgetExceeded`` until the next UTC midnight; when the short run ends (its Job ran a few
seconds) its unused reservation returns at once and the fourth is dispatched, while the two
long runs still hold theirs. The ledger records the short run from its Job's own times.
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from support.cluster import KubeCluster
from support.reconciler_env import commit_all, make_config_repo, make_reconciler

from reconciler.adapters.kube import Kube
from reconciler.core.plan import AdmitWhen, BudgetBlock, PendingReason
from reconciler.core.plan.ledger import parse_moment
from reconciler.core.types import Phase

pytestmark = pytest.mark.cluster

QUEUE = """kind: Queue
cluster: local
priority: 1000
budget:
  limit: 0.175            # 10.5 GPU-minutes a day
  per: day
  resource: nvidia.com/gpu-hours
defaultTimeout: 3m
"""


def operation(name: str, seconds: int) -> str:
    return f"""kind: Operation
queue: metered
run:
  kind: job
  container:
    image: ghcr.io/example/vision:1.4.0
    resources:
      limits: {{nvidia.com/gpu: 1}}
  environment:
    annotations:
      reconciler.dev/simulated-duration: {seconds}s
"""


def budget_repo(tmp_path: Path, kubeconfig: Path) -> Path:
    repo = make_config_repo(tmp_path / "config", kubeconfig)
    shutil.rmtree(repo / "projects")
    project = repo / "projects" / "metering"
    (project / "operations").mkdir(parents=True)
    (project / "project.yaml").write_text("kind: Project\nnamespace: metering\n")
    (repo / "queues" / "metered.yaml").write_text(QUEUE)
    # the first three are committed first (dispatch order is first-commit order)
    for name, seconds in (("a-short", 4), ("b-long", 600), ("c-long", 600)):
        (project / "operations" / f"{name}.yaml").write_text(operation(name, seconds))
    commit_all(repo, "three metered operations")
    time.sleep(1.1)  # a later first-commit time (Git has second precision)
    (project / "operations" / "d-next.yaml").write_text(operation("d-next", 4))
    commit_all(repo, "a fourth")
    return repo


@pytest.mark.timeout(240)
def test_a_gpu_hour_budget_waits_for_the_reset_or_an_early_return(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    repo = budget_repo(tmp_path, kube_cluster.kubeconfig)
    reconciler = make_reconciler(repo)
    try:
        first = reconciler.run_once()
        assert first.ok, first
        assert first.plan is not None
        assert sorted(first.dispatched) == [
            "metering/a-short",
            "metering/b-long",
            "metering/c-long",
        ]
        (waiting,) = first.plan.pending
        assert (waiting.operation, waiting.reason) == (
            "metering/d-next",
            PendingReason.BUDGET_EXCEEDED,
        )
        block = waiting.blocked_by
        assert isinstance(block, BudgetBlock)
        assert (block.limit, block.reservation) == (Decimal("0.175"), Decimal("0.05"))
        assert block.committed == Decimal("0.15")  # three reservations of 3 GPU-minutes
        # the right reset time: the next midnight UTC (a 3-minute run carries nothing past it
        # unless the test runs in the last minutes of the day)
        midnight = datetime.combine(
            first.at.astimezone(UTC).date() + timedelta(days=1), datetime.min.time(), UTC
        )
        admit = waiting.admit
        assert admit.when is AdmitWhen.BUDGET_WINDOW_RESETS
        assert admit.at is not None and admit.at >= midnight
        if first.at < midnight - timedelta(minutes=4):
            assert admit.at == midnight
            assert f"resets at {midnight:%Y-%m-%d} 00:00 UTC" in waiting.message

        # the short run ends within seconds; its reservation returns in the cycle that sees it
        deadline = time.monotonic() + 120
        result = first
        while time.monotonic() < deadline:
            time.sleep(1)
            result = reconciler.run_once()
            assert result.ok, result
            if "metering/d-next" in result.dispatched:
                break
            short = result.states["metering/a-short"]
            assert not short.phase.finished, "a-short ended, yet d-next was not dispatched"
            assert [p.reason for p in result.plan.pending] == [PendingReason.BUDGET_EXCEEDED]
        assert "metering/d-next" in result.dispatched, result.plan
        states = result.states
        assert states["metering/a-short"].phase is Phase.SUCCEEDED
        assert states["metering/b-long"].phase.active and states["metering/c-long"].phase.active
        assert result.decision is not None
        (entry,) = [e for e in result.decision.memory.ledger if e.operation == "metering/a-short"]
        job = kube.batch.read_namespaced_job("metering-a-short-g1", "metering")
        assert entry.start == job.status.start_time.astimezone(UTC).replace(microsecond=0)
        assert entry.end == job.status.completion_time.astimezone(UTC).replace(microsecond=0)
        assert parse_moment(states["metering/a-short"].finished_at) == entry.end
        assert entry.requests == {"nvidia.com/gpu": Decimal(1)}
        budget = next(q.budget for q in result.plan.queues if q.name == "metered")
        assert budget is not None and 0 < budget.spent < Decimal("0.01")  # seconds of 1 GPU
        assert budget.committed_after <= budget.limit - budget.spent
    finally:
        reconciler.close()
