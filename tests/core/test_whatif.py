"""The what-if state (``core/plan/whatif.py``): the planner's own state, moved by releases and
admissions, always equals the state the planner's steps 1-3 build from what it observes then,
and ``revert`` brings it back exactly."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import NOW, World
from support.strategies import estimate_worlds

from reconciler.core.plan.estimate import RunRecord
from reconciler.core.plan.ledger import LedgerEntry
from reconciler.core.plan.whatif import WhatIf, dispatched
from reconciler.core.types import ObservedOperation, Phase


def _build(world: World, ledger: list[LedgerEntry]) -> WhatIf:
    """The state after the cycle's plan, as the estimate builds it."""
    repo = world.repo()
    plan = world.plan(ledger=ledger)
    ops = {op.id: op for op in repo.operations}
    seen = {
        o.operation: o if o.started_at is not None else replace(o, started_at=NOW)
        for o in world.observed.values()
    }
    for d in plan.dispatch:
        seen[d.operation] = dispatched(d, ops[d.operation], NOW)
    return WhatIf(
        repo,
        seen.values(),
        frozenset(p.operation for p in plan.pending),
        NOW,
        capacity=world.capacity,
        ledger=ledger,
    )


def _counts(w: WhatIf) -> dict[str, Any]:
    """What an admission reads of the state, order-free where the planner's is."""
    queues = {
        name: (q.active, tuple(q.used), q.pods, sorted(q.active_ids), sorted(q.pod_holders.items()))
        for name, q in w.qstate.items()
    }
    cohorts = {
        q.cohort.spec.name: (sorted(q.cohort.sums.items()), sorted(q.cohort.outside.items()))
        for q in w.qstate.values()
        if q.cohort is not None
    }
    return {
        "queues": queues,
        "cohorts": cohorts,
        "clusters": {n: (c.active, sorted(c.ids)) for n, c in w.counters.clusters.items() if c.ids},
        "workflows": {
            n: (c.active, sorted(c.ids)) for n, c in w.counters.workflows.items() if c.ids
        },
        "fleet": (
            sorted(
                (k, used)
                for k, v in w.fleet.used.items()
                if (used := sorted((r, u) for r, u in v.items() if u))
            ),
            sorted((k, v) for k, v in w.fleet.active.items() if v),
        ),
        "runs": sorted(w.runs),
        "candidates": {n: [c[4] for c in cands] for n, cands in w.candidates.items() if cands},
        "buckets": sorted(
            (n, k, [c[4] for c in cands])
            for n, b in w.buckets.items()
            for k, cands in b.items()
            if cands
        ),
        "seen": sorted((oid, str(o.phase)) for oid, o in w.seen.items()),
    }


def _step(w: WhatIf, ends: list[int], minutes: int, ledger: list[LedgerEntry]) -> None:
    """Release the runs picked by ``ends`` (indexes into the active runs), then admit every
    queue with candidates ``minutes`` later."""
    active = sorted(w.runs)
    for k in ends:
        if active:
            w.release(active.pop(k % len(active)))
    at = NOW + timedelta(minutes=minutes)
    per_queue: dict[str, list[LedgerEntry]] = {}
    for e in ledger:
        per_queue.setdefault(e.queue, []).append(e)
    order = w.begin([n for n, c in w.candidates.items() if c], at, per_queue)
    for q in order:
        w.admit(q, w.candidates.get(q.spec.name, []))
    w.borrow(order)


Case = tuple[World, list[RunRecord], list[LedgerEntry]]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    estimate_worlds(),
    st.lists(st.lists(st.integers(0, 20), max_size=3), min_size=1, max_size=4),
)
@pytest.mark.slow
def test_the_kept_state_equals_the_state_built_from_what_is_observed_then(
    case: Case, steps: list[list[int]]
) -> None:
    world, _, ledger = case
    w = _build(world, ledger)
    for n, ends in enumerate(steps, start=1):
        _step(w, ends, 10 * n, ledger)
        simulated = frozenset(c[4] for cands in w.candidates.values() for c in cands)
        fresh = WhatIf(
            w.repo,
            list(w.seen.values()),
            simulated,
            NOW + timedelta(minutes=10 * n),
            capacity=world.capacity,
            ledger=ledger,
        )
        assert _counts(w) == _counts(fresh)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    estimate_worlds(),
    st.lists(st.lists(st.integers(0, 20), max_size=3), min_size=1, max_size=4),
)
@pytest.mark.slow
def test_revert_brings_back_the_state_it_started_from(case: Case, steps: list[list[int]]) -> None:
    world, _, ledger = case
    w = _build(world, ledger)
    before = _counts(w), _borrowed_at(w)
    mark = w.mark()
    for n, ends in enumerate(steps, start=1):
        _step(w, ends, 10 * n, ledger)
    w.revert(mark)
    assert (_counts(w), _borrowed_at(w)) == before


def _borrowed_at(w: WhatIf) -> list[tuple[str, str]]:
    """When each cohort's borrowers were dispatched (step 4b's record)."""
    cohorts = {q.cohort.spec.name: q.cohort for q in w.qstate.values() if q.cohort is not None}
    return sorted(
        (oid, at.isoformat()) for c in cohorts.values() for oid, at in c.dispatched_at.items()
    )


def test_a_released_run_counts_nowhere_and_its_dependents_see_it_succeeded() -> None:
    world = World().cluster("c", concurrency=1).queue("q", cluster="c", quota={"nvidia.com/gpu": 2})
    world.op("p/first", gpu=2)
    world.op("p/then", gpu=2).after("p/first")
    w = _build(world, [])
    q = w.qstate["q"]
    assert (q.active, q.used, w.counters.cluster("c").active) == (1, [2_000_000_000], 1)
    w.release("p/first")
    assert (q.active, q.used, w.counters.cluster("c").active) == (0, [0], 0)
    order = w.begin(["q"], NOW + timedelta(minutes=5), {})
    w.admit(order[0], w.candidates["q"])
    assert [d.operation for d in w.borrow(order)] == ["p/then"]
    assert isinstance(w.seen["p/then"], ObservedOperation)


def test_revert_forgets_when_a_borrower_it_dispatched_borrowed() -> None:
    """A borrower dispatched by a simulated step 4b is timed in its cohort's record; the
    revert leaves none of it (a second simulation would date its end from it)."""
    world = World().cohort("co", "2h")
    for name in ("q0", "q1"):
        world.queue(
            name,
            quota={"nvidia.com/gpu": 2},
            cohort="co",
            borrowing_limit={"nvidia.com/gpu": 2},
        )
    world.op("p/big", queue="q1", gpu=4).timeout(3600)
    world.observe("p/held", Phase.RUNNING, queue="q1", requests={"nvidia.com/gpu": 2})
    w = _build(world, [])
    mark = w.mark()
    w.release("p/held")
    order = w.begin(["q0", "q1"], NOW + timedelta(minutes=10), {})
    for q in order:
        w.admit(q, w.candidates.get(q.spec.name, []))
    assert [d.operation for d in w.borrow(order)] == ["p/big"]
    assert _borrowed_at(w) == [("p/big", (NOW + timedelta(minutes=10)).isoformat())]
    w.revert(mark)
    assert _borrowed_at(w) == []
