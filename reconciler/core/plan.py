"""The dispatch planner: apply queue controls to the compiled operations.

Pure, in the style of Nomad's ``Compute()``: it takes the compiled config, the observed phase
of each operation and the clock, and returns a :class:`Plan` (what to dispatch now, what waits
and why, what to stop). It does no I/O; the runtime executes the plan. The numbered steps and
checks match ``docs/dispatch.md``.

Quantities are compared as exact integers in nano-units (Kubernetes' finest precision):
requests round up and quotas round down, so rounding can never over-admit.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import lru_cache
from typing import Any

from reconciler.core.quantity import format_quantity
from reconciler.core.types import (
    ClusterSpec,
    CompiledOperation,
    CompiledRepo,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueSpec,
    QueueStrategy,
)

# How many operation names a blocker lists before it says "and N more".
MAX_LISTED = 10


class PendingReason(enum.StrEnum):
    """Why a queued operation is not dispatched this cycle: the first failing check."""

    QUEUE_PAUSED = "QueuePaused"  # 1
    AWAITING_APPROVAL = "AwaitingApproval"  # 2
    WAITING_FOR_DEPENDENCIES = "WaitingForDependencies"  # 3
    UPSTREAM_FAILED = "UpstreamFailed"  # 3, never runs
    EXCEEDS_QUOTA = "ExceedsQuota"  # 4, never admitted under this config
    WAITING_BEHIND_HEAD = "WaitingBehindHead"  # 5
    QUEUE_CONCURRENCY_LIMIT = "QueueConcurrencyLimit"  # 6
    QUOTA_EXCEEDED = "QuotaExceeded"  # 7
    WORKFLOW_PARALLELISM = "WorkflowParallelism"  # 8
    CLUSTER_CONCURRENCY_LIMIT = "ClusterConcurrencyLimit"  # 9

    @property
    def never_runs(self) -> bool:
        return self in (PendingReason.UPSTREAM_FAILED, PendingReason.EXCEEDS_QUOTA)


class StopReason(enum.StrEnum):
    REMOVED_FROM_REPO = "RemovedFromRepo"


class PlanInputError(ValueError):
    """The inputs contradict each other (e.g. an operation names a queue that does not exist).
    The compiler rules these out; the planner refuses rather than guessing."""


# --- quantities as exact integers -------------------------------------------------------

_NANO = Decimal(10) ** 9
_ONE_NANO = Decimal("1e-9")


@lru_cache(maxsize=65536)
def _request_units(value: Decimal) -> int:
    """Nano-units, rounded up (memoised: most operations share a handful of sizes)."""
    return int((value * _NANO).to_integral_value(ROUND_CEILING))


def _quota_units(value: Decimal) -> int:
    return int((value * _NANO).to_integral_value(ROUND_FLOOR))


_NANO_INT = 10**9


def _to_decimal(units: int) -> Decimal:
    whole, frac = divmod(units, _NANO_INT)
    if not frac:
        return Decimal(whole)
    return (Decimal(units) * _ONE_NANO).normalize()


def _amount_phrase(resource: str, amount: Decimal) -> str:
    """``2 GPUs are``, ``1 GPU is``, ``4Gi memory is``."""
    text = format_quantity(amount)
    if resource.rsplit("/", 1)[-1].lower() == "gpu":
        return f"{text} GPU is" if amount == 1 else f"{text} GPUs are"
    return f"{text} {resource} is"


def _names(ids: Sequence[str], total: int | None = None) -> str:
    total = len(ids) if total is None else total
    shown = ", ".join(ids[:MAX_LISTED])
    more = total - min(len(ids), MAX_LISTED)
    return f"{shown} and {more} more" if more > 0 else shown


# --- what blocks a pending operation ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class DependencyState:
    operation: str
    phase: str  # a Phase value, "UpstreamFailed" (will never run) or "Missing" (not in repo)


@dataclass(frozen=True, slots=True)
class QueuePausedBlock:
    queue: str

    def message(self) -> str:
        return f"queue {self.queue} is paused; admitted when it is resumed"

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "paused": True}


@dataclass(frozen=True, slots=True)
class ApprovalBlock:
    def message(self) -> str:
        return "awaiting approval; admitted when isApproved is set to true"

    def to_json(self) -> dict[str, Any]:
        return {"isApproved": False}


@dataclass(frozen=True, slots=True)
class DependenciesBlock:
    waiting: tuple[DependencyState, ...]

    def message(self) -> str:
        deps = ", ".join(f"{d.operation} ({d.phase})" for d in self.waiting)
        return f"waits for {deps}; admitted when all its dependencies have succeeded"

    def to_json(self) -> dict[str, Any]:
        deps = [{"operation": d.operation, "phase": d.phase} for d in self.waiting]
        return {"dependencies": deps}


@dataclass(frozen=True, slots=True)
class UpstreamFailedBlock:
    failed: tuple[DependencyState, ...]

    def message(self) -> str:
        deps = ", ".join(f"{d.operation} ({d.phase})" for d in self.failed)
        return f"upstream {deps} did not succeed; this operation will never run"

    def to_json(self) -> dict[str, Any]:
        return {
            "failed": [{"operation": d.operation, "phase": d.phase} for d in self.failed],
            "neverRuns": True,
        }


@dataclass(frozen=True, slots=True)
class Shortfall:
    resource: str
    request: Decimal
    quota: Decimal


@dataclass(frozen=True, slots=True)
class ExceedsQuotaBlock:
    queue: str
    exceeds: tuple[Shortfall, ...]

    def message(self) -> str:
        parts = "; ".join(
            f"needs {s.resource} {format_quantity(s.request)} but {self.queue}'s quota is "
            f"{format_quantity(s.quota)}"
            for s in self.exceeds
        )
        return f"{parts}; it can never be admitted unless the request is lowered or quota raised"

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "exceeds": [
                {
                    "resource": s.resource,
                    "request": format_quantity(s.request),
                    "quota": format_quantity(s.quota),
                }
                for s in self.exceeds
            ],
            "neverRuns": True,
        }


@dataclass(frozen=True, slots=True)
class BehindHeadBlock:
    queue: str
    head: str
    head_reason: PendingReason

    def message(self) -> str:
        return (
            f"{self.queue} is StrictFIFO: waits behind {self.head} ({self.head_reason}); "
            f"admitted after {self.head} is dispatched"
        )

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "head": self.head, "headReason": str(self.head_reason)}


@dataclass(frozen=True, slots=True)
class ConcurrencyBlock:
    """Queue, workflow or cluster concurrency: ``active`` of ``limit`` slots are taken (this
    plan's dispatches included); ``releases`` of ``active_operations`` must finish first."""

    scope: str  # "queue" | "workflow" | "cluster"
    name: str
    active: int
    limit: int
    releases: int
    active_operations: tuple[str, ...]  # up to MAX_LISTED of them

    def message(self) -> str:
        if self.scope == "queue":
            head = f"{self.active} of {self.limit} active in {self.name}"
        elif self.scope == "workflow":
            head = f"{self.active} of {self.limit} children of workflow {self.name} active"
        else:
            head = f"{self.active} of {self.limit} active on cluster {self.name}"
        if not self.active_operations:
            return head
        who = _names(self.active_operations, self.active)
        verb = "finishes" if self.releases == 1 else "finish"
        return f"{head}; admitted when {self.releases} of {who} {verb}"

    def to_json(self) -> dict[str, Any]:
        return {
            self.scope: self.name,
            "active": self.active,
            "concurrency": self.limit,
            "releasesNeeded": self.releases,
            "activeOperations": list(self.active_operations),
        }


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    queue: str
    resource: str
    request: Decimal
    used: Decimal  # including this plan's dispatches
    quota: Decimal
    release: Decimal  # how much must be released before this operation fits
    released_by: tuple[str, ...]  # the fewest active operations that would release enough
    released_by_count: int

    def message(self) -> str:
        head = (
            f"needs {self.resource} {format_quantity(self.request)}; {self.queue} uses "
            f"{format_quantity(self.used)} of {format_quantity(self.quota)}"
        )
        if not self.released_by:
            return head
        amount = _amount_phrase(self.resource, self.release)
        who = _names(self.released_by, self.released_by_count)
        return f"{head}; admitted when {amount} released by {who}"

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "resource": self.resource,
            "request": format_quantity(self.request),
            "used": format_quantity(self.used),
            "quota": format_quantity(self.quota),
            "release": format_quantity(self.release),
            "releasedBy": list(self.released_by),
        }


BlockedBy = (
    QueuePausedBlock
    | ApprovalBlock
    | DependenciesBlock
    | UpstreamFailedBlock
    | ExceedsQuotaBlock
    | BehindHeadBlock
    | ConcurrencyBlock
    | QuotaBlock
)


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dispatch:
    operation: str
    queue: str
    cluster: str


@dataclass(frozen=True, slots=True)
class Pending:
    operation: str
    queue: str
    reason: PendingReason
    position: int  # 1-based among the queue's pending, in consideration order
    blocked_by: BlockedBy

    @property
    def message(self) -> str:
        return self.blocked_by.message()

    @property
    def never_runs(self) -> bool:
        return self.reason.never_runs


@dataclass(frozen=True, slots=True)
class Stop:
    operation: str
    reason: StopReason
    queue: str | None = None
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class PruneRefusal:
    """The mass-deletion guard held: none of ``refused`` is stopped in this plan."""

    refused: tuple[str, ...]
    active: int
    max_fraction: float

    def message(self) -> str:
        return (
            f"refusing to prune {len(self.refused)} of {self.active} active operations "
            f"(more than {self.max_fraction:.0%}); set allowMassPrune to override"
        )


@dataclass(frozen=True, slots=True)
class QueueSummary:
    name: str
    cluster: str
    priority: int
    concurrency: int | None
    quota: Mapping[str, Decimal]
    active: int  # observed, before this plan
    used: Mapping[str, Decimal]  # observed, per quota resource, before this plan
    dispatching: int
    pending: int
    strategy: QueueStrategy = QueueStrategy.BEST_EFFORT_FIFO
    paused: bool = False
    head_reason: PendingReason | None = None  # reason of the pending op at position 1
    used_after: Mapping[str, Decimal] = field(default_factory=dict)  # with this plan applied


@dataclass(frozen=True, slots=True)
class Plan:
    dispatch: tuple[Dispatch, ...]  # in dispatch order
    pending: tuple[Pending, ...]  # in consideration order
    stop: tuple[Stop, ...]  # by operation id
    queues: tuple[QueueSummary, ...]  # in consideration order
    prune_refused: PruneRefusal | None = None
    at: datetime = field(default=datetime(1970, 1, 1, tzinfo=UTC))


# --- planner state ----------------------------------------------------------------------


class _Queue:
    __slots__ = (
        "active",
        "active0",
        "active_ids",
        "candidates",
        "dispatched",
        "holders",
        "pending",
        "quota",
        "resources",
        "spec",
        "used",
        "used0",
    )

    def __init__(self, spec: QueueSpec) -> None:
        self.spec = spec
        self.resources: tuple[str, ...] = tuple(sorted(spec.quota))
        self.quota: tuple[int, ...] = tuple(_quota_units(spec.quota[r]) for r in self.resources)
        self.used: list[int] = [0] * len(self.resources)
        self.used0: tuple[int, ...] = ()
        self.active = 0
        self.active0 = 0
        self.active_ids: list[str] = []
        # per quota resource: (units, id) of active operations that hold some of it
        self.holders: list[list[tuple[int, str]]] = [[] for _ in self.resources]
        self.candidates: list[tuple[tuple[Any, ...], CompiledOperation]] = []
        self.dispatched = 0
        self.pending: list[tuple[CompiledOperation, PendingReason, Any]] = []

    def request(self, requests: Mapping[str, Decimal]) -> tuple[int, ...]:
        get = requests.get
        out = []
        for r in self.resources:
            v = get(r)
            out.append(0 if v is None else _request_units(v))
        return tuple(out)

    def hold(self, op_id: str, req: tuple[int, ...]) -> None:
        self.active += 1
        self.active_ids.append(op_id)
        used = self.used
        for i, amount in enumerate(req):
            if amount:
                used[i] += amount
                self.holders[i].append((amount, op_id))


class _Counter:
    __slots__ = ("active", "ids", "limit")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.active = 0
        self.ids: list[str] = []

    def hold(self, op_id: str) -> None:
        self.active += 1
        self.ids.append(op_id)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _submission_key(op: CompiledOperation) -> tuple[Any, ...]:
    """Within a queue: first-commit time, then path; workflow children at their parent's
    position in index order. Operations without a commit time (outside Git, or not yet
    committed) come after those with one, in path order."""
    ts = op.submitted_at
    index = op.workflow.index if op.workflow is not None else -1
    if ts is None:
        return (1, _EPOCH, op.path, index, op.id)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return (0, ts, op.path, index, op.id)


# --- the planner ------------------------------------------------------------------------


def plan_dispatch(
    operations: Iterable[CompiledOperation],
    queues: Mapping[str, QueueSpec],
    clusters: Mapping[str, ClusterSpec],
    observed: Iterable[ObservedOperation],
    org: OrgSettings,
    now: datetime,
    *,
    rejected: Collection[str] = (),
) -> Plan:
    """Decide what to dispatch, what waits and why, and what to stop.

    ``observed`` lists what the clusters say; unlisted operations are ``Queued``.
    ``rejected`` are ids still in the repo but refused by policy: never pruned.
    """
    # Step 1: index the inputs.
    ops: dict[str, CompiledOperation] = {}
    for op in operations:
        if op.id in ops:
            raise PlanInputError(f"operation {op.id} appears twice")
        ops[op.id] = op
    seen: dict[str, ObservedOperation] = {}
    for o in observed:
        if o.operation in seen:
            raise PlanInputError(f"operation {o.operation} is observed twice")
        seen[o.operation] = o

    qstate: dict[str, _Queue] = {name: _Queue(spec) for name, spec in queues.items()}
    cstate: dict[str, _Counter] = {
        name: _Counter(spec.concurrency) for name, spec in clusters.items()
    }
    wstate: dict[str, _Counter] = {}

    def cluster(name: str) -> _Counter:
        c = cstate.get(name)
        if c is None:
            c = cstate[name] = _Counter(None)
        return c

    def workflow(parent: str, limit: int | None) -> _Counter:
        w = wstate.get(parent)
        if w is None:
            w = wstate[parent] = _Counter(limit)
        return w

    # Step 2: usage of the active operations (Dispatched or Running).
    removed: list[ObservedOperation] = []
    active_total = 0
    for oid in sorted(seen):
        obs = seen[oid]
        if not obs.phase.active:
            continue
        active_total += 1
        known = ops.get(oid)
        if known is None and oid not in rejected:
            removed.append(obs)
        qname = obs.queue or (known.queue if known is not None else None)
        aq = qstate.get(qname) if qname is not None else None
        cname = obs.cluster or (known.cluster if known is not None else None)
        if cname is None and aq is not None:
            cname = aq.spec.cluster
        requests = obs.requests if obs.requests is not None else (known.requests if known else {})
        if aq is not None:
            aq.hold(oid, aq.request(requests))
        if cname is not None:
            cluster(cname).hold(oid)
        if known is not None and known.workflow is not None:
            workflow(known.workflow.parent, known.workflow.concurrency).hold(oid)
    for q in qstate.values():
        q.active0 = q.active
        q.used0 = tuple(q.used)

    # Step 3: candidates (Queued operations), grouped by queue in submission order.
    for oid, op in ops.items():
        state = seen.get(oid)
        if state is not None and state.phase is not Phase.QUEUED:
            continue
        home = qstate.get(op.queue)
        if home is None:
            raise PlanInputError(f"operation {oid} names queue {op.queue!r}, which does not exist")
        home.candidates.append((_submission_key(op), op))
    order = sorted(qstate.values(), key=lambda q: (-q.spec.priority, q.spec.name))

    doomed: dict[str, bool] = {}

    def phase_of(dep: str) -> str:
        o = seen.get(dep)
        if o is not None:
            return o.phase.value
        return Phase.QUEUED.value if dep in ops else "Missing"

    def never_runs(oid: str, trail: frozenset[str] = frozenset()) -> bool:
        """A queued op whose upstream failed, was stopped, or itself never runs."""
        known = doomed.get(oid)
        if known is not None:
            return known
        op = ops.get(oid)
        o = seen.get(oid)
        result = False
        if op is not None and (o is None or o.phase is Phase.QUEUED) and oid not in trail:
            inner = trail | {oid}
            for dep in op.dependencies:
                p = phase_of(dep)
                if p in (Phase.FAILED, Phase.STOPPED) or (
                    p == Phase.QUEUED and never_runs(dep, inner)
                ):
                    result = True
                    break
        if not trail:
            doomed[oid] = result
        return result

    dispatch: list[Dispatch] = []
    append_dispatch = dispatch.append
    strict_fifo = QueueStrategy.STRICT_FIFO
    succeeded = Phase.SUCCEEDED.value

    # Step 4: checks 1..9 for each candidate, in one global order.
    for q in order:
        spec = q.spec
        q.candidates.sort(key=lambda kc: kc[0])
        pend = q.pending.append
        strict = spec.strategy is strict_fifo
        head: tuple[str, PendingReason] | None = None
        conc = spec.concurrency
        quota = q.quota
        nres = len(quota)
        used = q.used
        for _, op in q.candidates:
            # 1: queue paused
            if spec.paused:
                pend((op, PendingReason.QUEUE_PAUSED, None))
                continue
            # 2: approval
            if not op.is_approved:
                pend((op, PendingReason.AWAITING_APPROVAL, None))
                continue
            # 3: DAG dependencies
            if op.dependencies:
                states = [DependencyState(d, phase_of(d)) for d in op.dependencies]
                failed = tuple(
                    s if s.phase != Phase.QUEUED else DependencyState(s.operation, "UpstreamFailed")
                    for s in states
                    if s.phase in (Phase.FAILED, Phase.STOPPED)
                    or (s.phase == Phase.QUEUED and never_runs(s.operation))
                )
                if failed:
                    pend((op, PendingReason.UPSTREAM_FAILED, failed))
                    continue
                waiting = tuple(s for s in states if s.phase != succeeded)
                if waiting:
                    pend((op, PendingReason.WAITING_FOR_DEPENDENCIES, waiting))
                    continue
            # 4: the request alone fits every quota of the queue
            req = q.request(op.requests) if nres else ()
            if nres:
                over = [i for i in range(nres) if req[i] > quota[i]]
                if over:
                    pend((op, PendingReason.EXCEEDS_QUOTA, over))
                    continue
            # 5: StrictFIFO: nothing earlier in this queue was held back by 6, 7 or 9
            if head is not None:
                pend((op, PendingReason.WAITING_BEHIND_HEAD, head))
                continue
            # 6: queue concurrency
            if conc is not None and q.active >= conc:
                pend((op, PendingReason.QUEUE_CONCURRENCY_LIMIT, None))
                if strict:
                    head = (op.id, PendingReason.QUEUE_CONCURRENCY_LIMIT)
                continue
            # 7: quota, per resource the op requests (others are unaffected)
            short = -1
            for i in range(nres):
                amount = req[i]
                if amount and used[i] + amount > quota[i]:
                    short = i
                    break
            if short >= 0:
                pend((op, PendingReason.QUOTA_EXCEEDED, short))
                if strict:
                    head = (op.id, PendingReason.QUOTA_EXCEEDED)
                continue
            # 8: workflow parallelism
            wf = op.workflow
            w = None
            if wf is not None:
                w = workflow(wf.parent, wf.concurrency)
                if w.limit is not None and w.active >= w.limit:
                    pend((op, PendingReason.WORKFLOW_PARALLELISM, w))
                    continue
            # 9: cluster concurrency
            c = cluster(op.cluster)
            if c.limit is not None and c.active >= c.limit:
                pend((op, PendingReason.CLUSTER_CONCURRENCY_LIMIT, c))
                if strict:
                    head = (op.id, PendingReason.CLUSTER_CONCURRENCY_LIMIT)
                continue
            # Admitted: count it before the next candidate.
            q.hold(op.id, req)
            q.dispatched += 1
            c.hold(op.id)
            if w is not None:
                w.hold(op.id)
            append_dispatch(Dispatch(op.id, spec.name, op.cluster))

    # Step 5: prune operations removed from the repo while active, behind the guard.
    stops: tuple[Stop, ...] = ()
    refusal: PruneRefusal | None = None
    if org.prune and removed:
        candidates = tuple(
            Stop(
                o.operation,
                StopReason.REMOVED_FROM_REPO,
                o.queue,
                o.cluster or (qstate[o.queue].spec.cluster if o.queue in qstate else None),
            )
            for o in removed
        )
        if not org.allow_mass_prune and len(candidates) > org.max_prune_fraction * active_total:
            refusal = PruneRefusal(
                tuple(s.operation for s in candidates), active_total, org.max_prune_fraction
            )
        else:
            stops = candidates

    # Step 6: explain every pending op against the final counters (this plan applied).
    pending: list[Pending] = []
    summaries: list[QueueSummary] = []
    for q in order:
        pending.extend(_explain(q, cstate))
        spec = q.spec
        summaries.append(
            QueueSummary(
                name=spec.name,
                cluster=spec.cluster,
                priority=spec.priority,
                concurrency=spec.concurrency,
                quota=dict(spec.quota),
                active=q.active0,
                used={r: _to_decimal(q.used0[i]) for i, r in enumerate(q.resources)},
                dispatching=q.dispatched,
                pending=len(q.pending),
                strategy=spec.strategy,
                paused=spec.paused,
                head_reason=q.pending[0][1] if q.pending else None,
                used_after={r: _to_decimal(q.used[i]) for i, r in enumerate(q.resources)},
            )
        )
    return Plan(
        dispatch=tuple(dispatch),
        pending=tuple(pending),
        stop=stops,
        queues=tuple(summaries),
        prune_refused=refusal,
        at=now,
    )


def _explain(q: _Queue, cstate: Mapping[str, _Counter]) -> list[Pending]:
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

    for position, (op, reason, detail) in enumerate(q.pending, start=1):
        block: BlockedBy
        if reason is PendingReason.QUEUE_PAUSED:
            block = shared.get(reason) or shared.setdefault(reason, QueuePausedBlock(name))
        elif reason is PendingReason.AWAITING_APPROVAL:
            block = _APPROVAL
        elif reason is PendingReason.WAITING_FOR_DEPENDENCIES:
            block = DependenciesBlock(detail)
        elif reason is PendingReason.UPSTREAM_FAILED:
            block = UpstreamFailedBlock(detail)
        elif reason is PendingReason.EXCEEDS_QUOTA:
            req = q.request(op.requests)
            block = ExceedsQuotaBlock(
                name,
                tuple(
                    Shortfall(q.resources[i], _to_decimal(req[i]), _to_decimal(q.quota[i]))
                    for i in detail
                ),
            )
        elif reason is PendingReason.WAITING_BEHIND_HEAD:
            block = shared.get(detail) or shared.setdefault(
                detail, BehindHeadBlock(name, detail[0], detail[1])
            )
        elif reason is PendingReason.QUEUE_CONCURRENCY_LIMIT:
            limit = spec.concurrency or 0
            block = shared.get(reason) or shared.setdefault(
                reason,
                ConcurrencyBlock(
                    "queue",
                    name,
                    q.active,
                    limit,
                    q.active - limit + 1,
                    tuple(q.active_ids[:MAX_LISTED]),
                ),
            )
        elif reason is PendingReason.QUOTA_EXCEEDED:
            i = detail
            amount = q.request(op.requests)[i]
            key = (reason, i, amount)
            cached = shared.get(key)
            if cached is None:
                need = q.used[i] + amount - q.quota[i]
                ids, count = releasers(i, need)
                cached = shared[key] = QuotaBlock(
                    name,
                    q.resources[i],
                    _to_decimal(amount),
                    _to_decimal(q.used[i]),
                    _to_decimal(q.quota[i]),
                    _to_decimal(need),
                    ids,
                    count,
                )
            block = cached
        elif reason is PendingReason.WORKFLOW_PARALLELISM:
            w: _Counter = detail
            assert op.workflow is not None
            key = (reason, op.workflow.parent)
            block = shared.get(key) or shared.setdefault(
                key,
                ConcurrencyBlock(
                    "workflow",
                    op.workflow.parent,
                    w.active,
                    w.limit or 0,
                    w.active - (w.limit or 0) + 1,
                    tuple(w.ids[:MAX_LISTED]),
                ),
            )
        else:
            c: _Counter = detail
            key = (reason, op.cluster)
            block = shared.get(key) or shared.setdefault(
                key,
                ConcurrencyBlock(
                    "cluster",
                    op.cluster,
                    c.active,
                    c.limit or 0,
                    c.active - (c.limit or 0) + 1,
                    tuple(c.ids[:MAX_LISTED]),
                ),
            )
        out.append(Pending(op.id, name, reason, position, block))
    return out


_APPROVAL = ApprovalBlock()


def plan_repo(repo: CompiledRepo, observed: Iterable[ObservedOperation], now: datetime) -> Plan:
    """``plan_dispatch`` over a compiled repo; rejected operations are never pruned."""
    return plan_dispatch(
        repo.operations,
        repo.queues,
        repo.clusters,
        observed,
        repo.org,
        now,
        rejected=frozenset(r.operation for r in repo.rejected),
    )
