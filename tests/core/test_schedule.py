"""Schedules (core/decision/schedule.py): the cron parser, fire times across clock changes, the bad
input each at its file:line:col, and the runs the cycles make: one per fire time, at most
one caught up after an outage, none twice across restarts. Against the fake Kube; the
dev-cluster version is tests/cluster/test_schedule_live.py."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.clocks import SteppedClock
from support.fake_kube import FakeCycles
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.schedule import (
    cron_day,
    last_fire,
    next_fires,
    parse_cron,
    tick_time,
    ticks_of,
    with_ticks,
)
from reconciler.core.observation.observe import ObservedReason
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.status import read_status
from reconciler.core.types import (
    CompiledRepo,
    ConcurrencyPolicy,
    Phase,
    RepoFile,
    RepoSnapshot,
    ScheduleSpec,
)
from reconciler.core.views.diff import Change, PlanDiff, diff_plans, diff_to_json, diff_to_markdown
from reconciler.core.views.queue_view import operation_detail
from reconciler.core.views.web_html import operation_main

PARIS = ZoneInfo("Europe/Paris")
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # the fake clock's start

BASE = {
    "reconciler.yaml": "kind: Org\npolicy:\n  allowedSchedulerNames: [default-scheduler]\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\nconcurrency: 1000\n",
    "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
}
RUN = """run:
  kind: batch
  container:
    image: busybox
    command: [echo, tick]
"""


def scheduled(schedule: str, name: str = "tick", extra: str = "") -> CompiledRepo:
    body = f"kind: Operation\n{RUN}{extra}schedule:\n{schedule}"
    compiled = compile_repo(repo({**BASE, f"projects/p/operations/{name}.yaml": body}))
    assert compiled.errors == ()
    return compiled


def errors_of(schedule: str) -> list[str]:
    body = f"kind: Operation\n{RUN}schedule:\n{schedule}"
    compiled = compile_repo(repo({**BASE, "projects/p/operations/tick.yaml": body}))
    return [str(e) for e in compiled.errors]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- the cron parser --------------------------------------------------------------------


def test_cron_fields_ranges_steps_lists_and_names() -> None:
    cron = parse_cron("*/15 9-17/4 1,15 jan-mar,DEC mon-fri")
    assert cron.minutes == {0, 15, 30, 45}
    assert cron.hours == {9, 13, 17}
    assert cron.days == {1, 15}
    assert cron.months == {1, 2, 3, 12}
    assert cron.weekdays == {1, 2, 3, 4, 5}
    assert parse_cron("0 0 * * 7").weekdays == {0}  # 7 is Sunday, as 0
    assert parse_cron("5/20 * * * *").minutes == {5, 25, 45}  # a/n: a to the end, step n
    assert parse_cron("@daily") == parse_cron("0 0 * * *")
    assert parse_cron("@hourly") == parse_cron("0 * * * *")


def test_vixie_day_of_month_or_day_of_week() -> None:
    both = parse_cron("0 0 13 * fri")  # both restricted: either matches
    assert both.matches_day(date(2026, 3, 13)) and both.matches_day(date(2026, 3, 6))
    assert both.matches_day(date(2026, 3, 2)) is False
    starred = parse_cron("0 0 */2 * fri")  # a field starting with * : both must match
    assert starred.matches_day(date(2026, 3, 13))  # odd day (1, 3, ... 13), a Friday
    assert starred.matches_day(date(2026, 3, 6)) is False  # a Friday, an even day
    assert starred.matches_day(date(2026, 3, 3)) is False  # odd, a Tuesday


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 2 * *", "needs five fields"),
        ("60 * * * *", "minute: 60 is out of range (0-59)"),
        ("0 2 * * funday", "day of week: 'funday' is not a number or a name"),
        ("0 5-2 * * *", "hour: '5-2' is a range that ends before it starts"),
        ("*/0 * * * *", "minute: '*/0' has a step that is not a positive number"),
    ],
)
def test_a_cron_that_does_not_parse_says_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_cron(text)


# --- clock changes ----------------------------------------------------------------------


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 2 * * *"])
@pytest.mark.parametrize("change", [date(2026, 3, 29), date(2026, 10, 25)])
def test_a_daily_tick_neither_skips_nor_doubles_over_a_clock_change(
    cron: str, change: date
) -> None:
    spec = ScheduleSpec("cron", cron=cron, timezone="Europe/Paris")
    before = datetime.combine(change - timedelta(days=2), datetime.min.time(), UTC)
    before += timedelta(hours=12)
    fires = next_fires(spec, before, 5)
    local_days = [f.astimezone(PARIS).date() for f in fires]
    assert local_days == [change + timedelta(days=d) for d in range(-1, 4)]  # one a day
    on_the_day = fires[1]
    minute = int(cron.split()[0])
    if change.month == 3:  # 02:00 -> 03:00: 02:xx never happens, it fires at the jump
        assert on_the_day == utc("2026-03-29T01:00:00")
        assert on_the_day.astimezone(PARIS).hour == 3
    else:  # 03:00 -> 02:00: 02:xx happens twice, it fires at the first
        assert on_the_day == utc(f"2026-10-25T00:{minute:02d}:00")
        assert (on_the_day.astimezone(PARIS).hour, on_the_day.astimezone(PARIS).minute) == (
            2,
            minute,
        )
    # the days around it keep their local time
    assert fires[0].astimezone(PARIS).hour == 2 and fires[2].astimezone(PARIS).hour == 2


def test_an_hourly_cron_follows_real_time_over_a_clock_change() -> None:
    hourly = parse_cron("30 * * * *")
    spring = cron_day(hourly, PARIS, date(2026, 3, 29))
    assert len(spring) == 23  # the hour the clock skips has no fire
    autumn = cron_day(hourly, PARIS, date(2026, 10, 25))
    assert len(autumn) == 25  # the hour it repeats fires twice
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(autumn))


def test_interval_ticks_count_from_start_at() -> None:
    spec = ScheduleSpec("interval", every=6 * 3600, start_at=utc("2026-01-01T01:00:00"))
    assert last_fire(spec, utc("2026-01-01T00:59:00")) is None
    assert last_fire(spec, utc("2026-01-01T13:30:00")) == utc("2026-01-01T13:00:00")
    assert next_fires(spec, utc("2026-01-01T13:00:00"), 2) == [
        utc("2026-01-01T19:00:00"),
        utc("2026-01-02T01:00:00"),
    ]
    ended = ScheduleSpec("interval", every=3600, end_at=utc("2026-01-01T03:30:00"))
    assert last_fire(ended, utc("2026-01-02T00:00:00")) == utc("2026-01-01T03:00:00")
    assert next_fires(ended, utc("2026-01-01T03:00:00"), 3) == []


def test_fire_times_stop_at_the_end_of_the_calendar_without_a_traceback() -> None:
    late = utc("9998-12-31T12:00:00")
    never = ScheduleSpec("cron", cron="0 0 30 2 *", timezone="America/New_York")
    assert next_fires(never, late, 1) == []
    daily = ScheduleSpec("cron", cron="0 0 * * *", timezone="America/New_York")
    assert next_fires(daily, late, 3) == [utc("9999-01-01T05:00:00")]
    huge = ScheduleSpec("interval", every=10**8 * 3600)
    assert last_fire(huge, START) == utc("1970-01-01T00:00:00")
    assert next_fires(huge, START, 1) == []


# --- bad input --------------------------------------------------------------------------


def test_bad_schedules_are_errors_at_their_line() -> None:
    path = "projects/p/operations/tick.yaml"
    assert errors_of("  kind: cron\n  cron: '0 25 * * *'\n") == [
        f"{path}:9:9: schedule.cron: hour: 25 is out of range (0-23)"
    ]
    assert errors_of("  kind: cron\n  cron: '0 2 * * *'\n  timezone: Mars/Olympus\n") == [
        f"{path}:10:13: schedule.timezone: 'Mars/Olympus' is not a time zone: use an IANA "
        "name such as 'UTC' or 'Europe/Berlin'"
    ]
    assert errors_of(
        "  kind: interval\n  frequency: 1h\n"
        "  startAt: 2027-03-01T00:00:00Z\n  endAt: 2026-12-01T00:00:00Z\n"
    ) == [
        f"{path}:11:10: schedule.endAt: endAt 2026-12-01T00:00:00Z is not after startAt "
        "2027-03-01T00:00:00Z"
    ]
    assert errors_of("  kind: interval\n  frequency: 90s\n") == [
        f"{path}:9:14: schedule.frequency: '90s' is not a whole number of minutes: each "
        "tick's run is named by its minute (at least '1m', or 60)"
    ]
    # neither is a timeout, and no message calls it one
    assert errors_of("  kind: interval\n  frequency: 0\n") == [
        f"{path}:9:14: schedule.frequency: must be at least 1 second"
    ]
    assert errors_of("  kind: interval\n  frequency: 1h\n  startingDeadline: 0s\n") == [
        f"{path}:10:21: schedule.startingDeadline: must be at least 1 second"
    ]
    (missing,) = errors_of("  kind: cron\n")
    assert missing.endswith("schedule: a cron schedule needs 'cron'")
    (bad_time,) = errors_of("  kind: interval\n  frequency: 1h\n  startAt: 2026-12-01\n")
    assert "schedule.startAt: '2026-12-01' is not an RFC 3339 time" in bad_time
    (too_early,) = errors_of("  kind: interval\n  frequency: 1h\n  startAt: 0001-01-01T00:00:00Z\n")
    assert too_early == (
        f"{path}:10:12: schedule.startAt: '0001-01-01T00:00:00Z' is out of range "
        "(1970-01-01T00:00:00Z to 9000-01-01T00:00:00Z)"
    )
    # an offset that takes it out of datetime's years is no time either, and no traceback
    (shifted,) = errors_of(
        "  kind: interval\n  frequency: 1h\n  endAt: 0001-01-01T00:00:00+14:00\n"
    )
    assert "schedule.endAt: '0001-01-01T00:00:00+14:00' is not an RFC 3339 time" in shifted


def test_an_operation_named_like_a_run_of_a_schedule_is_an_error_at_both_files() -> None:
    hourly = f"kind: Operation\n{RUN}schedule:\n  kind: cron\n  cron: '0 * * * *'\n"
    plain = f"kind: Operation\n{RUN}"
    dag = (
        f"kind: Operation\n{RUN}schedule:\n  kind: cron\n  cron: '0 * * * *'\n"
        "dag:\n  operations:\n    - name: a\n"
    )
    compiled = compile_repo(
        repo(
            {
                **BASE,
                "projects/p/operations/tick.yaml": hourly,
                "projects/p/operations/tick-202601011200.yaml": plain,
                "projects/p/operations/night.yaml": dag,
                "projects/p/operations/night-202601011200-a.yaml": plain,
                "projects/p/operations/tick-hourly.yaml": plain,  # no stamp: its own name
            }
        )
    )
    errors = sorted(str(e) for e in compiled.errors)
    assert len(errors) == 4
    assert errors[0].startswith(
        "projects/p/operations/night-202601011200-a.yaml:1:1: operation id "
        "'p/night-202601011200-a' is the name of a run of the scheduled dag p/night"
    )
    assert errors[3] == (
        "projects/p/operations/tick.yaml:1:1: operation id 'p/tick-202601011200' is the name "
        "of a run of the scheduled operation p/tick (projects/p/operations/tick.yaml); "
        "operation p/tick-202601011200 (projects/p/operations/tick-202601011200.yaml) would "
        "be taken for it: rename one"
    )


def test_a_scheduled_operation_is_a_template_not_an_operation() -> None:
    compiled = scheduled("  kind: interval\n  frequency: 1m\n")
    assert compiled.operations == ()
    (template,) = compiled.schedules
    assert template.id == "p/tick" and template.schedule is not None
    assert template.schedule.every == 60


# --- the runs the cycles make -----------------------------------------------------------


def ran(h: FakeCycles) -> list[str]:
    """Every create the cluster was asked for, in order."""
    return [c.split()[1] for c in h.cluster.calls if c.startswith("create ")]


def test_each_tick_makes_a_run_named_by_its_minute() -> None:
    h = FakeCycles(scheduled("  kind: interval\n  frequency: 1m\n  concurrencyPolicy: Allow\n"))
    assert h.cycle().dispatched == ("p/tick-202601011200",)
    assert h.cycle(after=30).dispatched == ()
    assert h.cycle(after=40).dispatched == ("p/tick-202601011201",)
    assert ran(h) == ["p/p-tick-202601011200-g1", "p/p-tick-202601011201-g1"]


def test_after_an_outage_one_missed_tick_is_caught_up_within_the_deadline() -> None:
    spec = "  kind: interval\n  frequency: 1m\n  concurrencyPolicy: Allow\n"
    h = FakeCycles(scheduled(spec + "  startingDeadline: 5m\n"))
    h.cycle()
    # down for ten minutes: ten ticks missed, the latest is run, once
    caught_up = h.cycle(after=10 * 60 + 20)
    assert caught_up.dispatched == ("p/tick-202601011210",)
    assert h.cycle(after=10).dispatched == ()
    assert h.restart(h.status_of(caught_up)).cycle(after=5).dispatched == ()
    # back later than the deadline of the latest tick: it is skipped
    missed = FakeCycles(
        scheduled(spec + "  startingDeadline: 30s\n"),
        clock=SteppedClock(START + timedelta(seconds=45)),
    )
    assert missed.cycle().dispatched == ()  # 12:00 is 45 s late
    assert missed.cycle(after=30).dispatched == ("p/tick-202601011201",)


def test_max_runs_start_at_and_end_at_bound_the_ticks() -> None:
    h = FakeCycles(
        scheduled(
            "  kind: interval\n  frequency: 1m\n  concurrencyPolicy: Allow\n  maxRuns: 2\n"
            "  startAt: 2026-01-01T12:01:00Z\n  endAt: 2026-01-01T12:10:00Z\n"
        )
    )
    assert h.cycle().dispatched == ()  # before startAt
    assert h.cycle(after=60).dispatched == ("p/tick-202601011201",)
    assert h.cycle(after=60).dispatched == ("p/tick-202601011202",)
    assert h.cycle(after=60).dispatched == ()  # maxRuns
    # and after a restart from the status branch, still two
    again = h.restart(h.status_of(h.cycle(after=1)))
    assert again.cycle(after=60).dispatched == ()


def test_forbid_waits_for_the_active_run_allow_runs_both() -> None:
    h = FakeCycles(scheduled("  kind: interval\n  frequency: 1m\n"))  # Forbid by default
    assert h.cycle().dispatched == ("p/tick-202601011200",)
    assert h.cycle(after=60).dispatched == ()  # 12:00 still runs
    h.cluster.set_phase("p", "p-tick-202601011200-g1", "Succeeded")
    assert h.cycle(after=10).dispatched == ("p/tick-202601011201",)  # still the due tick


def test_replace_stops_the_earlier_tick_as_stopped_in_repo() -> None:
    h = FakeCycles(scheduled("  kind: interval\n  frequency: 1m\n  concurrencyPolicy: Replace\n"))
    h.cycle()
    result = h.cycle(after=60)
    assert result.dispatched == ("p/tick-202601011201",)
    assert result.stopped == ("p/tick-202601011200",)
    state = result.states["p/tick-202601011200"]
    assert (state.phase, state.reason) == (Phase.STOPPED, ObservedReason.STOPPED_IN_REPO)
    assert state.message.startswith("stopped: true at projects/p/operations/tick.yaml:10")
    assert ("p", "p-tick-202601011200-g1") not in h.cluster.jobs


def test_a_scheduled_dag_runs_whole_at_each_tick() -> None:
    dag = """dag:
  operations:
    - name: prepare
    - name: embed
      dependencies: [prepare]
"""
    h = FakeCycles(
        scheduled("  kind: cron\n  cron: '0 * * * *'\n", name="nightly", extra=dag),
        clock=SteppedClock(START),
    )
    first = h.cycle()
    assert first.dispatched == ("p/nightly-202601011200-prepare",)
    plan = first.plan
    assert plan is not None
    (waiting,) = [p for p in plan.pending if "embed" in p.operation]
    assert waiting.operation == "p/nightly-202601011200-embed"
    h.cluster.set_phase("p", "p-nightly-202601011200-prepare-g1", "Succeeded")
    assert h.cycle(after=10).dispatched == ("p/nightly-202601011200-embed",)


class CountedRuns(Mapping[str, bool]):
    """Runs (op id -> active) that count how often they are walked."""

    def __init__(self, runs: dict[str, bool]) -> None:
        self.runs, self.walks = runs, 0

    def __getitem__(self, key: str) -> bool:
        return self.runs[key]

    def __iter__(self) -> Iterator[str]:
        self.walks += 1
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


def test_the_runs_known_are_walked_once_per_cycle_not_once_per_schedule() -> None:
    """The ledger holds every run ever: a cycle's cost must not grow as its size times the
    number of schedules."""
    files = {
        f"projects/p/operations/s{i}.yaml": f"kind: Operation\n{RUN}schedule:\n"
        "  kind: interval\n  frequency: 1h\n"
        for i in range(20)
    }
    compiled = compile_repo(repo({**BASE, **files}))
    assert compiled.errors == ()
    stamps = [f"2025{m:02d}01{h:02d}00" for m in range(1, 13) for h in range(24)]
    runs = CountedRuns({f"p/s{i}-{stamp}": False for i in range(20) for stamp in stamps})
    ticked = with_ticks(compiled, runs, START)
    assert runs.walks <= 1
    # each schedule still sees its own runs: its newest is shown, the due tick added
    ids = {op.id for op in ticked.operations}
    assert {"p/s0-202512012300", "p/s19-202601011200"} <= ids


def test_tick_names_read_back() -> None:
    assert tick_time("p/tick", "p/tick-202601011200") == utc("2026-01-01T12:00:00")
    assert tick_time("p/tick", "p/tick-202601011200-embed") == utc("2026-01-01T12:00:00")
    assert tick_time("p/tick", "p/tick-2026010112") is None
    assert tick_time("p/tick", "p/ticker-202601011200") is None


def test_the_last_and_next_fire_times() -> None:
    spec = ScheduleSpec("cron", cron="0 2 * * *", timezone="Europe/Paris")
    now = utc("2026-03-10T12:00:00")
    ticks = ticks_of("p/x", spec, {"p/x-202603100100": False}, now, stopped=False)
    assert ticks.last == utc("2026-03-10T01:00:00") and ticks.due is None  # its run is known
    assert ticks.next == utc("2026-03-11T01:00:00")
    forbid = ScheduleSpec("interval", every=60, concurrency_policy=ConcurrencyPolicy.FORBID)
    busy = ticks_of("p/x", forbid, {"p/x-202603101158": True}, now, stopped=False)
    assert busy.due is None


# --- the property: cycles and restarts do not change the runs ----------------------------

# gaps between cycles (seconds) and, per cycle, whether the process restarts from the
# status branch before it
cadences = st.lists(
    st.tuples(st.integers(min_value=1, max_value=60), st.booleans()), min_size=5, max_size=40
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cadence=cadences)
def test_the_runs_do_not_depend_on_when_the_reconciler_cycles(
    cadence: list[tuple[int, bool]],
) -> None:
    """With a cycle in every minute, whatever the cadence and wherever it restarts, each
    fire time makes its run exactly once; with any gaps, no run is made twice and each is
    the latest fire time at its cycle, made within the deadline."""
    compiled = scheduled(
        "  kind: interval\n  frequency: 1m\n  concurrencyPolicy: Allow\n  startingDeadline: 2m\n"
    )
    h = FakeCycles(compiled, clock=SteppedClock(START))
    result = h.cycle()
    for gap, restart in cadence:
        if restart:
            h = h.restart(h.status_of(result))
        result = h.cycle(after=gap)
    made = ran(h)
    assert len(made) == len(set(made))  # never twice
    minutes = int((h.clock.at - START).total_seconds()) // 60
    expected = [
        f"p/p-tick-{(START + timedelta(minutes=m)).strftime('%Y%m%d%H%M')}-g1"
        for m in range(minutes + 1)
    ]
    assert made == expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cadence=st.lists(
        st.tuples(st.integers(min_value=1, max_value=400), st.booleans()),
        min_size=3,
        max_size=25,
    )
)
def test_after_any_gaps_each_run_is_the_latest_tick_within_its_deadline(
    cadence: list[tuple[int, bool]],
) -> None:
    compiled = scheduled(
        "  kind: interval\n  frequency: 1m\n  concurrencyPolicy: Allow\n  startingDeadline: 2m\n"
    )
    h = FakeCycles(compiled, clock=SteppedClock(START))
    result = h.cycle()
    at = START
    expected = ["p/p-tick-202601011200-g1"]
    for gap, restart in cadence:
        if restart:
            h = h.restart(h.status_of(result))
        at += timedelta(seconds=gap)
        latest = at.replace(second=0)
        name = f"p/p-tick-{latest.strftime('%Y%m%d%H%M')}-g1"
        if (at - latest).total_seconds() <= 120 and name not in expected:
            expected.append(name)
        result = h.cycle(after=gap)
    assert ran(h) == expected


def test_status_shows_the_last_run_and_the_next_fire_time() -> None:
    h = FakeCycles(
        scheduled("  kind: cron\n  cron: '*/5 * * * *'\n  startAt: 2026-01-01T12:00:00Z\n")
    )
    before = read_status(h.status_of(h.cycle(after=-60))).operations["p/tick"]
    assert (before.phase, before.message, before.kind) == ("Queued", "no run yet", "schedule")
    assert before.schedule == {"nextFire": "2026-01-01T12:00:00Z"}
    record = read_status(h.status_of(h.cycle(after=60))).operations["p/tick"]
    assert record.children == ("p/tick-202601011200",)
    assert record.phase == "Dispatched"
    assert record.schedule == {
        "lastRun": "p/tick-202601011200",
        "lastFire": "2026-01-01T12:00:00Z",
        "nextFire": "2026-01-01T12:05:00Z",
    }


def test_a_pr_plan_shows_the_next_fire_times_of_a_schedule_it_adds_or_alters() -> None:
    nightly = "  kind: cron\n  cron: '0 2 * * *'\n  timezone: Europe/Paris\n"
    base, head = scheduled(nightly), scheduled(nightly.replace("'0 2", "'30 3"))
    none = compile_repo(repo(BASE))
    at = utc("2026-03-28T12:00:00")

    def diff(a: CompiledRepo, b: CompiledRepo) -> PlanDiff:
        return diff_plans((a, plan_repo(a, [], at)), (b, plan_repo(b, [], at)))

    assert not diff(base, base).schedules
    (altered,) = diff(base, head).schedules
    assert (altered.operation, altered.change) == ("p/tick", Change.CHANGED)
    # 03:30 in Paris: CET, then CEST from the 29th
    assert altered.next == (
        "2026-03-29T01:30:00Z",
        "2026-03-30T01:30:00Z",
        "2026-03-31T01:30:00Z",
    )
    (field,) = diff(base, head).operations[0].fields
    assert (field.path, field.before, field.after) == (
        "schedule.cron",
        "0 2 * * *",
        "30 3 * * *",
    )
    added = diff(none, base)
    assert [(c.change, c.next[0]) for c in added.schedules] == [
        (Change.ADDED, "2026-03-29T01:00:00Z")  # 02:00 does not happen that night: the jump
    ]
    markdown = diff_to_markdown(added)
    assert "### Schedules" in markdown
    assert "| `p/tick` | added | 2026-03-29T01:00:00Z, 2026-03-30T00:00:00Z," in markdown
    assert json.loads(diff_to_json(diff(base, none)))["schedules"] == [
        {"operation": "p/tick", "change": "removed", "nextFires": []}
    ]


def test_no_tick_from_before_the_operation_was_committed() -> None:
    """As a CronJob runs none from before it was created: the file's first commit bounds
    the ticks, whatever ``startAt`` says."""
    path = "projects/p/operations/tick.yaml"
    body = f"kind: Operation\n{RUN}schedule:\n  kind: interval\n  frequency: 1m\n"
    snapshot = repo({**BASE, path: body})
    files = dict(snapshot.files)
    committed = START + timedelta(seconds=30)
    files[path] = RepoFile(path, files[path].content, first_commit_time=committed)
    h = FakeCycles(compile_repo(RepoSnapshot(files, snapshot.version)))
    assert h.cycle(after=40).dispatched == ()  # 12:00 is before the commit at 12:00:30
    assert h.cycle(after=30).dispatched == ("p/tick-202601011201",)


def test_the_operation_page_shows_the_last_run_and_the_next_fire_time() -> None:
    h = FakeCycles(scheduled("  kind: cron\n  cron: '*/5 * * * *'\n"))
    shown = h.cycle().report
    assert shown is not None
    detail = operation_detail(shown, "p/tick")
    assert detail is not None
    assert (detail.kind, detail.phase, detail.children) == (
        "schedule",
        "Dispatched",
        ("p/tick-202601011200",),
    )
    assert detail.schedule == {
        "lastRun": "p/tick-202601011200",
        "lastFire": "2026-01-01T12:00:00Z",
        "nextFire": "2026-01-01T12:05:00Z",
    }
    page = operation_main(detail)
    assert "<dt>Next fire time</dt><dd>2026-01-01T12:05:00Z</dd>" in page
    assert "<dt>Last run</dt><dd><a" in page
