"""The dispatching side of one benchmark run, in a process of its own (see bench/_measure.py).

    python bench/_dispatcher.py raw|reconciler --kubeconfig K --namespace NS -n N
        [-w W] [--interval S] [--duration 1h] [--gpus G] [--quota-gpus C]
        [--kueue-queue Q] [--events]

Protocol on stdin/stdout (one JSON object a line out, one word a line in):
``ready`` once prepared; on ``go`` it dispatches, says ``dispatched`` (with the
``time.monotonic()`` the last create returned) and keeps running until ``stop``. A ``mark``
ends the measured window: on ``stop`` it says ``threads``, the CPU seconds of its threads
from ``go`` to the mark, by kind of thread (``ThreadCpu``).

- raw: a kubernetes-client loop creates the Jobs ``core/render.py`` renders for the same
  operations, W in flight. With ``--kueue-queue`` they are created ``suspend: true`` with the
  ``kueue.x-k8s.io/queue-name`` label, for Kueue to admit.
- reconciler: what ``reconciler run --interval I --status-interval 10s`` builds
  (``make_runtime``: the config fetched and read at most every I, the status branch written
  in the background) cycles over a config repo of the same operations (one queue;
  ``--quota-gpus`` gives it a GPU quota) until all are dispatched, then every
  ``--interval`` seconds until ``stop``. With ``--events``, ``reconciler run``'s loop
  instead: a cycle when a Job's run ends (debounced 0.2 s), every 10 s as the fallback,
  status written to the repo's status branch at its cadence.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _repo import write_repo

from reconciler.adapters.kube import Kube, connect
from reconciler.adapters.repo import snapshot_git
from reconciler.cli.run_cmd import DEFAULT_STATUS_INTERVAL
from reconciler.core.compile import compile_repo
from reconciler.core.render import render_operation
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.loop import DEFAULT_MIN_GAP, Wakeup, run_forever
from reconciler.runtime.service import make_runtime


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


# A thread's kind by its name's start: the CPU of each kind is reported per run.
THREAD_KINDS = (
    ("informer-", "watches"),
    ("create", "creates"),
    ("status-writer", "status writer"),
    ("MainThread", "main"),
)
_TICK = os.sysconf("SC_CLK_TCK")


class ThreadCpu:
    """The CPU seconds (user and system, from /proc/self/task) of this process's threads
    between ``start`` and ``mark``, summed by kind (``THREAD_KINDS``; ``other`` for the
    rest). Read at those two moments only, so that measuring costs nothing in between: a
    thread that ends before the mark is not counted (the runtime's threads live as long
    as the process)."""

    def __init__(self) -> None:
        self._base: dict[int, tuple[str, float]] = {}
        self._end: dict[int, tuple[str, float]] = {}

    @staticmethod
    def _sample() -> dict[int, tuple[str, float]]:
        out = {}
        for thread in threading.enumerate():
            tid = thread.native_id
            try:
                stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            out[tid] = (thread.name, (int(fields[11]) + int(fields[12])) / _TICK)
        return out

    def start(self) -> None:
        self._base = self._sample()

    def mark(self) -> None:
        self._end = self._sample()

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for tid, (name, seconds) in self._end.items():
            kind = next((k for p, k in THREAD_KINDS if name.startswith(p)), "other")
            base = self._base.get(tid, (name, 0.0))[1]
            out[kind] = out.get(kind, 0.0) + seconds - base
        return out


class Commands:
    """The parent's words on stdin."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.stop = threading.Event()
        self.threads = ThreadCpu()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            word = line.strip()
            if word == "go":
                self.threads.start()
                self.go.set()
            elif word == "mark":
                self.threads.mark()
            elif word == "stop":
                break
        self.go.set()
        self.stop.set()


def run_raw(args: argparse.Namespace, work: Path, commands: Commands) -> None:
    repo = write_repo(
        work / "repo",
        args.kubeconfig,
        args.n,
        args.namespace,
        duration=args.duration,
        gpus=args.gpus,
    )
    compiled = compile_repo(snapshot_git(repo, "main"))
    if not compiled.valid:
        raise SystemExit(f"bench repo invalid: {compiled.errors[:3]}")
    now = datetime.now(UTC)
    manifests = [
        render_operation(op, {}, config_version=compiled.version, dispatched_at=now).job
        for op in compiled.operations
    ]
    if args.kueue_queue:
        for manifest in manifests:
            manifest["spec"]["suspend"] = True
            manifest["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = (
                args.kueue_queue
            )
    kube = Kube(connect(args.kubeconfig))
    kube.ensure_namespace(args.namespace)
    say("ready")
    commands.go.wait()

    def create(manifest: dict[str, Any]) -> None:
        # the leanest client call: the response is not turned into model objects
        resp = kube.batch.create_namespaced_job(args.namespace, manifest, _preload_content=False)
        assert resp.data  # read the body before the connection goes back to the pool
        resp.release_conn()

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(create, manifests))
    say("dispatched", at=time.monotonic(), count=len(manifests))
    commands.stop.wait()


def run_reconciler(args: argparse.Namespace, work: Path, commands: Commands) -> None:
    """What ``reconciler run --interval I --status-interval 10s`` builds (``make_runtime``):
    the config fetched into a cache and read at most every I (``PacedSource``), the status
    branch written by a thread of its own at most every 10 s (the default cadence of
    ``reconciler run``); cycles back to back until all are dispatched, then every I."""
    if args.events:
        run_reconciler_on_events(args, work, commands)
        return
    repo = write_repo(
        work / "repo",
        args.kubeconfig,
        args.n,
        args.namespace,
        duration=args.duration,
        gpus=args.gpus,
        quota_gpus=args.quota_gpus,
    )
    runtime = make_runtime(
        str(repo),
        "main",
        {},
        cache_dir=work / "cache",
        status_interval=DEFAULT_STATUS_INTERVAL,
        fetch_interval=args.interval,
        status_background=True,
        create_workers=args.workers,
        freeze_heap=True,
    )
    reconciler = runtime.reconciler
    say("ready")
    commands.go.wait()
    dispatched = 0
    cycles = 0

    def cycle() -> CycleResult:
        result = reconciler.run_once()
        runtime.on_cycle(result)
        return result

    try:
        while dispatched < args.n and not commands.stop.is_set():
            result = cycle()
            cycles += 1
            dispatched += len(result.dispatched) + len(result.adopted)
            if result.failed:
                raise SystemExit(f"dispatch failed: {next(iter(result.failed.values()))}")
            if dispatched < args.n and args.quota_gpus:
                commands.stop.wait(max(0.0, args.interval - result.duration))
        say("dispatched", at=time.monotonic(), count=dispatched, cycles=cycles)
        while not commands.stop.wait(args.interval):
            cycle()
    finally:
        runtime.close(timeout=30.0)
        reconciler.close()


def run_reconciler_on_events(args: argparse.Namespace, work: Path, commands: Commands) -> None:
    """What ``reconciler run`` does: a cycle when a Job's run ends (debounced 0.2 s), the
    interval (10 s) as the fallback, status on the repo's status branch at its cadence."""
    repo = write_repo(
        work / "repo",
        args.kubeconfig,
        args.n,
        args.namespace,
        duration=args.duration,
        gpus=args.gpus,
        quota_gpus=args.quota_gpus,
    )
    interval = 10.0
    wake = Wakeup()
    runtime = make_runtime(
        str(repo),
        "main",
        {},
        cache_dir=work / "cache",
        wakeup=wake,
        status_interval=interval,
        fetch_interval=interval,
        status_background=True,  # as `reconciler run`: the status written by a thread of its own
        freeze_heap=True,
    )
    say("ready")
    commands.go.wait()
    stop = threading.Event()
    dispatched = 0
    cycles = 0

    def on_cycle(result: CycleResult) -> None:
        nonlocal dispatched, cycles
        runtime.on_cycle(result)
        cycles += 1
        before = dispatched
        dispatched += len(result.dispatched) + len(result.adopted)
        if before < args.n <= dispatched:
            say("dispatched", at=time.monotonic(), count=dispatched, cycles=cycles)

    loop = threading.Thread(
        target=run_forever,
        args=(runtime.reconciler, interval, stop, on_cycle, wake),
        kwargs={"min_gap": DEFAULT_MIN_GAP},
        daemon=True,
    )
    loop.start()
    commands.stop.wait()
    stop.set()
    wake.interrupt()
    loop.join(timeout=30)
    runtime.close(timeout=30.0)
    runtime.reconciler.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("side", choices=("raw", "reconciler"))
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("-w", "--workers", type=int, default=8)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--duration", default="1h")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--quota-gpus", type=int, default=0)
    parser.add_argument("--kueue-queue", default="")
    parser.add_argument(
        "--events",
        action="store_true",
        help="reconciler: `reconciler run`'s loop (cycles on events)",
    )
    args = parser.parse_args()
    commands = Commands()
    work = Path(tempfile.mkdtemp(prefix=f"dispatch-{args.side}-"))
    try:
        (run_raw if args.side == "raw" else run_reconciler)(args, work, commands)
        say("threads", cpu=commands.threads.by_kind())
    except BaseException as exc:
        say("error", error=repr(exc))
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
