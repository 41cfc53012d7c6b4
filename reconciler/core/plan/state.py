"""The planner's working state: the counters it updates while it plans.

What must live here: the mutable, planner-private state of one ``plan_dispatch`` call (a
queue's candidates, usage and pending entries; the cluster and workflow counters), how step
3 counts an active run on it (``ActiveRun``, ``count_run``) and the exact inverse of each
count (``release=True``, the ``release`` methods: the what-if state of ``whatif.py`` moves
time on them), and the pending tuples the admission loop (step 4) hands to ``explain.py``
(step 6). Nothing here leaves the planner: the plan is made of ``model.py``'s frozen values.

A pending tuple is ``(operation id, operation, reason, detail)``; ``detail`` by reason:

- ``ClusterUnreachable``, ``QueuePaused``, ``AwaitingApproval``, ``QueueConcurrencyLimit``:
  ``None`` (the queue says it all);
- ``WaitingForDependencies``, ``UpstreamFailed``: the ``DependencyState`` tuple;
- ``ExceedsQuota``: the indexes of the quota resources the request alone is over (``-1``
  first when its replicas alone are over ``maxPods``);
- ``WaitingBehindHead``: ``(head id, head reason)``;
- ``MaxPodsReached``: the operation's replicas;
- ``QuotaExceeded``, ``WaitingForLentQuota``, ``CohortLimit``: ``(slot, request in units)``
  (a slot is a quota resource, or with flavors a flavor's resource: ``QueueState``);
  ``BorrowingNotAllowed``: the same and the op's timeout in seconds (or None);
- ``WorkflowParallelism``, ``ClusterConcurrencyLimit``: the full ``Counter``;
- ``NoClusterUnderQuota``, ``NoClusterHasCapacity``: the ``FleetMember`` tuple (check 10;
  step 6 recomputes it with the whole plan applied) and the flavor assigned (or None);
- ``NoEligibleFlavor``: ``None``; ``QuotaExceeded`` in a queue with flavors, when more than
  one flavor was tried: a tuple of ``(slot, request in units)``, one per flavor;
- ``WaitingForFairShare``: ``(slot, request in units)``;
- ``BudgetExceeded``: the reservation (a ``Decimal`` in the budget's unit).

They stay tuples: the admission loop builds one per pending operation, and a frozen
slotted class for the entry alone cost 7% of the plan's CPU at 100k pending (11% with
flavors; docs/benchmarks.md, "The pending tuples stay tuples").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from reconciler.core.plan.flavors import EligibleFlavors, FlavorSlots
from reconciler.core.plan.ledger import BudgetWindow, hourly_rate, hours, prices_for
from reconciler.core.plan.model import PendingReason, PlanInputError
from reconciler.core.plan.units import quota_units, request_units, to_decimal
from reconciler.core.types import (
    ClusterSpec,
    CompiledOperation,
    FlavorSpec,
    ObservedOperation,
    OrgSettings,
    QueueSpec,
)

if TYPE_CHECKING:
    from reconciler.core.plan.cohorts import CohortState

PendingTuple = tuple[str, CompiledOperation, PendingReason, Any]


class QueueState:
    """One queue while planning: its quota in units, its usage (observed, then with this
    plan's dispatches), its candidates and its pending tuples."""

    __slots__ = (
        "active",
        "active0",
        "active_ids",
        "borrow_limit",
        "budget",
        "candidates",
        "cohort",
        "deferred",
        "dispatched",
        "eligible",
        "flavors",
        "holders",
        "keys",
        "lend_limit",
        "limits",
        "pending",
        "pod_holders",
        "pods",
        "pods0",
        "quota",
        "resources",
        "slot_flavor",
        "spec",
        "units",
        "used",
        "used0",
    )

    def __init__(self, spec: QueueSpec, flavors: Mapping[str, FlavorSpec] | None = None) -> None:
        self.spec = spec
        # A slot per quota resource; a queue with flavors has a slot per (flavor, resource),
        # flavor by flavor in fallback order, so one flavor's slots are a contiguous span.
        self.flavors: tuple[FlavorSlots, ...] = ()
        if spec.flavors:
            slots: list[tuple[str, str]] = []
            quota: list[int] = []
            spans: list[FlavorSlots] = []
            known = flavors or {}
            for qf in spec.flavors:
                lo = len(slots)
                for r in sorted(qf.quota):
                    slots.append((qf.name, r))
                    quota.append(quota_units(qf.quota[r]))
                spans.append(FlavorSlots(qf.name, known.get(qf.name), lo, len(slots)))
            self.flavors = tuple(spans)
            self.resources: tuple[str, ...] = tuple(r for _, r in slots)
            self.slot_flavor: tuple[str | None, ...] = tuple(f for f, _ in slots)
            self.quota: tuple[int, ...] = tuple(quota)
        else:
            self.resources = tuple(sorted(spec.quota))
            self.slot_flavor = (None,) * len(self.resources)
            self.quota = tuple(quota_units(spec.quota[r]) for r in self.resources)
        # what a cohort pools: (flavor, resource) per slot
        self.keys: tuple[tuple[str | None, str], ...] = tuple(
            zip(self.slot_flavor, self.resources, strict=True)
        )
        self.limits: tuple[tuple[str, Decimal], ...] = tuple(
            (r, to_decimal(u)) for r, u in zip(self.resources, self.quota, strict=True)
        )
        self.used: list[int] = [0] * len(self.resources)
        self.used0: tuple[int, ...] = ()
        self.active = 0
        self.active0 = 0
        # in the order held (dicts: the what-if state releases runs, and a release is O(1))
        self.active_ids: dict[str, None] = {}
        # per quota resource: id -> units of the active operations that hold some of it
        self.holders: list[dict[str, int]] = [{} for _ in self.resources]
        # pods of the active operations (every replica), and id -> pods of each holder
        self.pods = 0
        self.pods0 = 0
        self.pod_holders: dict[str, int] = {}
        self.candidates: list[tuple[Any, ...]] = []
        self.dispatched = 0
        self.pending: list[PendingTuple] = []
        # cohort members only (cohorts.join_cohorts): the cohort, per quota resource what
        # it may borrow and lend (-1: no lending limit), and the indexes in ``pending`` of
        # the ops check 8 deferred to borrowing (step 4b)
        self.cohort: CohortState | None = None
        self.borrow_limit: tuple[int, ...] = ()
        self.lend_limit: tuple[int, ...] = ()
        self.deferred: list[int] = []
        self.budget: BudgetTrack | None = None
        # the flavors (numbers, in order) an operation may use: memoised per placement
        self.eligible = EligibleFlavors(self.flavors)
        # ``request`` without a flavor, memoised per request (most operations share a few)
        self.units: dict[tuple[Decimal | None, ...], tuple[int, ...]] = {}

    def request(self, requests: Mapping[str, Decimal], flavor: int = -1) -> tuple[int, ...]:
        """``requests`` in units per slot; with flavors, in the slots of flavor number
        ``flavor`` (0 elsewhere)."""
        get = requests.get
        if flavor < 0:
            key = tuple(map(get, self.resources))
            got = self.units.get(key)
            if got is None:
                got = self.units[key] = tuple(0 if v is None else request_units(v) for v in key)
            return got
        span = self.flavors[flavor]
        units = [0] * len(self.resources)
        resources = self.resources
        for i in range(span.lo, span.hi):
            v = get(resources[i])
            if v:
                units[i] = request_units(v)
        return tuple(units)

    def flavor_of(self, op: CompiledOperation | None, name: str | None) -> int:
        """The flavor (its number) an active operation holds quota in (``held_flavor``)."""
        for k, span in enumerate(self.flavors):
            if span.name == name:
                return k
        if op is not None:
            eligible = self.eligible(op)
            if eligible:
                return eligible[0]
        return 0

    def hold(self, op_id: str, req: tuple[int, ...], pods: int = 1) -> None:
        self.active += 1
        self.active_ids[op_id] = None
        self.pods += pods
        self.pod_holders[op_id] = pods
        used = self.used
        cohort = self.cohort
        for i, amount in enumerate(req):
            if amount:
                used[i] += amount
                self.holders[i][op_id] = amount
                if cohort is not None:  # its pools' totals move with it
                    cohort.moved(self, i, used[i] - amount, used[i])

    def release(self, op_id: str, req: tuple[int, ...], pods: int = 1) -> None:
        """The inverse of ``hold`` (the same arguments)."""
        self.active -= 1
        del self.active_ids[op_id]
        self.pods -= pods
        del self.pod_holders[op_id]
        used = self.used
        cohort = self.cohort
        for i, amount in enumerate(req):
            if amount:
                used[i] -= amount
                del self.holders[i][op_id]
                if cohort is not None:
                    cohort.moved(self, i, used[i] + amount, used[i])


class Counter:
    """The active operations of a cluster or a workflow, against its limit (if any)."""

    __slots__ = ("active", "ids", "limit")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.active = 0
        # in the order held (a dict: a cluster may hold thousands, and ``release`` is O(1))
        self.ids: dict[str, None] = {}

    def hold(self, op_id: str) -> None:
        self.active += 1
        self.ids[op_id] = None

    def release(self, op_id: str) -> None:
        self.active -= 1
        del self.ids[op_id]


class Counters:
    """The cluster counters (one per Cluster, more as operations name others) and the
    workflow counters (one per parent, made when first needed)."""

    __slots__ = ("clusters", "workflows")

    def __init__(self, clusters: Mapping[str, ClusterSpec]) -> None:
        self.clusters: dict[str, Counter] = {
            name: Counter(spec.concurrency) for name, spec in clusters.items()
        }
        self.workflows: dict[str, Counter] = {}

    def cluster(self, name: str) -> Counter:
        c = self.clusters.get(name)
        if c is None:
            c = self.clusters[name] = Counter(None)
        return c

    def workflow(self, parent: str, limit: int | None) -> Counter:
        w = self.workflows.get(parent)
        if w is None:
            w = self.workflows[parent] = Counter(limit)
        return w


class ActiveRun(NamedTuple):
    """An active operation as step 3 counts it: what its observation says, else what its
    operation says, else its queue's."""

    oid: str
    queue: QueueState | None  # None: its queue is not in the repo
    cluster: str | None
    requests: Mapping[str, Decimal]
    pods: int  # every replica
    flavor: int  # the number of the flavor it holds quota in (-1: none)
    req: tuple[int, ...]  # its requests in units per slot of its queue (of that flavor)
    workflow: tuple[str, int | None] | None  # (parent, concurrency)
    started: datetime | None
    timeout: int | None  # as dispatched, else its operation's, else its queue's default

    @staticmethod
    def of(
        obs: ObservedOperation,
        known: CompiledOperation | None,
        qstate: Mapping[str, QueueState],
    ) -> ActiveRun:
        qname = obs.queue or (known.queue if known is not None else None)
        aq = qstate.get(qname) if qname is not None else None
        cname = obs.cluster or (known.cluster if known is not None else None)
        if cname is None and aq is not None:
            cname = aq.spec.cluster
        requests = obs.requests if obs.requests is not None else (known.requests if known else {})
        pods = obs.pods if obs.pods is not None else (known.replicas if known else 1)
        flavor = aq.flavor_of(known, obs.flavor) if aq is not None and aq.flavors else -1
        req = aq.request(requests, flavor) if aq is not None else ()
        wf = known.workflow if known is not None else None
        # the run's own timeout, as dispatched: its file may have changed or gone
        timeout = obs.timeout
        if timeout is None:
            if known is not None:
                timeout = known.timeout
            elif aq is not None:
                timeout = aq.spec.default_timeout
        return ActiveRun(
            obs.operation,
            aq,
            cname,
            requests,
            pods,
            flavor,
            req,
            None if wf is None else (wf.parent, wf.concurrency),
            obs.started_at,
            timeout,
        )


def needed_slots(req: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """A request in units per slot (``QueueState.request``) as (slot, units) where not 0:
    all that checks 7 and 8 compare, and what a release gives back (the what-if state's
    buckets and the estimate's queues apart keep it)."""
    return tuple((i, units) for i, units in enumerate(req) if units)


def count_run(run: ActiveRun, counters: Counters, *, release: bool = False) -> None:
    """Count ``run`` in its queue, cluster and workflow (step 3: its queue's budget, cohort
    and fleet usage are counted by their own steps); with ``release``, the exact inverse
    (a run that ended, in the what-if state)."""
    aq = run.queue
    if aq is not None:
        (aq.release if release else aq.hold)(run.oid, run.req, run.pods)
    if run.cluster is not None:
        c = counters.cluster(run.cluster)
        (c.release if release else c.hold)(run.oid)
    if run.workflow is not None:
        w = counters.workflow(*run.workflow)
        (w.release if release else w.hold)(run.oid)


class BudgetTrack:
    """A budgeted queue's window while planning: ``spent`` by its finished runs (the
    ledger), ``committed`` by its active ones (cost so far in the window and cost to their
    timeout), with this plan's dispatches added; ``holds`` the (deadline, hourly rate) of
    each active run, for when its reservation falls due."""

    __slots__ = (
        "clusters",
        "committed",
        "committed0",
        "holds",
        "now",
        "org",
        "queue",
        "rates",
        "unreadable",
        "window",
    )

    def __init__(
        self,
        window: BudgetWindow,
        queue: QueueSpec,
        org: OrgSettings,
        clusters: Mapping[str, ClusterSpec],
        now: datetime,
    ) -> None:
        self.window = window
        self.queue = queue
        self.org = org
        self.clusters = clusters
        self.now = now
        self.committed = Decimal(0)
        self.committed0 = Decimal(0)
        self.holds: list[tuple[datetime, Decimal]] = []
        # prices per (cluster, flavor)
        self.rates: dict[tuple[str, str | None], dict[str, Decimal]] = {}
        # why what it spent cannot be known (its ledger is unreadable): nothing dispatches
        self.unreadable: str | None = None

    @property
    def limit(self) -> Decimal:
        return self.window.budget.limit

    @property
    def spent(self) -> Decimal:
        return self.window.spent

    def rate(
        self, requests: Mapping[str, Decimal], cluster: str, flavor: str | None = None
    ) -> Decimal:
        """What one hour of a run with ``requests`` on ``cluster`` (in ``flavor``) counts."""
        prices = self.rates.get((cluster, flavor))
        if prices is None:
            spec = self.clusters.get(cluster)
            prices = self.rates[(cluster, flavor)] = prices_for(
                self.org.prices,
                spec.prices if spec is not None else {},
                flavor,
                self.org.flavor_prices,
                spec.flavor_prices if spec is not None else {},
            )
        return hourly_rate(requests, prices, self.window.budget.hours_of)

    def reservation(
        self, op: CompiledOperation, cluster: str | None = None, flavor: str | None = None
    ) -> tuple[Decimal, Decimal, int]:
        """(hourly rate, reservation, timeout seconds) of dispatching ``op`` now to
        ``cluster`` (its own by default; a fleet queue's: the one check 10 chose), at that
        cluster's prices (of ``flavor``, the one check 8 assigned)."""
        timeout = op.timeout if op.timeout is not None else self.queue.default_timeout
        if timeout is None:
            raise PlanInputError(
                f"operation {op.id} has no timeout, but its queue {self.queue.name} has a budget"
            )
        rate = self.rate(op.requests, op.cluster if cluster is None else cluster, flavor)
        return rate, rate * Decimal(timeout) / Decimal(3600), timeout

    def hold_active(
        self,
        requests: Mapping[str, Decimal],
        cluster: str,
        started: datetime | None,
        timeout: int | None,
        flavor: str | None = None,
    ) -> None:
        """An active run: its cost so far in the window and its cost to its timeout (none
        when it has no timeout: it is counted as it runs)."""
        rate = self.rate(requests, cluster, flavor)
        now = self.now
        start = started if started is not None and started <= now else now
        so_far = rate * hours(max(start, self.window.window.start), now)
        end = deadline(start, timeout) if timeout else now
        self.committed += so_far + rate * hours(now, end)
        if end > now:
            self.holds.append((end, rate))

    def hold_run(self, run: ActiveRun) -> None:
        """``hold_active`` for an active run of this queue, as step 3 counts it."""
        q = run.queue
        assert q is not None
        self.hold_active(
            run.requests,
            run.cluster or q.spec.cluster,
            run.started,
            run.timeout,
            q.flavors[run.flavor].name if run.flavor >= 0 else None,
        )

    def hold_dispatch(self, rate: Decimal, reservation: Decimal, timeout: int) -> None:
        self.committed += reservation
        self.holds.append((deadline(self.now, timeout), rate))


# A reservation's deadline is at most this far ahead (a timeout may be up to 2^63 s, which
# no datetime can hold); the reservation itself is always the full timeout's.
MAX_RESERVED = 100 * 366 * 86400
_LAST = datetime.max.replace(tzinfo=UTC)


def deadline(start: datetime, timeout: int) -> datetime:
    """``start`` plus ``timeout`` seconds, at most ``MAX_RESERVED`` ahead, and a datetime's
    last instant where that is past year 9999 (``plan --now`` may be as late as 9998)."""
    try:
        return start + timedelta(seconds=min(timeout, MAX_RESERVED))
    except OverflowError:
        return _LAST
