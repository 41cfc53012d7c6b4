"""Start-time estimates (issue 16 §2): the duration estimator's fallback order and timeout
cap, and the forward simulation with the real planner (order, horizon, determinism,
priorities, concurrency, quota, dependencies, what cannot be dated). A hypothesis property
checks the incremental simulation against a naive one that replans the whole world at
every event."""

from __future__ import annotations

import gc
import heapq
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import NOW, World
from support.strategies import estimate_worlds

import reconciler.core.plan.estimate as estimate_module
import reconciler.core.plan.whatif as whatif_module
from reconciler.core.observation.capacity import NodeCapacity
from reconciler.core.plan import PendingReason, plan_dispatch
from reconciler.core.plan.estimate import (
    Basis,
    DurationModel,
    Estimates,
    EtaState,
    RunRecord,
    duration_text,
    estimate_starts,
    quantile,
)
from reconciler.core.plan.ledger import LedgerEntry, next_window, run_cost, window_at
from reconciler.core.plan.state import QueueState
from reconciler.core.types import BudgetPeriod, BudgetSpec, ObservedOperation, Phase
from reconciler.core.views.plan_render import plan_to_table

MIN = 60.0
HOUR = 3600.0


def _runs(op: str, queue: str, *minutes: float) -> list[RunRecord]:
    return [RunRecord(op, queue, m * MIN) for m in minutes]


def _estimate(
    world: World,
    history: list[RunRecord],
    starts: dict[str, datetime] | None = None,
    horizon: timedelta = timedelta(hours=24),
    *,
    apart: bool = True,
) -> Estimates:
    repo = world.repo()
    return estimate_starts(
        repo,
        world.plan(),
        list(world.observed.values()),
        starts or {},
        history,
        NOW,
        horizon=horizon,
        capacity=world.capacity,
        apart=apart,
    )


def _at(e: Estimates, op: str, which: str = "p50") -> float | str:
    """Minutes from now, or the state when it is not dated."""
    est = e.of(op)
    assert est is not None, op
    eta = est.p50 if which == "p50" else est.p90
    if eta.state is EtaState.AT:  # a likely time (NoLaterThan: returned as its state)
        assert eta.at is not None
        return (eta.at - NOW).total_seconds() / MIN
    return str(eta.state)


# --- durations --------------------------------------------------------------------------


def test_quantile_is_nearest_rank() -> None:
    xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert (quantile(xs, 0.5), quantile(xs, 0.9), quantile(xs, 1.0)) == (5.0, 9.0, 10.0)
    assert quantile([7.0], 0.9) == 7.0


def test_each_workflows_queues_are_those_of_all_its_children() -> None:
    w = World().queue("a").queue("b")
    w.op("p/wf-0", queue="a").child_of("p/wf", 0)
    w.op("p/wf-1", queue="b").child_of("p/wf", 1)
    w.op("p/wf-2", queue="b").child_of("p/wf", 2)
    w.op("p/alone", queue="a").child_of("p/other", 0)
    w.op("p/plain", queue="b")
    repo = w.repo()
    assert repo.workflow_queues == {"p/wf": {"a", "b"}, "p/other": {"a"}}
    assert repo.workflow_queues is repo.workflow_queues  # once per compile


def test_the_fallback_order_is_operation_then_project_and_queue_then_queue() -> None:
    model = DurationModel(
        [
            *_runs("vision/train", "gpu", 10, 20, 30),
            *_runs("vision/eval", "gpu", 100),
            *_runs("nlp/tune", "gpu", 1000),
            *_runs("nlp/tune", "cpu", 5),
        ]
    )
    own = model.duration("vision/train", "gpu", 0.5, None)
    assert (own.seconds, own.basis) == (20 * MIN, Basis.OPERATION)
    sibling = model.duration("vision/new", "gpu", 0.9, None)  # vision's 4 runs in gpu
    assert (sibling.seconds, sibling.basis) == (100 * MIN, Basis.PROJECT_QUEUE)
    stranger = model.duration("audio/x", "gpu", 0.9, None)  # anything in gpu
    assert (stranger.seconds, stranger.basis) == (1000 * MIN, Basis.QUEUE)
    assert model.duration("audio/x", "cpu", 0.5, None).seconds == 5 * MIN
    nothing = model.duration("audio/x", "other", 0.5, 7200)
    assert (nothing.seconds, nothing.basis) == (7200, Basis.TIMEOUT)
    unknown = model.duration("audio/x", "other", 0.5, None)
    assert (unknown.seconds, unknown.basis) == (None, Basis.UNKNOWN)


def test_the_timeout_caps_every_estimate() -> None:
    model = DurationModel(_runs("p/a", "q", 50, 70, 90))
    assert model.duration("p/a", "q", 0.9, 3600).seconds == 3600
    assert model.duration("p/a", "q", 0.5, 3600).seconds == 3600
    assert model.duration("p/a", "q", 0.5, 24 * HOUR).seconds == 70 * MIN


def test_a_running_run_ends_at_the_quantile_of_the_runs_longer_than_it_has_run() -> None:
    model = DurationModel(_runs("p/a", "q", 10, 20, 30, 40))
    assert model.remaining("p/a", "q", 0.5, None, 5 * MIN) == 15 * MIN  # 20 - 5
    assert model.remaining("p/a", "q", 0.5, None, 25 * MIN) == 5 * MIN  # of 30, 40: 30 - 25
    assert model.remaining("p/a", "q", 0.5, None, 45 * MIN) == 0  # overdue: ends at once
    assert model.remaining("p/a", "q", 0.5, 26 * MIN, 25 * MIN) == 1 * MIN  # the timeout
    assert model.remaining("p/x", "r", 0.5, None, 25 * MIN) is None
    assert model.remaining("p/x", "r", 0.5, 60 * MIN, 25 * MIN) == 35 * MIN


def test_duration_text() -> None:
    assert [duration_text(s) for s in (30, 40 * MIN, 80 * MIN, 3 * HOUR, 24 * HOUR)] == [
        "<1 min",
        "40 min",
        "1 h 20 min",
        "3 h",
        "24 h",
    ]


# --- the simulation ---------------------------------------------------------------------


def test_a_queue_drains_in_order_as_runs_end() -> None:
    world = World().queue("q", concurrency=1)
    world.op("p/running")
    for name in ("a", "b", "c"):
        world.op(f"p/{name}")
    world.running("p/running")
    history = _runs("p/running", "q", 10) + [
        r for n in "abc" for r in _runs(f"p/{n}", "q", 30, 30, 60)
    ]
    e = _estimate(world, history, {"p/running": NOW})
    assert [_at(e, f"p/{n}") for n in "abc"] == [10, 40, 70]
    assert [_at(e, f"p/{n}", "p90") for n in "abc"] == [10, 70, 130]
    assert e.text("p/b") == "~40 min (p90 ~1 h 10 min)"


def test_a_running_run_counts_from_its_start() -> None:
    world = World().queue("q", concurrency=1)
    world.op("p/running")
    world.op("p/next")
    world.running("p/running")
    history = _runs("p/running", "q", 60)
    e = _estimate(world, history, {"p/running": NOW - timedelta(minutes=45)})
    assert _at(e, "p/next") == 15


def test_beyond_the_horizon_says_after_it() -> None:
    world = World().queue("q", concurrency=1)
    world.ops("p/op-{}", 4)
    history = [r for i in range(1, 5) for r in _runs(f"p/op-{i}", "q", 10 * 60)]
    e = _estimate(world, history, horizon=timedelta(hours=24))
    assert [_at(e, f"p/op-{i}") for i in (2, 3, 4)] == [600, 1200, "AfterHorizon"]
    assert e.text("p/op-4") == "after 24 h"


def test_the_same_inputs_give_the_same_estimates() -> None:
    world = World().cluster("local", concurrency=3)
    world.queue("a", priority=1, quota={"nvidia.com/gpu": 4}).queue("b", concurrency=2)
    for i in range(30):
        world.op(f"p/o{i}", queue="a" if i % 2 else "b", gpu=1 + i % 3)
    history = [r for i in range(30) for r in _runs(f"p/o{i}", "a", 5 + i, 10 + 2 * i)]
    first = _estimate(world, history)
    assert first == _estimate(world, list(reversed(history)))


def test_pause_is_called_between_the_steps_and_changes_no_estimate() -> None:
    """``pause`` (the worker's wait for the cycle's end) is called before each simulation,
    at each queue dated apart and at each event of the others, and is all it does."""
    world = World().cluster("local", concurrency=3).cluster("free")
    world.queue("a", quota={"nvidia.com/gpu": 4}).queue("b", concurrency=2)
    world.queue("alone", cluster="free", concurrency=1)
    for i in range(12):
        world.op(f"p/o{i}", queue="a" if i % 2 else "b", gpu=1 + i % 3)
        world.op(f"p/x{i}", queue="alone")
    history = [r for i in range(12) for r in _runs(f"p/o{i}", "a", 5 + i, 10 + 2 * i)]
    history += _runs("p/x0", "alone", 30)
    repo, plan, observed = world.repo(), world.plan(), list(world.observed.values())
    calls: list[int] = []
    paused = estimate_starts(repo, plan, observed, {}, history, NOW, pause=lambda: calls.append(1))
    assert paused == _estimate(world, history)
    # 2 per simulation, 1 per queue apart each (``alone``), and the events of the others
    assert len(calls) > 2 * (2 + 1)


def test_an_estimate_leaves_no_reference_cycle_to_the_collector() -> None:
    """The simulations' state (at scale, a copy of the planner's for every operation) is
    freed as the estimate returns: a cycle would keep it for the collector to scan and free
    when the estimate resumes it (``gcpause.paused``)."""
    world = World().cluster("local", concurrency=3)
    world.queue("a", quota={"nvidia.com/gpu": 4}).queue("b", concurrency=2)
    for i in range(20):
        world.op(f"p/o{i}", queue="a" if i % 2 else "b", gpu=1 + i % 3)
    world.op("p/after", queue="b").after("p/o0")
    world.op("p/unknown", queue="b")
    world.running("p/unknown")
    history = [r for i in range(20) for r in _runs(f"p/o{i}", "a", 5 + i, 10 + 2 * i)]
    repo, plan, observed = world.repo(), world.plan(), list(world.observed.values())
    gc.collect()
    gc.disable()
    try:
        estimate_starts(repo, plan, observed, {}, history, NOW)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_the_estimates_are_a_mapping_the_collector_never_scans() -> None:
    """Every pending operation's estimate, in the plan's order, read as a mapping; kept as
    strings and floats (its queue, its dispatch time in each simulation, why no clock
    dates it), so the collector has nothing of them to scan once they are made (100k
    tuples of ``Eta``s cost a scan after each estimate)."""
    world = World().queue("q", concurrency=1)
    world.ops("p/op-{}", 6)
    world.op("p/held", queue="q").unapproved()
    world.op("p/also-held", queue="q").unapproved()
    history = [r for i in range(1, 7) for r in _runs(f"p/op-{i}", "q", 10)]
    e = _estimate(world, history)
    plan = world.plan()
    assert list(e.pending) == [p.operation for p in plan.pending]
    assert len(e.pending) == len(plan.pending) and "p/held" in e.pending
    assert "p/op-1" not in e.pending and e.of("p/op-1") is None  # dispatched now
    got = e.pending["p/op-3"]
    assert (got.operation, got.queue, _at(e, "p/op-3")) == ("p/op-3", "q", 20)
    assert e.pending["p/held"].p50.state is EtaState.BLOCKED
    assert dict(e.pending) == {oid: e.pending[oid] for oid in e.pending}
    # per operation, only strings and floats: no dict keyed by operation is tracked
    ids, found, todo = set(e.pending), [], [e.pending]
    for _ in range(3):  # the mapping, what it keeps, and what that keeps
        todo = [x for obj in todo for x in gc.get_referents(obj) if not isinstance(x, type)]
        found += todo
    keyed = [x for x in found if isinstance(x, dict) and ids & x.keys()]
    assert len(keyed) >= 3  # the queues, the dispatch times, the causes no clock ends
    assert not any(gc.is_tracked(x) for x in keyed)


def test_the_higher_priority_queue_takes_the_freed_cluster_slot() -> None:
    world = World().cluster("local", concurrency=1)
    world.queue("low", priority=0).queue("high", priority=5)
    world.op("p/low-1", queue="low")  # committed first
    world.op("p/high-1", queue="high")
    world.op("p/running", queue="low")
    world.running("p/running")
    history = _runs("p/running", "low", 10) + _runs("p/high-1", "high", 20)
    history += _runs("p/low-1", "low", 20)
    e = _estimate(world, history, {"p/running": NOW})
    assert (_at(e, "p/high-1"), _at(e, "p/low-1")) == (10, 30)


def _admitted_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of candidates each of the simulation's admissions is given, appended as
    it runs."""
    planned: list[int] = []
    admit = whatif_module.admit

    def counting(order: list[QueueState], *args: Any, **kwargs: Any) -> Any:
        planned.append(sum(len(q.candidates) for q in order))
        return admit(order, *args, **kwargs)

    monkeypatch.setattr(whatif_module, "admit", counting)
    return planned


def test_a_queue_waiting_only_for_its_cluster_is_planned_no_further_than_its_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long queue with no limit of its own, held by its cluster's concurrency: once a
    planned candidate finds the cluster full, the rest (all on that cluster) would only
    wait for it too, so a replan plans its head alone (in the events: dated apart, the
    queue's pass stops there too)."""
    world = World().cluster("local", concurrency=1).queue("q")
    world.ops("p/op-{}", 60)
    history = [r for i in range(1, 61) for r in _runs(f"p/op-{i}", "q", 10)]
    planned = _admitted_counts(monkeypatch)
    e = _estimate(world, history, apart=False)
    assert e == _estimate(world, history)
    assert [_at(e, f"p/op-{i}") for i in (2, 3, 60)] == [10, 20, 590]
    assert planned and max(planned) <= estimate_module.PREFIX + 2


@pytest.mark.parametrize("short_of", ["quota", "cluster", "workflow"])
def test_a_pass_admits_no_more_candidates_at_once_than_could_all_be_dispatched(
    monkeypatch: pytest.MonkeyPatch, short_of: str
) -> None:
    """A queue with ten free slots but room for two runs (two GPUs free, two slots of its
    cluster, or a workflow's parallelism of two): each admission is given the two
    candidates that could all be dispatched, not the ten that each could alone (the queue
    simulated with the others: alone, it shares nothing and is dated apart)."""
    world = World().cluster("c", concurrency=2 if short_of == "cluster" else None)
    world.queue(
        "q", cluster="c", concurrency=10, quota={"nvidia.com/gpu": 2 if short_of == "quota" else 99}
    )
    for i in range(1, 61):
        op = world.op(f"p/op-{i}", gpu=1)
        if short_of == "workflow":
            op.child_of("p/wf", i, concurrency=2)
    history = [r for i in range(1, 61) for r in _runs(f"p/op-{i}", "q", 10)]
    planned = _admitted_counts(monkeypatch)
    e = _estimate(world, history, apart=False)
    assert [_at(e, f"p/op-{i}") for i in (3, 4, 5, 60)] == [10, 10, 20, 290]
    assert planned and max(planned) == 2


def test_a_cohort_member_is_planned_no_further_than_what_it_may_still_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``a`` uses its whole quota and ``b`` all of its own: the cohort has nothing idle to
    lend, so none of ``a``'s 60 candidates fits what it may take until one of its runs
    ends, then one does: each admission of ``a`` is its first few candidates, never the
    rest (``CohortState.room``)."""
    world = World().cohort("co", "2h")
    world.queue(
        "a", quota={"nvidia.com/gpu": 2}, cohort="co", borrowing_limit={"nvidia.com/gpu": 2}
    )
    world.queue("b", quota={"nvidia.com/gpu": 2}, cohort="co")
    for i in range(1, 61):
        world.op(f"p/a-{i}", queue="a", gpu=1).timeout(3600)
    for name in ("p/a-run-1", "p/a-run-2"):
        world.op(name, queue="a", gpu=1)
        world.running(name)
    for name in ("p/b-run-1", "p/b-run-2"):
        world.op(name, queue="b", gpu=1)
        world.running(name)
    history = [r for i in range(1, 61) for r in _runs(f"p/a-{i}", "a", 10)]
    history += _runs("p/a-run-1", "a", 10) + _runs("p/a-run-2", "a", 15)
    history += _runs("p/b-run-1", "b", 48 * 60) + _runs("p/b-run-2", "b", 48 * 60)
    planned = _admitted_counts(monkeypatch)
    e = _estimate(world, history, {oid: NOW for oid in world.observed})
    assert [_at(e, f"p/a-{i}") for i in (1, 2, 3, 60)] == [10, 15, 20, 305]
    assert planned and max(planned) <= estimate_module.PREFIX


def test_a_fleet_queue_takes_a_slot_of_whichever_of_its_clusters_frees_first() -> None:
    world = World().cluster("c0", concurrency=1).cluster("c1", concurrency=1)
    world.fleet("f", ("c0", "c1"))
    for name in ("on-c0", "on-c1", "first", "second"):
        world.op(f"p/{name}", queue="f")
    world.observe("p/on-c0", Phase.RUNNING, queue="f", cluster="c0")
    world.observe("p/on-c1", Phase.RUNNING, queue="f", cluster="c1")
    history = _runs("p/on-c0", "f", 30) + _runs("p/on-c1", "f", 10)
    history += _runs("p/first", "f", 60) + _runs("p/second", "f", 60)
    plan = world.plan()
    assert {p.reason for p in plan.pending} == {PendingReason.NO_CLUSTER_UNDER_QUOTA}
    e = _estimate(world, history, {"p/on-c0": NOW, "p/on-c1": NOW})
    # c1 frees at 10 (first goes there), c0 at 30 (second goes there)
    assert (_at(e, "p/first"), _at(e, "p/second")) == (10, 30)


def test_a_fleet_queue_waiting_for_free_capacity_is_not_dated() -> None:
    world = World().fleet("f", ("c0", "c1"), require_capacity=True)
    for c in ("c0", "c1"):
        world.nodes(c, NodeCapacity(f"{c}-n", allocatable={"nvidia.com/gpu": Decimal(1)}))
    world.op("p/big", queue="f", gpu=2)
    e = _estimate(world, _runs("p/big", "f", 10))
    est = e.of("p/big")
    assert est is not None and _at(e, "p/big") == "Blocked"
    assert est.why.startswith("NoClusterHasCapacity: ")


def test_quota_admits_what_fits_as_it_is_released() -> None:
    world = World().queue("q", quota={"nvidia.com/gpu": 2})
    world.op("p/big", gpu=2)
    world.op("p/one", gpu=1)
    world.op("p/two", gpu=1)
    world.observe("p/held", Phase.RUNNING, queue="q", requests={"nvidia.com/gpu": 2})
    history = _runs("p/held", "q", 30) + _runs("p/big", "q", 60) + _runs("p/one", "q", 5)
    history += _runs("p/two", "q", 5)
    e = _estimate(world, history, {"p/held": NOW})
    assert (_at(e, "p/big"), _at(e, "p/one"), _at(e, "p/two")) == (30, 90, 90)


def test_an_op_that_requests_none_of_a_resource_fits_a_queue_over_its_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs hold more than the queue's quota (it was lowered under them): a later
    candidate that requests no GPU still fits check 8, so a pass that stops at a short head
    must not take the queue for full. (Its cluster is full until the first run ends.)"""
    monkeypatch.setattr(estimate_module, "PREFIX", 1)
    world = World().cluster("c", concurrency=3).queue("q", cluster="c", quota={"nvidia.com/gpu": 2})
    for name in ("p/g1", "p/g2", "p/g3"):
        world.op(name, gpu=1)
    world.op("p/cpu")
    for name in ("p/held-a", "p/held-b", "p/held-c"):
        world.observe(name, Phase.RUNNING, queue="q", cluster="c", requests={"nvidia.com/gpu": 2})
    history = _runs("p/held-a", "q", 30) + _runs("p/held-b", "q", 60)
    history += _runs("p/held-c", "q", 90) + _runs("p/cpu", "q", 5)
    history += [r for g in ("p/g1", "p/g2", "p/g3") for r in _runs(g, "q", 500)]
    e = _estimate(world, history, {oid: NOW for oid in ("p/held-a", "p/held-b", "p/held-c")})
    assert _at(e, "p/cpu") == 30


def test_a_dependency_is_dispatched_and_finishes_before_its_dependent() -> None:
    world = World().queue("q")
    world.op("p/prep")
    world.op("p/train").after("p/prep")
    world.op("p/eval").after("p/train")
    history = _runs("p/prep", "q", 15) + _runs("p/train", "q", 45) + _runs("p/eval", "q", 5)
    e = _estimate(world, history)
    assert (_at(e, "p/train"), _at(e, "p/eval")) == (15, 60)


def test_no_history_takes_the_timeout_else_unknown() -> None:
    world = World().queue("q", concurrency=1).queue("r", concurrency=1)
    world.op("p/bounded", queue="q").timeout("2h")
    world.op("p/after-bounded", queue="q")
    world.op("p/unbounded", queue="r")
    world.op("p/after-unbounded", queue="r")
    e = _estimate(world, [])
    # dated by a timeout alone: the latest it can start, not a likely time (docs/estimates.md)
    bounded = e.of("p/after-bounded")
    assert bounded is not None and bounded.p50.state is EtaState.NO_LATER_THAN
    assert bounded.p50.at == NOW + timedelta(hours=2)
    assert e.text("p/after-bounded") == "no later than 2 h"
    assert e.json_of("p/after-bounded")["p50"]["state"] == "NoLaterThan"  # type: ignore[index]
    assert _at(e, "p/after-unbounded") == "Unknown"
    est = e.of("p/after-unbounded")
    assert est is not None and "p/unbounded" in est.why
    assert e.text("p/after-unbounded") == "unknown"


def test_what_waits_for_a_person_is_not_estimated() -> None:
    world = World().queue("q").queue("stopped", paused=True)
    world.op("p/unapproved").unapproved()
    world.op("p/paused", queue="stopped")
    world.op("p/orphan").after("p/missing")
    e = _estimate(world, [])
    for op in ("p/unapproved", "p/paused", "p/orphan"):
        est = e.of(op)
        assert est is not None and est.p50.state is est.p90.state is EtaState.BLOCKED, op
    assert "AwaitingApproval" in (e.of("p/unapproved") or _never()).why
    assert "p/missing is not in the repo" in (e.of("p/orphan") or _never()).why
    assert e.text("p/paused") == "not estimated"


def _never() -> Any:
    raise AssertionError("no estimate")


def test_strict_fifo_holds_the_queue_behind_its_head() -> None:
    world = World().queue("q", quota={"nvidia.com/gpu": 2}, strict=True)
    world.op("p/big", gpu=2)
    world.op("p/small", gpu=1)
    world.observe("p/held", Phase.RUNNING, queue="q", requests={"nvidia.com/gpu": 1})
    history = _runs("p/held", "q", 20) + _runs("p/big", "q", 30) + _runs("p/small", "q", 1)
    e = _estimate(world, history, {"p/held": NOW})
    assert (_at(e, "p/big"), _at(e, "p/small")) == (20, 50)


# --- the incremental simulation equals replanning the whole world --------------------------


def _naive(
    world: World, history: list[RunRecord], q: float, ledger: list[LedgerEntry]
) -> dict[str, datetime]:
    """Replan every operation at every event (a run's end, a budget window's reset), with
    the ledger of what every budgeted run that ended spent: the slow reference."""
    model = DurationModel(history)
    repo = world.repo()
    ops = {op.id: op for op in repo.operations}
    observed = {
        oid: o if o.started_at is not None else replace(o, started_at=NOW)
        for oid, o in world.observed.items()
    }
    spent = list(ledger)
    heap: list[tuple[datetime, str]] = []
    end_of_horizon = NOW + timedelta(hours=24)
    resets: set[datetime] = set()
    for spec in repo.queues.values():
        if spec.budget is not None:
            w = window_at(NOW, spec.budget.per, repo.org.timezone)
            while w.end <= end_of_horizon:
                resets.add(w.end)
                w = next_window(w, spec.budget.per, repo.org.timezone)

    def timeout(oid: str) -> float | None:
        t = ops[oid].timeout
        return None if t is None else float(t)

    def start(oid: str, t: datetime) -> None:
        d = model.duration(oid, ops[oid].queue, q, timeout(oid)).seconds
        assert d is not None
        heapq.heappush(heap, (t + timedelta(seconds=d), oid))

    for oid, o in observed.items():
        if o.phase.active:
            left = model.remaining(oid, o.queue or ops[oid].queue, q, timeout(oid), 0.0)
            assert left is not None
            heapq.heappush(heap, (NOW + timedelta(seconds=left), oid))
    out: dict[str, datetime] = {}
    t = NOW
    first = True
    while True:
        if not first:
            nxt = [r for r in resets if r > t]
            if heap:
                nxt.append(heap[0][0])
            if not nxt:
                break
            t = min(nxt)
            if t > end_of_horizon:
                break
            while heap and heap[0][0] == t:
                _, oid = heapq.heappop(heap)
                o = observed[oid]
                op = ops[oid]
                if repo.queues[op.queue].budget is not None:
                    requests = dict(op.requests)
                    assert o.started_at is not None
                    cost = run_cost(requests, repo.org.prices, o.started_at, t)
                    spent.append(
                        LedgerEntry(
                            operation=oid,
                            generation=1,
                            workload=f"w-{t.isoformat()}",
                            queue=op.queue,
                            cluster=o.cluster or op.cluster,
                            phase="Succeeded",
                            requests=requests,
                            start=o.started_at,
                            end=t,
                            cost=cost,
                        )
                    )
                observed[oid] = ObservedOperation(oid, Phase.SUCCEEDED)
        plan = plan_dispatch(
            repo.operations,
            repo.queues,
            repo.clusters,
            list(observed.values()),
            repo.org,
            t,
            capacity=world.capacity,
            cohorts=repo.cohorts,
            ledger=spent,
        )
        for d in plan.dispatch:
            if not first:
                out[d.operation] = t
            observed[d.operation] = ObservedOperation(
                d.operation,
                Phase.DISPATCHED,
                queue=d.queue,
                cluster=d.cluster,  # a fleet queue's: the one check 10 chose
                dispatched_at=t,
                started_at=t,
            )
            start(d.operation, t)
        first = False
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(estimate_worlds())
@pytest.mark.slow
def test_the_incremental_simulation_equals_replanning_everything(
    case: tuple[World, list[RunRecord], list[LedgerEntry]],
) -> None:
    world, history, ledger = case
    starts = {oid: NOW for oid in world.observed}
    repo = world.repo()
    plan = world.plan(ledger=ledger)
    observed = [
        o if o.started_at is not None else replace(o, started_at=NOW)
        for o in world.observed.values()
    ]
    e = estimate_starts(
        repo, plan, observed, starts, history, NOW, ledger=ledger, capacity=world.capacity
    )
    for which, q in (("p50", 0.5), ("p90", 0.9)):
        expected = _naive(world, history, q, ledger)
        got = {}
        for oid, est in e.pending.items():
            eta = est.p50 if which == "p50" else est.p90
            if eta.state is EtaState.AT and eta.at is not None:
                got[oid] = eta.at
        if which == "p50":
            assert got == expected
        else:  # the p90 is the p90 simulation's, or the p50 when that is later
            for oid, at in got.items():
                p50 = e.pending[oid].p50.at
                assert at == max(expected[oid], p50 or expected[oid])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(estimate_worlds(apart=True), st.booleans())
@pytest.mark.slow
def test_the_queues_dated_apart_get_what_the_whole_simulation_gives(
    case: tuple[World, list[RunRecord], list[LedgerEntry]], long: bool
) -> None:
    """Every estimate (p50, p90, state and why) with the queues that share nothing dated
    apart equals the one with every queue in the simulation's events; with a run beyond
    the horizon too (else most worlds end with nothing left to end, where what is left
    waiting may need the whole simulation)."""
    world, history, ledger = case
    if long:
        world = _beyond_the_horizon(world, history)
    starts = {oid: NOW for oid in world.observed}
    repo = world.repo()
    plan = world.plan(ledger=ledger)
    observed = list(world.observed.values())
    got, whole = (
        estimate_starts(
            repo,
            plan,
            observed,
            starts,
            history,
            NOW,
            ledger=ledger,
            capacity=world.capacity,
            apart=apart,
        )
        for apart in (True, False)
    )
    assert got == whole


def _sharing(shared: str) -> tuple[World, list[RunRecord], dict[str, float | str]]:
    """Two queues that look as if they shared nothing, but for ``shared``; and when each
    of their operations is dispatched (minutes), as the whole simulation says."""
    world = World().cluster("c").cluster("other", concurrency=1)
    world.queue("low", cluster="c", concurrency=1).queue("high", cluster="c", priority=1)
    world.op("p/held", queue="low")
    world.op("p/low", queue="low")
    world.op("p/high", queue="high")
    expected: dict[str, float | str]
    if shared == "dependency":  # p/high waits for a run of the other queue
        world.builders[-1].after("p/held")
        world.queue("high", cluster="c", priority=1, concurrency=1)
        world.op("p/first", queue="high")
        world.running("p/first")
        expected = {"p/low": 10, "p/high": 10}
    elif shared == "workflow":  # one at a time across both queues
        world.builders[0].child_of("p/wf", 0, concurrency=1)
        world.builders[-1].child_of("p/wf", 1, concurrency=1)
        expected = {"p/low": 10, "p/high": 10}
    else:  # p/held runs on a cluster whose one slot p/high's queue waits for
        world.queue("high", cluster="other", priority=1)
        world.op("p/first", queue="high")
        expected = {"p/low": 10, "p/high": 10, "p/first": 20}
    world.observe("p/held", Phase.RUNNING, cluster="other" if shared == "run's cluster" else None)
    history = [r for oid in ("p/held", "p/low", "p/high", "p/first") for r in _runs(oid, "q", 10)]
    return _beyond_the_horizon(world, history), history, expected


def _beyond_the_horizon(world: World, history: list[RunRecord]) -> World:
    """``world`` with a run that ends after the horizon, in a queue of its own: the
    simulation is never left with nothing to end (the whole state is never needed to say
    why what is left waits, which would simulate every queue again)."""
    world.queue("long", cluster="elsewhere").op("p/long", queue="long")
    world.running("p/long")
    history += _runs("p/long", "long", 48 * 60)
    return world


@pytest.mark.parametrize("shared", ["dependency", "workflow", "run's cluster"])
def test_a_queue_that_shares_a_limit_or_an_operation_is_not_dated_apart(
    monkeypatch: pytest.MonkeyPatch, shared: str
) -> None:
    world, history, expected = _sharing(shared)
    planned = _admitted_counts(monkeypatch)
    e = _estimate(world, history, {"p/held": NOW})
    assert {oid: _at(e, oid) for oid in expected} == expected
    assert planned  # the simulation's events admitted them
    assert e == _estimate(world, history, {"p/held": NOW}, apart=False)


def _one_cluster(spoiled: bool = False) -> tuple[World, list[RunRecord]]:
    """Three queues of cluster ``c`` whose two slots they fill, and a run of a paused
    queue on it; with ``spoiled``, an operation of ``low`` depends on one of ``mid``."""
    world = World().cluster("c", concurrency=2)
    world.queue("high", cluster="c", priority=2, strict=True)
    world.queue("mid", cluster="c", priority=1).queue("low", cluster="c")
    world.queue("stopped", cluster="c", paused=True)
    world.op("p/s", queue="stopped")
    world.op("p/l0", queue="low")
    world.op("p/h1", queue="high")
    world.op("p/h2", queue="high")
    world.op("p/m1", queue="mid")
    low = world.op("p/l1", queue="low")
    if spoiled:
        low.after("p/m1")
    world.running("p/s").running("p/l0")
    history = _runs("p/s", "q", 10) + _runs("p/l0", "q", 30) + _runs("p/m1", "q", 10)
    history += _runs("p/h1", "q", 20) + _runs("p/h2", "q", 20) + _runs("p/l1", "q", 10)
    return _beyond_the_horizon(world, history), history


def test_the_queues_that_share_only_a_cluster_they_fill_are_dated_apart_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """They share its slots and nothing else: dated apart together, none of them admitted
    by the simulation's events. Each freed slot goes to the first in the planner's order
    with a candidate for it: the paused queue's run frees one at 10 (``high`` takes it),
    two free at 30 (``high``, then ``mid``), ``mid``'s at 40 (``low``)."""
    world, history = _one_cluster()
    starts = {"p/s": NOW, "p/l0": NOW}
    planned = _admitted_counts(monkeypatch)
    e = _estimate(world, history, starts)
    assert not planned
    got = {oid: _at(e, oid) for oid in ("p/h1", "p/h2", "p/m1", "p/l1")}
    assert got == {"p/h1": 10, "p/h2": 30, "p/m1": 30, "p/l1": 40}
    assert e == _estimate(world, history, starts, apart=False)


def test_the_queues_of_a_cluster_are_dated_with_the_others_when_one_of_them_is_not_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``low`` waits for an operation of ``mid``: neither is apart, so no queue of their
    cluster is (the others' slots depend on them)."""
    world, history = _one_cluster(spoiled=True)
    starts = {"p/s": NOW, "p/l0": NOW}
    planned = _admitted_counts(monkeypatch)
    e = _estimate(world, history, starts)
    assert planned
    assert e == _estimate(world, history, starts, apart=False)


def test_a_candidate_that_exceeds_its_queue_once_its_dependency_ends_never_holds_it() -> None:
    """Check 3 comes before check 4: ``p/big`` waits for ``p/first`` now, then alone
    exceeds its StrictFIFO queue's ``maxPods`` (check 4, which holds no head): ``p/small``
    goes when ``p/first`` ends, dated apart as in the whole simulation."""
    world = World().queue("q", strict=True, max_pods=1)
    world.op("p/first", queue="q")
    world.op("p/big", queue="q").after("p/first").requests(gpu=1).replicas(2)
    world.op("p/small", queue="q").after("p/first")
    world.running("p/first")
    history = _runs("p/first", "q", 10) + _runs("p/small", "q", 10)
    world = _beyond_the_horizon(world, history)
    e = _estimate(world, history, {"p/first": NOW})
    assert _at(e, "p/small") == 10
    assert e == _estimate(world, history, {"p/first": NOW}, apart=False)


def test_a_queue_a_workflow_left_stale_is_planned_again_at_an_event_of_a_queue_apart() -> None:
    """At 1, ``b``'s StrictFIFO head ``p/b-wf`` is held by its budget (check 11) before
    ``c``, later in the order, dispatches the other child of its workflow: ``b`` is stale,
    planned again at the next event of any queue, where its head waits at 9 and no longer
    holds ``p/b-late``. That next event is ``d``'s run ending at 2, a queue dated apart:
    its events' times are the whole simulation's too."""
    world = World().cluster("c0").cluster("c2", concurrency=1)
    world.queue("a", cluster="c2", priority=1)
    gpu_hour = BudgetSpec(Decimal(1), BudgetPeriod.DAY, "nvidia.com/gpu-hours")
    world.queue("b", cluster="c0", strict=True, budget=gpu_hour)
    world.queue("c", cluster="c2").queue("d", cluster="c0", concurrency=1)
    world.op("p/a", queue="a")
    world.op("p/b-wf", queue="b", gpu=2).child_of("p/wf", 0, concurrency=1).timeout(3600)
    world.op("p/b-late", queue="b").after("p/a").timeout(3600)
    world.op("p/c-wf", queue="c").child_of("p/wf", 1, concurrency=1)
    world.op("p/d0", queue="d")
    world.op("p/d1", queue="d")
    world.running("p/a", "p/d0")
    history = _runs("p/a", "a", 1) + _runs("p/c-wf", "c", 10) + _runs("p/b-late", "b", 1)
    history += _runs("p/d0", "d", 2) + _runs("p/d1", "d", 2) + _runs("p/b-wf", "b", 1)
    starts = {"p/a": NOW, "p/d0": NOW}
    e = _estimate(world, history, starts, apart=False)
    assert _at(e, "p/b-late") == 2
    assert e == _estimate(world, history, starts)


def test_a_freed_slot_is_not_counted_as_taken_by_a_queue_whose_own_state_moved() -> None:
    """At 5, ``p/w1`` ends: a slot of ``c`` frees, and ``q`` (waiting for it with ``p/z``)
    is planned again; but ``p/x``, held at 9 by ``p/w1``, now passes it and is held at 8
    by ``p/y``'s quota: ``q``'s StrictFIFO head, which takes no slot. Replanning
    everything gives the slot to ``qa``'s ``p/a1`` then: the queue whose own state moved
    does not count as taking a slot, and the next waiter is planned too."""
    world = World().cluster("c", concurrency=3)
    world.queue("q", cluster="c", strict=True, quota={"nvidia.com/gpu": 2}).queue("qa", cluster="c")
    world.op("p/w1", queue="q").child_of("p/wf", 0, concurrency=1)
    world.op("p/x", queue="q", gpu=2).child_of("p/wf", 1, concurrency=1)
    world.op("p/y", queue="q", gpu=2)
    world.op("p/z", queue="q")
    world.op("p/a0", queue="qa")
    world.op("p/a1", queue="qa")
    world.running("p/w1", "p/a0")
    history = _runs("p/w1", "q", 5) + _runs("p/x", "q", 10) + _runs("p/y", "q", 30)
    history += _runs("p/z", "q", 10) + _runs("p/a0", "qa", 60) + _runs("p/a1", "qa", 10)
    starts = {"p/w1": NOW, "p/a0": NOW}
    e = _estimate(world, history, starts, apart=False)
    assert {oid: _at(e, oid) for oid in ("p/x", "p/z", "p/a1")} == {
        "p/x": 30,
        "p/z": 30,
        "p/a1": 5,
    }
    assert e == _estimate(world, history, starts)
    expected = _naive(world, history, 0.5, [])
    assert {oid: (at - NOW).total_seconds() / MIN for oid, at in expected.items()} == {
        "p/x": 30,
        "p/z": 30,
        "p/a1": 5,
    }


def test_a_freed_slot_is_not_counted_as_taken_by_a_queue_whose_pass_went_on_elsewhere() -> None:
    """``qa``'s ``p/a1`` waits for ``c``'s slot; after it, the cycle's pass dispatched
    ``p/a2`` (same workflow, one at a time) to ``x``. When ``p/idle`` frees the slot at 1,
    ``p/a1`` waits for its workflow, and replanning everything gives the slot to ``p/b``:
    a BestEffortFIFO queue with candidates for two clusters does not count as taking it."""
    world = World().cluster("c", concurrency=1).cluster("x")
    world.queue("qa", cluster="c", priority=1).queue("qb", cluster="c").queue("idle", cluster="c")
    world.op("p/a1", queue="qa").child_of("p/wf", 0, concurrency=1)
    a2 = world.op("p/a2", queue="qa").child_of("p/wf", 1, concurrency=1)
    a2._fields["cluster"] = "x"
    world.op("p/b", queue="qb")
    world.op("p/idle", queue="idle")
    world.running("p/idle")
    history = _runs("p/idle", "idle", 1) + _runs("p/a1", "qa", 10) + _runs("p/a2", "qa", 5)
    history += _runs("p/b", "qb", 10)
    assert [d.operation for d in world.plan().dispatch] == ["p/a2"]
    starts = {"p/idle": NOW}
    e = _estimate(world, history, starts, apart=False)
    assert {oid: _at(e, oid) for oid in ("p/a1", "p/b")} == {"p/a1": 11, "p/b": 1}
    assert e == _estimate(world, history, starts)
    expected = _naive(world, history, 0.5, [])
    assert {oid: (at - NOW).total_seconds() / MIN for oid, at in expected.items()} == {
        "p/a1": 11,
        "p/b": 1,
    }


def test_what_a_queue_apart_leaves_waiting_is_explained_by_the_whole_state() -> None:
    """Nothing is left to end, and a queue that shares nothing still has candidates (two
    that wait for each other): why they wait is what the planner says on the whole state
    then, as the whole simulation gives it."""
    world = World().queue("q")
    world.op("p/a", queue="q").after("p/b")
    world.op("p/b", queue="q").after("p/a")
    world.op("p/c", queue="q")
    world.op("p/held", queue="q")
    world.running("p/held")
    history = _runs("p/held", "q", 10) + _runs("p/c", "q", 10)
    e = _estimate(world, history, {"p/held": NOW})
    a = e.of("p/a")
    assert a is not None and a.p50.state is EtaState.BLOCKED
    assert a.why == "WaitingForDependencies: nothing it waits for is estimated to end"
    assert e == _estimate(world, history, {"p/held": NOW}, apart=False)


def test_a_p90_simulation_refused_alone_is_simulated_again_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The p50 simulation dates the queue apart, the p90 is refused: at p90 the slot of
    ``c`` goes to a run with no history, nothing is left to end, and the queue ``alone``
    still has a candidate (one it can never dispatch, which alone is no reason to refuse
    at p50, where a long run still ends past the horizon). The p90 is simulated again with
    every queue, from where it started: what it dates is the whole simulation's."""
    world = World().cluster("c", concurrency=1).cluster("free").cluster("e")
    world.queue("uq", cluster="c", priority=2).queue("kq", cluster="c", priority=1)
    world.queue("dq", cluster="e").queue("alone", cluster="free", max_pods=1)
    world.op("d/dep", queue="dq")
    world.op("s/holder", queue="kq")
    world.op("k/long", queue="kq")
    world.op("u/unknown", queue="uq").after("d/dep")
    world.op("n/first", queue="alone")
    world.op("n/never", queue="alone").after("n/first").requests(gpu=1).replicas(2)
    world.op("n/ok", queue="alone").after("n/first")
    world.running("d/dep", "s/holder", "n/first")
    history = [
        *_runs("d/dep", "dq", 10),
        *_runs("s/holder", "kq", 5, 20),
        *_runs("k/long", "kq", 48 * 60),
        *_runs("n/ok", "alone", 5),
        *_runs("n/first", "alone", 10),
    ]
    starts = {"d/dep": NOW, "s/holder": NOW, "n/first": NOW}
    refused: list[tuple[float, bool, bool]] = []
    run_events = estimate_module._Sim.run_events

    def spy(sim: Any) -> None:
        run_events(sim)
        refused.append((sim.q, bool(sim.apart), sim.refused))

    monkeypatch.setattr(estimate_module._Sim, "run_events", spy)
    e = _estimate(world, history, starts)
    assert refused[:3] == [(0.5, True, False), (0.9, True, True), (0.9, False, False)]
    never = e.pending["n/never"]
    assert (never.p50.state, never.p90.state) == (EtaState.AFTER_HORIZON, EtaState.BLOCKED)
    assert never.why == "ExceedsQuota: nothing it waits for is estimated to end"
    assert (_at(e, "n/ok"), _at(e, "k/long")) == (10, 5)
    assert e.pending["k/long"].p90.state is EtaState.UNKNOWN
    assert e == _estimate(world, history, starts, apart=False)


def test_a_strict_fifo_head_planned_before_its_workflow_took_a_slot_is_replanned() -> None:
    """The fleet queue ``qf`` (StrictFIFO, first in the planner's order) holds at check 10
    behind ``p/wf``'s child; in the same replan ``q0`` dispatches another child of ``p/wf``.
    At the next event (``p/up`` ends in another queue) a cycle would see that child: the
    head waits at check 9 then, which does not hold the queue, and ``p/small`` goes."""
    world = World().cluster("c0").cluster("c1").queue("q0", cluster="c0").queue("q1")
    world.fleet(
        "qf",
        ("c0", "c1"),
        cluster_quota={"c0": {"nvidia.com/gpu": 1}, "c1": {"nvidia.com/gpu": 2}},
        priority=1,
        strict=True,
    )
    world.op("p/first", queue="q0", gpu=2).child_of("p/wf", 0, concurrency=1)
    world.op("p/up", queue="q1", gpu=2).after("p/first")
    world.op("p/big", queue="qf", gpu=2)
    world.op("p/second", queue="q0", gpu=2).child_of("p/wf", 1, concurrency=1)
    world.op("p/child", queue="qf", gpu=2).child_of("p/wf", 2, concurrency=1)
    world.op("p/small", queue="qf")
    minutes = {"p/first": 1, "p/up": 1, "p/big": 3, "p/second": 2, "p/child": 1, "p/small": 1}
    history = [r for oid, m in minutes.items() for r in _runs(oid, "q", m)]
    e = _estimate(world, history)
    assert [_at(e, oid) for oid in ("p/second", "p/up", "p/small", "p/child")] == [1, 1, 2, 3]


# --- the worked example of docs/estimates.md --------------------------------------------


@pytest.mark.slow
def test_short_heads_grown_until_each_queue_is_full_give_the_same_estimates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a first head of one candidate, almost every replan plans some queue further
    (its head grown, the others' kept): still the same as replanning everything."""
    monkeypatch.setattr(estimate_module, "PREFIX", 1)
    test_the_incremental_simulation_equals_replanning_everything()


def test_the_worked_example_in_the_docs_is_what_the_code_says() -> None:
    world = World().queue("team-b", concurrency=1)
    world.op("team-b/finetune", queue="team-b")
    world.op("team-b/pretrain", queue="team-b").timeout("2h")
    world.op("team-b/eval", queue="team-b")
    world.op("team-b/sweep", queue="team-b").unapproved()
    world.observe("team-b/finetune", Phase.RUNNING, queue="team-b")
    history = _runs("team-b/finetune", "team-b", 50, 55, 60, 70, 90)
    history += _runs("team-b/eval", "team-b", 8, 10, 12)
    started = {"team-b/finetune": NOW - timedelta(minutes=20)}
    e = _estimate(world, history, started)
    table = plan_to_table(world.plan(), e)
    rows = table.split("\n\n")[1].splitlines()
    docs = (Path(__file__).resolve().parents[2] / "docs" / "estimates.md").read_text()
    example = docs.split("```\nPOS", 1)[1].split("```", 1)[0]
    assert rows == ("POS" + example).strip("\n").splitlines()
    assert (_at(e, "team-b/pretrain"), _at(e, "team-b/pretrain", "p90")) == (40, 70)
    assert (_at(e, "team-b/eval"), _at(e, "team-b/eval", "p90")) == (90, 160)


def test_the_simulation_assigns_flavors_as_the_planner_does() -> None:
    # team-a: 1 h100 then 1 a100. The h100 run ends in 10 min, the a100 run in 40 min:
    # p/a100-only, first in line, may not use the h100 freed at 10: p/next takes it, and
    # p/a100-only waits for the a100 run (40)
    world = World().queue("team-a").flavored("team-a", ("h100", {"gpu": 1}), ("a100", {"gpu": 1}))
    world.op("p/h", queue="team-a", gpu=1)
    world.op("p/a", queue="team-a", gpu=1)
    world.op("p/a100-only", queue="team-a", gpu=1).environment(
        nodeSelector={"nvidia.com/gpu.product": "a100"}
    )
    world.op("p/next", queue="team-a", gpu=1)  # after p/a100-only, yet first to start
    world.observe("p/h", Phase.RUNNING, flavor="h100")
    world.observe("p/a", Phase.RUNNING, flavor="a100")
    history = (
        _runs("p/h", "team-a", 10)
        + _runs("p/a", "team-a", 40)
        + _runs("p/next", "team-a", 60)
        + _runs("p/a100-only", "team-a", 60)
    )
    e = _estimate(world, history, {"p/h": NOW, "p/a": NOW})
    assert _at(e, "p/next") == 10
    assert _at(e, "p/a100-only") == 40


def test_a_wait_on_a_running_op_with_no_history_reads_no_later_than() -> None:
    world = World().queue("q", concurrency=1)
    world.op("p/running", queue="q").timeout("2h")
    world.op("p/next", queue="q")
    world.observe("p/running", Phase.RUNNING, started_at=NOW - timedelta(minutes=30))
    e = _estimate(world, [], starts={"p/running": NOW - timedelta(minutes=30)})
    est = e.of("p/next")
    assert est is not None and est.p50.state is EtaState.NO_LATER_THAN
    assert e.text("p/next") == "no later than 1 h 30 min"
    # with history, the same wait is a likely time
    e = _estimate(
        world, _runs("p/running", "q", 40), starts={"p/running": NOW - timedelta(minutes=30)}
    )
    assert _at(e, "p/next") == 10


def test_a_running_op_whose_file_is_gone_ends_by_its_own_timeout() -> None:
    world = World().queue("q", concurrency=1)
    world.op("p/next", queue="q")
    observed = ObservedOperation(
        "p/gone",
        Phase.RUNNING,
        queue="q",
        cluster="local",
        timeout=7200,
        dispatched_at=NOW - timedelta(minutes=30),
        started_at=NOW - timedelta(minutes=30),
    )
    world.observed["p/gone"] = observed
    e = _estimate(world, [], starts={"p/gone": NOW - timedelta(minutes=30)})
    assert e.text("p/next") == "no later than 1 h 30 min"  # before: unknown


def test_a_queue_dated_apart_lists_its_operations_in_the_planners_order() -> None:
    """A queue apart takes its operations from the plan's pending ones, not from the
    what-if state's sorted candidates: they must come in the same order."""
    world = World().queue("q", concurrency=1)
    world.op("p/running")
    world.running("p/running")
    for k, (name, priority, minutes) in enumerate(
        [("a", 0, 5), ("b", 5, 1), ("c", 2, 9), ("d", 5, None), ("e", 0, 3)]
    ):
        op = world.op(f"p/{name}").priority(priority)
        op.submitted(None if minutes is None else NOW - timedelta(minutes=minutes + k))
    repo, plan = world.repo(), world.plan()
    prep = estimate_module._Prepared(
        repo,
        plan,
        list(world.observed.values()),
        NOW,
        frozenset(),
        {},
        {},
        (),
        DurationModel(),
        timedelta(minutes=1),
    )
    assert [g.members[0].name for g in prep.apart] == ["q"]
    listed = [c[0] for c in prep.apart[0].members[0].candidates]
    prep.index(apart=True)
    assert listed == [c[4] for c in prep.whatif.candidates["q"]]
    assert listed[:2] == ["p/b", "p/d"]  # the highest priority first, then committed first
