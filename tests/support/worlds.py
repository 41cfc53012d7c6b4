"""Compiled worlds shared by the view and plan tests: the seed example, a cohort, and the
states of a plan's dispatches."""

from __future__ import annotations

from reconciler.core.observation.observe import ObservedReason, WorkloadState
from reconciler.core.plan import (
    Plan,
)
from reconciler.core.types import CompiledRepo, Phase
from support.builders import World


def seed_world() -> World:
    w = (
        World()
        .cluster("local")
        .queue("team-a", quota={"nvidia.com/gpu": 2})
        .queue("team-b", quota={"nvidia.com/gpu": 4})
        .queue("batch", concurrency=3)
    )
    w.ops("vision/train-{}", 5, queue="team-a", gpu=1)
    w.ops("nlp/ft-{}", 6, queue="team-b", gpu=1)
    w.ops("etl/job-{}", 5, queue="batch")
    return w


def cohort_world() -> World:
    """team-a: 1 h100 and 1 a100 (may borrow 2 a100); team-b: 4 of each, lending; plain: a
    queue without flavors. team-a's 3-GPU run borrows 2 a100 from team-b."""
    w = (
        World()
        .cluster("local")
        .cohort("pool", "2h")
        .queue("team-a", cohort="pool", priority=100)
        .flavored(
            "team-a",
            ("h100", {"gpu": 1}),
            ("a100", {"gpu": 1}),
            borrowing_limit={"a100": {"gpu": 2}},
        )
        .queue("team-b", cohort="pool", priority=50)
        .flavored("team-b", ("h100", {"gpu": 4}), ("a100", {"gpu": 4}))
        .queue("plain", quota={"nvidia.com/gpu": 2}, priority=10)
    )
    w.op("vision/big", queue="team-a", gpu=3).timeout("1h")
    w.op("vision/small", queue="team-b", gpu=1)
    w.op("vision/plain", queue="plain", gpu=1)
    return w


def dispatched_states(repo: CompiledRepo, plan: Plan) -> dict[str, WorkloadState]:
    """What a cycle that carried out ``plan`` would observe next: every dispatch a Job;
    the first of each queue Running, the others WaitingForCapacity."""
    ops = {op.id: op for op in repo.operations}
    seen: set[str] = set()
    out = {}
    for d in plan.dispatch:
        op = ops[d.operation]
        running = d.queue not in seen
        seen.add(d.queue)
        out[op.id] = WorkloadState(
            operation=op.id,
            generation=op.generation,
            cluster=op.cluster,
            namespace=op.namespace,
            name=f"{op.project}-{op.name}-g1",
            uid="u",
            phase=Phase.RUNNING if running else Phase.DISPATCHED,
            reason=None if running else ObservedReason.WAITING_FOR_CAPACITY,
            queue=op.queue,
            flavor=d.flavor,  # as observed from the Job's label
            requests=dict(op.requests),
            dispatched_at="2026-01-01T00:00:00+00:00",
            started_at="2026-01-01T00:00:05+00:00" if running else None,
            pod=f"{op.project}-{op.name}-g1-abcde",
        )
    return out
