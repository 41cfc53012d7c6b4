"""Steady-state cycle vs. a cold full load, through the Reconciler, in one run.

On a dev cluster, N operations (default 10,000) in a queue of concurrency C (default 200) whose
Jobs (1 h simulated) already run. Then, side by side:

- cold: a new Reconciler with an empty Git cache runs its first cycle (clone, read every
  blob, parse and compile every file, sync the watch caches, plan; the C running Jobs are
  seen in the caches, so nothing is created);
- steady: the same Reconciler runs more cycles with no new commit (a fetch and a tree
  compare, the compiled repo reused, plan from the caches).

Prints both, the steady cycle's phases, and last the ratio steady / cold (goal <= 5%).

    PYTHONPATH=$PWD python bench/steady_cycle.py [-n 10000] [-c 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _repo import commit_all, write_org

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.git import ConfigRepo
from reconciler.adapters.kube import Kube, connect_cluster
from reconciler.core.types import ClusterSpec
from reconciler.devcluster.cluster import DevCluster
from reconciler.devcluster.shape import NodePool
from reconciler.runtime.cycle import Reconciler

POOLS = (NodePool("bench", count=2, cpu="1000", memory="4000Gi", pods=1000),)


def write_repo(root: Path, kubeconfig: Path, count: int, concurrency: int) -> Path:
    write_org(root, kubeconfig)
    (root / "queues" / "bulk.yaml").write_text(
        f"kind: Queue\nname: bulk\ncluster: local\nconcurrency: {concurrency}\n"
    )
    for p in range(10):  # ten projects, each with a preset, like a real org
        project = root / "projects" / f"team-{p}"
        (project / "operations").mkdir(parents=True)
        (project / "presets").mkdir()
        (project / "project.yaml").write_text(
            f"kind: Project\nname: team-{p}\nnamespace: steady-{p}\n"
            "defaults:\n  queue: bulk\n  presets: [base]\n"
        )
        (project / "presets" / "base.yaml").write_text(
            "kind: Preset\nname: base\nrun:\n  container:\n    image: busybox\n"
            "    resources: {requests: {cpu: 10m}}\n"
            "  environment:\n    annotations: {reconciler.dev/simulated-duration: 1h}\n"
        )
    for i in range(count):
        (root / "projects" / f"team-{i % 10}" / "operations" / f"op-{i:05d}.yaml").write_text(
            f"kind: Operation\nname: op-{i:05d}\nrun:\n  kind: job\n"
            f"  container:\n    args: [--seed, '{i}']\n"
        )
    return commit_all(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("-c", "--concurrency", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the dev cluster running")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="steady-cycle-"))
    cluster = DevCluster(args.state_dir or work / "cluster")
    cluster.up(POOLS, progress=lambda m: print(f"[dev-cluster] {m}", flush=True))

    def connect_spec(spec: ClusterSpec) -> Kube:
        return Kube(connect_cluster(spec.kubeconfig, spec.context))

    def new_reconciler(cache: str) -> Reconciler:
        source = ConfigRepo(str(repo), cache_dir=work / cache)
        return Reconciler(source.sync, connect_spec, SystemClock())

    try:
        repo = write_repo(work / "config", cluster.kubeconfig, args.n, args.concurrency)
        seed = new_reconciler("seed-cache")
        first = seed.run_once()
        seed.close()
        assert first.compiled is not None and first.compiled.valid, first.config_errors[:3]
        print(
            f"operations: {len(first.compiled.operations)}; running Jobs: {len(first.dispatched)}"
        )
        print(f"load average: {os.getloadavg()[0]:.1f}", flush=True)

        reconciler = new_reconciler("cache")
        started = time.perf_counter()
        cold = reconciler.run_once()
        cold_seconds = time.perf_counter() - started
        assert not cold.dispatched and cold.plan is not None, "the cold cycle must only adopt"
        steady: list[float] = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = reconciler.run_once()
            steady.append(time.perf_counter() - started)
            assert result.compiled is cold.compiled and not result.dispatched
        reconciler.close()
        median = statistics.median(steady)
        print(f"cold full load (first cycle of a new reconciler): {cold_seconds * 1000:8.0f} ms")
        print(
            f"steady cycle, no change (median of {args.repeat}):    {median * 1000:8.0f} ms "
            f"(min {min(steady) * 1000:.0f}, max {max(steady) * 1000:.0f})"
        )
        print(f"load average: {os.getloadavg()[0]:.1f}")
        print(f"ratio steady / cold: {median / cold_seconds:.1%} (goal <= 5%)")
    finally:
        if not args.keep:
            cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
