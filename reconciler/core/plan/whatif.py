"""The what-if state: the planner's own state kept from one admission to the next, for a
simulation that moves time (the start-time estimate, ``estimate.py``). Runs end and are
released from it, some queues are admitted again on it, and every change is journalled so
``revert`` can undo it, as kueue's scheduler simulates on its snapshot and reverts.

What must live here: building that state with the planner's own steps 1-3 (the same calls
as ``plan_dispatch``), an admission of some of its queues (``begin``, then step 4 queue by
queue, ``admit``, a long queue's pass in parts, then 4b, ``borrow``: the planner's own
functions on the kept state), which candidates of a BestEffortFIFO queue checks 7-10 may
let through now (``fitting``, over buckets kept beside the candidates), ``release`` of a
run that ended, and the journal ``revert`` undoes.
What is rebuilt for each admission rather than kept (a budget's window and what it
committed, at the admission's clock; the free capacity observed, which only a new
observation changes) is rebuilt here too, exactly as a cycle would.

An admission over some queues equals an admission over all of them when the others would
dispatch nothing (the caller's to know: ``estimate.py`` replans the queues an event can
change); the property test of ``tests/core/test_estimate.py`` holds the two equal.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from reconciler.core.observation.capacity import ClusterCapacity
from reconciler.core.plan.cohorts import borrow, join_cohorts
from reconciler.core.plan.dependencies import Dependencies
from reconciler.core.plan.fleet import FleetState
from reconciler.core.plan.ledger import LedgerEntry
from reconciler.core.plan.model import Dispatch
from reconciler.core.plan.planner import (
    admit,
    count_active,
    index_observed,
    index_operations,
    track_budgets,
)
from reconciler.core.plan.state import (
    ActiveRun,
    Counters,
    QueueState,
    count_run,
    needed_slots,
)
from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    ObservedOperation,
    Phase,
    QueueStrategy,
)

# what checks 7, 8 and 10 look at in a candidate: its request in units per quota slot (the
# slots it requests any of: (slot, units)), its pods (every replica) and its cluster
Bucket = tuple[tuple[tuple[int, int], ...], int, str]
_HELD = 0  # a journal entry: a run an admission dispatched
_ENDED = 1  # ... a run released


def dispatched(d: Dispatch, op: CompiledOperation, now: datetime) -> ObservedOperation:
    """What a cycle observes of a dispatch made at ``now``: dispatched and started then (a
    simulation does not model placement: every dispatched gang is taken to start,
    docs/estimates.md), on the cluster check 10 chose, in the flavor check 8 assigned."""
    return ObservedOperation(
        d.operation,
        Phase.DISPATCHED,
        op.requests,
        d.queue,
        d.cluster,
        pods=op.replicas,
        flavor=d.flavor,
        dispatched_at=now,
        started_at=now,
    )


class WhatIf:
    """The planner's state over ``repo`` after step 3 for ``observed`` at ``now``, whose
    candidates are the ``simulated`` operations alone (the others wait for what no clock
    ends, and never hold a queue: ``REASON_TRAITS``)."""

    __slots__ = (
        "backends",
        "bucket_of",
        "buckets",
        "candidates",
        "capacity",
        "counters",
        "deps",
        "dispatch",
        "fleet",
        "gone",
        "journal",
        "keyed",
        "keys",
        "now",
        "ops",
        "order",
        "qstate",
        "repo",
        "runs",
        "seen",
        "unreachable",
    )

    def __init__(
        self,
        repo: CompiledRepo,
        observed: Iterable[ObservedOperation],
        simulated: Collection[str],
        now: datetime,
        *,
        unreachable: frozenset[str] = frozenset(),
        capacity: Mapping[str, ClusterCapacity] | None = None,
        backends: Mapping[str, frozenset[str]] | None = None,
        ledger: Iterable[LedgerEntry] = (),
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        """``pause`` is called between the steps (the estimate's: ``estimate_starts``)."""
        self.repo = repo
        self.unreachable = unreachable
        self.capacity = capacity or {}
        self.backends = backends or {}
        # 1. Index the observations.
        self.seen: dict[str, ObservedOperation] = index_observed(observed)
        self.qstate = {name: QueueState(spec, repo.flavors) for name, spec in repo.queues.items()}
        track_budgets(self.qstate, repo.clusters, repo.org, now, ledger)
        self.counters = Counters(repo.clusters)
        pause()
        # 2. Index the operations: the candidates, sorted once, kept sorted.
        self.ops = repo.by_id
        self.candidates: dict[str, list[tuple[Any, ...]]] = {}
        if simulated:
            self.index(repo.operations, simulated)
        # each candidate by id, of the queues an admission dispatched from (``_keys``)
        self.keys: dict[str, tuple[Any, ...]] = {}
        self.keyed: set[str] = set()
        pause()
        # 3. Usage of the active operations.
        self.runs: dict[str, ActiveRun] = {}  # by id
        count_active(self.seen, self.ops, (), self.qstate, self.counters, self.runs)
        self.fleet = FleetState(repo.queues, self.capacity, unreachable, self.backends)
        if self.fleet:
            self.fleet.count(self.seen, self.ops, self.qstate)
        if repo.cohorts or any(q.spec.cohort for q in self.qstate.values()):
            join_cohorts(self.qstate, repo.cohorts, self.ops, self.seen, now)
        self.deps = Dependencies(self.seen, self.ops)
        pause()
        # the candidates of each queue that ``fitting`` serves (``bucketed``), by what checks
        # 7, 8 and 10 look at, in order: made when it first serves the queue (``_buckets``),
        # and each candidate's ``Bucket`` (by id) with them
        self.buckets: dict[str, dict[Bucket, list[tuple[Any, ...]]]] = {}
        self.bucket_of: dict[str, Bucket] = {}
        self.order = {
            name: i
            for i, name in enumerate(
                sorted(repo.queues, key=lambda n: (-repo.queues[n].priority, n))
            )
        }
        # (kind, run, what was observed of it before)
        self.journal: list[tuple[int, ActiveRun, ObservedOperation | None]] = []
        # the admission under way: its clock, its dispatches, and those per queue
        self.now = now
        self.dispatch: list[Dispatch] = []
        self.gone: dict[str, set[str]] = {}

    def index(
        self, operations: Iterable[CompiledOperation], only: Collection[str] | None = None
    ) -> None:
        """Step 2 for more ``operations`` (of ``only``, when given): each a candidate of
        its queue, in order (the estimate first indexes those of the queues it does not
        date apart, and the others only if it must simulate them with the rest)."""
        index_operations(operations, self.seen, self.qstate, only, self.ops)
        for name, q in self.qstate.items():
            if q.candidates:
                got = self.candidates.get(name)
                if got is None:
                    q.candidates.sort()
                    self.candidates[name] = q.candidates
                else:
                    got += q.candidates
                    got.sort()
                q.candidates = []

    # --- moving time ----------------------------------------------------------------------

    def begin(
        self, queues: Iterable[str], now: datetime, ledger: Mapping[str, Sequence[LedgerEntry]]
    ) -> list[QueueState]:
        """Start an admission of ``queues`` at ``now``: nothing of theirs waits yet, the
        budgeted ones' windows and commitments are at ``now`` with ``ledger`` (per queue,
        what its finished runs spent), and the free capacity is the one observed. Returns
        them in the planner's order, for ``admit`` one by one and then ``borrow``."""
        order = sorted((self.qstate[name] for name in queues), key=self._rank)
        repo = self.repo
        budgeted: dict[str, QueueState] = {}
        cohorts = set()
        for q in order:
            q.pending = []
            q.deferred = []
            q.dispatched = 0
            if q.spec.budget is not None:
                budgeted[q.spec.name] = q
            if q.cohort is not None and id(q.cohort) not in cohorts:
                cohorts.add(id(q.cohort))
                q.cohort.restart(now)
        if budgeted:
            entries = [e for name in sorted(budgeted) for e in ledger.get(name, ())]
            track_budgets(budgeted, repo.clusters, repo.org, now, entries)
            for q in budgeted.values():
                assert q.budget is not None
                for oid in sorted(q.active_ids):
                    q.budget.hold_run(self.runs[oid])
        if self.fleet:
            self.fleet.observe(self.capacity)
        self.deps.doomed.clear()
        self.now = now
        self.gone = {}
        return order

    def admit(self, q: QueueState, candidates: list[tuple[Any, ...]]) -> None:
        """Step 4 for ``candidates`` of ``q`` (some of its own, in its order, after those its
        pass saw: a part of ``candidates[name]``, or ``fitting``'s): its pass goes on where
        the last call for it stopped, the same as one pass over them all when no other
        queue was admitted in between. Each dispatch is held and journalled."""
        q.candidates = candidates
        dispatch = admit([q], self.deps, self.counters, self.unreachable, self.backends, self.fleet)
        q.candidates = []
        self._held(dispatch)

    def fitting(
        self, q: QueueState, after: tuple[Any, ...] | None, n: int, noted: Collection[str]
    ) -> list[tuple[Any, ...]]:
        """The first ``n`` candidates of ``q`` after ``after`` that checks 7 (``maxPods``),
        8 (quota) and 9 (workflow parallelism) let through now, and 10 (the cluster) too
        when its pass already has one waiting for that cluster (``noted``). Only for a queue
        ``bucketed`` (BestEffortFIFO, no cohort, flavors or fleet): each of the others
        waits at 7, 8, 9 or 10 whatever the rest of its pass does (what is held only grows
        within a pass), so leaving them out changes nothing the pass dispatches or the
        clusters it waits for.
        The list ends early, before a candidate those checks would hold were every one
        before it dispatched (``_together``): the pass goes on after the list's last, with
        what the list did dispatch held, so ending it early changes nothing either; it
        spares the admission candidates that would mostly wait."""
        quota, used = q.quota, q.used
        max_pods = q.spec.max_pods
        free_pods = None if max_pods is None else max_pods - q.pods
        cluster = self.counters.cluster
        heads = []
        for (needs, pods, cname), cands in self._buckets(q).items():
            if not cands or (free_pods is not None and pods > free_pods):
                continue
            for i, a in needs:
                if used[i] + a > quota[i]:
                    break
            else:
                needs = ()
            if needs:
                continue
            if cname in noted:
                c = cluster(cname)
                if c.limit is not None and c.active >= c.limit:
                    continue
            start = 0 if after is None else bisect.bisect_right(cands, after)
            if start < len(cands):
                heads.append((cands[start], start, cands))
        return self._together(q, heads, n) if heads else []

    def _together(
        self,
        q: QueueState,
        heads: list[tuple[tuple[Any, ...], int, list[tuple[Any, ...]]]],
        n: int,
    ) -> list[tuple[Any, ...]]:
        """The candidates of the buckets ``fitting`` chose, in order from their ``heads``
        ((first candidate, its index, the bucket)), but those check 9 holds (their workflow
        at its parallelism: it only fills too within a pass): the first ``n``, up to one
        that checks 7-10 would hold were those before it all dispatched (what they would
        take of the queue's pods and quota, of their clusters' slots and of their
        workflows' parallelism). The first is always taken (alone, at its cluster's
        concurrency, it is the one its pass notes waiting for that cluster)."""
        free = [limit - held for limit, held in zip(q.quota, q.used, strict=True)]
        max_pods = q.spec.max_pods
        free_pods = None if max_pods is None else max_pods - q.pods
        clusters = self.counters.clusters
        workflows = self.counters.workflows
        bucket_of = self.bucket_of
        slots: dict[str, int] = {}  # per cluster with a limit: what the list leaves of it
        parallel: dict[str, int] = {}  # per workflow with a limit: the same
        out: list[tuple[Any, ...]] = []
        heapq.heapify(heads)  # candidates are never equal (each ends in its unique id)
        while heads:
            c, k, cands = heads[0]
            k += 1
            if k < len(cands):
                heapq.heapreplace(heads, (cands[k], k, cands))
            else:
                heapq.heappop(heads)
            wf = c[5].workflow
            if wf is not None:
                w = workflows.get(wf.parent)
                if w is not None and w.limit is not None and w.active >= w.limit:
                    continue  # check 9 holds it, whatever comes before it
                limit = wf.concurrency if w is None else w.limit
                if limit is not None:
                    left = parallel.get(wf.parent, limit - (0 if w is None else w.active))
                    if left <= 0 and out:
                        break
                    parallel[wf.parent] = left - 1
            needs, pods, cname = bucket_of[c[4]]
            if free_pods is not None:
                if pods > free_pods:
                    break
                free_pods -= pods
            for i, a in needs:
                if a > free[i]:
                    break
                free[i] -= a
            else:
                needs = ()
            if needs:
                break
            counter = clusters.get(cname)
            if counter is not None and counter.limit is not None:
                left = slots.get(cname, counter.limit - counter.active)
                if left <= 0 and out:
                    break
                slots[cname] = left - 1
            out.append(c)
            if len(out) >= n:
                break
        return out

    def borrow(self, order: Sequence[QueueState]) -> list[Dispatch]:
        """Step 4b over the queues ``begin`` returned, after each was admitted; then the
        admission ends: what it dispatched (4 and 4b) leaves the candidates."""
        self._held(borrow(order, self.counters, self.now, self.fleet))
        dispatch = self.dispatch
        for name, ids in self.gone.items():
            full = self.candidates[name]
            keys = self._keys(name)
            buckets = self.buckets.get(name)
            for oid in ids:
                key = keys[oid]
                del full[bisect.bisect_left(full, key)]
                if buckets is not None:
                    cands = buckets[self.bucket_of[oid]]
                    del cands[bisect.bisect_left(cands, key)]
        self.dispatch = []
        self.gone = {}
        return dispatch

    def _held(self, dispatch: list[Dispatch]) -> None:
        for d in dispatch:
            self._dispatched(d, self.now)
            self.gone.setdefault(d.queue, set()).add(d.operation)
        self.dispatch.extend(dispatch)

    def release(self, oid: str) -> ActiveRun:
        """The run ``oid`` ended: it counts as ``Succeeded`` from now on."""
        run = self.runs.pop(oid)
        before = self.seen[oid]
        self._release(run)
        self.seen[oid] = ObservedOperation(oid, Phase.SUCCEEDED)
        self.journal.append((_ENDED, run, before))
        return run

    def mark(self) -> int:
        return len(self.journal)

    def revert(self, mark: int = 0) -> None:
        """Undo every change since ``mark``, the last first."""
        journal = self.journal
        while len(journal) > mark:
            kind, run, before = journal.pop()
            oid = run.oid
            if kind == _HELD:
                del self.runs[oid]
                self._release(run)
                if before is None:
                    del self.seen[oid]
                else:
                    self.seen[oid] = before
                key = self.keys[oid]  # ``borrow`` took it out
                assert run.queue is not None
                name = run.queue.spec.name
                bisect.insort(self.candidates.setdefault(name, []), key)
                buckets = self.buckets.get(name)
                if buckets is not None:
                    bisect.insort(buckets[self._bucket_of(run.queue, key)], key)
            else:
                assert before is not None
                self.runs[oid] = run
                self._hold(run)
                self.seen[oid] = before

    def bucketed(self, q: QueueState) -> bool:
        """Whether ``fitting`` serves ``q``: BestEffortFIFO, no cohort, flavors or fleet."""
        spec = q.spec
        return (
            spec.strategy is QueueStrategy.BEST_EFFORT_FIFO
            and q.cohort is None
            and not q.flavors
            and not spec.clusters
        )

    def _buckets(self, q: QueueState) -> dict[Bucket, list[tuple[Any, ...]]]:
        """``q``'s candidates by ``Bucket``, in order (made from its candidates now, the
        first time; ``borrow`` and ``revert`` keep them)."""
        name = q.spec.name
        got = self.buckets.get(name)
        if got is None:
            got = self.buckets[name] = {}
            for c in self.candidates.get(name, ()):
                got.setdefault(self._bucket_of(q, c), []).append(c)
        return got

    def _bucket_of(self, q: QueueState, c: tuple[Any, ...]) -> Bucket:
        oid = c[4]
        got = self.bucket_of.get(oid)
        if got is None:
            op = c[5]
            req = q.request(op.requests)
            got = self.bucket_of[oid] = (needed_slots(req), op.replicas, op.cluster)
        return got

    def _keys(self, name: str) -> dict[str, tuple[Any, ...]]:
        """Each candidate by id, the queue ``name``'s among them (added the first time,
        while all it had are candidates: what ``borrow`` takes out, ``revert`` puts back)."""
        if name not in self.keyed:
            self.keyed.add(name)
            self.keys.update((c[4], c) for c in self.candidates.get(name, ()))
        return self.keys

    # --- the run's counts -----------------------------------------------------------------

    def _rank(self, q: QueueState) -> int:
        return self.order[q.spec.name]

    def _dispatched(self, d: Dispatch, now: datetime) -> None:
        """Observe a dispatch as the next admission would (the admission counted it)."""
        op = self.ops[d.operation]
        o = dispatched(d, op, now)
        before = self.seen.get(d.operation)
        self.seen[d.operation] = o
        run = self.runs[d.operation] = ActiveRun.of(o, op, self.qstate)
        self.journal.append((_HELD, run, before))

    def _hold(self, run: ActiveRun) -> None:
        self._count(run, release=False)

    def _release(self, run: ActiveRun) -> None:
        self._count(run, release=True)

    def _count(self, run: ActiveRun, *, release: bool) -> None:
        """Count ``run`` everywhere step 3 counts it, or release it from there."""
        count_run(run, self.counters, release=release)
        q = run.queue
        if q is None:
            return
        if q.cohort is not None:
            (q.cohort.give if release else q.cohort.take)(q, run.requests)
            if release:  # when step 4b dispatched it (held again: observed, it says)
                q.cohort.dispatched_at.pop(run.oid, None)
        if run.cluster is not None and q.spec.name in self.fleet.queues:
            flavor = q.flavors[run.flavor].name if run.flavor >= 0 else None
            by = -1 if release else 1
            self.fleet.hold(q.spec.name, run.cluster, run.requests, flavor, by)
