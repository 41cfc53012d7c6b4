"""What one cycle shows: ``report(compiled, decision, outcome) -> Report`` (pure).

A :class:`~reconciler.core.decision.cycle.Decision` is what the planner predicts; an
:class:`Outcome` is what the runtime's apply step really did with its actions (created,
adopted, failed with its error, stopped); ``Outcome.none()`` is a dry run (``--live``,
``serve``, a follower, the shutdown's last look). The report is the one place where the two
meet, as gitops-engine's sync writes one result per resource from what actually happened:

- ``states``: the decision's, with each create's response and each stop;
- ``queues``: each queue's use, counted by the planner over those states: a failed create
  holds nothing, a dispatch not carried out is the queue's ``next``;
- ``failed``: the planned dispatches whose create failed (they stay ``Queued``, with
  their reason and error); ``carried_out``: those created or adopted.

Everything that shows a cycle (the status files, the queue pages, ``/api/v1``, the
metrics, ``queues`` and ``status``) reads a report, never the decision and the outcome
apart.

What must live here: ``Outcome``, ``Report`` and ``report``; the recount of queue use over
the states carried out; ``encode`` (a report as status files; ``encode_changes``, those
that changed since a writer's last) and the views read from a report. Nothing here
renders text: ``status.py`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain

from reconciler.core.decision.cycle import Decision, InFlight
from reconciler.core.observation.gang import GangTimeout
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import FlavorUsage, Plan, QueueSummary, plan_repo
from reconciler.core.plan.ledger import Ledger
from reconciler.core.reporting.replay import decision_record
from reconciler.core.reporting.status import (
    ClusterStatus,
    ConfigStatus,
    DecisionRecord,
    OperationStatus,
    QueueStatus,
    StatusDelta,
    StatusMemos,
    StatusReason,
    StatusView,
    build_status,
    join_records,
    listed_errors,
    queue_kinds,
    render_changes,
    render_status,
    stable_error,
)
from reconciler.core.types import CompiledRepo, ConfigError


@dataclass(frozen=True, slots=True)
class Failure:
    """A planned dispatch whose create failed: why, as a status reason, and the error."""

    reason: StatusReason
    error: str


def failures(
    errors: Mapping[str, str],
    reasons: Mapping[str, StatusReason],
    planned: Iterable[str],
) -> dict[str, Failure]:
    """The failed creates among ``errors`` (operation -> error of any failed action),
    each with its reason (``DispatchFailed`` unless ``reasons`` says another); a failed
    delete is not a failed dispatch."""
    wanted = set(planned)
    return {
        op: Failure(reasons.get(op, StatusReason.DISPATCH_FAILED), error)
        for op, error in errors.items()
        if op in wanted
    }


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the apply step did with a decision's actions, as a value."""

    created: tuple[InFlight, ...] = ()  # created or adopted, in plan order
    adopted: frozenset[str] = frozenset()  # of ``created``: found there already
    failed: Mapping[str, Failure] = field(default_factory=dict)
    stopped: tuple[WorkloadState, ...] = ()

    @classmethod
    def none(cls) -> Outcome:
        """Nothing carried out: a dry run."""
        return cls()

    @property
    def dispatched(self) -> tuple[str, ...]:
        """The operations whose workload this cycle created (not adopted)."""
        return tuple(
            c.state.operation for c in self.created if c.state.operation not in self.adopted
        )


@dataclass(frozen=True, slots=True)
class Report:
    """One cycle as every reader shows it. ``plan`` is the decision's, its ``queues``
    those of the report: in each, ``active + dispatching`` and the ``*_after`` fields are
    what ``states`` (and the superseded runs) hold, ``dispatching`` being this cycle's
    creates among them."""

    compiled: CompiledRepo
    plan: Plan
    states: Mapping[str, WorkloadState]
    carried_out: frozenset[str] = frozenset()  # planned dispatches created or adopted
    failed: Mapping[str, Failure] = field(default_factory=dict)  # planned, create failed
    next: Mapping[str, int] = field(default_factory=dict)  # per queue: planned, not tried
    superseded: Mapping[str, WorkloadState] = field(default_factory=dict)
    gang_timeouts: Mapping[str, GangTimeout] = field(default_factory=dict)
    ledger: Ledger | None = None  # None: the ledger files are left as they are
    clusters: tuple[ClusterStatus, ...] = ()
    # what a replay of the cycle needs besides the records (None: no decision was made)
    record: DecisionRecord | None = None

    @property
    def queues(self) -> tuple[QueueSummary, ...]:
        return self.plan.queues

    @property
    def workloads(self) -> dict[str, WorkloadState]:
        """``states`` and the superseded runs, which hold quota too."""
        if not self.superseded:
            return dict(self.states)
        return {**self.states, **self.superseded}

    def upcoming(self, queue: str) -> tuple[str, ...]:
        """The queue's planned dispatches not carried out nor failed, in plan order."""
        return tuple(
            d.operation
            for d in self.plan.dispatch
            if d.queue == queue
            and d.operation not in self.carried_out
            and d.operation not in self.failed
        )


def report(compiled: CompiledRepo, decision: Decision, outcome: Outcome) -> Report:
    """The decision with what was carried out of it (pure), over ``decision.compiled``:
    ``compiled`` with the runs its schedules make at the decision's time."""
    compiled = decision.compiled
    states = dict(decision.states)
    for c in outcome.created:
        states[c.state.operation] = c.state
    for s in outcome.stopped:
        states[s.operation] = s
    carried = frozenset(c.state.operation for c in outcome.created)
    left = [d for d in decision.plan.dispatch if d.operation not in carried]
    if not left:  # all carried out: the planner counted exactly these states
        queues = decision.plan.queues
    elif not carried and not outcome.stopped:  # none: the states are the planner's input
        queues = tuple(_held_before(q) for q in decision.plan.queues)
    else:
        stopped = {s.operation for s in outcome.stopped}
        queues = recount(compiled, decision, states, carried | stopped)
    return Report(
        compiled=compiled,
        plan=replace(decision.plan, queues=queues),
        states=states,
        carried_out=carried,
        failed=dict(outcome.failed),
        next=dict(Counter(d.queue for d in left if d.operation not in outcome.failed)),
        superseded=decision.superseded,
        gang_timeouts=decision.memory.gang_timeouts,
        ledger=decision.memory.ledger,
        clusters=decision.cluster_records(),
        record=decision_record(compiled, decision, states, carried),
    )


def expected(compiled: CompiledRepo, decision: Decision) -> Report:
    """The report of ``decision`` if every planned create succeeds: what the status branch
    says after the next cycle (``status --live``). A dispatch is then recorded without its
    create's response (``Dispatched``, ``WorkloadCreated``), and each queue's use is the
    plan's with its dispatches. Over ``decision.compiled``, as ``report``."""
    return Report(
        compiled=decision.compiled,
        plan=decision.plan,
        states=decision.states,
        carried_out=frozenset(d.operation for d in decision.plan.dispatch),
        superseded=decision.superseded,
        gang_timeouts=decision.memory.gang_timeouts,
        ledger=decision.memory.ledger,
        clusters=decision.cluster_records(),
    )


def planned_report(
    compiled: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    *,
    carried_out: bool,
    failed: Mapping[str, Failure] | None = None,
    clusters: tuple[ClusterStatus, ...] = (),
) -> Report:
    """The report of a plan made over ``states`` without a decision (a plan from the
    status branch, a test's): every planned dispatch carried out (but ``failed``), the
    plan's counts as they are; or none, its counts before the plan."""
    failed = dict(failed or {})
    if carried_out:
        return Report(
            compiled,
            plan,
            states,
            carried_out=frozenset(d.operation for d in plan.dispatch) - failed.keys(),
            failed=failed,
            clusters=clusters,
        )
    return Report(
        compiled,
        replace(plan, queues=tuple(_held_before(q) for q in plan.queues)),
        states,
        next=dict(Counter(d.queue for d in plan.dispatch)),
        clusters=clusters,
    )


def _held_before(q: QueueSummary) -> QueueSummary:
    """The summary of what the planner found held, before its plan."""
    budget = q.budget
    return replace(
        q,
        dispatching=0,
        used_after=q.used,
        pods_after=q.pods,
        borrowed_after=q.borrowed,
        lent_after=q.lent,
        budget=None if budget is None else replace(budget, committed_after=budget.committed),
        flavors=tuple(_flavor_before(f) for f in q.flavors),
    )


def _flavor_before(f: FlavorUsage) -> FlavorUsage:
    return replace(f, used_after=f.used, borrowed_after=f.borrowed, lent_after=f.lent)


def recount(
    compiled: CompiledRepo,
    decision: Decision,
    states: Mapping[str, WorkloadState],
    changed: frozenset[str],
) -> tuple[QueueSummary, ...]:
    """Each queue's use over ``states``, counted by the planner itself: the decision's
    planner input with the ``changed`` operations' states, every queue paused (so nothing
    is dispatched and what it counts is what is held). Why each operation waits is the
    decision's."""
    observed = [o for o in decision.observed if o.operation not in changed]
    observed += [states[op].to_observed() for op in sorted(changed) if op in states]
    paused = replace(
        compiled, queues={n: replace(q, paused=True) for n, q in compiled.queues.items()}
    )
    counted = plan_repo(
        paused,
        observed,
        decision.plan.at,
        superseded=decision.superseded,
        unreachable=decision.unreachable,
        capacity=decision.capacity,
        backends=decision.backends,
        ledger=decision.memory.ledger,
    )
    held = {q.name: _held_before(q) for q in counted.queues}
    return tuple(
        replace(
            held[q.name],
            pending=q.pending,
            head_reason=q.head_reason,
            paused=q.paused,
        )
        if q.name in held
        else q
        for q in decision.plan.queues
    )


def encode(
    shown: Report,
    *,
    config_error: tuple[ConfigError, ...] = (),
    config_version: str | None = None,
    internal_error: str = "",
    memos: StatusMemos | None = None,
) -> dict[str, bytes]:
    """Every status file of the report, by path (``render_status``; ``memos``: the
    writer's, kept between cycles). A planned dispatch is recorded as dispatched only when
    it was carried out; one whose create failed is ``Queued`` with its reason and error;
    one not carried out (a dry run) is ``Queued``. A report of a decision also writes the
    decision record, what a replay of its cycle needs (``core/reporting/replay.py``)."""
    files = render_status(
        shown.compiled,
        _tried(shown),
        shown.states,
        config_error=config_error,
        config_version=config_version,
        internal_error=internal_error,
        failed={op: (f.reason, f.error) for op, f in shown.failed.items()},
        clusters=shown.clusters,
        superseded=shown.superseded,
        gang_timeouts=shown.gang_timeouts,
        ledger=shown.ledger,
        **(memos.arguments() if memos is not None else {}),
    )
    if shown.record is None:
        return files
    files.update(shown.record.files())
    return dict(sorted(files.items()))


def encode_changes(
    shown: Report,
    memos: StatusMemos,
    *,
    config_error: tuple[ConfigError, ...] = (),
    config_version: str | None = None,
    internal_error: str = "",
    pause: Callable[[], None] | None = None,
) -> StatusDelta:
    """``encode`` for a writer that keeps ``memos``: its files (equal to ``encode``'s) and
    those that differ from its last call's, rendered again alone (``render_changes``, held
    at each ``pause``)."""
    return render_changes(
        shown.compiled,
        _tried(shown),
        shown.states,
        memos,
        config_error=config_error,
        config_version=config_version,
        internal_error=internal_error,
        failed={op: (f.reason, f.error) for op, f in shown.failed.items()},
        clusters=shown.clusters,
        superseded=shown.superseded,
        gang_timeouts=shown.gang_timeouts,
        ledger=shown.ledger,
        decision=None if shown.record is None else shown.record.files(),
        pause=pause,
    )


def status_view(shown: Report) -> StatusView:
    """What the status branch says once ``encode(shown)`` is written, as read back
    (``read_status``), made from the report without the files: ``status --live``."""
    built = build_status(
        shown.compiled,
        _tried(shown),
        shown.states,
        {op: (f.reason, f.error) for op, f in shown.failed.items()},
        shown.superseded,
    )
    records: dict[str, OperationStatus] = {}
    for record in built:
        mark = shown.gang_timeouts.get(record.operation)
        if mark is not None:
            record = record.model_copy(update={"gang_timeouts": mark.to_json()})
        records[record.operation] = record
    order: dict[str, list[str]] = {}
    for p in shown.plan.pending:
        order.setdefault(p.queue, []).append(p.operation)
    repo = shown.compiled
    join_records(records, shown.plan.positions(), repo.version)
    queues = tuple(
        QueueStatus.from_summary(q, queue_kinds(repo, q.name)) for q in shown.plan.queues
    )
    clusters = tuple(
        sorted(
            (c.model_copy(update={"error": stable_error(c.error)}) for c in shown.clusters),
            key=lambda c: c.name,
        )
    )
    warnings = (shown.plan.prune_refused.message(),) if shown.plan.prune_refused is not None else ()
    config = ConfigStatus(
        version=repo.version,
        applied=repo.version,
        valid=not repo.errors,
        errors=listed_errors(str(e) for e in sorted(repo.errors)),
        warnings=warnings,
    )
    ledger = () if shown.ledger is None else tuple(chain(*shown.ledger.months().values()))
    return StatusView(
        dict(sorted(records.items())),
        queues,
        config,
        (),
        clusters,
        ledger,
        {q: tuple(ids) for q, ids in sorted(order.items())},
        decision=shown.record,
    )


def _tried(shown: Report) -> Plan:
    """The report's plan with only the dispatches carried out or tried."""
    plan = shown.plan
    if len(shown.carried_out) + len(shown.failed) < len(plan.dispatch):
        tried = shown.carried_out | shown.failed.keys()
        plan = replace(plan, dispatch=tuple(d for d in plan.dispatch if d.operation in tried))
    return plan
