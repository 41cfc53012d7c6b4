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
import json
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

from _measure import read_busy_seconds, read_pid_seconds, read_tree_seconds
from _repo import write_repo

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, KubeError, connect, connect_cluster
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import render_operation
from reconciler.core.types import ClusterSpec, Phase
from reconciler.devcluster.cluster import DevCluster
from reconciler.devcluster.shape import NodePool
from reconciler.runtime import cycle, informer
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


WAIT = "reconciler: end seen → its cycle starts (debounce, cycle in progress)"
PREPARE = "reconciler: cycle starts → next Job's create sent (read, decide, render)"
POST = "reconciler: create sent → its response (apiserver, etcd)"
WATCH = "create's response → the watcher sees the Job (watch delivery)"
REACT = "reconciler's end seen → next Job seen created (the four above)"
STAGES = (
    ("Job created → pod created (Job controller)", "created", "pod_created"),
    ("pod created → pod bound (scheduler)", "pod_created", "bound"),
    ("pod bound → pod Running (kwok pod-started, 0.2 s)", "bound", "running"),
    ("pod Running → pod Succeeded (kwok, D)", "running", "pod_done"),
    ("pod Succeeded → Job SuccessCriteriaMet (Job controller)", "pod_done", "ended"),
    ("Job ended → the reconciler's watch sees it", "ended", "observed"),
)


def _quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


class Timeline:
    """When an independent watcher (not the reconciler) first saw each Job created, its pod
    created, bound, Running and finished, and the Job ended (its first terminal condition,
    what the reconciler counts); and when the reconciler's own Job watch saw that end
    (``observed``, its informer's trigger) and when its cycles ran. In one namespace,
    ``time.perf_counter()`` seconds: where a slot's time goes."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.pod_created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.pod_done: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.observed: dict[str, float] = {}  # the reconciler's informer saw the end
        self.cycles: list[tuple[float, float, int]] = []  # start, end, dispatched
        self.sent: dict[str, float] = {}  # the reconciler sent the Job's create
        self.returned: dict[str, float] = {}  # its create's response came back
        self.halt = threading.Event()
        self._lock = threading.Lock()
        for kind in ("Job", "Pod"):
            version = kube.list_managed(kind).resource_version
            threading.Thread(target=self._watch, args=(kube, kind, version), daemon=True).start()

    def hook(self, reconciler: Reconciler) -> None:
        """Time the reconciler's side: the watch events its informers take as a run's end
        (``event_trigger`` wrapped) and each cycle (``run_once`` wrapped)."""
        inner_trigger = informer.event_trigger

        def trigger(kind: str, event_type: str, before: Any, after: Any) -> Any:
            found = inner_trigger(kind, event_type, before, after)
            if found is not None and kind == "Job" and after is not None:
                meta = after.get("metadata") or {}
                if meta.get("namespace") == self.namespace:
                    with self._lock:
                        self.observed.setdefault(str(meta.get("name")), time.perf_counter())
            return found

        informer.event_trigger = trigger  # type: ignore[assignment]
        inner_run = reconciler.run_once

        def run_once() -> CycleResult:
            started = time.perf_counter()
            result = inner_run()
            with self._lock:
                self.cycles.append((started, time.perf_counter(), len(result.dispatched)))
            return result

        reconciler.run_once = run_once  # type: ignore[method-assign]
        inner_create = Kube.create_or_adopt

        def create_or_adopt(kube: Kube, manifest: Any) -> Any:
            name = str(manifest["metadata"]["name"])
            sent = time.perf_counter()
            try:
                return inner_create(kube, manifest)
            finally:
                with self._lock:
                    self.sent.setdefault(name, sent)
                    self.returned.setdefault(name, time.perf_counter())

        Kube.create_or_adopt = create_or_adopt  # type: ignore[method-assign]

    def unhook(self) -> None:
        informer.event_trigger = EVENT_TRIGGER
        Kube.create_or_adopt = CREATE_OR_ADOPT  # type: ignore[method-assign]

    def dump(self, path: Path) -> None:
        """Every time recorded, as JSON (seconds on one clock), for a closer look."""
        with self._lock:
            data = {
                name: getattr(self, name)
                for name in (
                    "created",
                    "pod_created",
                    "bound",
                    "running",
                    "pod_done",
                    "ended",
                    "observed",
                    "sent",
                    "returned",
                )
            }
            data["cycles"] = self.cycles
        path.write_text(json.dumps(data))

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
                            and c.get("type")
                            in ("SuccessCriteriaMet", "FailureTarget", "Complete", "Failed")
                            for c in status.get("conditions") or []
                        ):
                            self.ended.setdefault(name, now)
                    else:
                        job = str((meta.get("labels") or {}).get("job-name"))
                        self.pod_created.setdefault(job, now)
                        if (obj.get("spec") or {}).get("nodeName"):
                            self.bound.setdefault(job, now)
                        if status.get("phase") == "Running":
                            self.running.setdefault(job, now)
                        if status.get("phase") in ("Succeeded", "Failed"):
                            self.pod_done.setdefault(job, now)
                    if self.halt.is_set():
                        return
            except KubeError:
                time.sleep(0.2)

    def stages(self, concurrency: int) -> list[tuple[str, list[float]]]:
        """Each stage of a slot's cycle, its seconds per Job. A queue at its limit creates
        its k-th Job (after the first ``concurrency``) when a slot frees: the reconciler's
        stages pair the k-th creation with the k-th end it observed, both in time order,
        and split that by the first cycle that started after the end was observed."""
        with self._lock:
            observed = dict(self.observed)
            cycles = list(self.cycles)
        found: list[tuple[str, list[float]]] = []
        for label, a, b in STAGES:
            before, after = getattr(self, a), observed if b == "observed" else getattr(self, b)
            found.append((label, [after[n] - before[n] for n in before if n in after]))
        # with no triggers (poll mode) the reconciler sees an end at its next cycle's read:
        # pair the creates with the ends as the watcher saw them
        ends = sorted((observed or self.ended).values())
        creates = sorted(self.created.items(), key=lambda item: item[1])[concurrency:]
        starts = sorted(c[0] for c in cycles)
        waits, prepare, post, watch = [], [], [], []
        for end, (name, create) in zip(ends, creates, strict=False):
            start = next((s for s in starts if s >= end), None)
            sent, back = self.sent.get(name), self.returned.get(name)
            if start is not None and sent is not None and back is not None and start <= sent:
                waits.append(start - end)
                prepare.append(sent - start)
                post.append(back - sent)
                watch.append(create - back)
        found.append((WAIT, waits))
        found.append((PREPARE, prepare))
        found.append((POST, post))
        found.append((WATCH, watch))
        found.append((REACT, [c - e for e, (_n, c) in zip(ends, creates, strict=False)]))
        return found

    def report(self, concurrency: int) -> str:
        """The stages as a table: median and p90, seconds."""
        lines = []
        for label, values in self.stages(concurrency):
            if values:
                p50, p90 = _quantiles(values)
                lines.append(f"      {label:<72} {p50:6.2f} s  p90 {p90:6.2f} s  (n={len(values)})")
            else:
                lines.append(f"      {label:<72}    n/a")
        created = sorted(self.created.values())
        if len(created) > concurrency:
            waves = [
                f"{created[min(k, len(created)) - 1] - created[0]:.1f} s"
                for k in range(concurrency, len(created) + concurrency, concurrency)
            ]
            lines.append(
                f"      the {concurrency}th, {2 * concurrency}th, … Job created at: "
                + ", ".join(waves)
            )
        with self._lock:
            cycles = list(self.cycles)
        if cycles:
            lengths = [e - s for s, e, _n in cycles]
            p50, p90 = _quantiles(lengths)
            lines.append(
                f"      cycles: {len(cycles)}, length {p50:.2f} s p50, {p90:.2f} s p90, "
                f"max {max(lengths):.2f} s"
            )
        return "\n".join(lines)


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
    cluster: DevCluster,
    mode: str,
) -> float:
    """(c) in one mode: ``poll``, a cycle every ``--interval`` s (what the reconciler did
    before cycles ran on events); ``events``, the loop of ``reconciler run``: a cycle when a
    Job ends (``--debounce``), the interval (``--events-interval``) as the fallback. The
    ratio of dispatches per second to the ceiling C/D."""
    namespace = f"bench-{mode}"
    kubeconfig = cluster.kubeconfig
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
        status_background=True,  # as `reconciler run`: the status written by a thread of its own
    )
    reconciler = runtime.reconciler
    steps = time_steps(reconciler)
    timeline = Timeline(Kube(connect(kubeconfig)), namespace)
    timeline.hook(reconciler)
    busy_before, load_before = read_busy_seconds(), os.getloadavg()[0]
    pids = {p.name: p.pid for p in cluster.processes()}
    cpu_before = {name: read_tree_seconds(pid) for name, pid in pids.items()}
    ours = "this process (reconciler, watcher)"  # not its tree: the cluster is its children
    cpu_before[ours] = read_pid_seconds(os.getpid()) or 0.0
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
    runtime.close(timeout=30.0)  # the last status write, as `reconciler run` at shutdown
    busy_seconds = read_busy_seconds() - busy_before
    busy = busy_seconds / all_done
    cpu = {name: read_tree_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    cpu[ours] = (read_pid_seconds(os.getpid()) or 0.0) - cpu_before[ours]
    cpu["every other process on the machine"] = busy_seconds - sum(cpu.values())
    timeline.unhook()
    if args.dump:  # one file per mode: FILE-poll.json, FILE-events.json
        timeline.dump(args.dump.with_name(f"{args.dump.stem}-{mode}{args.dump.suffix}"))
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
    print(
        f"    machine: load average {load_before:.1f} → {os.getloadavg()[0]:.1f}, CPU busy "
        f"{busy:.2f} of {os.cpu_count()} cores (/proc/stat, every process)",
        flush=True,
    )
    shares = ", ".join(f"{name} {seconds / all_done:.2f}" for name, seconds in cpu.items())
    print(f"    cores used, by process: {shares}", flush=True)
    print("    a slot's cycle, per Job (median, p90):", flush=True)
    print(timeline.report(args.concurrency), flush=True)
    print(f"    {implied(timeline, args)}", flush=True)
    spent = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items())
    print(f"    where the cycles' time went: {spent}; {status}", flush=True)
    return rate / ceiling


DECIDE = cycle.decide
EVENT_TRIGGER = informer.event_trigger
CREATE_OR_ADOPT = Kube.create_or_adopt


def implied(timeline: Timeline, args: argparse.Namespace) -> str:
    """The ratio the measured overheads allow. A slot is busy from its Job's create to the
    next Job's create: the sum of the stages' medians, D + overhead o. Steady state gives
    D / (D + o); this bench's figure is M over the time of the last create, the first wave
    plus (M/C - 1) slots: M / (wave + (M/C - 1)(D + o)) / (C/D)."""
    medians = {
        label: statistics.median(values)
        for label, values in timeline.stages(args.concurrency)
        if values
    }
    slot = sum(medians.get(label, 0.0) for label, _a, _b in STAGES) + medians.get(REACT, 0.0)
    first = sorted(timeline.created.values())
    wave = first[args.concurrency - 1] - first[0] if len(first) >= args.concurrency else 0.0
    d = float(args.duration)
    waves = args.m / args.concurrency - 1
    steady = d / slot if slot else 0.0
    bench = args.m / (wave + waves * slot) / (args.concurrency / d) if slot else 0.0
    return (
        f"a slot (sum of the medians) {slot:.2f} s = D {d:g} s + overhead {slot - d:.2f} s: "
        f"steady state D/(D+o) = {steady:.2f}; this bench's figure, M/(first wave "
        f"{wave:.1f} s + {waves:g} slots)/(C/D) = {bench:.2f}"
    )


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
    parser.add_argument(
        "--dump", type=Path, default=None, help="the stages' times, as JSON (one file per mode)"
    )
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
            binding(args, work, cluster, mode)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        if raw_rate:
            print(f"ratio b/a: {rec_rate / raw_rate:.2f} (goal >= 0.8)")
    finally:
        if not args.keep:
            cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
