"""Peak memory (RSS) with N operations loaded: compile and plan, in a fresh subprocess so
the figure is clean.

    PYTHONPATH=$PWD python bench/memory_bench.py [N_OPERATIONS (default 100000)] [--top K]

The child prints its RSS after the imports, after building the snapshot (the file contents
themselves), after compile_repo (with the CompileCache the reconciler keeps between cycles),
after plan_repo, and its peak (ru_maxrss); with --top,
the biggest allocation sites of the compiled repo (tracemalloc, slow). Last, the ratio of
the peak to the size of the YAML it holds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

CHILD = "--child"


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(n: int, top: int) -> None:
    import resource
    import tracemalloc
    from datetime import UTC, datetime

    from reconciler.core.compile import CompileCache, compile_repo
    from reconciler.core.plan import plan_repo

    sys.path.insert(0, os.path.dirname(__file__))
    from compile_bench import _repo

    out: dict[str, float | str] = {"imports": rss_mib()}
    snapshot = _repo(n)
    out["yaml_mib"] = sum(len(f.content) for f in snapshot.files.values()) / 2**20
    gc.collect()
    out["snapshot"] = rss_mib()
    if top:
        tracemalloc.start(1)
    started = time.perf_counter()
    cache = CompileCache()  # kept, as the reconciler keeps it between cycles
    compiled = compile_repo(snapshot, cache=cache)
    out["compile_s"] = time.perf_counter() - started
    assert compiled.valid, compiled.errors[:3]
    out["operations"] = len(compiled.operations)
    gc.collect()
    out["compiled"] = rss_mib()
    if top:
        stats = tracemalloc.take_snapshot().statistics("lineno")[:top]
        out["top"] = "\n".join(
            f"    {s.size / 2**20:7.1f} MiB {s.count:>9} blocks  {s.traceback[0]}" for s in stats
        )
        tracemalloc.stop()
    started = time.perf_counter()
    plan = plan_repo(compiled, [], datetime(2026, 1, 1, tzinfo=UTC))
    out["plan_s"] = time.perf_counter() - started
    out["pending"] = len(plan.pending) + len(plan.dispatch)
    out["planned"] = rss_mib()
    out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert cache.compiled  # alive until here
    print(json.dumps(out))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(int(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=0, help="show the K biggest allocation sites")
    args = parser.parse_args()
    proc = subprocess.run(
        [sys.executable, __file__, CHILD, str(args.n), str(args.top)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    r = json.loads(proc.stdout)
    ops = r["operations"]
    took = f"compile {r['compile_s']:.1f} s, plan {r['plan_s']:.2f} s"
    print(f"operations compiled:      {ops} ({took})")
    print(f"RSS after imports:        {r['imports']:8.0f} MiB")
    print(f"RSS with the snapshot:    {r['snapshot']:8.0f} MiB ({r['yaml_mib']:.1f} MiB of YAML)")
    print(f"RSS compiled:             {r['compiled']:8.0f} MiB")
    print(f"RSS planned:              {r['planned']:8.0f} MiB")
    per_op = (r["compiled"] - r["snapshot"]) * 2**20 / ops
    print(f"compiled repo per op:     {per_op / 1024:8.1f} KiB")
    planned_op = (r["planned"] - r["snapshot"]) * 2**20 / ops
    print(f"compiled and planned, per op: {planned_op / 1024:4.1f} KiB")
    if "top" in r:
        print("biggest allocation sites while compiling (tracemalloc):")
        print(r["top"])
    print(f"peak RSS:                 {r['peak']:8.0f} MiB")
    print(f"ratio peak RSS / YAML held: {r['peak'] / r['yaml_mib']:.0f}x")


if __name__ == "__main__":
    main()
