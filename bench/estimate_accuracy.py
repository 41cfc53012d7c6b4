"""How good are the start estimates? Replays a generated history through a fast simulated
cluster and compares each estimate with what happened.

The simulated cluster: queues (concurrency limits, a GPU quota, priorities, one StrictFIFO,
two sharing a cluster with a concurrency limit) receive operations at random times (a
Poisson stream, a higher rate in the first hours so queues build up). Each operation
belongs to a workload family (its project: ``resnet``, ``bert``, ...) whose runs take a
random time drawn from the family's own lognormal distribution, in the queue it always
uses. The reconciler's cycle is the real planner (``plan_repo``) at every arrival and every
end; what it dispatches then runs for its drawn duration.

At each step (every arrival, at most one step per simulated 5 minutes) every pending
operation's estimate is recorded (``estimate_starts``: the same function every view uses,
with the finished runs so far as history); when the operation is later dispatched, the
estimate is compared with the actual time. Printed: how many estimates, how they split by
state, the median absolute error of the p50 (minutes, and relative to the wait it
predicted), and how often the actual dispatch fell at or before the p90.

    PYTHONPATH=$PWD python bench/estimate_accuracy.py [--hours 48] [--seeds 3]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from reconciler.core.plan import plan_repo
from reconciler.core.plan.estimate import EtaState, RunRecord, estimate_starts
from reconciler.core.types import (
    ClusterSpec,
    CompiledOperation,
    CompiledRepo,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueSpec,
    QueueStrategy,
    RunKind,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
STEP = timedelta(minutes=5)

# family -> (queue, median minutes, lognormal sigma, GPUs)
FAMILIES = {
    "resnet": ("team-a", 45, 0.35, 1),
    "bert": ("team-a", 120, 0.5, 2),
    "sweep": ("team-b", 15, 0.6, 1),
    "etl": ("batch", 10, 0.3, 0),
    "report": ("batch", 25, 0.4, 0),
    "pretrain": ("research", 240, 0.3, 4),
    "eval": ("research", 20, 0.5, 1),
}


def world() -> tuple[dict[str, ClusterSpec], dict[str, QueueSpec]]:
    clusters = {"gpu": ClusterSpec("gpu", concurrency=6), "cpu": ClusterSpec("cpu")}
    queues = {
        "team-a": QueueSpec("team-a", "gpu", priority=5, quota={GPU: Decimal(4)}),
        "team-b": QueueSpec("team-b", "gpu", priority=1, concurrency=2),
        "research": QueueSpec(
            "research",
            "gpu",
            priority=3,
            quota={GPU: Decimal(8)},
            strategy=QueueStrategy.STRICT_FIFO,
        ),
        "batch": QueueSpec("batch", "cpu", concurrency=3),
    }
    return clusters, queues


@dataclass
class Sample:
    operation: str
    at: datetime
    state: EtaState
    p50: datetime | None
    p90: datetime | None


def replay(hours: float, seed: int) -> tuple[list[Sample], dict[str, datetime], float, int]:
    rng = random.Random(seed)
    clusters, queues = world()
    families = sorted(FAMILIES)
    # history: 5 earlier runs of each family
    history = [
        RunRecord(f"{f}/warmup-{i}", FAMILIES[f][0], _draw(rng, f))
        for f in families
        for i in range(5)
    ]
    end = T0 + timedelta(hours=hours)
    events: list[tuple[datetime, int, str, str]] = []  # (time, order, kind, operation)
    seq = 0
    t = T0
    while t < end:
        busy = (t - T0) < timedelta(hours=hours / 4)
        t += timedelta(minutes=rng.expovariate(1 / (6 if busy else 20)))
        family = rng.choice(families)
        seq += 1
        heapq.heappush(events, (t, seq, "arrive", f"{family}/run-{seq}"))
    ops: dict[str, CompiledOperation] = {}
    running: dict[str, tuple[datetime, float]] = {}  # op -> (start, true seconds)
    dispatched: dict[str, datetime] = {}
    samples: list[Sample] = []
    last_step = T0 - STEP
    cost = 0.0
    steps = 0
    while events:
        now = events[0][0]
        arrived = False
        while events and events[0][0] == now:
            _, _, kind, oid = heapq.heappop(events)
            family = oid.split("/", 1)[0]
            if kind == "arrive":
                queue, _, _, gpus = FAMILIES[family]
                ops[oid] = CompiledOperation(
                    project=family,
                    name=oid.split("/", 1)[1],
                    path=f"{oid}.yaml",
                    queue=queue,
                    cluster=queues[queue].cluster,
                    namespace=family,
                    kind=RunKind.JOB,
                    spec={},
                    requests={GPU: Decimal(gpus)} if gpus else {},
                    submitted_at=now,
                )
                arrived = True
            else:  # the run ends: it leaves the world and joins the history
                _, seconds = running.pop(oid)
                history.append(RunRecord(oid, ops[oid].queue, seconds))
                del ops[oid]
        repo = CompiledRepo("sim", OrgSettings(), clusters, queues, tuple(ops.values()))
        observed = [ObservedOperation(oid, Phase.RUNNING, queue=ops[oid].queue) for oid in running]
        plan = plan_repo(repo, observed, now)
        for d in plan.dispatch:
            dispatched[d.operation] = now
            seconds = _draw(rng, d.operation.split("/", 1)[0])
            running[d.operation] = (now, seconds)
            seq += 1
            heapq.heappush(events, (now + timedelta(seconds=seconds), seq, "end", d.operation))
        if arrived and now - last_step >= STEP and plan.pending:
            last_step = now
            steps += 1
            # the same inputs as the plan (what it dispatches starts now in the estimate)
            starts = {oid: s for oid, (s, _) in running.items()}
            c = time.process_time()
            est = estimate_starts(repo, plan, observed, starts, history, now)
            cost += time.process_time() - c
            for p in plan.pending:
                e = est.pending[p.operation]
                samples.append(Sample(p.operation, now, e.p50.state, e.p50.at, e.p90.at))
    return samples, dispatched, cost, steps


def _draw(rng: random.Random, family: str) -> float:
    _, median, sigma, _ = FAMILIES[family]
    return median * 60 * math.exp(rng.gauss(0, sigma))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=48)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    errors: list[float] = []
    relative: list[float] = []
    under_p90 = dated = 0
    states: Counter[str] = Counter()
    total_cost = 0.0
    total_steps = 0
    horizon_late = horizon_total = p90_beyond = 0
    for seed in range(args.seeds):
        samples, dispatched, cost, steps = replay(args.hours, seed)
        total_cost += cost
        total_steps += steps
        for s in samples:
            actual = dispatched.get(s.operation)
            if actual is None:
                continue  # never dispatched within the replay
            states[str(s.state)] += 1
            if s.state is EtaState.AFTER_HORIZON:
                horizon_total += 1
                horizon_late += actual - s.at > timedelta(hours=24)
            if s.state is not EtaState.AT or s.p50 is None:
                continue
            dated += 1
            err = abs((actual - s.p50).total_seconds()) / 60
            errors.append(err)
            wait = max((actual - s.at).total_seconds() / 60, 1.0)
            relative.append(err / wait)
            if s.p90 is None:  # the p90 is "after 24 h": anything is at or before it
                p90_beyond += 1
                under_p90 += 1
            else:
                under_p90 += actual <= s.p90
    print(
        f"replay: {args.seeds} seeds x {args.hours:g} h simulated, {total_steps} steps, "
        f"{sum(states.values())} estimates of operations later dispatched"
    )
    print(f"states: {dict(sorted(states.items()))}")
    if errors:
        q = statistics.quantiles(errors, n=10)
        print(
            f"p50 absolute error: median {statistics.median(errors):.1f} min, "
            f"p90 of errors {q[-1]:.1f} min, mean {statistics.mean(errors):.1f} min"
        )
        print(f"p50 error relative to the actual wait: median {statistics.median(relative):.0%}")
        print(
            f"actual dispatch at or before the p90: {under_p90 / dated:.1%} of {dated} "
            f"({p90_beyond} of them with the p90 'after 24 h')"
        )
    if horizon_total:
        print(f"'after 24 h' and really later than 24 h: {horizon_late} of {horizon_total}")
    print(f"estimate cost: {total_cost / max(total_steps, 1) * 1000:.1f} ms CPU per step")


if __name__ == "__main__":
    main()
