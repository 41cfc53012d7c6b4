"""The planner's hot path: ``plan_dispatch`` (and ``plan_repo`` over a compiled repo) in
numbered steps, one named call each (docs/dispatch.md, "Steps"):

1. ``index_observed``: the observations by id (one observed twice is refused);
2. ``index_operations``: the operations by id, the candidates (the ``Queued`` ones)
   grouped by queue, with their consideration-order sort keys;
3. ``count_active``: the usage of the active operations, per queue, cluster and workflow,
   and those removed from the repo; the fleet queues' usage per cluster (``fleet.py``);
4. ``admit``: checks 0..10 (``checks.CHECKS``) for each candidate, in one global order,
   counting each dispatch before the next candidate;
5. ``prune``: the stops, behind the mass-deletion guard;
6. ``explain``: the pending entries and queue summaries (``explain.py``).

What must live here: the steps, their order, and the admission loop. The loop applies the
checks inline, in ``checks.CHECKS``' order, one commented block per check (``# N: ...``):
it runs once per candidate, and a function call per check made it 15-20% slower.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from reconciler.core.capacity import ClusterCapacity
from reconciler.core.plan.dependencies import Dependencies
from reconciler.core.plan.explain import explain
from reconciler.core.plan.fleet import FleetState
from reconciler.core.plan.model import (
    Dispatch,
    PendingReason,
    Plan,
    PlanInputError,
    PruneRefusal,
    Stop,
    StopReason,
)
from reconciler.core.plan.state import Counters, QueueState
from reconciler.core.plan.units import request_units
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
) -> Plan:
    """Decide what to dispatch, what waits and why, and what to stop.

    ``observed`` lists what the clusters say; unlisted operations are ``Queued``.
    ``rejected`` are ids still in the repo but refused by policy: they are never pruned.
    ``unreachable`` clusters could not be read: nothing is dispatched to or stopped in them
    (check 0), and their active operations keep counting as observed.
    ``capacity`` is the free capacity observed per cluster, for the fleet queues' choice
    of cluster (check 10); a cluster without one is not observed.
    Raises :class:`PlanInputError` when the inputs contradict each other.
    """
    with _gc_paused():
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
        )


def plan_repo(
    repo: CompiledRepo,
    observed: Iterable[ObservedOperation],
    now: datetime,
    *,
    superseded: Collection[str] = (),
    unreachable: Collection[str] = (),
    capacity: Mapping[str, ClusterCapacity] | None = None,
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
    capacity: Mapping[str, ClusterCapacity],
) -> Plan:
    # 1. Index the observations.
    seen = index_observed(observed)
    qstate = {name: QueueState(spec) for name, spec in queues.items()}
    counters = Counters(clusters)
    # 2. Index the operations; the candidates grouped by queue.
    ops = index_operations(operations, seen, qstate)
    # 3. Usage of the active operations (Dispatched or Running).
    removed, active_total = count_active(seen, ops, rejected, qstate, counters)
    fleet = FleetState(queues, capacity, unreachable)
    if fleet:
        fleet.count(seen, ops)
    # 4. Checks 0..10 for each candidate, queues in priority order, then by name.
    order = sorted(qstate.values(), key=lambda q: (-q.spec.priority, q.spec.name))
    dispatch = admit(order, Dependencies(seen, ops), counters, unreachable, fleet)
    # 5. Prune operations removed from the repo while active, behind the guard.
    stops, refusal = prune(removed, qstate, unreachable, org, active_total)
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
) -> dict[str, CompiledOperation]:
    """Step 2: the operations by id; each candidate (a ``Queued`` one) added to its queue.

    Within a queue: first-commit time, then path; workflow children at their parent's
    position, in index order. Ops without a commit time (outside Git, or uncommitted)
    follow, in path order. Sort keys are flat tuples ending in the unique id: ops are never
    compared."""
    not_queued = {oid for oid, o in seen.items() if o.phase is not Phase.QUEUED}
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
    return ops


def count_active(
    seen: Mapping[str, ObservedOperation],
    ops: Mapping[str, CompiledOperation],
    rejected: Collection[str],
    qstate: Mapping[str, QueueState],
    counters: Counters,
) -> tuple[list[ObservedOperation], int]:
    """Step 3: each active operation held by its queue, cluster and workflow; returns those
    removed from the repo (not rejected: still in it) and how many are active in all."""
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
            counters.cluster(cname).hold(oid)
        if known is not None and known.workflow is not None:
            counters.workflow(known.workflow.parent, known.workflow.concurrency).hold(oid)
    for q in qstate.values():
        q.active0 = q.active
        q.used0 = tuple(q.used)
    return removed, active_total


def admit(
    order: Sequence[QueueState],
    deps: Dependencies,
    counters: Counters,
    unreachable: frozenset[str],
    fleet: FleetState | None = None,
) -> list[Dispatch]:
    """Step 4: checks 0..10 (``checks.CHECKS``) for each candidate, in one global order: the
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
    paused_r = PendingReason.QUEUE_PAUSED
    approval_r = PendingReason.AWAITING_APPROVAL
    exceeds_r = PendingReason.EXCEEDS_QUOTA
    behind_r = PendingReason.WAITING_BEHIND_HEAD
    conc_r = PendingReason.QUEUE_CONCURRENCY_LIMIT
    quota_r = PendingReason.QUOTA_EXCEEDED
    wf_r = PendingReason.WORKFLOW_PARALLELISM
    cluster_r = PendingReason.CLUSTER_CONCURRENCY_LIMIT
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
        # 1: queue paused (before any check of the operation: it decides for them all)
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
            # 5: StrictFIFO: nothing earlier in this queue was held back by 6, 7, 9 or 10
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
            # 9: cluster concurrency (a fleet queue weighs it in 10)
            target = op.cluster
            if not members:
                c = home_cluster if target == home_name else cluster(target)
                if c.limit is not None and c.active >= c.limit:
                    pend((oid, op, cluster_r, c))
                    if strict:
                        head = (oid, cluster_r)
                    continue
            # 10: a fleet queue chooses the cluster
            else:
                choice = fleet.choose(spec, op, counters)
                if choice.cluster is None:
                    reason = choice.reason or cluster_r
                    pend((oid, op, reason, choice.members))
                    if strict:
                        head = (oid, reason)
                    continue
                target = choice.cluster
                c = cluster(target)
                fleet.take(spec, op, target)
            # Admitted: count it before the next candidate.
            q.hold(oid, req)
            q.dispatched += 1
            c.hold(oid)
            if w is not None:
                w.hold(oid)
            append_dispatch(Dispatch(oid, qname, target))
    return dispatch


def prune(
    removed: Sequence[ObservedOperation],
    qstate: dict[str, QueueState],
    unreachable: frozenset[str],
    org: OrgSettings,
    active_total: int,
) -> tuple[tuple[Stop, ...], PruneRefusal | None]:
    """Step 5: stop the operations removed from the repo while active, unless the org does
    not prune or the mass-deletion guard holds; never in a cluster that could not be read
    (they are stopped once it can be)."""
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
    return stops, refusal
