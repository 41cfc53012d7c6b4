"""The phase annotations are written off the cycle's path (``Reconciler._annotate``): a
cycle does not wait for them, a phase being written is not sent twice, the writes to one
Job land in order (an older phase never after a newer one), and a failed write is sent
again by the next cycle. Only the phases ``phase_annotation_due`` names are written: a run
created, Running, then Succeeded costs one write, at its end."""

from __future__ import annotations

import threading
from typing import Any
from unittest import mock

from support.builders import World
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeKube

from reconciler.adapters.kube import KubeError
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler

PATIENCE = 10.0


class SlowKube(FakeKube):
    """Phase writes wait for ``release``; the next ``fail`` of them fail."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self.release = threading.Event()
        self.writing = threading.Event()
        self.fail = 0
        self.written: list[str] = []  # the phases, in the order they landed

    def apply_metadata(self, kind: str, namespace: str, name: str, **kw: Any) -> None:
        self.writing.set()
        assert self.release.wait(PATIENCE)
        if self.fail:
            self.fail -= 1
            raise KubeError("apply: connection reset")
        super().apply_metadata(kind, namespace, name, **kw)
        self.written.append(kw["annotations"]["reconciler.dev/phase"])


def harness() -> tuple[FakeCluster, SlowKube, Reconciler, Any]:
    world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    world.op("p/a", gpu=1)
    repo = world.repo()
    cluster = FakeCluster("local")
    kube = SlowKube(cluster)

    def connect(spec: ClusterSpec) -> Any:
        return kube

    rec = Reconciler(
        lambda: RepoSnapshot(files={}, version=repo.version),
        connect,
        SteppedClock(),
        watch=False,
    )

    def cycle() -> CycleResult:
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
            return rec.run_once()

    return cluster, kube, rec, cycle


def test_a_cycle_does_not_wait_for_the_phase_writes_and_they_land_in_order() -> None:
    cluster, kube, rec, cycle = harness()
    try:
        cycle()  # dispatched: the create writes no phase
        cluster.set_phase("p", "p-a-g1", "Unschedulable")
        cycle()  # asks for Dispatched (WaitingForCapacity): the write hangs
        assert kube.writing.wait(PATIENCE)
        cycle()  # the same phase again (not shown yet): not sent twice
        cluster.set_phase("p", "p-a-g1", "Succeeded")
        result = cycle()  # asks for Succeeded while Dispatched is being written
        assert result.states["p/a"].phase.value == "Succeeded"
        assert kube.written == []  # nothing landed yet: no cycle waited
        kube.release.set()
        assert rec.wait_writes(PATIENCE)
        assert kube.written == ["Dispatched", "Succeeded"]  # in order, each once
        annotations = cluster.jobs[("p", "p-a-g1")]["metadata"]["annotations"]
        assert annotations["reconciler.dev/phase"] == "Succeeded"
    finally:
        kube.release.set()
        rec.close()


def test_a_failed_write_is_sent_again_by_the_next_cycle() -> None:
    cluster, kube, rec, cycle = harness()
    try:
        cycle()
        cluster.set_phase("p", "p-a-g1", "Succeeded")
        kube.fail = 1
        kube.release.set()
        cycle()
        assert rec.wait_writes(PATIENCE)
        assert kube.written == []  # it failed
        cycle()  # still listed (the Job has no phase written): sent again
        assert rec.wait_writes(PATIENCE)
        assert kube.written == ["Succeeded"]
        cycle()  # shown now: nothing more
        assert rec.wait_writes(PATIENCE)
        assert kube.written == ["Succeeded"]
    finally:
        rec.close()


def test_a_run_that_never_waits_for_room_is_written_once_at_its_end() -> None:
    cluster, kube, rec, cycle = harness()
    kube.release.set()
    try:
        cycle()  # created: the create carries no phase
        annotations = cluster.jobs[("p", "p-a-g1")]["metadata"]["annotations"]
        assert "reconciler.dev/phase" not in annotations
        cluster.set_phase("p", "p-a-g1", "Running")
        cycle()  # the Job's own status says it runs: nothing written
        assert rec.wait_writes(PATIENCE)
        assert kube.written == []
        cluster.set_phase("p", "p-a-g1", "Failed")
        cycle()
        assert rec.wait_writes(PATIENCE)
        assert kube.written == ["Failed"]
        annotations = cluster.jobs[("p", "p-a-g1")]["metadata"]["annotations"]
        assert annotations["reconciler.dev/phase-reason"] == "BackoffLimitExceeded"
    finally:
        rec.close()


def test_a_phase_written_earlier_is_never_left_stale() -> None:
    """Waiting for room is written; once the pod runs, Running replaces it (the Job would
    say Dispatched while it runs otherwise), and so is the Dispatched an older version wrote
    at create."""
    cluster, kube, rec, cycle = harness()
    kube.release.set()
    try:
        cycle()
        cluster.set_phase("p", "p-a-g1", "Unschedulable")
        cycle()
        assert rec.wait_writes(PATIENCE)
        annotations = cluster.jobs[("p", "p-a-g1")]["metadata"]["annotations"]
        assert annotations["reconciler.dev/phase-reason"] == "WaitingForCapacity"
        cluster.set_phase("p", "p-a-g1", "Running")
        cycle()
        assert rec.wait_writes(PATIENCE)
        assert kube.written == ["Dispatched", "Running"]
        assert annotations["reconciler.dev/phase-reason"] == ""
    finally:
        rec.close()


def test_the_dispatched_phase_an_older_version_wrote_at_create_is_brought_up_to_date() -> None:
    cluster, kube, rec, cycle = harness()
    kube.release.set()
    try:
        cycle()
        annotations = cluster.jobs[("p", "p-a-g1")]["metadata"]["annotations"]
        annotations["reconciler.dev/phase"] = "Dispatched"  # as the create once wrote it
        cluster.set_phase("p", "p-a-g1", "Running")
        cycle()
        assert rec.wait_writes(PATIENCE)
        assert kube.written == ["Running"]
    finally:
        rec.close()
