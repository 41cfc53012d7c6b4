"""Hypothesis properties of flavors and fair sharing.

- Flavors add choice, never a rule: a queue with one flavor plans exactly as the same
  queue without flavors (the same dispatches, reasons, positions, stops and usage), over
  the random worlds of the plan properties and the random cohorts of the cohort
  properties (fleet queues and per-cluster caps included).
- Fair sharing: two queues with weights w1 and w2 and a long backlog of 1-GPU operations,
  borrowing an idle lender's GPUs cycle after cycle while runs end in any order, hold what
  they borrow in the ratio w1:w2, within one operation.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import NOW, T0
from support.strategies import Case, Sim, cases, sims

from reconciler.core.observation.capacity import ClusterCapacity, NodeCapacity
from reconciler.core.plan import Plan, numbered, plan_dispatch
from reconciler.core.types import (
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    FlavorSpec,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueFlavor,
    QueueSpec,
    RunKind,
)

GPU = "nvidia.com/gpu"
ONLY = FlavorSpec("only", {"nvidia.com/gpu.product": "ANY"})


def one_flavor(spec: QueueSpec) -> QueueSpec:
    """The same queue, its quota, limits and caps given as one flavor's."""
    return replace(
        spec,
        quota={},
        borrowing_limit={},
        lending_limit={},
        cluster_quota={},
        flavors=(
            QueueFlavor(
                "only",
                dict(spec.quota),
                dict(spec.borrowing_limit),
                dict(spec.lending_limit),
                {c: dict(v) for c, v in spec.cluster_quota.items()},
            ),
        ),
    )


def decisions(plan: Plan) -> tuple[object, ...]:
    return (
        [(d.operation, d.queue, d.cluster) for d in plan.dispatch],
        [(p.operation, p.queue, p.reason, at) for at, p in numbered(plan.pending)],
        plan.stop,
        plan.prune_refused,
        [
            (q.name, q.active, q.used, q.used_after, q.dispatching, q.pending, q.head_reason)
            for q in plan.queues
        ],
        [(q.name, q.borrowed, q.lent, q.borrowed_after, q.lent_after) for q in plan.queues],
    )


@settings(max_examples=300, deadline=None)
@given(cases())
@pytest.mark.slow
def test_one_flavor_plans_as_no_flavor(case: Case) -> None:
    plain = case.plan()
    flavored = plan_dispatch(
        case.ops,
        {n: one_flavor(q) for n, q in case.queues.items()},
        case.clusters,
        case.observed,
        case.org,
        NOW,
        flavors={"only": ONLY},
    )
    assert decisions(flavored) == decisions(plain)
    assert {d.flavor for d in flavored.dispatch} <= {"only"}
    assert {d.flavor for d in plain.dispatch} <= {None}


@settings(max_examples=150, deadline=None)
@given(sims(), st.integers(0, 30), st.data())
def test_one_flavor_plans_as_no_flavor_in_a_cohort(
    sim: Sim, cycle: int, data: st.DataObject
) -> None:
    ops = [j.op for j in sim.jobs if j.arrives <= cycle]
    running = data.draw(
        st.lists(st.sampled_from(ops), unique_by=lambda o: o.id) if ops else st.just([])
    )
    clusters = {c: ClusterSpec(c) for c in sim.gpus or ("local",)}
    observed = [
        ObservedOperation(
            op.id,
            Phase.RUNNING,
            queue=op.queue,
            cluster=op.cluster,
            dispatched_at=NOW - timedelta(minutes=data.draw(st.integers(0, 200))),
        )
        for op in running
    ]
    capacity = {
        # the one flavor's nodes are every node (it selects by a label they all carry)
        c: ClusterCapacity(
            (NodeCapacity(f"{c}-1", dict(ONLY.node_labels), allocatable={GPU: Decimal(n)}),)
        )
        for c, n in sim.gpus.items()
    }

    def plan(queues: dict[str, QueueSpec]) -> Plan:
        return plan_dispatch(
            ops,
            queues,
            clusters,
            observed,
            OrgSettings(),
            NOW,
            cohorts={"pool": sim.cohort},
            capacity=capacity,
            flavors={"only": ONLY},
        )

    plain = plan(sim.queues)
    flavored = plan({n: one_flavor(q) for n, q in sim.queues.items()})
    assert decisions(flavored) == decisions(plain)


# --- fair sharing -------------------------------------------------------------------------

LENDS = 12


def fair_world(weights: tuple[int, int]) -> tuple[dict[str, QueueSpec], list[CompiledOperation]]:
    queues = {
        name: QueueSpec(
            name=name,
            cluster="local",
            priority=100,
            quota={GPU: Decimal(1)},
            cohort="pool",
            borrowing_limit={GPU: Decimal(100)},
            fair_weight=Decimal(weight),
        )
        for name, weight in zip(("team-a", "team-b"), weights, strict=True)
    }
    queues["lender"] = QueueSpec(
        name="lender", cluster="local", quota={GPU: Decimal(LENDS)}, cohort="pool"
    )
    ops = [
        CompiledOperation(
            project=team.removeprefix("team-"),
            name=f"op{i}",
            path=f"{team}/op{i}.yaml",
            queue=team,
            cluster="local",
            namespace="p",
            kind=RunKind.JOB,
            spec={},
            requests={GPU: Decimal(1)},
            timeout=3600,
            submitted_at=T0 + timedelta(seconds=i),
        )
        for team in ("team-a", "team-b")
        for i in range(120)
    ]
    return queues, ops


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([(1, 1), (1, 3), (3, 1), (2, 3), (1, 2)]),
    st.lists(st.lists(st.integers(0, 200), max_size=4), min_size=10, max_size=25),
)
@pytest.mark.slow
def test_fair_sharing_borrows_in_the_ratio_of_the_weights(
    weights: tuple[int, int], ends: list[list[int]]
) -> None:
    queues, ops = fair_world(weights)
    cohort = {"pool": CohortSpec("pool", 7200)}
    running: dict[str, ObservedOperation] = {}
    done: set[str] = set()
    for cycle, ending in enumerate(ends):
        now = NOW + timedelta(minutes=cycle)
        plan = plan_dispatch(
            [op for op in ops if op.id not in done],
            queues,
            {"local": ClusterSpec("local")},
            list(running.values()),
            OrgSettings(),
            now,
            cohorts=cohort,
        )
        for d in plan.dispatch:
            running[d.operation] = ObservedOperation(
                d.operation, Phase.RUNNING, queue=d.queue, cluster="local", dispatched_at=now
            )
        borrowed = {q.name: q.borrowed_after.get(GPU, Decimal(0)) for q in plan.queues}
        a, b = int(borrowed["team-a"]), int(borrowed["team-b"])
        wa, wb = weights
        # every idle GPU is borrowed, and a/wa and b/wb differ by at most one operation
        assert a + b == LENDS, (cycle, a, b)
        assert abs(Decimal(a) / wa - Decimal(b) / wb) <= 1, (weights, cycle, a, b)
        # some runs end, in any order (finished: they count nowhere)
        names = sorted(running)
        for k in ending:
            if names:
                gone = names.pop(k % len(names))
                del running[gone]
                done.add(gone)
