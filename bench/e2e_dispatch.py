"""End-to-end dispatch, the reconciler against a raw client, in interleaved pairs.

Each run gets a fresh dev cluster and dispatches N Jobs, the very manifests
``core/render.py`` renders, W creates in flight:

- raw: a kubernetes-client loop creates them;
- reconciler: what ``reconciler run --interval I --status-interval 10s`` builds
  (``make_runtime``) dispatches them from a fresh commit under a queue whose limits allow
  them all, then keeps cycling every ``--interval`` seconds.

Runs alternate raw, reconciler, raw, reconciler... (``--pairs`` pairs), so a change of the
machine's load falls on both sides. For each run an independent watcher times "all Jobs
exist" and "all pods Running"; /proc gives the CPU of every process (apiserver, etcd,
controller-manager, scheduler, kwok, the client or reconciler) and of the others on the
machine (a run during which other processes used more than 0.2 cores is FLAGged); the
apiserver's /metrics gives requests by verb and resource. It prints each run, the costs per
operation, then last the ratios reconciler/raw per pair: median and spread.

``--side raw`` or ``--side reconciler`` runs that side only, ``--pairs`` times (to measure
a change of one side: no ratios). Each reconciler run also prints its process's CPU per
operation by kind of thread (watches, creates, status writer, main), in the window.

``--binding`` adds the binding case on one more cluster: M operations of D seconds each
asking one GPU, under a queue with a quota of C GPUs; admissions per second against C/D.
The reconciler runs as ``reconciler run`` does, cycles on events (``--binding-mode poll``:
a cycle every 0.5 s, as before cycles ran on events).

    PYTHONPATH=$PWD python bench/e2e_dispatch.py [-n 2000] [--pairs 5] [-w 8]
        [--side both|raw|reconciler] [--binding -m 400 -c 100 -d 10
        [--binding-mode events|poll]] [--keep]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure as m

from reconciler.devcluster.shape import NodePool

# Room for every pod of the run, so the scheduler never retries unschedulable ones, and
# 128 GPUs for the binding case's quota of 100.
POOLS = (NodePool("bench", count=4, cpu="1000", memory="4000Gi", pods=2500, gpus=32),)


def spec(side: str, args: argparse.Namespace) -> m.RunSpec:
    return m.RunSpec(
        side, side, args.n, workers=args.workers, interval=args.interval, timeout=args.timeout
    )


def binding_spec(args: argparse.Namespace) -> m.RunSpec:
    return m.RunSpec(
        "reconciler",
        "reconciler",
        args.m,
        workers=args.workers,
        interval=0.5,
        duration=f"{args.duration}s",
        gpus=1,
        quota_gpus=args.concurrency,
        until="finished",
        timeout=args.timeout,
        events=args.binding_mode == "events",
    )


def ratio_lines(raws: list[m.RunResult], recs: list[m.RunResult]) -> list[str]:
    """Per pair, the reconciler's rate over the raw client's (raw time / reconciler time);
    none when one side did not run."""
    lines: list[str] = []
    if not raws or not recs:
        return lines
    for label, attr in (("all Jobs exist", "admitted"), ("all pods Running", "running")):
        ratios = m.pair_ratios([getattr(r, attr) for r in raws], [getattr(r, attr) for r in recs])
        if ratios:
            lines.append(
                f"ratio reconciler/raw, rate to {label}: "
                f"{m.ratio_summary(ratios).text()} (goal >= 0.9)"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("-w", "--workers", type=int, default=8, help="creates in flight")
    parser.add_argument(
        "--interval",
        type=float,
        default=2.0,
        help="seconds between the reconciler's cycles once all are dispatched",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per run")
    parser.add_argument("--binding", action="store_true", help="add the binding case")
    parser.add_argument("-m", type=int, default=400, help="ops in the binding case")
    parser.add_argument("-c", "--concurrency", type=int, default=100, help="GPU quota")
    parser.add_argument("-d", "--duration", type=int, default=10, help="seconds per op")
    parser.add_argument(
        "--binding-mode",
        choices=("events", "poll"),
        default="events",
        help="the binding case's reconciler: `reconciler run`'s loop (cycles on events), "
        "or a cycle every 0.5 s",
    )
    parser.add_argument(
        "--side",
        choices=("both", "raw", "reconciler"),
        default="both",
        help="run one side only, --pairs times (no ratios)",
    )
    parser.add_argument("--keep", action="store_true", help="leave each dev cluster running")
    args = parser.parse_args()
    m.say(
        f"e2e dispatch: N={args.n}, {args.pairs} interleaved pairs, {args.workers} in flight, "
        f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"
    )
    raws: list[m.RunResult] = []
    recs: list[m.RunResult] = []
    for pair in range(args.pairs):
        for side, into in (("raw", raws), ("reconciler", recs)):
            if args.side not in ("both", side):
                continue
            result = m.run_side(spec(side, args), POOLS, keep=args.keep)
            into.append(result)
            m.say(f"[{pair + 1}/{args.pairs}] {result.line()}")
    m.print_costs(raws + recs)
    flagged = sum(r.flagged for r in raws + recs)
    m.say(
        f"runs FLAGged (other processes > {m.OTHERS_LIMIT} cores): {flagged} of "
        f"{len(raws) + len(recs)}"
    )
    if args.binding:
        result = m.run_side(binding_spec(args), POOLS, keep=args.keep)
        m.say(m.binding_line(result, args.concurrency, args.duration))
    m.say(f"load average at end: {os.getloadavg()[0]:.1f}")
    for line in ratio_lines(raws, recs):
        m.say(line)


if __name__ == "__main__":
    main()
