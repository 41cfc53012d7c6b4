"""End-to-end dispatch throughput on the dev cluster, side by side in one run:

(a) a raw kubernetes-client loop creates N Jobs (the very manifests the reconciler renders);
(b) the reconciler dispatches N operations from a fresh commit, under a queue whose limits
    allow them all, until all its Jobs exist.

Prints the throughput of each and, last, the ratio b/a (goal >= 0.8).

    PYTHONPATH=$PWD python bench/e2e_dispatch.py [-n 2000] [--state-dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, connect, connect_cluster
from reconciler.adapters.repo import snapshot_git
from reconciler.core.compile import compile_repo
from reconciler.core.render import render_operation
from reconciler.core.types import ClusterSpec
from reconciler.devcluster.cluster import DevCluster
from reconciler.runtime.cycle import Reconciler


def write_repo(root: Path, kubeconfig: Path, count: int, namespace: str) -> Path:
    """A config repo with one unlimited queue and ``count`` operations."""
    (root / "clusters").mkdir(parents=True)
    (root / "queues").mkdir()
    ops = root / "projects" / namespace / "operations"
    ops.mkdir(parents=True)
    (root / "reconciler.yaml").write_text("kind: Org\nname: bench\n")
    (root / "clusters" / "local.yaml").write_text(
        f"kind: Cluster\nname: local\nkubeconfig:\n  path: {kubeconfig}\ncontext: dev\n"
    )
    (root / "queues" / "bulk.yaml").write_text("kind: Queue\nname: bulk\ncluster: local\n")
    (root / "projects" / namespace / "project.yaml").write_text(
        f"kind: Project\nname: {namespace}\nnamespace: {namespace}\ndefaults:\n  queue: bulk\n"
    )
    for i in range(count):
        (ops / f"op-{i:05d}.yaml").write_text(
            f"kind: Operation\nname: op-{i:05d}\nrun:\n  kind: job\n"
            "  container:\n    image: busybox\n    resources: {requests: {cpu: 10m}}\n"
            "  environment:\n    annotations: {reconciler.dev/simulated-duration: 1h}\n"
        )
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], cwd=root, check=True)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the dev cluster running")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="e2e-dispatch-"))
    cluster = DevCluster(args.state_dir or work / "cluster")
    cluster.up(progress=lambda m: print(f"[dev-cluster] {m}", flush=True))
    try:
        kube = Kube(connect(cluster.kubeconfig))
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
        for manifest in manifests:
            kube.batch.create_namespaced_job("bench-raw", dict(manifest))
        raw_seconds = time.perf_counter() - started
        raw_rate = args.n / raw_seconds
        print(
            f"(a) raw client loop: {args.n} Jobs in {raw_seconds:.1f} s = {raw_rate:.0f}/s",
            flush=True,
        )

        repo = write_repo(work / "reconciler", cluster.kubeconfig, args.n, "bench-rec")

        def connect_spec(spec: ClusterSpec) -> Kube:
            return Kube(connect_cluster(spec.kubeconfig, spec.context))

        reconciler = Reconciler(lambda: snapshot_git(repo, "main"), connect_spec, SystemClock())
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
        print(
            f"(b) reconciler: {args.n} ops dispatched in {rec_seconds:.1f} s "
            f"({cycles} cycles) = {rec_rate:.0f}/s",
            flush=True,
        )
        print(f"ratio b/a: {rec_rate / raw_rate:.2f} (goal >= 0.8)")
    finally:
        if not args.keep:
            cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
