"""The plan's model: what ``plan_dispatch`` returns, as data.

What must live here: the plan (``Plan``: ``Dispatch``, ``Pending``, ``Stop``,
``PruneRefusal``, ``QueueSummary``), the reasons (``PendingReason``, ``StopReason``), what
blocks a pending operation (the ``*Block`` classes, ``BlockedBy``) and what would admit it
(``AdmitWhen``, ``Admit``), with the messages they render, and ``PlanInputError``. Nothing
here plans: the values are built by ``planner.py`` and ``explain.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from reconciler.core.plan.ledger import zone
from reconciler.core.quantity import format_duration, format_quantity
from reconciler.core.types import QueueStrategy

# How many operation names a blocker lists before it says "and N more".
MAX_LISTED = 10


class PendingReason(enum.StrEnum):
    """Why a queued operation is not dispatched this cycle: the first failing check
    (``checks.CHECKS``), declared in check order."""

    CLUSTER_UNREACHABLE = "ClusterUnreachable"  # 0: its cluster could not be read
    BACKEND_UNAVAILABLE = "BackendUnavailable"  # 0: its cluster does not serve its backend
    QUEUE_PAUSED = "QueuePaused"  # 1
    AWAITING_APPROVAL = "AwaitingApproval"  # 2
    WAITING_FOR_DEPENDENCIES = "WaitingForDependencies"  # 3
    UPSTREAM_FAILED = "UpstreamFailed"  # 3, never runs
    EXCEEDS_QUOTA = "ExceedsQuota"  # 4, never admitted under this config
    NO_ELIGIBLE_FLAVOR = "NoEligibleFlavor"  # 4, its pins contradict every flavor's labels
    WAITING_BEHIND_HEAD = "WaitingBehindHead"  # 5
    QUEUE_CONCURRENCY_LIMIT = "QueueConcurrencyLimit"  # 6
    MAX_PODS_REACHED = "MaxPodsReached"  # 7
    QUOTA_EXCEEDED = "QuotaExceeded"  # 8
    WAITING_FOR_LENT_QUOTA = "WaitingForLentQuota"  # 8, cohort: its quota is lent out
    BORROWING_NOT_ALLOWED = "BorrowingNotAllowed"  # 8, cohort: fits only by borrowing
    COHORT_LIMIT = "CohortLimit"  # 8, cohort: the cohort's total cap is reached
    WAITING_FOR_FAIR_SHARE = "WaitingForFairShare"  # 8, cohort: lent to a lower share first
    WORKFLOW_PARALLELISM = "WorkflowParallelism"  # 9
    CLUSTER_CONCURRENCY_LIMIT = "ClusterConcurrencyLimit"  # 10
    NO_CLUSTER_UNDER_QUOTA = "NoClusterUnderQuota"  # 10, fleet queues
    NO_CLUSTER_HAS_CAPACITY = "NoClusterHasCapacity"  # 10, fleet queues with requireCapacity
    BUDGET_EXCEEDED = "BudgetExceeded"  # 11
    LEDGER_UNREADABLE = "LedgerUnreadable"  # 11: what the budget spent cannot be known

    @property
    def never_runs(self) -> bool:
        return REASON_TRAITS[self].never_runs


@dataclass(frozen=True, slots=True)
class ReasonTraits:
    """What a pending reason says of the wait beyond its check's number."""

    # no simulated event ends it (a person, a config change or a cluster must): the
    # start-time estimate does not date it (docs/estimates.md)
    static: bool = False
    # StrictFIFO: the queue's later candidates wait behind it (check 5)
    holds_head: bool = False
    # never dispatched under this config
    never_runs: bool = False


_STATIC = ReasonTraits(static=True)
_HEAD = ReasonTraits(holds_head=True)
_NEVER = ReasonTraits(static=True, never_runs=True)
_CLOCKED = ReasonTraits()

# The one table of the reasons' traits: the planner's StrictFIFO head (``checks.Check``),
# ``never_runs`` in the views and the estimate's undated waits all read it.
REASON_TRAITS: Mapping[PendingReason, ReasonTraits] = {
    PendingReason.CLUSTER_UNREACHABLE: _STATIC,
    PendingReason.BACKEND_UNAVAILABLE: _STATIC,
    PendingReason.QUEUE_PAUSED: _STATIC,
    PendingReason.AWAITING_APPROVAL: _STATIC,
    PendingReason.WAITING_FOR_DEPENDENCIES: _CLOCKED,
    PendingReason.UPSTREAM_FAILED: _NEVER,
    PendingReason.EXCEEDS_QUOTA: _NEVER,
    PendingReason.NO_ELIGIBLE_FLAVOR: _NEVER,
    PendingReason.WAITING_BEHIND_HEAD: _CLOCKED,
    PendingReason.QUEUE_CONCURRENCY_LIMIT: _HEAD,
    PendingReason.MAX_PODS_REACHED: _HEAD,
    PendingReason.QUOTA_EXCEEDED: _HEAD,
    PendingReason.WAITING_FOR_LENT_QUOTA: _HEAD,
    PendingReason.BORROWING_NOT_ALLOWED: _HEAD,
    PendingReason.COHORT_LIMIT: _HEAD,
    PendingReason.WAITING_FOR_FAIR_SHARE: _HEAD,
    PendingReason.WORKFLOW_PARALLELISM: _CLOCKED,
    PendingReason.CLUSTER_CONCURRENCY_LIMIT: _HEAD,
    PendingReason.NO_CLUSTER_UNDER_QUOTA: _HEAD,
    # the estimate does not simulate the clusters' free capacity changing (it sees it as
    # observed now): no simulated event ends this wait
    PendingReason.NO_CLUSTER_HAS_CAPACITY: ReasonTraits(static=True, holds_head=True),
    PendingReason.BUDGET_EXCEEDED: _HEAD,
    # a person repairs the ledger
    PendingReason.LEDGER_UNREADABLE: ReasonTraits(static=True, holds_head=True),
}


class StopReason(enum.StrEnum):
    REMOVED_FROM_REPO = "RemovedFromRepo"
    STOPPED_IN_REPO = "StoppedInRepo"  # ``stopped: true`` on the operation (or its workflow)
    GANG_TIMEOUT = "GangTimeout"  # set by decide, not the planner: see core/decision/cycle.py


class PlanInputError(ValueError):
    """The inputs contradict each other (e.g. an operation names a queue that does not exist).
    The compiler rules these out; the planner refuses rather than guessing."""


def _amount_phrase(resource: str, amount: Decimal, flavor: str | None = None) -> str:
    """``2 GPUs are``, ``1 GPU is``, ``4Gi memory is``; of a flavor: ``1 h100 GPU is``."""
    text = format_quantity(amount)
    of = f"{flavor} " if flavor else ""
    if resource.rsplit("/", 1)[-1].lower() == "gpu":
        return f"{text} {of}GPU is" if amount == 1 else f"{text} {of}GPUs are"
    return f"{text} {of}{resource} is"


def _of(resource: str, flavor: str | None) -> str:
    """``nvidia.com/gpu``, or of a flavor ``nvidia.com/gpu (h100)``."""
    return f"{resource} ({flavor})" if flavor else resource


def _names(ids: Sequence[str], total: int | None = None) -> str:
    total = len(ids) if total is None else total
    shown = ", ".join(ids[:MAX_LISTED])
    more = total - min(len(ids), MAX_LISTED)
    return f"{shown} and {more} more" if more > 0 else shown


# --- what would admit a pending operation ----------------------------------------------


class AdmitWhen(enum.StrEnum):
    """The event that would let a pending operation be dispatched."""

    CLUSTER_REACHABLE = "ClusterReachable"  # its cluster can be read again
    BACKEND_SERVED = "BackendServed"  # its cluster serves the backend's API (e.g. a CRD)
    QUEUE_RESUMED = "QueueResumed"
    APPROVED = "Approved"
    DEPENDENCIES_SUCCEED = "DependenciesSucceed"  # ``operations`` must all succeed
    NEVER = "Never"  # not under this config (upstream failed, or over a quota alone)
    HEAD_DISPATCHED = "HeadDispatched"  # ``operations`` (the head) is dispatched
    OPERATIONS_FINISH = "OperationsFinish"  # ``count`` of ``operations`` finish
    # ``amount`` of ``resource`` is released (``resource`` is ``pods`` for maxPods)
    RESOURCES_RELEASED = "ResourcesReleased"
    LIMIT_RAISED = "LimitRaised"  # nothing active to wait for: only a config change helps
    CLUSTER_HAS_ROOM = "ClusterHasRoom"  # a fleet cluster has room for the whole request
    BORROWERS_FINISH = "BorrowersFinish"  # ``operations`` (borrowers) end, at the latest ``at``
    BUDGET_WINDOW_RESETS = "BudgetWindowResets"  # the budget's window resets ``at``
    LEDGER_REPAIRED = "LedgerRepaired"  # the status branch's ledger can be read again


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
    # BorrowersFinish: the latest time the borrowers must end; BudgetWindowResets: when
    at: datetime | None = None
    flavor: str | None = None  # the flavor this way in is of (a queue with flavors)
    # other ways in, one per further flavor that could admit it (in the queue's order)
    alternatives: tuple[Admit, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``admit`` in every JSON view of a pending entry (``plan -o json``, the PR diff,
        ``/api/v1``): the one serializer, so a client never parses ``text``."""
        return {
            "when": str(self.when),
            "text": self.text,
            "operations": list(self.operations),
            "count": self.count,
            "resource": self.resource,
            "amount": None if self.amount is None else format_quantity(self.amount),
            "at": None if self.at is None else self.at.isoformat(),
            # a queue with flavors: each way in names its flavor
            **({"flavor": self.flavor} if self.flavor is not None else {}),
            **({"or": [a.to_json() for a in self.alternatives]} if self.alternatives else {}),
        }


# --- what blocks a pending operation ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class DependencyState:
    operation: str
    phase: str  # a Phase value, "UpstreamFailed" (will never run) or "Missing" (not in repo)


def _joined(head: str, admit: Admit) -> str:
    return f"{head}; {admit.text}"


def _explained(head: str, admit: Admit) -> str:
    """A limit's message: the head, then what would admit it, unless only raising the
    limit would (``LimitRaised``: nothing active to wait for, so the head says it all)."""
    return head if admit.when is AdmitWhen.LIMIT_RAISED else _joined(head, admit)


# What each optional backend needs the cluster to serve (group/version, kind).
BACKEND_APIS = {"pytorchjob": ("kubeflow.org/v1", "PyTorchJob")}


@dataclass(frozen=True, slots=True)
class BackendUnavailableBlock:
    """The operation's ``run.distributed.backend`` needs an API its cluster does not serve
    (as of the last read): a Kubeflow operator's CRD not installed. A fleet queue's
    operation: none of its clusters serves it (``cluster`` lists them, comma-separated)."""

    cluster: str
    backend: str

    def admit(self) -> Admit:
        return Admit(
            AdmitWhen.BACKEND_SERVED,
            "admitted when the cluster serves it (install the operator), "
            "or with run.distributed.backend: job",
        )

    def message(self) -> str:
        api, kind = BACKEND_APIS.get(self.backend, ("", self.backend))
        what = f"{api} {kind}".strip()
        return _joined(
            f"{'clusters' if ', ' in self.cluster else 'cluster'} {self.cluster} "
            f"{'do' if ', ' in self.cluster else 'does'} not serve {what} (backend {self.backend})",
            self.admit(),
        )

    def to_json(self) -> dict[str, Any]:
        api, kind = BACKEND_APIS.get(self.backend, ("", self.backend))
        return {"cluster": self.cluster, "backend": self.backend, "apiVersion": api, "kind": kind}


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


# The ``resource`` of a shortfall or a release counted in pods (``maxPods``).
PODS = "pods"


def _whole(request: Decimal, replicas: int, note: str = "") -> str:
    """A distributed operation's request, with how it adds up: ``8 (4 replicas \u00d7 2)``,
    and ``note`` inside the parentheses."""
    text = format_quantity(request)
    if replicas <= 1:
        return text
    each = format_quantity(request / replicas)
    return f"{text} ({replicas} replicas \u00d7 {each}{note})"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """The operation's whole request of ``resource`` (every replica) over the queue's
    limit of it; ``resource`` is ``pods`` for ``maxPods``."""

    resource: str
    request: Decimal
    quota: Decimal
    replicas: int = 1
    flavor: str | None = None

    def text(self, queue: str) -> str:
        if self.resource == PODS:
            return (
                f"needs {format_quantity(self.request)} pods but {queue}'s maxPods is "
                f"{format_quantity(self.quota)}"
            )
        of = f"{self.flavor} " if self.flavor else ""
        return (
            f"needs {self.resource} {_whole(self.request, self.replicas)} but {queue}'s "
            f"{of}quota is {format_quantity(self.quota)}"
        )


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
        parts = "; ".join(s.text(self.queue) for s in self.exceeds)
        return _joined(parts, self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "exceeds": [
                {
                    "resource": s.resource,
                    "request": format_quantity(s.request),
                    "quota": format_quantity(s.quota),
                    **({"replicas": s.replicas} if s.replicas > 1 else {}),
                    **({"flavor": s.flavor} if s.flavor else {}),
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
        return _explained(self._head(), self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            self.scope: self.name,
            "active": self.active,
            "concurrency": self.limit,
            "releasesNeeded": self.releases,
            "activeOperations": list(self.active_operations),
        }


@dataclass(frozen=True, slots=True)
class MaxPodsBlock:
    """``maxPods``: ``active`` of ``limit`` pods are taken (this plan's dispatches included)
    and the operation needs ``request`` more, all at once; ``released_by`` are the fewest
    active operations whose pods would make room."""

    queue: str
    request: int
    active: int
    limit: int
    released_by: tuple[str, ...]
    released_by_count: int

    @property
    def release(self) -> int:
        return self.active + self.request - self.limit

    def _head(self) -> str:
        return (
            f"needs {self.request} pods; {self.queue} has {self.active} of {self.limit} "
            "(maxPods) active"
        )

    def admit(self) -> Admit:
        if not self.released_by:
            return Admit(
                AdmitWhen.LIMIT_RAISED,
                f"admitted when {self.queue}'s maxPods is raised",
                resource=PODS,
                amount=Decimal(self.release),
            )
        who = _names(self.released_by, self.released_by_count)
        pods = "1 pod is" if self.release == 1 else f"{self.release} pods are"
        return Admit(
            AdmitWhen.RESOURCES_RELEASED,
            f"admitted when {pods} released by {who}",
            self.released_by,
            self.released_by_count,
            PODS,
            Decimal(self.release),
        )

    def message(self) -> str:
        return _explained(self._head(), self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "pods": self.request,
            "activePods": self.active,
            "maxPods": self.limit,
            "release": self.release,
            "releasedBy": list(self.released_by),
        }


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """``request`` is the operation's whole request of ``resource``: a distributed
    operation (``replicas`` > 1) is admitted all at once or not at all."""

    queue: str
    resource: str
    request: Decimal
    used: Decimal  # including this plan's dispatches
    quota: Decimal
    release: Decimal  # how much must be released before this operation fits
    released_by: tuple[str, ...]  # the fewest active operations that would release enough
    released_by_count: int
    replicas: int = 1
    flavor: str | None = None  # the flavor whose quota this is (a queue with flavors)

    def _head(self) -> str:
        whole = _whole(self.request, self.replicas, ", all or nothing")
        if self.flavor:
            return (
                f"needs {self.resource} {whole}; {self.queue} uses "
                f"{format_quantity(self.used)} of its {format_quantity(self.quota)} {self.flavor}"
            )
        return (
            f"needs {self.resource} {whole}; "
            f"{self.queue} uses {format_quantity(self.used)} of {format_quantity(self.quota)}"
        )

    def admit(self) -> Admit:
        if not self.released_by:
            of = f"{self.flavor} " if self.flavor else ""
            return Admit(
                AdmitWhen.LIMIT_RAISED,
                f"admitted when {self.queue}'s {of}{self.resource} quota is raised",
                resource=self.resource,
                amount=self.release,
                flavor=self.flavor,
            )
        amount = _amount_phrase(self.resource, self.release, self.flavor)
        who = _names(self.released_by, self.released_by_count)
        return Admit(
            AdmitWhen.RESOURCES_RELEASED,
            f"admitted when {amount} released by {who}",
            self.released_by,
            self.released_by_count,
            self.resource,
            self.release,
            flavor=self.flavor,
        )

    def message(self) -> str:
        return _explained(self._head(), self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "resource": self.resource,
            "request": format_quantity(self.request),
            "used": format_quantity(self.used),
            "quota": format_quantity(self.quota),
            "release": format_quantity(self.release),
            "releasedBy": list(self.released_by),
            **({"replicas": self.replicas} if self.replicas > 1 else {}),
            **({"flavor": self.flavor} if self.flavor else {}),
        }


@dataclass(frozen=True, slots=True)
class FlavorsQuotaBlock:
    """``QuotaExceeded`` in a queue with flavors, when more than one flavor was tried: why
    each did not fit (in the queue's order); any of them releasing enough admits it."""

    queue: str
    tried: tuple[QuotaBlock, ...]

    def admit(self) -> Admit:
        ways = [b.admit() for b in self.tried]
        first = ways[0]
        text = first.text
        for way in ways[1:]:
            text += ", or " + way.text.removeprefix("admitted when ")
        return replace(first, text=text, alternatives=tuple(ways[1:]))

    def message(self) -> str:
        tried = "; ".join(f"{b.flavor}: {b._head()}" for b in self.tried)
        return _explained(f"no flavor of {self.queue} fits ({tried})", self.admit())

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "flavors": [b.to_json() for b in self.tried]}


@dataclass(frozen=True, slots=True)
class NoEligibleFlavorBlock:
    """``NoEligibleFlavor``: the op's own nodeSelector or required node affinity contradicts
    the ``nodeLabels`` of every flavor of its queue."""

    queue: str
    conflicts: tuple[tuple[str, str], ...]  # (flavor, why), in the queue's order

    def admit(self) -> Admit:
        return Admit(
            AdmitWhen.NEVER,
            "it can never be admitted unless its pins or the queue's flavors change",
        )

    def message(self) -> str:
        why = "; ".join(f"{f}: {reason}" for f, reason in self.conflicts)
        return _joined(f"it may use no flavor of {self.queue} ({why})", self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "flavors": [{"flavor": f, "conflict": why} for f, why in self.conflicts],
            "neverRuns": True,
        }


class MemberState(enum.StrEnum):
    """How a fleet queue's cluster stood for one operation (check 10), in check order."""

    UNREACHABLE = "Unreachable"  # it could not be read this cycle
    BACKEND_UNAVAILABLE = "BackendUnavailable"  # it does not serve the op's backend's API
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
    # the free amounts suffice in all, but not node by node: no node (or too few) has room
    # for a whole pod
    scattered: bool = False

    def phrase(self) -> str:
        state = self.state
        if state is MemberState.UNREACHABLE:
            return f"{self.cluster} cannot be read"
        if state is MemberState.BACKEND_UNAVAILABLE:
            return f"{self.cluster} does not serve its backend"
        if state is MemberState.CONCURRENCY_LIMIT:
            return f"{self.cluster} is at its concurrency"
        if state is MemberState.OVER_CLUSTER_QUOTA:
            return f"{self.cluster} would exceed its clusterQuota of {self.short}"
        if state is MemberState.NOT_OBSERVED:
            return f"{self.cluster}'s capacity is not observed"
        free = ", ".join(f"{r} {format_quantity(a)}" for r, a in self.free.items()) or "nothing"
        if self.scattered:
            return f"{self.cluster} has {free} free, but not on one node per pod"
        return f"{self.cluster} has {free} free"

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "state": str(self.state),
            "free": {r: format_quantity(a) for r, a in self.free.items()},
            "short": self.short,
            "scattered": self.scattered,
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


def _utc(at: datetime) -> str:
    """``2026-01-01T11:00:00Z``: to the second, rounded up (a latest end time; a dispatch
    time read from a Job's annotation has microseconds)."""
    at = at.astimezone(UTC)
    if at.microsecond:
        at = at.replace(microsecond=0) + timedelta(seconds=1)
    return at.isoformat().replace("+00:00", "Z")


def _borrowers_finish(block: LentQuotaBlock | FairShareBlock, then: str = "") -> Admit:
    """``BorrowersFinish``: the cohort's borrowers of the block's pool end (by their latest
    end, when known), ``then`` what else must hold."""
    who = _names(block.borrowers, block.borrowers_count) or "the borrowers"
    when = f"by {_utc(block.ends_by)} at the latest" if block.ends_by else "(end unknown)"
    verb = "ends" if block.borrowers_count == 1 else "end"
    return Admit(
        AdmitWhen.BORROWERS_FINISH,
        f"admitted when {who} {verb}, {when}{then}",
        block.borrowers,
        block.borrowers_count,
        block.resource,
        block.request,
        block.ends_by,
        flavor=block.flavor,
    )


def _pool_json(block: LentQuotaBlock | FairShareBlock) -> dict[str, Any]:
    """What a cohort block's JSON says of its pool and its borrowers."""
    return {
        "queue": block.queue,
        "cohort": block.cohort,
        "resource": block.resource,
        "request": format_quantity(block.request),
        "borrowers": list(block.borrowers),
        "endsBy": _utc(block.ends_by) if block.ends_by else None,
        **({"flavor": block.flavor} if block.flavor else {}),
    }


@dataclass(frozen=True, slots=True)
class LentQuotaBlock:
    """``WaitingForLentQuota``: the op fits its queue's own quota, but part of it is lent to
    other queues of the cohort; the borrowers end by ``ends_by`` at the latest (their
    dispatch time plus timeout; None when one's dispatch time is not known)."""

    queue: str
    cohort: str
    resource: str
    request: Decimal
    lent: Decimal  # of the queue's quota, in use by borrowers
    borrowers: tuple[str, ...]  # the borrowing operations, up to MAX_LISTED
    borrowers_count: int
    ends_by: datetime | None
    flavor: str | None = None

    def _head(self) -> str:
        return (
            f"needs {_of(self.resource, self.flavor)} {format_quantity(self.request)}; "
            f"{format_quantity(self.lent)} of {self.queue}'s quota is lent in cohort "
            f"{self.cohort}"
        )

    def admit(self) -> Admit:
        return _borrowers_finish(self)

    def message(self) -> str:
        return _joined(self._head(), self.admit())

    def to_json(self) -> dict[str, Any]:
        return {**_pool_json(self), "lent": format_quantity(self.lent)}


@dataclass(frozen=True, slots=True)
class FairShareBlock:
    """``WaitingForFairShare``: the op may borrow, and its cohort had idle ``resource`` for
    it when borrowing began this cycle, but queues with a lower weighted share borrowed it
    first (docs/dispatch.md, "Fair sharing"). ``share`` is its queue's weighted share;
    ``ahead`` the queues that borrowed it this cycle. Nothing is preempted: it borrows when
    the borrowers end and its share is the lowest of those waiting."""

    queue: str
    cohort: str
    resource: str
    request: Decimal
    share: Decimal
    weight: Decimal
    ahead: tuple[str, ...]
    borrowers: tuple[str, ...]  # the borrowing operations, up to MAX_LISTED
    borrowers_count: int
    ends_by: datetime | None
    flavor: str | None = None

    def _head(self) -> str:
        return (
            f"waits for its fair share: needs {_of(self.resource, self.flavor)} "
            f"{format_quantity(self.request)} borrowed in cohort {self.cohort}, lent first to "
            f"{', '.join(self.ahead)} (by weighted share, then priority; {self.queue}'s share "
            f"is {self.share:.3f} at weight {format_quantity(self.weight)})"
        )

    def admit(self) -> Admit:
        return _borrowers_finish(self, ", and its share is the lowest waiting")

    def message(self) -> str:
        return _joined(self._head(), self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            **_pool_json(self),
            "share": str(self.share.quantize(Decimal("0.001"))),
            "weight": format_quantity(self.weight),
            "ahead": list(self.ahead),
        }


@dataclass(frozen=True, slots=True)
class BorrowingNotAllowedBlock:
    """``BorrowingNotAllowed``: the op would fit by borrowing, but only an op with a timeout
    of at most the cohort's ``maxBorrowDuration`` may borrow. ``quota`` is what it waits for
    meanwhile: its own queue's quota."""

    quota: QuotaBlock
    cohort: str
    max_borrow_seconds: int
    timeout_seconds: int | None

    def admit(self) -> Admit:
        own = self.quota.admit()
        limit = format_duration(self.max_borrow_seconds)
        return replace(own, text=f"{own.text}; or by borrowing, with a timeout of at most {limit}")

    def message(self) -> str:
        has = (
            "it has no timeout"
            if self.timeout_seconds is None
            else f"its timeout is {format_duration(self.timeout_seconds)}"
        )
        q = self.quota
        return _joined(
            f"needs {q.resource} {format_quantity(q.request)}; {q.queue} uses "
            f"{format_quantity(q.used)} of {format_quantity(q.quota)}; it would fit by "
            f"borrowing in cohort {self.cohort}, but "
            f"{has} (at most {format_duration(self.max_borrow_seconds)} may borrow)",
            self.admit(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **self.quota.to_json(),
            "cohort": self.cohort,
            "maxBorrowSeconds": self.max_borrow_seconds,
            "timeoutSeconds": self.timeout_seconds,
        }


@dataclass(frozen=True, slots=True)
class CohortLimitBlock:
    """``CohortLimit``: the cohort's total cap on ``resource`` is reached."""

    cohort: str
    resource: str
    request: Decimal
    used: Decimal  # by all the cohort's queues, this plan's dispatches included
    cap: Decimal

    def admit(self) -> Admit:
        need = self.used + self.request - self.cap
        amount = _amount_phrase(self.resource, need)
        return Admit(
            AdmitWhen.RESOURCES_RELEASED,
            f"admitted when {amount} released in cohort {self.cohort}",
            resource=self.resource,
            amount=need,
        )

    def message(self) -> str:
        return _joined(
            f"needs {self.resource} {format_quantity(self.request)}; cohort {self.cohort} "
            f"uses {format_quantity(self.used)} of its cap {format_quantity(self.cap)}",
            self.admit(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "cohort": self.cohort,
            "resource": self.resource,
            "request": format_quantity(self.request),
            "used": format_quantity(self.used),
            "cap": format_quantity(self.cap),
        }


def _budget_amount(value: Decimal) -> str:
    """A budget amount as people read it: at most 4 decimals, no trailing zeros."""
    rounded = value.quantize(Decimal("0.0001"))
    text = format(rounded, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _local_time(moment: datetime, timezone: str) -> str:
    """``2026-12-04 00:00 CET``: a window boundary in the budget's timezone."""
    return moment.astimezone(zone(timezone)).strftime("%Y-%m-%d %H:%M %Z")


@dataclass(frozen=True, slots=True)
class BudgetBlock:
    """``spent + committed + reservation > limit`` in the queue's current window.

    ``committed`` includes this plan's dispatches. ``admit_at``: the first window reset
    at which the reservations carried into the new window leave room for this one (the
    next reset, unless running operations reserve past it); None when the reservation
    alone is over the limit. ``after_reset``: whether that is a later reset than the
    next, i.e. committed reservations must fall due first."""

    queue: str
    unit: str  # the currency, or ``<resource>-hours``
    per: str
    limit: Decimal
    spent: Decimal
    committed: Decimal
    reservation: Decimal
    window_start: datetime
    window_end: datetime
    timezone: str
    admit_at: datetime | None
    after_reset: bool = False

    def _amount(self, value: Decimal) -> str:
        return f"{_budget_amount(value)} {self.unit}".rstrip()

    def admit(self) -> Admit:
        if self.admit_at is None:
            if self.reservation > self.limit:
                text = (
                    f"admitted when {self.queue}'s budget is raised or the operation's timeout "
                    "lowered (its reservation alone is over the limit)"
                )
            else:
                text = f"admitted when running operations of {self.queue} end early"
            return Admit(AdmitWhen.LIMIT_RAISED, text, resource=self.unit, amount=self.reservation)
        when = _local_time(self.admit_at, self.timezone)
        if self.after_reset:
            text = (
                f"admitted at the window reset at {when}, when enough committed reservation "
                "has fallen due (sooner if runs end early)"
            )
        else:
            text = (
                f"admitted when the {self.per} window resets at {when} (sooner if a run ends early)"
            )
        return Admit(
            AdmitWhen.BUDGET_WINDOW_RESETS,
            text,
            resource=self.unit,
            amount=self.reservation,
            at=self.admit_at,
        )

    def _head(self) -> str:
        return (
            f"needs {self._amount(self.reservation)}; {self.queue} spent "
            f"{self._amount(self.spent)} and committed {self._amount(self.committed)} of "
            f"{self._amount(self.limit)} this {self.per}"
        )

    def message(self) -> str:
        return _joined(self._head(), self.admit())

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "unit": self.unit,
            "per": self.per,
            "limit": _budget_amount(self.limit),
            "spent": _budget_amount(self.spent),
            "committed": _budget_amount(self.committed),
            "reservation": _budget_amount(self.reservation),
            "windowStart": self.window_start.isoformat(),
            "windowEnd": self.window_end.isoformat(),
            "admitAt": self.admit_at.isoformat() if self.admit_at is not None else None,
        }


@dataclass(frozen=True, slots=True)
class LedgerBlock:
    """A budgeted queue whose spend cannot be known: a ledger file (or an entry of it, that
    could be this queue's) on the status branch cannot be read. Dispatching would trust a
    spend that may be too low, so nothing is charged to the budget until it is repaired."""

    queue: str
    problem: str  # the first unreadable file or entry, as file:line:col: message

    def admit(self) -> Admit:
        return Admit(
            AdmitWhen.LEDGER_REPAIRED,
            "admitted when the ledger on the status branch is repaired",
        )

    def message(self) -> str:
        return _joined(
            f"{self.queue}'s budget cannot be checked: its ledger cannot be read ({self.problem})",
            self.admit(),
        )

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "ledgerProblem": self.problem}


@dataclass(frozen=True, slots=True)
class BudgetSummary:
    """A budgeted queue's window: ``spent`` by finished runs, ``committed`` by active ones
    (before this plan) and ``committed_after`` (with this plan's dispatches)."""

    unit: str
    per: str
    limit: Decimal
    spent: Decimal
    committed: Decimal
    committed_after: Decimal
    window_start: datetime
    window_end: datetime
    timezone: str = "UTC"  # the org's, in which its windows (and their forecast) are days


BlockedBy = (
    ClusterUnreachableBlock
    | BackendUnavailableBlock
    | QueuePausedBlock
    | ApprovalBlock
    | DependenciesBlock
    | UpstreamFailedBlock
    | ExceedsQuotaBlock
    | BehindHeadBlock
    | ConcurrencyBlock
    | MaxPodsBlock
    | QuotaBlock
    | FlavorsQuotaBlock
    | NoEligibleFlavorBlock
    | FleetBlock
    | LentQuotaBlock
    | BorrowingNotAllowedBlock
    | CohortLimitBlock
    | FairShareBlock
    | BudgetBlock
    | LedgerBlock
)


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dispatch:
    operation: str
    queue: str
    cluster: str
    flavor: str | None = None  # the flavor assigned (None: the queue has no flavors)


@dataclass(frozen=True, slots=True)
class Pending:
    operation: str
    queue: str
    reason: PendingReason
    blocked_by: BlockedBy
    # no position: it is derived where shown (``Plan.positions``), so a commit that takes
    # some operations out of a long queue keeps the others' entries as they are

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
    # Two counts, each needed: ``used``, ``pods``, ``borrowed``, ``lent`` (and the budget's
    # ``committed``) as observed, and their ``*_after`` twins as the admission loop counted
    # them with this plan's dispatches (cohort shares and budget reservations no dispatch
    # list can redo). The plan views show the change (``0+1/2``, ``committedAfter``); a
    # report holds its one count in ``*_after`` (a dry run's: the observed one).
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
    max_pods: int | None = None
    pods: int = 0  # pods of the active operations (every replica), before this plan
    pods_after: int = 0  # with this plan applied
    # Cohort borrowing, observed (before this plan), per quota resource: how much of its use
    # is above its quota (borrowed) and how much of its quota other queues use (lent).
    cohort: str | None = None
    borrowed: Mapping[str, Decimal] = field(default_factory=dict)
    lent: Mapping[str, Decimal] = field(default_factory=dict)
    borrowed_after: Mapping[str, Decimal] = field(default_factory=dict)  # this plan applied
    lent_after: Mapping[str, Decimal] = field(default_factory=dict)
    budget: BudgetSummary | None = None
    members: tuple[FleetSlice, ...] = ()  # a fleet queue's clusters, in choice order
    # A queue with flavors: each flavor's share of the above, in the queue's order (the
    # maps above are then the sums over its flavors)
    flavors: tuple[FlavorUsage, ...] = ()
    fair_weight: Decimal = Decimal(1)


@dataclass(frozen=True, slots=True)
class FlavorUsage:
    """One flavor of a queue: its quota and use per resource, observed (before this plan)
    and with this plan applied, and in a cohort what it borrowed and lent of the flavor."""

    name: str
    quota: Mapping[str, Decimal]
    used: Mapping[str, Decimal]
    used_after: Mapping[str, Decimal]
    borrowed: Mapping[str, Decimal] = field(default_factory=dict)
    lent: Mapping[str, Decimal] = field(default_factory=dict)
    borrowed_after: Mapping[str, Decimal] = field(default_factory=dict)
    lent_after: Mapping[str, Decimal] = field(default_factory=dict)


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

    def positions(self) -> dict[str, int]:
        """Each pending operation's position: 1-based among its queue's pending entries,
        in consideration order. O(pending entries): a caller showing many reads it once."""
        return {p.operation: at for at, p in numbered(self.pending)}


def numbered(pending: Iterable[Pending]) -> Iterator[tuple[int, Pending]]:
    """Each entry with its position among its queue's entries of ``pending``, as
    ``enumerate`` pairs them (a plan's entries, all, give the plan's positions)."""
    counts: dict[str, int] = {}
    for p in pending:
        counts[p.queue] = at = counts.get(p.queue, 0) + 1
        yield at, p
