"""How close is the what-if replay to what happened? A history is made by the real cycle
over the fake cluster (tests/support/histories.py: copies of the template's operations
arrive as a Poisson stream, each run lasts its own lognormal time, 5 % fail; a cycle every
minute), then replayed under the config it ran under. Printed per queue, recorded against
replayed: wait p50 and p90 and the GPU quota used; then the per-run error of the wait
(median and p90 of |replayed - recorded|) and of the utilisation (percentage points).

    PYTHONPATH=$PWD python bench/replay_accuracy.py [--hours 48] [--per-hour 8] [--seed 1]
    PYTHONPATH=$PWD python bench/replay_accuracy.py --repo DEMO_WORKDIR/config

With ``--repo``, the history is that repo's own (its status branch, e.g. the one
``reconciler demo --workdir`` leaves), replayed under the config at its HEAD.
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

from reconciler.adapters.repo import snapshot_checkout, snapshot_git
from reconciler.cli.plan_cmd import status_on_branch
from reconciler.core.compile import compile_repo
from reconciler.core.plan.history import (
    Replay,
    as_recorded,
    figures_of,
    quantile,
    recorded_runs,
    replay_runs,
)
from reconciler.core.types import CompiledRepo

TEMPLATE = Path(__file__).resolve().parents[1] / "config-repo-template"
TEMPLATES = ["language/distill", "vision/train-resnet", "language/tokenize", "vision/train-vit"]
SINCE = datetime(2026, 1, 5, tzinfo=UTC)


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def report(repo: CompiledRepo, recorded: Replay, replayed: Replay) -> None:
    """Per queue, recorded against replayed; then the per-run errors."""
    before, after = figures_of(recorded, repo), figures_of(replayed, repo)
    print(
        f"{'queue':10s} {'runs':>5s} {'p50 rec/rep min':>17s} {'p90 rec/rep min':>17s} "
        f"{'GPU quota used rec/rep':>24s}"
    )
    points = []
    for name in sorted(after):
        a, b = before.get(name), after[name]
        if a is None:
            continue
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
    median = quantile(errors, 0.5) if errors else 0.0
    p90 = quantile(errors, 0.9) if errors else 0.0
    print(
        f"wait error per run: median {median:.0f} s, p90 {p90:.0f} s, "
        f"max {max(errors, default=0):.0f} s ({len(errors)} runs; {unstarted} not started "
        "in the replay)"
    )
    print(f"utilisation error: at most {max(points, default=0):.2f} percentage points")


def recorded_history(path: Path, resolution: timedelta) -> None:
    """The recorded history of a config repo's status branch (the demo's), replayed under
    the config at its HEAD."""
    view = status_on_branch(path)
    if view is None or not view.ledger:
        raise SystemExit(f"{path}: no status branch with a ledger")
    repo = compile_repo(snapshot_git(path, "HEAD"))
    entries = view.ledger
    since = min(e.start for e in entries).replace(second=0, microsecond=0)
    submitted = {op.id: op.submitted_at for op in repo.operations if op.submitted_at}
    since = min(since, *(at.replace(second=0, microsecond=0) for at in submitted.values()))
    until = max(e.end for e in entries) + timedelta(minutes=1)
    runs = recorded_runs(entries, submitted, since, until)
    t, c = time.perf_counter(), time.process_time()
    replayed = replay_runs(repo, runs, since, until, prior=entries, resolution=resolution)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(
        f"history: {len(runs)} runs of {path} from {since:%Y-%m-%d %H:%M} to "
        f"{until:%H:%M} UTC, replayed on a {resolution.total_seconds():g} s grid in "
        f"{wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU"
    )
    report(repo, as_recorded(runs, since, until, entries), replayed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=48)
    ap.add_argument("--per-hour", type=float, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repo", type=Path, help="replay this repo's status branch (the demo's)")
    ap.add_argument("--resolution", type=float, default=60, help="the replay's grid, seconds")
    args = ap.parse_args()
    resolution = timedelta(seconds=args.resolution)
    if args.repo is not None:
        recorded_history(args.repo, resolution)
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    repo = compile_repo(snapshot_checkout(TEMPLATE))
    until = SINCE + timedelta(hours=args.hours)
    stream = arrivals(repo, TEMPLATES, SINCE, args.hours, args.per_hour, seed=args.seed)
    t = time.perf_counter()
    made = make_history(repo, stream, until)
    made_in = time.perf_counter() - t
    runs = recorded_runs(made.ledger, made.arrivals, SINCE, until)
    t, c = time.perf_counter(), time.process_time()
    replayed = replay_runs(made.repo, runs, SINCE, until, prior=made.ledger, resolution=resolution)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(
        f"history: {len(stream)} arrivals over {args.hours:g} h, {len(made.ledger)} runs in "
        f"the ledger, made by {args.hours * 60:.0f} cycles in {made_in:.0f} s; replayed in "
        f"{wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU"
    )
    report(made.repo, as_recorded(runs, SINCE, until, made.ledger), replayed)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
