"""A status commit's cycle, replayed from the commit alone, decides what it recorded.

Random worlds (``test_one_decision``'s: queues, cohorts, fleets, budgets, gangs,
superseded and removed runs, unreachable clusters, a status branch) go through leader
cycles over fake clusters while time passes, Jobs run and end, clusters come and go and
creates are refused.
Every cycle that makes a status commit is replayed from that commit's files and the config
it names: each operation dispatched, or pending with the same reason, position and
blocker, and each queue's figures, as the commit says.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import NOW, World
from support.fake_kube import FakeCycles, SteppedClock
from support.scenarios import Scenario, scenarios

from reconciler.core.decision.cycle import ClusterListing, Memory, decide
from reconciler.core.decision.render import workload_name
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.reporting.replay import (
    QueueDay,
    Replayed,
    ReplayError,
    differences,
    outcome_of,
    queue_days,
    replay,
)
from reconciler.core.reporting.status import (
    DECISION_FILE,
    RUNS_PER_FILE,
    DecisionRecord,
    InputRun,
    StatusView,
    decision_path,
    read_status,
    status_changes,
)
from reconciler.core.types import CompiledRepo, Phase, RepoSnapshot
from reconciler.runtime.cycle import Reconciler
from reconciler.runtime.status import render_cycle_status


def _commit(branch: dict[str, bytes], files: dict[str, bytes]) -> bool:
    """Write ``files`` onto ``branch`` as the status writer does; whether it committed."""
    changes = status_changes(branch, files)
    for path, data in changes.items():
        if data is None:
            branch.pop(path, None)
        else:
            branch[path] = data
    return bool(changes)


def _assert_replays(s: Scenario, branch: dict[str, bytes]) -> None:
    view = read_status(branch)
    assert view.decision is not None
    assert view.decision.config == s.compiled.version
    again = replay(view, s.compiled)
    assert differences(s.compiled, again, view) == []


STEPS = st.lists(
    st.tuples(
        st.sampled_from([0, 30, 600, 4000]),  # seconds before the cycle
        st.sampled_from(["none", "Running", "Succeeded", "Failed", "Deleting", "gone"]),
        st.integers(0, 7),  # which Job
        st.sampled_from([None, True, True, False]),  # a cluster comes back, or goes
        st.booleans(),  # the API server refuses the Job of one operation (DispatchFailed)
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), STEPS)
def test_replay_of_every_recorded_cycle_equals_its_record(
    s: Scenario, steps: list[tuple[int, str, int, bool | None, bool]]
) -> None:
    clock = SteppedClock(NOW)
    reconciler = Reconciler(
        lambda: RepoSnapshot(files={}, version=s.compiled.version),
        s.connect,  # type: ignore[arg-type]
        clock,
        is_leader=lambda: True,
        watch=False,
    )
    reconciler.seed(s.memory)
    branch: dict[str, bytes] = {}
    commits = 0
    try:
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: s.compiled):
            for after, fact, which, reachable, refuse in [(0, "none", 0, None, False), *steps]:
                clock.at += timedelta(seconds=after)
                fakes = [s.clusters[n] for n in sorted(s.clusters)]
                fake = fakes[which % len(fakes)]
                jobs = sorted(fake.jobs)
                if jobs and fact == "gone":
                    fake.delete(*jobs[which % len(jobs)])
                elif jobs and fact != "none":
                    fake.set_phase(*jobs[which % len(jobs)], fact)
                if reachable is not None:
                    fake.reachable = reachable
                if refuse:
                    fake.invalid |= {workload_name("p", f"o{which}", g) for g in (1, 2)}
                result = reconciler.run_once()
                assert result.plan is not None
                if _commit(branch, render_cycle_status(result, s.compiled, result.plan)):
                    commits += 1
                    _assert_replays(s, branch)
    finally:
        reconciler.close()
    assert commits >= 1  # the first cycle writes the branch


def test_a_cycle_that_changes_nothing_makes_no_commit_for_its_clock() -> None:
    world = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 1})
    world.ops("p/o{}", 3, queue="team-a", gpu=1)
    cycles = FakeCycles(world.repo("c1"))
    branch: dict[str, bytes] = {}
    assert _commit(branch, cycles.status_of(cycles.cycle()))
    _commit(branch, cycles.status_of(cycles.cycle(after=30)))  # the dispatch is seen
    first = branch[DECISION_FILE]
    assert not _commit(branch, cycles.status_of(cycles.cycle(after=60)))
    assert branch[DECISION_FILE] == first  # the record replays the commit it came with


def test_the_record_says_what_a_dispatch_and_a_wait_were() -> None:
    world = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 1})
    world.ops("p/o{}", 3, queue="team-a", gpu=1)
    compiled = world.repo("c1")
    cycles = FakeCycles(compiled)
    branch: dict[str, bytes] = {}
    _commit(branch, cycles.status_of(cycles.cycle()))
    view = read_status(branch)
    assert view.decision is not None
    assert view.decision.clock == NOW.isoformat()
    assert view.decision.dispatched == ("p/o1",)
    again = replay(view, compiled)
    assert outcome_of(again, "p/o1").summary() == "dispatched to local from team-a"
    waiting = outcome_of(again, "p/o3")
    assert waiting.pending is not None
    assert (str(waiting.pending.reason), waiting.position) == ("QuotaExceeded", 2)


def test_a_hand_edited_record_is_a_one_line_error() -> None:
    world = World().cluster("local").queue("team-a")
    world.ops("p/o{}", 1, queue="team-a", gpu=1)
    compiled = world.repo("c1")
    cycles = FakeCycles(compiled)
    branch: dict[str, bytes] = {}
    _commit(branch, cycles.status_of(cycles.cycle()))
    branch[DECISION_FILE] = branch[DECISION_FILE].replace(NOW.isoformat().encode(), b"tuesday")
    with pytest.raises(ReplayError, match=r"^status/_decision.yaml:1:1: clock 'tuesday'"):
        replay(read_status(branch), compiled)
    branch[DECISION_FILE] = b"clock: [1\n"
    view = read_status(branch)
    assert view.decision is None
    assert any(p.startswith("status/_decision.yaml:") for p in view.problems)


def test_a_record_of_many_runs_continues_in_parts_read_back_whole() -> None:
    runs = tuple(
        InputRun(
            operation=f"p/o{i}",
            generation=1,
            cluster="local",
            namespace="p",
            workload=f"p-o{i}-g1",
            phase="Running",
            requests={"nvidia.com/gpu": "1"},
        )
        for i in range(RUNS_PER_FILE * 2 + 1)
    )
    record = DecisionRecord(clock=NOW.isoformat(), config="c1", runs=runs)
    files = record.files()
    assert set(files) == {decision_path(1), decision_path(2), decision_path(3)}
    assert read_status(files).decision == record
    # a part of another cycle's record (a lost write, a hand edit) is not joined to it
    other = DecisionRecord(clock="2026-01-02T00:00:00+00:00", config="c1", runs=runs)
    mixed = {**files, decision_path(3): other.files()[decision_path(3)]}
    view = read_status(mixed)
    assert view.decision is None
    assert view.problems == (
        f"status/_decision.3.yaml:1:1: not a part of the decision record of {NOW.isoformat()} "
        "(part 3 expected)",
    )


def _replayed(
    compiled: CompiledRepo, at: datetime, running: list[str], done: tuple[str, ...] = ()
) -> Replayed:
    """A recorded cycle at ``at`` with ``running`` (of one GPU each) in team-a, and
    ``done`` succeeded."""
    states = tuple(
        WorkloadState(
            op,
            1,
            "local",
            "team-a",
            workload_name(*op.split("/"), 1),
            "",
            Phase.SUCCEEDED if op in done else Phase.RUNNING,
            queue="team-a",
            requests={"nvidia.com/gpu": Decimal(1)},
        )
        for op in (*running, *done)
    )
    listing = {"local": ClusterListing(states)}
    decision = decide(compiled, listing, Memory(), at)
    return Replayed(at.isoformat(), at, StatusView({}), compiled, decision)


def test_a_queues_days_weigh_each_cycle_by_how_long_it_stood() -> None:
    world = World().cluster("local").queue("team-a", quota={"nvidia.com/gpu": 2})
    world.ops("p/o{}", 3, queue="team-a", gpu=1)
    compiled = world.repo("c1")
    day = datetime(2026, 1, 1, tzinfo=UTC)
    cycles = [
        # 23:00: o1 dispatched, o2 too (2 of 2 held after), o3 waits
        _replayed(compiled, day + timedelta(hours=23), []),
        # 01:00: o1 and o2 run, o3 still waits
        _replayed(compiled, day + timedelta(hours=25), ["p/o1", "p/o2"]),
        # 02:30: o2 has ended, o3 is dispatched after 3h30m pending
        _replayed(compiled, day + timedelta(hours=26, minutes=30), ["p/o1"], ("p/o2",)),
    ]
    assert [str(d.operation) for d in cycles[0].decision.plan.dispatch] == ["p/o1", "p/o2"]
    days = queue_days("team-a", cycles)
    assert [d.day.isoformat() for d in days] == ["2026-01-01", "2026-01-02"]
    first, second = days
    # dispatched in the first recorded cycle: how long they had waited is not known
    assert (first.dispatched, first.mean_wait, first.max_wait) == (2, None, None)
    assert first.utilisation == {"nvidia.com/gpu": 1.0}  # 23:00-24:00 at 2 of 2
    assert (second.dispatched, second.max_wait) == (1, timedelta(hours=3, minutes=30))
    # 00:00-01:00 and 01:00-02:30 at 2 of 2, nothing after the last recorded cycle
    assert second.utilisation == {"nvidia.com/gpu": 1.0}
    # a queue without a quota has no share to show; none of its days is invented
    assert queue_days("no-such-queue", cycles) == [QueueDay(d.day, 0, None, None, {}) for d in days]
