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
from decimal import Decimal
from itertools import islice
from typing import Any

from reconciler.core.plan.cohorts import COHORT_REASONS, amounts
from reconciler.core.plan.fleet import FleetState
from reconciler.core.plan.ledger import hours, next_window
from reconciler.core.plan.model import (
    MAX_LISTED,
    PODS,
    ApprovalBlock,
    BackendUnavailableBlock,
    BehindHeadBlock,
    BlockedBy,
    BudgetBlock,
    BudgetSummary,
    ClusterUnreachableBlock,
    ConcurrencyBlock,
    DependenciesBlock,
    ExceedsQuotaBlock,
    FlavorsQuotaBlock,
    FlavorUsage,
    FleetBlock,
    LedgerBlock,
    MaxPodsBlock,
    NoEligibleFlavorBlock,
    Pending,
    PendingReason,
    QueuePausedBlock,
    QueueSummary,
    QuotaBlock,
    Shortfall,
    UpstreamFailedBlock,
)
from reconciler.core.plan.state import BudgetTrack, Counter, QueueState
from reconciler.core.plan.units import request_units, to_decimal


def _units(requests: Any, resource: str) -> int:
    v = requests.get(resource)
    return 0 if v is None else request_units(v)


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


def _by_resource(q: QueueState, values: Sequence[int] | dict[Any, Decimal]) -> dict[str, Decimal]:
    """Per slot values summed per resource (over a queue's flavors)."""
    out: dict[str, Decimal] = {}
    if isinstance(values, dict):
        for (_, r), v in values.items():
            out[r] = out.get(r, Decimal(0)) + v
        return out
    for i, r in enumerate(q.resources):
        out[r] = out.get(r, Decimal(0)) + to_decimal(values[i])
    return out


def _flavor_usage(
    q: QueueState, amounts_: tuple[dict[Any, Decimal], ...]
) -> tuple[FlavorUsage, ...]:
    out = []
    for span in q.flavors:
        slots = range(span.lo, span.hi)

        def pick(values: dict[Any, Decimal], name: str = span.name) -> dict[str, Decimal]:
            return {r: v for (f, r), v in values.items() if f == name}

        out.append(
            FlavorUsage(
                name=span.name,
                quota={q.resources[i]: to_decimal(q.quota[i]) for i in slots},
                used={q.resources[i]: to_decimal(q.used0[i]) for i in slots},
                used_after={q.resources[i]: to_decimal(q.used[i]) for i in slots},
                borrowed=pick(amounts_[0]),
                lent=pick(amounts_[1]),
                borrowed_after=pick(amounts_[2]),
                lent_after=pick(amounts_[3]),
            )
        )
    return tuple(out)


def summarise(q: QueueState, fleet: FleetState | None = None) -> QueueSummary:
    spec = q.spec
    pools = amounts(q)
    borrowed, lent, borrowed_after, lent_after = (_by_resource(q, a) for a in pools)
    return QueueSummary(
        name=spec.name,
        cluster=spec.cluster,
        priority=spec.priority,
        concurrency=spec.concurrency,
        quota=dict(spec.quota) if not q.flavors else _by_resource(q, q.quota),
        active=q.active0,
        used=_by_resource(q, q.used0),
        dispatching=q.dispatched,
        pending=len(q.pending),
        strategy=spec.strategy,
        paused=spec.paused,
        head_reason=q.pending[0][2] if q.pending else None,
        used_after=_by_resource(q, q.used),
        members=fleet.slices(spec) if fleet is not None and spec.fleet else (),
        max_pods=spec.max_pods,
        pods=q.pods0,
        pods_after=q.pods,
        cohort=spec.cohort,
        borrowed=borrowed,
        lent=lent,
        borrowed_after=borrowed_after,
        lent_after=lent_after,
        budget=_budget_summary(q.budget) if q.budget is not None else None,
        flavors=_flavor_usage(q, pools) if q.flavors else (),
        fair_weight=spec.fair_weight,
    )


def _budget_summary(track: BudgetTrack) -> BudgetSummary:
    w = track.window
    return BudgetSummary(
        unit=w.unit,
        per=str(w.budget.per),
        limit=w.budget.limit,
        spent=w.spent,
        committed=track.committed0,
        committed_after=track.committed,
        window_start=w.window.start,
        window_end=w.window.end,
        timezone=w.timezone,
    )


# How many window resets ahead the planner looks for one that would admit an operation.
MAX_RESETS = 400


def budget_block(track: BudgetTrack, reservation: Decimal) -> BudgetBlock:
    """Why ``reservation`` does not fit ``track``'s window, and the first window reset at
    which the reservations carried past it leave room for it (``holds``: each active run's
    deadline and rate; what a run reserves past a reset counts in the new window)."""
    w = track.window
    budget = w.budget
    admit_at = None
    after_reset = False
    if reservation <= budget.limit:
        window = w.window
        for step in range(MAX_RESETS):
            window = next_window(window, budget.per, w.timezone)
            carried = sum(
                (rate * hours(window.start, deadline) for deadline, rate in track.holds),
                Decimal(0),
            )
            if carried + reservation <= budget.limit:
                admit_at = window.start
                after_reset = step > 0
                break
    return BudgetBlock(
        queue=w.queue,
        unit=w.unit,
        per=str(budget.per),
        limit=budget.limit,
        spent=w.spent,
        committed=track.committed,
        reservation=reservation,
        window_start=w.window.start,
        window_end=w.window.end,
        timezone=w.timezone,
        admit_at=admit_at,
        after_reset=after_reset,
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
            ranked = sorted(q.holders[i].items(), key=lambda h: (-h[1], h[0]))
            prefix: list[int] = []
            total = 0
            for _, amount in ranked:
                total += amount
                prefix.append(total)
            got = holders_sorted[i] = (prefix, [h[0] for h in ranked])
        prefix, ids = got
        k = min(bisect_left(prefix, need) + 1, len(ids))
        return tuple(ids[: min(k, MAX_LISTED)]), k

    pod_ranking: list[tuple[list[int], list[str]]] = []

    def pod_releasers(need: int) -> tuple[tuple[str, ...], int]:
        """The fewest active ops (most pods first) that together release ``need`` pods."""
        if not pod_ranking:
            ranked = sorted(q.pod_holders.items(), key=lambda h: (-h[1], h[0]))
            prefix: list[int] = []
            total = 0
            for _, amount in ranked:
                total += amount
                prefix.append(total)
            pod_ranking.append((prefix, [h[0] for h in ranked]))
        prefix, ids = pod_ranking[0]
        k = min(bisect_left(prefix, need) + 1, len(ids))
        return tuple(ids[: min(k, MAX_LISTED)]), k

    append = out.append
    pods_r = PendingReason.MAX_PODS_REACHED
    quota_r = PendingReason.QUOTA_EXCEEDED
    conc_r = PendingReason.QUEUE_CONCURRENCY_LIMIT
    behind_r = PendingReason.WAITING_BEHIND_HEAD
    paused_r = PendingReason.QUEUE_PAUSED
    approval_r = PendingReason.AWAITING_APPROVAL
    unreachable_r = PendingReason.CLUSTER_UNREACHABLE
    backend_r = PendingReason.BACKEND_UNAVAILABLE
    waiting_r = PendingReason.WAITING_FOR_DEPENDENCIES
    upstream_r = PendingReason.UPSTREAM_FAILED
    exceeds_r = PendingReason.EXCEEDS_QUOTA
    workflow_r = PendingReason.WORKFLOW_PARALLELISM
    fleet_r = (PendingReason.NO_CLUSTER_UNDER_QUOTA, PendingReason.NO_CLUSTER_HAS_CAPACITY)
    budget_r = PendingReason.BUDGET_EXCEEDED
    no_flavor_r = PendingReason.NO_ELIGIBLE_FLAVOR

    def quota_block(detail: tuple[int, int], replicas: int) -> QuotaBlock:
        # shared by the entries short of the same amount, and of as many replicas (the
        # message says how a distributed op's request adds up)
        key = detail if replicas == 1 else (detail, replicas)
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
                replicas,
                q.slot_flavor[i],
            )
        assert isinstance(cached, QuotaBlock)
        return cached

    for oid, op, reason, detail in q.pending:
        block: BlockedBy
        if reason is quota_r:
            if isinstance(detail[0], tuple):  # with flavors: each flavor tried
                key = (detail, op.replicas)
                cached = shared.get(key)
                if cached is None:
                    cached = shared[key] = FlavorsQuotaBlock(
                        name, tuple(quota_block(d, op.replicas) for d in detail)
                    )
                block = cached
            else:
                block = quota_block(detail, op.replicas)
        elif reason is no_flavor_r:
            block = NoEligibleFlavorBlock(name, q.eligible.conflicts(op))
        elif reason in COHORT_REASONS and q.cohort is not None:
            key = (reason, detail, op.replicas)
            cached = shared.get(key)
            if cached is None:
                cached = shared[key] = q.cohort.block(q, reason, detail, op.replicas, quota_block)
            block = cached
        elif reason is pods_r:
            key = (reason, detail)
            cached = shared.get(key)
            if cached is None:
                limit = spec.max_pods or 0
                ids, count = pod_releasers(q.pods + detail - limit)
                cached = shared[key] = MaxPodsBlock(name, detail, q.pods, limit, ids, count)
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
                    tuple(islice(q.active_ids, MAX_LISTED)),
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
            members, assigned = detail
            if fleet is not None:
                members = fleet.final_members(spec, op, members, assigned)
            block = FleetBlock(name, reason, request, members)
        elif reason is backend_r:
            # a fleet queue's: none of its readable clusters serves it
            readable = [m for m in spec.members if fleet is None or m not in fleet.unreachable]
            block = BackendUnavailableBlock(", ".join(readable), detail)
        elif reason is PendingReason.LEDGER_UNREADABLE:
            assert q.budget is not None and q.budget.unreadable is not None
            block = LedgerBlock(name, q.budget.unreadable)
        elif reason is budget_r:
            key = (reason, detail)
            cached = shared.get(key)
            if cached is None:
                assert q.budget is not None
                cached = shared[key] = budget_block(q.budget, detail)
            block = cached
        elif reason is waiting_r:
            block = DependenciesBlock(detail)
        elif reason is upstream_r:
            block = UpstreamFailedBlock(detail)
        elif reason is exceeds_r:
            # shared by the entries over the same limits by the same amounts
            wants = tuple(_units(op.requests, q.resources[i]) if i >= 0 else 0 for i in detail)
            key = (reason, tuple(detail), wants, op.replicas)
            cached = shared.get(key)
            if cached is None:
                cached = shared[key] = ExceedsQuotaBlock(
                    name,
                    tuple(
                        Shortfall(
                            PODS, Decimal(op.replicas), Decimal(spec.max_pods or 0), op.replicas
                        )
                        if i < 0
                        else Shortfall(
                            q.resources[i],
                            to_decimal(want),
                            to_decimal(q.quota[i]),
                            op.replicas,
                            q.slot_flavor[i],
                        )
                        for i, want in zip(detail, wants, strict=True)
                    ),
                )
            block = cached
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
                    tuple(islice(counter.ids, MAX_LISTED)),
                )
            block = cached
        append(Pending(oid, name, reason, block))
    return out


_APPROVAL = ApprovalBlock()
