"""Hypothesis properties of plan_dispatch over random worlds."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import Case, cases

from reconciler.core.plan import (
    REASON_TRAITS,
    BehindHeadBlock,
    MaxPodsBlock,
    PendingReason,
    QuotaBlock,
)
from reconciler.core.types import (
    CompiledOperation,
    Phase,
    QueueStrategy,
)
from reconciler.core.views.plan_render import plan_to_json

GPU = "nvidia.com/gpu"


def phases(case: Case) -> dict[str, Phase]:
    return {o.operation: o.phase for o in case.observed}


@settings(max_examples=300, deadline=None)
@given(cases())
@pytest.mark.slow
def test_dispatch_never_takes_a_queue_or_cluster_over_its_limits(case: Case) -> None:
    plan = case.plan()
    ops = {op.id: op for op in case.ops}
    seen = phases(case)
    reqs = {op.id: op.requests for op in case.ops}  # every replica's
    pods = {op.id: op.replicas for op in case.ops}
    for o in case.observed:
        if o.requests is not None:
            reqs[o.operation] = o.requests
        pods[o.operation] = o.pods if o.pods is not None else pods.get(o.operation, 1)
    for name, q in case.queues.items():
        active = [
            oid
            for oid, ph in seen.items()
            if ph.active
            and (
                ops[oid].queue
                if oid in ops
                else next(o.queue for o in case.observed if o.operation == oid)
            )
            == name
        ]
        new = [d.operation for d in plan.dispatch if d.queue == name]
        if new and q.concurrency is not None:  # one per operation, whatever its replicas
            assert len(active) + len(new) <= q.concurrency
        if new and q.max_pods is not None:  # every replica of every active operation
            held = sum(pods[oid] for oid in active)
            assert held + sum(ops[oid].replicas for oid in new) <= q.max_pods, name
        for resource, limit in q.quota.items():
            before = sum((reqs[oid].get(resource, Decimal(0)) for oid in active), Decimal(0))
            added = sum((reqs[oid].get(resource, Decimal(0)) for oid in new), Decimal(0))
            if added:
                assert before + added <= limit, (name, resource)
    for name, c in case.clusters.items():
        new = [d for d in plan.dispatch if d.cluster == name]
        if new and c.concurrency is not None:
            active = [
                o
                for o in case.observed
                if o.phase.active
                and (o.cluster or (ops[o.operation].cluster if o.operation in ops else None))
                == name
            ]
            assert len(active) + len(new) <= c.concurrency


@settings(max_examples=300, deadline=None)
@given(cases())
@pytest.mark.slow
def test_every_queued_op_is_either_dispatched_or_pending(case: Case) -> None:
    plan = case.plan()
    seen = phases(case)
    queued = {op.id for op in case.ops if seen.get(op.id, Phase.QUEUED) is Phase.QUEUED}
    dispatched = [d.operation for d in plan.dispatch]
    pending = [p.operation for p in plan.pending]
    assert not set(dispatched) & set(pending)
    assert sorted(dispatched + pending) == sorted(queued)
    at = plan.positions()
    for q in plan.queues:
        positions = [at[p.operation] for p in plan.pending if p.queue == q.name]
        assert positions == list(range(1, len(positions) + 1))
        assert q.pending == len(positions)


@settings(max_examples=200, deadline=None)
@given(cases(), st.lists(st.integers(-5, 5), min_size=4, max_size=4))
def test_changing_priorities_never_produces_a_stop(case: Case, priorities: list[int]) -> None:
    base = case.plan()
    queues = {
        name: replace(q, priority=priorities[i]) for i, (name, q) in enumerate(case.queues.items())
    }
    changed = replace(case, queues=queues).plan()
    assert changed.stop == base.stop
    assert {s.operation for s in changed.stop} <= {
        o.operation for o in case.observed if o.phase.active
    } - {op.id for op in case.ops}


@settings(max_examples=300, deadline=None)
@given(cases(shared_cluster=True))
@pytest.mark.slow
def test_cluster_slots_go_to_higher_priority_queues_first(case: Case) -> None:
    plan = case.plan()
    priority = {name: q.priority for name, q in case.queues.items()}
    blocked = [
        priority[p.queue]
        for p in plan.pending
        if p.reason is PendingReason.CLUSTER_CONCURRENCY_LIMIT
    ]
    if blocked:
        top = max(blocked)
        assert all(priority[d.queue] >= top for d in plan.dispatch)


@settings(max_examples=200, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
@pytest.mark.slow
def test_output_is_deterministic_and_independent_of_input_order(case: Case, rnd) -> None:  # type: ignore[no-untyped-def]
    first = plan_to_json(case.plan())
    assert plan_to_json(case.plan()) == first
    ops, observed = list(case.ops), list(case.observed)
    rnd.shuffle(ops)
    rnd.shuffle(observed)
    queues = dict(reversed(list(case.queues.items())))
    shuffled = Case(tuple(ops), queues, case.clusters, tuple(observed), case.org)
    assert plan_to_json(shuffled.plan()) == first


@settings(max_examples=300, deadline=None)
@given(cases())
@pytest.mark.slow
def test_a_distributed_op_is_all_or_nothing_and_exceeds_quota_exactly_when_it_never_fits(
    case: Case,
) -> None:
    """Dispatched ops fit whole (checked above); a pending one is ExceedsQuota exactly when
    its whole request (every replica) is over a quota, or its replicas over maxPods, and
    every quota or maxPods entry names the whole request."""
    plan = case.plan()
    ops = {op.id: op for op in case.ops}

    def never_fits(op: CompiledOperation) -> bool:
        q = case.queues[op.queue]
        over_quota = any(op.requests.get(r, Decimal(0)) > v for r, v in q.quota.items())
        return over_quota or (q.max_pods is not None and op.replicas > q.max_pods)

    for d in plan.dispatch:
        assert not never_fits(ops[d.operation])
    for p in plan.pending:
        op = ops[p.operation]
        if p.reason is PendingReason.EXCEEDS_QUOTA:
            assert never_fits(op) and p.never_runs
        elif p.reason in (
            PendingReason.QUEUE_CONCURRENCY_LIMIT,
            PendingReason.MAX_PODS_REACHED,
            PendingReason.QUOTA_EXCEEDED,
            PendingReason.WAITING_BEHIND_HEAD,
            PendingReason.WORKFLOW_PARALLELISM,
            PendingReason.CLUSTER_CONCURRENCY_LIMIT,
        ):
            assert not never_fits(op)  # check 4 passed: it can fit some day
        if p.reason is PendingReason.QUOTA_EXCEEDED:
            block = p.blocked_by
            assert isinstance(block, QuotaBlock)
            assert block.request == op.requests[block.resource]  # the whole request
            assert block.replicas == op.replicas
            assert block.used + block.request > block.quota
        if p.reason is PendingReason.MAX_PODS_REACHED:
            block = p.blocked_by
            assert isinstance(block, MaxPodsBlock)
            assert block.request == op.replicas
            assert block.active + block.request > block.limit


@settings(max_examples=200, deadline=None)
@given(cases())
@pytest.mark.slow
def test_best_effort_passes_a_waiting_gang_strict_fifo_never_does(case: Case) -> None:
    """Within a queue, in consideration order: after an op held back by concurrency,
    maxPods, quota or the cluster, a StrictFIFO queue dispatches nothing more; a
    BestEffortFIFO queue may."""
    plan = case.plan()
    holds = {r for r, traits in REASON_TRAITS.items() if traits.holds_head}
    for name, q in case.queues.items():
        if q.strategy is not QueueStrategy.STRICT_FIFO:
            continue
        entries = [p for p in plan.pending if p.queue == name]
        held = [p for p in entries if p.reason in holds]
        if held:
            after = entries[entries.index(held[0]) + 1 :]
            assert all(p.reason is not PendingReason.QUOTA_EXCEEDED for p in after)
            assert all(p.reason not in holds for p in after)
        for p in entries:  # the head a later one waits behind holds it by the table
            if p.reason is PendingReason.WAITING_BEHIND_HEAD:
                assert isinstance(p.blocked_by, BehindHeadBlock)
                assert REASON_TRAITS[p.blocked_by.head_reason].holds_head
