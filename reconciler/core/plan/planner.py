"""The planner's hot path: ``plan_dispatch`` (and ``plan_repo`` over a compiled repo) in
numbered steps, one named call each (docs/dispatch.md, "Steps"):

1. ``index_observed``: the observations by id (one observed twice is refused);
2. ``index_operations``: the operations by id, the candidates (the ``Queued`` ones)
   grouped by queue, with their consideration-order sort keys;
3. ``count_active``: the usage of the active operations, per queue, cluster and workflow,
   those removed from the repo and those stopped in it; the fleet queues' usage per
   cluster (``fleet.py``);
4. ``admit``: checks 0..11 (``checks.CHECKS``) for each candidate, in one global order,
   counting each dispatch before the next candidate (check 10 chooses a fleet queue's
   cluster); then ``cohorts.borrow`` (4b): the ops that fit only by borrowing from their
   cohort, in the same order (``admit_dispatch`` stops here: steps 1-4 alone, the same
   calls, for the what-if replay of a history, ``history.py``; the start-time estimate's
   what-if state, ``whatif.py``, builds with steps 1-3 and admits with 4 and 4b: the same
   calls again);
5. ``prune``: the stops: ``stopped: true`` ones as they are, removed ones behind the
   mass-deletion guard;
6. ``explain``: the pending entries and queue summaries (``explain.py``).

What must live here: the steps, their order, and the admission loop. The loop applies the
checks inline, in ``checks.CHECKS``' order, one commented block per check (``# N: ...``):
it runs once per candidate, and a function call per check made it 15-20% slower.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from reconciler.core import gcpause
from reconciler.core.observation.capacity import ClusterCapacity
from reconciler.core.plan.cohorts import borrow, join_cohorts
from reconciler.core.plan.dependencies import Dependencies
from reconciler.core.plan.explain import explain
from reconciler.core.plan.flavors import fit_flavor, flavors_exceeded
from reconciler.core.plan.fleet import FleetState
from reconciler.core.plan.ledger import BudgetWindow, Ledger, LedgerEntry, window_at
from reconciler.core.plan.ledger import spent as spent_in
from reconciler.core.plan.model import (
    Dispatch,
    PendingReason,
    Plan,
    PlanInputError,
    PruneRefusal,
    Stop,
    StopReason,
)
from reconciler.core.plan.state import ActiveRun, BudgetTrack, Counters, QueueState, count_run
from reconciler.core.plan.units import request_units
from reconciler.core.types import (
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    CompiledRepo,
    DistributedBackend,
    FlavorSpec,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueSpec,
    QueueStrategy,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    capacity: Mapping[str, ClusterCapacity] | None = None,
    backends: Mapping[str, frozenset[str]] | None = None,
    cohorts: Mapping[str, CohortSpec] | None = None,
    ledger: Iterable[LedgerEntry] = (),
    flavors: Mapping[str, FlavorSpec] | None = None,
) -> Plan:
    """Decide what to dispatch, what waits and why, and what to stop.

    ``observed`` lists what the clusters say; unlisted operations are ``Queued``.
    ``rejected`` are ids still in the repo but refused by policy: they are never pruned.
    ``unreachable`` clusters could not be read: nothing is dispatched to or stopped in them
    (check 0), and their active operations keep counting as observed. ``backends``: per
    cluster, the optional backends (``run.distributed.backend`` values other than ``job``)
    whose API it serves; an operation whose backend its cluster does not serve waits with
    ``BackendUnavailable`` (check 0; a cluster missing from it serves none).
    ``cohorts``: the cohorts the queues name (docs/dispatch.md, "Cohorts").
    ``ledger``: the finished runs, for what budgeted queues spent in their window (check 11).
    ``flavors``: the flavors the queues name (docs/dispatch.md, "Flavors").
    ``capacity`` is the free capacity observed per cluster, for the fleet queues' choice
    of cluster (check 10); a cluster without one is not observed.
    Raises :class:`PlanInputError` when the inputs contradict each other.
    """
    # planning allocates a few objects per operation and keeps them all: the cyclic
    # collector would rescan the whole heap meanwhile, costing more than the planning
    with gcpause.paused():
        return _plan(
            operations,
            queues,
            clusters,
            observed,
            org,
            now,
            rejected,
            frozenset(unreachable),
            capacity or {},
            backends or {},
            cohorts or {},
            ledger,
            flavors or {},
        )


def plan_repo(
    repo: CompiledRepo,
    observed: Iterable[ObservedOperation],
    now: datetime,
    *,
    superseded: Collection[str] = (),
    unreachable: Collection[str] = (),
    capacity: Mapping[str, ClusterCapacity] | None = None,
    backends: Mapping[str, frozenset[str]] | None = None,
    ledger: Iterable[LedgerEntry] = (),
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
        capacity=capacity,
        backends=backends,
        cohorts=repo.cohorts,
        ledger=ledger,
        flavors=repo.flavors,
    )


_NONE: frozenset[str] = frozenset()
_JOB = DistributedBackend.JOB


class QueueAdmission(NamedTuple):
    """One queue after steps 1-4: who waits and why, and what is left of it."""

    name: str
    strategy: QueueStrategy
    concurrency: int | None
    active: int  # observed, plus this admission's dispatches
    pending: tuple[tuple[str, PendingReason], ...]  # (operation id, reason), in order
    free: tuple[tuple[str, int], ...]  # per quota resource: the units left (own quota)
    pods_free: int | None  # maxPods less the pods held; None: no maxPods
    cohort: bool  # a cohort member (what is left depends on the other members)
    budgeted: bool  # a queue with a budget (what is left depends on its window)


class Admission(NamedTuple):
    dispatch: tuple[Dispatch, ...]  # in dispatch order
    queues: tuple[QueueAdmission, ...]  # in consideration order


def admit_dispatch(
    operations: Iterable[CompiledOperation],
    queues: Mapping[str, QueueSpec],
    clusters: Mapping[str, ClusterSpec],
    observed: Iterable[ObservedOperation],
    org: OrgSettings,
    now: datetime,
    *,
    unreachable: Collection[str] = (),
    capacity: Mapping[str, ClusterCapacity] | None = None,
    backends: Mapping[str, frozenset[str]] | None = None,
    cohorts: Mapping[str, CohortSpec] | None = None,
    ledger: Iterable[LedgerEntry] = (),
    flavors: Mapping[str, FlavorSpec] | None = None,
) -> Admission:
    """Steps 1-4 of :func:`plan_dispatch` (the same calls, the same inputs), without
    pruning and explaining: what is dispatched and why each candidate waits. For callers
    that replan many times and show no explanation (the what-if replay of a history,
    ``core/plan/history.py``); nothing is pruned (no observed operation counts as rejected)."""
    with gcpause.paused():
        steps = _admit_steps(
            operations,
            queues,
            clusters,
            observed,
            org,
            now,
            (),
            frozenset(unreachable),
            capacity or {},
            backends or {},
            cohorts or {},
            ledger,
            flavors or {},
        )
        return Admission(
            tuple(steps.dispatch),
            tuple(
                QueueAdmission(
                    q.spec.name,
                    q.spec.strategy,
                    q.spec.concurrency,
                    q.active,
                    tuple((p[0], p[2]) for p in q.pending),
                    tuple((r, q.quota[i] - q.used[i]) for i, r in enumerate(q.resources)),
                    None if q.spec.max_pods is None else q.spec.max_pods - q.pods,
                    q.cohort is not None,
                    q.budget is not None,
                )
                for q in steps.order
            ),
        )


class _Steps(NamedTuple):
    """What steps 1-4 leave for 5 and 6."""

    qstate: dict[str, QueueState]
    order: list[QueueState]
    dispatch: list[Dispatch]
    removed: list[ObservedOperation]
    stopped: list[ObservedOperation]
    active_total: int
    fleet: FleetState


def _admit_steps(
    operations: Iterable[CompiledOperation],
    queues: Mapping[str, QueueSpec],
    clusters: Mapping[str, ClusterSpec],
    observed: Iterable[ObservedOperation],
    org: OrgSettings,
    now: datetime,
    rejected: Collection[str],
    unreachable: frozenset[str],
    capacity: Mapping[str, ClusterCapacity],
    backends: Mapping[str, frozenset[str]],
    cohorts: Mapping[str, CohortSpec],
    ledger: Iterable[LedgerEntry],
    flavors: Mapping[str, FlavorSpec],
) -> _Steps:
    # 1. Index the observations.
    seen = index_observed(observed)
    qstate = {name: QueueState(spec, flavors) for name, spec in queues.items()}
    track_budgets(qstate, clusters, org, now, ledger)
    counters = Counters(clusters)
    # 2. Index the operations; the candidates grouped by queue.
    ops = index_operations(operations, seen, qstate)
    # 3. Usage of the active operations (Dispatched or Running).
    removed, stopped, active_total = count_active(seen, ops, rejected, qstate, counters)
    fleet = FleetState(queues, capacity, unreachable, backends)
    if fleet:
        fleet.count(seen, ops, qstate)
    if cohorts or any(q.spec.cohort for q in qstate.values()):
        join_cohorts(qstate, cohorts, ops, seen, now)
    # 4. Checks 0..11 for each candidate, queues in priority order, then by name; then
    # (4b) the ops that fit only by borrowing from their cohort, in the same order.
    order = sorted(qstate.values(), key=lambda q: (-q.spec.priority, q.spec.name))
    dispatch = admit(order, Dependencies(seen, ops), counters, unreachable, backends, fleet)
    dispatch.extend(borrow(order, counters, now, fleet))
    return _Steps(qstate, order, dispatch, removed, stopped, active_total, fleet)


def _plan(
    operations: Iterable[CompiledOperation],
    queues: Mapping[str, QueueSpec],
    clusters: Mapping[str, ClusterSpec],
    observed: Iterable[ObservedOperation],
    org: OrgSettings,
    now: datetime,
    rejected: Collection[str],
    unreachable: frozenset[str],
    capacity: Mapping[str, ClusterCapacity],
    backends: Mapping[str, frozenset[str]],
    cohorts: Mapping[str, CohortSpec],
    ledger: Iterable[LedgerEntry],
    flavors: Mapping[str, FlavorSpec],
) -> Plan:
    # 1-4. Index, count, admit (and 4b, borrow).
    qstate, order, dispatch, removed, stopped, active_total, fleet = _admit_steps(
        operations,
        queues,
        clusters,
        observed,
        org,
        now,
        rejected,
        unreachable,
        capacity,
        backends,
        cohorts,
        ledger,
        flavors,
    )
    # 5. Stop the active operations stopped in the repo; prune those removed from it while
    # active, behind the guard.
    stops, refusal = prune(removed, qstate, unreachable, org, active_total, stopped)
    # 6. Explain every pending op against the final counters (this plan applied).
    pending, summaries = explain(order, fleet)
    return Plan(
        dispatch=tuple(dispatch),
        pending=tuple(pending),
        stop=stops,
        queues=tuple(summaries),
        prune_refused=refusal,
        at=now,
    )


def track_budgets(
    qstate: Mapping[str, QueueState],
    clusters: Mapping[str, ClusterSpec],
    org: OrgSettings,
    now: datetime,
    ledger: Iterable[LedgerEntry],
) -> None:
    """Step 1, for budgeted queues: the current window of each, and what the ledger's
    finished runs spent in it."""
    budgeted = {name: q for name, q in qstate.items() if q.spec.budget is not None}
    if not budgeted:
        return
    by_queue: dict[str, list[LedgerEntry]] = {}
    book = ledger if isinstance(ledger, Ledger) else None  # its bad entries count too
    for entry in book.counted() if book is not None else ledger:
        if entry.queue in budgeted:
            by_queue.setdefault(entry.queue, []).append(entry)
    for name, q in budgeted.items():
        budget = q.spec.budget
        assert budget is not None
        window = window_at(now, budget.per, org.timezone)
        q.budget = BudgetTrack(
            BudgetWindow(
                name,
                budget,
                window,
                spent_in(by_queue.get(name, ()), name, budget, window),
                org.timezone,
                org.currency,
            ),
            q.spec,
            org,
            clusters,
            now,
        )
        if book is not None:
            q.budget.unreadable = book.unreadable(name)


def index_observed(observed: Iterable[ObservedOperation]) -> dict[str, ObservedOperation]:
    """Step 1: the observations by operation id."""
    seen: dict[str, ObservedOperation] = {}
    for o in observed:
        if o.operation in seen:
            raise PlanInputError(f"operation {o.operation} is observed twice")
        seen[o.operation] = o
    return seen


def index_operations(
    operations: Iterable[CompiledOperation],
    seen: Mapping[str, ObservedOperation],
    qstate: Mapping[str, QueueState],
    only: Collection[str] | None = None,
    by_id: Mapping[str, CompiledOperation] | None = None,
) -> Mapping[str, CompiledOperation]:
    """Step 2: the operations by id; each candidate (a ``Queued`` one, of ``only`` when
    given: the what-if state's, those a clock can date) added to its queue. ``by_id``:
    the operations by id when the caller has them (``CompiledRepo.by_id``, built once per
    compile).

    Within a queue: the operation's priority, highest first; then first-commit time, then
    path; workflow children at their parent's position, in index order. Ops without a
    commit time (outside Git, or uncommitted) follow those of their priority, in path
    order. The priority and the commit flag are one int (``-2 * priority``, plus 1 without
    a commit time), so the key stays as short as it was. Sort keys are flat tuples ending
    in the unique id: ops are never compared."""
    not_queued = {oid for oid, o in seen.items() if o.phase is not Phase.QUEUED}
    ops: dict[str, CompiledOperation] = {}
    fresh = by_id is None
    for op in operations:  # in their order: by ``only``'s would read them scattered
        oid = op.id
        if fresh:
            if oid in ops:
                raise PlanInputError(f"operation {oid} appears twice")
            ops[oid] = op
        rank = op.rank  # None: stopped in the repo, never a candidate
        if oid in not_queued or rank is None or (only is not None and oid not in only):
            continue
        home = qstate.get(op.queue)
        if home is None:
            raise PlanInputError(f"operation {oid} names queue {op.queue!r}, which does not exist")
        ts = op.submitted_at
        wf = op.workflow
        index = -1 if wf is None else wf.index
        # the first key is the rank: a higher priority first, then committed before not
        if ts is None:
            home.candidates.append((rank + 1, _EPOCH, op.path, index, oid, op))
        else:
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
            home.candidates.append((rank, ts, op.path, index, oid, op))
    return ops if by_id is None else by_id


def count_active(
    seen: Mapping[str, ObservedOperation],
    ops: Mapping[str, CompiledOperation],
    rejected: Collection[str],
    qstate: Mapping[str, QueueState],
    counters: Counters,
    runs: dict[str, ActiveRun] | None = None,
) -> tuple[list[ObservedOperation], list[ObservedOperation], int]:
    """Step 3: each active operation held by its queue, cluster and workflow; returns those
    removed from the repo (not rejected: still in it), those ``stopped: true`` in it, and
    how many are active in all. Each run counted goes into ``runs`` too, by id
    (the what-if state keeps them, to release them)."""
    removed: list[ObservedOperation] = []
    stopped: list[ObservedOperation] = []
    active_total = 0
    for oid in sorted(seen):
        obs = seen[oid]
        if not obs.phase.active:
            continue
        active_total += 1
        known = ops.get(oid)
        if known is None:
            if oid not in rejected:
                removed.append(obs)
        elif known.stopped:
            stopped.append(obs)
        run = ActiveRun.of(obs, known, qstate)
        if runs is not None:
            runs[oid] = run
        count_run(run, counters)
        if run.queue is not None and run.queue.budget is not None:
            run.queue.budget.hold_run(run)
    for q in qstate.values():
        q.active0 = q.active
        q.used0 = tuple(q.used)
        q.pods0 = q.pods
        if q.budget is not None:
            q.budget.committed0 = q.budget.committed
    return removed, stopped, active_total


def admit(
    order: Sequence[QueueState],
    deps: Dependencies,
    counters: Counters,
    unreachable: frozenset[str],
    backends: Mapping[str, frozenset[str]] | None = None,
    fleet: FleetState | None = None,
) -> list[Dispatch]:
    """Step 4: checks 0..11 (``checks.CHECKS``) for each candidate, in one global order: the
    first that fails makes it pending (a tuple on its queue, see ``state.py``); one that
    passes them all is dispatched and counted before the next candidate."""
    dispatch: list[Dispatch] = []
    append_dispatch = dispatch.append
    strict_fifo = QueueStrategy.STRICT_FIFO
    units = request_units
    cluster = counters.cluster
    workflow = counters.workflow
    dependency_block = deps.block
    unreachable_r = PendingReason.CLUSTER_UNREACHABLE
    backend_r = PendingReason.BACKEND_UNAVAILABLE
    served_by = backends or {}
    paused_r = PendingReason.QUEUE_PAUSED
    approval_r = PendingReason.AWAITING_APPROVAL
    exceeds_r = PendingReason.EXCEEDS_QUOTA
    behind_r = PendingReason.WAITING_BEHIND_HEAD
    conc_r = PendingReason.QUEUE_CONCURRENCY_LIMIT
    pods_r = PendingReason.MAX_PODS_REACHED
    quota_r = PendingReason.QUOTA_EXCEEDED
    wf_r = PendingReason.WORKFLOW_PARALLELISM
    cluster_r = PendingReason.CLUSTER_CONCURRENCY_LIMIT
    budget_r = PendingReason.BUDGET_EXCEEDED
    ledger_r = PendingReason.LEDGER_UNREADABLE
    lent_r = PendingReason.WAITING_FOR_LENT_QUOTA
    no_flavor_r = PendingReason.NO_ELIGIBLE_FLAVOR
    if fleet is None:
        fleet = FleetState({}, {}, unreachable)

    for q in order:
        spec = q.spec
        cands = q.candidates
        cands.sort()
        pend = q.pending.append
        # 0: the queue's cluster could not be read (its ops are on the queue's cluster; a
        # fleet queue's: on one of its clusters, chosen in 10)
        members = spec.clusters
        if (
            spec.cluster in unreachable
            if not members
            else all(name in unreachable for name in members)
        ):
            for cand in cands:
                pend((cand[4], cand[5], unreachable_r, None))
            continue
        # (0, continued) ... and serves each op's optional backend (a CRD): the ops that
        # need one it does not serve wait; the others go on (a fleet queue: one of its
        # readable clusters serves it; check 10 chooses among those that do)
        if not members:
            served = served_by.get(spec.cluster, _NONE)
        else:
            served = frozenset().union(
                *(served_by.get(m, _NONE) for m in members if m not in unreachable)
            )
        if any(c[5].distributed is not None for c in cands):
            kept = []
            for cand in cands:
                dist = cand[5].distributed
                if dist is not None and dist.backend is not _JOB and dist.backend not in served:
                    pend((cand[4], cand[5], backend_r, str(dist.backend)))
                else:
                    kept.append(cand)
            cands = kept
        # 1: queue paused (before any check of the operation: it decides for them all)
        if spec.paused:
            for cand in cands:
                pend((cand[4], cand[5], paused_r, None))
            continue
        strict = spec.strategy is strict_fifo
        head: tuple[str, PendingReason] | None = None
        conc = spec.concurrency
        max_pods = spec.max_pods
        quota = q.quota
        resources = q.resources
        nres = len(quota)
        used = q.used
        limits = q.limits
        cohort = q.cohort
        home_name = spec.cluster
        home_cluster = cluster(home_name)
        qname = spec.name
        budget = q.budget
        flavors = q.flavors
        # per flavor: (resource, quota plus what may be borrowed) for check 4
        flavor_limits = [limits[f.lo : f.hi] for f in flavors]
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
            # 4: the whole request (every replica), alone, fits every quota and the maxPods
            # of the queue. Exact Decimal compare against the floored quota: same answer as
            # in units, without converting. With flavors: some flavor the op may use (its
            # nodeLabels do not contradict the op's own pins) has room for it alone.
            if flavors:
                eligible = q.eligible(op)
                if not eligible:
                    pend((oid, op, no_flavor_r, None))
                    continue
                get = op.requests.get
                for k in eligible:  # some flavor has room for it alone (flavors_exceeded)
                    for r, limit in flavor_limits[k]:
                        v = get(r)
                        if v is not None and v > limit:
                            break
                    else:
                        break
                else:
                    pend((oid, op, exceeds_r, flavors_exceeded(q, op, eligible)))
                    continue
                if max_pods is not None and op.replicas > max_pods:
                    pend((oid, op, exceeds_r, [-1]))
                    continue
            elif max_pods is not None and op.replicas > max_pods:
                get = op.requests.get
                too_big = [-1]  # -1: maxPods, then the quota resources
                too_big += [i for i, (r, limit) in enumerate(limits) if (get(r) or 0) > limit]
                pend((oid, op, exceeds_r, too_big))
                continue
            elif limits:
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
            # 5: StrictFIFO: nothing earlier in this queue was held back by 6, 7, 8, 10 or 11
            if head is not None:
                pend((oid, op, behind_r, head))
                continue
            # 6: queue concurrency
            if conc is not None and q.active >= conc:
                pend((oid, op, conc_r, None))
                if strict:
                    head = (oid, conc_r)
                continue
            # 7: maxPods: room for every replica at once
            if max_pods is not None and q.pods + op.replicas > max_pods:
                pend((oid, op, pods_r, op.replicas))
                if strict:
                    head = (oid, pods_r)
                continue
            # 8: quota, per resource the op requests (others are unaffected); a
            # distributed op's request is every replica's: admitted whole or not at all. A
            # cohort's member: its own quota with what it lent counted, else deferred to 4b.
            # With flavors: the first eligible flavor that fits (flavors.py), or it waits
            if cohort is not None and (cap := cohort.cap_fit(q, op.requests)) is not None:
                pend((oid, op, cap[0], cap[1]))  # the cap, for what its quota does not hold
                if strict:
                    head = (oid, cap[0])
                continue
            flavor = -1
            if flavors and cohort is None:
                # the first eligible flavor with room (fit_flavor, inline: once per candidate)
                short_of = None
                for k in eligible:
                    span = flavors[k]
                    for i in range(span.lo, span.hi):
                        v = get(resources[i])
                        if v and used[i] + (amount := units(v)) > quota[i]:
                            if short_of is None:
                                short_of = [(i, amount)]
                            else:
                                short_of.append((i, amount))
                            break
                    else:
                        flavor = k
                        break
                else:
                    assert short_of is not None
                    detail = short_of[0] if len(short_of) == 1 else tuple(short_of)
                    pend((oid, op, quota_r, detail))
                    if strict:
                        head = (oid, quota_r)
                    continue
                req = q.request(op.requests, flavor)
            elif flavors:
                assert cohort is not None  # a cohort's member (the other case is above)
                fit = fit_flavor(q, op, eligible)
                if fit[0] < 0:
                    verdict = fit[1]
                    if verdict[0] is quota_r and fit[2]:
                        q.deferred.append(len(q.pending))
                    elif verdict[0] is lent_r:
                        cohort.waiting.add(q.keys[verdict[1][0]])
                    pend((oid, op, verdict[0], verdict[1]))
                    if strict:
                        head = (oid, verdict[0])
                    continue
                flavor, req, _ = fit
            elif nres:
                get = op.requests.get
                req = tuple([0 if (v := get(r)) is None else units(v) for r in resources])
                if cohort is not None:
                    verdict = cohort.own_fit(q, req)
                    if verdict is not None:
                        if verdict[0] is quota_r:
                            q.deferred.append(len(q.pending))
                        elif verdict[0] is lent_r:
                            cohort.waiting.add(q.keys[verdict[1][0]])
                        pend((oid, op, verdict[0], verdict[1]))
                        if strict:
                            head = (oid, verdict[0])
                        continue
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
            # 9: workflow parallelism
            wf = op.workflow
            w = None
            if wf is not None:
                w = workflow(wf.parent, wf.concurrency)
                if w.limit is not None and w.active >= w.limit:
                    pend((oid, op, wf_r, w))
                    continue
            # 10: the cluster: its concurrency; a fleet queue chooses one (fleet.py)
            target = op.cluster
            if not members:
                c = home_cluster if target == home_name else cluster(target)
                if c.limit is not None and c.active >= c.limit:
                    pend((oid, op, cluster_r, c))
                    if strict:
                        head = (oid, cluster_r)
                    continue
            else:
                assigned = flavors[flavor] if flavor >= 0 else None
                choice = fleet.choose(spec, op, counters, assigned)
                if choice.cluster is None:
                    reason = choice.reason or cluster_r
                    pend((oid, op, reason, (choice.members, assigned)))
                    if strict:
                        head = (oid, reason)
                    continue
                target = choice.cluster
                c = cluster(target)
            # 11: the queue's budget: spent + committed + its reservation <= limit, at the
            # prices of the cluster it goes to
            fname = flavors[flavor].name if flavor >= 0 else None
            if budget is not None:
                if budget.unreadable is not None:
                    pend((oid, op, ledger_r, None))
                    if strict:
                        head = (oid, ledger_r)
                    continue
                rate, reserve, timeout = budget.reservation(op, target, fname)
                if budget.window.spent + budget.committed + reserve > budget.window.budget.limit:
                    pend((oid, op, budget_r, reserve))
                    if strict:
                        head = (oid, budget_r)
                    continue
                budget.hold_dispatch(rate, reserve, timeout)
            if members:
                fleet.take(spec, op, target, flavors[flavor] if flavor >= 0 else None)
            # Admitted: count it before the next candidate.
            q.hold(oid, req, op.replicas)
            if cohort is not None:
                cohort.take(q, op.requests)
            q.dispatched += 1
            c.hold(oid)
            if w is not None:
                w.hold(oid)
            append_dispatch(Dispatch(oid, qname, target, fname))
    return dispatch


def prune(
    removed: Sequence[ObservedOperation],
    qstate: dict[str, QueueState],
    unreachable: frozenset[str],
    org: OrgSettings,
    active_total: int,
    stopped: Sequence[ObservedOperation] = (),
) -> tuple[tuple[Stop, ...], PruneRefusal | None]:
    """Step 5: stop the active operations ``stopped: true`` in the repo (``StoppedInRepo``:
    one deliberate line in a reviewed diff, so neither ``prune.enabled`` nor the guard
    holds them), then those removed from the repo while active, unless the org does not
    prune or the mass-deletion guard holds; never in a cluster that could not be read (they
    are stopped once it can be)."""

    def stops_of(runs: Sequence[ObservedOperation], reason: StopReason) -> tuple[Stop, ...]:
        out = (
            Stop(
                o.operation,
                reason,
                o.queue,
                o.cluster or (qstate[o.queue].spec.cluster if o.queue in qstate else None),
            )
            for o in runs
        )
        return tuple(s for s in out if s.cluster not in unreachable)

    explicit = stops_of(stopped, StopReason.STOPPED_IN_REPO)
    stops: tuple[Stop, ...] = ()
    refusal: PruneRefusal | None = None
    candidates = stops_of(removed, StopReason.REMOVED_FROM_REPO)
    if org.prune and candidates:
        if not org.allow_mass_prune and len(candidates) > org.max_prune_fraction * active_total:
            refusal = PruneRefusal(
                tuple(s.operation for s in candidates), active_total, org.max_prune_fraction
            )
        else:
            stops = candidates
    return explicit + stops, refusal
