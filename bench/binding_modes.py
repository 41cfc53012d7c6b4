"""The binding case, poll against events (issue 15 section 3), and the former single-cluster
end-to-end dispatch bench (bench/e2e_dispatch.py before issue 17 moved it to interleaved
pairs on fresh clusters), kept as it was. Side by side in one run:

(a) a raw kubernetes-client loop creates N Jobs (the very manifests the reconciler renders),
    with W creates in flight;
(b) the reconciler dispatches N operations from a fresh commit, under a queue whose limits
    allow them all, until all its Jobs exist (the same W creates in flight);
(c) binding limits: M operations that each run D seconds (kwok's simulated duration) under a
    queue of concurrency C; dispatches per second while ops complete, against the ceiling C/D.
    Twice, side by side: cycles every 0.5 s (``poll``, as before cycles ran on events), and
    ``reconciler run``'s loop (``events``: a cycle when a Job ends, debounced 0.2 s, the
    10 s interval as a fallback).

The cluster settles (every pod of the previous step Running) before each step. Prints the
figures of each and, last, the ratio b/a (goal >= 0.8).

    PYTHONPATH=$PWD python bench/binding_modes.py [-n 2000] [-w 8] [-m 600 -c 100 -d 10]
        [--binding-only] [--binding poll,events] [--state-dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _repo import write_repo

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, KubeError, connect, connect_cluster
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import compile_repo
from reconciler.core.render import render_operation
from reconciler.core.types import ClusterSpec, Phase
from reconciler.devcluster.cluster import DevCluster
from reconciler.devcluster.shape import NodePool
from reconciler.runtime import cycle
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.loop import Wakeup, run_forever
from reconciler.runtime.service import make_runtime

# Room for every pod of the run, so the scheduler never retries unschedulable ones.
POOLS = (NodePool("bench", count=4, cpu="1000", memory="4000Gi", pods=2500),)


def settle(kube: Kube, namespace: str, count: int, timeout: float = 300.0) -> float:
    """Wait until ``count`` pods of ``namespace`` have left Pending; the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        pods = kube.core.list_namespaced_pod(namespace).items
        if len(pods) >= count and all(p.status.phase != "Pending" for p in pods):
            break
        time.sleep(2)
    else:
        print(f"  ({namespace}: not settled after {timeout:.0f} s, going on)")
    return time.perf_counter() - started


COMPILES: list[float] = []  # seconds of each compile_repo the reconciler ran


def _timed_compile(*args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    try:
        return compile_repo(*args, **kwargs)
    finally:
        COMPILES.append(time.perf_counter() - started)


class Timeline:
    """When an independent watcher (not the reconciler) first saw each Job created, its
    pod Running, its pod finished and the Job ended (a terminal condition), in one
    namespace: where a slot's time goes."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.pod_done: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.halt = threading.Event()
        for kind in ("Job", "Pod"):
            version = kube.list_managed(kind).resource_version
            threading.Thread(target=self._watch, args=(kube, kind, version), daemon=True).start()

    def _watch(self, kube: Kube, kind: str, version: str) -> None:
        while not self.halt.is_set():
            try:
                for event in kube.watch_managed(kind, version, timeout_seconds=30):
                    now = time.perf_counter()
                    obj = event.object
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if meta.get("namespace") != self.namespace:
                        continue
                    status = obj.get("status") or {}
                    if kind == "Job":
                        name = str(meta.get("name"))
                        self.created.setdefault(name, now)
                        if any(
                            c.get("status") == "True"
                            and c.get("type") in ("SuccessCriteriaMet", "Complete", "Failed")
                            for c in status.get("conditions") or []
                        ):
                            self.ended.setdefault(name, now)
                    else:
                        job = str((meta.get("labels") or {}).get("job-name"))
                        if status.get("phase") == "Running":
                            self.running.setdefault(job, now)
                        if status.get("phase") in ("Succeeded", "Failed"):
                            self.pod_done.setdefault(job, now)
                    if self.halt.is_set():
                        return
            except KubeError:
                time.sleep(0.2)

    def report(self, concurrency: int) -> str:
        """Medians of each stage of a slot's cycle. A queue at its limit creates its k-th Job
        (after the first ``concurrency``) when a slot frees: the reaction time pairs the
        k-th creation with the (k - concurrency)-th end, both in time order."""

        def med(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} s" if values else "n/a"

        def stage(a: dict[str, float], b: dict[str, float]) -> list[float]:
            return [b[n] - a[n] for n in a if n in b]

        ends = sorted(self.ended.values())
        creates = sorted(self.created.values())[concurrency:]
        reaction = [c - e for c, e in zip(creates, ends, strict=False)]
        return (
            f"created to pod Running {med(stage(self.created, self.running))}, "
            f"Running to pod finished {med(stage(self.running, self.pod_done))}, "
            f"pod finished to Job ended {med(stage(self.pod_done, self.ended))}, "
            f"Job ended to the next Job created {med(reaction)} "
            f"(p90 {sorted(reaction)[int(0.9 * (len(reaction) - 1))]:.2f} s)"
            if reaction
            else "no slot was reused"
        )


@dataclass
class Binding:
    """What one binding run saw, cycle by cycle."""

    m: int
    concurrency: int
    started: float = field(default_factory=time.perf_counter)
    dispatched: int = 0
    peak: int = 0
    cycles: int = 0
    over: int = 0
    last_dispatch: float = 0.0
    done: bool = False
    succeeded: int = 0

    def observe(self, result: CycleResult, prefix: str) -> None:
        self.cycles += 1
        self.dispatched += len(result.dispatched)
        ours = [s for op, s in result.states.items() if op.startswith(prefix)]
        active = sum(1 for s in ours if s.phase.active)
        self.peak = max(self.peak, active)
        self.over += active > self.concurrency
        if self.dispatched >= self.m and not self.last_dispatch:
            self.last_dispatch = time.perf_counter() - self.started
        if self.last_dispatch and all(s.phase.finished for s in ours):
            self.done = True
            self.succeeded = sum(1 for s in ours if s.phase is Phase.SUCCEEDED)


def binding(
    args: argparse.Namespace,
    work: Path,
    kubeconfig: Path,
    mode: str,
) -> float:
    """(c) in one mode: ``poll``, a cycle every ``--interval`` s (what the reconciler did
    before cycles ran on events); ``events``, the loop of ``reconciler run``: a cycle when a
    Job ends (``--debounce``), the interval (``--events-interval``) as the fallback. The
    ratio of dispatches per second to the ceiling C/D."""
    namespace = f"bench-{mode}"
    limited = write_repo(
        work / f"limited-{mode}",
        kubeconfig,
        args.m,
        namespace,
        duration=f"{args.duration}s",
        concurrency=args.concurrency,
        queue=f"limited-{mode}",
    )
    # what `reconciler run --interval I` builds: a Git source read at most every I seconds,
    # status on the repo's status branch at most every min(I, 10 s), and in ``events``
    # mode a wake-up that the watches ask for a cycle
    interval = args.events_interval if mode == "events" else args.interval
    wake = Wakeup() if mode == "events" else None
    runtime = make_runtime(
        str(limited),
        "main",
        {},
        cache_dir=work / f"cache-{mode}",
        wakeup=wake,
        status_interval=min(interval, 10.0),
        fetch_interval=interval,
    )
    reconciler = runtime.reconciler
    steps = time_steps(reconciler)
    timeline = Timeline(Kube(connect(kubeconfig)), namespace)
    run = Binding(args.m, args.concurrency)
    stop = threading.Event()
    prefix = f"{namespace}/"

    def on_cycle(result: CycleResult) -> None:
        runtime.on_cycle(result)  # metrics and the status write, as `reconciler run` does
        run.observe(result, prefix)
        if run.done:
            stop.set()

    if mode == "events":
        run_forever(reconciler, interval, stop, on_cycle, wake, min_gap=args.debounce)
        pace = f"cycles on events, debounce {args.debounce} s, interval {interval:g} s"
    else:
        run_forever(reconciler, interval, stop, on_cycle, wake, min_gap=interval)
        pace = f"a cycle every {interval} s"
    all_done = time.perf_counter() - run.started
    reconciler.close()
    cycle.decide = DECIDE  # type: ignore[assignment]  # unwrapped (time_steps)
    ceiling = args.concurrency / args.duration
    rate = args.m / run.last_dispatch
    counts = wake.counts if wake is not None else {}
    triggers = ", ".join(f"{t.value} {n}" for t, n in sorted(counts.items())) or "none"
    publisher = runtime.publisher
    status = (
        f"{publisher.commits} status commits, {publisher.put_off} cycles' status put off"
        if publisher is not None
        else "no status branch"
    )
    print(
        f"(c) binding limits, {pace}: {args.m} ops of {args.duration} s, concurrency "
        f"{args.concurrency}: all dispatched in {run.last_dispatch:.1f} s ({run.cycles} "
        f"cycles; triggers: {triggers}), all finished in {all_done:.1f} s "
        f"({run.succeeded} Succeeded); peak active {run.peak}, cycles over the limit {run.over}",
        flush=True,
    )
    print(
        f"    {mode}: dispatches/s while ops complete: {rate:.1f} vs ceiling C/D "
        f"{ceiling:.1f} = {rate / ceiling:.2f}",
        flush=True,
    )
    timeline.halt.set()
    print(f"    a slot's cycle (medians): {timeline.report(args.concurrency)}", flush=True)
    spent = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items())
    print(f"    where the cycles' time went: {spent}; {status}", flush=True)
    return rate / ceiling


DECIDE = cycle.decide


def time_steps(reconciler: Reconciler) -> dict[str, float]:
    """Seconds spent in each step of the reconciler's cycles (its methods wrapped)."""
    spent: dict[str, float] = {}
    for step in ("_load", "_read", "_apply", "_annotate"):
        inner = getattr(reconciler, step)

        def timed(*a: Any, _inner: Any = inner, _step: str = step, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return _inner(*a, **kw)
            finally:
                spent[_step] = spent.get(_step, 0.0) + time.perf_counter() - started

        setattr(reconciler, step, timed)
    decide = DECIDE

    def timed_decide(*a: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return decide(*a, **kw)
        finally:
            spent["decide"] = spent.get("decide", 0.0) + time.perf_counter() - started

    cycle.decide = timed_decide  # type: ignore[assignment]
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("-w", "--workers", type=int, default=8, help="creates in flight")
    parser.add_argument("-m", type=int, default=600, help="ops in the binding-limits run")
    parser.add_argument("-c", "--concurrency", type=int, default=100)
    parser.add_argument("-d", "--duration", type=int, default=10, help="seconds per op")
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between cycles (poll mode)"
    )
    parser.add_argument(
        "--binding",
        type=lambda text: text.split(","),
        default=["poll", "events"],
        help="the binding runs, in order: poll, events (default both)",
    )
    parser.add_argument(
        "--events-interval", type=float, default=10.0, help="the fallback interval (events)"
    )
    parser.add_argument("--debounce", type=float, default=0.2, help="seconds (events mode)")
    parser.add_argument("--binding-only", action="store_true", help="run only (c)")
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the dev cluster running")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="e2e-dispatch-"))
    cluster = DevCluster(args.state_dir or work / "cluster")
    cluster.up(POOLS, progress=lambda m: print(f"[dev-cluster] {m}", flush=True))
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)

    def connect_spec(spec: ClusterSpec) -> Kube:
        return Kube(connect_cluster(spec.kubeconfig, spec.context))

    try:
        kube = Kube(connect(cluster.kubeconfig))
        rec_rate = raw_rate = 0.0
        if not args.binding_only:
            # the same manifests, rendered from the same compiled operations, for both sides
            raw_repo = write_repo(work / "raw", cluster.kubeconfig, args.n, "bench-raw")
            compiled = compile_repo(snapshot_git(raw_repo, "main"))
            assert compiled.valid, compiled.errors[:3]
            now = datetime.now(UTC)
            manifests = [
                render_operation(op, {}, config_version=compiled.version, dispatched_at=now).job
                for op in compiled.operations
            ]
            kube.ensure_namespace("bench-raw")
            started = time.perf_counter()

            def create(manifest: dict[str, object]) -> None:
                # the leanest client call: the response is not turned into model objects
                resp = kube.batch.create_namespaced_job(
                    "bench-raw", manifest, _preload_content=False
                )
                assert resp.data  # read the body before the connection goes back to the pool
                resp.release_conn()

            with ThreadPoolExecutor(args.workers) as pool:
                list(pool.map(create, (dict(m) for m in manifests)))
            raw_seconds = time.perf_counter() - started
            raw_rate = args.n / raw_seconds
            print(
                f"(a) raw client, {args.workers} in flight: {args.n} Jobs in {raw_seconds:.1f} s "
                f"= {raw_rate:.0f}/s",
                flush=True,
            )
            print(f"    settled in {settle(kube, 'bench-raw', args.n):.0f} s", flush=True)

            repo = write_repo(work / "reconciler", cluster.kubeconfig, args.n, "bench-rec")
            reconciler = Reconciler(
                lambda: snapshot_git(repo, "main"),
                connect_spec,
                SystemClock(),
                create_workers=args.workers,
            )
            cycle.compile_repo = _timed_compile  # type: ignore[assignment]  # to report it
            COMPILES.clear()
            started = time.perf_counter()
            created = 0
            cycles = 0
            while created < args.n:
                result = reconciler.run_once()
                created += len(result.dispatched) + len(result.adopted)
                cycles += 1
                if result.failed:
                    raise SystemExit(f"dispatch failed: {next(iter(result.failed.values()))}")
            rec_seconds = time.perf_counter() - started
            reconciler.close()
            rec_rate = args.n / rec_seconds
            compiling = sum(COMPILES)
            print(
                f"(b) reconciler, {args.workers} in flight: {args.n} ops dispatched in "
                f"{rec_seconds:.1f} s ({cycles} cycle(s); compile {compiling:.1f} s, cache sync, "
                f"plan, creates) = {rec_rate:.0f}/s",
                flush=True,
            )
            rest = args.n / (rec_seconds - compiling)
            print(f"    without the compile: {rest:.0f}/s, ratio {rest / raw_rate:.2f}", flush=True)
            print(f"    settled in {settle(kube, 'bench-rec', args.n):.0f} s", flush=True)

        for mode in args.binding:
            binding(args, work, cluster.kubeconfig, mode)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        if raw_rate:
            print(f"ratio b/a: {rec_rate / raw_rate:.2f} (goal >= 0.8)")
    finally:
        if not args.keep:
            cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
