"""The dispatching side of one benchmark run, in a process of its own (see bench/_measure.py).

    python bench/_dispatcher.py raw|reconciler --kubeconfig K --namespace NS -n N
        [-w W] [--interval S] [--duration 1h] [--gpus G] [--quota-gpus C]
        [--kueue-queue Q] [--events] [--client http1|urllib3]

Protocol on stdin/stdout (one JSON object a line out, one word a line in):
``ready`` once prepared; on ``go`` it dispatches, says ``dispatched`` (with the
``time.monotonic()`` the last create returned) and keeps running until ``stop``. On
``snap`` it says ``snap``: the CPU seconds of its threads since ``go`` by group
(``_measure.THREAD_GROUPS``: main, watches, creates, status writer...) and its full
collections since ``go`` (the cyclic GC's oldest generation, timed by ``gc.callbacks``).

- raw: a kubernetes-client loop creates the Jobs ``core/decision/render.py`` renders for the same
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
import gc
import json
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _measure import group_thread_seconds, read_own_threads
from _repo import write_repo

from reconciler.adapters.kube import Kube, connect
from reconciler.adapters.repo import snapshot_git
from reconciler.cli.run_cmd import DEFAULT_STATUS_INTERVAL
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import render_operation
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.loop import DEFAULT_MIN_GAP, Wakeup, run_forever
from reconciler.runtime.service import make_runtime

_SAYING = threading.Lock()


def say(event: str, **fields: Any) -> None:
    with _SAYING:  # one line at a time: the stdin reader answers `snap` from its thread
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


class FullCollections:
    """The cyclic GC's full collections (generation 2) and their CPU, from ``gc.callbacks``
    (a collection runs on the thread that triggered it: its thread time is the cost)."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._started: dict[int, float] = {}
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        key = threading.get_ident()
        if phase == "start":
            self._started[key] = time.thread_time()
        elif key in self._started:
            self.count += 1
            self.seconds += time.thread_time() - self._started.pop(key)


class Commands:
    """The parent's words on stdin."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.stop = threading.Event()
        self._gcs = FullCollections()
        self._at_go: tuple[dict[str, float], int, float] = ({}, 0, 0.0)
        threading.Thread(target=self._read, name="bench-stdin", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            word = line.strip()
            if word == "go":
                self._at_go = (read_own_threads(), self._gcs.count, self._gcs.seconds)
                self.go.set()
            elif word == "snap":
                self._snap()
            elif word == "stop":
                break
        self.go.set()
        self.stop.set()

    def _snap(self) -> None:
        names = {str(t.native_id): t.name for t in threading.enumerate()}
        before, count, seconds = self._at_go
        threads = group_thread_seconds(before, read_own_threads(), names)
        say(
            "snap",
            threads={g: round(s, 3) for g, s in threads.items()},
            full_gcs=self._gcs.count - count,
            full_gc_seconds=round(self._gcs.seconds - seconds, 3),
        )


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
    parser.add_argument(
        "--client",
        choices=("http1", "urllib3"),
        default="http1",
        help="reconciler: its creates and watches by adapters/http1.py, or by urllib3",
    )
    args = parser.parse_args()
    import reconciler

    if args.client == "urllib3":
        from _urllib3_client import install

        install()
    print(
        f"reconciler from {Path(reconciler.__file__).parent}, client {args.client}",
        file=sys.stderr,
        flush=True,
    )
    commands = Commands()
    work = Path(tempfile.mkdtemp(prefix=f"dispatch-{args.side}-"))
    try:
        (run_raw if args.side == "raw" else run_reconciler)(args, work, commands)
    except BaseException as exc:
        say("error", error=repr(exc))
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
