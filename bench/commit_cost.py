"""What a commit costs the reconciler's cycle thread, compile and decide, in one process,
at two sizes side by side: the growth per 10x operations says whether a commit costs
O(what changed) (about 1x) or O(operations) (about 10x).

The world of ``bench/commit_latency.py --ops N``: N operations in a paused queue, 1% of them
there through a preset ``move-<i>``, and a dispatching queue. Per size: the cold cycle
(an empty ``CompileCache`` and ``PlanCache``), then with the caches kept, as the reconciler
keeps them: a cycle with no new commit, three commits each adding one operation, and a
commit changing the preset of 1% (they move to the dispatching queue: 1% of the operations
recompiled and their queue planned again). Prints the CPU time (this process) of
``compile_repo`` and ``decide`` for each, beside ``decide`` without the ``PlanCache`` (a
full plan: the same plan, checked), the ratio of a cycle to the cold one, and last the
growth of each from the smaller size to the larger.

    PYTHONPATH=$PWD python bench/commit_cost.py [--sizes 10000,100000] [--profile OUT.txt]

``--profile`` writes a pyinstrument profile of the larger size's commits (not the cold).
``--sync N`` first times the reader: ``ConfigRepo.sync`` of a Git repo of N operation files
after three one-file commits, beside its first (full) read; this process's CPU, git's own
not counted.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.decision.cycle import ClusterListing, Decision, Memory, decide
from reconciler.core.plan.groups import PlanCache
from reconciler.core.types import CompiledRepo, RepoFile, RepoSnapshot, SnapshotChanges
from reconciler.runtime.service import settle_heap

OP = (
    "kind: Operation\nname: {name}\nrun:\n  kind: job\n"
    "  container:\n    image: busybox\n    resources: {{requests: {{cpu: 10m}}}}\n"
    "  environment:\n    annotations: {{reconciler.dev/simulated-duration: 1h}}\n"
)
MOVE = "kind: Preset\nname: move-{i}\npatchStrategy: replace\nqueue: {queue}\n"
NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
T = TypeVar("T")


def world(n: int) -> dict[str, RepoFile]:
    files: dict[str, RepoFile] = {}

    def put(path: str, text: str) -> None:
        files[path] = RepoFile(path, text.encode())

    put("reconciler.yaml", "kind: Org\nname: bench\n")
    put(
        "clusters/local.yaml", "kind: Cluster\nname: local\nkubeconfig:\n  path: /k\ncontext: dev\n"
    )
    put("queues/bulk.yaml", "kind: Queue\nname: bulk\ncluster: local\n")
    put("queues/held.yaml", "kind: Queue\nname: held\ncluster: local\npaused: true\n")
    put("projects/bench/project.yaml", "kind: Project\nname: bench\ndefaults:\n  queue: bulk\n")
    put("projects/bench/presets/move-0.yaml", MOVE.format(i=0, queue="held"))
    for i in range(n):
        name = f"h{i:06d}"
        tail = "presets: [move-0]\n" if i % 100 == 0 else "queue: held\n"
        put(f"projects/bench/operations/{name}.yaml", OP.format(name=name) + tail)
    return files


def cpu(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def measure(n: int, profile: Path | None) -> dict[str, tuple[float, float, float]]:
    """Per cycle: (compile CPU, decide CPU, decide CPU without a ``PlanCache``), seconds."""
    files = world(n)
    cache, plans, memory = CompileCache(), PlanCache(), Memory()
    listing = {"local": ClusterListing(())}
    rows: dict[str, tuple[float, float, float]] = {}

    last = ""

    def cycle(
        label: str, compiled: CompiledRepo | None = None, changed: frozenset[str] = frozenset()
    ) -> tuple[CompiledRepo, Decision]:
        nonlocal memory, last
        # what changed since the last snapshot, as ConfigRepo says it (git diff-tree)
        changes = SnapshotChanges(last, changed) if last else None
        snapshot = RepoSnapshot(dict(files), version=label, changes=changes)
        last = label
        t_compile, got = cpu(lambda: compiled or compile_repo(snapshot, cache=cache))
        assert got.valid, got.errors[:3]
        t_full, full = cpu(lambda: decide(got, listing, memory, NOW))
        t_decide, decision = cpu(lambda: decide(got, listing, memory, NOW, plans))
        assert decision.plan == full.plan
        memory = decision.memory
        rows[label] = (t_compile, t_decide, t_full)
        return got, decision

    compiled, _ = cycle("cold")
    settle_heap()  # as the reconciler does once it is up
    profiler = None
    if profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001)
        profiler.start()
    cycle("no new commit", compiled)  # the reconciler reuses the compiled repo
    last = "cold"
    for r in range(3):
        path = f"projects/bench/operations/new-{r}.yaml"
        files[path] = RepoFile(path, OP.format(name=f"new-{r}").encode())
        cycle(f"a new operation ({r + 1})", changed=frozenset({path}))
    path = "projects/bench/presets/move-0.yaml"
    files[path] = RepoFile(path, MOVE.format(i=0, queue="bulk").encode())
    _, decision = cycle("a preset of 1% changed", changed=frozenset({path}))
    assert len(decision.plan.dispatch) >= n // 100
    if profiler is not None and profile is not None:
        profiler.stop()
        profile.write_text(profiler.output_text(unicode=False, show_all=False))
    return rows


def sync_cost(n: int) -> None:
    """``ConfigRepo.sync`` after a one-file commit, beside the first sync (a full read)."""
    import subprocess
    import tempfile

    from reconciler.adapters.git import ConfigRepo

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        ops = work / "projects/bench/operations"
        ops.mkdir(parents=True)
        (work / "reconciler.yaml").write_text("kind: Org\nname: bench\n")
        for i in range(n):
            (ops / f"h{i:06d}.yaml").write_text(f"kind: Operation\nname: h{i:06d}\n")

        def commit(message: str) -> None:
            for args in (["add", "-A"], ["commit", "-qm", message]):
                subprocess.run(
                    ["git", "-C", str(work), "-c", "user.name=b", "-c", "user.email=b@b", *args],
                    check=True,
                )

        subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
        commit("all")
        repo = ConfigRepo(str(work), "main", cache_dir=Path(tmp) / "cache")
        full, _ = cpu(repo.sync)
        print(f"ConfigRepo.sync of {n:,} files: first (full) {full * 1000:.0f} ms", flush=True)
        for r in range(3):
            (ops / f"new-{r}.yaml").write_text(f"kind: Operation\nname: new-{r}\n")
            commit(f"new {r}")
            took, snapshot = cpu(repo.sync)
            assert snapshot.changes is not None
            print(
                f"  after a one-file commit: {took * 1000:.1f} ms ({took / full:.2%} of the full)",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--sync", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.sync:
        sync_cost(args.sync)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    for n in sizes:
        print(f"{n:,} operations (load average {os.getloadavg()[0]:.1f})", flush=True)
        results[n] = rows = measure(n, args.profile if n == sizes[-1] else None)
        cold = sum(rows["cold"][:2])
        for label, (c, d, full) in rows.items():
            print(
                f"  {label:28s} compile {c * 1000:7.0f} ms  decide {d * 1000:5.0f} ms "
                f"(a full plan: {full * 1000:5.0f} ms)  {(c + d) / cold:6.1%} of cold",
                flush=True,
            )
    if len(sizes) > 1:
        small, large = results[sizes[0]], results[sizes[-1]]
        print(f"growth {sizes[0]:,} -> {sizes[-1]:,} (compile + decide CPU):")
        for label in large:
            print(f"  {label:28s} {sum(large[label][:2]) / sum(small[label][:2]):5.1f}x")


if __name__ == "__main__":
    main()
