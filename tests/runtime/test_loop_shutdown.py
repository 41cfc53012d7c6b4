"""Shutdown of the long-running loop (``runtime/loop.py``): the main thread never waits on
a cluster read, a leader waits for the creates it already sent and starts no other, a
status hand-off is done whole or not at all. With a fake cluster, no processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, cast

import pytest
from support.paths import TEMPLATE

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import ApplyResult, Kube, KubeError, ObjectList
from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.loop import Loop, Wakeup

SNAPSHOT = replace(snapshot_worktree(TEMPLATE), version="c1")
PATIENCE = 10.0  # seconds a test waits for something that takes milliseconds


class FakeCluster:
    """Answers at once, except where told to hang: ``list_managed`` while ``reads_hang``,
    ``create_or_adopt`` until ``release_creates`` is set."""

    def __init__(self, *, reads_hang: bool = False) -> None:
        self.reads_hang = reads_hang
        self.reading = threading.Event()
        self.creating = threading.Event()
        self.release_creates = threading.Event()
        self.unblock = threading.Event()  # ends every hang at teardown
        self.creates: list[str] = []  # names of the objects created (a Job, its Service)

    def list_managed(self, kind: str, *, selector: str = "", fields: str = "") -> ObjectList:
        """Jobs and Pods (and, for the template's fleet queue, Nodes and every pod)."""
        self.reading.set()
        if self.reads_hang:
            self.unblock.wait()
            raise KubeError("list_managed: cluster unreachable: timed out")
        return ObjectList((), "1")

    def ensure_namespace(self, name: str) -> None:
        pass

    def create_or_adopt(self, manifest: Mapping[str, Any]) -> ApplyResult:
        meta = manifest["metadata"]
        self.creates.append(str(meta["name"]))
        self.creating.set()
        self.release_creates.wait()
        return ApplyResult(manifest["kind"], meta["namespace"], meta["name"], "uid", "2", True)

    def emit_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def apply_metadata(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    yield fake
    fake.release_creates.set()
    fake.unblock.set()


def reconciler(cluster: FakeCluster, loop: Loop) -> Reconciler:
    def connect_fake(spec: ClusterSpec) -> Kube:
        return cast(Kube, cluster)

    def source() -> RepoSnapshot:
        return SNAPSHOT

    return Reconciler(
        source,
        connect_fake,
        SystemClock(),
        is_leader=lambda: not loop.stopping,  # as `reconciler run` gates its writes
        watch=False,
        create_workers=1,
    )


def test_a_cycle_blocked_on_a_cluster_read_is_left_behind(cluster: FakeCluster) -> None:
    cluster.reads_hang = True
    wake = Wakeup()
    loop = Loop(threading.Event(), wake)
    rec = reconciler(cluster, loop)
    loop.start(rec, 60.0)
    assert cluster.reading.wait(PATIENCE)
    started = time.monotonic()
    loop.request_stop()  # what the SIGTERM handler does: a flag, no lock
    loop.wait()
    assert loop.stop.is_set() and wake.is_set()
    assert loop.finish() is False  # the loop thread is still in its read
    rec.close()
    assert time.monotonic() - started < 1.0
    assert cluster.creates == []


def test_a_leader_waits_for_the_creates_it_sent_and_starts_no_other(
    cluster: FakeCluster,
) -> None:
    loop = Loop(threading.Event())
    rec = reconciler(cluster, loop)
    loop.start(rec, 60.0)
    assert cluster.creating.wait(PATIENCE)  # one create in flight, the others queued
    loop.request_stop()
    loop.wait()
    loop.finish()
    closer = threading.Thread(target=rec.close, daemon=True)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() returned while a create was in flight"
    cluster.release_creates.set()
    closer.join(PATIENCE)
    assert not closer.is_alive()
    # one operation's objects (a Job, and a Service for some): none started after the stop
    assert len(set(cluster.creates)) == 1, cluster.creates


def test_a_hand_off_in_progress_is_finished_and_no_other_starts(cluster: FakeCluster) -> None:
    in_hand_off = threading.Event()
    release = threading.Event()
    results: list[CycleResult] = []

    def on_cycle(result: CycleResult) -> None:
        results.append(result)
        in_hand_off.set()
        release.wait(PATIENCE)

    cluster.release_creates.set()
    loop = Loop(threading.Event())
    loop.start(reconciler(cluster, loop), 0.0, on_cycle)
    assert in_hand_off.wait(PATIENCE)
    loop.request_stop()
    loop.wait()
    finisher = threading.Thread(target=loop.finish, daemon=True)
    finisher.start()
    finisher.join(0.3)
    assert finisher.is_alive(), "finish() returned during a hand-off"
    release.set()
    finisher.join(PATIENCE)
    assert not finisher.is_alive()
    time.sleep(0.1)
    assert len(results) == 1  # no hand-off after finish()


def test_an_error_that_ends_the_loop_is_raised_in_the_main_thread(
    cluster: FakeCluster,
) -> None:
    def on_cycle(result: CycleResult) -> None:
        raise RuntimeError("status write exploded")

    cluster.release_creates.set()
    loop = Loop(threading.Event())
    loop.start(reconciler(cluster, loop), 60.0, on_cycle)
    with pytest.raises(RuntimeError, match="status write exploded"):
        loop.wait()
    assert loop.stop.is_set()
