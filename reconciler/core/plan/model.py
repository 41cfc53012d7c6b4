"""The plan's model: what ``plan_dispatch`` returns, as data.

What must live here: the plan (``Plan``: ``Dispatch``, ``Pending``, ``Stop``,
``PruneRefusal``, ``QueueSummary``), the reasons (``PendingReason``, ``StopReason``), what
blocks a pending operation (the ``*Block`` classes, ``BlockedBy``) and what would admit it
(``AdmitWhen``, ``Admit``), with the messages they render, and ``PlanInputError``. Nothing
here plans: the values are built by ``planner.py`` and ``explain.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from reconciler.core.quantity import format_quantity
from reconciler.core.types import QueueStrategy

# How many operation names a blocker lists before it says "and N more".
MAX_LISTED = 10


class PendingReason(enum.StrEnum):
    """Why a queued operation is not dispatched this cycle: the first failing check
    (``checks.CHECKS``), declared in check order."""

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
    NO_CLUSTER_UNDER_QUOTA = "NoClusterUnderQuota"  # 10, fleet queues
    NO_CLUSTER_HAS_CAPACITY = "NoClusterHasCapacity"  # 10, fleet queues with requireCapacity

    @property
    def never_runs(self) -> bool:
        return self in (PendingReason.UPSTREAM_FAILED, PendingReason.EXCEEDS_QUOTA)


class StopReason(enum.StrEnum):
    REMOVED_FROM_REPO = "RemovedFromRepo"


class PlanInputError(ValueError):
    """The inputs contradict each other (e.g. an operation names a queue that does not exist).
    The compiler rules these out; the planner refuses rather than guessing."""


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
    CLUSTER_HAS_ROOM = "ClusterHasRoom"  # a fleet cluster has room for the whole request


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


class MemberState(enum.StrEnum):
    """How a fleet queue's cluster stood for one operation (check 10), in check order."""

    UNREACHABLE = "Unreachable"  # it could not be read this cycle
    CONCURRENCY_LIMIT = "ConcurrencyLimit"  # the cluster's concurrency is reached
    OVER_CLUSTER_QUOTA = "OverClusterQuota"  # the queue's clusterQuota for it would be exceeded
    NOT_OBSERVED = "NotObserved"  # its capacity is not known (no Node could be read)
    NO_CAPACITY = "NoCapacity"  # the matching nodes' free capacity is short
    FITS = "Fits"


@dataclass(frozen=True, slots=True)
class FleetMember:
    """One cluster of a fleet queue, as check 10 saw it for one operation: ``free`` is the
    free amount of each requested resource on the nodes the operation may use (empty when
    not observed); ``short`` the resource that did not fit (cap or capacity)."""

    cluster: str
    state: MemberState
    free: Mapping[str, Decimal] = field(default_factory=dict)
    short: str | None = None

    def phrase(self) -> str:
        state = self.state
        if state is MemberState.UNREACHABLE:
            return f"{self.cluster} cannot be read"
        if state is MemberState.CONCURRENCY_LIMIT:
            return f"{self.cluster} is at its concurrency"
        if state is MemberState.OVER_CLUSTER_QUOTA:
            return f"{self.cluster} would exceed its clusterQuota of {self.short}"
        if state is MemberState.NOT_OBSERVED:
            return f"{self.cluster}'s capacity is not observed"
        free = ", ".join(f"{r} {format_quantity(a)}" for r, a in self.free.items()) or "nothing"
        return f"{self.cluster} has {free} free"

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "state": str(self.state),
            "free": {r: format_quantity(a) for r, a in self.free.items()},
            "short": self.short,
        }


@dataclass(frozen=True, slots=True)
class FleetBlock:
    """A fleet queue's operation that no cluster takes this cycle (check 10):
    ``NoClusterUnderQuota`` (every cluster is unreadable, at its concurrency or over its
    ``clusterQuota``) or ``NoClusterHasCapacity`` (``requireCapacity``, and no cluster
    under quota has the free capacity for the whole request)."""

    queue: str
    reason: PendingReason
    request: Mapping[str, Decimal]
    members: tuple[FleetMember, ...]

    def admit(self) -> Admit:
        names = tuple(m.cluster for m in self.members)
        if self.reason is PendingReason.NO_CLUSTER_HAS_CAPACITY:
            text = "admitted when one of its clusters has the free capacity for it"
        else:
            text = "admitted when one of its clusters is under its quota and concurrency"
        return Admit(AdmitWhen.CLUSTER_HAS_ROOM, text, count=len(names))

    def message(self) -> str:
        need = ", ".join(f"{r} {format_quantity(a)}" for r, a in self.request.items())
        head = f"needs {need or 'nothing'}" if self.request else "no cluster has room"
        parts = "; ".join(m.phrase() for m in self.members)
        return _joined(f"{head}: {parts}", self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "request": {r: format_quantity(a) for r, a in self.request.items()},
            "clusters": [m.to_json() for m in self.members],
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
    | FleetBlock
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
    members: tuple[FleetSlice, ...] = ()  # a fleet queue's clusters, in choice order


@dataclass(frozen=True, slots=True)
class FleetSlice:
    """A fleet queue's share of one of its clusters, with this plan applied: its active
    operations there, what they request, its ``clusterQuota`` for it, and the cluster's
    free capacity on all its usable nodes (None: not observed)."""

    cluster: str
    reachable: bool
    active: int
    dispatching: int
    used: Mapping[str, Decimal]
    quota: Mapping[str, Decimal]
    free: Mapping[str, Decimal] | None
    nodes: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    dispatch: tuple[Dispatch, ...]  # in dispatch order
    pending: tuple[Pending, ...]  # in consideration order
    stop: tuple[Stop, ...]  # by operation id
    queues: tuple[QueueSummary, ...]  # in consideration order
    prune_refused: PruneRefusal | None = None
    at: datetime = field(default=datetime(1970, 1, 1, tzinfo=UTC))
