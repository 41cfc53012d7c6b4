"""Hypothesis properties of cohort borrowing, simulated forward with the planner.

A random cohort (2-3 queues, GPU quotas, borrowing and lending limits, maybe a cap) and
random operations (arrival, size, timeout or none, a run time within the timeout) are run
cycle by cycle: each cycle plans with the running operations observed, dispatches what the
plan says, and finishes what has run its time. At every cycle:

- each queue's use ≤ its quota + what it borrowed, and what it borrowed ≤ its
  ``borrowingLimit``;
- each lender's lent ≤ its ``lendingLimit`` (and its unused quota), and everything borrowed
  is lent by someone (the cohort never uses more than its members' quotas);
- the cohort's cap holds;
- a lender's operation waits ``WaitingForLentQuota`` for at most ``maxBorrowDuration``
  (plus one cycle: the simulation sees a finished borrower at the next cycle).

Half the cohorts are fleet queues over clusters a and b (each queue in its own order, some
with a ``clusterQuota`` or ``requireCapacity``; each cluster one GPU node whose free GPUs
are what the running operations leave): the same properties hold fleet-wide, every
operation goes to one of its queue's clusters, and no ``clusterQuota`` is exceeded.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import event, given, settings
from support.builders import NOW
from support.strategies import GPU, MAX_BORROW, STEP, Sim, sims

from reconciler.core.observation.capacity import ClusterCapacity, NodeCapacity
from reconciler.core.plan import PendingReason, plan_dispatch
from reconciler.core.types import (
    ClusterSpec,
    ObservedOperation,
    OrgSettings,
    Phase,
)


@settings(max_examples=150, deadline=None)
@given(sims())
@pytest.mark.slow
def test_borrowing_invariants_and_the_bounded_reclaim(sim: Sim) -> None:
    clusters = {c: ClusterSpec(c) for c in sim.gpus or ("local",)}
    started: dict[str, datetime] = {}
    where: dict[str, str] = {}  # the cluster each dispatched op went to
    finished: set[str] = set()
    waiting_since: dict[str, datetime] = {}
    by_id = {j.op.id: j for j in sim.jobs}
    for cycle in range(120):
        now = NOW + cycle * STEP
        for oid, at in started.items():
            if oid not in finished and at + by_id[oid].runs <= now:
                finished.add(oid)
        ops = [j.op for j in sim.jobs if j.arrives <= cycle]
        observed = [
            ObservedOperation(
                oid,
                Phase.SUCCEEDED if oid in finished else Phase.RUNNING,
                queue=by_id[oid].op.queue,
                cluster=where[oid],
                dispatched_at=at,
            )
            for oid, at in started.items()
        ]
        running = [o for o in started if o not in finished]
        capacity = {
            c: ClusterCapacity(
                (
                    NodeCapacity(
                        f"{c}-1",
                        allocatable={GPU: Decimal(n)},
                        requested={
                            GPU: sum(
                                (by_id[o].op.requests[GPU] for o in running if where[o] == c),
                                Decimal(0),
                            )
                        },
                    ),
                )
            )
            for c, n in sim.gpus.items()
        }
        plan = plan_dispatch(
            ops,
            sim.queues,
            clusters,
            observed,
            OrgSettings(),
            now,
            cohorts={"pool": sim.cohort},
            capacity=capacity,
        )
        total_borrowed = total_lent = Decimal(0)
        for q in plan.queues:
            spec = sim.queues[q.name]
            used, borrowed, lent = q.used[GPU], q.borrowed[GPU], q.lent[GPU]
            nominal = spec.quota[GPU]
            assert used <= nominal + borrowed
            assert borrowed <= spec.borrowing_limit[GPU]
            assert lent <= spec.lending_limit.get(GPU, nominal)
            assert lent <= max(Decimal(0), nominal - used)
            total_borrowed += borrowed
            total_lent += lent
        assert total_lent == total_borrowed
        if GPU in sim.cohort.quota:
            assert sum(q.used[GPU] for q in plan.queues) <= sim.cohort.quota[GPU]
        for p in plan.pending:
            if p.reason is PendingReason.WAITING_FOR_LENT_QUOTA:
                event("a lender's op waited for lent quota")
                since = waiting_since.setdefault(p.operation, now)
                assert now - since <= timedelta(seconds=MAX_BORROW) + STEP, p.message
                assert p.admit.at is not None
                assert p.admit.at <= since + timedelta(seconds=MAX_BORROW)
            else:
                waiting_since.pop(p.operation, None)
        for d in plan.dispatch:
            if sim.queues[d.queue].quota[GPU] < sum(
                by_id[o].op.requests[GPU]
                for o in [*started, d.operation]
                if o not in finished and by_id[o].op.queue == d.queue
            ):
                event("an op borrowed")
            waiting_since.pop(d.operation, None)
            started[d.operation] = now
            where[d.operation] = d.cluster
            # a fleet queue's op goes to one of its clusters, within its clusterQuota there
            spec = sim.queues[d.queue]
            assert d.cluster in spec.members
        for name, spec in sim.queues.items():
            for c, cap in spec.cluster_quota.items():
                there = [
                    o
                    for o in started
                    if o not in finished and where[o] == c and by_id[o].op.queue == name
                ]
                if there:
                    event("a clusterQuota was in use")
                assert sum(by_id[o].op.requests[GPU] for o in there) <= cap[GPU]
