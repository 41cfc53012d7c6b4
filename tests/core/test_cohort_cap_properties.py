"""A cohort's cap holds the total use of all its queues, whatever quotas they have: a
member with a quota for the capped resource, one with a quota for another resource only,
and one with no quota at all each count (docs/dispatch.md, "Cohorts")."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import NOW, T0, World

from reconciler.core.plan import CohortLimitBlock, PendingReason, plan_dispatch
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


def test_a_member_without_a_gpu_quota_counts_against_the_gpu_cap() -> None:
    w = World().cluster("local").cohort("pool", "2h", quota={GPU: 2})
    w.queue("gpus", quota={GPU: 2}, cohort="pool")
    w.queue("cpus", quota={"cpu": 100}, cohort="pool")
    for i in range(5):
        w.op(f"p/c{i}", queue="cpus", gpu=1).timeout(600)
    plan = w.plan()
    assert len(plan.dispatch) == 2
    blocked = plan.pending[0]
    assert blocked.reason is PendingReason.COHORT_LIMIT
    assert isinstance(blocked.blocked_by, CohortLimitBlock)
    assert blocked.blocked_by.resource == GPU
    # and with those two running, the queue that has a GPU quota cannot pass the cap either
    w.observe("p/c0", Phase.RUNNING, queue="cpus", requests={GPU: 1})
    w.observe("p/c1", Phase.RUNNING, queue="cpus", requests={GPU: 1})
    w.remove("p/c2", "p/c3", "p/c4")
    w.op("p/g", queue="gpus", gpu=1).timeout(600)
    plan = w.plan()
    assert [p.reason for p in plan.pending] == [PendingReason.COHORT_LIMIT]


@st.composite
def cohorts(
    draw: st.DrawFn,
) -> tuple[dict[str, QueueSpec], CohortSpec, list[tuple[int, CompiledOperation, int]]]:
    queues: dict[str, QueueSpec] = {}
    for i in range(draw(st.integers(2, 4))):
        kind = draw(st.sampled_from(["gpu", "cpu", "none"]))
        quota = {
            "gpu": {GPU: Decimal(draw(st.integers(0, 4)))},
            "cpu": {"cpu": Decimal(draw(st.integers(1, 64)))},
            "none": {},
        }[kind]
        queues[f"q{i}"] = QueueSpec(
            name=f"q{i}",
            cluster="local",
            priority=draw(st.integers(0, 2)),
            quota=quota,
            cohort="pool",
            borrowing_limit={GPU: Decimal(draw(st.integers(0, 4)))} if kind == "gpu" else {},
        )
    cap = draw(st.integers(1, 8))
    cohort = CohortSpec("pool", 3600, {GPU: Decimal(cap)})
    jobs = []
    for n in range(draw(st.integers(1, 16))):
        queue = draw(st.sampled_from(sorted(queues)))
        op = CompiledOperation(
            project="p",
            name=f"j{n}",
            path=f"p/operations/j{n}.yaml",
            queue=queue,
            cluster="local",
            namespace="p",
            kind=RunKind.JOB,
            spec={"kind": "job", "name": f"j{n}", "run": {"timeout": 1800}},
            requests={GPU: Decimal(draw(st.integers(0, 3))), "cpu": Decimal(1)},
            submitted_at=T0 + timedelta(seconds=n),
            timeout=1800,
        )
        jobs.append((draw(st.integers(0, 10)), op, draw(st.integers(1, 6))))
    return queues, cohort, jobs


@settings(max_examples=150, deadline=None)
@given(cohorts())
def test_the_cap_holds_for_any_mix_of_member_quotas(
    drawn: tuple[dict[str, QueueSpec], CohortSpec, list[tuple[int, CompiledOperation, int]]],
) -> None:
    queues, cohort, jobs = drawn
    cap = cohort.quota[GPU]
    started: dict[str, int] = {}
    runs = {op.id: cycles for _, op, cycles in jobs}
    for cycle in range(30):
        finished = {o for o, at in started.items() if at + runs[o] <= cycle}
        observed = [
            ObservedOperation(
                oid,
                Phase.SUCCEEDED if oid in finished else Phase.RUNNING,
                queue=next(op.queue for _, op, _ in jobs if op.id == oid),
                cluster="local",
                dispatched_at=NOW + started[oid] * STEP,
            )
            for oid in started
        ]
        plan = plan_dispatch(
            [op for arrives, op, _ in jobs if arrives <= cycle],
            queues,
            {"local": ClusterSpec("local")},
            observed,
            OrgSettings(),
            NOW + cycle * STEP,
            cohorts={"pool": cohort},
        )
        for d in plan.dispatch:
            started[d.operation] = cycle
        by_id = {op.id: op for _, op, _ in jobs}
        in_use = sum((by_id[o].requests[GPU] for o in started if o not in finished), Decimal(0))
        assert in_use <= cap, (cycle, [d.operation for d in plan.dispatch])
