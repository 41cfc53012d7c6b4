"""A status commit's cycle, decided again from the commit alone (pure):
``replay(recorded, compiled) -> Decision``.

A status commit holds its cycle's records (each run after the cycle), the ledger, the
clusters' health and capacity, and ``status/_decision.yaml`` (:class:`DecisionRecord`):
the cycle's clock, the config commit in force, and what the planner counted that the
records no longer say (the runs this cycle created had none before it; those it stopped
were still active). With the config compiled at that commit, :func:`replay` calls the same
:func:`~reconciler.core.decision.cycle.decide` over the same inputs, so its plan is the
one the cycle made. :func:`differences` compares it with what the commit records.

What must live here: the decision record (its model and its parts), the inputs of decide
rebuilt from a status commit, ``replay`` and ``differences``; reading Git is
``runtime/why.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from reconciler.core.decision.cycle import (
    Decision,
    Memory,
    decide,
    listing_from_status,
    memory_from_status,
)
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import Dispatch, Pending, PendingReason, numbered
from reconciler.core.plan.checks import CHECKS, Check
from reconciler.core.plan.ledger import EARLIEST, LATEST
from reconciler.core.plan.partitions import Partition, restrict_repo, shard_scope
from reconciler.core.reporting.status import (
    DECISION_FILE,
    DecisionRecord,
    InputRun,
    QueueStatus,
    StatusReason,
    StatusView,
    SupersededRun,
    queue_kinds,
)
from reconciler.core.types import CompiledRepo, Location, Phase


class ReplayError(ValueError):
    """A commit that cannot be replayed: ``file:line:col: what is wrong``."""


def decision_record(
    compiled: CompiledRepo,
    decision: Decision,
    states: Mapping[str, WorkloadState],
    created: Iterable[str],
) -> DecisionRecord:
    """What a replay of ``decision`` needs besides the records of ``states`` (its report's):
    the ``created`` operations that had no run before, and the run each other operation
    had before the outcome changed it (a stop carried out, a create over a known run)."""
    before = decision.states
    dispatched = sorted(op for op in set(created) if op not in before)
    runs = tuple(
        InputRun(operation=op, **SupersededRun.of(state).model_dump())
        for op, state in sorted(before.items())
        if states.get(op) is not state
    )
    return DecisionRecord(
        clock=decision.plan.at.isoformat(),
        config=compiled.version,
        dispatched=tuple(dispatched),
        runs=runs,
    )


def recorded_clock(record: DecisionRecord) -> datetime:
    """The cycle's instant; a ``ReplayError`` when the record's is not one."""
    try:
        at = datetime.fromisoformat(record.clock)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ReplayError(
            # a hand-edited record's value may be any length: enough of it to find it
            f"{Location(DECISION_FILE, 1, 1)}: clock {record.clock[:40]!r}"
            f"{'...' if len(record.clock) > 40 else ''} is not an RFC 3339 time with an offset"
        )
    # the planner's dates (schedules, budget windows) step days around it
    if not EARLIEST <= at < LATEST:
        raise ReplayError(
            f"{Location(DECISION_FILE, 1, 1)}: clock {record.clock!r} is out of range "
            f"({EARLIEST.isoformat()} to {LATEST.isoformat()})"
        )
    return at


def replay(recorded: StatusView, compiled: CompiledRepo) -> Decision:
    """The decision of the cycle that wrote ``recorded`` (one status commit, read back),
    made again: its records with the runs the cycle counted before its outcome, the
    clusters as it read them, its ledger and clock. ``compiled`` is the config at the
    record's ``config`` commit."""
    record = recorded.decision
    if record is None:
        raise ReplayError(
            f"{Location(DECISION_FILE, 1, 1)}: missing: this commit records no decision"
        )
    now = recorded_clock(record)
    memory = memory_from_status(recorded)
    if record.clusters:  # a shard's cycle: its partitions alone, the others' runs aside
        decided = Partition("", record.clusters, record.queues)
        scope = shard_scope(compiled, [decided])
        compiled = restrict_repo(compiled, [decided])
        memory = memory.split(scope.clusters, scope.operations, scope.known_operations)[0]
    created = set(record.dispatched)
    seen = {op: s for op, s in memory.seen.items() if op not in created}
    for run in record.runs:
        state = run.state(run.operation)
        if state is None:
            raise ReplayError(
                f"{Location(DECISION_FILE, 1, 1)}: run of {run.operation} is not a workload "
                f"(phase {run.phase})"
            )
        seen[run.operation] = state
    every = replace(memory, seen=seen)
    listing = listing_from_status(compiled, recorded, every)
    # a cluster that was not read shows nothing: what the cycle counted there is memory's
    read = {name for name, got in listing.items() if got.reachable}
    kept = Memory(
        {op: s for op, s in seen.items() if s.cluster not in read},
        superseded={i: s for i, s in memory.superseded.items() if s.cluster not in read},
        gang_timeouts=memory.gang_timeouts,
        ledger=memory.ledger,
    )
    return decide(compiled, listing, kept, now)


# --- one operation's outcome ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """One operation in a replayed cycle: dispatched, pending (why, where, what would
    admit it), or neither (its run, or not in the plan)."""

    operation: str
    dispatch: Dispatch | None = None
    pending: Pending | None = None
    phase: str = ""  # neither: the phase of the run the cycle counted ("" none)
    position: int = 0  # pending: its position in its queue

    def summary(self) -> str:
        """One line, the same for the same outcome (the history prints its changes)."""
        if self.dispatch is not None:
            flavor = f" in flavor {self.dispatch.flavor}" if self.dispatch.flavor else ""
            return f"dispatched to {self.dispatch.cluster}{flavor} from {self.dispatch.queue}"
        if self.pending is not None:
            p = self.pending
            return f"pending {p.reason}, position {self.position} in {p.queue}: {p.message}"
        return self.phase or "not planned"


def outcome_of(decision: Decision, operation: str) -> OperationOutcome:
    for d in decision.plan.dispatch:
        if d.operation == operation:
            return OperationOutcome(operation, dispatch=d)
    for position, p in numbered(decision.plan.pending):
        if p.operation == operation:
            return OperationOutcome(operation, pending=p, position=position)
    state = decision.states.get(operation)
    return OperationOutcome(operation, phase=str(state.phase) if state is not None else "")


def deciding_check(reason: PendingReason) -> Check:
    """The check whose failure gives ``reason``."""
    return next(c for c in CHECKS if reason in c.reasons)


# --- a history of replayed cycles --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replayed:
    """One recorded cycle (a status commit, read back) and its replay."""

    commit: str
    at: datetime
    view: StatusView
    compiled: CompiledRepo
    decision: Decision

    def differences(self) -> list[str]:
        return differences(self.compiled, self.decision, self.view)


@dataclass(frozen=True, slots=True)
class OutcomeChange:
    """An operation's outcome from the cycle of ``commit`` (at ``at``) on."""

    at: datetime
    commit: str
    outcome: str

    def line(self) -> str:
        return f"{self.at.isoformat()}  {self.commit[:12]}  {self.outcome}"


def outcome_history(
    op_id: str, cycles: Iterable[Replayed]
) -> tuple[list[OutcomeChange], list[str]]:
    """One change per change of the operation's outcome, oldest first (the cycles it is in),
    and the cycles whose replay differs from their record."""
    changes: list[OutcomeChange] = []
    wrong: list[str] = []
    for cycle in cycles:
        found = cycle.differences()
        if found:
            wrong.append(f"status commit {cycle.commit[:12]}: {found[0]}")
        got = outcome_of(cycle.decision, op_id)
        if got.dispatch is None and got.pending is None and not got.phase:
            continue  # not in this cycle
        summary = got.summary()
        if not changes or changes[-1].outcome != summary:
            changes.append(OutcomeChange(cycle.at, cycle.commit, summary))
    return changes, wrong


@dataclass(frozen=True, slots=True)
class QueueDay:
    """One UTC day of a queue over the recorded cycles: its operations dispatched that day
    and how long they had waited (from the first recorded cycle that had them pending),
    and per quota resource the share of its quota held, weighted by how long each
    recorded cycle's figures stood (up to the next recorded cycle)."""

    day: date
    dispatched: int
    mean_wait: timedelta | None  # None: none of them was seen pending
    max_wait: timedelta | None
    utilisation: Mapping[str, float]


def queue_days(queue: str, cycles: Iterable[Replayed]) -> list[QueueDay]:
    """The queue's days over ``cycles`` (oldest first), oldest first."""
    waiting: dict[str, datetime] = {}
    waits: dict[date, list[timedelta | None]] = {}
    held: dict[date, dict[str, float]] = {}  # resource -> share x seconds
    spans: dict[date, float] = {}
    last: tuple[datetime, Mapping[str, float]] | None = None
    for cycle in cycles:
        record = cycle.view.decision
        if record is not None and record.clusters and queue not in record.queues:
            continue  # another shard's cycle: the queue's figures stand as last recorded
        at = cycle.at.astimezone(UTC)
        if last is not None:
            _spread(last[0], at, last[1], held, spans)
        for p in cycle.decision.plan.pending:
            if p.queue == queue:
                waiting.setdefault(p.operation, at)
        for d in cycle.decision.plan.dispatch:
            if d.queue == queue:
                since = waiting.pop(d.operation, None)
                waits.setdefault(at.date(), []).append(None if since is None else at - since)
        summary = next((q for q in cycle.decision.plan.queues if q.name == queue), None)
        shares = {}
        if summary is not None:
            shares = {
                r: float(summary.used_after.get(r, 0) / limit)
                for r, limit in summary.quota.items()
                if limit > 0
            }
        last = (at, shares)
    out = []
    for day in sorted(waits.keys() | spans.keys()):
        known = [w for w in waits.get(day, []) if w is not None]
        span = spans.get(day, 0.0)
        out.append(
            QueueDay(
                day,
                len(waits.get(day, [])),
                sum(known, timedelta()) / len(known) if known else None,
                max(known) if known else None,
                {r: v / span for r, v in sorted(held.get(day, {}).items())} if span else {},
            )
        )
    return out


def _spread(
    start: datetime,
    end: datetime,
    shares: Mapping[str, float],
    held: dict[date, dict[str, float]],
    spans: dict[date, float],
) -> None:
    """Count ``shares`` from ``start`` to ``end`` on each UTC day they cover."""
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), time(), UTC)
        stop = min(end, midnight)
        seconds = (stop - start).total_seconds()
        spans[start.date()] = spans.get(start.date(), 0.0) + seconds
        day = held.setdefault(start.date(), {})
        for r, share in shares.items():
            day[r] = day.get(r, 0.0) + share * seconds
        start = stop


# --- the replay against the record -------------------------------------------------------

_FAILED = frozenset({StatusReason.DISPATCH_FAILED.value, StatusReason.NAMESPACE_FORBIDDEN.value})
_PLANNED = frozenset(r.value for r in PendingReason)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def differences(compiled: CompiledRepo, decision: Decision, recorded: StatusView) -> list[str]:
    """Where the replayed ``decision`` and the commit ``recorded`` disagree on an
    operation (dispatched or not; pending with which reason, position and blocker) or,
    when every dispatch was carried out, on a queue's figures; empty when they agree."""
    record = recorded.decision
    created = set(record.dispatched) if record is not None else set()
    out: list[str] = []
    planned = {d.operation: d for d in decision.plan.dispatch}
    pending = {p.operation: p for p in decision.plan.pending}
    positions = decision.plan.positions()
    shard = set(record.queues) if record is not None and record.clusters else None
    for op_id, rec in sorted(recorded.operations.items()):
        if rec.children or (shard is not None and rec.queue not in shard):
            continue  # a parent (its children are), or another shard's
        if op_id in planned:
            if op_id not in created and not (rec.phase is Phase.QUEUED and rec.reason in _FAILED):
                out.append(
                    f"{op_id}: replay dispatches it; recorded {rec.phase} {rec.reason or ''}"
                )
            continue
        if op_id in created:
            out.append(f"{op_id}: recorded dispatched; replay does not dispatch it")
            continue
        p = pending.get(op_id)
        if p is None:
            if rec.phase is Phase.QUEUED and rec.reason in _PLANNED:
                out.append(f"{op_id}: recorded pending {rec.reason}; replay has it not pending")
            continue
        if rec.phase is not Phase.QUEUED or rec.reason != str(p.reason):
            out.append(f"{op_id}: replay pending {p.reason}; recorded {rec.phase} {rec.reason}")
        elif rec.position != positions[op_id]:
            out.append(f"{op_id}: replay position {positions[op_id]}; recorded {rec.position}")
        elif _plain(rec.blocked_by) != _plain(p.blocked_by.to_json()):
            out.append(f"{op_id}: replay blocked by {p.message!r}; recorded {rec.message!r}")
    if created >= planned.keys():  # every dispatch carried out: the plan's figures stand
        theirs = {q.name: q.to_dict() for q in recorded.queues}
        for q in decision.plan.queues:
            mine = QueueStatus.from_summary(q, queue_kinds(compiled, q.name)).to_dict()
            if _plain(mine) != _plain(theirs.get(q.name)):
                out.append(f"queue {q.name}: replay {mine}; recorded {theirs.get(q.name)}")
    return out


def queue_figures(decision: Decision, compiled: CompiledRepo, queue: str) -> QueueStatus | None:
    """A queue's figures in the replayed cycle, as ``queues.yaml`` writes them."""
    for q in decision.plan.queues:
        if q.name == queue:
            return QueueStatus.from_summary(q, queue_kinds(compiled, queue))
    return None
