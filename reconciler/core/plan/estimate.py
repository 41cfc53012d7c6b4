"""When will each pending operation be dispatched: a p50 and a p90 estimate (pure).

What must live here: the duration estimate of a run (``DurationModel``: past runs of the same
operation, else of its project in its queue, else of its queue; capped by its timeout), the
forward simulation of the queues with the real planner (``estimate_starts``), the
classification of what cannot be dated (``EtaState``), and the one entry point every view
calls (``estimate_decision``). docs/estimates.md explains the rules with a worked example.

The simulation is event-driven and runs on the planner's own state (``whatif.WhatIf``,
built once with the planner's steps 1-3 from the cycle's plan): it jumps to the next time a
run is estimated to end, releases what ended from that state (it counts as ``Succeeded``)
and admits again with the planner's step 4 and 4b on it. It admits only the queues the event
can change (``_Sim.run``): the queue of what ended, the queues waiting for its cluster's
slots (first in the planner's order, as many as there are free slots), the queues of its
workflow's waiting children and of its dependents. Admitting the other queues again would
give them the same pending entries: nothing they wait for changed. Within a queue, a pass
stops once nothing later could be dispatched (``_full``; a BestEffortFIFO queue visits only
the candidates its checks 7-10 may let through, ``WhatIf.fitting``). A queue that shares
nothing with another, or the queues of a cluster whose concurrency they reach that share
only its slots (``_groups_apart``), are dated apart first, in one loop at their own runs'
ends (``_Sim._date_apart``), and left out of those events. p50 and p90 are two
simulations, one with every run at its p50 duration, one at its p90: each group apart is
dated in both in turn, then the p50 simulation runs its events, and the p90 its own from
the same state reverted.

The clock is an input (``now``); the same inputs give the same estimates. So is ``pause``:
called between the simulation's steps (each queue dated apart, each event), it lets the
caller hold the simulation while something with priority runs (the cycle thread, which
shares the interpreter with the estimate worker: ``runtime/estimates.py``).
"""

from __future__ import annotations

import bisect
import enum
import functools
import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import islice
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from reconciler.core import gcpause
from reconciler.core.decision.cycle import Decision
from reconciler.core.observation.capacity import ClusterCapacity
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import (
    REASON_TRAITS,
    DependenciesBlock,
    Dispatch,
    Pending,
    PendingReason,
    Plan,
)
from reconciler.core.plan.ledger import (
    LedgerEntry,
    LedgerKey,
    next_window,
    prices_for,
    run_cost,
    window_at,
)
from reconciler.core.plan.state import ActiveRun, QueueState, needed_slots
from reconciler.core.plan.whatif import WhatIf, dispatched
from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    ObservedOperation,
    Phase,
    QueueStrategy,
)

DEFAULT_HORIZON = timedelta(hours=24)
DEFAULT_RESOLUTION = timedelta(minutes=1)
_ZERO = Decimal(0)
_NANO = Decimal("1e-9")
P50 = 0.5
P90 = 0.9

# A replan first plans this many candidates of a queue (plus two per free slot)
PREFIX = 4
# ... and, when that head does not fill the queue, this many times more
GROW = 4
# A heap entry that is not a run's end: a budget window of the queue that follows resets
_RESET = "\x00reset\x00"
# ... or the time of an event of a group dated apart: nothing ends in the events then, but a
# queue a workflow's dispatch left stale is planned again, as at any event (``_Sim.stale``)
_TICK = "\x00tick"
# Called between the simulation's steps: returns when it may go on (``estimate_starts``)
Pause = Callable[[], None]


def _go_on() -> None:
    """The default ``Pause``: never holds the simulation."""


# --- history and durations --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run: which operation, in which queue, and how long it ran."""

    operation: str  # "project/name"
    queue: str | None
    seconds: float


def parse_time(text: str | None) -> datetime | None:
    """An ISO time from a workload or a status record (UTC when it names no zone)."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def runs_from_states(states: Iterable[WorkloadState]) -> tuple[RunRecord, ...]:
    """The finished runs among ``states`` (what the status branch records of each
    operation's last run): started (else dispatched) to finished. A run that failed counts
    too: it held its queue that long."""
    out = []
    for s in states:
        if not s.phase.finished or s.phase is Phase.STOPPED:
            continue
        start = parse_time(s.started_at) or parse_time(s.dispatched_at)
        end = parse_time(s.finished_at)
        if start is None or end is None or end < start:
            continue
        out.append(RunRecord(s.operation, s.queue, (end - start).total_seconds()))
    return tuple(sorted(out, key=lambda r: (r.operation, r.seconds)))


class Basis(enum.StrEnum):
    """Where a duration estimate came from, in the fallback order."""

    OPERATION = "Operation"  # past runs of the same operation
    PROJECT_QUEUE = "ProjectQueue"  # of its project in its queue
    QUEUE = "Queue"  # of its queue
    TIMEOUT = "Timeout"  # no history: the run's timeout (the latest it can end)
    UNKNOWN = "Unknown"  # no history and no timeout


class Duration(NamedTuple):
    """A run's estimated duration (a tuple: one is made for every simulated dispatch)."""

    seconds: float | None  # None: unknown
    basis: Basis


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of a sorted, non-empty sequence."""
    return sorted_values[_rank(q, len(sorted_values))]


def _rank(q: float, n: int) -> int:
    """Where the nearest-rank ``q`` quantile is in ``n`` sorted values (n > 0)."""
    return min(n - 1, max(0, math.ceil(q * n) - 1))


@functools.lru_cache(maxsize=1024)
def _ranks(n: int) -> tuple[int, int]:
    """Where the p50 and the p90 are in ``n`` sorted values (n > 0)."""
    return _rank(P50, n), _rank(P90, n)


def capped_quantile(samples: Sequence[float], q: float, timeout: float | None) -> float | None:
    """A run's duration: the ``q`` quantile of its ``samples``, never more than its
    ``timeout``; with no samples the timeout itself (None: unknown)."""
    if not samples:
        return timeout
    d = quantile(samples, q)
    return d if timeout is None else min(d, timeout)


def _on_step(seconds: float, step: float) -> float:
    """``seconds`` rounded to the resolution's ``step`` (none when it is 0): runs that end
    within the same step are released together, one replan for them all."""
    return round(seconds / step) * step if step > 0 else seconds


class DurationModel:
    """Past run durations, grouped for the fallback order."""

    __slots__ = ("by_operation", "by_project_queue", "by_queue")

    def __init__(self, runs: Iterable[RunRecord] = ()) -> None:
        # by (operation, queue) first: most operations' runs were all in one queue
        by_oq: dict[tuple[str, str | None], list[float]] = {}
        for r in runs:
            key = (r.operation, r.queue)
            got = by_oq.get(key)
            if got is None:
                by_oq[key] = [r.seconds]
            else:
                got.append(r.seconds)
        by_op: dict[str, list[float]] = {}
        by_pq: dict[tuple[str, str | None], list[float]] = {}
        by_q: dict[str | None, list[float]] = {}
        for (operation, queue), seconds in by_oq.items():
            by_pq.setdefault((operation.split("/", 1)[0], queue), []).extend(seconds)
            by_q.setdefault(queue, []).extend(seconds)
            mine = by_op.get(operation)
            if mine is None:
                by_op[operation] = seconds  # its own list from now on (copied above)
            else:
                mine.extend(seconds)
        for group in (by_op, by_pq, by_q):
            for values in group.values():
                values.sort()
        self.by_operation = by_op
        self.by_project_queue = by_pq
        self.by_queue = {k: v for k, v in by_q.items() if k is not None}

    def values(
        self, operation: str, queue: str | None, project: str | None = None
    ) -> Sequence[float]:
        """The past durations that stand for ``operation``'s, in the fallback order: its
        own, else its project's in its queue, else its queue's; () when none.
        ``project``: its project when the caller has it (the id's first part, a string
        made on each call else). Not memoised: a memo's first lookup costs twice this."""
        return (
            self.by_operation.get(operation)
            or self.by_project_queue.get(
                (operation.split("/", 1)[0] if project is None else project, queue)
            )
            or (self.by_queue.get(queue) if queue is not None else None)
            or ()
        )

    def samples(
        self, operation: str, queue: str | None, project: str | None = None
    ) -> tuple[Sequence[float], Basis]:
        """``values``, and which group they are."""
        values = self.values(operation, queue, project)
        if not values:
            return (), Basis.UNKNOWN
        if values is self.by_operation.get(operation):
            return values, Basis.OPERATION
        if queue is not None and values is self.by_queue.get(queue):
            return values, Basis.QUEUE
        return values, Basis.PROJECT_QUEUE

    def duration(
        self, operation: str, queue: str | None, q: float, timeout: float | None
    ) -> Duration:
        """The ``q`` quantile of the past durations, never more than ``timeout``; with no
        history the timeout itself, else unknown."""
        values, basis = self.samples(operation, queue)
        if not values:
            return Duration(timeout, Basis.TIMEOUT if timeout is not None else Basis.UNKNOWN)
        return Duration(capped_quantile(values, q, timeout), basis)

    def remaining(
        self, operation: str, queue: str | None, q: float, timeout: float | None, elapsed: float
    ) -> float | None:
        """Seconds left of a run that has run ``elapsed`` seconds: the ``q`` quantile of the
        past runs that lasted longer than that, minus ``elapsed``; 0 when none did (it is
        overdue: taken to end at once); capped by what its timeout leaves. None: unknown."""
        values, _ = self.samples(operation, queue)
        left: float | None
        if values:
            longer = values[bisect.bisect_right(values, elapsed) :]
            left = quantile(longer, q) - elapsed if longer else 0.0
        else:
            left = None if timeout is None else timeout - elapsed
        if timeout is not None and left is not None:
            left = min(left, timeout - elapsed)
        return None if left is None else max(0.0, left)


# --- the estimates ----------------------------------------------------------------------


class EtaState(enum.StrEnum):
    AT = "At"  # dispatched at ``at``
    # dispatched by ``at`` at the latest: it waits on a run with no history, taken to run
    # to its timeout (the latest it can end)
    NO_LATER_THAN = "NoLaterThan"
    AFTER_HORIZON = "AfterHorizon"  # not within the horizon
    UNKNOWN = "Unknown"  # waits on a run whose duration nobody can estimate
    BLOCKED = "Blocked"  # waits for an event no clock predicts (approval, resume, a fix)


@dataclass(frozen=True, slots=True)
class Eta:
    state: EtaState
    at: datetime | None = None

    def text(self, now: datetime, horizon: timedelta = DEFAULT_HORIZON) -> str:
        if self.state is EtaState.AT and self.at is not None:
            return "~" + duration_text((self.at - now).total_seconds())
        if self.state is EtaState.NO_LATER_THAN and self.at is not None:
            return "no later than " + duration_text((self.at - now).total_seconds())
        if self.state is EtaState.AFTER_HORIZON:
            return f"after {duration_text(horizon.total_seconds())}"
        if self.state is EtaState.UNKNOWN:
            return "unknown"
        return "not estimated"

    def to_json(self) -> dict[str, Any]:
        return {
            "state": str(self.state),
            "at": self.at.isoformat() if self.at is not None else None,
        }


def duration_text(seconds: float) -> str:
    """``<1 min``, ``40 min``, ``1 h 20 min`` (to 5 min below 3 h), ``3 h``."""
    if seconds < 60:
        return "<1 min" if seconds > 0 else "0 min"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    if seconds < 3 * 3600:
        h, m = divmod(round(seconds / 300) * 5, 60)
        return f"{h} h" if m == 0 else f"{h} h {m} min"
    return f"{round(seconds / 3600)} h"


class StartEstimate(NamedTuple):
    """When a pending operation is estimated to be dispatched (p50 ≤ p90). A tuple: one is
    made for every pending operation, each estimate (a dataclass's init costs 3 times)."""

    operation: str
    queue: str
    p50: Eta
    p90: Eta
    # why it cannot be dated: the pending reason no clock ends (``Blocked``), or the runs
    # with no duration estimate it waits on (``Unknown``)
    why: str = ""

    def text(self, now: datetime, horizon: timedelta = DEFAULT_HORIZON) -> str:
        """``~40 min (p90 ~1 h 10 min)``, ``after 24 h``, ``unknown``, ``not estimated``."""
        a, b = self.p50.text(now, horizon), self.p90.text(now, horizon)
        return a if a == b else f"{a} (p90 {b})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"p50": self.p50.to_json(), "p90": self.p90.to_json()}
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True, slots=True)
class Estimates:
    """Every pending operation's start estimate, as of ``at``."""

    at: datetime
    horizon: timedelta = DEFAULT_HORIZON
    pending: Mapping[str, StartEstimate] = field(default_factory=dict)
    # False: not computed yet (a view shows "estimates pending" for every operation it asks)
    ready: bool = True

    def of(self, operation: str) -> StartEstimate | None:
        return self.pending.get(operation)

    def text(self, operation: str) -> str:
        if not self.ready:
            return PENDING_TEXT
        e = self.pending.get(operation)
        return e.text(self.at, self.horizon) if e is not None else ""

    def json_of(self, operation: str) -> dict[str, Any] | None:
        """``{p50, p90, text[, why]}``: what every view's JSON says of ``operation``
        (``{p50: null, p90: null, text: "estimates pending", pending: true}`` before the
        first estimates are ready)."""
        if not self.ready:
            return {"p50": None, "p90": None, "text": PENDING_TEXT, "pending": True}
        e = self.pending.get(operation)
        if e is None:
            return None
        return {**e.to_json(), "text": e.text(self.at, self.horizon)}


PENDING_TEXT = "estimates pending"
NO_ESTIMATES = Estimates(datetime(1970, 1, 1, tzinfo=UTC))
# what a view shows before the worker has estimated any decision (runtime/estimates.py)
ESTIMATES_PENDING = Estimates(datetime(1970, 1, 1, tzinfo=UTC), ready=False)


# --- the simulation ---------------------------------------------------------------------


class _Active:
    """A run in the simulation: what it holds (as the planner counts it) and when it ends
    (None: unknown)."""

    __slots__ = ("end", "op", "run", "workflow")

    def __init__(self, run: ActiveRun, op: CompiledOperation | None, end: float | None) -> None:
        self.run = run
        self.op = op
        self.end = end
        self.workflow = run.workflow[0] if run.workflow is not None else None

    @property
    def oid(self) -> str:
        return self.run.oid

    @property
    def queue(self) -> str | None:
        return self.run.queue.spec.name if self.run.queue is not None else None

    @property
    def cluster(self) -> str | None:
        return self.run.cluster


class _Prepared:
    """What both simulations share: the operations, the cycle's pending entries sorted into
    what the clock can date and what it cannot, and the planner's own state after the
    cycle's plan (``WhatIf``: the first simulation moves it forward, ``revert`` brings it
    back for the second)."""

    def __init__(
        self,
        repo: CompiledRepo,
        plan: Plan,
        observed: Sequence[ObservedOperation],
        now: datetime,
        unreachable: frozenset[str],
        capacity: Mapping[str, ClusterCapacity],
        backends: Mapping[str, frozenset[str]],
        ledger: Sequence[LedgerEntry],
        model: DurationModel,
        resolution: timedelta,
        apart: bool = True,
        pause: Pause = _go_on,
    ) -> None:
        self.repo = repo
        self.model = model
        self.step = resolution.total_seconds()
        # per operation (``durations``: both simulations ask)
        self._of_op: dict[str, _Durations] = {}
        # per queue resources, a requests map's units by its id (``_apart_of``)
        self.units: dict[tuple[str, ...], dict[int, tuple[int, ...]]] = {}
        self.ops = repo.by_id  # once per compile, as the cycle's plan reads them
        # each workflow's queues: of all its children, pending, dispatched or running
        self.workflow_spans = repo.workflow_queues
        self.cluster_limit = {n: c.concurrency for n, c in repo.clusters.items()}
        # a cohort member's queue is planned with every member of its cohort (what it may
        # borrow, and what it lent, depends on their usage)
        self.cohort_mates: dict[str, tuple[str, ...]] = {}
        by_cohort: dict[str, list[str]] = {}
        for name, spec in repo.queues.items():
            if spec.cohort is not None:
                by_cohort.setdefault(spec.cohort, []).append(name)
        for members in by_cohort.values():
            for name in members:
                self.cohort_mates[name] = tuple(sorted(members))
        self.budgeted = frozenset(n for n, spec in repo.queues.items() if spec.budget is not None)
        self.fleet = frozenset(n for n, spec in repo.queues.items() if spec.fleet)
        self.blocked: dict[str, str] = {}  # operation -> why no clock ends its wait
        self.simulated: list[str] = []  # every pending op the clock can date, in order
        self.dependents: dict[str, list[str]] = {}
        # each workflow's queues of its pending children (``workflow_spans``: of all)
        self.pending_workflow_queues: dict[str, set[str]] = {}
        self.pending = plan.pending
        self._waits: tuple[frozenset[str], dict[str, list[_Wait]]] | None = None
        # per queue with an operation the clock can date: how many are for each cluster
        # (their own), and those operations in order; they are its candidates in the
        # what-if state (a pending operation was one in the cycle's plan, and the plan
        # lists each queue's in the order the planner sorted them)
        self.for_cluster: dict[str, dict[str, int]] = {}
        self.queue_ops: dict[str, list[CompiledOperation]] = {}
        mine: dict[str, tuple[dict[str, int], list[CompiledOperation]]] = {}
        for p in plan.pending:
            if p.reason in _STATIC or isinstance(p.blocked_by, DependenciesBlock):
                why = _static_block(p)
                if why:
                    self.blocked[p.operation] = why
                    continue
            pending = self.ops.get(p.operation)
            if pending is None:
                continue
            got = mine.get(p.queue)
            if got is None:
                got = mine[p.queue] = ({}, [])
            counts, listed = got
            counts[pending.cluster] = counts.get(pending.cluster, 0) + 1
            listed.append(pending)
            self.simulated.append(p.operation)
            for dep in pending.dependencies:
                self.dependents.setdefault(dep, []).append(p.operation)
            if pending.workflow is not None:
                self.pending_workflow_queues.setdefault(pending.workflow.parent, set()).add(p.queue)
        for name, (counts, listed) in mine.items():
            self.for_cluster[name] = counts
            self.queue_ops[name] = listed
        pause()
        # the cycle's state with its plan applied: what runs (started now when not known),
        # and what the plan dispatches, starting now
        seen = {
            o.operation: o if o.started_at is not None else replace(o, started_at=now)
            for o in observed
        }
        for d in plan.dispatch:
            seen[d.operation] = dispatched(d, self.ops[d.operation], now)
        plan_dispatched = frozenset(d.operation for d in plan.dispatch)
        stopped = frozenset(s.operation for s in plan.stop)
        self.whatif = WhatIf(
            repo,
            seen.values(),
            (),  # the candidates: once the queues dated apart are known (``index``)
            now,
            unreachable=unreachable,
            capacity=capacity,
            backends=backends,
            ledger=ledger,
            pause=pause,
        )
        pause()
        # a BestEffortFIFO queue with candidates for two clusters: after the one that waited
        # for a cluster, its pass may have dispatched one to the other, whose hold (its
        # quota, pods, concurrency, workflow) it meets when the slot frees (the cycle's
        # pass counts: what it dispatched is no candidate any more)
        targets = {name: set(counts) for name, counts in self.for_cluster.items()}
        for d in plan.dispatch:
            if d.queue in targets:
                targets[d.queue].add(d.cluster)
        strict = QueueStrategy.STRICT_FIFO
        self.two_clusters = frozenset(
            name
            for name, clusters in targets.items()
            if len(clusters) > 1 and repo.queues[name].strategy is not strict
        )
        # each run before the first event, in order: (id, run, its operation, and how long
        # it lasts from now when the plan stops it (0) or dispatches it now, else None: it
        # runs, and what is left of it depends on when it started)
        w = self.whatif
        self.runs: list[tuple[str, ActiveRun, CompiledOperation | None, _Durations | None]] = []
        for oid in sorted(w.runs):
            known = self.ops.get(oid)
            durations = None
            if oid in stopped:
                durations = _ENDS_NOW
            elif oid in plan_dispatched:
                assert known is not None
                durations = self.durations_of(oid, known)
            self.runs.append((oid, w.runs[oid], known, durations))
        # the queues whose simulation shares nothing with others' but a group's: dated apart
        self.apart = _groups_apart(self) if apart else []
        self.index(apart=False)

    def index(self, *, apart: bool) -> None:
        """The candidates of the queues dated apart (``apart``) or of the others in the
        what-if state: a queue apart needs none there, unless refused (``_Sim.refused``)."""
        names = {a.name for g in self.apart for a in g.members}
        self.whatif.index(
            op
            for name, listed in self.queue_ops.items()
            if (name in names) is apart
            for op in listed
        )

    def durations(self, oid: str, op: CompiledOperation) -> _Durations:
        """How long a run of ``op`` lasts at p50 and at p90, rounded to the resolution
        (``_on_step``; None: unknown), and whether its timeout alone dates it (its end
        bounds what is dispatched after it, ``_Sim._bounded``): computed once for both
        simulations."""
        got = self._of_op.get(oid)
        if got is None:
            got = self._of_op[oid] = self.durations_of(oid, op)
        return got

    def durations_of(self, oid: str, op: CompiledOperation) -> _Durations:
        """``durations``, not kept (what the plan dispatches now: asked once). Not shared
        between operations either: most have samples of their own, or of their project in
        their queue, which few others share."""
        timeout = _timeout(op)
        values = self.model.values(oid, op.queue, op.project)
        step = self.step
        if not values:
            if timeout is None:
                return _UNKNOWN
            end = _on_step(timeout, step)
            return (end, end, True)
        i, j = _ranks(len(values))
        a, b = values[i], values[j]
        if timeout is not None:
            a, b = min(a, timeout), min(b, timeout)
        return (_on_step(a, step), _on_step(b, step), False)

    def waits(self, apart: frozenset[str]) -> dict[str, list[_Wait]]:
        """Per queue with an operation the clock can date, but those ``apart``: the cycle's
        pending tuples (operation id, operation, reason). Both simulations ask."""
        if self._waits is not None and self._waits[0] == apart:
            return self._waits[1]
        out: dict[str, list[_Wait]] = {}
        wanted = self.for_cluster.keys() - apart
        get = self.ops.get
        for p in self.pending if wanted else ():
            if p.queue in wanted:
                out.setdefault(p.queue, []).append((p.operation, get(p.operation), p.reason))
        self._waits = (apart, out)
        return out


_Wait = tuple[str, CompiledOperation | None, PendingReason]
_NO_DEPS: frozenset[str] = frozenset()
# what a run of a group apart holds, and its id (``_Sim._date_apart``)
_Hold = tuple["_Counts | None", tuple[tuple[int, int], ...], int, str, bool, str]
# a run's duration at p50 and p90 (None: unknown), and whether its timeout alone dates it
_Durations = tuple[float | None, float | None, bool]
_ENDS_NOW: _Durations = (0.0, 0.0, False)  # a run the plan stops now
_UNKNOWN: _Durations = (None, None, False)  # no history and no timeout
_Candidate = tuple[
    str,
    CompiledOperation,
    tuple[tuple[int, int], ...],
    int,
    frozenset[str],
    str,
    int,
]
_ID = attrgetter("id")


class _Apart:
    """A queue dated apart (``_groups_apart``): what its own pass needs, as the state the
    planner built says before the first event. Its checks reduce to arithmetic on its own
    counters: 3 (its dependencies, all its own runs or candidates), 5-8 (its head,
    concurrency, ``maxPods`` and quota) and 9 (its workflows, all its own); and 10 on its
    group's one cluster whose slots it shares (``_Group``), if any; nothing else applies."""

    __slots__ = (
        "active",
        "candidates",
        "concurrency",
        "fit_sizes",
        "max_pods",
        "name",
        "never",
        "pods",
        "quota",
        "runs",
        "strict",
        "used",
        "wf_limit",
        "workflows",
    )

    def __init__(
        self,
        q: QueueState,
        candidates: list[_Candidate],
        never: int,
        runs: list[ActiveRun],
        workflows: dict[str, tuple[int, int | None]],
    ) -> None:
        spec = q.spec
        self.name = spec.name
        self.concurrency = spec.concurrency
        self.max_pods = spec.max_pods
        self.strict = spec.strategy is QueueStrategy.STRICT_FIFO
        self.quota = q.quota
        self.active = q.active
        self.pods = q.pods
        self.used = tuple(q.used)
        # in the planner's order: (id, operation, its request's (slot, units) where not 0,
        # its number among the queue's distinct (request, pods), dependencies not
        # succeeded before the first event, workflow parent or "", its pods and its
        # durations: a pass reads the operation itself only for what it dispatches)
        self.candidates = candidates
        self.never = never  # how many more it has that are never dispatched (check 4)
        self.runs = runs
        # per workflow parent: (active, limit)
        self.workflows = workflows
        self.wf_limit = {p: limit for p, (_, limit) in workflows.items()}
        # per distinct (request, pods): how many candidates have it
        sizes = [0] * (1 + max((c[3] for c in candidates), default=-1))
        for c in candidates:
            sizes[c[3]] += 1
        self.fit_sizes = tuple(sizes)


class _Group:
    """Queues dated together and apart from every other (``_groups_apart``): a queue that
    shares nothing, or the queues of one cluster whose concurrency they reach, which share
    its slots and nothing else (every candidate of theirs goes to it)."""

    __slots__ = ("cluster", "free", "members", "passive")

    def __init__(
        self,
        members: list[_Apart],
        cluster: str | None = None,
        free: int | None = None,
        passive: tuple[ActiveRun, ...] = (),
    ) -> None:
        self.members = members  # in the planner's order
        self.cluster = cluster  # the cluster whose slots they share (None: no limit binds)
        self.free = free  # its free slots before the first event
        # the other runs on it: of queues with nothing to dispatch, whose end frees a slot
        self.passive = passive


class _Counts:
    """A queue apart's counters as its simulation moves them; ``number``: its place in
    its group's order; ``waiting``: its last pass stopped at its cluster's slots."""

    __slots__ = ("active", "fits", "left", "live", "number", "pods", "used", "waiting", "wf_active")

    def __init__(self, a: _Apart, number: int) -> None:
        self.number = number
        # per distinct (request, pods): how many candidates left have it; how many have any
        self.fits = list(a.fit_sizes)
        self.live = sum(1 for n in self.fits if n)
        self.active = a.active
        self.pods = a.pods
        self.used = list(a.used)
        self.wf_active = {p: n for p, (n, _) in a.workflows.items()}
        self.left = list(a.candidates)  # its own: a pass takes what it dispatched out
        self.waiting = False


def _groups_apart(prep: _Prepared) -> list[_Group]:
    """The queues whose simulation shares nothing with other queues' but what ``_Group``
    says, so that dating them on their own, admitted only when their runs end, gives what
    the whole simulation gives: no cohort, budget, flavors or fleet; each dependency of a
    candidate succeeded already, or a run or candidate of the queue; no other queue's
    candidate depends on one of its operations; each workflow of its candidates and runs
    has all its children in the queue and all its active runs there, and one
    concurrency. Each of its candidates and runs is on a cluster with no concurrency limit
    or one that what holds it and every candidate for it never reach (a group of one), or
    its candidates all on one cluster that they reach: it is dated with every queue with a
    candidate for that cluster, when all of those are apart and every other run on the
    cluster is of a queue with nothing to dispatch and holds nothing else the simulation
    counts (``_passive``)."""
    w = prep.whatif
    repo = prep.repo
    demand: dict[str, int] = {}  # per cluster: the candidates that may go to it
    for name, counts in prep.for_cluster.items():
        fleet = repo.queues[name].clusters
        mine = [(cluster, sum(counts.values())) for cluster in fleet] or counts.items()
        for cluster, n in mine:
            demand[cluster] = demand.get(cluster, 0) + n

    def unbound(cluster: str | None) -> bool:
        if cluster is None:
            return True
        limit = prep.cluster_limit.get(cluster)
        counter = w.counters.clusters.get(cluster)
        held = 0 if counter is None else counter.active
        return limit is None or held + demand.get(cluster, 0) <= limit

    runs_of: dict[str, list[ActiveRun]] = {}
    runs_on: dict[str, list[ActiveRun]] = {}
    for _, run, _, _ in prep.runs:
        if run.queue is not None:
            runs_of.setdefault(run.queue.spec.name, []).append(run)
        if run.cluster is not None:
            runs_on.setdefault(run.cluster, []).append(run)
    out: list[_Group] = []
    shared: dict[str, list[_Apart]] = {}  # per cluster a limit binds: its queues apart
    spoiled: set[str] = set()  # ... those with a queue that is not
    for name in sorted(prep.queue_ops, key=w.order.__getitem__):
        q = w.qstate[name]
        spec = q.spec
        targets = set(spec.clusters) or set(prep.for_cluster[name])
        bound = {c for c in targets if not unbound(c)}
        bound.update(
            r.cluster
            for r in runs_of.get(name, ())
            if r.cluster is not None and not unbound(r.cluster)
        )
        got = None
        if (
            q.cohort is None
            and q.budget is None
            and not q.flavors
            and not spec.clusters
            and not spec.paused
            and name not in prep.cohort_mates
            and (not bound or (len(bound) == 1 and targets == bound))
        ):
            got = _apart_of(prep, q, runs_of.get(name, []))
        if got is None:
            spoiled |= bound
        elif not bound:
            out.append(_Group([got]))
        else:
            shared.setdefault(next(iter(bound)), []).append(got)
    for cluster in sorted(shared):
        if cluster in spoiled:
            continue
        queues = shared[cluster]
        own = {run.oid for a in queues for run in a.runs}
        passive = tuple(r for r in runs_on.get(cluster, ()) if r.oid not in own)
        if all(_passive(prep, r) for r in passive):
            limit = prep.cluster_limit[cluster]
            assert limit is not None  # it binds
            free = limit - w.counters.cluster(cluster).active
            out.append(_Group(queues, cluster, free, passive))
    return out


def _passive(prep: _Prepared, run: ActiveRun) -> bool:
    """Whether ``run``'s end changes nothing the simulation counts but its cluster's slot:
    its queue has no candidate, cohort, budget or fleet, nothing depends on it, and its
    workflow has no child waiting."""
    q = run.queue
    return (
        (
            q is None
            or (
                q.spec.name not in prep.queue_ops
                and q.cohort is None
                and q.budget is None
                and not q.spec.clusters
                and q.spec.name not in prep.cohort_mates
            )
        )
        and run.oid not in prep.dependents
        and (run.workflow is None or run.workflow[0] not in prep.pending_workflow_queues)
    )


def _apart_of(prep: _Prepared, q: QueueState, runs: list[ActiveRun]) -> _Apart | None:
    """``q`` as ``_Apart`` when its operations and workflows are its own (``_groups_apart``),
    else None."""
    w = prep.whatif
    name = q.spec.name
    cands = prep.queue_ops[name]
    own = {run.oid for run in runs}
    own.update(map(_ID, cands))
    dependents = prep.dependents
    if not dependents.keys().isdisjoint(own) and any(
        prep.ops[d].queue != name for oid in own for d in dependents.get(oid, ())
    ):
        return None
    parents: dict[str, set[int | None]] = {
        run.workflow[0]: set() for run in runs if run.workflow is not None
    }
    # per distinct (request, pods): its (slot, units) where not 0, and its number, or -1
    # when it alone exceeds the queue
    fits: dict[tuple[tuple[int, ...], int], tuple[tuple[tuple[int, int], ...], int]] = {}
    # each requests map in the units of a queue with the same resources, by its id: the
    # compile shares one per distinct map (``shared_amounts``), which the repo keeps alive
    units = prep.units.get(q.resources)
    if units is None:
        units = prep.units[q.resources] = {}
    kept = []
    never = 0
    max_pods = q.spec.max_pods
    quota = q.quota
    for op in cands:
        oid = op.id
        deps = []
        for d in op.dependencies:
            seen = w.seen.get(d)
            if seen is not None and seen.phase is Phase.SUCCEEDED:
                continue
            if d not in own:
                return None
            deps.append(d)
        wf = op.workflow
        if wf is not None:
            parents.setdefault(wf.parent, set()).add(wf.concurrency)
        requests = op.requests
        req = units.get(id(requests))
        if req is None:
            req = units[id(requests)] = q.request(requests)
        pods = op.replicas
        got = fits.get((req, pods))
        if got is None:
            needs = needed_slots(req)
            alone = (max_pods is not None and pods > max_pods) or any(
                a > quota[i] for i, a in needs
            )
            got = fits[req, pods] = (needs, -1 if alone else len(fits))
        needs, fit = got
        if fit < 0:
            # it waits for its dependencies now, then alone exceeds the queue (check 4):
            # never dispatched, and neither check holds the queue
            never += 1
            continue
        after = frozenset(deps) if deps else _NO_DEPS
        parent = wf.parent if wf else ""
        kept.append((oid, op, needs, fit, after, parent, pods))
    workflows = _workflows_apart(prep, name, own, parents)
    return None if workflows is None else _Apart(q, kept, never, runs, workflows)


def _workflows_apart(
    prep: _Prepared, queue: str, own: set[str], parents: Mapping[str, set[int | None]]
) -> dict[str, tuple[int, int | None]] | None:
    """Per workflow of ``queue``'s candidates and runs (``parents``: the concurrencies its
    candidates give), its active runs and its limit, or None when one is not the queue's
    alone: a child or an active run elsewhere, or two concurrencies (its counter takes
    the first candidate's)."""
    w = prep.whatif
    out: dict[str, tuple[int, int | None]] = {}
    for parent in sorted(parents):
        spans = prep.workflow_spans.get(parent, frozenset())
        if spans - {queue} or prep.pending_workflow_queues.get(parent, set()) - {queue}:
            return None
        counter = w.counters.workflows.get(parent)
        if counter is not None:
            if any(oid not in own for oid in counter.ids):
                return None
            out[parent] = (counter.active, counter.limit)
        elif len(parents[parent]) > 1:
            return None
        else:
            out[parent] = (0, next(iter(parents[parent]), None))
    return out


class _Sim:
    """One forward simulation (every run at the ``q`` quantile of its duration), on the
    planner's own state (``WhatIf``), which it leaves moved forward (``revert`` it)."""

    def __init__(
        self,
        prep: _Prepared,
        starts: Mapping[str, datetime],
        model: DurationModel,
        q: float,
        now: datetime,
        horizon: timedelta,
        resolution: timedelta,
        ledger: Iterable[LedgerEntry],
        pause: Pause = _go_on,
    ) -> None:
        self.pause = pause
        self.repo = prep.repo
        self.w = prep.whatif
        self.cohort_mates = prep.cohort_mates
        self.budgeted = prep.budgeted
        # the finished runs of each budgeted queue (what it spent): the ledger, then the
        # runs the simulation ends
        self.spent: dict[str, list[LedgerEntry]] = {q: [] for q in self.budgeted}
        # a run that ended before its queue's window began counts nothing in it, nor in any
        # later window: it is left out (at each reset, those that ended before it)
        since = {
            q: window_at(now, budget.per, prep.repo.org.timezone).start
            for q in self.budgeted
            for budget in (prep.repo.queues[q].budget,)
            if budget is not None
        }
        for entry in ledger:
            got = self.spent.get(entry.queue)
            if got is not None and entry.end >= since[entry.queue]:
                got.append(entry)
        self.model = model
        self.q = q
        self.qi = (P50, P90).index(q)  # its durations in ``_Prepared.durations``
        self.durations = prep.durations
        self.now = now
        # the earliest end of a run dated by its timeout alone (seconds from now)
        self.bound_from = math.inf
        self.end_of_horizon = horizon.total_seconds()  # seconds from now: the clock
        self.step = resolution.total_seconds()
        self.ops = prep.ops
        self.cluster_limit = prep.cluster_limit
        self.blocked = prep.blocked
        self.simulated = prep.simulated
        self.dependents = prep.dependents
        self.pending_workflow_queues = prep.pending_workflow_queues
        self.uncertain = {
            q for qs in prep.pending_workflow_queues.values() if len(qs) > 1 for q in qs
        }
        self.uncertain |= self.budgeted
        # a fleet queue may find a freed slot's cluster over its clusterQuota, or choose
        # another of its clusters: it does not count as taking the slot
        self.uncertain |= prep.fleet
        self.fleet = prep.fleet
        self.workflow_mates: dict[str, set[str]] = {}
        for mates in prep.workflow_spans.values():
            if len(mates) > 1:
                for name in mates:
                    self.workflow_mates.setdefault(name, set()).update(mates)
        self.uncertain.update(prep.cohort_mates)
        self.uncertain |= prep.two_clusters
        self.active: dict[str, _Active] = {}
        self.heap: list[tuple[float, str]] = []  # (seconds from now, operation)
        self.dispatched_at: dict[str, float] = {}  # seconds from now
        self.t = 0.0  # the last event's time (seconds from now)
        self.waits_on_cluster: dict[str, set[str]] = {}  # cluster -> queues
        self.queue_waits: dict[str, set[str]] = {}  # queue -> clusters
        self.exhausted = False
        # queue -> the head its replans grew to (the next replan starts from it)
        self.grown: dict[str, int] = {}
        # the queues of a workflow that spans queues whose child a replan dispatched: those
        # planned before that dispatch in the replan did not see it, the next cycle would
        # (a StrictFIFO head held at 10 or 11 may then wait at 9, which does not hold it)
        self.stale: set[str] = set()
        self.apart = prep.apart
        # per group apart, its runs' ends (seconds from now, id): the general events' heap
        # holds none of them
        self.apart_ends: list[list[tuple[float, str]]] = [[] for _ in self.apart]
        group_of: dict[str, int] = {}  # a queue apart, or a passive run's id: its group
        for k, g in enumerate(self.apart):
            group_of.update((a.name, k) for a in g.members)
            group_of.update((run.oid, k) for run in g.passive)
        self.apart_queues = frozenset(a.name for g in self.apart for a in g.members)
        for q_name, pend in prep.waits(self.apart_queues).items():
            self._note_waits(q_name, pend)
        self._budget_resets()
        # a queue apart left a candidate waiting at its last event before the horizon: the
        # reasons of what is left need the whole state (``_reasons_now``), which it did not
        # move; the caller simulates again without queues apart
        self.refused = False
        # what dating the groups apart found (``date_groups``): whether a candidate is left
        # (``refused`` if nothing else ends), the last event's time, whether the horizon
        # stopped none; and, when a workflow spans queues, the times of their events
        self.apart_left, self.apart_last, self.apart_exhausted = False, 0.0, True
        self.ticks: set[float] | None = set() if self.workflow_mates else None
        # what runs and what this cycle dispatches (starting now) ends: what it stops now
        seen = self.w.seen
        for oid, run, op, durations in prep.runs:
            if durations is None:
                end = self._running_end(seen[oid], op, starts)
            else:
                end = durations[self.qi]
                if end is not None and durations[2]:
                    self._bounded(end)
            home = group_of.get(run.queue.spec.name) if run.queue is not None else None
            if home is None:
                home = group_of.get(oid)
            if home is None:
                self._start(run, op, end)
            elif end is None:  # held to the end: only such runs of a group apart are kept
                self.active[oid] = _Active(run, op, end)
            else:
                self.apart_ends[home].append((end, oid))

    # --- durations ---

    def _end_from(self, start: float, op: CompiledOperation, oid: str) -> float | None:
        durations = self.durations(oid, op)
        seconds = durations[self.qi]
        if seconds is None:
            return None
        end = start + seconds
        if durations[2]:
            self._bounded(end)
        return end

    def _bounded(self, end: float) -> None:
        """A run taken to end at ``end`` only because its timeout says it cannot run longer:
        what is dispatched from then on is dated "no later than"."""
        self.bound_from = min(self.bound_from, end)

    def _budget_resets(self) -> None:
        """A heap entry at each reset of a budgeted queue's window within the horizon: what
        it spent and committed in its window changes then, and nothing else does."""
        org = self.repo.org
        for name in sorted(self.budgeted):
            if not self.w.candidates.get(name):
                continue
            budget = self.repo.queues[name].budget
            assert budget is not None
            window = window_at(self.now, budget.per, org.timezone)
            while True:
                at = (window.end - self.now).total_seconds()
                if at > self.end_of_horizon:
                    break
                heapq.heappush(self.heap, (at, _RESET + name))
                window = next_window(window, budget.per, org.timezone)

    def _running_end(
        self, o: ObservedOperation, op: CompiledOperation | None, starts: Mapping[str, datetime]
    ) -> float | None:
        start = min(starts.get(o.operation, self.now), self.now)
        elapsed = (self.now - start).total_seconds()
        name = o.operation.split("@", 1)[0]  # a superseded run ``op@gN`` ran as ``op``
        queue = o.queue or (op.queue if op is not None else None)
        # the run's own timeout (as dispatched): its file may have changed or gone
        timeout = float(o.timeout) if o.timeout is not None else None
        if timeout is None and op is not None:
            timeout = _timeout(op)
        left = self.model.remaining(name, queue, self.q, timeout, elapsed)
        if left is None:
            return None
        end = self._after(0.0, left)
        if not self.model.samples(name, queue)[0]:  # no history: its timeout alone
            self._bounded(end)
        return end

    def _after(self, start: float, seconds: float) -> float:
        """``start`` plus ``seconds`` rounded to the resolution (``_on_step``)."""
        return start + _on_step(seconds, self.step)

    # --- state ---

    def _start(self, run: ActiveRun, op: CompiledOperation | None, end: float | None) -> None:
        """The run ``run`` (counted by the planner's state), ending at ``end``."""
        self.active[run.oid] = _Active(run, op, end)
        if end is not None:
            heapq.heappush(self.heap, (end, run.oid))

    def _note_waits(self, queue: str, pending: Sequence[tuple[Any, ...]]) -> None:
        """Which clusters' slots ``queue``'s candidates wait for (check 10: an operation's
        own cluster, a fleet queue's: any of its clusters), from its pending tuples
        (operation id, operation, reason, ...)."""
        for c in self.queue_waits.pop(queue, ()):
            self.waits_on_cluster[c].discard(queue)
        clusters: set[str] = set()
        # most entries wait for neither: look for the two reasons once, at C speed
        reasons = set(map(itemgetter(2), pending))
        cluster_r = PendingReason.CLUSTER_CONCURRENCY_LIMIT
        if cluster_r in reasons:
            clusters.update(p[1].cluster for p in pending if p[2] is cluster_r)
        if PendingReason.NO_CLUSTER_UNDER_QUOTA in reasons:
            # a fleet queue's (check 10): each of its clusters at its concurrency or
            # over the queue's clusterQuota; a slot freed in any may take it
            clusters.update(self.repo.queues[queue].clusters)
        if clusters:
            self.queue_waits[queue] = clusters
            for c in clusters:
                self.waits_on_cluster.setdefault(c, set()).add(queue)

    # --- events ---

    def _run_events(self) -> None:
        heap = self.heap
        candidates = self.w.candidates
        pause = self.pause
        while heap:
            t = heap[0][0]
            if t > self.end_of_horizon:
                return
            pause()
            affected = self.stale
            self.stale = set()
            freed: set[str] = set()
            while heap and heap[0][0] == t:
                _, oid = heapq.heappop(heap)
                if oid == _TICK:
                    continue
                if oid.startswith(_RESET):
                    name = oid.removeprefix(_RESET)
                    affected.add(name)
                    start = self.now + timedelta(seconds=t)  # the new window's
                    self.spent[name] = [e for e in self.spent[name] if e.end >= start]
                else:
                    self._release(oid, affected, freed, t)
            # the queues whose own state moved (before any is added for a freed slot)
            changed = frozenset(affected) if freed else frozenset()
            for c in sorted(freed):
                self._cluster_waiters(c, affected, changed)
            # planned together: a cohort's members, and the queues of a workflow that spans
            # queues (a child dispatched in one may move a StrictFIFO head in another from a
            # check that holds the queue to one that does not, e.g. from 11 to 9)
            todo = list(affected)
            while todo:
                q = todo.pop()
                for other in (*self.cohort_mates.get(q, ()), *self.workflow_mates.get(q, ())):
                    if other not in affected:
                        affected.add(other)
                        todo.append(other)
            affected = {q for q in affected if candidates.get(q)}
            self.t = t
            if affected:
                self._replan(affected, t)
        self.exhausted = True

    def run(self) -> None:
        """1. the groups of queues apart, each on its own (``date_groups``);
        2. the others, event by event (``run_events``)."""
        for _ in self.date_groups():
            pass
        self.run_events()

    def date_groups(self) -> Iterator[None]:
        """Date each group of queues apart on its own (``_date_apart``), one per step: the
        caller may date the same group in another simulation before the next, while its
        candidates are still in the processor's cache."""
        for g, ends in zip(self.apart, self.apart_ends, strict=True):
            self.pause()
            waits, t = self._date_apart(g, ends, self.ticks)
            if waits is None:
                self.apart_exhausted = False
            else:
                self.apart_left = self.apart_left or waits
                self.apart_last = max(self.apart_last, t)
            yield

    def run_events(self) -> None:
        """The queues not dated apart, event by event (``_run_events``), once the groups
        are dated: a queue left stale by a workflow's dispatch is planned again at the next
        event of any queue (only such a workflow leaves one), so their events' times are
        events here too."""
        if self.ticks:
            self.heap.extend((t, _TICK) for t in self.ticks)
            heapq.heapify(self.heap)
        self._run_events()
        self.exhausted = self.exhausted and self.apart_exhausted
        if self.exhausted:
            self.t = max(self.t, self.apart_last)
            self.refused = self.apart_left

    def _date_apart(
        self, g: _Group, ends: list[tuple[float, str]], ticks: set[float] | None = None
    ) -> tuple[bool | None, float]:
        """Dispatch the queues of ``g`` at the end of each of their runs (and of its passive
        ones), as the planner's step 4 would on their own counters and their cluster's free
        slots (the checks they meet reduce to them, ``_Apart``): in the planner's order,
        each queue whose pass may dispatch, until the cluster is full. A pass may dispatch
        when its queue's own counters changed (a run of its own ended) or its last pass
        stopped at the full cluster; else it would find what that pass found: each
        candidate held by a check on counters that only its own runs' ends lower.
        Returns whether a candidate is left, or None when the horizon stopped it, and its
        last event's time; adds each event's time to ``ticks``."""
        members = g.members
        counts = [_Counts(a, k) for k, a in enumerate(members)]
        todo = set(range(len(members)))  # the queues whose pass may dispatch
        # what each run holds, to release it: (its queue's counts or None, its (slot,
        # units) where not 0, pods, workflow parent, whether it holds one of the cluster's
        # slots, its id)
        holds: dict[str, _Hold] = {}
        cluster = g.cluster
        for a, s in zip(g.members, counts, strict=True):
            for run in a.runs:
                parent = run.workflow[0] if run.workflow is not None else ""
                holds[run.oid] = (
                    s,
                    needed_slots(run.req),
                    run.pods,
                    parent,
                    run.cluster == cluster,
                    run.oid,
                )
        for run in g.passive:
            holds[run.oid] = (None, (), 0, "", True, run.oid)
        free = g.free
        done: set[str] = set()  # the runs ended: what a candidate's dependencies wait for
        track = any(c[4] for a in members for c in a.candidates)
        # what the runs hold by the time they end, and the times in a heap: those of one
        # step of the resolution end together, and are never ordered among themselves
        at: dict[float, list[_Hold]] = {}
        for end, oid in ends:
            got = at.get(end)
            if got is None:
                at[end] = [holds[oid]]
            else:
                got.append(holds[oid])
        times = list(at)
        heapq.heapify(times)
        horizon = self.end_of_horizon
        t = 0.0
        while times:
            t = times[0]
            if t > horizon:
                return None, t
            heapq.heappop(times)
            if ticks is not None:
                ticks.add(t)
            for owner, req, n, parent, slot, oid in at.pop(t):
                if slot and free is not None:
                    free += 1
                if owner is not None:
                    owner.active -= 1
                    owner.pods -= n
                    used = owner.used
                    for i, amount in req:
                        used[i] -= amount
                    if parent:
                        owner.wf_active[parent] -= 1
                    todo.add(owner.number)
                if track:
                    done.add(oid)
            if free is not None and free <= 0:
                continue  # each candidate goes to the cluster: none can be dispatched
            for k in sorted(todo):
                s = counts[k]
                if s.left:
                    free = self._pass_apart(members[k], s, t, free, done, at, times)
                    if s.waiting:
                        break  # the cluster is full: nothing after it can be dispatched
                todo.discard(k)
        return any(s.left or a.never for a, s in zip(g.members, counts, strict=True)), t

    def _pass_apart(
        self,
        a: _Apart,
        s: _Counts,
        t: float,
        free: int | None,
        done: set[str],
        at: dict[float, list[_Hold]],
        times: list[float],
    ) -> int | None:
        """The planner's pass over queue ``a``'s candidates left (``s``) at ``t``, with
        ``free`` slots left on its group's cluster (None: no limit); returns what it left.
        What it dispatches ends in ``at`` (``_date_apart``'s)."""
        active, pods, used = s.active, s.pods, s.used
        conc, max_pods, quota, strict = a.concurrency, a.max_pods, a.quota, a.strict
        wf_active = s.wf_active
        wf_limit = a.wf_limit
        fits, live = s.fits, s.live
        left = s.left
        qi = self.qi
        durations = self.durations
        unknown = self.active
        dispatched_at = self.dispatched_at
        taken: list[int] = []  # where the candidates it dispatched were in ``left``
        waiting = False
        # per (request, pods): it failed check 7 or 8 in this pass, as will any later with
        # the same (what the queue holds only grows within a pass)
        held = [False] * len(fits)
        # the workflows check 9 held in this pass, as it will hold their later children
        # (BestEffortFIFO: StrictFIFO meets checks 7 and 8 first, which may hold the queue)
        full: set[str] = set()
        unheld = live  # once none is left but held ones, every later candidate waits
        for k, cand in enumerate(left):
            if not strict and (held[cand[3]] or (full and cand[5] in full)):
                continue  # it waits at 7, 8 or 9, as one with its request or workflow did
            oid, op, needs, fit, deps, parent, n = cand
            # 3: its dependencies (its own operations) ended
            if deps and not done.issuperset(deps):
                continue
            # 6: concurrency (the rest waits too, at 6 or, StrictFIFO, at 5)
            if conc is not None and active >= conc:
                break
            # 7: maxPods, 8: quota (StrictFIFO: the rest waits behind it)
            if not held[fit]:
                if max_pods is not None and pods + n > max_pods:
                    held[fit] = True
                    unheld -= 1
                else:
                    for i, amount in needs:
                        if used[i] + amount > quota[i]:
                            held[fit] = True
                            unheld -= 1
                            break
            if held[fit]:
                if strict or not unheld:
                    break
                continue
            # 9: its workflow's parallelism
            if parent:
                limit = wf_limit[parent]
                if limit is not None and wf_active[parent] >= limit:
                    if not strict:
                        full.add(parent)
                    continue
            # 10: the cluster's slots (every later candidate of the group waits for them)
            if free is not None:
                if free <= 0:
                    waiting = True
                    break
                free -= 1
            if parent:
                wf_active[parent] += 1
            active += 1
            pods += n
            for i, amount in needs:
                used[i] += amount
            fits[fit] -= 1
            if not fits[fit]:
                live -= 1
                unheld -= 1
            taken.append(k)
            dispatched_at[oid] = t
            durs = durations(oid, op)  # only for what it dispatches: about half of them
            seconds = durs[qi]
            if seconds is None:
                run = ActiveRun.of(
                    dispatched(Dispatch(oid, op.queue, op.cluster, None), op, self.now),
                    op,
                    self.w.qstate,
                )
                unknown[oid] = _Active(run, op, None)
            else:
                end = t + seconds
                if durs[2] and end < self.bound_from:
                    self.bound_from = end
                hold = (s, needs, n, parent, free is not None, oid)
                got = at.get(end)
                if got is None:
                    at[end] = [hold]
                    heapq.heappush(times, end)
                else:
                    got.append(hold)
            if not unheld:
                break
        if len(taken) == 1:
            del left[taken[0]]
        elif taken:  # in one copy: a pass may take thousands
            rest = left[: taken[0]]
            for k, after in zip(taken, (*taken[1:], len(left)), strict=True):
                rest += left[k + 1 : after]
            s.left = rest
        s.active, s.pods, s.waiting, s.live = active, pods, waiting, live
        return free

    def _release(self, oid: str, affected: set[str], freed: set[str], t: float) -> None:
        a = self.active.pop(oid)
        self.w.release(oid)
        queue, cluster = a.queue, a.cluster
        if queue in self.budgeted:
            self._spend(a, t)
        if queue is not None:
            affected.add(queue)
        if cluster is not None and self.cluster_limit.get(cluster) is not None:
            freed.add(cluster)
        if a.workflow is not None:
            affected.update(self.pending_workflow_queues.get(a.workflow, ()))
        for d in self.dependents.get(oid, ()):
            op = self.ops[d]
            if d not in self.dispatched_at:
                affected.add(op.queue)

    def _spend(self, a: _Active, t: float) -> None:
        """A budgeted queue's run that ends: its ledger entry (its reservation returns,
        what it cost is spent), as the cycle that sees it end writes it."""
        run = a.run
        start = run.started or self.now
        end = self.now + timedelta(seconds=t)
        cluster = self.repo.clusters.get(a.cluster or "")
        q = run.queue
        flavor = q.flavors[run.flavor].name if q is not None and run.flavor >= 0 else None
        prices = prices_for(
            self.repo.org.prices,
            cluster.prices if cluster is not None else {},
            flavor,
            self.repo.org.flavor_prices,
            cluster.flavor_prices if cluster is not None else {},
        )
        requests = dict(run.requests)
        assert a.queue is not None
        key = LedgerKey(run.oid, 0, f"simulated@{t}")
        self.spent[a.queue].append(
            LedgerEntry.model_construct(  # its fields are of their types already
                operation=key.operation,
                generation=key.generation,
                workload=key.workload,
                queue=a.queue,
                cluster=a.cluster or "",
                phase=str(Phase.SUCCEEDED),
                requests=requests,
                start=start,
                end=end,
                cost=run_cost(requests, prices, start, end),
                currency=self.repo.org.currency,
            )
        )

    def _cluster_waiters(
        self, cluster: str, affected: set[str], changed: frozenset[str] = frozenset()
    ) -> None:
        """Add the queues waiting for ``cluster``'s slots, in the planner's order, until
        there are as many as free slots: each takes at least one (what kept it waiting was
        only the cluster), so a later one would find the cluster full again. A queue holding
        children of a workflow that spans queues is added but not counted; nor is one whose
        own state moved at this event (``changed``: a run of its own ended, a dependency,
        ...): an earlier candidate may now stop its pass before the cluster (a StrictFIFO
        one let through check 9 by its workflow's run's end, then held at 8 by what its
        queue dispatched meanwhile); nor a BestEffortFIFO one with candidates for two
        clusters (``uncertain``)."""
        limit = self.cluster_limit.get(cluster)
        waiting = self.waits_on_cluster.get(cluster)
        if limit is None or not waiting:
            return
        free = limit - self.w.counters.cluster(cluster).active
        if free <= 0:
            return
        certain = 0
        for q in sorted(waiting, key=self.w.order.__getitem__):
            affected.add(q)
            # a queue with children of a workflow that spans queues may find its workflow
            # full (another queue's child took it), a budgeted one its budget spent (check
            # 11 comes after the cluster's), a cohort member its cohort's quota taken by
            # another member: it does not count as taking a slot
            if q not in self.uncertain and q not in changed:
                certain += 1
                if certain >= free:
                    return

    def _replan(self, queues: set[str], t: float) -> None:
        """The planner's steps 4 and 4b over ``queues`` on its own state. A long queue's pass
        goes in parts: its first ``PREFIX`` candidates (and two per free slot), then ``GROW``
        times as many at a time, until it is full (``_full``: its concurrency, its
        StrictFIFO head, or a quota none of the rest fits in): the rest would only wait."""
        w = self.w
        candidates = w.candidates
        order = w.begin(queues, self.now + timedelta(seconds=t), self.spent)
        for q in order:
            name = q.spec.name
            full = candidates[name]
            limit = q.spec.concurrency
            if w.bucketed(q):
                # what fits may all be dispatched: as many as its free slots, at first
                self._pass_fitting(q, PREFIX if limit is None else max(1, limit - q.active))
                continue
            n = PREFIX + 2 * max(0, (limit or 0) - q.active)
            if q.spec.strategy is QueueStrategy.STRICT_FIFO:
                n = 1  # its head, held or not, says whether the rest is planned
            start = 0
            while True:
                stop = n if len(full) > n else None
                w.admit(q, full[start:stop])
                if stop is None:
                    break
                # the dispatches are still in ``full``: the rest starts at ``stop``
                if _full(q, full, stop, self._full_clusters(name)):
                    break
                start, n = stop, n * GROW
        dispatch = w.borrow(order)
        for d in dispatch:
            op = self.ops[d.operation]
            if op.workflow is not None:
                self.stale.update(self.workflow_mates.get(op.queue, ()))
            self.dispatched_at[d.operation] = t
            self._start(w.runs[d.operation], op, self._end_from(t, op, d.operation))
        for q in order:
            self._note_waits(q.spec.name, q.pending)

    def _pass_fitting(self, q: QueueState, n: int) -> None:
        """A BestEffortFIFO queue's pass over its candidates that may pass checks 7, 8 and
        10 (``WhatIf.fitting``), ``n`` then ``GROW`` times as many at a time, until none is
        left or its concurrency is reached."""
        w = self.w
        cluster_r = PendingReason.CLUSTER_CONCURRENCY_LIMIT
        limit = q.spec.concurrency
        after = None
        noted: set[str] = set()
        seen = 0
        while limit is None or q.active < limit:
            chunk = w.fitting(q, after, n if limit is None else min(n, limit - q.active), noted)
            if not chunk:
                return
            w.admit(q, chunk)
            pending = q.pending
            noted.update(p[1].cluster for p in pending[seen:] if p[2] is cluster_r)
            seen = len(pending)
            after = chunk[-1]
            n *= GROW

    def _full_clusters(self, queue: str) -> frozenset[str]:
        """The clusters a candidate of ``queue`` just waited for at check 10, at their
        concurrency (a single-cluster queue's: the cluster's count only grows while the
        planner goes on through the queue). Not a cohort member's: its later candidates'
        check 8 may still note what its cohort lends (``CohortState.waiting``)."""
        if queue in self.fleet or queue in self.cohort_mates:
            return frozenset()
        cluster_r = PendingReason.CLUSTER_CONCURRENCY_LIMIT
        return frozenset(p[1].cluster for p in self.w.qstate[queue].pending if p[2] is cluster_r)

    # --- results ---

    def _reasons_now(self) -> dict[str, PendingReason]:
        """Why each candidate still waits once nothing left is estimated to end: an
        admission of every queue with candidates at the last event's time, on the final
        state (reverted after: it dispatches nothing the simulation did not)."""
        w = self.w
        mark = w.mark()
        # a queue apart is left with no candidate (else the simulation was refused)
        waiting = [
            name for name, cands in w.candidates.items() if cands and name not in self.apart_queues
        ]
        order = w.begin(waiting, self.now + timedelta(seconds=self.t), self.spent)
        for q in order:
            w.admit(q, w.candidates.get(q.spec.name, []))
        w.borrow(order)
        reasons = {p[0]: p[2] for q in order for p in q.pending}
        w.revert(mark)
        return reasons

    def finish(self) -> _Dated:
        """What this simulation dates (``_Starts``), taken from its state before another
        moves it: when each candidate it dispatched was, and why each of the others that
        is not simply after the horizon waits (an unknown run's end, or what nothing left
        ends)."""
        unknown = [a for a in self.active.values() if a.end is None]
        other: dict[str, tuple[Eta, str]] = {}
        if unknown or self.exhausted:
            waits_on_unknown = _WaitsOnUnknown(self, unknown)
            last = self._reasons_now() if self.exhausted else {}
            blocked, undated = Eta(EtaState.BLOCKED), Eta(EtaState.UNKNOWN)
            for oid in self.simulated:
                if oid in self.dispatched_at:
                    continue
                if unknown and waits_on_unknown(oid):
                    why = _unknown_why(self.ops[oid], unknown, self.cluster_limit)
                    other[oid] = (undated, why)
                elif self.exhausted:
                    reason = last.get(oid)
                    why = f"{reason}: nothing it waits for is estimated to end" if reason else ""
                    other[oid] = (blocked, why)
        return _Dated(self.dispatched_at, self.bound_from, other)


class _Dated(NamedTuple):
    """What one simulation dates (``_Sim.finish``)."""

    dispatched_at: dict[str, float]  # seconds from now
    bound_from: float  # from then on, "no later than" (``_Sim._bounded``)
    other: dict[str, tuple[Eta, str]]  # not dispatched and not after the horizon: why


_AFTER = (Eta(EtaState.AFTER_HORIZON), "")
_NO_CLOCK = Eta(EtaState.BLOCKED)
_DATED = (EtaState.AT, EtaState.NO_LATER_THAN)


class _Starts(Mapping[str, StartEstimate]):
    """Every pending operation's ``StartEstimate``, derived when asked from what the two
    simulations say of it (its dispatch time in each, or why it has none) and its queue:
    its date in each (one ``Eta`` per step of the resolution, shared), or why it has none;
    the p90 never earlier than the p50. Kept as dicts of strings and floats, which the
    cyclic collector never scans (but for what a simulation says of an operation it could
    not date: a tuple each, in ``other``), and built in one pass over the pending
    operations: the estimate of each, as a tuple, cost a pass of its own (the longest
    after the simulations) and a scan of them all by the collector after every
    estimate."""

    __slots__ = ("_blocked", "_etas", "_now", "_p50", "_p90", "_queue")

    def __init__(
        self,
        pending: Sequence[Pending],
        blocked: Mapping[str, str],
        p50: _Dated,
        p90: _Dated,
        now: datetime,
    ) -> None:
        self._queue = {p.operation: p.queue for p in pending}
        self._blocked = blocked  # no clock dates these: why
        self._p50, self._p90 = p50, p90
        self._now = now
        # the ``Eta`` of each time of the p50 and the p90 simulation, made when first asked
        self._etas: tuple[dict[float, Eta], dict[float, Eta]] = ({}, {})

    def _eta(self, t: float, k: int, sim: _Dated) -> Eta:
        """A dispatch at ``t`` in ``sim``, the ``k``-th simulation."""
        got = self._etas[k].get(t)
        if got is None:
            state = EtaState.NO_LATER_THAN if t >= sim.bound_from else EtaState.AT
            got = self._etas[k][t] = Eta(state, self._now + timedelta(seconds=t))
        return got

    def __getitem__(self, operation: str) -> StartEstimate:
        queue = self._queue[operation]
        p50, p90 = self._p50, self._p90
        t = p50.dispatched_at.get(operation)
        if t is not None:
            a, why = self._eta(t, 0, p50), ""
        else:
            cause = self._blocked.get(operation)
            if cause is not None:
                return StartEstimate(operation, queue, _NO_CLOCK, _NO_CLOCK, cause)
            a, why = p50.other.get(operation, _AFTER)
        t = p90.dispatched_at.get(operation)
        if t is not None:
            b, why90 = self._eta(t, 1, p90), ""
        else:
            b, why90 = p90.other.get(operation, _AFTER)
        if b.state in _DATED and (
            a.state not in _DATED or (a.at is not None and b.at is not None and b.at < a.at)
        ):
            b = a  # the p90 is never earlier than the p50
        return StartEstimate(operation, queue, a, b, why or why90)

    def __contains__(self, operation: object) -> bool:
        return operation in self._queue

    def __iter__(self) -> Iterator[str]:
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)


class _WaitsOnUnknown:
    """Whether a pending operation waits on a run with no duration estimate (``unknown``):
    of its queue, of a cluster with a concurrency limit it may go to, of its workflow, or
    a dependency not yet dispatched that is one or waits on one. (A class, not a recursive
    closure: that is a reference cycle, which kept the simulation's whole state alive
    until the collector ran.)"""

    __slots__ = (
        "clusters",
        "dispatched_at",
        "ids",
        "memo",
        "ops",
        "queues",
        "seen",
        "spec",
        "workflows",
    )

    def __init__(self, sim: _Sim, unknown: Sequence[_Active]) -> None:
        self.queues = {a.queue for a in unknown}
        self.clusters = {
            a.cluster for a in unknown if sim.cluster_limit.get(a.cluster or "") is not None
        }
        self.workflows = {a.workflow for a in unknown if a.workflow is not None}
        self.ids = {a.oid for a in unknown}
        self.memo: dict[str, bool] = {}
        self.ops = sim.ops
        self.dispatched_at = sim.dispatched_at
        self.spec = sim.repo.queues
        self.seen = sim.w.seen

    def _clusters_of(self, op: CompiledOperation) -> tuple[str, ...]:
        """The clusters ``op`` may go to: its own, a fleet queue's any of them."""
        spec = self.spec.get(op.queue)
        return spec.clusters if spec is not None and spec.clusters else (op.cluster,)

    def _succeeded(self, oid: str) -> bool:
        o = self.seen.get(oid)
        return o is not None and o.phase is Phase.SUCCEEDED

    def __call__(self, oid: str, trail: frozenset[str] = frozenset()) -> bool:
        got = self.memo.get(oid)
        if got is not None:
            return got
        op = self.ops.get(oid)
        result = False
        if op is not None and oid not in trail:
            inner = trail | {oid}
            result = (
                op.queue in self.queues
                or not self.clusters.isdisjoint(self._clusters_of(op))
                or (op.workflow is not None and op.workflow.parent in self.workflows)
                or any(
                    d in self.ids or (d not in self.dispatched_at and self(d, inner))
                    for d in op.dependencies
                    if not self._succeeded(d)
                )
            )
        self.memo[oid] = result
        return result


def _full(
    q: QueueState,
    candidates: Sequence[tuple[Any, ...]],
    start: int,
    full: frozenset[str] = frozenset(),
) -> bool:
    """After its pass so far, none of ``q``'s candidates from ``start`` on could be
    dispatched: its concurrency is reached, its StrictFIFO head holds it, each goes to one
    of the ``full`` clusters (at their concurrency), or none of them fits in the pods
    (``maxPods``) and the quota it has left (compared as exact quantities: a request that
    fits by them may still not fit by the planner's rounding, never the other way round);
    a cohort member's, with what it may still borrow (``CohortState.room``). One flavor's
    quota is not all a queue with flavors may use: only its pods count then."""
    spec = q.spec
    if spec.strategy is QueueStrategy.STRICT_FIFO and any(
        REASON_TRAITS[p[2]].holds_head for p in q.pending
    ):
        return True
    if spec.concurrency is not None and q.active >= spec.concurrency:
        return True
    rest = islice(candidates, start, None)
    if full and all(c[5].cluster in full for c in rest):
        return True
    pods = None if spec.max_pods is None else spec.max_pods - q.pods
    if q.flavors or not q.resources:
        if pods is None:
            return False
        return all(c[5].replicas > pods for c in islice(candidates, start, None))
    cohort = q.cohort
    left = [
        (r, Decimal(q.quota[i] - q.used[i] if cohort is None else cohort.room(q, i)) * _NANO)
        for i, r in enumerate(q.resources)
    ]
    for c in islice(candidates, start, None):
        op = c[5]
        if pods is not None and op.replicas > pods:
            continue
        get = op.requests.get
        # none of a resource fits even a queue over its quota there (check 8 skips it)
        if all(not (v := get(r)) or v <= free for r, free in left):
            return False
    return True


def _timeout(op: CompiledOperation) -> float | None:
    """The op's timeout (its own, a sandbox's default or its queue's ``defaultTimeout``)."""
    return None if op.timeout is None else float(op.timeout)


_STATIC = frozenset(reason for reason, traits in REASON_TRAITS.items() if traits.static)


def _static_block(p: Pending) -> str:
    """Why no clock ends ``p``'s wait, or "" when the simulation can date it."""
    if p.reason in _STATIC:
        return f"{p.reason}: {p.admit.text}"
    b = p.blocked_by
    if isinstance(b, DependenciesBlock) and any(d.phase == "Missing" for d in b.waiting):
        missing = ", ".join(d.operation for d in b.waiting if d.phase == "Missing")
        return f"{p.reason}: {missing} is not in the repo"
    return ""


def _unknown_why(
    op: CompiledOperation, unknown: Sequence[_Active], limited: Mapping[str, int | None]
) -> str:
    """The runs with no estimate ``op`` waits on: of its queue, its dependencies, its
    workflow, then of its cluster when that has a concurrency limit."""
    wf = op.workflow.parent if op.workflow is not None else None
    ranked = sorted(
        (0 if a.queue == op.queue else 1, a.oid)
        for a in unknown
        if a.queue == op.queue
        or a.oid in op.dependencies
        or (wf is not None and a.workflow == wf)
        or (a.cluster == op.cluster and limited.get(op.cluster) is not None)
    )
    related = [oid for _, oid in ranked]
    shown = ", ".join(related[:3]) + (f" and {len(related) - 3} more" if len(related) > 3 else "")
    return f"waits on runs with no history and no timeout: {shown or 'a dependency'}"


def estimate_starts(
    repo: CompiledRepo,
    plan: Plan,
    observed: Sequence[ObservedOperation],
    starts: Mapping[str, datetime],
    history: Iterable[RunRecord],
    now: datetime,
    *,
    horizon: timedelta = DEFAULT_HORIZON,
    unreachable: Iterable[str] = (),
    resolution: timedelta = DEFAULT_RESOLUTION,
    backends: Mapping[str, frozenset[str]] | None = None,
    ledger: Iterable[LedgerEntry] = (),
    capacity: Mapping[str, ClusterCapacity] | None = None,
    apart: bool = True,
    pause: Pause = _go_on,
) -> Estimates:
    """Every pending operation of ``plan`` (the cycle's plan over ``observed`` at ``now``),
    with when it is estimated to be dispatched. ``starts`` are the active runs' start times
    (by planner id; missing: now); ``history`` the finished runs' durations. The other
    inputs are the plan's own: the ``unreachable`` clusters, the ``backends`` each serves,
    the ``ledger`` (what budgeted queues spent) and the free ``capacity`` observed per
    cluster (a fleet queue's choice of cluster, check 10: seen as observed now in every
    replan, docs/estimates.md). ``apart=False`` simulates the queues that share nothing
    with another with all the others (the same estimates, slower: the tests compare).
    ``pause`` is called between the simulation's steps, and holds it until it returns."""
    # thousands of replans allocate while the whole repo stays alive: pause the collector
    with gcpause.paused():
        blocked, p50, p90 = _simulate(
            repo,
            plan,
            observed,
            starts,
            DurationModel(history),
            now,
            horizon,
            resolution,
            frozenset(unreachable),
            backends or {},
            tuple(ledger),
            capacity or {},
            apart,
            pause,
        )
        return Estimates(now, horizon, _Starts(plan.pending, blocked, p50, p90, now))


def _simulate(
    repo: CompiledRepo,
    plan: Plan,
    observed: Sequence[ObservedOperation],
    starts: Mapping[str, datetime],
    model: DurationModel,
    now: datetime,
    horizon: timedelta,
    resolution: timedelta,
    unreachable: frozenset[str],
    backends: Mapping[str, frozenset[str]],
    ledger: tuple[LedgerEntry, ...],
    capacity: Mapping[str, ClusterCapacity],
    apart: bool,
    pause: Pause,
) -> tuple[dict[str, str], _Dated, _Dated]:
    """The p50 and the p90 simulations: each group of queues apart dated in both in turn
    (its candidates still in the processor's cache for the second), then the other queues
    in the p50, and in the p90 from the state the p50 started from. Returns what each
    dates, after why each operation no clock dates waits. Their state is let go on return,
    before the caller resumes the collector (which would otherwise scan all of it once)."""
    pause()
    prep = _Prepared(
        repo,
        plan,
        observed,
        now,
        unreachable,
        capacity,
        backends,
        ledger,
        model,
        resolution,
        apart,
        pause,
    )
    sims = [
        _Sim(prep, starts, model, q, now, horizon, resolution, ledger, pause) for q in (P50, P90)
    ]
    # 1. each group apart in both, one after the other (neither moves the what-if state)
    for _ in zip(*(sim.date_groups() for sim in sims), strict=True):
        pass
    # 2. the other queues in each, from the state the plan left
    results: list[_Dated] = []
    refused = False
    for q in (P50, P90):
        sim = sims.pop(0)  # let go once it has dated what it dates
        pause()
        if not refused:
            sim.run_events()
        if refused or sim.refused:  # simulated again with every queue, from where it started
            refused = True
            prep.whatif.revert()
            if prep.apart:
                prep.index(apart=True)
                prep.apart = []
            sim = _Sim(prep, starts, model, q, now, horizon, resolution, ledger, pause)
            sim.run()
        pause()
        results.append(sim.finish())
        if q == P50:  # nothing follows the p90
            prep.whatif.revert()
    return prep.blocked, results[0], results[1]


def starts_of(workloads: Mapping[str, WorkloadState]) -> dict[str, datetime]:
    """The start of each active run by planner id: started, else dispatched."""
    out = {}
    for oid, s in workloads.items():
        at = parse_time(s.started_at) or parse_time(s.dispatched_at)
        if at is not None:
            out[oid] = at
    return out


def runs_from_ledger(ledger: Iterable[LedgerEntry]) -> tuple[RunRecord, ...]:
    """The ledger's finished runs (start to end, its Job's own times), every one of them; a
    run stopped by the reconciler (removed from the repo, a gang that did not start) says
    nothing of how long the operation runs and is left out."""
    stopped = str(Phase.STOPPED)
    return tuple(
        RunRecord(e.operation, e.queue or None, e.duration_seconds)
        for e in ledger
        if e.phase != stopped
    )


def history_of(
    states: Iterable[WorkloadState], ledger: Iterable[LedgerEntry] = ()
) -> list[RunRecord]:
    """The runs a view knows: the ledger (every finished run, on the status branch), and
    each operation's last finished run the ledger does not hold (a run that ended before
    the ledger was kept). A run is counted once: by its ledger key (operation, generation,
    workload)."""
    entries = list(ledger)
    keys = {e.key for e in entries}
    out = list(runs_from_ledger(entries))
    out += runs_from_states(
        s for s in states if LedgerKey(s.operation, s.generation, s.name) not in keys
    )
    return out


def estimate_decision(
    compiled: CompiledRepo,
    decision: Decision,
    *,
    horizon: timedelta = DEFAULT_HORIZON,
    pause: Pause = _go_on,
) -> Estimates:
    """THE estimates of a cycle's decision, which every view shows: its plan simulated
    forward with the planner's own inputs (its observed state, clock ``plan.at``,
    unreachable clusters, backends served, ledger and observed capacity). The durations
    are those of the finished runs the decision knows: its ledger, and each operation's
    last run the ledger does not hold (``history_of``). Over ``decision.compiled``:
    ``compiled`` with the runs its schedules make at the decision's time. ``pause``: as
    ``estimate_starts``'s."""
    last = {**decision.memory.seen, **decision.states}  # each operation's last run, once
    ledger = decision.memory.ledger
    return estimate_starts(
        decision.compiled,
        decision.plan,
        decision.observed,
        starts_of(decision.workloads),
        history_of(last.values(), ledger),
        decision.plan.at,
        horizon=horizon,
        unreachable=decision.unreachable,
        backends=decision.backends,
        ledger=ledger,
        capacity=decision.capacity,
        pause=pause,
    )
