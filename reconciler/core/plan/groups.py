"""The plan kept between cycles, group by group (``PlanCache``): a cycle replans only the
queues whose inputs changed, and takes the rest from the last plan.

What must live here: what couples queues in the planner, so that they fall in one group
(``partition``), the inputs of a group (its queue specs, its operations, its
observations), the rule of reuse, and the plan put together again in consideration order;
and the one union-find of names (``DisjointSets``) the partitions and the replay use too.
The planner itself is not changed: the groups whose inputs changed are planned together
by ``plan_dispatch`` over their queues alone.

Queues are coupled, and so in one group, through a cluster with a concurrency limit that
their operations (or their active runs) use, a workflow with children in both (its
parallelism, and check 3's DAG walk), a dependency, and an active run counted in one queue
and compiled for another. What the planner couples more widely, or reads the clock for, is
never reused: a cohort or a fleet queue anywhere plans everything in full (borrowing and
the fleet's choice of cluster reach across the queues, and their dispatches follow all
others), and a group with a budget is planned every cycle (its window moves with ``now``).
Whatever the planner reads besides the groups' own inputs (the org, the clusters, the
flavors, the clusters that cannot be read, their backends and capacity, the active runs of
no queue) is compared as a whole: a change replans every group. The stops are the whole
plan's (the mass-deletion guard counts every active run), worked out every cycle.

The couplings themselves are patched by what a commit changed (the compile says it:
``CompiledRepo.operation_changes``) when the operations removed and added couple nothing,
rather than found again over every operation.

A group whose inputs changed only by losing operations, all its queues paused and every
candidate of theirs waiting ``QueuePaused`` (check 1, before any check of the operation),
is not planned again either: what remains waits as before (a preset
moving 1% of a paused queue's operations elsewhere replans where they went, not the 99%
left behind).

A group's plan is exactly the one a full plan gives it: ``tests/core/test_plan_groups.py``
checks byte for byte, over random worlds and random changes, that it equals a full plan.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import chain, compress, repeat
from operator import attrgetter, is_, not_
from typing import Any

from reconciler.core.observation.capacity import ClusterCapacity
from reconciler.core.plan.ledger import LedgerEntry
from reconciler.core.plan.model import (
    Dispatch,
    Pending,
    PendingReason,
    Plan,
    PruneRefusal,
    QueueSummary,
    Stop,
)
from reconciler.core.plan.planner import plan_dispatch, prune
from reconciler.core.plan.state import QueueState
from reconciler.core.types import (
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    CompiledRepo,
    FlavorSpec,
    ObservedOperation,
    OperationChanges,
    OrgSettings,
    QueueSpec,
)

_PAUSED = PendingReason.QUEUE_PAUSED
_IN_ORDER = attrgetter("project", "name")  # a plain operation's place in compile order
_OPERATION, _REASON = attrgetter("operation"), attrgetter("reason")

# One queue's inputs: its spec, its operations and the observations counted in it.
_QueueInputs = tuple[QueueSpec, tuple[CompiledOperation, ...], tuple[ObservedOperation, ...]]


@dataclass(frozen=True, slots=True)
class _Kept:
    """One group's inputs and its part of the plan, per queue."""

    inputs: tuple[_QueueInputs, ...]
    dispatch: Mapping[str, tuple[Dispatch, ...]]
    pending: Mapping[str, tuple[Pending, ...]]
    summaries: Mapping[str, QueueSummary]
    paused: frozenset[str]  # its queues paused, with every candidate waiting QueuePaused


class PlanCache:
    """The last plan of each group of queues, for the next cycle. Owned by the caller (the
    long-running reconciler); pure."""

    def __init__(self) -> None:
        self._shared: tuple[Any, ...] | None = None
        self._groups: dict[tuple[str, ...], _Kept] = {}
        self._coupled: _Coupled | None = None
        self.reused = 0  # groups taken from the last plan
        self.planned = 0  # groups planned


class DisjointSets:
    """Union-find over names; a set's root is its least name, so the sets come out the same
    whatever the order of the unions (the plan's groups, the shards' partitions and the
    replay's components)."""

    __slots__ = ("parent",)

    def __init__(self, names: Iterable[str]) -> None:
        self.parent = {n: n for n in names}

    def find(self, node: str) -> str:
        parent = self.parent
        root = parent.setdefault(node, node)
        while parent[root] != root:
            root = parent[root]
        while parent[node] != root:
            parent[node], node = root, parent[node]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass(frozen=True, slots=True)
class _Coupled:
    """What the operations alone say of the groups, kept while they are the same tuple
    (a cycle with no new commit), or patched by what a commit changed (``recouple``):
    the union-find after their couplings, those with dependencies, and each queue's
    operations."""

    operations: tuple[CompiledOperation, ...]
    queues: dict[str, QueueSpec]
    clusters: dict[str, ClusterSpec]
    parent: dict[str, str]
    dependents: tuple[CompiledOperation, ...]
    by_queue: dict[str, tuple[CompiledOperation, ...]]
    depended: frozenset[str]  # the ids some operation depends on
    mixed: frozenset[str]  # the queues with workflow children (not in name order)


def couple_operations(
    operations: tuple[CompiledOperation, ...],
    queues: Mapping[str, QueueSpec],
    clusters: Mapping[str, ClusterSpec],
    ops: Mapping[str, CompiledOperation],
) -> _Coupled | None:
    """The queues the operations couple: through a limited cluster, a workflow, a
    dependency. None when an operation names a queue not in ``queues``."""
    limited = {name for name, c in clusters.items() if c.concurrency is not None}
    # queue names beside the other nodes that couple them: ``\0`` + a limited cluster,
    # ``\1`` + a workflow's parent (the prefixes keep them apart from queue names)
    groups = DisjointSets(queues)
    for name, spec in queues.items():
        if spec.cluster in limited:
            groups.union(name, "\0" + spec.cluster)
    dependents: list[CompiledOperation] = []
    by_queue: dict[str, list[CompiledOperation]] = {name: [] for name in queues}
    for op in operations:
        mine = by_queue.get(op.queue)
        if mine is None:
            return None
        mine.append(op)
        wf = op.workflow
        if wf is not None:
            groups.union(op.queue, "\1" + wf.parent)
        if op.cluster in limited:
            groups.union(op.queue, "\0" + op.cluster)
        if op.dependencies:
            dependents.append(op)
            for dep in op.dependencies:
                upstream = ops.get(dep)
                if upstream is not None:
                    groups.union(op.queue, upstream.queue)
    return _Coupled(
        operations,
        dict(queues),
        dict(clusters),
        groups.parent,
        tuple(dependents),
        {name: tuple(mine) for name, mine in by_queue.items()},
        frozenset(dep for op in dependents for dep in op.dependencies),
        frozenset(op.queue for op in operations if op.workflow is not None),
    )


def recouple(
    coupled: _Coupled,
    operations: tuple[CompiledOperation, ...],
    changes: OperationChanges,
    queues: Mapping[str, QueueSpec],
) -> _Coupled | None:
    """``coupled`` for ``operations``, which ``changes`` makes of its own (O(changed)), when none
    of those removed or added couples a queue: no workflow, no dependency either way, no
    limited cluster but its queue's; and each queue they change holds operations in
    compile order, that is by project and name (no workflow children). None: couple
    them all again."""
    limited = {name for name, c in coupled.clusters.items() if c.concurrency is not None}
    gone: dict[str, set[int]] = {}
    new: dict[str, list[CompiledOperation]] = {}
    for stored, ops in ((False, changes.removed), (True, changes.added)):
        for op in ops:
            spec = queues.get(op.queue)
            if (
                spec is None
                or op.workflow is not None
                or op.dependencies
                or op.id in coupled.depended
                or op.queue in coupled.mixed
                or (op.cluster in limited and op.cluster != spec.cluster)
            ):
                return None
            if stored:
                new.setdefault(op.queue, []).append(op)
            else:
                gone.setdefault(op.queue, set()).add(id(op))
    by_queue = dict(coupled.by_queue)
    for name, ids in gone.items():
        old = by_queue[name]
        kept = tuple(compress(old, map(not_, map(ids.__contains__, map(id, old)))))
        if len(kept) != len(old) - len(ids):
            return None
        by_queue[name] = kept
    for name, added in new.items():
        mine = list(by_queue[name])
        for op in added:
            key = (op.project, op.name)
            at = bisect_left(mine, key, key=_IN_ORDER)
            if at < len(mine) and _IN_ORDER(mine[at]) == key:
                return None
            mine.insert(at, op)
        by_queue[name] = tuple(mine)
    return replace(coupled, operations=operations, by_queue=by_queue)


def partition(
    coupled: _Coupled, observed: Iterable[ObservedOperation], ops: Mapping[str, CompiledOperation]
) -> tuple[list[tuple[str, ...]], dict[str, str]]:
    """The groups of queues the planner couples (each its queue names, sorted; groups
    sorted): the operations' couplings and the observations'; and per observation id the
    queue it counts in (an observation of no queue in ``queues`` is in none)."""
    queues, clusters = coupled.queues, coupled.clusters
    limited = {name for name, c in clusters.items() if c.concurrency is not None}
    groups = DisjointSets(())
    groups.parent = dict(coupled.parent)
    counted: dict[str, str] = {}
    for obs in observed:
        known = ops.get(obs.operation)
        qname = obs.queue or (known.queue if known is not None else None)
        if qname is None or qname not in queues:
            continue
        counted[obs.operation] = qname
        if known is not None:
            groups.union(qname, known.queue)
        cname = obs.cluster or (known.cluster if known is not None else None)
        if (cname or queues[qname].cluster) in limited:
            groups.union(qname, "\0" + (cname or queues[qname].cluster))
    # a dependency's observation counts where it says: its dependents' group too
    for op in coupled.dependents:
        for dep in op.dependencies:
            if dep in counted:
                groups.union(op.queue, counted[dep])
    members: dict[str, list[str]] = {}
    for name in sorted(queues):
        members.setdefault(groups.find(name), []).append(name)
    return sorted(tuple(m) for m in members.values()), counted


def plan_by_groups(
    cache: PlanCache,
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
    by_id: Mapping[str, CompiledOperation] | None = None,
    changes: OperationChanges | None = None,
) -> Plan:
    """:func:`~reconciler.core.plan.planner.plan_dispatch`, the same plan, with the groups
    whose inputs did not change since ``cache``'s last plan taken from it. ``by_id``: the
    operations by id, when the caller has them; ``changes``: how they differ from an
    earlier tuple of them, when the caller knows."""
    operations = tuple(operations)
    observed = tuple(observed)
    unreachable = frozenset(unreachable)

    def full() -> Plan:
        cache._shared = None
        cache._groups = {}
        return plan_dispatch(
            operations,
            queues,
            clusters,
            observed,
            org,
            now,
            rejected=rejected,
            unreachable=unreachable,
            capacity=capacity,
            backends=backends,
            cohorts=cohorts,
            ledger=ledger,
            flavors=flavors,
        )

    if cohorts or any(q.cohort is not None or q.fleet for q in queues.values()):
        return full()
    ops = by_id if by_id is not None else {op.id: op for op in operations}
    coupled = cache._coupled
    if (
        coupled is None
        or coupled.operations is not operations
        or coupled.queues != queues
        or coupled.clusters != clusters
    ):
        if (
            coupled is not None
            and changes is not None
            and changes.since is coupled.operations
            and coupled.queues == queues
            and coupled.clusters == clusters
            and len(ops) == len(operations)
        ):
            coupled = recouple(coupled, operations, changes, queues)
        else:
            coupled = None
        if coupled is None:
            coupled = couple_operations(operations, queues, clusters, ops)
        if coupled is None or len(ops) != len(operations):
            return full()  # the planner refuses these inputs: in its own words
        cache._coupled = coupled
    if len({o.operation for o in observed}) != len(observed):
        return full()
    groups, counted = partition(coupled, observed, ops)
    loose = tuple(o for o in observed if o.operation not in counted)
    # copies: a caller may change its mappings in place for the next cycle
    shared: tuple[Any, ...] = (org, dict(clusters), dict(flavors or {}), unreachable)
    shared += (dict(backends or {}), dict(capacity or {}), loose)
    kept = cache._groups if shared == cache._shared else {}
    by_queue = coupled.by_queue
    seen_by_queue: dict[str, list[ObservedOperation]] = {name: [] for name in queues}
    for o in observed:
        qname = counted.get(o.operation)
        if qname is not None:
            seen_by_queue[qname].append(o)
    dispatch: dict[str, tuple[Dispatch, ...]] = {}
    pending: dict[str, tuple[Pending, ...]] = {}
    summaries: dict[str, QueueSummary] = {}
    now_kept: dict[tuple[str, ...], _Kept] = {}
    stale: list[tuple[tuple[str, ...], tuple[_QueueInputs, ...]]] = []
    for group in groups:
        inputs = tuple((queues[n], by_queue[n], tuple(seen_by_queue[n])) for n in group)
        last = kept.get(group)
        if last is not None and last.inputs != inputs:
            last = _paused_shrunk(last, inputs)
        if last is not None:
            dispatch.update(last.dispatch)
            pending.update(last.pending)
            summaries.update(last.summaries)
            now_kept[group] = last
            cache.reused += 1
        else:
            stale.append((group, inputs))
    if stale:
        replanned = plan_dispatch(
            [op for _, inputs in stale for q in inputs for op in q[1]],
            {n: queues[n] for group, _ in stale for n in group},
            clusters,
            [*(o for _, inputs in stale for q in inputs for o in q[2]), *loose],
            org,
            now,
            unreachable=unreachable,
            capacity=capacity,
            backends=backends,
            ledger=ledger,
            flavors=flavors,
        )
        parts = _per_queue(replanned)
        for group, inputs in stale:
            dispatched = {n: parts[0].get(n, ()) for n in group}
            waiting = {n: parts[1].get(n, ()) for n in group}
            paused = frozenset(
                n for n in group if _all_paused(queues[n], dispatched[n], waiting[n])
            )
            mine = _Kept(inputs, dispatched, waiting, {n: parts[2][n] for n in group}, paused)
            dispatch.update(mine.dispatch)
            pending.update(mine.pending)
            summaries.update(mine.summaries)
            cache.planned += 1
            if not any(queues[n].budget is not None for n in group):  # its window moves
                now_kept[group] = mine
    cache._shared, cache._groups = shared, now_kept
    order = sorted(queues.values(), key=lambda q: (-q.priority, q.name))
    stops, refusal = _stops(ops, observed, queues, rejected, unreachable, org, flavors or {})
    return Plan(
        dispatch=tuple(chain.from_iterable(dispatch[q.name] for q in order)),
        pending=tuple(chain.from_iterable(pending[q.name] for q in order)),
        stop=stops,
        queues=tuple(summaries[q.name] for q in order),
        prune_refused=refusal,
        at=now,
    )


def _paused_shrunk(last: _Kept, inputs: tuple[_QueueInputs, ...]) -> _Kept | None:
    """``last`` brought to ``inputs`` when it provably plans the same but for the
    candidates gone: every queue of the group the same spec, paused, with the same
    observations and some of its operations removed (the others the same objects, in the
    same order), and every one of its candidates waiting ``QueuePaused`` in ``last``. Check
    1 decides for a paused queue before any check of the operation, so a remaining
    candidate waits as before and moves no state: only the pending counts change (and the
    positions derived from the order). None: plan the group again."""
    pending: dict[str, tuple[Pending, ...]] = {}
    summaries: dict[str, QueueSummary] = {}
    for (spec, ops, seen), (old_spec, old_ops, old_seen) in zip(inputs, last.inputs, strict=True):
        name = spec.name
        if name not in last.paused or spec != old_spec or seen != old_seen:
            return None
        gone = _removed(old_ops, ops)
        # an active run of an operation removed counts with its spec no more
        if gone is None or any(o.operation in gone for o in seen):
            return None
        pending[name] = entries = _without(last.pending[name], gone)
        summaries[name] = replace(
            last.summaries[name], pending=len(entries), head_reason=_PAUSED if entries else None
        )
    return _Kept(inputs, last.dispatch, pending, summaries, last.paused)


def _all_paused(
    queue: QueueSpec, dispatch: tuple[Dispatch, ...], pending: tuple[Pending, ...]
) -> bool:
    """Whether ``queue`` is paused, dispatched nothing and every candidate of it waits
    ``QueuePaused``."""
    return queue.paused and not dispatch and all(map(is_, map(_REASON, pending), repeat(_PAUSED)))


def _removed(
    old: tuple[CompiledOperation, ...], new: tuple[CompiledOperation, ...]
) -> set[str] | None:
    """The ids of the operations of ``old`` not in ``new`` when ``new`` is ``old`` with
    some removed (the same objects, in order); else None."""
    if len(new) > len(old):
        return None
    gone: set[str] = set()
    rest = iter(old)
    for op in new:
        for before in rest:
            if before is op:
                break
            gone.add(before.id)
        else:
            return None
    gone.update(op.id for op in rest)
    return gone


def _without(entries: tuple[Pending, ...], gone: set[str]) -> tuple[Pending, ...]:
    """``entries`` without those of the operations ``gone`` (the others, the same objects:
    an entry holds no position to renumber)."""
    flags = list(map(gone.__contains__, map(_OPERATION, entries)))
    if True not in flags:
        return entries
    return tuple(compress(entries, map(not_, flags)))


def _per_queue(
    plan: Plan,
) -> tuple[
    dict[str, tuple[Dispatch, ...]], dict[str, tuple[Pending, ...]], dict[str, QueueSummary]
]:
    """A plan's dispatches, pending entries and summaries by queue (each queue's are one
    run of its consideration order: no cohort borrows after them)."""
    dispatch: dict[str, list[Dispatch]] = {}
    for d in plan.dispatch:
        dispatch.setdefault(d.queue, []).append(d)
    pending: dict[str, list[Pending]] = {}
    for p in plan.pending:
        pending.setdefault(p.queue, []).append(p)
    return (
        {n: tuple(ds) for n, ds in dispatch.items()},
        {n: tuple(ps) for n, ps in pending.items()},
        {s.name: s for s in plan.queues},
    )


def _stops(
    ops: Mapping[str, CompiledOperation],
    observed: Iterable[ObservedOperation],
    queues: Mapping[str, QueueSpec],
    rejected: Collection[str],
    unreachable: frozenset[str],
    org: OrgSettings,
    flavors: Mapping[str, FlavorSpec],
) -> tuple[tuple[Stop, ...], PruneRefusal | None]:
    """Step 5 over every observation, as ``count_active`` sorts them for it: the active
    runs stopped in the repo, and those removed from it, behind the guard."""
    removed: list[ObservedOperation] = []
    stopped: list[ObservedOperation] = []
    active_total = 0
    for obs in sorted(observed, key=lambda o: o.operation):
        if not obs.phase.active:
            continue
        active_total += 1
        known = ops.get(obs.operation)
        if known is None:
            if obs.operation not in rejected:
                removed.append(obs)
        elif known.stopped:
            stopped.append(obs)
    if not removed and not stopped:
        return (), None
    qstate = {name: QueueState(spec, flavors) for name, spec in queues.items()}
    return prune(removed, qstate, unreachable, org, active_total, stopped)


def plan_repo_by_groups(
    cache: PlanCache,
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
    """:func:`~reconciler.core.plan.planner.plan_repo`, the same plan, by groups."""
    observed = list(observed)
    return plan_by_groups(
        cache,
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
        by_id=repo.by_id,
        changes=repo.operation_changes,
    )
