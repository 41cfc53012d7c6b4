"""Queue ``startTimeout``: a distributed run whose pods are not all running within it is
stopped (its workload deleted) and re-queued once, reason ``GangTimeout``; the second
time it stays Stopped. A rule of ``decide``, driven by ``now`` and the memory, recorded in
the status branch (so a restart keeps the count). Against the fake Kube; the dev-cluster
version is tests/cluster/test_distributed_live.py."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from support.builders import NOW, World
from support.fake_kube import FakeCycles

from reconciler.core.observation.observe import ObservedReason
from reconciler.core.reporting.status import operation_path
from reconciler.core.types import Distributed, Phase

GPU = "nvidia.com/gpu"


class Harness(FakeCycles):
    def gang(self, name: str, placed: int, running: int = 0) -> None:
        """The scheduler placed ``placed`` of the 4 pods of the Indexed Job."""
        job = self.cluster.jobs[("p", name)]
        # the Indexed Job body (h14a's rendering sets the same fields)
        job["spec"].update(completionMode="Indexed", completions=4, parallelism=4)
        self.cluster.set_gang("p", name, replicas=4, placed=placed, running=running)


def world(start_timeout: int | None = 60) -> World:
    w = World().queue("gpu", quota={GPU: 16})
    w.set_queue("gpu", start_timeout=start_timeout)
    w.op("p/train").requests(gpu=2).replicas(4, Distributed()).container(gpu=2)
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
    files = h.status_of(stopped)
    assert b"gangTimeouts:" in files[operation_path("p/train")]
    # a new process, from the status branch only: it re-queues (once) ...
    restarted = h.restart(files)
    again = restarted.cycle(after=1)
    assert again.dispatched == ("p/train",)
    assert again.decision is not None
    # ... and the re-queued (Queued, then Dispatched) record still carries the count
    third = restarted.restart(restarted.status_of(again))
    third.gang("p-train-g1", placed=3, running=3)
    final = third.cycle(after=61)
    assert final.stopped == ("p/train",)
    assert third.reconciler.memory.gang_timeouts["p/train"].count == 2
    assert third.cycle(after=1).dispatched == ()


def test_a_gang_stopped_by_its_start_timeout_is_charged_for_what_it_held() -> None:
    """docs/budgets.md: each attempt of a gang stopped by ``GangTimeout`` is one run in the
    ledger, charged for what it held (its Job's start to the cycle that stops it), entered
    once: the re-queued attempt too, though it runs again under the same workload name."""
    w = world()
    w.with_org(prices={GPU: Decimal("3.6")}, currency="USD")
    h = Harness(w.repo())
    h.cycle()
    h.gang("p-train-g1", placed=3, running=3)
    h.cycle(after=61)  # stopped, re-queued: 8 GPUs held for 61 s
    (first,) = h.reconciler.memory.ledger
    assert (first.phase, first.workload) == ("Stopped", "p-train-g1@2026-01-01T12:00:00Z")
    assert (first.start, first.end) == (NOW, NOW + timedelta(seconds=61))
    assert first.requests == {GPU: Decimal(8)}
    assert first.cost == Decimal("0.488")  # 8 GPUs x 61/3600 h x 3.6
    assert h.cycle(after=1).dispatched == ("p/train",)
    h.gang("p-train-g1", placed=2, running=2)
    h.cycle(after=60)  # stopped again: 60 s held
    for _ in range(3):  # later cycles see it Stopped: nothing is entered twice
        h.cycle(after=10)
    first_again, second = sorted(h.reconciler.memory.ledger, key=lambda e: e.start)
    assert first_again == first
    assert second.start == NOW + timedelta(seconds=62)
    assert second.end == NOW + timedelta(seconds=122)
    assert second.cost == Decimal("0.48")  # 8 GPUs x 60/3600 h x 3.6
    # the status branch holds both; a new process from it enters neither again
    restarted = h.restart(h.status_of(h.cycle()))
    restarted.cycle(after=5)
    assert sorted(restarted.reconciler.memory.ledger, key=lambda e: e.start) == [first, second]


def test_the_views_from_the_status_branch_see_a_gang_past_its_start_timeout() -> None:
    """``plan`` without ``--live`` decides from the status branch: it records the gang's
    placed pods and its dispatch time, so it shows the stop the next cycle makes."""
    from reconciler.core.decision.cycle import decide, listing_from_memory, memory_from_status
    from reconciler.core.reporting.status import read_status

    h = Harness(world().repo())
    h.cycle()
    h.gang("p-train-g1", placed=3, running=3)
    waiting = h.cycle(after=30)
    files = h.status_of(waiting)
    assert b"placement:" in files[operation_path("p/train")]
    memory = memory_from_status(read_status(files))
    recorded = memory.seen["p/train"]
    assert recorded.gang is not None and (recorded.gang.placed, recorded.gang.replicas) == (3, 4)
    repo = h.repo
    at = h.clock.at + timedelta(seconds=31)  # 61 s after the dispatch
    decision = decide(repo, listing_from_memory(repo, memory), memory, at)
    (delete,) = decision.actions.deletes
    assert delete.operation == "p/train" and delete.workload.reason is ObservedReason.GANG_TIMEOUT
    # and what the next cycle does, on the cluster, is the same stop
    assert h.cycle(after=31).stopped == ("p/train",)
