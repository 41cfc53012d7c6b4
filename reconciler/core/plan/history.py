"""What-if replay: a recorded history of runs played again under a config (pure;
docs/pull-requests.md, "What-if replay", and docs/budgets.md, "Burn forecast").

What must live here: a recorded run as the replay reads it (``RecordedRun``: when it
arrived, how long it ran and how it ended), the runs of a window taken from the ledger
(``recorded_runs``), the event-driven replay of those runs over the real planner's
admission (``replay_runs``: ``admit_dispatch``, the same steps 1-4 every cycle runs), the
comparison of two replays per queue (``compare_replays``) and the budget burn forecast
(``forecast_burn``: when a budget is spent at a rate).

The replay is an event-driven simulation on a grid of ``resolution``: at each instant an
operation arrives or a run ends, the ended runs release what they held (entering the
replay's ledger, so budgets count them) and the planner is asked again, for the queues the
event can change (``_Components``: queues linked by a cluster's concurrency, a cohort, a
fleet or a dependency are planned together; the others alone). A dispatched run then runs
its recorded duration and ends as it ended (``Failed`` or ``Succeeded``). Nothing is drawn
at random: the same history and config give the same replay, to the byte.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from reconciler.core import gcpause
from reconciler.core.plan.groups import DisjointSets
from reconciler.core.plan.ledger import (
    BudgetWindow,
    LedgerEntry,
    Window,
    hourly_rate,
    hours,
    prices_for,
    quantize,
    run_cost,
    spent,
    window_at,
    zone,
)
from reconciler.core.plan.planner import admit_dispatch
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    CompiledOperation,
    CompiledRepo,
    ObservedOperation,
    Phase,
    QueueSpec,
    RunKind,
)

GPU = "nvidia.com/gpu"
DEFAULT_RESOLUTION = timedelta(minutes=1)
# How many runs whose start moves most a queue's comparison lists
TOP_MOVES = 5
_FAILED = str(Phase.FAILED)
_STOPPED = str(Phase.STOPPED)


# --- the recorded history ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """One finished run of the ledger, as the replay plays it: its operation and
    generation, where it ran, what it requested, when it arrived (its operation's first
    commit; a later generation, when it started) and how long it ran."""

    operation: str
    generation: int
    queue: str
    cluster: str
    requests: Mapping[str, Decimal]
    arrival: datetime
    start: datetime  # as recorded
    seconds: float
    failed: bool
    flavor: str | None = None  # the flavor it ran in (None: its queue had none)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds)

    @property
    def waited(self) -> float:
        """Seconds from its arrival to its recorded start."""
        return max(0.0, (self.start - self.arrival).total_seconds())


def recorded_runs(
    entries: Iterable[LedgerEntry],
    submitted: Mapping[str, datetime],
    since: datetime,
    until: datetime,
) -> tuple[RecordedRun, ...]:
    """The ledger's runs that were still to start or running at ``since`` and arrived
    before ``until``, in arrival order. An operation's first run arrived at its first
    commit (``submitted``, by id; no later than it started), a later generation when it
    started (its rerun's commit is not recorded); a run stopped by the reconciler says
    nothing of how the operation runs and is left out."""
    first: dict[str, int] = {}
    chosen = [e for e in entries if e.phase != _STOPPED]
    for e in chosen:
        first[e.operation] = min(first.get(e.operation, e.generation), e.generation)
    out = []
    for e in chosen:
        arrival = e.start
        at = submitted.get(e.operation)
        if at is not None and e.generation == first[e.operation]:
            arrival = min(at, e.start)
        if e.end <= since or arrival >= until:
            continue
        out.append(
            RecordedRun(
                e.operation,
                e.generation,
                e.queue,
                e.cluster,
                dict(e.requests),
                arrival,
                e.start,
                e.duration_seconds,
                e.phase == _FAILED,
                e.flavor or None,
            )
        )
    out.sort(key=lambda r: (r.arrival, r.operation, r.generation))
    return tuple(out)


# --- the replay ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Played:
    """A run of the replay: in which queue it waited under the config, and when it started
    (None: not within the replay's horizon, or never: its queue is not in the config)."""

    run: RecordedRun
    queue: str
    start: datetime | None
    carried: bool = False  # running before the window: replayed as recorded, not measured

    @property
    def waited(self) -> float | None:
        if self.start is None:
            return None
        return max(0.0, (self.start - self.run.arrival).total_seconds())


@dataclass(frozen=True, slots=True)
class Replay:
    """A window's runs played under one config: each run's outcome, and what the finished
    runs entered in the replay's ledger."""

    since: datetime
    until: datetime
    played: tuple[Played, ...]
    ledger: tuple[LedgerEntry, ...]


def as_recorded(
    runs: Sequence[RecordedRun],
    since: datetime,
    until: datetime,
    ledger: Iterable[LedgerEntry] = (),
) -> Replay:
    """What happened, in the replay's terms: each run started when it started, and the
    ledger's runs of the window (what a replay under the same config is measured against,
    docs/estimates.md)."""
    played = tuple(Played(r, r.queue, r.start, r.start < since) for r in runs)
    entries = tuple(e for e in ledger if e.end > since and e.start < until)
    return Replay(since, until, played, entries)


def _stand_in(run: RecordedRun, queue: QueueSpec | None) -> CompiledOperation:
    """An operation the config no longer holds, as its ledger entry ran it; its timeout
    its queue's default, else how long it ran (a budget reserves to a timeout)."""
    project, _, name = run.operation.partition("/")
    timeout = math.ceil(run.seconds)
    if queue is not None and queue.default_timeout is not None:
        timeout = max(timeout, queue.default_timeout)
    return CompiledOperation(
        project=project,
        name=name,
        path="",
        queue=run.queue,
        cluster=run.cluster,
        namespace="",
        kind=RunKind.JOB,
        spec={},
        requests=dict(run.requests),
        generation=run.generation,
        submitted_at=run.arrival,
        timeout=max(1, timeout),
    )


class _Components:
    """Queues planned together: linked by a cluster with a concurrency limit, a cohort, a
    fleet queue's clusters, or a dependency between their operations."""

    def __init__(self, repo: CompiledRepo, ops: Iterable[CompiledOperation]) -> None:
        self.sets = DisjointSets(repo.queues)
        by_cluster: dict[str, list[str]] = {}
        by_cohort: dict[str, list[str]] = {}
        fleets: list[str] = []
        for name, spec in repo.queues.items():
            for c in spec.members:
                by_cluster.setdefault(c, []).append(name)
            if spec.cohort:
                by_cohort.setdefault(spec.cohort, []).append(name)
            if spec.fleet:
                fleets.append(name)
        for c, names in by_cluster.items():
            cluster = repo.clusters.get(c)
            if (cluster is not None and cluster.concurrency is not None) or any(
                repo.queues[n].fleet for n in names
            ):
                self._join(names)
        for names in by_cohort.values():
            self._join(names)
        queue_of = {}
        ops = list(ops)
        for op in ops:
            queue_of[op.id] = op.queue
        for op in ops:
            for d in op.dependencies:
                if d in queue_of and op.queue in repo.queues and queue_of[d] in repo.queues:
                    self._join([op.queue, queue_of[d]])
        self.members: dict[str, list[str]] = {}
        for q in sorted(repo.queues):
            self.members.setdefault(self.root(q), []).append(q)

    def root(self, q: str) -> str:
        return self.sets.find(q)

    def _join(self, names: Sequence[str]) -> None:
        for other in names[1:]:
            self.sets.union(names[0], other)


def replay_runs(
    repo: CompiledRepo,
    runs: Sequence[RecordedRun],
    since: datetime,
    until: datetime,
    *,
    prior: Iterable[LedgerEntry] = (),
    horizon: datetime | None = None,
    resolution: timedelta = DEFAULT_RESOLUTION,
) -> Replay:
    """``runs`` (``recorded_runs`` of ``since``) played under ``repo`` from ``since``: a run
    that started before ``since`` runs as recorded (``carried``); each other arrives when it
    arrived, waits for the planner to dispatch it (a later generation, also for its earlier
    run's end), runs its recorded duration and ends as recorded. ``prior`` is the ledger
    before the window (what budgets had spent). Runs not dispatched by ``horizon`` (default:
    ``until`` plus the window's length) have no start. Times move on a grid of
    ``resolution``."""
    with gcpause.paused():
        return _Sim(repo, runs, since, until, prior, horizon, resolution).run()


# the kinds of event, in the order they are applied at one instant: ends first (what they
# release is free for the arrivals), then a budget window's start (its queue replans)
_END, _ARRIVE, _RESET = 0, 1, 2


class _Sim:
    def __init__(
        self,
        repo: CompiledRepo,
        runs: Sequence[RecordedRun],
        since: datetime,
        until: datetime,
        prior: Iterable[LedgerEntry],
        horizon: datetime | None,
        resolution: timedelta,
    ) -> None:
        self.repo = repo
        self.runs = runs
        self.since = since
        self.until = until
        self.step = max(1, int(resolution.total_seconds()))
        end = horizon if horizon is not None else until + (until - since)
        self.horizon = max(0, math.ceil((end - since).total_seconds()))
        by_id = {op.id: op for op in repo.operations}
        self.ops: list[CompiledOperation | None] = []
        for r in runs:
            op = by_id.get(r.operation)
            op = _stand_in(r, repo.queues.get(r.queue)) if op is None else op
            self.ops.append(op if op.queue in repo.queues else None)
        self.replayed = {r.operation for r in runs}
        self.components = _Components(repo, (o for o in self.ops if o is not None))
        self.budgeted = {n: q.budget for n, q in repo.queues.items() if q.budget is not None}
        self.spent: dict[str, list[LedgerEntry]] = {n: [] for n in self.budgeted}
        # what was spent before the window, and by runs the replay leaves out (stopped by
        # the reconciler): the others are entered again as the replay ends them
        for e in sorted(prior, key=lambda e: (e.end, e.operation, e.generation, e.workload)):
            if e.queue in self.spent and (e.end <= since or e.phase == _STOPPED):
                self.spent[e.queue].append(e)
        self.books: dict[str, _Book] = {}
        # per component (its root queue): the runs waiting and running, by operation
        self.waiting_in: dict[str, dict[str, int]] = {}
        self.active_in: dict[str, dict[str, int]] = {}
        self.seen: dict[int, ObservedOperation] = {}  # a running run, as the planner sees it
        self.starts: dict[int, float] = {}  # seconds after ``since``
        self.placed: dict[int, tuple[str, str | None]] = {}  # cluster and flavor dispatched to
        self.entries: list[LedgerEntry] = []
        self.names = sorted(repo.queues)
        self.resets: set[tuple[int, int]] = set()  # (time, queue) already in the heap
        self.served = _all_backends(repo, (o for o in self.ops if o is not None))

    def _grid(self, seconds: float) -> int:
        return math.ceil(max(0.0, seconds) / self.step) * self.step

    def run(self) -> Replay:
        events: list[tuple[int, int, int]] = []
        later: dict[str, list[int]] = {}  # an operation's runs after the one in play
        busy: dict[str, int] = {}  # the run of each operation waiting or running
        waiting: dict[str, int] = {}
        active: dict[str, int] = {}
        carried: set[int] = set()
        phases: dict[str, Phase] = {}
        for i, r in enumerate(self.runs):
            op = self.ops[i]
            if op is None:
                continue
            if r.start < self.since:  # running at the window's start: as recorded
                carried.add(i)
                self.starts[i] = (r.start - self.since).total_seconds()
                end = self._grid((r.end - self.since).total_seconds())
                heapq.heappush(events, (end, _END, i))
                continue
            at = self._grid((r.arrival - self.since).total_seconds())
            heapq.heappush(events, (at, _ARRIVE, i))
        for i in sorted(carried):
            oid = self.runs[i].operation
            if oid in busy:
                later.setdefault(oid, []).append(i)
            else:
                busy[oid] = i
                active[oid] = i
                self.active_in.setdefault(self._root(i), {})[oid] = i
                self.seen[i] = self._observed(i)
        while events:
            now = events[0][0]
            if now > self.horizon:
                break
            touched: set[str] = set()
            while events and events[0][0] == now:
                _, kind, i = heapq.heappop(events)
                if kind == _RESET:
                    touched.add(self.names[i])
                    continue
                op = self.ops[i]
                assert op is not None
                oid = op.id
                touched.add(op.queue)
                if kind == _END:
                    del active[oid]
                    del busy[oid]
                    del self.active_in[self._root(i)][oid]
                    del self.seen[i]
                    r = self.runs[i]
                    phases[oid] = Phase.FAILED if r.failed else Phase.SUCCEEDED
                    self._enter(i, now)
                    queued = later.get(oid)
                    if queued:
                        nxt = queued.pop(0)
                        at = max(
                            now, self._grid((self.runs[nxt].arrival - self.since).total_seconds())
                        )
                        heapq.heappush(events, (at, _ARRIVE, nxt))
                elif oid in busy:
                    later.setdefault(oid, []).append(i)
                else:
                    busy[oid] = i
                    waiting[oid] = i
                    self.waiting_in.setdefault(self._root(i), {})[oid] = i
            roots = {self.components.root(q) for q in touched}
            for root in sorted(roots):
                self._admit(root, now, waiting, active, phases, events)
        played = []
        for i, r in enumerate(self.runs):
            op = self.ops[i]
            queue = op.queue if op is not None else r.queue
            offset = self.starts.get(i)
            start = None if offset is None else self.since + timedelta(seconds=offset)
            if i in carried:
                start = r.start
            played.append(Played(r, queue, start, i in carried))
        return Replay(self.since, self.until, tuple(played), tuple(self.entries))

    def _admit(
        self,
        root: str,
        now: int,
        waiting: dict[str, int],
        active: dict[str, int],
        phases: dict[str, Phase],
        events: list[tuple[int, int, int]],
    ) -> None:
        names = self.components.members[root]
        candidates = list(self.waiting_in.get(root, {}).values())
        if not candidates:
            return
        running = list(self.active_in.get(root, {}).values())
        operations = [self.ops[i] for i in (*candidates, *running)]
        observed = [self.seen[i] for i in running]
        ids = {o.operation for o in observed}
        for i in candidates:
            op = self.ops[i]
            assert op is not None
            for d in op.dependencies:
                if d in ids or d in waiting:
                    continue
                ids.add(d)
                phase = phases.get(d)
                if d in active:
                    phase = Phase.RUNNING
                elif phase is None and d in self.replayed:
                    phase = Phase.QUEUED  # its run has not arrived yet
                # a dependency the history does not hold ran before it
                observed.append(ObservedOperation(d, phase or Phase.SUCCEEDED))
        at = self.since + timedelta(seconds=now)
        queues = {n: self.repo.queues[n] for n in names}
        admission = admit_dispatch(
            [o for o in operations if o is not None],
            queues,
            self.repo.clusters,
            observed,
            self.repo.org,
            at,
            backends=self.served,
            cohorts=self.repo.cohorts,
            ledger=self._ledger(names, at),
            flavors=self.repo.flavors,
        )
        for go in admission.dispatch:
            run = waiting.pop(go.operation, None)
            if run is None:
                continue
            active[go.operation] = run
            self.starts[run] = float(now)
            self.placed[run] = (go.cluster, go.flavor)
            self.waiting_in[root].pop(go.operation, None)
            self.active_in.setdefault(root, {})[go.operation] = run
            self.seen[run] = self._observed(run)
            heapq.heappush(events, (now + self._grid(self.runs[run].seconds), _END, run))
        self._wake(names, now, waiting, events)

    def _wake(
        self,
        names: Sequence[str],
        now: int,
        waiting: Mapping[str, int],
        events: list[tuple[int, int, int]],
    ) -> None:
        """A budgeted queue that still has runs waiting replans when its next window
        starts: no run's end or arrival may come before it."""
        held = {self._queue(i) for i in waiting.values()}
        at = self.since + timedelta(seconds=now)
        for n in names:
            budget = self.budgeted.get(n)
            if budget is None or n not in held:
                continue
            end = window_at(at, budget.per, self.repo.org.timezone).end
            key = (self._grid((end - self.since).total_seconds()), self.names.index(n))
            if key not in self.resets:
                self.resets.add(key)
                heapq.heappush(events, (key[0], _RESET, key[1]))

    def _root(self, i: int) -> str:
        """The component of run ``i``'s queue."""
        return self.components.root(self._queue(i))

    def _queue(self, i: int) -> str:
        op = self.ops[i]
        assert op is not None
        return op.queue

    def _observed(self, i: int) -> ObservedOperation:
        op = self.ops[i]
        assert op is not None
        cluster, flavor = self.placed.get(i, (self.runs[i].cluster, self.runs[i].flavor))
        start = self.since + timedelta(seconds=self.starts[i])
        return ObservedOperation(
            op.id,
            Phase.RUNNING,
            dict(op.requests),
            op.queue,
            cluster,
            workflow=op.workflow.parent if op.workflow is not None else "",
            pods=op.replicas,
            flavor=flavor,
            dispatched_at=start,
            started_at=start,
            timeout=op.timeout,
        )

    def _ledger(self, names: Sequence[str], at: datetime) -> list[LedgerEntry]:
        """What the budgeted queues of ``names`` spent, for the planner: per queue, the runs
        across its window's start as they are, and those inside it summed into one entry
        that counts the same (their cost and resource-hours over one hour), so a replan's
        budget check reads a few entries, not every run of the window."""
        out: list[LedgerEntry] = []
        tz = self.repo.org.timezone
        for n in names:
            budget = self.budgeted.get(n)
            if budget is None:
                continue
            start = window_at(at, budget.per, tz).start
            book = self.books.get(n)
            if book is None or book.start != start:
                book = self.books[n] = _Book(start)
            book.add(self.spent[n], budget)
            out.extend(book.across)
            if book.total is not None:
                out.append(book.total)
        return out

    def _enter(self, i: int, now: int) -> None:
        op = self.ops[i]
        assert op is not None
        r = self.runs[i]
        cluster, flavor = self.placed.get(i, (r.cluster, r.flavor))
        start = self.since + timedelta(seconds=self.starts[i])
        end = start + timedelta(seconds=r.seconds)
        org = self.repo.org
        spec = self.repo.clusters.get(cluster)
        prices = prices_for(
            org.prices,
            spec.prices if spec is not None else {},
            flavor,
            org.flavor_prices,
            spec.flavor_prices if spec is not None else None,
        )
        entry = LedgerEntry(
            operation=op.id,
            generation=r.generation,
            workload=f"replay-{i}",
            queue=op.queue,
            cluster=cluster,
            phase=str(Phase.FAILED if r.failed else Phase.SUCCEEDED),
            requests=dict(op.requests),
            start=start,
            end=end,
            cost=run_cost(op.requests, prices, start, end),
            currency=org.currency,
            flavor=flavor or "",
        )
        self.entries.append(entry)
        if op.queue in self.spent:
            self.spent[op.queue].append(entry)


class _Book:
    """A budgeted queue's window in the replay: the runs read so far (``read``), those that
    began before the window (``across``), and the rest summed (``total``)."""

    __slots__ = ("across", "cost", "hours", "read", "start", "total")

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.read = 0
        self.cost = Decimal(0)
        self.hours = Decimal(0)  # of the budget's resource (its amount times hours)
        self.across: list[LedgerEntry] = []
        self.total: LedgerEntry | None = None

    def add(self, entries: Sequence[LedgerEntry], budget: BudgetSpec) -> None:
        if self.read == len(entries):
            return
        resource = budget.hours_of
        grew = False
        for e in entries[self.read :]:
            if e.end < self.start:
                continue
            if e.start < self.start or e.end <= e.start:
                self.across.append(e)
                continue
            grew = True
            self.cost += e.cost
            if resource is not None:
                self.hours += e.requests.get(resource, Decimal(0)) * hours(e.start, e.end)
        self.read = len(entries)
        if grew:
            first = entries[0]
            self.total = LedgerEntry(
                operation="replay/window",
                generation=0,
                workload="replay-window",
                queue=first.queue,
                cluster="",
                phase=str(Phase.SUCCEEDED),
                requests={resource: self.hours} if resource is not None else {},
                start=self.start,
                end=self.start + timedelta(hours=1),
                cost=self.cost,
            )


def _all_backends(
    repo: CompiledRepo, ops: Iterable[CompiledOperation]
) -> dict[str, frozenset[str]]:
    """Every cluster serves every backend the replayed operations use: each ran."""
    used = frozenset(str(op.distributed.backend) for op in ops if op.distributed is not None)
    return {name: used for name in repo.clusters}


# --- the comparison ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue in one replay: its runs that arrived in the window, those started, the
    wait p50 and p90 (seconds; None: none started), the GPU-hours its runs used in the
    window and the share of its GPU quota that is (None: no GPU quota), and what its budget
    counts in the window (None: no budget)."""

    runs: int
    started: int
    wait_p50: float | None
    wait_p90: float | None
    gpu_hours: Decimal
    utilisation: Decimal | None
    burn: Decimal | None


@dataclass(frozen=True, slots=True)
class StartMove:
    """A run that starts at another time in head's replay than in base's (seconds: head
    less base; None when it starts in one replay only)."""

    operation: str
    generation: int
    before: datetime | None
    after: datetime | None
    seconds: float | None


@dataclass(frozen=True, slots=True)
class QueueReplay:
    queue: str
    base: QueueFigures
    head: QueueFigures
    later: int  # runs that start later in head
    earlier: int  # ... earlier
    moves: tuple[StartMove, ...]  # the ``TOP_MOVES`` that move most


@dataclass(frozen=True, slots=True)
class BurnForecast:
    """When a budget's window is spent at a rate: ``spent`` so far in ``window`` (at
    ``now``), ``rate`` per hour; ``at`` the instant the limit is reached (None: not
    within the window, or already reached: ``spent >= limit``)."""

    queue: str
    budget: BudgetSpec
    window: Window
    spent: Decimal
    rate: Decimal
    at: datetime | None
    timezone: str = "UTC"
    unit: str = ""

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget.limit


@dataclass(frozen=True, slots=True)
class ForecastMove:
    """A budgeted queue's burn forecast at the rate of base's replay and of head's."""

    queue: str
    base: BurnForecast | None
    head: BurnForecast | None


@dataclass(frozen=True, slots=True)
class WhatIf:
    """``plan --base --replay``: the window's runs replayed under base's config and under
    head's, per queue; ``runs`` 0 when the window holds no history (nothing to show)."""

    since: datetime
    until: datetime
    runs: int
    queues: tuple[QueueReplay, ...] = ()
    forecasts: tuple[ForecastMove, ...] = ()


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted, non-empty ``values``."""
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def gpu_quota(spec: QueueSpec) -> Decimal:
    """The GPUs a queue's quota holds (each flavor's summed)."""
    total = spec.quota.get(GPU, Decimal(0))
    for f in spec.flavors:
        total += f.quota.get(GPU, Decimal(0))
    return total


def _used_hours(p: Played, since: datetime, until: datetime) -> Decimal:
    if p.start is None:
        return Decimal(0)
    end = p.start + timedelta(seconds=p.run.seconds)
    return hours(max(p.start, since), min(end, until)) if end > since else Decimal(0)


def figures_of(replay: Replay, repo: CompiledRepo) -> dict[str, QueueFigures]:
    """Each queue's figures in ``replay`` (played under ``repo``)."""
    since, until = replay.since, replay.until
    waits: dict[str, list[float]] = {}
    runs: dict[str, int] = {}
    gpu: dict[str, Decimal] = {}
    ops = {op.id: op for op in repo.operations}
    for p in replay.played:
        used = _used_hours(p, since, until)
        if used:
            op = ops.get(p.run.operation)
            requests = op.requests if op is not None else p.run.requests
            gpus = hourly_rate(requests, {}, GPU)
            gpu[p.queue] = gpu.get(p.queue, Decimal(0)) + gpus * used
        if p.carried or p.run.arrival >= until:
            continue
        runs[p.queue] = runs.get(p.queue, 0) + 1
        if p.waited is not None:
            waits.setdefault(p.queue, []).append(p.waited)
    # over the span the history covers: from its first arrival, not before
    first = min((p.run.arrival for p in replay.played if not p.carried), default=since)
    window = Window(max(since, first), until)
    span = hours(*window)  # 0 when the first arrival is within a millisecond of ``until``
    out = {}
    for name in sorted(set(runs) | set(gpu)):
        spec = repo.queues.get(name)
        got = sorted(waits.get(name, ()))
        quota = gpu_quota(spec) if spec is not None else Decimal(0)
        used = quantize(gpu.get(name, Decimal(0)))
        burn = None
        if spec is not None and spec.budget is not None:
            burn = quantize(spent(replay.ledger, name, spec.budget, window))
        out[name] = QueueFigures(
            runs.get(name, 0),
            len(got),
            quantile(got, 0.5) if got else None,
            quantile(got, 0.9) if got else None,
            used,
            quantize(used / (quota * span)) if quota and span else None,
            burn,
        )
    return out


_NONE = QueueFigures(0, 0, None, None, Decimal(0), None, None)


def compare_replays(
    base: tuple[CompiledRepo, Replay],
    head: tuple[CompiledRepo, Replay],
    ledger: Iterable[LedgerEntry],
    now: datetime,
) -> WhatIf:
    """Base's replay against head's, per queue (by name), with each budgeted queue's burn
    forecast at each replay's rate (from what ``ledger`` spent in its window by ``now``)."""
    (base_repo, before), (head_repo, after) = base, head
    measured = [p for p in after.played if not p.carried and p.run.arrival < after.until]
    if not measured:
        return WhatIf(after.since, after.until, 0)
    a, b = figures_of(before, base_repo), figures_of(after, head_repo)
    starts = {(p.run.operation, p.run.generation): p.start for p in before.played}
    moves: dict[str, list[StartMove]] = {}
    for p in measured:
        was = starts.get((p.run.operation, p.run.generation))
        if was == p.start:
            continue
        delta = None if was is None or p.start is None else (p.start - was).total_seconds()
        moves.setdefault(p.queue, []).append(
            StartMove(p.run.operation, p.run.generation, was, p.start, delta)
        )
    queues = []
    for name in sorted(set(a) | set(b)):
        moved = moves.get(name, [])
        later = sum(1 for m in moved if _later(m))
        top = sorted(moved, key=_moved_most)[:TOP_MOVES]
        queues.append(
            QueueReplay(
                name, a.get(name, _NONE), b.get(name, _NONE), later, len(moved) - later, tuple(top)
            )
        )
    entries = list(ledger)
    # the rate is over the span the history covers: from its first arrival, not before
    window = Window(max(after.since, min(p.run.arrival for p in measured)), after.until)
    span = hours(*window)  # 0 when the first arrival is within a millisecond of ``until``
    forecasts = []
    for name in sorted(set(base_repo.queues) | set(head_repo.queues)):
        sides: list[BurnForecast | None] = []
        for repo, replay in ((base_repo, before), (head_repo, after)):
            spec = repo.queues.get(name)
            if spec is None or spec.budget is None:
                sides.append(None)
                continue
            rate = spent(replay.ledger, name, spec.budget, window) / span if span else Decimal(0)
            sides.append(forecast_burn(budget_window(repo, name, entries, now), now, rate))
        if sides[0] is not None or sides[1] is not None:
            forecasts.append(ForecastMove(name, sides[0], sides[1]))
    return WhatIf(after.since, after.until, len(measured), tuple(queues), tuple(forecasts))


def _later(m: StartMove) -> bool:
    """Starts later in head (or only in base: not by the horizon in head)."""
    return m.after is None if m.seconds is None else m.seconds > 0


def _moved_most(m: StartMove) -> tuple[float, str, int]:
    """Most moved first (starting in one replay only counts as most), then by id."""
    return (-(math.inf if m.seconds is None else abs(m.seconds)), m.operation, m.generation)


# --- the burn forecast ------------------------------------------------------------------


def budget_window(
    repo: CompiledRepo, queue: str, ledger: Iterable[LedgerEntry], now: datetime
) -> BudgetWindow:
    """A budgeted queue's window at ``now`` and what the ledger's runs that had ended by
    ``now`` spent in it (``plan --now`` in the past: the ledger holds later runs too)."""
    spec = repo.queues[queue]
    assert spec.budget is not None
    org = repo.org
    window = window_at(now, spec.budget.per, org.timezone)
    used = spent((e for e in ledger if e.end <= now), queue, spec.budget, window)
    return BudgetWindow(queue, spec.budget, window, used, org.timezone, org.currency)


def forecast_burn(budget: BudgetWindow, now: datetime, rate: Decimal | None = None) -> BurnForecast:
    """When ``budget``'s limit is reached at ``rate`` per hour (default: the rate it was
    spent at so far in its window, ``spent`` over the hours since the window started)."""
    window = budget.window
    if rate is None:
        elapsed = hours(window.start, now)
        rate = budget.spent / elapsed if elapsed else Decimal(0)
    at = None
    left = budget.budget.limit - budget.spent
    # compared in hours first: a large limit at a small rate is centuries past any datetime
    if left > 0 and rate > 0 and left / rate < hours(now, window.end):
        moment = now + timedelta(hours=float(left / rate))
        at = moment if moment < window.end else None
    return BurnForecast(
        budget.queue,
        budget.budget,
        window,
        quantize(budget.spent),
        quantize(rate),
        at,
        budget.timezone,
        budget.unit,
    )


_PERIOD_WORD = {
    BudgetPeriod.DAY: "daily",
    BudgetPeriod.WEEK: "weekly",
    BudgetPeriod.MONTH: "monthly",
}


def ordinal(day: int) -> str:
    """``1st``, ``2nd``, ``11th``, ``23rd``."""
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def when_text(f: BurnForecast) -> str:
    """When the forecast reaches the limit, as its window reads it: ``the 23rd`` (a month),
    ``Thursday the 24th`` (a week), ``17:40`` (a day), in the budget's timezone; ``the
    window's end`` when not within it; ``already`` when reached."""
    if f.exhausted:
        return "already"
    if f.at is None:
        return f"no date this {f.budget.per}"
    local = f.at.astimezone(zone(f.timezone))
    if f.budget.per is BudgetPeriod.MONTH:
        return f"the {ordinal(local.day)}"
    if f.budget.per is BudgetPeriod.WEEK:
        return f"{local.strftime('%A')} the {ordinal(local.day)}"
    return local.strftime("%H:%M")


def forecast_text(f: BurnForecast) -> str:
    """``at this rate team-b spends its monthly budget by the 23rd``."""
    period = _PERIOD_WORD[f.budget.per]
    if f.exhausted:
        return f"{f.queue} has spent its {period} budget"
    if f.at is None:
        return f"at this rate {f.queue} does not spend its {period} budget this {f.budget.per}"
    return f"at this rate {f.queue} spends its {period} budget by {when_text(f)}"


def forecast_move_text(m: ForecastMove) -> str:
    """``at this rate team-b spends its monthly budget by the 23rd; this change moves that
    to the 19th``."""
    if m.base is None and m.head is not None:
        return f"{forecast_text(m.head)} (the change gives it its budget)"
    if m.head is None and m.base is not None:
        return f"{forecast_text(m.base)}; this change removes its budget"
    assert m.base is not None and m.head is not None
    before, after = when_text(m.base), when_text(m.head)
    if before == after:
        return f"{forecast_text(m.base)}; this change keeps that"
    if m.head.exhausted or m.head.at is None:
        head = forecast_text(m.head).removeprefix("at this rate ")
        return f"{forecast_text(m.base)}; with this change {head}"
    return f"{forecast_text(m.base)}; this change moves that to {after}"
