"""Step 6: every pending operation explained, and every queue summarised, against the
final counters (this plan's dispatches count as active: what the next cycle will see).

What must live here: turning the admission loop's pending tuples (see ``state.py``) into
``Pending`` entries and their blocks, the "fewest active operations that release enough"
rule of ``QuotaExceeded``, and ``QueueSummary``. A block that depends only on the queue,
workflow or cluster is built once and shared by the entries it blocks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from reconciler.core.plan.fleet import FleetState
from reconciler.core.plan.model import (
    MAX_LISTED,
    ApprovalBlock,
    BehindHeadBlock,
    BlockedBy,
    ClusterUnreachableBlock,
    ConcurrencyBlock,
    DependenciesBlock,
    ExceedsQuotaBlock,
    FleetBlock,
    Pending,
    PendingReason,
    QueuePausedBlock,
    QueueSummary,
    QuotaBlock,
    Shortfall,
    UpstreamFailedBlock,
)
from reconciler.core.plan.state import Counter, QueueState
from reconciler.core.plan.units import to_decimal


def explain(
    order: Sequence[QueueState], fleet: FleetState | None = None
) -> tuple[list[Pending], list[QueueSummary]]:
    """The pending entries and the summaries of the queues, in consideration order."""
    pending: list[Pending] = []
    summaries: list[QueueSummary] = []
    for q in order:
        pending.extend(explain_queue(q, fleet))
        summaries.append(summarise(q, fleet))
    return pending, summaries


def summarise(q: QueueState, fleet: FleetState | None = None) -> QueueSummary:
    spec = q.spec
    return QueueSummary(
        name=spec.name,
        cluster=spec.cluster,
        priority=spec.priority,
        concurrency=spec.concurrency,
        quota=dict(spec.quota),
        active=q.active0,
        used={r: to_decimal(q.used0[i]) for i, r in enumerate(q.resources)},
        dispatching=q.dispatched,
        pending=len(q.pending),
        strategy=spec.strategy,
        paused=spec.paused,
        head_reason=q.pending[0][2] if q.pending else None,
        used_after={r: to_decimal(q.used[i]) for i, r in enumerate(q.resources)},
        members=fleet.slices(spec) if fleet is not None and spec.fleet else (),
    )


def explain_queue(q: QueueState, fleet: FleetState | None = None) -> list[Pending]:
    """Build the pending entries of one queue. Blockers that depend only on the queue,
    workflow or cluster are shared between entries."""
    spec = q.spec
    name = spec.name
    out: list[Pending] = []
    shared: dict[Any, BlockedBy] = {}
    key: Any
    holders_sorted: dict[int, tuple[list[int], list[str]]] = {}

    def releasers(i: int, need: int) -> tuple[tuple[str, ...], int]:
        """The fewest active ops (largest first) that together release ``need`` of resource i."""
        got = holders_sorted.get(i)
        if got is None:
            ranked = sorted(q.holders[i], key=lambda h: (-h[0], h[1]))
            prefix: list[int] = []
            total = 0
            for amount, _ in ranked:
                total += amount
                prefix.append(total)
            got = holders_sorted[i] = (prefix, [h[1] for h in ranked])
        prefix, ids = got
        k = min(bisect_left(prefix, need) + 1, len(ids))
        return tuple(ids[: min(k, MAX_LISTED)]), k

    append = out.append
    quota_r = PendingReason.QUOTA_EXCEEDED
    conc_r = PendingReason.QUEUE_CONCURRENCY_LIMIT
    behind_r = PendingReason.WAITING_BEHIND_HEAD
    paused_r = PendingReason.QUEUE_PAUSED
    approval_r = PendingReason.AWAITING_APPROVAL
    unreachable_r = PendingReason.CLUSTER_UNREACHABLE
    waiting_r = PendingReason.WAITING_FOR_DEPENDENCIES
    upstream_r = PendingReason.UPSTREAM_FAILED
    exceeds_r = PendingReason.EXCEEDS_QUOTA
    workflow_r = PendingReason.WORKFLOW_PARALLELISM
    fleet_r = (PendingReason.NO_CLUSTER_UNDER_QUOTA, PendingReason.NO_CLUSTER_HAS_CAPACITY)
    for position, (oid, op, reason, detail) in enumerate(q.pending, start=1):
        block: BlockedBy
        if reason is quota_r:
            key = detail
            cached = shared.get(key)
            if cached is None:
                i, amount = detail
                need = q.used[i] + amount - q.quota[i]
                ids, count = releasers(i, need)
                cached = shared[key] = QuotaBlock(
                    name,
                    q.resources[i],
                    to_decimal(amount),
                    to_decimal(q.used[i]),
                    to_decimal(q.quota[i]),
                    to_decimal(need),
                    ids,
                    count,
                )
            block = cached
        elif reason is conc_r:
            cached = shared.get(reason)
            if cached is None:
                limit = spec.concurrency or 0
                cached = shared[reason] = ConcurrencyBlock(
                    "queue",
                    name,
                    q.active,
                    limit,
                    q.active - limit + 1,
                    tuple(q.active_ids[:MAX_LISTED]),
                )
            block = cached
        elif reason is behind_r:
            cached = shared.get(detail)
            if cached is None:
                cached = shared[detail] = BehindHeadBlock(name, detail[0], detail[1])
            block = cached
        elif reason is paused_r:
            cached = shared.get(reason)
            if cached is None:
                cached = shared[reason] = QueuePausedBlock(name)
            block = cached
        elif reason is approval_r:
            block = _APPROVAL
        elif reason is unreachable_r:
            cached = shared.get(reason)
            if cached is None:
                cached = shared[reason] = ClusterUnreachableBlock(", ".join(spec.members))
            block = cached
        elif reason in fleet_r:
            request = {r: a for r, a in sorted(op.requests.items()) if a > 0}
            members = detail if fleet is None else fleet.final_members(spec, op, detail)
            block = FleetBlock(name, reason, request, members)
        elif reason is waiting_r:
            block = DependenciesBlock(detail)
        elif reason is upstream_r:
            block = UpstreamFailedBlock(detail)
        elif reason is exceeds_r:
            req, over = q.request(op.requests), detail
            block = ExceedsQuotaBlock(
                name,
                tuple(
                    Shortfall(q.resources[i], to_decimal(req[i]), to_decimal(q.quota[i]))
                    for i in over
                ),
            )
        else:  # workflow or cluster concurrency: detail is the counter
            counter: Counter = detail
            scope = "workflow" if reason is workflow_r else "cluster"
            if scope == "workflow" and op.workflow is not None:
                scope_name = op.workflow.parent
            else:
                scope_name = op.cluster
            key = (scope, scope_name)
            cached = shared.get(key)
            if cached is None:
                limit = counter.limit or 0
                cached = shared[key] = ConcurrencyBlock(
                    scope,
                    scope_name,
                    counter.active,
                    limit,
                    counter.active - limit + 1,
                    tuple(counter.ids[:MAX_LISTED]),
                )
            block = cached
        append(Pending(oid, name, reason, position, block))
    return out


_APPROVAL = ApprovalBlock()
