"""Schedules (pure): the fire times of an operation's ``schedule`` and the runs they make.

What must live here: the cron parser (five fields, Vixie semantics), fire times in a time
zone across its clock changes, and ``with_ticks``: the runs a cycle adds to the compiled
config for each scheduled operation, derived from the time and the runs already known
(the listing, the status branch, the ledger), never from a memory of its own. So a restart,
or a cycle that comes late, makes the same runs, and never one twice:

- the **due** tick is the latest fire time at or before ``now`` (inside ``startAt`` ..
  ``endAt``; without ``startAt``, not before the operation file's first commit). It is an
  operation ``<op>-<YYYYMMDDHHMM>`` (UTC) until a newer tick is due, or, with
  ``startingDeadline``, until it is that late without having been dispatched: a reconciler
  that was down catches up at most the one tick, and a tick it comes back to too late is
  skipped;
- a tick with a run known (active or not) is an operation too while its run is active,
  and the newest such one always (status shows the last run);
- ``maxRuns``: no tick is due once that many have a run known;
- ``concurrencyPolicy``: ``Forbid``: no tick is due while an earlier tick's run is active
  (it is once that ends, if still due); ``Allow``: both run; ``Replace``: the earlier
  ticks' active runs are stopped (``StoppedInRepo``).

A scheduled workflow (matrix, DAG) runs whole at each tick: its children are named
``<op>-<YYYYMMDDHHMM>-<child>``, one workflow per tick.

Clock changes (Vixie cron's rule): a local time the clock skips fires at the jump, once; a
local time it repeats fires at its first occurrence. An hour field of ``*`` follows real
time instead: a skipped hour has no fire, a repeated one fires twice.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    ConcurrencyPolicy,
    Provenance,
    ScheduleSpec,
    WorkflowRef,
)

TICK_FORMAT = "%Y%m%d%H%M"
_TICK_SUFFIX = re.compile(r"-(\d{12})")
# where a run's id may carry its tick: ``-<YYYYMMDDHHMM>`` at the end or before ``-<child>``
TICK_PATTERN = re.compile(r"-\d{12}(?=-|$)")

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names for the values from lowest on)
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# A cron that matches no date (``0 0 30 2 *``) is looked for this far back, then given up:
# the day-of-week and leap-year cycles repeat within 28 years.
_SEARCH_DAYS = 28 * 366


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed five-field cron expression. ``dom_star``/``dow_star``: the field starts
    with ``*``, which decides how the two day fields combine (Vixie: both restricted, a day
    matching either; else both must match)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    dom_star: bool
    dow_star: bool
    every_hour: bool  # the hour field is ``*``: fires follow real time across clock changes

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow


def parse_cron(text: str) -> Cron:
    """``text`` as a cron expression (five fields: ranges, steps, lists, month and day
    names, ``7`` for Sunday, the ``@daily``-style macros). ValueError says what is wrong."""
    expanded = _MACROS.get(text.strip().lower(), text)
    parts = expanded.split()
    if len(parts) != 5:
        raise ValueError(
            f"{text!r} is not a cron expression: it needs five fields (minute hour "
            f"day-of-month month day-of-week), it has {len(parts)}"
        )
    values = [_field(part, *spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in values[4])
    return Cron(
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=weekdays,
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        every_hour=parts[1] == "*",
    )


def _field(text: str, what: str, low: int, high: int, names: tuple[str, ...]) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        span, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"{what}: {item!r} has a step that is not a positive number")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        else:
            start, dash, end = span.partition("-")
            first = _value(start, what, low, high, names, item)
            last = _value(end, what, low, high, names, item) if dash else first
            if slash and not dash:
                last = high  # Vixie: ``a/n`` is ``a-high/n``
            if first > last:
                raise ValueError(f"{what}: {item!r} is a range that ends before it starts")
        out.update(range(first, last + 1, step))
    return frozenset(out)


def _value(text: str, what: str, low: int, high: int, names: tuple[str, ...], item: str) -> int:
    if text.lower() in names:
        return low + names.index(text.lower())
    if not text.isdigit():
        known = f" or a name ({', '.join(names)})" if names else ""
        raise ValueError(f"{what}: {item!r} is not a number{known}")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{what}: {value} is out of range ({low}-{high})")
    return value


_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)


def parse_instant(text: str) -> datetime | None:
    """An RFC 3339 time with its offset (``2026-12-01T00:00:00Z``), in UTC; None when
    ``text`` is not one. Fractions past microseconds are cut."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    day, clock, fraction, zone = match.groups()
    micros = f".{(fraction + '00000')[:6]}" if fraction else ""
    offset = "+00:00" if zone in "Zz" else zone
    try:
        return datetime.fromisoformat(f"{day}T{clock}{micros}{offset}").astimezone(UTC)
    except ValueError:  # a date or time that does not exist: 2026-02-30, 25:00
        return None
    except OverflowError:  # its offset takes it out of years 1..9999 (0001-01-01T00:00+01:00)
        return None


# The instants a schedule's window may name: fire times are searched up to 28 years around
# them, and each must stay a datetime.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


# --- fire times -------------------------------------------------------------------------


def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def _jump(local: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The UTC instant the clock jumps over the skipped local time ``local``."""
    before = local.replace(tzinfo=zone, fold=1).astimezone(UTC)  # the old offset's reading
    after = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
    lo, hi = min(before, after), max(before, after)
    offset = lo.astimezone(zone).utcoffset()
    while hi - lo > timedelta(minutes=1):
        mid = lo + (hi - lo) / 2
        mid = mid.replace(second=0, microsecond=0)
        if mid.astimezone(zone).utcoffset() == offset:
            lo = mid
        else:
            hi = mid
    return hi


def cron_day(cron: Cron, zone: zoneinfo.ZoneInfo, day: date) -> list[datetime]:
    """The fire times (UTC, sorted) of ``cron`` on the local date ``day``."""
    if not cron.matches_day(day):
        return []
    out: set[datetime] = set()
    for hour in sorted(cron.hours):
        for minute in sorted(cron.minutes):
            local = datetime(day.year, day.month, day.day, hour, minute)
            first = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
            second = local.replace(tzinfo=zone, fold=1).astimezone(UTC)
            exists = first.astimezone(zone).replace(tzinfo=None) == local
            if exists:
                out.add(first)
                if second != first and cron.every_hour:
                    out.add(second)  # a repeated hour, in real time
            elif not cron.every_hour:
                out.add(_jump(local, zone))  # skipped by the clock: at the jump
    return sorted(out)


def _in_window(spec: ScheduleSpec, moment: datetime) -> bool:
    return (spec.start_at is None or moment >= spec.start_at) and (
        spec.end_at is None or moment <= spec.end_at
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY = timedelta(days=1)
# Fire times are looked for up to this local date: any later one is past datetime's range.
_LAST_DAY = date(9999, 1, 1)


def last_fire(spec: ScheduleSpec, now: datetime) -> datetime | None:
    """The latest fire time at or before ``now`` inside the schedule's window."""
    until = now if spec.end_at is None else min(now, spec.end_at)
    if spec.start_at is not None and until < spec.start_at:
        return None
    if spec.kind == "interval":
        anchor = spec.start_at or _EPOCH
        steps = int((until - anchor).total_seconds()) // spec.every
        return anchor + timedelta(seconds=steps * spec.every)
    cron, zone = parse_cron(spec.cron), _zone(spec.timezone)
    day = until.astimezone(zone).date() + _DAY  # a jump may cross midnight
    first = None if spec.start_at is None else spec.start_at.astimezone(zone).date() - _DAY
    for _ in range(_SEARCH_DAYS):
        if first is not None and day < first:
            return None
        for moment in reversed(cron_day(cron, zone, day)):
            if moment <= until:
                return moment if _in_window(spec, moment) else None
        day -= _DAY
    return None


def next_fires(spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` fire times after ``after``, in order, inside the window."""
    out: list[datetime] = []
    for moment in _fires_from(spec, after):
        if spec.end_at is not None and moment > spec.end_at:
            break
        if moment > after and _in_window(spec, moment):
            out.append(moment)
            if len(out) == count:
                break
    return out


def _fires_from(spec: ScheduleSpec, after: datetime) -> Iterator[datetime]:
    start = after if spec.start_at is None else max(after, spec.start_at - timedelta(seconds=1))
    if spec.kind == "interval":
        anchor = spec.start_at or _EPOCH
        k = max(0, int((start - anchor).total_seconds()) // spec.every)
        while True:
            try:
                yield anchor + timedelta(seconds=k * spec.every)
            except OverflowError:  # past year 9999: no fire is left
                return
            k += 1
    cron, zone = parse_cron(spec.cron), _zone(spec.timezone)
    day = start.astimezone(zone).date() - _DAY
    for _ in range(_SEARCH_DAYS):
        yield from cron_day(cron, zone, day)
        if day >= _LAST_DAY:
            return
        day += _DAY


# --- the runs a cycle adds --------------------------------------------------------------


def tick_name(name: str, moment: datetime) -> str:
    """The run of operation ``name`` for the fire time ``moment``: ``<name>-<YYYYMMDDHHMM>``."""
    return f"{name}-{moment.astimezone(UTC).strftime(TICK_FORMAT)}"


def tick_time(scheduled: str, op_id: str) -> datetime | None:
    """The fire time of ``op_id`` when it is a run of the scheduled operation ``scheduled``
    (``p/op-<stamp>``; of a scheduled workflow, a child ``p/op-<stamp>-<child>``)."""
    if not op_id.startswith(scheduled):
        return None
    match = _TICK_SUFFIX.match(op_id, len(scheduled))
    if match is None:
        return None
    rest = op_id[match.end() :]
    if rest and not rest.startswith("-"):
        return None
    try:
        return datetime.strptime(match.group(1), TICK_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Ticks:
    """One scheduled operation at ``now``: the ticks with a run known (fire time -> one
    active), the tick due (None: none is, or its run is known), and the last and next fire
    times."""

    known: Mapping[datetime, bool]
    due: datetime | None
    last: datetime | None
    next: datetime | None


def ticks_of(
    scheduled: str,
    spec: ScheduleSpec,
    runs: Mapping[str, bool],
    now: datetime,
    *,
    stopped: bool,
    since: datetime | None = None,
) -> Ticks:
    """The ticks of the scheduled operation ``scheduled`` at ``now``, from the runs known
    (op id -> active). ``since``: when its file was first committed; without ``startAt``,
    no earlier tick is due (as a CronJob runs none from before it was created)."""
    known: dict[datetime, bool] = {}
    for op_id, active in runs.items():
        moment = tick_time(scheduled, op_id)
        if moment is not None:
            known[moment] = known.get(moment, False) or active
    last = last_fire(spec, now)
    due = last
    forbidden = spec.concurrency_policy is ConcurrencyPolicy.FORBID and any(
        active for moment, active in known.items() if moment != due
    )
    if due is not None and (
        due in known
        or stopped
        or forbidden
        or (spec.start_at is None and since is not None and due < since)
        or (spec.max_runs is not None and len(known) >= spec.max_runs)
        or (
            spec.starting_deadline is not None
            and (now - due).total_seconds() > spec.starting_deadline
        )
    ):
        due = None
    upcoming = next_fires(spec, now, 1)
    if stopped or (spec.max_runs is not None and len(known) + (due is not None) >= spec.max_runs):
        upcoming = []
    return Ticks(known, due, last, upcoming[0] if upcoming else None)


def known_runs(states: Iterable[tuple[str, bool]]) -> dict[str, bool]:
    """Op id -> whether any of its runs in ``states`` (op id, active) is active."""
    out: dict[str, bool] = {}
    for op_id, active in states:
        out[op_id] = out.get(op_id, False) or active
    return out


def scheduled_id(template: CompiledOperation) -> str:
    """The scheduled operation a template is of: itself, or a scheduled workflow's child's
    parent."""
    return template.workflow.parent if template.workflow is not None else template.id


def schedule_groups(compiled: CompiledRepo) -> dict[str, list[CompiledOperation]]:
    """Each scheduled operation's templates (a workflow: its children), by its id."""
    groups: dict[str, list[CompiledOperation]] = {}
    for template in compiled.schedules:
        groups.setdefault(scheduled_id(template), []).append(template)
    return groups


def next_tick(compiled: CompiledRepo, now: datetime) -> datetime | None:
    """The earliest fire time after ``now`` of the schedules not stopped: when a cycle must
    come for its tick to be made on time (a ``startingDeadline`` shorter than the loop's
    interval would otherwise skip ticks the cycles reach late)."""
    soonest: datetime | None = None
    for members in schedule_groups(compiled).values():
        spec = members[0].schedule
        if spec is None or any(m.stopped for m in members):
            continue
        upcoming = next_fires(spec, now, 1)
        if upcoming and (soonest is None or upcoming[0] < soonest):
            soonest = upcoming[0]
    return soonest


def schedule_times(
    spec: ScheduleSpec, runs: Iterable[str], now: datetime, *, stopped: bool
) -> dict[str, str]:
    """What status and the pages show of a scheduled operation at ``now``: ``lastRun`` (the
    newest of its ``runs``), ``lastFire`` and ``nextFire`` (UTC), those known."""
    newest = max(runs, default=None)
    last, upcoming = last_fire(spec, now), next_fires(spec, now, 1)
    out = {
        "lastRun": newest,
        "lastFire": _utc_text(last) if last is not None else None,
        "nextFire": _utc_text(upcoming[0]) if upcoming and not stopped else None,
    }
    return {k: v for k, v in out.items() if v is not None}


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def runs_by_schedule(
    runs: Mapping[str, bool], scheduled: Collection[str]
) -> dict[str, dict[str, bool]]:
    """The runs (op id -> active) that may be ticks of each of the ``scheduled``
    operations: one pass over ``runs`` (every run in the ledger, which only grows), not
    one per schedule."""
    out: dict[str, dict[str, bool]] = {}
    for op_id, active in runs.items():
        for match in TICK_PATTERN.finditer(op_id):
            prefix = op_id[: match.start()]
            if prefix in scheduled:
                out.setdefault(prefix, {})[op_id] = active
    return out


def with_ticks(compiled: CompiledRepo, runs: Mapping[str, bool], now: datetime) -> CompiledRepo:
    """``compiled`` with the runs of its schedules at ``now`` in ``operations``: the tick
    due, the ticks with a run active, and the newest tick with a run known."""
    if not compiled.schedules:
        return compiled
    added: list[CompiledOperation] = []
    groups = schedule_groups(compiled)
    own = runs_by_schedule(runs, groups)
    for scheduled, members in groups.items():
        spec = members[0].schedule
        assert spec is not None
        ticks = ticks_of(
            scheduled,
            spec,
            own.get(scheduled, {}),
            now,
            stopped=any(m.stopped for m in members),
            since=members[0].submitted_at,
        )
        shown = {m for m, active in ticks.known.items() if active}
        if ticks.known:
            shown.add(max(ticks.known))
        if ticks.due is not None:
            shown.add(ticks.due)
        newest = max(shown, default=None)
        for moment in sorted(shown):
            for member in members:
                added.append(_tick(scheduled, member, moment, replaced=moment != newest))
    return replace(compiled, operations=(*compiled.operations, *added))


def _tick(
    scheduled: str, template: CompiledOperation, moment: datetime, *, replaced: bool
) -> CompiledOperation:
    """The run of ``template`` for the fire time ``moment``; ``replaced``: a newer tick is
    due or running, which under ``Replace`` stops this one."""
    spec = template.schedule
    assert spec is not None
    tick_id = tick_name(scheduled, moment)
    stamp = tick_id[len(scheduled) :]
    base = scheduled.partition("/")[2]
    name = f"{base}{stamp}{template.name[len(base) :]}"
    stop = template.stopped or (replaced and spec.concurrency_policy is ConcurrencyPolicy.REPLACE)
    provenance = dict(template.provenance)
    if stop and not template.stopped:
        # ``stopped_message`` names the line that stops it: the policy's
        where = provenance.get("schedule.concurrencyPolicy") or next(
            (v for k, v in provenance.items() if k.startswith("schedule.")), None
        )
        if where is not None:
            provenance["stopped"] = Provenance(
                where.file, where.line, "schedule: Replace (a newer tick)", where.col
            )
    workflow = (
        replace(template.workflow, parent=tick_id)
        if template.workflow is not None
        else WorkflowRef(parent=scheduled, kind="schedule", index=int(moment.timestamp()) // 60)
    )
    return replace(
        template,
        name=name,
        spec={**{k: v for k, v in template.spec.items() if k != "schedule"}, "name": name},
        schedule=None,
        stopped=stop,
        provenance=provenance,
        submitted_at=moment,
        workflow=workflow,
        dependencies=tuple(
            f"{tick_id}{dep[len(scheduled) :]}" if dep.startswith(scheduled) else dep
            for dep in template.dependencies
        ),
    )
