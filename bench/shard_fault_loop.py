"""Shards under kill -9: two ``reconciler run --shards`` replicas on two dev clusters (two
partitions: the example, with team-b on the second cluster), and N rounds (default 20) of
one more operation in each partition, a kill -9 of a random replica at a random moment, and
a new replica started in its place. A sampler lists both clusters' Jobs all along. Prints
each takeover's time against the Lease's duration, then the tallies: Jobs made twice, queues
over their limits, operations not Succeeded at the end (lost). Exit 1 on any of them.

The replicas and the checks are the cluster test's (tests/support/shard_replicas.py,
tests/cluster/test_shards.py: 2 kills), with more kills.

    PYTHONPATH=$PWD python bench/shard_fault_loop.py [-n 20] [--seed 8]

Two dev clusters are started in a temporary directory and stopped after (the control plane
must be built: ``reconciler dev-cluster build``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from support.helpers import wait_until  # noqa: E402
from support.reconciler_env import clean_workloads, make_config_repo, second_cluster  # noqa: E402
from support.shard_replicas import ShardReplicas, split_team_b  # noqa: E402

from reconciler.adapters.kube import Kube, connect  # noqa: E402
from reconciler.devcluster.cluster import DevCluster  # noqa: E402
from reconciler.devcluster.prerequisites import apply_prerequisites  # noqa: E402
from reconciler.devcluster.shape import default_shape  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20, help="kills (default 20)")
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="shard-loop-") as tmp:
        work = Path(tmp)
        dev = DevCluster(work / "cluster")
        dev.up(progress=lambda msg: print(f"[dev-cluster] {msg}", file=sys.stderr))
        try:
            kube = Kube(connect(dev.kubeconfig))
            apply_prerequisites(kube.api)
            clean_workloads(kube)
            from kubernetes import client

            namespace = f"shards-{uuid.uuid4().hex[:8]}"
            client.CoreV1Api(kube.api).create_namespace({"metadata": {"name": namespace}})
            repo = make_config_repo(work / "config", dev.kubeconfig, duration="3s")
            shape = default_shape(gpu_nodes=2, cpu_nodes=0)
            with second_cluster(work / "second", repo, shape) as (_, remote):
                compiled = split_team_b(repo)
                kubes = {"local": kube, "remote": remote}
                replicas = ShardReplicas(repo, dev.kubeconfig, namespace, work, kubes, compiled)
                started = time.monotonic()
                living = ["r1", "r2"]
                lost: dict[str, str | None] = {}
                try:
                    for name in living:
                        replicas.start(name)
                    wait_until(
                        lambda: sorted(replicas.holders().values()) == sorted(living),
                        timeout=60,
                        what="one partition each",
                    )
                    for index in range(args.n):
                        replicas.add_operations(index)
                        time.sleep(rng.uniform(0.5, 3.0))  # a kill anywhere in its cycles
                        victim = rng.choice(living)
                        took = replicas.kill(victim)
                        fresh = f"r{index + 3}"
                        living = [r for r in living if r != victim] + [fresh]
                        replicas.start(fresh)
                        print(
                            f"kill {index + 1:2d}/{args.n} {victim:>4}: taken over in "
                            f"{took:4.2f}s (Lease {replicas.lease:g}s, retry "
                            f"{replicas.retry:g}s)"
                        )
                        now = sorted(living)
                        wait_until(
                            lambda now=now: sorted(replicas.holders().values()) == now,
                            timeout=60,
                            what=f"{fresh} to get its share",
                        )
                    try:
                        replicas.wait_all_succeeded(timeout=300)
                    except AssertionError:
                        wanted = {op.id for op in replicas.compiled.operations}
                        phases = replicas.phases()
                        lost = {o: phases.get(o) for o in wanted if phases.get(o) != "Succeeded"}
                finally:
                    replicas.close()
                runs = replicas.jobs_per_operation()
                violations = replicas.violations()
                tallies = {
                    "kills": len(replicas.takeovers),
                    "lease_seconds": replicas.lease,
                    "retry_seconds": replicas.retry,
                    "takeover_max": round(max(replicas.takeovers), 2),
                    "takeover_median": round(statistics.median(replicas.takeovers), 2),
                    "operations": len(replicas.compiled.operations),
                    "jobs": sum(runs.values()),
                    "duplicated": sum(1 for n in runs.values() if n > 1)
                    + sum(1 for v in violations if "made twice" in v),
                    "over_limits": sum(1 for v in violations if "made twice" not in v),
                    "lost": len(lost),
                    "samples": replicas.samples,
                    "total_seconds": round(time.monotonic() - started, 1),
                }
                print(json.dumps(tallies, indent=2))
                for line in violations[:20]:
                    print(f"  {line}")
                if lost:
                    print(f"  not Succeeded: {lost}")
                bad = tallies["duplicated"] or tallies["over_limits"] or tallies["lost"]
                return 1 if bad else 0
        finally:
            dev.down(progress=lambda _msg: None)


if __name__ == "__main__":
    sys.exit(main())
