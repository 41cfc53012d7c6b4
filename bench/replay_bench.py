"""Benchmark the what-if replay of ``plan --base --replay 7d``: a fleet of 40 queues on 4
clusters (two with a concurrency limit, four queues in a cohort, five with a monthly cost
budget) that ran 1,000 operations a day for 7 days (lognormal durations, median ~40 min, 5 %
failed), replayed under its own config and under a change (one queue's priority raised,
another's GPU quota halved). Prints the CPU and wall time of reading the runs, each replay
and the comparison, side by side with one plan of the same fleet, and last the total
against the goal (7 days of 1,000 a day in <= 10 s of CPU).

    PYTHONPATH=$PWD python bench/replay_bench.py [--days 7] [--per-day 1000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from reconciler.core.plan import plan_dispatch
from reconciler.core.plan.history import compare_replays, recorded_runs, replay_runs
from reconciler.core.plan.ledger import LedgerEntry
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    CompiledRepo,
    OrgSettings,
    QueueSpec,
    RunKind,
)

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 12, 20, 12, 0, tzinfo=UTC)
COHORT = CohortSpec("shared", 4 * 3600)


def fleet(seed: int = 3) -> CompiledRepo:
    rng = random.Random(seed)
    clusters = {f"c{i}": ClusterSpec(f"c{i}", concurrency=40 if i < 2 else None) for i in range(4)}
    queues = {}
    for i in range(40):
        name = f"q{i:02d}"
        budget = (
            BudgetSpec(Decimal(rng.choice([3000, 6000])), BudgetPeriod.MONTH)
            if i % 8 == 3
            else None
        )
        cohort = COHORT.name if i in (8, 9, 10, 11) else None
        gpus = Decimal(rng.choice([4, 8, 16]))
        queues[name] = QueueSpec(
            name,
            f"c{i % 4}",
            priority=rng.randint(0, 10),
            concurrency=rng.choice([None, 8, 16]),
            quota={GPU: gpus},
            budget=budget,
            cohort=cohort,
            borrowing_limit={GPU: gpus} if cohort else {},
        )
    org = OrgSettings(prices={GPU: Decimal("2.5")}, currency="USD")
    return CompiledRepo("base", org, clusters, queues, (), cohorts={COHORT.name: COHORT})


def history(repo: CompiledRepo, days: int, per_day: int, seed: int = 5):  # type: ignore[no-untyped-def]
    """The ledger of ``days`` of ``per_day`` runs and each operation's first commit."""
    rng = random.Random(seed)
    since = NOW - timedelta(days=days)
    names = sorted(repo.queues)
    entries, submitted = [], {}
    for k in range(days * per_day):
        q = repo.queues[rng.choice(names)]
        op = f"p{k % 50}/run-{k}"
        arrival = since + timedelta(seconds=rng.uniform(0, days * 86400))
        start = arrival + timedelta(seconds=rng.expovariate(1 / 600))
        seconds = min(12 * 3600, rng.lognormvariate(7.8, 0.8))
        gpus = Decimal(rng.choice([1, 1, 2, 4]))
        submitted[op] = arrival
        entries.append(
            LedgerEntry(
                operation=op,
                generation=1,
                workload=f"w-{k}",
                queue=q.name,
                cluster=q.cluster,
                phase="Failed" if rng.random() < 0.05 else "Succeeded",
                requests={GPU: gpus},
                start=start,
                end=start + timedelta(seconds=seconds),
                cost=Decimal(0),
            )
        )
    return entries, submitted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--per-day", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    base = fleet()
    queues = dict(base.queues)
    queues["q05"] = replace(queues["q05"], priority=20)
    queues["q03"] = replace(queues["q03"], quota={GPU: queues["q03"].quota[GPU] / 2})
    head = replace(base, version="head", queues=queues)
    entries, submitted = history(base, args.days, args.per_day)
    since = NOW - timedelta(days=args.days)
    best: dict[str, tuple[float, float]] = {}

    def timed(name: str, call, *args, **kwargs):  # type: ignore[no-untyped-def]
        t, c = time.perf_counter(), time.process_time()
        out = call(*args, **kwargs)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        old = best.get(name, (float("inf"), float("inf")))
        best[name] = (min(old[0], wall), min(old[1], cpu))
        return out

    for _ in range(args.repeat):
        runs = timed("read runs", recorded_runs, entries, submitted, since, NOW)
        before = timed("replay base", replay_runs, base, runs, since, NOW, prior=entries)
        after = timed("replay head", replay_runs, head, runs, since, NOW, prior=entries)
        what = timed("compare", compare_replays, (base, before), (head, after), entries, NOW)
        ops = [
            CompiledOperation(
                project=r.operation.split("/")[0],
                name=r.operation.split("/")[1],
                path="",
                queue=r.queue,
                cluster=r.cluster,
                namespace="",
                kind=RunKind.JOB,
                spec={},
                requests=r.requests,
                submitted_at=r.arrival,
                timeout=12 * 3600,
            )
            for r in runs[: args.per_day // 10]
        ]
        timed(
            f"one plan ({len(ops)} queued)",
            plan_dispatch,
            ops,
            base.queues,
            base.clusters,
            (),
            base.org,
            NOW,
            cohorts=base.cohorts,
        )
    print(f"history: {len(entries)} runs over {args.days} days, {what.runs} replayed per side")
    total = sum(cpu for name, (_, cpu) in best.items() if not name.startswith("one plan"))
    plan_cpu = next(cpu for name, (_, cpu) in best.items() if name.startswith("one plan"))
    for name, (wall, cpu) in best.items():
        print(f"{name:24s} {wall * 1000:9.1f} ms wall {cpu * 1000:9.1f} ms CPU")
    print(f"ratio replay (both sides)/one plan: {total / plan_cpu:.0f} CPU")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ok = "met" if total <= 10.0 else "MISSED"
    print(f"goal: {args.days} days of {args.per_day} a day in {total:.2f} s CPU (<= 10 s): {ok}")


if __name__ == "__main__":
    main()
