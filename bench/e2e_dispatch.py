"""End-to-end dispatch, the reconciler against a raw client, in interleaved pairs.

Each run gets a fresh dev cluster and dispatches N Jobs, the very manifests
``core/decision/render.py`` renders, W creates in flight:

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

``--binding`` adds the binding case on one more cluster: M operations of D seconds each
asking one GPU, under a queue with a quota of C GPUs; admissions per second against C/D.
The reconciler runs as ``reconciler run`` does, cycles on events (``--binding-mode poll``:
a cycle every 0.5 s, as before cycles ran on events).

``--client urllib3`` sends the reconciler's creates and watches through urllib3 instead of
``adapters/http1.py`` (``_urllib3_client.py``); ``--client both`` runs the reconciler once
with each in every pair, in alternating order, and prints the ratios urllib3/http1 of its
CPU per operation.

``--side reconciler`` (or ``raw``) runs one side only, ``--pairs`` times, with no ratios: to
measure a change of the reconciler's own cost. ``--code DIR`` runs the ``reconciler``
package found in DIR (e.g. another version copied out with ``git archive``) with this
checkout's bench, so two versions can be run alternately; ``--profile FILE`` attaches
``py-spy record --gil -r 50`` to the dispatching process for the window (raw stacks; a
run number is added to the name). ``--pprof DIR`` runs the control plane with profiling on
and writes a Go CPU profile of etcd, the apiserver, the controller manager and the
scheduler over the first ``--pprof-seconds`` of each run's window
(``DIR/<side>-<run>-<component>.pprof``; ``go tool pprof -top`` reads them). For the
dispatching process it also prints its CPU per operation per thread (main: the cycles;
watches; creates; status writer...) and its full collections, both in the window.

    PYTHONPATH=$PWD python bench/e2e_dispatch.py [-n 2000] [--pairs 5] [-w 8]
        [--side both|raw|reconciler] [--client http1|urllib3|both] [--code DIR]
        [--profile FILE]
        [--pprof DIR [--pprof-seconds 20]]
        [--binding -m 400 -c 100 -d 10 [--binding-mode events|poll]] [--keep]
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


def spec(side: str, args: argparse.Namespace, run: int = 0, client: str = "") -> m.RunSpec:
    profile = ""
    if args.profile and side == "reconciler":
        path = Path(args.profile)
        profile = str(path.with_name(f"{path.stem}-{run + 1}{path.suffix}"))
    return m.RunSpec(
        client or side,  # a column of its own in the costs table: http1, urllib3
        side,
        args.n,
        workers=args.workers,
        interval=args.interval,
        timeout=args.timeout,
        code=args.code if side == "reconciler" else "",
        profile=profile,
        pprof=args.pprof,
        pprof_seconds=args.pprof_seconds,
        label=f"{side}-{client or ''}{run + 1}",
        client=client,
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
    """Per pair, the reconciler's rate over the raw client's (raw time / reconciler time)."""
    lines = []
    for label, attr in (("all Jobs exist", "admitted"), ("all pods Running", "running")):
        ratios = m.pair_ratios([getattr(r, attr) for r in raws], [getattr(r, attr) for r in recs])
        if ratios:
            lines.append(
                f"ratio reconciler/raw, rate to {label}: "
                f"{m.ratio_summary(ratios).text()} (goal >= 0.9)"
            )
    return lines


def client_ratio_lines(a: list[m.RunResult], b: list[m.RunResult]) -> list[str]:
    """Per pair, urllib3's CPU per operation over http1's: the reconciler's process, and
    its creates' and watches' threads."""
    lines = []
    for label, cost in (
        ("the reconciler's CPU/op", lambda r: r.cpu.get("client", 0.0)),
        ("its creates' threads", lambda r: r.threads.get("creates", 0.0)),
        ("its watches' threads", lambda r: r.threads.get("watches", 0.0)),
    ):
        ratios = m.pair_ratios([cost(r) for r in b], [cost(r) for r in a])
        if ratios:
            lines.append(f"ratio urllib3/http1, {label}: {m.ratio_summary(ratios).text()}")
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
    parser.add_argument("--keep", action="store_true", help="leave each dev cluster running")
    parser.add_argument(
        "--side",
        choices=("both", "raw", "reconciler"),
        default="both",
        help="run one side only (--pairs runs of it, no ratios)",
    )
    parser.add_argument(
        "--client",
        choices=("http1", "urllib3", "both"),
        default="http1",
        help="the reconciler's creates and watches: by adapters/http1.py, by urllib3, or "
        "both in alternating order within each pair (with ratios urllib3/http1)",
    )
    parser.add_argument("--code", default="", help="the reconciler package's directory")
    parser.add_argument("--profile", default="", help="py-spy raw stacks of the reconciler")
    m.add_pprof_options(parser)
    args = parser.parse_args()
    m.say(
        f"e2e dispatch: N={args.n}, {args.pairs} interleaved pairs ({args.side}), "
        f"{args.workers} in flight, "
        + (f"reconciler from {args.code}, " if args.code else "")
        + f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"
    )
    raws: list[m.RunResult] = []
    recs: list[m.RunResult] = []
    by_client: dict[str, list[m.RunResult]] = {"http1": [], "urllib3": []}
    sides = [("raw", raws), ("reconciler", recs)]
    if args.side != "both":
        sides = [(side, into) for side, into in sides if side == args.side]
    for pair in range(args.pairs):
        for side, into in sides:
            clients = [args.client] if args.client != "both" else ["http1", "urllib3"]
            if side == "raw":
                clients = [""]
            elif pair % 2:  # each client goes first in every other pair
                clients.reverse()
            for client in clients:
                result = m.run_side(spec(side, args, pair, client), POOLS, keep=args.keep)
                into.append(result)
                by_client.get(client, []).append(result)
                m.say(f"[{pair + 1}/{args.pairs}] {result.line()}")
    m.print_costs(raws + recs)
    flagged = sum(r.flagged for r in raws + recs)
    m.say(
        f"runs FLAGged (other processes > {m.OTHERS_LIMIT} cores): {flagged} of "
        f"{len(raws) + len(recs)}"
    )
    if args.client == "both":
        for line in client_ratio_lines(by_client["http1"], by_client["urllib3"]):
            m.say(line)
    if args.binding:
        result = m.run_side(binding_spec(args), POOLS, keep=args.keep)
        m.say(m.binding_line(result, args.concurrency, args.duration))
    m.say(f"load average at end: {os.getloadavg()[0]:.1f}")
    if args.side == "both" and args.client != "both":
        for line in ratio_lines(raws, recs):
            m.say(line)


if __name__ == "__main__":
    main()
