"""Cycles driven by watch events, on the fake Kube (tests/support/fake_kube.py, which serves
watches) and a virtual clock: a Job that finishes starts a cycle at once, however long the
interval; a burst of events is served by one cycle; the status is written at most once per
its interval. The same on the real control plane: tests/cluster/test_event_dispatch.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from support.builders import World
from support.clocks import SteppedClock, VirtualClock
from support.fake_kube import FakeCluster, FakeKube
from support.helpers import wait_until
from support.snapshots import repo
from support.status_branch import MemoryStatusBranch

from reconciler.core.compile import compile_repo
from reconciler.core.decision.trigger import Pace, Trigger
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.types import ClusterSpec, CompiledRepo, Phase, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.loop import IDLE_EVERY, Loop, Wakeup
from reconciler.runtime.service import PacedSource, Runtime
from reconciler.runtime.status import StatusPublisher

PATIENCE = 10.0  # seconds a test waits for what takes milliseconds
INTERVAL = 60.0  # the fallback: no cycle in these tests comes from it


class EventLoop:
    """The real ``Loop`` and ``Reconciler`` (watch caches on) over one fake cluster, the
    wake-up on a virtual clock; each cycle's result and virtual start time recorded."""

    def __init__(self, repo: CompiledRepo, on_cycle: Any = None) -> None:
        self.repo = repo
        self.cluster = FakeCluster("local")
        self.clock = VirtualClock()
        self.wake = Wakeup(self.clock)
        self.reconciler = Reconciler(
            lambda: RepoSnapshot(files={}, version=self.repo.version),
            self._connect,  # type: ignore[arg-type]
            SteppedClock(),
            on_trigger=self.wake.request,
        )
        self.results: list[tuple[float, CycleResult]] = []
        self.cycled = threading.Condition()
        self.loop = Loop(threading.Event(), self.wake)
        self._extra = on_cycle

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.cluster)

    def _on_cycle(self, result: CycleResult) -> None:
        if self._extra is not None:
            self._extra(result)
        with self.cycled:
            self.results.append((self.clock.t, result))
            self.cycled.notify_all()

    def start(self) -> None:
        self.loop.start(self.reconciler, INTERVAL, self._on_cycle, min_gap=0.2)

    def wait_cycles(self, count: int) -> CycleResult:
        with self.cycled:
            assert self.cycled.wait_for(lambda: len(self.results) >= count, PATIENCE)
            return self.results[count - 1][1]

    def waiting_until(self, when: float) -> None:
        """Until the loop waits for virtual time ``when`` (it has done all it can before)."""
        wait_until(lambda: self.wake.waiting_until == when, timeout=PATIENCE, what=f"t={when}")

    def advance(self, to: float) -> None:
        self.clock.t = to
        self.wake.poke()

    def finish(self, op_id: str, phase: str = "Succeeded") -> None:
        project, name = op_id.split("/")
        self.cluster.set_phase(project, f"{project}-{name}-g1", phase)

    def triggers(self, trigger: Trigger) -> int:
        return self.wake.counts[trigger]

    def stop(self) -> None:
        self.loop.request_stop()
        self.loop.wait()
        self.loop.finish()
        self.cluster.close()
        self.reconciler.close()


@pytest.fixture
def world() -> Iterator[EventLoop]:
    repo = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    for op in ("p/a", "p/b", "p/c", "p/d", "p/e", "p/f"):
        repo.op(op, gpu=1)
    compiled = repo.repo()
    harness = EventLoop(compiled)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: compiled):
        yield harness
        harness.stop()


def test_a_job_that_finishes_starts_a_cycle_at_once(world: EventLoop) -> None:
    world.start()
    first = world.wait_cycles(1)
    assert first.dispatched == ("p/a", "p/b")
    world.waiting_until(INTERVAL)  # nothing to do: the next cycle is the fallback's
    world.advance(5.0)  # long after the first cycle: no gap to wait for
    world.finish("p/a")
    second = world.wait_cycles(2)
    # served at virtual t=5: the clock did not move, the interval (t=60) was not waited for
    assert world.results[1][0] == 5.0
    assert second.dispatched == ("p/c",)
    assert world.triggers(Trigger.FINISHED) == 1
    # the cycle's own writes (the phase annotation on p/a, the Job of p/c) ask for none
    world.waiting_until(5.0 + INTERVAL)
    assert len(world.results) == 2 and sum(world.wake.counts.values()) == 1


def test_a_burst_of_events_is_served_by_one_cycle_after_the_gap(world: EventLoop) -> None:
    world.start()
    world.wait_cycles(1)
    world.advance(5.0)
    world.finish("p/a")
    world.wait_cycles(2)  # at t=5, dispatches p/c
    world.advance(5.05)  # 50 ms later, two more end
    world.finish("p/b")
    world.finish("p/c", "Failed")
    wait_until(
        lambda: world.triggers(Trigger.FINISHED) == 2 and world.triggers(Trigger.FAILED) == 1,
        timeout=PATIENCE,
        what="both events",
    )
    # debounced: the loop waits for t=5.2 (the last cycle started at 5.0), not for each event
    world.waiting_until(5.2)
    assert len(world.results) == 2
    world.advance(5.2)
    third = world.wait_cycles(3)
    assert world.results[2][0] == 5.2
    assert third.dispatched == ("p/d", "p/e")  # both freed slots, one cycle
    world.waiting_until(5.2 + INTERVAL)
    assert len(world.results) == 3


def test_deleting_a_running_job_starts_a_cycle(world: EventLoop) -> None:
    world.start()
    world.wait_cycles(1)
    world.advance(5.0)
    world.cluster.delete("p", "p-a-g1")  # by hand: the reconciler marks it Stopped
    second = world.wait_cycles(2)
    assert world.triggers(Trigger.DELETED) == 1
    assert second.dispatched == ("p/c",)


def test_a_pod_that_succeeds_does_not_start_a_cycle(world: EventLoop) -> None:
    world.start()
    world.wait_cycles(1)
    world.finish("p/a", "Running")
    world.cluster.pod_succeeded("p", "p-a-g1")
    pods = world.reconciler._informers["local"][1]  # the Pod watch cache
    wait_until(
        lambda: pods.resource_version == str(world.cluster.version),
        timeout=PATIENCE,
        what="the pod events",
    )
    world.waiting_until(INTERVAL)
    assert len(world.results) == 1 and sum(world.wake.counts.values()) == 0


def test_what_the_watches_show_between_cycles_is_observed_before_the_next_one(
    world: EventLoop,
) -> None:
    """While the loop waits, it hands the caches' changes to the observer (no cycle runs):
    the next cycle, on the way to its first create, reads only what changed since."""
    world.start()
    world.wait_cycles(1)
    world.finish("p/a", "Running")
    view = world.reconciler._observer._clusters["local"]

    def folded() -> dict[str, WorkloadState]:
        return {s.operation: s for s in view.out}

    wait_until(
        lambda: getattr(folded().get("p/a"), "phase", None) is Phase.RUNNING,
        timeout=PATIENCE,
        what="the pod's events folded",
    )
    assert len(world.results) == 1
    running = folded()["p/a"]
    world.advance(INTERVAL)
    second = world.wait_cycles(2)
    assert second.states["p/a"] is running  # the cycle had nothing left to observe


def test_the_wait_idles_while_nothing_wakes_it_and_serves_a_request_made_meanwhile() -> None:
    wake = Wakeup(VirtualClock(5.0))
    idled: list[float] = []

    def idle() -> None:
        idled.append(time.monotonic())
        if len(idled) == 3:
            wake.request(Trigger.FINISHED)  # comes while the loop folds

    started = time.monotonic()
    wake.wait(Pace(INTERVAL, 0.2), 0.0, idle)
    assert len(idled) == 3  # returned after the third: the request was kept
    assert idled[0] - started >= IDLE_EVERY * 0.9  # each after a quiet spell
    assert wake.waiting_until is None
    wake.interrupt()
    wake.wait(Pace(INTERVAL, 0.2), 0.0, idle)  # at once, no idle
    assert len(idled) == 3


def test_a_quiet_cluster_is_not_read_between_cycles(world: EventLoop) -> None:
    world.start()
    world.wait_cycles(1)
    caches = world.reconciler._informers["local"]
    wait_until(  # the first cycle's creates seen, and folded
        lambda: (
            caches[0].resource_version == str(world.cluster.version)
            and not any(c.changed for c in caches)
        ),
        timeout=PATIENCE,
        what="the creates folded",
    )
    reads: list[str] = []
    observe = world.reconciler._observe_caches

    def counted(name: str, caches: Any) -> Any:
        reads.append(name)
        return observe(name, caches)

    world.reconciler._observe_caches = counted  # type: ignore[method-assign]
    time.sleep(5 * IDLE_EVERY)
    assert reads == [] and len(world.results) == 1


def test_a_stop_during_a_fold_waits_for_it_and_the_loop_ends() -> None:
    """A fold cannot be cut short: ``finish`` waits for one in progress (as long as for a
    hand-off), so a stop that comes during it still finds the loop ended."""
    compiled = World().queue("team-a", quota={"nvidia.com/gpu": 2}).repo()
    world = EventLoop(compiled)
    folding = threading.Event()
    fold = world.reconciler.fold_watch_changes

    def long_fold() -> None:
        folding.set()
        fold()
        time.sleep(0.5)  # a big round's fold, beyond LOOP_END

    world.reconciler.fold_watch_changes = long_fold  # type: ignore[method-assign]
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: compiled):
        try:
            world.start()
            world.wait_cycles(1)
            assert folding.wait(PATIENCE)
            world.loop.request_stop()
            world.loop.wait()
            assert world.loop.finish(timeout=PATIENCE)
        finally:
            world.cluster.close()
            world.reconciler.close()


def _writing(
    ops: tuple[str, ...], status_interval: float
) -> tuple[CompiledRepo, EventLoop, MemoryStatusBranch, StatusPublisher, Runtime]:
    """The event loop over ``ops`` (one GPU each, a queue of 2), its results handed to a
    runtime that writes the status at most every ``status_interval`` virtual seconds."""
    repo = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    for op in ops:
        repo.op(op, gpu=1)
    compiled = repo.repo()
    branch = MemoryStatusBranch()
    holder: dict[str, Runtime] = {}
    world = EventLoop(compiled, on_cycle=lambda r: holder["runtime"].on_cycle(r))
    publisher = StatusPublisher(branch, min_interval=status_interval, clock=world.clock)  # type: ignore[arg-type]
    runtime = holder["runtime"] = Runtime(world.reconciler, publisher, wakeup=world.wake)
    return compiled, world, branch, publisher, runtime


def test_status_is_written_at_most_once_per_status_interval() -> None:
    ops = ("p/a", "p/b", "p/c", "p/d", "p/e", "p/f")
    compiled, world, branch, publisher, _ = _writing(ops, 3.0)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: compiled):
        try:
            world.start()
            world.wait_cycles(1)
            assert branch.commits == 1  # the first status at once
            world.advance(1.0)
            world.finish("p/a")
            world.wait_cycles(2)  # dispatched p/c at t=1: its status waits
            assert branch.commits == 1 and publisher.due == 3.0
            world.waiting_until(3.0)  # the loop comes back when the write is due
            world.advance(3.0)
            world.wait_cycles(3)
            assert branch.commits == 2
            assert b"p/c" in b"".join(branch.files.values())
            world.waiting_until(3.0 + INTERVAL)  # written: nothing more is due
            assert len(world.results) == 3
        finally:
            world.stop()


def test_the_config_is_read_at_most_once_per_interval() -> None:
    """A cycle started by an event plans with the config in hand; a fetch per cycle would
    load the Git server five times a second."""
    clock = VirtualClock()
    reads: list[str] = []
    failing = {"now": False}

    def fetch() -> RepoSnapshot:
        reads.append(f"t={clock.t}")
        if failing["now"]:
            raise OSError("remote hung up")
        return RepoSnapshot(files={}, version=f"v{len(reads)}")

    source = PacedSource(fetch, 10.0, clock)
    assert source().version == "v1"
    clock.t = 0.2
    assert source().version == "v1" and len(reads) == 1  # an event's cycle: no fetch
    clock.t = 10.0
    assert source().version == "v2"  # the interval has passed
    clock.t = 10.5
    source.expire()  # files saved (--watch)
    assert source().version == "v3"
    failing["now"] = True
    clock.t = 20.5
    with pytest.raises(OSError, match="hung up"):
        source()
    clock.t = 21.0
    with pytest.raises(OSError, match="hung up"):  # reported again, not retried
        source()
    assert len(reads) == 4
    failing["now"] = False
    clock.t = 30.5
    assert source().version == "v5"


def test_a_job_that_ended_after_the_last_cycle_is_on_the_branch_at_shutdown() -> None:
    """SIGTERM before the cycle a finished Job asks for: the shutdown decides once more
    over the watch caches (nothing carried out) and writes that, so the branch has the
    Job's phase."""
    from reconciler.core.reporting.status import read_status

    compiled, world, branch, _, runtime = _writing(("p/a", "p/b", "p/c"), 3600.0)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: compiled):
        try:
            world.start()
            world.wait_cycles(1)
            world.waiting_until(INTERVAL)
            world.loop.request_stop()  # SIGTERM, and the loop is done
            world.loop.wait()
            assert world.loop.finish()
            world.finish("p/a")  # the Job ends before any cycle sees it
            assert len(world.results) == 1
            final = wait_final(world.reconciler)
            assert runtime.close(30, final)
        finally:
            world.cluster.close()
            world.reconciler.close()
    view = read_status(branch.files)
    assert view.operations["p/a"].phase == "Succeeded"
    assert view.operations["p/c"].phase == "Queued"  # nothing carried out: not dispatched
    assert runtime.unwritten == ""


def wait_final(reconciler: Reconciler) -> CycleResult:
    """``run_final`` once the watch has shown the end of p/a (it reads only the caches)."""
    got: list[CycleResult] = []

    def ended() -> bool:
        final = reconciler.run_final()
        if final is not None and final.states["p/a"].phase.finished:
            got.append(final)
            return True
        return False

    wait_until(ended, timeout=PATIENCE, what="the watch to show p/a ended")
    return got[0]


def test_a_cycle_comes_at_a_schedules_next_fire_time_not_an_interval_later() -> None:
    """With a 60 s interval, a tick at 12:01:00 reached by the cycle of 12:01:30 would be
    skipped by a 10 s ``startingDeadline``: the loop is asked for a cycle at the tick."""
    files = {
        "reconciler.yaml": "kind: Org\npolicy:\n  allowedSchedulerNames: [default-scheduler]\n",
        "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
        "queues/q.yaml": "kind: Queue\ncluster: local\n",
        "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
        "projects/p/operations/tick.yaml": "kind: Operation\nrun:\n  kind: batch\n"
        "  container:\n    image: busybox\n    command: [echo]\nschedule:\n  kind: interval\n"
        "  frequency: 1m\n  startingDeadline: 10s\n",
    }
    compiled = compile_repo(repo(files))
    assert compiled.errors == ()
    clock = VirtualClock(100.0)
    wake = Wakeup(clock)
    runtime = Runtime(None, None, wakeup=wake)  # type: ignore[arg-type]
    at = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    clock.t = 102.0  # the cycle took 2 s
    runtime.on_cycle(CycleResult(at, None, compiled, None, {}, duration=2.0))
    waiter = threading.Thread(target=wake.wait, args=(Pace(INTERVAL, 0.2), 100.0))
    waiter.start()
    try:
        wait_until(lambda: wake.waiting_until == 130.0, timeout=PATIENCE, what="t=130")
    finally:
        wake.interrupt()
        waiter.join(PATIENCE)


def test_the_loop_says_a_cycle_is_running_until_its_result_is_handled() -> None:
    """From a cycle's start to the end of ``on_cycle`` (its status and metrics), the
    wake-up says a cycle runs, and ``wait_idle`` (the estimate worker's) waits for it."""
    seen: list[bool] = []
    idle = threading.Event()

    def on_cycle(_: CycleResult) -> None:
        seen.append(harness.wake.running)
        waiter = threading.Thread(target=lambda: (harness.wake.wait_idle(), idle.set()))
        waiter.start()
        seen.append(idle.wait(0.2))  # not a timing assertion: it must still be waiting

    world = World().queue("team-a")
    world.op("p/a")
    compiled = world.repo()
    harness = EventLoop(compiled, on_cycle)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: compiled):
        harness.start()
        harness.wait_cycles(1)
        assert idle.wait(PATIENCE), "wait_idle returned once the cycle ended"
        assert seen == [True, False]
        assert not harness.wake.running
        harness.stop()
