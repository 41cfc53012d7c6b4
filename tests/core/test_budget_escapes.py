"""A run that is still active keeps its whole reservation until it ends, whatever happens
to its file (a generation bump, a rename, a removal): its timeout is the one it was
dispatched with, read from the workload (its activeDeadlineSeconds) or from the status
branch, never from the repo as it is now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from support.builders import NOW, World

from reconciler.core.decision.cycle import (
    ClusterListing,
    Decision,
    Memory,
    decide,
    listing_from_memory,
    memory_from_status,
)
from reconciler.core.decision.render import render_operation
from reconciler.core.observation.observe import WorkloadState, observe_workloads
from reconciler.core.plan import BudgetBlock, PendingReason
from reconciler.core.plan.state import deadline
from reconciler.core.reporting.status import read_status, render_status
from reconciler.core.types import BudgetPeriod, BudgetSpec, Phase

GPU = "nvidia.com/gpu"


def gpu_hours_world(limit: str = "3") -> World:
    return World().queue("q", budget=BudgetSpec(Decimal(limit), BudgetPeriod.DAY, f"{GPU}-hours"))


def running(op: str, generation: int, timeout: int | None, *, ago: int = 30) -> WorkloadState:
    """A run of ``op`` started ``ago`` minutes before NOW, dispatched with ``timeout``."""
    started = (NOW - timedelta(minutes=ago)).isoformat().replace("+00:00", "Z")
    return WorkloadState(
        operation=op,
        generation=generation,
        cluster="local",
        namespace="p",
        name=f"{op.split('/')[1]}-g{generation}",
        uid=f"u-{op}-{generation}",
        phase=Phase.RUNNING,
        queue="q",
        dispatched_at=started,
        started_at=started,
        requests={GPU: Decimal(1)},
        pods=1,
        timeout=timeout,
    )


def budget_of(decision: Decision, op: str) -> BudgetBlock:
    pending = {p.operation: p for p in decision.plan.pending}
    assert op in pending, [d.operation for d in decision.plan.dispatch]
    assert pending[op].reason is PendingReason.BUDGET_EXCEEDED
    block = pending[op].blocked_by
    assert isinstance(block, BudgetBlock)
    return block


def test_a_generation_bump_keeps_the_old_runs_whole_reservation() -> None:
    world = gpu_hours_world("3")
    world.op("p/a", queue="q", gpu=1).timeout(7200)
    world.builders[0]._fields["generation"] = 2
    compiled = world.repo()
    # generation 1 runs since 11:30 with a 2 h timeout: 0.5 spent so far, 1.5 to come
    listing = {"local": ClusterListing((running("p/a", 1, 7200),))}
    decision = decide(compiled, listing, Memory(), NOW)
    assert budget_of(decision, "p/a").committed == 2  # 0.5 + 1.5; 2 more is over 3


def test_repeated_generation_bumps_never_run_past_the_budget() -> None:
    world = gpu_hours_world("5")
    world.op("p/a", queue="q", gpu=1).timeout(7200)
    states: list[WorkloadState] = []
    dispatched = 0
    for generation in range(1, 6):
        world.builders[0]._fields["generation"] = generation
        decision = decide(world.repo(), {"local": ClusterListing(tuple(states))}, Memory(), NOW)
        if decision.plan.dispatch:
            dispatched += 1
            states.append(running("p/a", generation, 7200, ago=0))
    assert dispatched == 2  # 2 + 2 reserved; a third (2 more) would pass 5


def test_a_renamed_running_operation_keeps_its_reservation() -> None:
    world = gpu_hours_world("3")
    world.op("p/b", queue="q", gpu=1).timeout(7200)  # p/a's file, renamed to b.yaml
    decision = decide(
        world.repo(), {"local": ClusterListing((running("p/a", 1, 7200),))}, Memory(), NOW
    )
    assert budget_of(decision, "p/b").committed == 2


def test_a_removed_running_operation_keeps_its_reservation() -> None:
    world = gpu_hours_world("3")
    world.op("p/other", queue="q", gpu=1).timeout(7200)
    decision = decide(
        world.repo(), {"local": ClusterListing((running("p/a", 1, 7200),))}, Memory(), NOW
    )
    assert budget_of(decision, "p/other").committed == 2


def test_the_timeout_is_read_from_the_workload_not_the_repo() -> None:
    world = gpu_hours_world("2.5")
    world.op("p/a", queue="q", gpu=1).timeout(7200)
    op = world.operations()[0]
    rendered = render_operation(op, {}, config_version="c1", dispatched_at=NOW)
    job = dict(rendered.job)
    job["metadata"] = {**job["metadata"], "uid": "u1"}
    job["status"] = {"startTime": (NOW - timedelta(minutes=30)).isoformat()}
    (state,) = observe_workloads("local", [job], [])
    assert state.timeout == 7200
    assert state.to_observed().timeout == 7200
    # the repo now says 10 minutes: the run was dispatched with 2 h, and may run that long
    world.builders[0].timeout(600)
    world.op("p/b", queue="q", gpu=1).timeout(3600)
    decision = decide(world.repo(), {"local": ClusterListing((state,))}, Memory(), NOW)
    assert budget_of(decision, "p/b").committed == 2


def test_the_status_branch_keeps_each_active_runs_timeout() -> None:
    world = gpu_hours_world("4")
    world.op("p/a", queue="q", gpu=1).timeout(7200)
    world.builders[0]._fields["generation"] = 2
    world.op("p/c", queue="q", gpu=1).timeout(3600)
    compiled = world.repo()
    states = (running("p/a", 1, 7200), running("p/a", 2, 7200, ago=0))
    first = decide(compiled, {"local": ClusterListing(states)}, Memory(), NOW)
    files = render_status(
        compiled, first.plan, first.states, superseded=first.superseded, ledger=first.memory.ledger
    )
    memory = memory_from_status(read_status(files))
    assert [s.timeout for s in memory.seen.values()] == [7200]
    assert [s.timeout for s in memory.superseded.values()] == [7200]
    # from the status branch alone (plan without --live), the views say what the cycle does
    # and the file that the runs came from can be gone
    world.remove("p/a")
    compiled = world.repo()
    recorded = decide(compiled, listing_from_memory(compiled, memory), memory, NOW)
    assert budget_of(recorded, "p/c").committed == 4  # 2 + 2: nothing left for 1 more


def test_a_long_timeout_near_the_last_plannable_instant_is_reserved_not_an_overflow() -> None:
    """``plan --now`` goes up to 9998: a reservation's deadline past year 9999 was an
    OverflowError out of ``decide``; it is held to a datetime's last instant."""
    late = datetime(9998, 12, 31, 23, tzinfo=UTC)
    world = gpu_hours_world("10000000")
    world.op("p/a", queue="q", gpu=1).timeout(10**9)
    world.op("p/b", queue="q", gpu=1).timeout(10**9)
    decision = decide(world.repo(), {"local": ClusterListing(())}, Memory(), late)
    assert [d.operation for d in decision.plan.dispatch] == ["p/a", "p/b"]
    assert deadline(late, 10**9) == datetime.max.replace(tzinfo=UTC)
    assert deadline(NOW, 10**9) == NOW + timedelta(seconds=10**9)
