"""What the start estimates cost the cycle thread under ``run --http``: the estimate worker
(``runtime/estimates.py``) runs on a thread of the same process and shares the interpreter
(the GIL) with the cycle thread. A page open in a browser hands it every decision, and a busy
fleet decides every few seconds. So the worker holds its simulation while a cycle runs (the
loop's ``Wakeup.wait_idle``, between the simulation's steps).

The world of ``bench/estimate_bench.py`` (``--pending`` operations pending). The cycle
thread's work is stood in for by the plan (``plan_dispatch``, the planner's CPU), ``--cycles``
of them, ``--gap`` seconds apart (the time a cycle waits for its next trigger). Three runs,
side by side in one process:

- no reader: nothing asks for estimates;
- a reader, the worker never held (each cycle shares the GIL with the estimate running);
- a reader, the worker held while a cycle runs, as ``run --http`` does.

Per run: the cycle's wall time (median and mean), against the run with no reader, the
estimates computed, and the worker's CPU as a share of the run's wall time.

    PYTHONPATH=$PWD python bench/estimate_contention.py [--pending 100000] [--cycles 12]
        [--gap 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from estimate_bench import history
from plan_bench import NOW, build

from reconciler.core.decision.cycle import Decision
from reconciler.core.plan import plan_dispatch
from reconciler.core.plan.estimate import Estimates, estimate_starts
from reconciler.core.types import CompiledRepo, OrgSettings
from reconciler.runtime.estimates import EstimateWorker
from reconciler.runtime.loop import Wakeup


class _Decision:
    """A new decision each cycle (the worker tells them apart by identity)."""


def world(pending: int) -> tuple[Any, ...]:
    """The estimate bench's world, grown until the plan leaves ``pending`` pending."""
    org = OrgSettings()
    queued = pending
    while True:
        ops, qs, clusters, observed = build(queued, 1_000)
        plan = plan_dispatch(ops, qs, clusters, observed, org, NOW)
        if len(plan.pending) >= pending:
            break
        queued += pending - len(plan.pending)
    repo = CompiledRepo("bench", org, clusters, qs, tuple(ops))
    return ops, qs, clusters, observed, org, plan, repo, history(ops)


def run(
    label: str, w: tuple[Any, ...], reader: bool, held: bool, cycles: int, gap: float
) -> dict[str, Any]:
    ops, qs, clusters, observed, org, plan, repo, runs = w
    cpu = [0.0]
    lock = threading.Lock()

    wake = Wakeup()
    idle = wake.wait_idle if held else None

    def compute(_: CompiledRepo, __: Decision) -> Estimates:
        started = time.thread_time()
        out = estimate_starts(repo, plan, observed, {}, runs, NOW, pause=idle or _go_on)
        with lock:
            cpu[0] += time.thread_time() - started
        return out

    threads: list[threading.Thread] = []

    def spawn(work: Callable[[], None]) -> None:
        t = threading.Thread(target=work, daemon=True)
        threads.append(t)
        t.start()

    worker = EstimateWorker(compute, spawn, idle=idle) if reader else None
    walls = []
    t0 = time.perf_counter()
    for _ in range(cycles):
        started = time.perf_counter()
        wake.begin_cycle()
        plan_dispatch(ops, qs, clusters, observed, org, NOW)
        wake.end_cycle()
        walls.append(time.perf_counter() - started)
        if worker is not None:  # the page asks for the estimates of the newest decision
            worker.latest(repo, cast(Decision, _Decision()))
        time.sleep(gap)
    elapsed = time.perf_counter() - t0
    for t in threads:
        t.join()
    return {
        "label": label,
        "median": statistics.median(walls),
        "mean": statistics.fmean(walls),
        "computed": worker.computed if worker is not None else 0,
        "worker_share": cpu[0] / elapsed,
    }


def _go_on() -> None:
    pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=100_000)
    ap.add_argument("--cycles", type=int, default=12)
    ap.add_argument("--gap", type=float, default=0.5)
    args = ap.parse_args()
    w = world(args.pending)
    results = [
        run("no reader", w, False, False, args.cycles, args.gap),
        run("a reader, the worker never held", w, True, False, args.cycles, args.gap),
        run("a reader, held while a cycle runs", w, True, True, args.cycles, args.gap),
    ]
    base = results[0]["median"]
    print(
        f"world: {len(w[0])} operations, {len(w[5].pending)} pending; "
        f"{args.cycles} cycles {args.gap} s apart"
    )
    for r in results:
        print(
            f"  {r['label']:36s} cycle {r['median'] * 1000:7.1f} ms median, "
            f"{r['mean'] * 1000:7.1f} ms mean, {r['median'] / base:4.2f}x; "
            f"{r['computed']:2d} estimates, worker {r['worker_share']:.0%} of a core"
        )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
