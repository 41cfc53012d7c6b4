"""Where one process stops: the Reconciler over 1, 10 and 50 fake clusters (the fake Kube
of the unit tests, tests/support/fake_kube.py), --queues queues spread over them, --ops
operations, and a steady churn of Jobs ending (--churn a cycle). Each size runs in its own
subprocess, so its RSS is its own. The compile is left out (the cycle is handed the
compiled repo, as the fake-cycle tests do; bench/compile_bench.py measures it); the
watches are the Reconciler's own informers, one thread per kind and cluster, over the
fake's watch.

Per size it prints the CPU of a cycle (the first, which dispatches the most, and the
mean of the steady ones), split by thread: the cycle (main), the creates, the phase
annotations and the watch threads; the CPU per dispatched operation; the RSS per
operation; then how each grows from one size to the next (the ratio, and the exponent
k of growth as clusters^k). The fake's own work runs in the same threads (each object a
create or a status change stores is deep-copied, and a list deep-copies every object):
the figures are an upper bound on the reconciler's.

    PYTHONPATH=$PWD python bench/fleet_scale.py [--clusters 1,10,50] [--ops 100000]
        [--queues 2000] [--cycles 8] [--churn 500] [--profile FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
CHILD = "--child"
T0 = datetime(2025, 1, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
GROUPS = ("main", "creates", "annotations", "events", "watches")

# --- pure arithmetic (tests/meta/test_bench_fleet.py) ------------------------------------


def per(total: float, count: int) -> float:
    """``total`` per item; 0 when there are none (a cycle that dispatched nothing)."""
    return total / count if count else 0.0


def growth(sizes: Sequence[int], values: Sequence[float]) -> list[tuple[float, float]]:
    """From each size to the next: ``(ratio, k)``, the value's ratio and the exponent of
    growth as ``size**k`` (1: linear in the size, 0: flat). A value of 0 has no growth to
    speak of: ``(nan, nan)``."""
    out: list[tuple[float, float]] = []
    for (s0, v0), (s1, v1) in itertools.pairwise(zip(sizes, values, strict=True)):
        if v0 <= 0 or v1 <= 0 or s1 == s0:
            out.append((math.nan, math.nan))
            continue
        ratio = v1 / v0
        out.append((ratio, math.log(ratio) / math.log(s1 / s0)))
    return out


def steady_mean(per_cycle: Sequence[Mapping[str, float]], key: str) -> float:
    """The mean of ``key`` over the cycles after the first (which dispatches the cold
    start); the first's own when there is no other."""
    rest = per_cycle[1:] or per_cycle
    return sum(c[key] for c in rest) / len(rest)


# --- the child: one size ---------------------------------------------------------------


def _rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _world(clusters: int, queues: int, ops: int, seed: int = 7) -> Any:
    from reconciler.core.types import (
        ClusterSpec,
        CompiledOperation,
        CompiledRepo,
        OrgSettings,
        QueueSpec,
        RunKind,
    )

    rng = random.Random(seed)
    specs = {f"c{i:02d}": ClusterSpec(f"c{i:02d}") for i in range(clusters)}
    names = list(specs)
    qs = {
        f"q{i:04d}": QueueSpec(
            name=f"q{i:04d}",
            cluster=names[i % clusters],
            priority=rng.randint(0, 20),
            concurrency=rng.choice([2, 5, 10]),
            quota={GPU: Decimal(rng.choice([8, 16, 32]))},
        )
        for i in range(queues)
    }
    queue_names = list(qs)
    operations = []
    for i in range(ops):
        q = qs[queue_names[rng.randrange(queues)]]
        project = f"proj{rng.randrange(200)}"
        name = f"op-{i}"
        operations.append(
            CompiledOperation(
                project=project,
                name=name,
                path=f"{project}/operations/{name}.yaml",
                queue=q.name,
                cluster=q.cluster,
                namespace=project,
                kind=RunKind.JOB,
                spec={"kind": "job", "name": name},
                requests={GPU: Decimal(rng.choice([1, 1, 2]))},
                submitted_at=T0 + timedelta(seconds=i),
            )
        )
    return CompiledRepo(
        version="c1", org=OrgSettings(), clusters=specs, queues=qs, operations=tuple(operations)
    )


def _threads() -> tuple[dict[str, float], dict[str, str]]:
    """CPU seconds of each live thread, by ident, and their names: read from each
    thread's own CPU clock (nanoseconds; /proc counts 10 ms ticks, coarser than a watch
    thread's share of a small cycle)."""
    seconds: dict[str, float] = {}
    names: dict[str, str] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds[str(thread.ident)] = time.clock_gettime(
                time.pthread_getcpuclockid(thread.ident)
            )
        except OSError:  # it ended meanwhile
            continue
        names[str(thread.ident)] = thread.name
    return seconds, names


def _settle(max_seconds: float = 30.0) -> None:
    """Wait until the watch threads are idle (their CPU still for 0.2 s): what the cycle
    changed has reached the caches, and its cost is in this cycle's figures."""
    from _measure import group_thread_seconds

    deadline = time.monotonic() + max_seconds
    before, names = _threads()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        after, names = _threads()
        if group_thread_seconds(before, after, names).get("watches", 0.0) < 0.005:
            return
        before = after


def _end_some(clusters: Mapping[str, Any], count: int, rng: random.Random) -> int:
    """``count`` live Jobs end Succeeded, spread over the clusters at random."""
    live = [
        (c, key)
        for c in clusters.values()
        for key, job in c.jobs.items()
        if not (job.get("status") or {}).get("conditions")
    ]
    chosen = rng.sample(live, min(count, len(live)))
    for cluster, (namespace, name) in chosen:
        cluster.set_phase(namespace, name, "Succeeded")
    return len(chosen)


def child(args: argparse.Namespace) -> None:
    from unittest import mock

    sys.path.insert(0, str(BENCH))
    sys.path.insert(0, str(BENCH.parent / "tests"))
    from _measure import group_thread_seconds
    from support.clocks import SteppedClock
    from support.fake_kube import FakeCluster, FakeKube

    from reconciler.core.types import ClusterSpec, RepoSnapshot
    from reconciler.runtime.cycle import Reconciler

    rss_imports = _rss_kib()
    repo = _world(args.clusters, args.queues, args.ops)
    fakes = {name: FakeCluster(name) for name in repo.clusters}
    clock = SteppedClock()

    def connect(spec: ClusterSpec) -> Any:
        return FakeKube(fakes[spec.name])

    reconciler = Reconciler(
        lambda: RepoSnapshot(files={}, version=repo.version),
        connect,  # type: ignore[arg-type]
        clock,
        watch=True,
        sync_timeout=60.0,
    )
    rss_world = _rss_kib()
    rng = random.Random(11)
    cycles: list[dict[str, float]] = []
    profiler = None
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
        for n in range(args.cycles):
            ended = _end_some(fakes, args.churn, rng) if n else 0
            clock.advance(30)
            if n == 1 and args.profile:
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.002)
                profiler.start()
            before, _ = _threads()
            wall, main = time.perf_counter(), time.thread_time()
            result = reconciler.run_once()
            main = time.thread_time() - main
            assert reconciler.wait_writes(60.0), "phase annotations still being written"
            wall = time.perf_counter() - wall
            _settle()
            after, names = _threads()
            spent = group_thread_seconds(before, after, names)
            spent["main"] = main  # the bench's own churn and settling are not the cycle's
            assert result.ok, (result.sync_error, result.clusters)
            cycles.append(
                {
                    "wall": wall,
                    "dispatched": len(result.dispatched),
                    "ended": ended,
                    **{g: spent.get(g, 0.0) for g in GROUPS},
                    "cpu": sum(spent.get(g, 0.0) for g in GROUPS),
                }
            )
        if profiler is not None:
            profiler.stop()
            Path(args.profile).write_text(profiler.output_text(unicode=True, show_all=False))
    rss = _rss_kib()
    threads = threading.active_count()
    jobs = sum(len(c.jobs) for c in fakes.values())
    events = sum(len(c.changes) for c in fakes.values())
    reconciler.close()
    for fake in fakes.values():
        fake.close()
    print(
        json.dumps(
            {
                "clusters": args.clusters,
                "ops": args.ops,
                "queues": args.queues,
                "cycles": cycles,
                "rss_imports_kib": rss_imports,
                "rss_world_kib": rss_world,
                "rss_kib": rss,
                "hwm_kib": _rss_kib("VmHWM"),
                "jobs": jobs,
                "watch_events": events,
                "threads": threads,
            }
        )
    )


# --- the parent: every size, side by side ----------------------------------------------


def run_size(clusters: int, args: argparse.Namespace, profile: str) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        CHILD,
        f"--clusters={clusters}",
        f"--ops={args.ops}",
        f"--queues={args.queues}",
        f"--cycles={args.cycles}",
        f"--churn={args.churn}",
    ]
    if profile:
        command.append(f"--profile={profile}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{clusters} clusters failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def summary(r: Mapping[str, Any]) -> dict[str, float]:
    """One size's figures: CPU in ms, RSS in KiB."""
    cycles = r["cycles"]
    dispatched = sum(int(c["dispatched"]) for c in cycles)
    return {
        "first_cpu": cycles[0]["cpu"] * 1000,
        "first_dispatched": cycles[0]["dispatched"],
        "steady_cpu": steady_mean(cycles, "cpu") * 1000,
        "steady_main": steady_mean(cycles, "main") * 1000,
        "steady_wall": steady_mean(cycles, "wall") * 1000,
        "steady_dispatched": steady_mean(cycles, "dispatched"),
        "cpu_per_op": per(sum(c["cpu"] for c in cycles) * 1000, dispatched),
        "steady_cpu_per_op": per(
            sum(c["cpu"] for c in cycles[1:]) * 1000,
            sum(int(c["dispatched"]) for c in cycles[1:]),
        ),
        "watches_first": cycles[0]["watches"] * 1000,
        "watches_steady": steady_mean(cycles, "watches") * 1000,
        "rss_per_op": per(r["rss_kib"] - r["rss_imports_kib"], r["ops"]),
        "rss_mib": r["rss_kib"] / 1024,
    }


ROWS = (
    ("first cycle: CPU ms (all threads)", "first_cpu"),
    ("first cycle: dispatched", "first_dispatched"),
    ("first cycle: watch threads' CPU ms", "watches_first"),
    ("steady cycle: CPU ms (all threads)", "steady_cpu"),
    ("steady cycle: of it the cycle thread, ms", "steady_main"),
    ("steady cycle: watch threads' CPU ms", "watches_steady"),
    ("steady cycle: wall ms", "steady_wall"),
    ("steady cycle: dispatched", "steady_dispatched"),
    ("CPU ms per dispatched operation, all cycles", "cpu_per_op"),
    ("CPU ms per dispatched operation, steady", "steady_cpu_per_op"),
    ("RSS KiB per operation", "rss_per_op"),
    ("RSS MiB", "rss_mib"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", default="1,10,50", help="sizes, comma-separated")
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--churn", type=int, default=500, help="Jobs ending before a cycle")
    parser.add_argument(
        "--profile",
        default="",
        help="pyinstrument text of the steady cycles (pip install pyinstrument)",
    )
    parser.add_argument(CHILD, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.clusters = int(args.clusters)
        child(args)
        return
    sizes = [int(s) for s in args.clusters.split(",")]
    results = []
    for i, size in enumerate(sizes):
        # the profile of the largest size only: the profiler slows the cycle it watches
        started = time.perf_counter()
        results.append(run_size(size, args, args.profile if i == len(sizes) - 1 else ""))
        r = results[-1]
        print(
            f"{size} clusters: {time.perf_counter() - started:.0f} s; {r['jobs']} Jobs, "
            f"{r['watch_events']} watch events, {r['threads']} threads",
            flush=True,
        )
    figures = [summary(r) for r in results]
    print(
        f"\n{args.ops} operations, {args.queues} queues, {args.cycles} cycles, {args.churn} "
        "Jobs ending before each after the first"
    )
    print(f"{'clusters':<46}" + "".join(f"{s:>12}" for s in sizes))
    for label, key in ROWS:
        print(f"{label:<46}" + "".join(f"{f[key]:>12.2f}" for f in figures))
    print("\ngrowth from one size to the next: ratio (k, as clusters^k)")
    for label, key in ROWS:
        steps = growth(sizes, [f[key] for f in figures])
        print(f"{label:<46}" + "".join(f"{r:>8.2f}x ({k:+.2f})" for r, k in steps))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.profile:
        print(f"profile of the steady cycles at {sizes[-1]} clusters: {args.profile}")


if __name__ == "__main__":
    main()
