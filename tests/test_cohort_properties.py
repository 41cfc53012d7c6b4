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

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from builders import NOW, T0
from hypothesis import event, given, settings
from hypothesis import strategies as st

from reconciler.core.observation.capacity import ClusterCapacity, NodeCapacity
from reconciler.core.plan import PendingReason, plan_dispatch
from reconciler.core.types import (
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueSpec,
    RunKind,
)

GPU = "nvidia.com/gpu"
STEP = timedelta(minutes=5)
MAX_BORROW = 3600


@dataclass(frozen=True)
class Job:
    op: CompiledOperation
    arrives: int  # cycle
    runs: timedelta


@dataclass(frozen=True)
class Sim:
    queues: dict[str, QueueSpec]
    cohort: CohortSpec
    jobs: tuple[Job, ...]
    gpus: dict[str, int]  # fleet: each cluster's GPUs (empty: one cluster, local)


@st.composite
def sims(draw: st.DrawFn) -> Sim:
    queues: dict[str, QueueSpec] = {}
    fleet = draw(st.booleans())
    for i in range(draw(st.integers(2, 3))):
        quota = draw(st.integers(1, 4))
        lending = draw(st.none() | st.integers(0, quota))
        order: tuple[str, ...] = tuple(draw(st.permutations(["a", "b"]))) if fleet else ()
        caps = {c: {GPU: Decimal(draw(st.integers(1, 4)))} for c in order if draw(st.booleans())}
        queues[f"q{i}"] = QueueSpec(
            name=f"q{i}",
            cluster=order[0] if fleet else "local",
            priority=draw(st.integers(0, 2)),
            quota={GPU: Decimal(quota)},
            cohort="pool",
            borrowing_limit={GPU: Decimal(draw(st.integers(0, 4)))},
            lending_limit={} if lending is None else {GPU: Decimal(lending)},
            clusters=order,
            cluster_quota=caps,
            require_capacity=fleet and draw(st.booleans()),
        )
    cap = draw(st.none() | st.integers(2, 12))
    cohort = CohortSpec("pool", MAX_BORROW, {} if cap is None else {GPU: Decimal(cap)})
    jobs = []
    for n in range(draw(st.integers(1, 14))):
        queue = draw(st.sampled_from(sorted(queues)))
        timeout = draw(st.none() | st.sampled_from([600, 1800, 3600, 7200]))
        limit = timeout if timeout is not None else 4 * 3600
        runs = timedelta(seconds=draw(st.integers(60, limit)))
        spec: dict[str, object] = {"kind": "job", "name": f"j{n}"}
        if timeout is not None:
            spec["run"] = {"timeout": timeout}
        op = CompiledOperation(
            project="p",
            name=f"j{n}",
            path=f"p/operations/j{n}.yaml",
            queue=queue,
            cluster=queues[queue].cluster,
            namespace="p",
            kind=RunKind.JOB,
            spec=spec,
            requests={GPU: Decimal(draw(st.integers(1, 3)))},
            submitted_at=T0 + timedelta(seconds=n),
        )
        jobs.append(Job(op, draw(st.integers(0, 30)), runs))
    gpus = {c: draw(st.integers(0, 8)) for c in ("a", "b")} if fleet else {}
    return Sim(queues, cohort, tuple(jobs), gpus)


@settings(max_examples=150, deadline=None)
@given(sims())
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
