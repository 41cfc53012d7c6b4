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
import gc
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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

    CLUSTER_UNREACHABLE = "ClusterUnreachable"  # 0: its cluster could not be read
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


# --- what would admit a pending operation ----------------------------------------------


class AdmitWhen(enum.StrEnum):
    """The event that would let a pending operation be dispatched."""

    CLUSTER_REACHABLE = "ClusterReachable"  # its cluster can be read again
    QUEUE_RESUMED = "QueueResumed"
    APPROVED = "Approved"
    DEPENDENCIES_SUCCEED = "DependenciesSucceed"  # ``operations`` must all succeed
    NEVER = "Never"  # not under this config (upstream failed, or over a quota alone)
    HEAD_DISPATCHED = "HeadDispatched"  # ``operations`` (the head) is dispatched
    OPERATIONS_FINISH = "OperationsFinish"  # ``count`` of ``operations`` finish
    RESOURCES_RELEASED = "ResourcesReleased"  # ``amount`` of ``resource`` is released
    LIMIT_RAISED = "LimitRaised"  # nothing active to wait for: only a config change helps


@dataclass(frozen=True, slots=True)
class Admit:
    """What would admit a pending operation, as data; ``text`` is the clause the message
    ends with (views show it; nothing parses it)."""

    when: AdmitWhen
    text: str
    operations: tuple[str, ...] = ()  # up to MAX_LISTED of them
    count: int = 0  # how many of the (possibly more) operations are needed
    resource: str | None = None
    amount: Decimal | None = None


# --- what blocks a pending operation ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class DependencyState:
    operation: str
    phase: str  # a Phase value, "UpstreamFailed" (will never run) or "Missing" (not in repo)


def _joined(head: str, admit: Admit) -> str:
    return f"{head}; {admit.text}"


@dataclass(frozen=True, slots=True)
class ClusterUnreachableBlock:
    cluster: str

    def admit(self) -> Admit:
        return Admit(AdmitWhen.CLUSTER_REACHABLE, "admitted when it can be read again")

    def message(self) -> str:
        return _joined(f"cluster {self.cluster} cannot be read", self.admit())

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "reachable": False}


@dataclass(frozen=True, slots=True)
class QueuePausedBlock:
    queue: str

    def admit(self) -> Admit:
        return Admit(AdmitWhen.QUEUE_RESUMED, "admitted when it is resumed")

    def message(self) -> str:
        return _joined(f"queue {self.queue} is paused", self.admit())

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "paused": True}


@dataclass(frozen=True, slots=True)
class ApprovalBlock:
    def admit(self) -> Admit:
        return Admit(AdmitWhen.APPROVED, "admitted when isApproved is set to true")

    def message(self) -> str:
        return _joined("awaiting approval", self.admit())

    def to_json(self) -> dict[str, Any]:
        return {"isApproved": False}


@dataclass(frozen=True, slots=True)
class DependenciesBlock:
    waiting: tuple[DependencyState, ...]

    def admit(self) -> Admit:
        ids = tuple(d.operation for d in self.waiting)
        return Admit(
            AdmitWhen.DEPENDENCIES_SUCCEED,
            "admitted when all its dependencies have succeeded",
            ids[:MAX_LISTED],
            len(ids),
        )

    def message(self) -> str:
        deps = ", ".join(f"{d.operation} ({d.phase})" for d in self.waiting)
        return _joined(f"waits for {deps}", self.admit())

    def to_json(self) -> dict[str, Any]:
        deps = [{"operation": d.operation, "phase": d.phase} for d in self.waiting]
        return {"dependencies": deps}


@dataclass(frozen=True, slots=True)
class UpstreamFailedBlock:
    failed: tuple[DependencyState, ...]

    def admit(self) -> Admit:
        return Admit(AdmitWhen.NEVER, "this operation will never run")

    def message(self) -> str:
        deps = ", ".join(f"{d.operation} ({d.phase})" for d in self.failed)
        return _joined(f"upstream {deps} did not succeed", self.admit())

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

    def admit(self) -> Admit:
        return Admit(
            AdmitWhen.NEVER,
            "it can never be admitted unless the request is lowered or quota raised",
        )

    def message(self) -> str:
        parts = "; ".join(
            f"needs {s.resource} {format_quantity(s.request)} but {self.queue}'s quota is "
            f"{format_quantity(s.quota)}"
            for s in self.exceeds
        )
        return _joined(parts, self.admit())

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

    def admit(self) -> Admit:
        return Admit(
            AdmitWhen.HEAD_DISPATCHED, f"admitted after {self.head} is dispatched", (self.head,), 1
        )

    def message(self) -> str:
        return _joined(
            f"{self.queue} is StrictFIFO: waits behind {self.head} ({self.head_reason})",
            self.admit(),
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

    def _head(self) -> str:
        if self.scope == "queue":
            return f"{self.active} of {self.limit} active in {self.name}"
        if self.scope == "workflow":
            return f"{self.active} of {self.limit} children of workflow {self.name} active"
        return f"{self.active} of {self.limit} active on cluster {self.name}"

    def admit(self) -> Admit:
        if not self.active_operations:
            return Admit(AdmitWhen.LIMIT_RAISED, f"admitted when the {self.scope} limit is raised")
        who = _names(self.active_operations, self.active)
        verb = "finishes" if self.releases == 1 else "finish"
        return Admit(
            AdmitWhen.OPERATIONS_FINISH,
            f"admitted when {self.releases} of {who} {verb}",
            self.active_operations,
            self.releases,
        )

    def message(self) -> str:
        if not self.active_operations:
            return self._head()
        return _joined(self._head(), self.admit())

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

    def _head(self) -> str:
        return (
            f"needs {self.resource} {format_quantity(self.request)}; {self.queue} uses "
            f"{format_quantity(self.used)} of {format_quantity(self.quota)}"
        )

    def admit(self) -> Admit:
        if not self.released_by:
            return Admit(
                AdmitWhen.LIMIT_RAISED,
                f"admitted when {self.queue}'s {self.resource} quota is raised",
                resource=self.resource,
                amount=self.release,
            )
        amount = _amount_phrase(self.resource, self.release)
        who = _names(self.released_by, self.released_by_count)
        return Admit(
            AdmitWhen.RESOURCES_RELEASED,
            f"admitted when {amount} released by {who}",
            self.released_by,
            self.released_by_count,
            self.resource,
            self.release,
        )

    def message(self) -> str:
        if not self.released_by:
            return self._head()
        return _joined(self._head(), self.admit())

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
    ClusterUnreachableBlock
    | QueuePausedBlock
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
    def admit(self) -> Admit:
        return self.blocked_by.admit()

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
        "limits",
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
        self.limits: tuple[tuple[str, Decimal], ...] = tuple(
            (r, _to_decimal(u)) for r, u in zip(self.resources, self.quota, strict=True)
        )
        self.used: list[int] = [0] * len(self.resources)
        self.used0: tuple[int, ...] = ()
        self.active = 0
        self.active0 = 0
        self.active_ids: list[str] = []
        # per quota resource: (units, id) of active operations that hold some of it
        self.holders: list[list[tuple[int, str]]] = [[] for _ in self.resources]
        self.candidates: list[tuple[Any, ...]] = []
        self.dispatched = 0
        self.pending: list[tuple[str, CompiledOperation, PendingReason, Any]] = []

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
    unreachable: Collection[str] = (),
) -> Plan:
    """Decide what to dispatch, what waits and why, and what to stop.

    ``observed`` lists what the clusters say; unlisted operations are ``Queued``.
    ``rejected`` are ids still in the repo but refused by policy: they are never pruned.
    ``unreachable`` clusters could not be read: nothing is dispatched to or stopped in them
    (check 0), and their active operations keep counting as observed.
    Raises :class:`PlanInputError` when the inputs contradict each other.
    """
    with _gc_paused():
        return _plan(
            operations, queues, clusters, observed, org, now, rejected, frozenset(unreachable)
        )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Planning allocates a few objects per operation and keeps them all; meanwhile CPython's
    cyclic GC would rescan the whole heap (every compiled operation) several times, which
    costs more than the planning itself. Pause it for the call; results do not depend on it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan(
    operations: Iterable[CompiledOperation],
    queues: Mapping[str, QueueSpec],
    clusters: Mapping[str, ClusterSpec],
    observed: Iterable[ObservedOperation],
    org: OrgSettings,
    now: datetime,
    rejected: Collection[str],
    unreachable: frozenset[str],
) -> Plan:
    # Step 1: index the inputs.
    seen: dict[str, ObservedOperation] = {}
    for o in observed:
        if o.operation in seen:
            raise PlanInputError(f"operation {o.operation} is observed twice")
        seen[o.operation] = o
    not_queued = {oid for oid, o in seen.items() if o.phase is not Phase.QUEUED}

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

    # Step 2: index the operations; candidates (the Queued ones) grouped by queue. Within a
    # queue: first-commit time, then path; workflow children at their parent's position, in
    # index order. Ops without a commit time (outside Git, or uncommitted) follow, in path
    # order. Sort keys are flat tuples ending in the unique id: ops are never compared.
    ops: dict[str, CompiledOperation] = {}
    for op in operations:
        oid = f"{op.project}/{op.name}"  # op.id, inlined: this loop sees every operation
        if oid in ops:
            raise PlanInputError(f"operation {oid} appears twice")
        ops[oid] = op
        if oid in not_queued:
            continue
        home = qstate.get(op.queue)
        if home is None:
            raise PlanInputError(f"operation {oid} names queue {op.queue!r}, which does not exist")
        ts = op.submitted_at
        wf = op.workflow
        index = -1 if wf is None else wf.index
        if ts is None:
            home.candidates.append((1, _EPOCH, op.path, index, oid, op))
        else:
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
            home.candidates.append((0, ts, op.path, index, oid, op))

    # Step 3: usage of the active operations (Dispatched or Running).
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

    def dependency_block(op: CompiledOperation) -> tuple[PendingReason, Any] | None:
        states = [DependencyState(d, phase_of(d)) for d in op.dependencies]
        failed = tuple(
            s if s.phase != Phase.QUEUED else DependencyState(s.operation, "UpstreamFailed")
            for s in states
            if s.phase in (Phase.FAILED, Phase.STOPPED)
            or (s.phase == Phase.QUEUED and never_runs(s.operation))
        )
        if failed:
            return PendingReason.UPSTREAM_FAILED, failed
        waiting = tuple(s for s in states if s.phase != Phase.SUCCEEDED)
        if waiting:
            return PendingReason.WAITING_FOR_DEPENDENCIES, waiting
        return None

    dispatch: list[Dispatch] = []
    append_dispatch = dispatch.append
    strict_fifo = QueueStrategy.STRICT_FIFO
    units = _request_units
    unreachable_r = PendingReason.CLUSTER_UNREACHABLE
    paused_r = PendingReason.QUEUE_PAUSED
    approval_r = PendingReason.AWAITING_APPROVAL
    exceeds_r = PendingReason.EXCEEDS_QUOTA
    behind_r = PendingReason.WAITING_BEHIND_HEAD
    conc_r = PendingReason.QUEUE_CONCURRENCY_LIMIT
    quota_r = PendingReason.QUOTA_EXCEEDED
    wf_r = PendingReason.WORKFLOW_PARALLELISM
    cluster_r = PendingReason.CLUSTER_CONCURRENCY_LIMIT

    # Step 4: checks 0..9 for each candidate, in one global order.
    for q in order:
        spec = q.spec
        cands = q.candidates
        cands.sort()
        pend = q.pending.append
        # 0: the queue's cluster could not be read (its ops are on the queue's cluster)
        if spec.cluster in unreachable:
            for cand in cands:
                pend((cand[4], cand[5], unreachable_r, None))
            continue
        # 1: queue paused (the first check, so it decides for every candidate)
        if spec.paused:
            for cand in cands:
                pend((cand[4], cand[5], paused_r, None))
            continue
        strict = spec.strategy is strict_fifo
        head: tuple[str, PendingReason] | None = None
        conc = spec.concurrency
        quota = q.quota
        resources = q.resources
        nres = len(quota)
        used = q.used
        limits = q.limits
        home_name = spec.cluster
        home_cluster = cluster(home_name)
        qname = spec.name
        for cand in cands:
            oid = cand[4]
            op = cand[5]
            # 2: approval
            if not op.is_approved:
                pend((oid, op, approval_r, None))
                continue
            # 3: DAG dependencies
            if op.dependencies:
                blocked = dependency_block(op)
                if blocked is not None:
                    pend((oid, op, blocked[0], blocked[1]))
                    continue
            # 4: the request, alone, fits every quota of the queue. Exact Decimal compare
            # against the floored quota: same answer as in units, without converting.
            if limits:
                get = op.requests.get
                over = None
                for i, (r, limit) in enumerate(limits):
                    v = get(r)
                    if v is not None and v > limit:
                        if over is None:
                            over = [i]
                        else:
                            over.append(i)
                if over:
                    pend((oid, op, exceeds_r, over))
                    continue
            # 5: StrictFIFO: nothing earlier in this queue was held back by 6, 7 or 9
            if head is not None:
                pend((oid, op, behind_r, head))
                continue
            # 6: queue concurrency
            if conc is not None and q.active >= conc:
                pend((oid, op, conc_r, None))
                if strict:
                    head = (oid, conc_r)
                continue
            # 7: quota, per resource the op requests (others are unaffected)
            if nres:
                get = op.requests.get
                req = tuple([0 if (v := get(r)) is None else units(v) for r in resources])
                short = -1
                for i in range(nres):
                    amount = req[i]
                    if amount and used[i] + amount > quota[i]:
                        short = i
                        break
                if short >= 0:
                    pend((oid, op, quota_r, (short, req[short])))
                    if strict:
                        head = (oid, quota_r)
                    continue
            else:
                req = ()
            # 8: workflow parallelism
            wf = op.workflow
            w = None
            if wf is not None:
                w = workflow(wf.parent, wf.concurrency)
                if w.limit is not None and w.active >= w.limit:
                    pend((oid, op, wf_r, w))
                    continue
            # 9: cluster concurrency
            c = home_cluster if op.cluster == home_name else cluster(op.cluster)
            if c.limit is not None and c.active >= c.limit:
                pend((oid, op, cluster_r, c))
                if strict:
                    head = (oid, cluster_r)
                continue
            # Admitted: count it before the next candidate.
            q.hold(oid, req)
            q.dispatched += 1
            c.hold(oid)
            if w is not None:
                w.hold(oid)
            append_dispatch(Dispatch(oid, qname, op.cluster))

    # Step 5: prune operations removed from the repo while active, behind the guard; never
    # in a cluster that could not be read (they are stopped once it can be).
    stops: tuple[Stop, ...] = ()
    refusal: PruneRefusal | None = None
    candidates = tuple(
        s
        for s in (
            Stop(
                o.operation,
                StopReason.REMOVED_FROM_REPO,
                o.queue,
                o.cluster or (qstate[o.queue].spec.cluster if o.queue in qstate else None),
            )
            for o in removed
        )
        if s.cluster not in unreachable
    )
    if org.prune and candidates:
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
                head_reason=q.pending[0][2] if q.pending else None,
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
                    _to_decimal(amount),
                    _to_decimal(q.used[i]),
                    _to_decimal(q.quota[i]),
                    _to_decimal(need),
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
                cached = shared[reason] = ClusterUnreachableBlock(spec.cluster)
            block = cached
        elif reason is waiting_r:
            block = DependenciesBlock(detail)
        elif reason is upstream_r:
            block = UpstreamFailedBlock(detail)
        elif reason is exceeds_r:
            req, over = q.request(op.requests), detail
            block = ExceedsQuotaBlock(
                name,
                tuple(
                    Shortfall(q.resources[i], _to_decimal(req[i]), _to_decimal(q.quota[i]))
                    for i in over
                ),
            )
        else:  # workflow or cluster concurrency: detail is the counter
            counter: _Counter = detail
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


def plan_repo(
    repo: CompiledRepo,
    observed: Iterable[ObservedOperation],
    now: datetime,
    *,
    superseded: Collection[str] = (),
    unreachable: Collection[str] = (),
) -> Plan:
    """``plan_dispatch`` over a compiled repo; rejected operations (and the children of a
    rejected workflow) are never pruned.

    ``superseded`` are observed ids of older generations still running after a
    ``generation`` bump: they hold their quota until they finish and are never pruned."""
    observed = list(observed)
    return plan_dispatch(
        repo.operations,
        repo.queues,
        repo.clusters,
        observed,
        repo.org,
        now,
        rejected=repo.never_pruned(observed) | frozenset(superseded),
        unreachable=unreachable,
    )
