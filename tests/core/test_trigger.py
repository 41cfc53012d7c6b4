"""When the next cycle runs (``core/decision/trigger.py``, pure): which watch events end a run, and
the pace that debounces them."""

from __future__ import annotations

import itertools
from typing import Any

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.cli.run_cmd import parse_interval
from reconciler.core.decision.trigger import Pace, Trigger, event_trigger
from reconciler.core.observation.observe import job_end_phase, observe_workloads
from reconciler.core.types import Phase


def job(*conditions: str, deleting: bool = False, annotation: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "p-a-g1",
        "namespace": "p",
        "uid": "u1",
        "annotations": {"reconciler.dev/operation-id": "p/a", "reconciler.dev/phase": annotation},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return {
        "metadata": meta,
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


RUNNING = job()
CASES = [
    # (event, before, after, trigger)
    ("ADDED", None, RUNNING, None),  # the Job we just created
    ("MODIFIED", RUNNING, job(annotation="Running"), None),  # our own annotation
    ("MODIFIED", RUNNING, job("SuccessCriteriaMet"), Trigger.FINISHED),
    ("MODIFIED", RUNNING, job("Complete"), Trigger.FINISHED),
    # Complete after SuccessCriteriaMet: the slot was freed by the first
    ("MODIFIED", job("SuccessCriteriaMet"), job("SuccessCriteriaMet", "Complete"), None),
    ("MODIFIED", job("Complete"), job("Complete", annotation="Succeeded"), None),
    ("MODIFIED", RUNNING, job("FailureTarget"), Trigger.FAILED),
    ("MODIFIED", job("FailureTarget"), job("FailureTarget", "Failed"), None),
    ("MODIFIED", RUNNING, job("Failed"), Trigger.FAILED),
    ("MODIFIED", RUNNING, job(deleting=True), Trigger.DELETED),
    ("DELETED", job(deleting=True), job(deleting=True), None),  # counted when marked
    ("DELETED", RUNNING, RUNNING, Trigger.DELETED),  # a background deletion
    ("DELETED", None, RUNNING, Trigger.DELETED),  # not in the cache: judged on the event
    ("DELETED", job("Complete"), job("Complete"), None),  # finished first: nothing freed
    ("MODIFIED", None, job("Complete"), Trigger.FINISHED),  # first seen after a relist
    ("BOOKMARK", None, {"metadata": {"resourceVersion": "9"}}, None),
]


@pytest.mark.parametrize(("event", "before", "after", "expected"), CASES)
def test_a_job_event_triggers_only_when_its_run_ends(
    event: str, before: Any, after: Any, expected: Trigger | None
) -> None:
    assert event_trigger("Job", event, before, after) is expected


def pod(phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p-a-g1-x", "namespace": "p", "labels": {"job-name": "p-a-g1"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize("event", ["ADDED", "MODIFIED", "DELETED"])
@pytest.mark.parametrize("phase", ["Pending", "Running", "Succeeded", "Failed"])
def test_pod_events_never_trigger(event: str, phase: str) -> None:
    """A pod's change alone never ends a run: the Job holds its quota until its own
    terminal condition, whose event is the trigger."""
    assert event_trigger("Pod", event, pod("Running"), pod(phase)) is None
    # and indeed the operation is not finished while the Job has no terminal condition
    (state,) = observe_workloads("local", [RUNNING], [pod(phase)])
    assert not state.phase.finished


@pytest.mark.parametrize("conditions", [(), ("Complete",), ("SuccessCriteriaMet",), ("Failed",)])
@pytest.mark.parametrize("deleting", [False, True])
def test_the_end_phase_is_the_phase_the_cycle_observes(
    conditions: tuple[str, ...], deleting: bool
) -> None:
    """One definition: what triggers a cycle is what that cycle will see as finished."""
    obj = job(*conditions, deleting=deleting)
    (state,) = observe_workloads("local", [obj], [pod("Running")])
    ended = job_end_phase(obj)
    assert ended is (state.phase if state.phase.finished else None)
    assert (ended is None) == (event_trigger("Job", "MODIFIED", RUNNING, obj) is None)


def test_the_first_request_after_a_quiet_spell_is_served_at_once() -> None:
    pace = Pace(interval=10.0, min_gap=0.2)
    assert pace.next_cycle(last_started=100.0, requested=None) == 110.0
    assert pace.next_cycle(last_started=100.0, requested=103.0) == 103.0


def test_a_request_right_after_a_cycle_waits_for_the_gap() -> None:
    pace = Pace(interval=10.0, min_gap=0.2)
    assert pace.next_cycle(last_started=100.0, requested=100.05) == pytest.approx(100.2)


def test_a_cycle_asked_for_at_a_time_comes_then_but_not_within_the_gap() -> None:
    pace = Pace(interval=10.0, min_gap=0.2)
    assert pace.next_cycle(100.0, None, due=103.0) == 103.0
    assert pace.next_cycle(100.0, 101.0, due=103.0) == 101.0
    assert pace.next_cycle(100.0, None, due=99.0) == pytest.approx(100.2)
    assert pace.next_cycle(100.0, None, due=200.0) == 110.0


def test_the_interval_stays_the_fallback() -> None:
    assert Pace(interval=0.1, min_gap=0.2).next_cycle(100.0, 100.05) == pytest.approx(100.1)


def test_negative_times_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        Pace(interval=10.0, min_gap=-1.0)


@given(
    interval=st.floats(0.5, 60.0),
    gap=st.floats(0.0, 0.5),
    events=st.lists(st.floats(0.0, 30.0), max_size=200),
    cycle_cost=st.floats(0.0, 0.3),
)
def test_cycles_driven_by_any_events_keep_the_pace(
    interval: float, gap: float, events: list[float], cycle_cost: float
) -> None:
    """Simulate the loop over a stream of event times: cycles start at least ``gap`` apart
    and at most ``interval`` apart (a cycle longer than the interval is followed at once),
    and every event is served by a cycle that starts no later than ``gap`` (or the
    interval) after it, or after the cycle running when it came."""
    pace = Pace(interval, min(gap, interval))
    pending = sorted(events)
    starts: list[float] = []
    served: list[tuple[float, float]] = []  # (event, the start of the cycle that read it)
    now, last = 0.0, 0.0
    requested: float | None = None
    while now < 40.0:
        starts.append(now)
        last, requested = now, None
        # events before the cycle starts are read by it
        while pending and pending[0] <= now:
            served.append((pending.pop(0), now))
        now += cycle_cost
        # events that came during the cycle ask for the next one
        for e in pending:
            if e > now:
                break
            requested = e if requested is None else requested
        nxt = pace.next_cycle(last, requested)
        if requested is None and pending and pending[0] < nxt:
            requested = pending[0]  # one comes while waiting
            nxt = pace.next_cycle(last, requested)
        now = max(now, nxt)
    for a, b in itertools.pairwise(starts):
        assert b - a >= min(gap, interval) - 1e-9
        assert b - a <= max(interval, cycle_cost) + 1e-9
    for event, start in served:
        assert start - event <= max(min(gap, interval), cycle_cost) + 1e-9


def test_phases_that_end_a_run_are_the_finished_phases() -> None:
    assert {Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED} == {p for p in Phase if p.finished}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("2h", 7200.0), ("200ms", 0.2), ("1s500ms", 1.5), ("0", 0.0)],
)
def test_durations_of_the_pace_flags(text: str, seconds: float) -> None:
    assert parse_interval(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10x", "-1", "ms", "nan", "5m5m"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter, match="not a duration"):
        parse_interval(text)
