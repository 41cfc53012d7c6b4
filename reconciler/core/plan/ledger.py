"""The cost ledger and budget windows (pure; docs/budgets.md).

What must live here: the ledger's record (``LedgerEntry``: one finished run, keyed by
operation, generation and workload, so a run is entered once whatever restarts or leader
changes happen), the ledger itself (``Ledger``), its files on the status branch
(``status/ledger/<YYYY-MM>.yaml``, by the UTC month of each run's end), pricing (a run's
hourly rate under a price list) and the calendar windows of a budget, with what a run
counts against one.

Rules (docs/budgets.md):

- a run costs ``requests x price x (end - start)``, start and end being its Job's own
  ``status.startTime`` and completion time (so a run that ended while the reconciler was
  down is costed by when it ran, not when it was noticed);
- memory, ephemeral storage and hugepages are priced and counted per GiB;
- a run that spans a window boundary counts, in each window, for the time it ran in it
  (its cost prorated by time);
- windows are calendar days, ISO weeks (from Monday) or months in the org's timezone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal, getcontext
from functools import lru_cache
from typing import Annotated, Any, NamedTuple
from zoneinfo import ZoneInfo

from pydantic import PlainSerializer

from reconciler.core.quantity import format_quantity, parse_quantity
from reconciler.core.reporting.wire import WireModel
from reconciler.core.types import BudgetPeriod, BudgetSpec

LEDGER_DIR = "status/ledger"
# status/<project>/ holds a project's records (in its bucket folders, ``operation_path``): no
# project may be named like the ledger's folder.
RESERVED_PROJECT_NAMES = frozenset({LEDGER_DIR.removeprefix("status/")})
_GIB = Decimal(2**30)
_HOUR = Decimal(3600)
# Costs are kept to a millionth of the currency unit (and resource-hours likewise).
_PLACES = Decimal("0.000001")
# Resources counted in bytes, priced and budgeted per GiB.
_BYTE_RESOURCES = ("memory", "ephemeral-storage")


def per_unit(resource: str, amount: Decimal) -> Decimal:
    """A request in the units prices and budgets use: GiB for memory-like resources."""
    if resource in _BYTE_RESOURCES or resource.startswith("hugepages-"):
        return amount / _GIB
    return amount


def hourly_rate(
    requests: Mapping[str, Decimal], prices: Mapping[str, Decimal], hours_of: str | None = None
) -> Decimal:
    """What one hour of a run with ``requests`` counts: its cost under ``prices`` (``hours_of``
    None), or its amount of the one resource ``hours_of`` (a ``<resource>-hours`` budget).
    A resource without a price costs nothing."""
    if hours_of is not None:
        amount = requests.get(hours_of)
        return per_unit(hours_of, amount) if amount is not None else Decimal(0)
    total = Decimal(0)
    for resource, amount in requests.items():
        price = prices.get(resource)
        if price is not None:
            total += per_unit(resource, amount) * price
    return total


def prices_for(
    org_prices: Mapping[str, Decimal],
    cluster_prices: Mapping[str, Decimal],
    flavor: str | None = None,
    org_flavor_prices: Mapping[str, Mapping[str, Decimal]] | None = None,
    cluster_flavor_prices: Mapping[str, Mapping[str, Decimal]] | None = None,
) -> dict[str, Decimal]:
    """The price list on a cluster: the org's, with the cluster's own prices instead; for a
    run assigned ``flavor``, the flavor's prices over those (the org's, then the
    cluster's)."""
    if flavor is None:
        return {**org_prices, **cluster_prices}
    return {
        **org_prices,
        **cluster_prices,
        **(org_flavor_prices or {}).get(flavor, {}),
        **(cluster_flavor_prices or {}).get(flavor, {}),
    }


def hours(start: datetime, end: datetime) -> Decimal:
    """Hours from ``start`` to ``end``, never negative."""
    seconds = (end - start).total_seconds()
    return Decimal(max(0, round(seconds * 1000))) / Decimal(1000) / _HOUR


def quantize(value: Decimal) -> Decimal:
    # enough digits for any finite amount a ledger may hold (the default 28 stop at 10**22)
    digits = max(getcontext().prec, value.adjusted() - _PLACES.adjusted() + 1)
    return value.quantize(_PLACES, context=Context(prec=digits))


def run_cost(
    requests: Mapping[str, Decimal], prices: Mapping[str, Decimal], start: datetime, end: datetime
) -> Decimal:
    """The cost of a run from ``start`` to ``end``."""
    return quantize(hourly_rate(requests, prices) * hours(start, end))


# --- the record -------------------------------------------------------------------------


def _decimal_text(value: Decimal) -> str:
    """``15.7``, ``100``: no exponent, no trailing zeros."""
    return format(value.normalize(), "f")


Money = Annotated[Decimal, PlainSerializer(_decimal_text, return_type=str)]
Quantities = Annotated[
    Mapping[str, Decimal],
    PlainSerializer(
        lambda v: {k: format_quantity(v[k]) for k in sorted(v)}, return_type=dict[str, str]
    ),
]
Time = Annotated[datetime, PlainSerializer(lambda t: utc_text(t), return_type=str)]


def utc_text(moment: datetime) -> str:
    """``2026-12-03T22:05:00Z``: the ledger's times are UTC, to the second."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class LedgerKey(NamedTuple):
    """A run's identity: one ledger entry per key, whoever wrote it and however often."""

    operation: str
    generation: int
    workload: str


class LedgerEntry(WireModel):
    """One finished run in ``status/ledger/<YYYY-MM>.yaml``.

    ``requests`` are the run's own (per resource, as quantities); ``start`` and ``end`` its
    Job's; ``cost`` what it cost under the prices in force on its cluster when it was
    entered (``currency``: the org's label then). ``phase`` is how it ended."""

    operation: str
    generation: int
    workload: str
    queue: str
    cluster: str
    phase: str
    requests: Quantities
    start: Time
    end: Time
    cost: Money
    currency: str = ""
    flavor: str = ""  # the flavor it ran in ("": its queue had none)

    @property
    def key(self) -> LedgerKey:
        return LedgerKey(self.operation, self.generation, self.workload)

    @property
    def month(self) -> str:
        """``2026-12``: the file it is in (the UTC month of its end)."""
        return self.end.astimezone(UTC).strftime("%Y-%m")

    @property
    def duration_seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    def to_dict(self) -> dict[str, Any]:
        """The entry as its file holds it; ``currency`` and ``flavor`` left out when unset."""
        data = self.model_dump(by_alias=True)
        for optional in ("currency", "flavor"):
            if not data[optional]:
                del data[optional]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        """An entry read back; raises ``ValueError`` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping, not {type(data).__name__}")
        missing = [k for k in _REQUIRED if k not in data]
        if missing:
            raise ValueError(f"missing {', '.join(repr(k) for k in missing)}")
        if "queue" not in data:  # whose budget it counts against cannot be told ('' is none)
            raise ValueError("missing 'queue'")
        generation = data["generation"]
        if isinstance(generation, bool) or not isinstance(generation, int):
            raise ValueError(f"generation {generation!r} is not a number")
        requests = data.get("requests") or {}
        if not isinstance(requests, Mapping):
            raise ValueError("requests is not a mapping")
        for name in ("start", "end"):
            try:
                _time(data[name])
            except (ValueError, TypeError, OverflowError):
                raise ValueError(f"{name} {short_text(data[name])} is not a time") from None
        try:
            cost = Decimal(str(data["cost"]))
        except ArithmeticError:
            cost = None
        if cost is None or not cost.is_finite():
            raise ValueError(
                f"cost {short_text(data['cost'])} is not a finite amount of at least 0"
            )
        try:
            entry = cls(
                operation=str(data["operation"]),
                generation=generation,
                workload=str(data["workload"]),
                queue=str(data.get("queue") or ""),
                cluster=str(data.get("cluster") or ""),
                phase=str(data.get("phase") or ""),
                requests={str(k): parse_quantity(v) for k, v in requests.items()},
                start=_time(data["start"]),
                end=_time(data["end"]),
                cost=Decimal(str(data["cost"])),
                currency=str(data.get("currency") or ""),
                flavor=str(data.get("flavor") or ""),
            )
        except ArithmeticError as err:
            raise ValueError(f"cost {data['cost']!r} is not a number") from err
        except Exception as err:  # a quantity error or a bad time: what is wrong, as text
            raise ValueError(str(err)) from None
        _check_entry(entry)
        return entry


_REQUIRED = ("operation", "generation", "workload", "start", "end", "cost")

# The times a ledger entry may hold: every window of a budget or of ``reconciler usage``
# (a month, in any zone) around them can be computed. Outside, an entry is refused at read.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
# The most a run may cost, as digits: past what any run the reconciler enters can cost
# (prices <= 10**12 a unit-hour, a request < 10**16 units, < 10**8 hours from EARLIEST to
# LATEST: 10**36 a resource), far short of where sums overflow or text grows unbounded
COST_DIGITS = 40
MAX_COST = Decimal(10**COST_DIGITS)


def short_text(value: Any) -> str:
    """A value of an entry, quoted and cut short for a one-line message."""
    text = repr(value) if isinstance(value, str) else repr(str(value))
    return text if len(text) <= 60 else f"{text[:57]}...'"


def _check_entry(entry: LedgerEntry) -> None:
    # 1e999999999 is finite, and overflows every sum of it and its text without an exponent
    if entry.cost.is_finite() and entry.cost.copy_abs() > MAX_COST:
        cost = short_text(entry.cost)
        raise ValueError(f"cost {cost} is not an amount from 0 to 1e{COST_DIGITS}")
    if not entry.cost.is_finite() or entry.cost < 0:
        raise ValueError(f"cost {_decimal_text(entry.cost)} is not a finite amount of at least 0")
    for name, moment in (("start", entry.start), ("end", entry.end)):
        if not EARLIEST <= moment < LATEST:
            raise ValueError(
                f"{name} {_iso(moment)} is out of range ({utc_text(EARLIEST)} to "
                f"{utc_text(LATEST)})"
            )


def _iso(moment: datetime) -> str:
    """``utc_text`` where UTC can hold it (year 1 at +01:00 is before any UTC time)."""
    try:
        return utc_text(moment)
    except OverflowError:
        return moment.isoformat()


def worst_case(data: Any) -> LedgerEntry | None:
    """A bad entry read at its worst case, so it never lowers what is counted as spent:
    negative amounts taken as positive, a missing workload or generation filled in. None
    when it cannot be read at all (no queue, no readable times or cost)."""
    if not isinstance(data, Mapping):
        return None
    try:
        requests = data.get("requests") or {}
        if not isinstance(requests, Mapping):
            requests = {}
        amounts = {}
        for k, v in requests.items():
            text = str(v).strip()
            amounts[str(k)] = parse_quantity(text[1:] if text.startswith("-") else text)
        cost = abs(Decimal(str(data["cost"])))
        generation = data.get("generation")
        entry = LedgerEntry(
            operation=str(data.get("operation") or "?"),
            generation=generation if isinstance(generation, int) else 0,
            workload=str(data.get("workload") or "?"),
            queue=str(data["queue"] or ""),
            cluster=str(data.get("cluster") or ""),
            phase=str(data.get("phase") or ""),
            requests=amounts,
            start=_time(data["start"]),
            end=_time(data["end"]),
            cost=cost,
            currency=str(data.get("currency") or ""),
            flavor=str(data.get("flavor") or ""),
        )
        _check_entry(entry)
    except Exception:  # unreadable whichever way: the caller says so, at the entry
        return None
    return entry


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_moment(value: str | None) -> datetime | None:
    """An ISO 8601 time from a workload or a status record; None when absent or unreadable."""
    if not value:
        return None
    try:
        return _time(value)
    except ValueError:
        return None


# --- the ledger -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ledger:
    """Every run entered, by key. Adding a run already entered changes nothing.

    ``files`` memoises each month's rendered files (by month, then path): the status writer
    renders the whole ledger every cycle, and a month no run was added to since is the same
    bytes. A new ledger keeps the months its new entries do not touch."""

    entries: Mapping[LedgerKey, LedgerEntry] = field(default_factory=dict)
    files: dict[str, dict[str, bytes]] = field(default_factory=dict, compare=False, repr=False)
    rendered: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    # what could not be read back (``LedgerProblems``): budgets it may belong to wait, and
    # the writer keeps those entries and files as they are
    problems: LedgerProblems = field(default_factory=lambda: LedgerProblems())

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def with_entries(self, new: Iterable[LedgerEntry]) -> Ledger:
        """This ledger and the runs of ``new`` it does not hold yet (the first of each key)."""
        added = {}
        for entry in new:
            if entry.key not in self.entries and entry.key not in added:
                added[entry.key] = entry
        if not added:
            return self
        touched = {e.month for e in added.values()}
        kept = {m: f for m, f in self.files.items() if m not in touched}
        return Ledger({**self.entries, **added}, kept, problems=self.problems)

    @classmethod
    def of(cls, entries: Iterable[LedgerEntry], problems: LedgerProblems | None = None) -> Ledger:
        return cls(problems=LedgerProblems() if problems is None else problems).with_entries(
            entries
        )

    def counted(self) -> Iterator[LedgerEntry]:
        """What budgets count: every entry, and the bad ones at their worst case."""
        yield from self.entries.values()
        yield from self.problems.worst

    def unreadable(self, queue: str) -> str | None:
        """Why what ``queue`` spent cannot be known (None: it can)."""
        return self.problems.unread.get(queue) or self.problems.unread.get("")

    def months(self) -> dict[str, list[LedgerEntry]]:
        """The entries per file month, each month's sorted by end, operation, generation."""
        out: dict[str, list[LedgerEntry]] = {}
        for entry in self.entries.values():
            out.setdefault(entry.month, []).append(entry)
        for entries in out.values():
            entries.sort(key=lambda e: (e.end, e.operation, e.generation, e.workload))
        return dict(sorted(out.items()))


# Entries per ledger file: a month with more continues in ``<YYYY-MM>.2.yaml`` and so on,
# so that each file stays well within the status reader's limits (core/load.py: 1 MiB and
# 20 000 values a file).
ENTRIES_PER_FILE = 500


def ledger_path(month: str, part: int = 1) -> str:
    """``status/ledger/2026-12.yaml``; a month's later parts ``2026-12.2.yaml``..."""
    return f"{LEDGER_DIR}/{month}.yaml" if part == 1 else f"{LEDGER_DIR}/{month}.{part}.yaml"


_MONTH_FILE = re.compile(rf"^{LEDGER_DIR}/\d{{4}}-\d{{2}}(\.[1-9]\d{{0,5}})?\.yaml$")


def ledger_month(path: str) -> str:
    """``2026-12`` of ``status/ledger/2026-12.2.yaml``."""
    return path.removeprefix(f"{LEDGER_DIR}/")[:7]


def is_ledger_path(path: str) -> bool:
    """``status/ledger/2026-12.yaml`` (or a later part, ``2026-12.2.yaml``)."""
    return path.startswith(LEDGER_DIR) and _MONTH_FILE.match(path) is not None


@dataclass(frozen=True, slots=True)
class LedgerProblems:
    """What the status branch's ledger holds that could not be read: ``unread``, per queue
    ("" for any queue: an entry without one, or a whole file), the first problem; ``raw``,
    per month, the unreadable entries as they were (written back with the month, never
    dropped); ``frozen``, the files that could not be read at all (never overwritten)."""

    unread: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    frozen: frozenset[str] = frozenset()
    # the bad entries read at their worst case: counted as spent, written back as they were
    worst: tuple[LedgerEntry, ...] = ()
    messages: tuple[str, ...] = ()  # every problem, file:line:col: message

    def warnings(self) -> list[str]:
        """One line per problem, for the views' stderr and the reconciler's log."""
        return [f"warning: ledger: {m}" for m in self.messages]


def ledger_documents(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """The ledger's files, as data, by path (the status writer dumps them): per month, its
    entries in order of end, ``ENTRIES_PER_FILE`` a file."""
    out: dict[str, dict[str, Any]] = {}
    for month, entries in ledger.months().items():
        out.update(_month_documents(month, entries, ledger.problems))
    return out


def _month_documents(
    month: str, entries: list[LedgerEntry], problems: LedgerProblems | None = None
) -> dict[str, dict[str, Any]]:
    raw = list(problems.raw.get(month, ())) if problems is not None else []
    out = {
        ledger_path(month, i // ENTRIES_PER_FILE + 1): {
            "entries": [e.to_dict() for e in entries[i : i + ENTRIES_PER_FILE]]
        }
        for i in range(0, len(entries), ENTRIES_PER_FILE)
    }
    if raw:  # the unreadable entries stay, as they were, for a person to repair
        last = ledger_path(month, max(1, -(-len(entries) // ENTRIES_PER_FILE)))
        out.setdefault(last, {"entries": []})["entries"].extend(raw)
    if problems is not None:
        for path in problems.frozen & out.keys():
            del out[path]
    return out


def ledger_files(ledger: Ledger, dump: Callable[[Mapping[str, Any]], bytes]) -> dict[str, bytes]:
    """The ledger's files as ``dump`` writes them, by path; months already rendered for this
    ledger (or the one it grew from) are not rendered again."""
    if ledger.rendered or not ledger.entries:
        return dict(ledger.rendered)
    out: dict[str, bytes] = {}
    months = None
    for month in sorted({e.month for e in ledger.entries.values()}):
        cached = ledger.files.get(month)
        if cached is None:
            if months is None:
                months = ledger.months()
            docs = _month_documents(month, months[month], ledger.problems)
            cached = ledger.files[month] = {path: dump(doc) for path, doc in docs.items()}
        out.update(cached)
    ledger.rendered.update(out)
    return out


@dataclass(frozen=True, slots=True)
class LedgerFile:
    """A ledger file read back: its entries (a bad one at its worst case, ``worst``), and
    the entries that could not be read at all (``unread``: queue or "", message, raw)."""

    entries: tuple[LedgerEntry, ...]
    worst: tuple[tuple[LedgerEntry, str, Any], ...] = ()  # (entry, message, as written)
    unread: tuple[tuple[str, str, Any], ...] = ()  # (queue or "", message, as written)


def entries_from_document(data: Mapping[str, Any]) -> LedgerFile:
    """A ledger file's entries. A bad entry never lowers what is counted as spent: it is
    counted at its worst case (``worst_case``) when it can be read at all, else left out and
    named in ``unread`` (its queue's budget then waits). Raises ``ValueError`` only when the
    file has no list of entries."""
    raw = data.get("entries") or ()
    if not isinstance(raw, list):
        raise ValueError("entries is not a list")
    out = []
    worst: list[tuple[LedgerEntry, str, Any]] = []
    unread: list[tuple[str, str, Any]] = []
    for i, item in enumerate(raw):
        try:
            out.append(LedgerEntry.from_dict(item))
            continue
        except ValueError as err:
            problem = f"entry {i + 1}: {err}"
        entry = worst_case(item)
        if entry is not None:
            worst.append((entry, f"{problem} (counted at its worst case)", item))
        else:
            queue = item.get("queue") if isinstance(item, Mapping) else None
            unread.append((queue if isinstance(queue, str) else "", problem, item))
    return LedgerFile(tuple(out), tuple(worst), tuple(unread))


# --- windows ----------------------------------------------------------------------------


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


class Window(NamedTuple):
    """A calendar window ``[start, end)``, both aware (UTC)."""

    start: datetime
    end: datetime


def window_at(moment: datetime, per: BudgetPeriod, timezone: str = "UTC") -> Window:
    """The calendar window of ``per`` in ``timezone`` that holds ``moment``: from local
    midnight (of the day, of the week's Monday, of the month's first) to the next one."""
    tz = zone(timezone)
    local = moment.astimezone(tz)
    day = local.date()
    if per is BudgetPeriod.DAY:
        first, after = day, day + timedelta(days=1)
    elif per is BudgetPeriod.WEEK:
        first = day - timedelta(days=day.weekday())
        after = first + timedelta(days=7)
    else:
        first = day.replace(day=1)
        after = (first + timedelta(days=32)).replace(day=1)
    start = datetime(first.year, first.month, first.day, tzinfo=tz).astimezone(UTC)
    end = datetime(after.year, after.month, after.day, tzinfo=tz).astimezone(UTC)
    return Window(start, end)


def next_window(window: Window, per: BudgetPeriod, timezone: str = "UTC") -> Window:
    return window_at(window.end, per, timezone)


def overlap_hours(start: datetime, end: datetime, window: Window) -> Decimal:
    return hours(max(start, window.start), min(end, window.end))


def entry_usage(entry: LedgerEntry, budget: BudgetSpec, window: Window) -> Decimal:
    """What a finished run counts against ``budget`` in ``window``: the part of it that ran
    in the window (its cost prorated by time, or the resource-hours in the window). A run
    of no duration counts (its cost) in the window its end is in."""
    hours_of = budget.hours_of
    if entry.end <= entry.start:
        if hours_of is not None or not (window.start <= entry.end < window.end):
            return Decimal(0)
        return entry.cost
    inside = overlap_hours(entry.start, entry.end, window)
    if not inside:
        return Decimal(0)
    if hours_of is not None:
        return hourly_rate(entry.requests, {}, hours_of) * inside
    return entry.cost * inside / hours(entry.start, entry.end)


def spent(ledger: Iterable[LedgerEntry], queue: str, budget: BudgetSpec, window: Window) -> Decimal:
    """What the runs of ``queue`` in the ledger count against ``budget`` in ``window``."""
    total = Decimal(0)
    for entry in ledger:
        if entry.queue == queue and entry.end >= window.start and entry.start < window.end:
            total += entry_usage(entry, budget, window)
    return total


@dataclass(frozen=True, slots=True)
class BudgetWindow:
    """A budgeted queue's current window and what its finished runs have spent in it."""

    queue: str
    budget: BudgetSpec
    window: Window
    spent: Decimal
    timezone: str = "UTC"
    currency: str = ""

    @property
    def unit(self) -> str:
        """How amounts of this budget are written: the currency, or ``<resource>-hours``."""
        if self.budget.hours_of is not None:
            return self.budget.resource
        return self.currency


# --- usage ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What one queue's runs used in one window: ``runs`` that ended in it, the
    resource-hours and the cost of the time they ran in it (memory in GiB-hours). A queue
    with flavors has a row per flavor its runs ran in (``flavor``; "" for runs without)."""

    window: Window
    queue: str
    runs: int
    hours: Mapping[str, Decimal]
    cost: Decimal
    currency: str
    flavor: str = ""


# ``reconciler usage`` shows at most this many windows, the latest: its cost is bounded by
# what it shows, whatever span an entry claims (an entry may run from 1970 to 9998).
MAX_USAGE_WINDOWS = 1000


@dataclass(frozen=True, slots=True)
class UsageShown:
    """The rows of ``usage``, and whether usage earlier than the first window shown exists
    (left out: more than ``MAX_USAGE_WINDOWS`` windows)."""

    rows: list[UsageRow]
    earlier: bool
    since: datetime | None  # the start of the first window shown


def usage(
    entries: Iterable[LedgerEntry],
    per: BudgetPeriod,
    timezone: str = "UTC",
    queue: str | None = None,
) -> list[UsageRow]:
    """The ledger per calendar window of ``per``, queue (only ``queue`` when given) and
    flavor, in window, queue then flavor order (the latest ``MAX_USAGE_WINDOWS`` windows:
    ``usage_shown``)."""
    return usage_shown(entries, per, timezone, queue).rows


def _windows_before(window: Window, per: BudgetPeriod, count: int, timezone: str) -> Window:
    """The window ``count`` windows before ``window``, computed from its local date (not
    walked), never before ``EARLIEST``."""
    tz = zone(timezone)
    first = window.start.astimezone(tz).date()
    if per is BudgetPeriod.MONTH:
        months = first.year * 12 + first.month - 1 - count
        year, month = divmod(months, 12)
        year = max(year, EARLIEST.year - 1)
        day = first.replace(year=year, month=month + 1, day=1)
    else:
        step = 7 if per is BudgetPeriod.WEEK else 1
        ordinal = max(first.toordinal() - step * count, (EARLIEST - timedelta(days=7)).toordinal())
        day = first.fromordinal(ordinal)
    moment = datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC)
    return window_at(max(moment, EARLIEST), per, timezone)


def usage_shown(
    entries: Iterable[LedgerEntry],
    per: BudgetPeriod,
    timezone: str = "UTC",
    queue: str | None = None,
) -> UsageShown:
    """``usage``'s rows, and whether earlier ones were left out. A run across a boundary
    counts in each window for the time it ran there, as budgets count it; only the windows
    shown are computed."""
    chosen = [e for e in entries if queue is None or e.queue == queue]
    if not chosen:
        return UsageShown([], False, None)
    last = window_at(max(e.end for e in chosen), per, timezone)
    floor = _windows_before(last, per, MAX_USAGE_WINDOWS - 1, timezone).start
    earlier = False
    runs: dict[tuple[datetime, str, str], int] = {}
    used: dict[tuple[datetime, str, str], dict[str, Decimal]] = {}
    costs: dict[tuple[datetime, str, str], Decimal] = {}
    currencies: dict[tuple[datetime, str, str], str] = {}
    windows: dict[datetime, Window] = {}
    for entry in chosen:
        if entry.start < floor or entry.end < floor:
            earlier = True
        if entry.end < floor:
            continue
        end_window = window_at(entry.end, per, timezone)
        windows[end_window.start] = end_window
        key = (end_window.start, entry.queue, entry.flavor)
        runs[key] = runs.get(key, 0) + 1
        duration = hours(entry.start, entry.end)
        if not duration:
            costs[key] = costs.get(key, Decimal(0)) + entry.cost
            used.setdefault(key, {})
            currencies.setdefault(key, entry.currency)
            continue
        window = window_at(max(entry.start, floor), per, timezone)
        while window.start < entry.end:
            inside = overlap_hours(entry.start, entry.end, window)
            if inside:
                windows[window.start] = window
                key = (window.start, entry.queue, entry.flavor)
                into = used.setdefault(key, {})
                for resource, amount in entry.requests.items():
                    into[resource] = into.get(resource, Decimal(0)) + (
                        per_unit(resource, amount) * inside
                    )
                costs[key] = costs.get(key, Decimal(0)) + entry.cost * inside / duration
                currencies.setdefault(key, entry.currency)
            window = next_window(window, per, timezone)
    rows = [
        UsageRow(
            window=windows[key[0]],
            queue=key[1],
            runs=runs.get(key, 0),
            hours={r: quantize(v) for r, v in sorted(used.get(key, {}).items())},
            cost=quantize(costs.get(key, Decimal(0))),
            currency=currencies.get(key, ""),
            flavor=key[2],
        )
        for key in sorted(set(used) | set(costs) | set(runs))
    ]
    return UsageShown(rows, earlier, floor)
