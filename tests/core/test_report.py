"""``report(compiled, decision, outcome)``: the one place where the plan and what was
carried out of it meet. Its queue use is the planner's own count of the states it reports:
the fast paths (all carried out, none carried out) equal a recount by the planner, in
plain queues, cohorts, flavors and fleets; a partial outcome is recounted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from support.builders import World
from support.worlds import cohort_world

from reconciler.core.decision.cycle import ClusterListing, Decision, InFlight, Memory, decide
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import QueueSummary
from reconciler.core.reporting.report import Failure, Outcome, encode, recount, report, status_view
from reconciler.core.reporting.status import StatusReason, read_status
from reconciler.core.types import CompiledOperation, CompiledRepo, Phase

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _run_of(op: CompiledOperation, phase: Phase) -> WorkloadState:
    """A run of ``op`` in ``phase``, as the runtime records a create's response."""
    return WorkloadState(
        operation=op.id,
        generation=op.generation,
        cluster=op.cluster,
        namespace=op.namespace,
        name=f"{op.id.replace('/', '-')}-g{op.generation}",
        uid=f"uid-{op.id}",
        phase=phase,
        queue=op.queue,
        requests=dict(op.requests),
        pods=op.replicas,
        flavor=op.flavor.name if op.flavor is not None else None,
    )


def _created(decision: Decision, op_id: str) -> InFlight:
    """The create of ``op_id`` as the runtime records its response."""
    create = next(c for c in decision.actions.creates if c.operation.id == op_id)
    return InFlight(_run_of(create.operation, Phase.DISPATCHED), "1")


def _held(q: QueueSummary) -> tuple[object, ...]:
    """What a queue holds, as every reader shows it."""
    return (
        q.name,
        q.active + q.dispatching,
        dict(q.used_after),
        q.pods_after,
        dict(q.borrowed_after),
        dict(q.lent_after),
        q.budget.committed_after if q.budget is not None else None,
        tuple(
            (f.name, dict(f.used_after), dict(f.borrowed_after), dict(f.lent_after))
            for f in q.flavors
        ),
        q.pending,
        q.head_reason,
    )


def _plain() -> World:
    w = World().queue("q", quota={"nvidia.com/gpu": 4}, concurrency=3)
    for i in range(5):
        w.op(f"p/o{i}", gpu=1)
    return w


def _cohort() -> World:
    """test_flavor_views' cohort of flavored queues, with more to dispatch in each."""
    w = cohort_world()
    w.op("vision/more", queue="team-b", gpu=2)
    w.op("vision/plain2", queue="plain", gpu=1)
    return w


def _fleet() -> World:
    w = World()
    w.fleet("gpu", ("a", "b"), quota={"nvidia.com/gpu": 4})
    for i in range(3):
        w.op(f"p/x{i}", gpu=1)
    return w


WORLDS = {"plain": _plain, "cohort with flavors": _cohort, "fleet": _fleet}


def _decide(world: World) -> tuple[CompiledRepo, Decision]:
    compiled = world.repo()
    listing = {name: ClusterListing() for name in compiled.clusters}
    return compiled, decide(compiled, listing, Memory(), NOW)


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_all_carried_out_is_the_planners_count_of_the_states(name: str) -> None:
    compiled, decision = _decide(WORLDS[name]())
    assert len(decision.plan.dispatch) >= 2
    created = tuple(_created(decision, d.operation) for d in decision.plan.dispatch)
    shown = report(compiled, decision, Outcome(created=created))
    assert shown.carried_out == {d.operation for d in decision.plan.dispatch}
    assert shown.next == {}
    counted = recount(compiled, decision, shown.states, shown.carried_out)
    assert [_held(q) for q in shown.queues] == [_held(q) for q in counted]


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_nothing_carried_out_is_the_planners_count_before_its_plan(name: str) -> None:
    compiled, decision = _decide(WORLDS[name]())
    shown = report(compiled, decision, Outcome.none())
    assert shown.states == decision.states and shown.carried_out == frozenset()
    counted = recount(compiled, decision, shown.states, frozenset())
    assert [_held(q) for q in shown.queues] == [_held(q) for q in counted]
    planned: dict[str, int] = {}
    for d in decision.plan.dispatch:
        planned[d.queue] = planned.get(d.queue, 0) + 1
    assert shown.next == planned
    assert all(q.dispatching == 0 for q in shown.queues)


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_a_failed_create_holds_nothing(name: str) -> None:
    compiled, decision = _decide(WORLDS[name]())
    first, *rest = decision.plan.dispatch
    created = tuple(_created(decision, d.operation) for d in rest)
    failed = {first.operation: Failure(StatusReason.DISPATCH_FAILED, "refused")}
    shown = report(compiled, decision, Outcome(created=created, failed=failed))
    assert first.operation not in shown.states
    # the same as if the plan had never dispatched it: the planner's count of the states
    # with only the others created
    alone = {**decision.states, **{c.state.operation: c.state for c in created}}
    counted = recount(compiled, decision, alone, frozenset(alone) - set(decision.states))
    assert [_held(q) for q in shown.queues] == [_held(q) for q in counted]
    queue = next(q for q in shown.queues if q.name == first.queue)
    before = next(q for q in decision.plan.queues if q.name == first.queue)
    assert queue.active + queue.dispatching == before.active + before.dispatching - 1
    assert shown.next.get(first.queue, 0) == 0


def _template() -> tuple[CompiledRepo, Decision]:
    from support.paths import TEMPLATE

    from reconciler.adapters.repo import snapshot_worktree
    from reconciler.core.compile import compile_repo

    compiled = compile_repo(snapshot_worktree(TEMPLATE))
    listing = {name: ClusterListing() for name in compiled.clusters}
    return compiled, decide(compiled, listing, Memory(), NOW)


def _outcomes(decision: Decision) -> dict[str, Outcome]:
    first, *rest = decision.plan.dispatch
    return {
        "none": Outcome.none(),
        "all": Outcome(
            created=tuple(_created(decision, d.operation) for d in decision.plan.dispatch)
        ),
        "one failed": Outcome(
            created=tuple(_created(decision, d.operation) for d in rest),
            failed={first.operation: Failure(StatusReason.NAMESPACE_FORBIDDEN, "forbidden")},
        ),
    }


@pytest.mark.parametrize("name", [*sorted(WORLDS), "template"])
def test_the_status_view_of_a_report_is_its_files_read_back(name: str) -> None:
    """``status --live`` shows ``status_view(report)``: what ``encode(report)`` writes, as
    ``read_status`` reads it, without the files."""
    compiled, decision = _template() if name == "template" else _decide(WORLDS[name]())
    for outcome in _outcomes(decision).values():
        shown = report(compiled, decision, outcome)
        assert status_view(shown) == read_status(encode(shown))


def test_the_status_view_of_a_report_with_a_ledger_and_a_cluster_down() -> None:
    world = _plain()
    world.fleet("far", ("a", "b"), quota={"nvidia.com/gpu": 2})
    world.op("p/far", queue="far", gpu=1)
    compiled = world.repo()
    [first] = [op for op in compiled.operations if op.id == "p/o0"]
    done = replace(
        _run_of(first, Phase.SUCCEEDED),
        started_at="2025-12-31T22:00:00Z",
        finished_at="2025-12-31T23:00:00Z",
    )
    listing = {
        "local": ClusterListing((done,)),
        "a": ClusterListing.unreachable("dial tcp 10.0.0.1:443: connection refused"),
        "b": ClusterListing(),
    }
    decision = decide(compiled, listing, Memory(), NOW)
    assert len(decision.memory.ledger) == 1
    for outcome in _outcomes(decision).values():
        shown = report(compiled, decision, outcome)
        assert status_view(shown) == read_status(encode(shown))


@pytest.mark.parametrize("name", [*sorted(WORLDS), "template"])
def test_the_expected_report_reads_as_the_plan_rendered_applied(name: str) -> None:
    """``status --live``: the report if every create succeeds is what rendering the plan
    over the decision's states says (every dispatch ``Dispatched``, the plan's counts)."""
    from reconciler.core.reporting.report import expected
    from reconciler.core.reporting.status import render_status

    compiled, decision = _template() if name == "template" else _decide(WORLDS[name]())
    rendered = render_status(
        decision.compiled,  # with the runs its schedules make
        decision.plan,
        decision.states,
        clusters=decision.cluster_records(),
        superseded=decision.superseded,
        gang_timeouts=decision.memory.gang_timeouts,
        ledger=decision.memory.ledger,
    )
    assert status_view(expected(compiled, decision)) == read_status(rendered)
    assert encode(expected(compiled, decision)) == rendered
