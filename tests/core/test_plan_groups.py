"""The plan by groups (``core/plan/groups.py``): a cycle replans only the queues whose
inputs changed and keeps the others' part of the last plan; the plan is byte for byte a
full plan's, over random worlds and random changes to them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import NOW
from support.strategies import Case, cases

from reconciler.core.plan import plan_dispatch
from reconciler.core.plan.groups import (
    PlanCache,
    _without,
    couple_operations,
    partition,
    plan_by_groups,
)
from reconciler.core.plan.model import Pending, PendingReason, Plan, QueuePausedBlock
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    ObservedOperation,
    OperationChanges,
    OrgSettings,
    Phase,
    QueueSpec,
    RunKind,
    WorkflowRef,
)
from reconciler.core.views.plan_render import plan_to_json

GPU = "nvidia.com/gpu"
CHANGES = (
    "none",
    "approve",
    "requests",
    "stop",
    "move",
    "add",
    "remove",
    "phase",
    "forget",
    "queue",
    "cluster",
    "unreachable",
    "now",
    "budget",
    "pause",
    "drain",
    "rename",
)


def _op(name: str, queue: QueueSpec, gpus: int) -> CompiledOperation:
    return CompiledOperation(
        project="p",
        name=name,
        path=f"p/operations/{name}.yaml",
        queue=queue.name,
        cluster=queue.cluster,
        namespace="p",
        kind=RunKind.JOB,
        spec={},
        requests={GPU: Decimal(gpus)} if gpus else {},
    )


class World:
    """A case, changed one random step at a time."""

    def __init__(self, case: Case) -> None:
        self.ops = list(case.ops)
        self.queues = dict(case.queues)
        self.clusters = dict(case.clusters)
        self.observed = list(case.observed)
        self.org = case.org
        self.now = NOW
        self.unreachable: frozenset[str] = frozenset()
        self.added = 0
        self.last: tuple[CompiledOperation, ...] | None = None  # the last plan's operations

    def change(self, kind: str, n: int) -> None:
        names = sorted(self.queues)
        queue = self.queues[names[n % len(names)]]
        if kind == "add":
            self.added += 1
            self.ops.append(_op(f"new{self.added}", queue, n % 3))
        elif kind in ("phase", "forget") and self.ops:
            op = self.ops[n % len(self.ops)]
            self.observed = [o for o in self.observed if o.operation != op.id]
            if kind == "phase":
                phase = list(Phase)[n % len(Phase)]
                # as a cycle observes it (its queue on its workload), or an older run's
                where = {"queue": op.queue} if n % 2 else {}
                self.observed.append(ObservedOperation(op.id, phase, **where))
        elif kind == "queue":
            self.queues[queue.name] = replace(
                queue, concurrency=n % 4 or None, paused=n % 5 == 0, priority=n % 3
            )
        elif kind == "pause":  # the queue, or (n even) every queue of its cluster
            for q in list(self.queues.values()):
                if q is queue or (n % 2 == 0 and q.cluster == queue.cluster):
                    self.queues[q.name] = replace(q, paused=not queue.paused)
        elif kind == "drain":  # a preset moves some of a queue's operations elsewhere
            mine = [i for i, op in enumerate(self.ops) if op.queue == queue.name]
            for i in reversed(mine[n % 2 :: 2]):
                del self.ops[i]
        elif kind == "rename":  # its operations name the new one, its runs the old one
            new = f"{queue.name}-r"
            del self.queues[queue.name]
            self.queues[new] = replace(queue, name=new)
            self.ops = [replace(op, queue=new) if op.queue == queue.name else op for op in self.ops]
        elif kind == "budget":  # a budget of GPU hours: its window moves with the clock
            budget = BudgetSpec(Decimal(n % 5), BudgetPeriod.DAY, "nvidia.com/gpu-hours")
            self.queues[queue.name] = replace(queue, budget=budget, default_timeout=3600)
        elif kind == "cluster":
            name = sorted(self.clusters)[n % len(self.clusters)]
            self.clusters[name] = ClusterSpec(name, concurrency=n % 4 if n % 2 else None)
        elif kind == "unreachable":
            self.unreachable = self.unreachable ^ {sorted(self.clusters)[n % len(self.clusters)]}
        elif kind == "now":
            self.now += timedelta(minutes=n)
        elif self.ops and kind != "none":
            i = n % len(self.ops)
            op = self.ops[i]
            if kind == "remove":
                del self.ops[i]
            elif kind == "approve":
                self.ops[i] = replace(op, is_approved=not op.is_approved)
            elif kind == "requests":
                self.ops[i] = replace(op, requests={GPU: Decimal(n % 4)})
            elif kind == "stop":
                self.ops[i] = replace(op, stopped=not op.stopped)
            elif kind == "move":
                self.ops[i] = replace(op, queue=queue.name, cluster=queue.cluster)

    def args(self) -> tuple[object, ...]:
        # in compile order (by project and name); the observations as a cycle makes them:
        # new objects, equal when nothing changed
        ops = tuple(sorted(self.ops, key=lambda op: (op.project, op.name)))
        observed = [replace(o) for o in self.observed]
        return ops, self.queues, self.clusters, observed, self.org, self.now

    def full(self) -> str:
        return plan_to_json(plan_dispatch(*self.args(), unreachable=self.unreachable))  # type: ignore[arg-type]

    def by_groups(self, cache: PlanCache) -> str:
        """The plan by groups, given what changed in the operations since the last one,
        as a compile says it (``CompiledRepo.operation_changes``)."""
        args = self.args()
        ops = cast(tuple[CompiledOperation, ...], args[0])
        changes = None
        if self.last is not None:
            before, now = {id(op) for op in self.last}, {id(op) for op in ops}
            changes = OperationChanges(
                self.last,
                tuple(op for op in self.last if id(op) not in now),
                tuple(op for op in ops if id(op) not in before),
            )
        self.last = ops
        plan = plan_by_groups(cache, *args, unreachable=self.unreachable, changes=changes)  # type: ignore[arg-type]
        assert plan == plan_dispatch(*args, unreachable=self.unreachable)  # type: ignore[arg-type]
        # the couplings kept (patched by what changed) are those of all the operations
        kept = cache._coupled
        by_id = {op.id: op for op in ops}
        fresh = couple_operations(ops, self.queues, self.clusters, by_id)
        if kept is not None and kept.operations is ops and fresh is not None:
            assert kept.by_queue == fresh.by_queue
            assert kept.dependents == fresh.dependents
            observed = cast(list[ObservedOperation], args[3])
            assert partition(kept, observed, by_id) == partition(fresh, observed, by_id)
        return plan_to_json(plan)


changes = st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 40)), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(changes, min_size=1, max_size=6))
@pytest.mark.slow
def test_a_plan_by_groups_is_a_full_plan(case: Case, cycles: list[list[tuple[str, int]]]) -> None:
    """Random worlds (queues with quotas, concurrency, maxPods, StrictFIFO; clusters with
    limits; workflows, dependencies, removed runs) and random changes cycle after cycle:
    the plan by groups equals the full plan, byte for byte."""
    world = World(case)
    cache = PlanCache()
    assert world.by_groups(cache) == world.full()
    for cycle in cycles:
        for kind, n in cycle:
            world.change(kind, n)
        assert world.by_groups(cache) == world.full(), cycle


SHRINKING = ("drain", "remove", "drain", "remove", "add", "move", "phase", "pause", "unreachable")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(st.tuples(st.sampled_from(SHRINKING), st.integers(0, 40)), max_size=8))
@pytest.mark.slow
def test_paused_queues_that_lose_operations_plan_as_a_full_plan(
    case: Case, steps: list[tuple[str, int]]
) -> None:
    """Every queue paused at first, then operations removed (a preset moving some of them
    to another queue), added, moved, observed, queues resumed: the paused groups that only
    lost operations are taken from the last plan, and the plan equals the full plan."""
    world = World(case)
    world.queues = {n: replace(q, paused=True) for n, q in world.queues.items()}
    cache = PlanCache()
    assert world.by_groups(cache) == world.full()
    for kind, n in steps:
        world.change(kind, n)
        assert world.by_groups(cache) == world.full(), kind


def _world(*queues: QueueSpec, clusters: dict[str, ClusterSpec]) -> World:
    ops = tuple(_op(f"{q.name}-{i}", q, 1) for q in queues for i in range(3))
    return World(Case(ops, {q.name: q for q in queues}, clusters, (), OrgSettings()))


def test_only_the_group_whose_inputs_changed_is_planned_again() -> None:
    world = _world(
        QueueSpec("a", "c0", concurrency=1),
        QueueSpec("b", "c0", concurrency=1),
        QueueSpec("c", "c1", concurrency=1),
        clusters={"c0": ClusterSpec("c0"), "c1": ClusterSpec("c1")},
    )
    cache = PlanCache()
    world.by_groups(cache)
    assert (cache.planned, cache.reused) == (3, 0)  # nothing couples them
    world.by_groups(cache)
    assert (cache.planned, cache.reused) == (3, 3)
    world.ops.append(_op("late", world.queues["b"], 0))
    assert world.by_groups(cache) == world.full()
    assert (cache.planned, cache.reused) == (4, 5)  # b alone


def test_a_limited_cluster_couples_its_queues() -> None:
    world = _world(
        QueueSpec("a", "c0"),
        QueueSpec("b", "c0"),
        QueueSpec("c", "c1"),
        clusters={"c0": ClusterSpec("c0", concurrency=2), "c1": ClusterSpec("c1")},
    )
    cache = PlanCache()
    world.by_groups(cache)
    assert cache.planned == 2  # a and b share c0's limit: one group
    world.ops.append(_op("late", world.queues["b"], 0))
    assert world.by_groups(cache) == world.full()
    assert (cache.planned, cache.reused) == (3, 1)


def test_a_budget_or_a_cohort_is_planned_every_cycle() -> None:
    budget = BudgetSpec(Decimal(10), BudgetPeriod.DAY, "nvidia.com/gpu-hours")
    world = _world(
        QueueSpec("a", "c0", budget=budget, default_timeout=3600),
        QueueSpec("b", "c0"),
        clusters={"c0": ClusterSpec("c0")},
    )
    cache = PlanCache()
    world.by_groups(cache)
    world.by_groups(cache)
    assert (cache.planned, cache.reused) == (3, 1)  # a's window moves with the clock
    world.queues["b"] = replace(world.queues["b"], cohort="pool")
    cohorts = {"pool": CohortSpec("pool", 3600, {})}
    plan = plan_by_groups(cache, *world.args(), cohorts=cohorts)  # type: ignore[arg-type]
    assert plan == plan_dispatch(*world.args(), cohorts=cohorts)  # type: ignore[arg-type]
    assert (cache.planned, cache.reused) == (3, 1)  # a cohort: a full plan


def test_a_workflow_couples_the_queues_of_its_children() -> None:
    """Its parallelism is counted across queues: approving the child in ``a`` (planned
    first) leaves none for the child in ``b``, whose own inputs did not change."""
    a, b = QueueSpec("a", "c0"), QueueSpec("b", "c0")
    wf = WorkflowRef("p/wf", "matrix", 0, concurrency=1)
    first = replace(_op("wf-0", a, 0), workflow=wf, is_approved=False)
    second = replace(_op("wf-1", b, 0), workflow=replace(wf, index=1))
    world = World(
        Case((first, second), {"a": a, "b": b}, {"c0": ClusterSpec("c0")}, (), OrgSettings())
    )
    cache = PlanCache()
    world.by_groups(cache)
    assert cache.planned == 1  # one group
    world.ops[0] = replace(first, is_approved=True)
    assert world.by_groups(cache) == world.full()
    assert '"p/wf-0"' in world.full() and cache.planned == 2


def test_an_operation_counted_in_another_queue_couples_them() -> None:
    """A run dispatched in ``a`` whose operation moved to ``b`` counts in ``a``, and keeps
    the operation from being a candidate in ``b``: once it is gone (a change in ``a``'s
    inputs alone), the operation is queued in ``b``."""
    a, b = QueueSpec("a", "c0", concurrency=1), QueueSpec("b", "c0")
    moved, waiting = _op("moved", b, 0), _op("waiting", a, 0)
    running = ObservedOperation("p/moved", Phase.RUNNING, queue="a", cluster="c0")
    world = World(
        Case(
            (moved, waiting), {"a": a, "b": b}, {"c0": ClusterSpec("c0")}, (running,), OrgSettings()
        )
    )
    cache = PlanCache()
    world.by_groups(cache)
    world.observed = []
    assert world.by_groups(cache) == world.full()
    assert '"p/moved"' in world.full()


def test_a_paused_queue_that_loses_operations_is_taken_from_the_last_plan() -> None:
    """Its remaining operations wait ``QueuePaused`` as before, at their new positions."""
    world = _world(
        QueueSpec("a", "c0", paused=True),
        QueueSpec("b", "c1"),
        clusters={"c0": ClusterSpec("c0"), "c1": ClusterSpec("c1")},
    )
    cache = PlanCache()
    world.by_groups(cache)
    world.ops = [op for op in world.ops if op.name != "a-0"]
    assert world.by_groups(cache) == world.full()
    assert (cache.planned, cache.reused) == (2, 2)


def test_a_paused_queue_that_lost_operations_keeps_the_others_entries_as_they_are() -> None:
    """The entries left after some were taken out are the same objects, in order: an entry
    holds no position, so none is built again (the positions come from the order)."""
    block = QueuePausedBlock("a")
    entries = tuple(Pending(f"p/o{i}", "a", PendingReason.QUEUE_PAUSED, block) for i in range(5))
    kept = _without(entries, {"p/o1", "p/o3"})
    assert list(map(id, kept)) == list(map(id, (entries[0], entries[2], entries[4])))
    assert _without(entries, {"p/other"}) is entries
    plan = Plan(dispatch=(), pending=kept, stop=(), queues=())
    assert plan.positions() == {"p/o0": 1, "p/o2": 2, "p/o4": 3}


def test_a_paused_queue_whose_cluster_cannot_be_read_is_planned_again() -> None:
    """Its operations wait ``ClusterUnreachable`` (check 0, before the pause): planned."""
    world = _world(QueueSpec("a", "c0", paused=True), clusters={"c0": ClusterSpec("c0")})
    world.unreachable = frozenset({"c0"})
    cache = PlanCache()
    world.by_groups(cache)
    world.ops = world.ops[1:]
    assert world.by_groups(cache) == world.full()
    assert (cache.planned, cache.reused) == (2, 0)


def test_a_paused_queue_holding_a_run_of_an_operation_removed_is_planned_again() -> None:
    """The run held its operation's requests; without the operation it holds none."""
    world = _world(
        QueueSpec("a", "c0", paused=True, quota={GPU: Decimal(4)}),
        clusters={"c0": ClusterSpec("c0")},
    )
    world.observed = [ObservedOperation("p/a-0", Phase.RUNNING, queue="a")]
    cache = PlanCache()
    world.by_groups(cache)
    world.ops = world.ops[1:]
    assert world.by_groups(cache) == world.full()
    assert (cache.planned, cache.reused) == (2, 0)


def test_a_workflow_child_moved_to_another_queue_couples_it() -> None:
    """What a commit changed is coupled as a full coupling would: a workflow's child moved
    to ``b`` couples ``b`` with ``a``, so approving the child in ``a`` replans ``b``."""
    a, b = QueueSpec("a", "c0"), QueueSpec("b", "c0")
    wf = WorkflowRef("p/wf", "matrix", 0, concurrency=1)
    first = replace(_op("wf-0", a, 0), workflow=wf, is_approved=False)
    second = replace(_op("wf-1", a, 0), workflow=replace(wf, index=1))
    world = World(
        Case((first, second), {"a": a, "b": b}, {"c0": ClusterSpec("c0")}, (), OrgSettings())
    )
    cache = PlanCache()
    world.by_groups(cache)
    world.ops[1] = replace(second, queue="b")
    assert world.by_groups(cache) == world.full()
    world.ops[0] = replace(first, is_approved=True)
    assert world.by_groups(cache) == world.full()


def _recoupled(
    before: tuple[CompiledOperation, ...],
    after: tuple[CompiledOperation, ...],
    queues: dict[str, QueueSpec],
    clusters: dict[str, ClusterSpec],
) -> None:
    """Plan ``before``, then ``after`` given what changed (as a compile gives it): the
    couplings kept are those a full coupling of ``after`` gives, and so is the plan."""
    cache = PlanCache()
    org = OrgSettings()
    plan_by_groups(cache, before, queues, clusters, (), org, NOW)
    changes = OperationChanges(
        before,
        tuple(op for op in before if op not in after),
        tuple(op for op in after if op not in before),
    )
    plan = plan_by_groups(cache, after, queues, clusters, (), org, NOW, changes=changes)
    assert plan == plan_dispatch(after, queues, clusters, (), org, NOW)
    by_id = {op.id: op for op in after}
    kept, fresh = cache._coupled, couple_operations(after, queues, clusters, by_id)
    assert kept is not None and fresh is not None
    assert kept.by_queue == fresh.by_queue and kept.dependents == fresh.dependents
    assert partition(kept, (), by_id) == partition(fresh, (), by_id)


def test_an_operation_added_with_a_dependency_couples_its_queue_with_its_upstream() -> None:
    a, b = QueueSpec("a", "c0"), QueueSpec("b", "c0")
    upstream = _op("up", a, 0)
    down = replace(_op("down", b, 0), dependencies=("p/up",))
    queues, clusters = {"a": a, "b": b}, {"c0": ClusterSpec("c0")}
    _recoupled((upstream,), (down, upstream), queues, clusters)


def test_an_operation_added_that_others_depend_on_couples_their_queues() -> None:
    a, b = QueueSpec("a", "c0"), QueueSpec("b", "c0")
    upstream = _op("up", a, 0)
    down = replace(_op("down", b, 0), dependencies=("p/up",))
    queues, clusters = {"a": a, "b": b}, {"c0": ClusterSpec("c0")}
    _recoupled((down,), (down, upstream), queues, clusters)


def test_an_operation_added_on_a_limited_cluster_not_its_queues_couples_them() -> None:
    a, b = QueueSpec("a", "c0"), QueueSpec("b", "c1")
    clusters = {"c0": ClusterSpec("c0"), "c1": ClusterSpec("c1", concurrency=1)}
    elsewhere = replace(_op("odd", a, 0), cluster="c1")
    _recoupled((_op("b-0", b, 0),), (_op("b-0", b, 0), elsewhere), {"a": a, "b": b}, clusters)


def test_a_workflow_child_added_to_a_queue_without_one_couples_it() -> None:
    a, b = QueueSpec("a", "c0"), QueueSpec("b", "c0")
    wf = WorkflowRef("p/wf", "matrix", 0, concurrency=1)
    first = replace(_op("wf-0", a, 0), workflow=wf)
    second = replace(_op("wf-1", b, 0), workflow=replace(wf, index=1))
    queues, clusters = {"a": a, "b": b}, {"c0": ClusterSpec("c0")}
    _recoupled((first,), (first, second), queues, clusters)


def test_an_operation_added_beside_workflow_children_keeps_the_compile_order() -> None:
    """The children of ``a.yaml`` come before ``a-b.yaml``'s operation in compile order,
    not in name order: the queue's operations are coupled again in full."""
    q = QueueSpec("q", "c0")
    child = replace(_op("a-x", q, 0), workflow=WorkflowRef("p/a", "matrix", 0))
    plain = _op("a-b", q, 0)
    _recoupled((child,), (child, plain), {"q": q}, {"c0": ClusterSpec("c0")})
