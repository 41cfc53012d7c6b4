"""Cohorts: queues that lend each other their unused quota, with a bounded return time
instead of preemption (docs/dispatch.md, "Cohorts").

What must live here: everything the planner knows about cohorts, and nothing else does:

- which queues share which resource (a cohort's *pool* of a resource, or of a flavor's
  resource: its members that have a quota for it), and the limits (``borrowingLimit``,
  ``lendingLimit``, per flavor in a queue with flavors; the cohort's cap, per resource over
  every flavor);
- check 8 for a member (``CohortState.own_fit``): an op that fits its queue's own quota, the
  lent quota given back first, or it waits (``WaitingForLentQuota``, ``CohortLimit``), or it
  is deferred to borrowing;
- step 4b, ``borrow``: the deferred ops, after every op that fits its own quota (a lender's
  own op always goes before any borrower); within a cohort, the next borrower is the queue
  with the lowest weighted share (fair sharing: ``share``), and within a queue its order;
- what is borrowed and lent, recomputed from the usage alone each time (never remembered),
  so every view that calls the planner computes the same amounts: a queue's use above its
  quota is *borrowed*; the cohort's borrowed total is *lent* by the members under their
  quota, in name order, each at most its ``lendingLimit`` and its unused quota;
- the blocks of the cohort reasons, against the final counters (step 6).

Borrowing is safe without preemption because only an op whose ``timeout`` is at most the
cohort's ``maxBorrowDuration`` may borrow, and while a lender's op waits for its lent quota
(``WaitingForLentQuota``) nothing new borrows that resource in the cohort: every borrower it
waits for was dispatched before it started waiting, so it waits at most that long.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from reconciler.core.plan.fleet import FleetState
from reconciler.core.plan.model import (
    MAX_LISTED,
    BlockedBy,
    BorrowingNotAllowedBlock,
    CohortLimitBlock,
    Dispatch,
    FairShareBlock,
    LentQuotaBlock,
    PendingReason,
    PlanInputError,
    QuotaBlock,
)
from reconciler.core.plan.state import Counters, QueueState, deadline
from reconciler.core.plan.units import quota_units, request_units, to_decimal
from reconciler.core.quantity import duration_seconds
from reconciler.core.types import CohortSpec, CompiledOperation, ObservedOperation

_R = PendingReason
COHORT_REASONS = frozenset(
    (
        _R.WAITING_FOR_LENT_QUOTA,
        _R.BORROWING_NOT_ALLOWED,
        _R.COHORT_LIMIT,
        _R.WAITING_FOR_FAIR_SHARE,
    )
)
_NO_LIMIT = -1  # lendingLimit not set: all of the unused quota
Key = tuple[str | None, str]  # what a pool is of: (flavor or None, resource)


def timeout_seconds(op: CompiledOperation) -> int | None:
    """The op's timeout in seconds (its Job's activeDeadlineSeconds: ``run.timeout``, the
    queue's ``defaultTimeout`` or a sandbox's default), if it has one."""
    if op.timeout is not None:
        return op.timeout
    run = op.spec.get("run")
    timeout = run.get("timeout") if isinstance(run, Mapping) else None
    return None if timeout is None else duration_seconds(timeout)


def _borrowed(q: QueueState, i: int, used: int) -> int:
    return max(0, used - q.quota[i])


def _lendable(q: QueueState, i: int, used: int) -> int:
    unused = max(0, q.quota[i] - used)
    limit = q.lend_limit[i]
    return unused if limit == _NO_LIMIT else min(unused, limit)


class CohortState:
    """One cohort while planning: its members (by name) and, per resource, its pool."""

    __slots__ = (
        "_now",
        "by_resource",
        "cap",
        "capacity",
        "dispatched_at",
        "idle0",
        "max_borrow",
        "ops",
        "outside",
        "pools",
        "seen",
        "spec",
        "sums",
        "taken_by",
        "waiting",
    )

    def __init__(
        self,
        spec: CohortSpec,
        members: Sequence[QueueState],
        ops: Mapping[str, CompiledOperation],
        seen: Mapping[str, ObservedOperation],
        now: datetime,
    ) -> None:
        self.spec = spec
        self.max_borrow = spec.max_borrow_seconds
        self.cap = {r: quota_units(v) for r, v in spec.quota.items()}
        self.pools: dict[Key, list[tuple[QueueState, int]]] = {}
        for q in sorted(members, key=lambda m: m.spec.name):
            for i, key in enumerate(q.keys):
                self.pools.setdefault(key, []).append((q, i))
        # the pools of each resource (one, or one per flavor): the cap counts them all
        self.by_resource: dict[str, list[Key]] = {}
        for key in self.pools:
            self.by_resource.setdefault(key[1], []).append(key)
        # what the cohort can lend of each pool at most (fair sharing's denominator)
        self.capacity: dict[Key, int] = {
            key: sum(
                q.quota[i] if q.lend_limit[i] == _NO_LIMIT else q.lend_limit[i] for q, i in pool
            )
            for key, pool in self.pools.items()
        }
        # per pool: [borrowed, lendable, used] in all, moved along as members hold more
        self.sums: dict[Key, list[int]] = {}
        for key, pool in self.pools.items():
            sums = self.sums[key] = [0, 0, 0]
            for q, i in pool:
                u = q.used[i]
                sums[0] += _borrowed(q, i, u)
                sums[1] += _lendable(q, i, u)
                sums[2] += u
        self.ops = ops
        self.seen = seen
        # when each active op was dispatched: observed, or ``now`` for this plan's
        self.dispatched_at: dict[str, datetime] = {}
        self.waiting: set[Key] = set()  # pools a lender's op waits for (no new borrowing)
        # step 4b: what was idle in each pool when borrowing began, and who borrowed since
        self.idle0: dict[Key, int] = {}
        self.taken_by: dict[Key, set[str]] = {}
        self._now = now
        # per capped resource, what members without a quota for it (in any flavor) use: the
        # cap holds the total use of every member, not only of those in its pools
        self.outside: dict[str, int] = dict.fromkeys(self.cap, 0)
        for q in members:
            for oid in q.active_ids:
                obs = seen.get(oid)
                op = ops.get(oid)
                requests = obs.requests if obs is not None and obs.requests is not None else None
                if requests is None:
                    requests = op.requests if op is not None else {}
                self.take(q, requests)

    def restart(self, now: datetime) -> None:
        """A new admission of the members at ``now`` (the what-if state's): no lender waits
        for its lent quota yet."""
        self.waiting = set()
        self._now = now

    def take(self, q: QueueState, requests: Mapping[str, Decimal]) -> None:
        """Count a run of member ``q`` against the caps its quota does not track."""
        for r in self.outside:
            if r not in q.resources and (v := requests.get(r)) is not None:
                self.outside[r] += request_units(v)

    def give(self, q: QueueState, requests: Mapping[str, Decimal]) -> None:
        """The inverse of ``take``: a run of member ``q`` that ended."""
        for r in self.outside:
            if r not in q.resources and (v := requests.get(r)) is not None:
                self.outside[r] -= request_units(v)

    def cap_fit(
        self, q: QueueState, requests: Mapping[str, Decimal]
    ) -> tuple[PendingReason, Any] | None:
        """The cap for the resources ``q`` has no quota for (its pools' are checked with
        its quota, ``over_cap``): ``CohortLimit`` with (resource, units) when the op would
        pass it."""
        for r, cap in self.cap.items():
            if r in q.resources or (v := requests.get(r)) is None:
                continue
            amount = request_units(v)
            if amount and self.cap_used(r) + amount > cap:
                return _R.COHORT_LIMIT, (r, amount)
        return None

    # -- amounts ---------------------------------------------------------------------------

    def totals(self, key: Key) -> tuple[int, int, int]:
        """The pool ``key`` now: (borrowed, lendable, used) in all (kept as members' use
        moves, ``moved``: asked per candidate and slot, a sum over the members each time
        made a cohort of n queues cost n^2 per plan)."""
        got = self.sums.get(key)
        return (got[0], got[1], got[2]) if got is not None else (0, 0, 0)

    def moved(self, q: QueueState, i: int, before: int, after: int) -> None:
        """Member ``q``'s use of slot ``i`` went from ``before`` to ``after``."""
        got = self.sums[q.keys[i]]
        got[0] += _borrowed(q, i, after) - _borrowed(q, i, before)
        got[1] += _lendable(q, i, after) - _lendable(q, i, before)
        got[2] += after - before

    def room(self, q: QueueState, i: int) -> int:
        """At most what member ``q`` may still take of slot ``i``: what is left of its quota,
        and what it may borrow (within its ``borrowingLimit``, of what the others lend and
        nobody borrows yet: ``borrow_fit``). Members only hold more through a plan's steps 4
        and 4b, so it only shrinks then: a request over it waits whatever comes first."""
        u, quota = q.used[i], q.quota[i]
        borrowed, lendable, _ = self.totals(q.keys[i])
        may = min(q.borrow_limit[i] - max(0, u - quota), lendable - _lendable(q, i, u) - borrowed)
        return max(0, quota - u) + max(0, may)

    def cap_used(self, resource: str) -> int:
        """What the cohort's queues use of ``resource``, every flavor of it counted, and the
        members without a quota for it too."""
        pooled = sum(
            q.used[i] for key in self.by_resource.get(resource, ()) for q, i in self.pools[key]
        )
        return pooled + self.outside.get(resource, 0)

    def over_cap(self, q: QueueState, req: Sequence[int]) -> int | None:
        """The first slot whose request would take the cohort over its cap, if any."""
        if not self.cap:
            return None
        for i, amount in enumerate(req):
            if amount:
                cap = self.cap.get(q.resources[i])
                if cap is not None and self.cap_used(q.resources[i]) + amount > cap:
                    return i
        return None

    def share(self, q: QueueState) -> Fraction:
        """Fair sharing: the largest, over the pools ``q`` borrows from, of what it borrows
        over what the cohort can lend of that pool, divided by its weight."""
        top = Fraction(0)
        for i, key in enumerate(q.keys):
            over = q.used[i] - q.quota[i]
            capacity = self.capacity.get(key, 0)
            if over > 0 and capacity > 0:
                top = max(top, Fraction(over, capacity))
        return top / Fraction(q.spec.fair_weight)

    def lent(self, key: Key, used: Callable[[QueueState, int], int]) -> dict[str, int]:
        """Who lends the pool's borrowed total: the members under their quota, in name
        order, each at most what it may lend."""
        pool = self.pools.get(key, ())
        left = sum(_borrowed(q, i, used(q, i)) for q, i in pool)
        out: dict[str, int] = {}
        for q, i in pool:
            give = min(left, _lendable(q, i, used(q, i)))
            out[q.spec.name] = give
            left -= give
        return out

    # -- check 8 ---------------------------------------------------------------------------

    def own_fit(self, q: QueueState, req: Sequence[int]) -> tuple[PendingReason, Any] | None:
        """Check 8 for a member: None when the op fits the queue's own quota (the quota it
        lent counted as in use); else the reason and its detail (see ``state.py``). An op
        over its own quota gets ``QuotaExceeded`` here and is deferred to ``borrow``. The
        caller marks a ``WaitingForLentQuota`` pool as waited for (``waiting``): with
        flavors, another flavor may still fit."""
        over = lent_short = None
        capped = self.over_cap(q, req)
        if capped is not None:
            return _R.COHORT_LIMIT, (capped, req[capped])
        for i, amount in enumerate(req):
            if not amount:
                continue
            borrowed, lendable, _ = self.totals(q.keys[i])
            u = q.used[i]
            new = u + amount
            if new > q.quota[i]:
                if over is None:
                    over = i
                continue
            after = lendable - _lendable(q, i, u) + _lendable(q, i, new)
            if borrowed > after and lent_short is None:
                lent_short = i
        if over is not None:
            return _R.QUOTA_EXCEEDED, (over, req[over])
        if lent_short is not None:
            return _R.WAITING_FOR_LENT_QUOTA, (lent_short, req[lent_short])
        return None

    def borrow_fit(
        self, q: QueueState, op: CompiledOperation, req: Sequence[int]
    ) -> tuple[PendingReason, Any] | None:
        """Step 4b for a deferred op: None when it may borrow what it needs; else why not.
        Over ``borrowingLimit``, nothing idle to borrow, or a lender waiting for that
        resource: ``QuotaExceeded``; the cap: ``CohortLimit``; a missing or too long
        timeout (when it would otherwise fit): ``BorrowingNotAllowed``; idle when borrowing
        began this cycle, but borrowed since by another queue (a lower weighted share):
        ``WaitingForFairShare``."""
        outside = self.cap_fit(q, op.requests)
        if outside is not None:
            return outside
        capped = self.over_cap(q, req)
        if capped is not None:
            return _R.COHORT_LIMIT, (capped, req[capped])
        for i, amount in enumerate(req):
            if not amount:
                continue
            key = q.keys[i]
            borrowed, lendable, _ = self.totals(key)
            u = q.used[i]
            new = u + amount
            if new <= q.quota[i]:
                # within its own quota for this resource, but that may be lent
                if borrowed > lendable - _lendable(q, i, u) + _lendable(q, i, new):
                    return _R.QUOTA_EXCEEDED, (i, amount)
                continue
            if new - q.quota[i] > q.borrow_limit[i] or key in self.waiting:
                return _R.QUOTA_EXCEEDED, (i, amount)
            more = _borrowed(q, i, new) - _borrowed(q, i, u)
            if borrowed + more > lendable - _lendable(q, i, u):
                others = self.taken_by.get(key, set()) - {q.spec.name}
                if others and more <= self.idle0.get(key, 0):
                    return _R.WAITING_FOR_FAIR_SHARE, (i, amount)
                return _R.QUOTA_EXCEEDED, (i, amount)
        timeout = timeout_seconds(op)
        if timeout is None or timeout > self.max_borrow:
            i = next(i for i, amount in enumerate(req) if q.used[i] + amount > q.quota[i])
            return _R.BORROWING_NOT_ALLOWED, (i, req[i], timeout)
        return None

    # -- step 6 ----------------------------------------------------------------------------

    def start_borrowing(self) -> None:
        """Step 4b begins: what is idle in each pool now (fair sharing tells an op that waits
        because others borrowed it from one that waits because nothing was idle)."""
        for key in self.pools:
            borrowed, lendable, _ = self.totals(key)
            self.idle0[key] = max(0, lendable - borrowed)
        self.taken_by = {}

    def borrowers(self, key: Key) -> tuple[list[str], datetime | None]:
        """The ops that may be borrowing ``r``, by end time, and the latest end (None when
        one is not known). Only an op with a timeout of at most ``maxBorrowDuration`` can
        have been admitted by borrowing, so a queue's use above its quota is held by such
        ops of it (those admitted in its own quota keep it at or under its quota): listing
        them, in the queues above their quota, names every borrower, and they all end by
        the time given."""
        found: list[tuple[datetime | None, str]] = []
        for q, i in self.pools.get(key, ()):
            if q.used[i] <= q.quota[i]:
                continue
            for oid in q.holders[i]:
                # the run's own timeout (as dispatched): a borrower whose file was removed
                # or changed still runs, and holds what it borrowed, until its deadline
                obs = self.seen.get(oid)
                timeout = obs.timeout if obs is not None else None
                if timeout is None:
                    op = self.ops.get(oid)
                    timeout = timeout_seconds(op) if op is not None else None
                if timeout is None or timeout > self.max_borrow:
                    continue
                start = self.dispatched_at.get(oid)
                if start is None:
                    obs = self.seen.get(oid)
                    start = obs.dispatched_at if obs is not None else None
                    if start is not None and start.tzinfo is None:
                        start = start.replace(tzinfo=UTC)
                end = None
                if start is not None:  # as a budget holds it (``BudgetTrack.hold_active``): a
                    # timeout may be 2^63-1 s, a recorded dispatch time anything up to 9999
                    start = min(start, self._now)
                    end = deadline(start, timeout)
                found.append((end, oid))
        found.sort(key=lambda e: (e[0] is None, e[0] or self._now, e[1]))
        ends = [e for e, _ in found]
        latest = None if not ends or None in ends else max(e for e in ends if e is not None)
        return [oid for _, oid in found], latest

    def block(
        self,
        q: QueueState,
        reason: PendingReason,
        detail: Any,
        replicas: int,
        quota_block: Callable[[tuple[int, int], int], QuotaBlock],
    ) -> BlockedBy:
        i, amount = detail[0], detail[1]
        if isinstance(i, str):  # a cap on a resource outside its quota: named
            return CohortLimitBlock(
                self.spec.name,
                i,
                to_decimal(amount),
                to_decimal(self.cap_used(i)),
                to_decimal(self.cap[i]),
            )
        r = q.resources[i]
        key = q.keys[i]
        name = self.spec.name
        if reason is _R.COHORT_LIMIT:
            return CohortLimitBlock(
                name,
                r,
                to_decimal(amount),
                to_decimal(self.cap_used(r)),
                to_decimal(self.cap[r]),
            )
        if reason is _R.BORROWING_NOT_ALLOWED:
            return BorrowingNotAllowedBlock(
                quota_block((i, amount), replicas), name, self.max_borrow, detail[2]
            )
        ids, ends_by = self.borrowers(key)
        if reason is _R.WAITING_FOR_FAIR_SHARE:
            share = self.share(q)
            return FairShareBlock(
                q.spec.name,
                name,
                r,
                to_decimal(amount),
                Decimal(share.numerator) / Decimal(share.denominator),
                q.spec.fair_weight,
                tuple(sorted(self.taken_by.get(key, set()) - {q.spec.name})),
                tuple(ids[:MAX_LISTED]),
                len(ids),
                ends_by,
                key[0],
            )
        lent = self.lent(key, lambda m, j: m.used[j]).get(q.spec.name, 0)
        return LentQuotaBlock(
            q.spec.name,
            name,
            r,
            to_decimal(amount),
            to_decimal(lent),
            tuple(ids[:MAX_LISTED]),
            len(ids),
            ends_by,
            key[0],
        )


def join_cohorts(
    qstate: Mapping[str, QueueState],
    cohorts: Mapping[str, CohortSpec],
    ops: Mapping[str, CompiledOperation],
    seen: Mapping[str, ObservedOperation],
    now: datetime,
) -> None:
    """Give each member queue its cohort, limits in units, and check 4's limits raised by
    what it may borrow."""
    members: dict[str, list[QueueState]] = {}
    for q in qstate.values():
        name = q.spec.cohort
        if name is None:
            continue
        if name not in cohorts:
            raise PlanInputError(f"queue {q.spec.name} names cohort {name!r}, which does not exist")
        members.setdefault(name, []).append(q)
        spec = q.spec
        per_flavor = {f.name: (f.borrowing_limit, f.lending_limit) for f in spec.flavors}
        borrowing: list[int] = []
        lending: list[int] = []
        for flavor, r in q.keys:
            b, lend = (
                per_flavor[flavor]
                if flavor is not None
                else (spec.borrowing_limit, spec.lending_limit)
            )
            borrowing.append(quota_units(b[r]) if r in b else 0)
            lending.append(quota_units(lend[r]) if r in lend else _NO_LIMIT)
        q.borrow_limit = tuple(borrowing)
        q.lend_limit = tuple(lending)
        q.limits = tuple(
            (r, to_decimal(q.quota[i] + q.borrow_limit[i])) for i, r in enumerate(q.resources)
        )
    for name, qs in members.items():
        state = CohortState(cohorts[name], qs, ops, seen, now)
        for q in qs:
            q.cohort = state


def borrow(
    order: Sequence[QueueState],
    counters: Counters,
    now: datetime,
    fleet: FleetState | None = None,
) -> list[Dispatch]:
    """Step 4b: the ops deferred by check 8 because they fit only by borrowing, each
    through checks 6..11 again (6, 7 and 9..11 may have filled since; check 10 chooses a
    fleet queue's cluster as in step 4). Cohorts take their turn in the global order (at
    their first member's place); within a cohort, the next op is the next one of the queue
    with the lowest weighted share (``CohortState.share``; ties: the global order), so
    queues that compete for what the cohort lends get it in proportion to their weights.
    A distributed op borrows its whole request (every replica) or nothing; with flavors,
    in the first eligible flavor it may borrow in."""
    dispatch: list[Dispatch] = []
    done: set[str] = set()
    rank = {q.spec.name: n for n, q in enumerate(order)}
    for q in order:
        cohort = q.cohort
        if cohort is None or not q.deferred or cohort.spec.name in done:
            continue
        done.add(cohort.spec.name)
        members = [m for m in order if m.cohort is cohort and m.deferred]
        cohort.start_borrowing()
        shares: dict[Fraction, Fraction] = {}
        heap = [(*_share_key(cohort, m, shares), rank[m.spec.name], 0) for m in members]
        by_rank = {rank[m.spec.name]: m for m in members}
        gone: dict[str, set[int]] = {m.spec.name: set() for m in members}
        heapq.heapify(heap)
        while heap:
            key, share, n, at = heapq.heappop(heap)
            m = by_rank[n]
            idx = m.deferred[at]
            got = _borrow_one(m, idx, counters, now, fleet)
            if got is not None:
                dispatch.append(got)
                gone[m.spec.name].add(idx)
                key, share = _share_key(cohort, m, shares)  # only its dispatch moves it
            if at + 1 < len(m.deferred):
                heapq.heappush(heap, (key, share, n, at + 1))
        for m in members:
            if gone[m.spec.name]:
                m.pending = [p for k, p in enumerate(m.pending) if k not in gone[m.spec.name]]
            m.deferred = []
    return dispatch


def _share_key(
    cohort: CohortState, q: QueueState, shares: dict[Fraction, Fraction]
) -> tuple[float, Fraction | int]:
    """``q``'s weighted share as a heap key: its float first, compared at C speed (the
    float of a fraction never orders two the wrong way round, it may only tie them), then
    the share itself for such ties: one object per value (``shares``), so equal shares
    compare by identity, at C speed too (0 as an int: most members borrow nothing)."""
    share = cohort.share(q)
    return float(share), shares.setdefault(share, share) if share else 0


def _borrow_one(
    q: QueueState,
    idx: int,
    counters: Counters,
    now: datetime,
    fleet: FleetState | None,
) -> Dispatch | None:
    """Checks 6..11 for the deferred op at ``q.pending[idx]``: its dispatch, counted; or
    None, its pending entry set to why it waits."""
    cohort = q.cohort
    assert cohort is not None
    spec = q.spec
    oid, op, _, _ = q.pending[idx]
    # 6: queue concurrency (a borrower of this queue may have taken the last slot)
    if spec.concurrency is not None and q.active >= spec.concurrency:
        q.pending[idx] = (oid, op, _R.QUEUE_CONCURRENCY_LIMIT, None)
        return None
    # 7: maxPods (a borrower of this queue may have taken the last pods)
    if spec.max_pods is not None and q.pods + op.replicas > spec.max_pods:
        q.pending[idx] = (oid, op, _R.MAX_PODS_REACHED, op.replicas)
        return None
    # 8: borrowing, the whole request (every replica) at once; with flavors, the first
    # eligible flavor that may borrow it
    flavor = -1
    if q.flavors:
        first: tuple[PendingReason, Any] | None = None
        short: list[Any] = []
        for k in q.eligible(op):
            req = q.request(op.requests, k)
            verdict = cohort.borrow_fit(q, op, req)
            if verdict is None:
                flavor = k
                break
            if first is None:
                first = verdict
            if verdict[0] is _R.QUOTA_EXCEEDED:
                short.append(verdict[1])
        if flavor < 0:
            assert first is not None
            if first[0] is _R.QUOTA_EXCEEDED and len(short) > 1:
                first = (_R.QUOTA_EXCEEDED, tuple(short))
            q.pending[idx] = (oid, op, first[0], first[1])
            return None
    else:
        req = q.request(op.requests)
        verdict = cohort.borrow_fit(q, op, req)
        if verdict is not None:
            q.pending[idx] = (oid, op, verdict[0], verdict[1])
            return None
    # 9: workflow parallelism
    wf = op.workflow
    w = None
    if wf is not None:
        w = counters.workflow(wf.parent, wf.concurrency)
        if w.limit is not None and w.active >= w.limit:
            q.pending[idx] = (oid, op, _R.WORKFLOW_PARALLELISM, w)
            return None
    # 10: the cluster: its concurrency; a fleet queue chooses one
    target = op.cluster
    assigned = q.flavors[flavor] if flavor >= 0 else None
    if spec.fleet and fleet is not None:
        choice = fleet.choose(spec, op, counters, assigned)
        if choice.cluster is None:
            reason = choice.reason or _R.CLUSTER_CONCURRENCY_LIMIT
            q.pending[idx] = (oid, op, reason, (choice.members, assigned))
            return None
        target = choice.cluster
        c = counters.cluster(target)
    else:
        c = counters.cluster(target)
        if c.limit is not None and c.active >= c.limit:
            q.pending[idx] = (oid, op, _R.CLUSTER_CONCURRENCY_LIMIT, c)
            return None
    # 11: the queue's budget (a borrower pays for what it borrows), at the prices of the
    # cluster it goes to
    fname = assigned.name if assigned is not None else None
    budget = q.budget
    if budget is not None:
        if budget.unreadable is not None:
            q.pending[idx] = (oid, op, _R.LEDGER_UNREADABLE, None)
            return None
        rate, reserve, timeout = budget.reservation(op, target, fname)
        if budget.window.spent + budget.committed + reserve > budget.window.budget.limit:
            q.pending[idx] = (oid, op, _R.BUDGET_EXCEEDED, reserve)
            return None
        budget.hold_dispatch(rate, reserve, timeout)
    q.hold(oid, req, op.replicas)
    cohort.take(q, op.requests)
    q.dispatched += 1
    c.hold(oid)
    if w is not None:
        w.hold(oid)
    if spec.fleet and fleet is not None:
        fleet.take(spec, op, target, assigned)
    cohort.dispatched_at[oid] = now
    for i, amount in enumerate(req):
        if amount and q.used[i] > q.quota[i]:
            cohort.taken_by.setdefault(q.keys[i], set()).add(spec.name)
    return Dispatch(oid, spec.name, target, fname)


Amounts = dict[Key, Decimal]


def amounts(q: QueueState) -> tuple[Amounts, Amounts, Amounts, Amounts]:
    """A member's borrowed and lent amounts per pool (flavor, resource): observed (before
    this plan), then with this plan applied."""
    cohort = q.cohort
    if cohort is None:
        return {}, {}, {}, {}
    out: list[Amounts] = []
    for which in ("used0", "used"):

        def used(m: QueueState, j: int, which: str = which) -> int:
            return int(getattr(m, which)[j])

        out.append({k: to_decimal(_borrowed(q, i, used(q, i))) for i, k in enumerate(q.keys)})
        out.append({k: to_decimal(cohort.lent(k, used).get(q.spec.name, 0)) for k in q.keys})
    return out[0], out[1], out[2], out[3]
