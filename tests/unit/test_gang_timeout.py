"""Queue ``startTimeout``: a distributed run whose pods are not all running within it is
stopped (its workload deleted) and re-queued once, reason ``GangTimeout``; the second
time it stays Stopped. A rule of ``decide``, driven by ``now`` and the memory, recorded in
the status branch (so a restart keeps the count). Against the fake Kube; the dev-cluster
version is tests/cluster/test_distributed_live.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

from builders import NOW, World
from fake_kube import FakeCluster, FakeKube

from reconciler.core.cycle import memory_from_status
from reconciler.core.observe import ObservedReason
from reconciler.core.status import read_status, render_status
from reconciler.core.types import ClusterSpec, CompiledRepo, Distributed, Phase, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler

GPU = "nvidia.com/gpu"


class Clock:
    def __init__(self) -> None:
        self.at = NOW

    def now(self) -> datetime:
        return self.at


class Harness:
    def __init__(self, repo: CompiledRepo, cluster: FakeCluster | None = None) -> None:
        self.repo = repo
        self.clock = Clock()
        self.cluster = cluster or FakeCluster("local")
        self.reconciler = Reconciler(
            lambda: RepoSnapshot(files={}, version=self.repo.version),
            self._connect,  # type: ignore[arg-type]
            self.clock,
            is_leader=lambda: True,
            watch=False,
        )

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.cluster)

    def cycle(self, after: float = 0) -> CycleResult:
        self.clock.at += timedelta(seconds=after)
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: self.repo):
            return self.reconciler.run_once()

    def gang(self, name: str, placed: int, running: int = 0) -> None:
        """The scheduler placed ``placed`` of the 4 pods of the Indexed Job."""
        job = self.cluster.jobs[("p", name)]
        # the Indexed Job body (h14a's rendering sets the same fields)
        job["spec"].update(completionMode="Indexed", completions=4, parallelism=4)
        self.cluster.set_gang("p", name, replicas=4, placed=placed, running=running)

    def bound_gpus(self) -> int:
        return sum(
            int((c.get("resources") or {}).get("limits", {}).get(GPU, 0))
            for p in self.cluster.pods.values()
            if p["spec"].get("nodeName")
            for c in p["spec"].get("containers") or []
        )


def world(start_timeout: int | None = 60) -> World:
    w = World().queue("gpu", quota={GPU: 16})
    w.set_queue("gpu", start_timeout=start_timeout)
    b = w.op("p/train", gpu=8)
    b._fields.update(
        replicas=4,
        distributed=Distributed(),
        pod_requests={GPU: Decimal(2)},
        spec={
            "kind": "job",
            "name": "train",
            "run": {
                "kind": "job",
                "container": {"image": "img", "resources": {"limits": {GPU: "2"}}},
            },
        },
    )
    return w


def test_a_gang_not_all_running_within_start_timeout_is_stopped_and_requeued_once() -> None:
    h = Harness(world().repo())
    assert h.cycle().dispatched == ("p/train",)
    h.gang("p-train-g1", placed=3, running=3)
    waiting = h.cycle(after=30)
    state = waiting.states["p/train"]
    assert (state.phase, state.reason) == (Phase.DISPATCHED, ObservedReason.WAITING_FOR_CAPACITY)
    assert state.message.startswith("3 of 4 pods placed; ")
    assert h.bound_gpus() == 6

    timed_out = h.cycle(after=31)  # 61 s after the dispatch
    assert timed_out.stopped == ("p/train",)
    stopped = timed_out.states["p/train"]
    assert (stopped.phase, stopped.reason) == (Phase.STOPPED, ObservedReason.GANG_TIMEOUT)
    assert stopped.message == (
        "3 of 4 pods placed, 3 running after startTimeout 60s: stopped and re-queued (once), "
        "so it holds no GPUs while it waits"
    )
    assert ("p", "p-train-g1") not in h.cluster.jobs
    assert h.bound_gpus() == 0  # the Job and its pods are gone: no GPU stays held
    assert h.reconciler.memory.gang_timeouts["p/train"].count == 1

    requeued = h.cycle(after=1)
    assert requeued.dispatched == ("p/train",)  # once
    h.gang("p-train-g1", placed=2, running=2)
    assert h.cycle(after=59).stopped == ()  # a new attempt: its own 60 s
    final = h.cycle(after=2)
    assert final.stopped == ("p/train",)
    assert final.states["p/train"].message.endswith("again after it was re-queued once: stopped")
    assert h.reconciler.memory.gang_timeouts["p/train"].count == 2
    for _ in range(3):
        later = h.cycle(after=10)
        assert later.dispatched == ()
        assert later.states["p/train"].phase is Phase.STOPPED
        assert later.states["p/train"].reason is ObservedReason.GANG_TIMEOUT
    assert h.bound_gpus() == 0 and not h.cluster.jobs


def test_a_gang_that_runs_in_time_is_left_alone_and_no_timeout_without_the_field() -> None:
    h = Harness(world().repo())
    h.cycle()
    h.gang("p-train-g1", placed=4, running=4)
    result = h.cycle(after=600)
    assert result.stopped == () and result.states["p/train"].phase is Phase.RUNNING
    plain = Harness(world(start_timeout=None).repo())
    plain.cycle()
    plain.gang("p-train-g1", placed=1)
    assert plain.cycle(after=86400).stopped == ()
    assert plain.cycle().states["p/train"].reason is ObservedReason.WAITING_FOR_CAPACITY


def test_the_count_survives_a_restart_through_the_status_branch() -> None:
    h = Harness(world().repo())
    h.cycle()
    h.gang("p-train-g1", placed=3, running=3)
    stopped = h.cycle(after=61)
    assert stopped.stopped == ("p/train",)
    assert stopped.decision is not None
    files = render_status(
        h.repo,
        stopped.plan,  # type: ignore[arg-type]
        stopped.states,
        gang_timeouts=stopped.decision.memory.gang_timeouts,
    )
    assert b"gangTimeouts:" in files["status/p/train.yaml"]
    # a new process, from the status branch only: it re-queues (once) ...
    restarted = Harness(h.repo, h.cluster)
    restarted.clock.at = h.clock.at
    restarted.reconciler.seed(memory_from_status(read_status(files)))
    again = restarted.cycle(after=1)
    assert again.dispatched == ("p/train",)
    assert again.decision is not None
    # ... and the re-queued (Queued, then Dispatched) record still carries the count
    queued_files = render_status(
        h.repo,
        again.plan,  # type: ignore[arg-type]
        again.states,
        gang_timeouts=again.decision.memory.gang_timeouts,
    )
    third = Harness(h.repo, h.cluster)
    third.clock.at = restarted.clock.at
    third.reconciler.seed(memory_from_status(read_status(queued_files)))
    third.gang("p-train-g1", placed=3, running=3)
    final = third.cycle(after=61)
    assert final.stopped == ("p/train",)
    assert third.reconciler.memory.gang_timeouts["p/train"].count == 2
    assert third.cycle(after=1).dispatched == ()
