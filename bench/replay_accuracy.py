"""How close is the what-if replay to what happened? A history is made by the real cycle
over the fake cluster (tests/support/histories.py: copies of the template's operations
arrive as a Poisson stream, each run lasts its own lognormal time, 5 % fail; a cycle every
minute), then replayed under the config it ran under. Printed per queue, recorded against
replayed: wait p50 and p90 and the GPU quota used; then the per-run error of the wait
(median and p90 of |replayed - recorded|) and of the utilisation (percentage points).

    PYTHONPATH=$PWD python bench/replay_accuracy.py [--hours 48] [--per-hour 8] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.histories import arrivals, make_history

from reconciler.adapters.repo import snapshot_checkout
from reconciler.core.compile import compile_repo
from reconciler.core.plan.history import (
    as_recorded,
    figures_of,
    quantile,
    recorded_runs,
    replay_runs,
)

TEMPLATE = Path(__file__).resolve().parents[1] / "config-repo-template"
TEMPLATES = ["language/distill", "vision/train-resnet", "language/tokenize", "vision/train-vit"]
SINCE = datetime(2026, 1, 5, tzinfo=UTC)


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=48)
    ap.add_argument("--per-hour", type=float, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    repo = compile_repo(snapshot_checkout(TEMPLATE))
    until = SINCE + timedelta(hours=args.hours)
    stream = arrivals(repo, TEMPLATES, SINCE, args.hours, args.per_hour, seed=args.seed)
    t = time.perf_counter()
    made = make_history(repo, stream, until)
    made_in = time.perf_counter() - t
    runs = recorded_runs(made.ledger, made.arrivals, SINCE, until)
    t, c = time.perf_counter(), time.process_time()
    replayed = replay_runs(made.repo, runs, SINCE, until, prior=made.ledger)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    recorded = as_recorded(runs, SINCE, until, made.ledger)
    print(
        f"history: {len(stream)} arrivals over {args.hours:g} h, {len(made.ledger)} runs in "
        f"the ledger, made by {args.hours * 60:.0f} cycles in {made_in:.0f} s; replayed in "
        f"{wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU"
    )
    before, after = figures_of(recorded, made.repo), figures_of(replayed, made.repo)
    print(
        f"{'queue':10s} {'runs':>5s} {'p50 rec/rep min':>17s} {'p90 rec/rep min':>17s} "
        f"{'GPU quota used rec/rep':>24s}"
    )
    points = []
    for name in sorted(after):
        a, b = before[name], after[name]
        share = "-"
        if a.utilisation is not None and b.utilisation is not None:
            share = f"{a.utilisation * 100:.1f} % / {b.utilisation * 100:.1f} %"
            points.append(abs(float(a.utilisation - b.utilisation)) * 100)
        print(
            f"{name:10s} {b.runs:5d} {minutes(a.wait_p50):>8s}/{minutes(b.wait_p50):<8s} "
            f"{minutes(a.wait_p90):>8s}/{minutes(b.wait_p90):<8s} {share:>24s}"
        )
    errors = sorted(
        abs(p.waited - p.run.waited)
        for p in replayed.played
        if p.waited is not None and not p.carried
    )
    unstarted = sum(1 for p in replayed.played if p.start is None)
    print(
        f"wait error per run: median {(errors and quantile(errors, 0.5)) or 0:.0f} s, "
        f"p90 {(errors and quantile(errors, 0.9)) or 0:.0f} s, max {max(errors, default=0):.0f} s "
        f"({len(errors)} runs; {unstarted} not started in the replay)"
    )
    print(f"utilisation error: at most {max(points, default=0):.2f} percentage points")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
