"""Plans for pull requests: compare two revisions of the config repo, each compiled and
planned against the same observed state, and say what the change would do.

Pure: ``diff_plans((base_repo, base_plan), (head_repo, head_plan)) -> PlanDiff``, then
``diff_to_markdown`` (a PR comment) or ``diff_to_json``.

What must live here: the comparison of two plans (``diff_plans``: queue, operation, budget,
flavor, position and stop changes) and its JSON and Markdown renderings.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciler.core.decision.schedule import next_fires, schedule_groups
from reconciler.core.plan import Admit, BudgetSummary, Pending, PendingReason, Plan, StopReason
from reconciler.core.plan.estimate import NO_ESTIMATES, Estimates
from reconciler.core.plan.ledger import prices_for, utc_text
from reconciler.core.quantity import format_duration, format_quantity
from reconciler.core.types import (
    ClusterSpec,
    CohortSpec,
    CompiledOperation,
    CompiledRepo,
    OrgSettings,
    Provenance,
    QueueSpec,
    RejectedOperation,
    RejectReason,
    printable_path,
)
from reconciler.core.views.plan_render import md_code, md_escape, md_table


class Change(enum.StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One leaf that differs. ``before``/``after`` are JSON-ready values (None when absent on
    that side, see ``change``); ``*_from`` say which file, line and merge step set it."""

    path: str
    change: Change
    before: Any = None
    after: Any = None
    before_from: Provenance | None = None
    after_from: Provenance | None = None


@dataclass(frozen=True, slots=True)
class QueueChange:
    name: str
    change: Change
    fields: tuple[FieldChange, ...]
    source: str = ""  # the queue's file in head (or base when removed)


@dataclass(frozen=True, slots=True)
class OperationChange:
    operation: str
    change: Change
    fields: tuple[FieldChange, ...]
    path: str = ""


@dataclass(frozen=True, slots=True)
class Transition:
    """An operation whose planned fate differs. ``before`` is its base state: ``dispatch``,
    a pending reason, or ``absent`` (not a candidate in base)."""

    operation: str
    queue: str
    before: str
    reason: PendingReason | None = None  # head reason when pending
    position: int | None = None
    message: str = ""
    admit: Admit | None = None  # head: what would admit it, when pending
    blocked_by: Mapping[str, Any] | None = None  # head: what holds it (``blockedBy``)
    flavor: str | None = None  # head: the flavor a dispatch is assigned (a queue with flavors)


@dataclass(frozen=True, slots=True)
class PendingCount:
    queue: str
    before: int | None  # None: the queue does not exist on that side
    after: int | None

    @property
    def delta(self) -> int:
        return (self.after or 0) - (self.before or 0)


@dataclass(frozen=True, slots=True)
class EstimateMove:
    """A pending operation whose start estimate the change moves (``before``: its base
    estimate, or ``dispatched now`` when base dispatches it this cycle)."""

    operation: str
    queue: str
    before: str
    after: str
    before_json: Mapping[str, Any] | None = None
    after_json: Mapping[str, Any] | None = None

    @property
    def sentence(self) -> str:
        return f"this change moves {self.operation} from {self.before} to {self.after}"


@dataclass(frozen=True, slots=True)
class BorrowingChange:
    """A queue whose right to borrow from its cohort changes: ``before``/``after`` say what
    it may borrow on each side (None: it may not borrow)."""

    queue: str
    before: str | None
    after: str | None

    @property
    def verdict(self) -> str:
        if self.before is None:
            return "may borrow"
        if self.after is None:
            return "stops borrowing"
        return "borrows differently"


@dataclass(frozen=True, slots=True)
class FlavorMove:
    """An operation both plans dispatch, to another flavor in head than in base (``None``:
    its queue has no flavors on that side)."""

    operation: str
    queue: str
    before: str | None
    after: str | None

    @property
    def text(self) -> str:
        """``vision/train-3 h100 → a100``."""
        return f"{self.operation} {self.before or 'no flavor'} → {self.after or 'no flavor'}"


@dataclass(frozen=True, slots=True)
class BudgetChange:
    """A budgeted queue whose budget window reads differently in head: its limit, what it
    spent and committed, and what it commits with the plan's dispatches (the burn the
    change implies), each as ``BudgetSummary`` JSON (None: no budget on that side)."""

    queue: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class PositionMove:
    """An operation pending in both plans in the same queue, at another position in head
    (an operation's ``priority``, or one added or gone ahead of it, moves it)."""

    operation: str
    queue: str
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class StopChange:
    """An operation head stops and base did not: ``reason`` is ``StoppedInRepo`` (its
    ``stopped: true``) or ``RemovedFromRepo``; ``action`` what merging does to it."""

    operation: str
    queue: str
    reason: str
    action: str  # "delete" (its active run's workload) or "hold" (not dispatched)


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """A schedule the change adds, alters or removes, with its next fire times (UTC) in
    head at the plan's time (none when removed)."""

    operation: str
    change: Change
    next: tuple[str, ...] = ()


# A PR plan shows this many of a schedule's next fire times.
NEXT_FIRES = 3


@dataclass(frozen=True, slots=True)
class PlanDiff:
    base_version: str
    head_version: str
    queues: tuple[QueueChange, ...]
    operations: tuple[OperationChange, ...]
    newly_dispatched: tuple[Transition, ...]
    newly_pending: tuple[Transition, ...]
    newly_exceeds_quota: tuple[Transition, ...]
    newly_policy_violation: tuple[RejectedOperation, ...]
    newly_stopped: tuple[str, ...]
    pending_counts: tuple[PendingCount, ...]  # only queues whose pending count changes
    # pending in head, with another start estimate than in base (not a change by itself:
    # it follows from the others, against the same observed state, history and clock)
    moved: tuple[EstimateMove, ...] = ()
    borrowing: tuple[BorrowingChange, ...] = ()  # queues whose borrowing changes
    flavor_moves: tuple[FlavorMove, ...] = ()  # dispatched by both, to another flavor
    # pending in both, whose budget check reads differently (another reservation, limit,
    # window or reason): what a change of budget or price does to each operation
    settings: tuple[QueueChange, ...] = ()  # the clusters' and reconciler.yaml's
    budget_moved: tuple[Transition, ...] = ()
    budgets: tuple[BudgetChange, ...] = ()  # queues whose budget window reads differently
    position_moves: tuple[PositionMove, ...] = ()  # pending in both, at another position
    stops: tuple[StopChange, ...] = ()  # stopped by head, not by base
    schedules: tuple[ScheduleChange, ...] = ()  # added, altered or removed schedules

    @property
    def has_changes(self) -> bool:
        return bool(
            self.queues
            or self.operations
            or self.newly_dispatched
            or self.newly_pending
            or self.newly_exceeds_quota
            or self.newly_policy_violation
            or self.newly_stopped
            or self.pending_counts
            or self.borrowing
            or self.flavor_moves
            or self.budget_moved
            or self.budgets
            or self.settings
            or self.position_moves
            or self.stops
            or self.schedules
        )


# --- values ---------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format_quantity(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, frozenset | set):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted paths to leaves; lists are leaves (they merge as a whole)."""
    if isinstance(value, Mapping) and value:
        for k in sorted(value, key=str):
            yield from _leaves(value[k], f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, value


def _provenance(prov: Mapping[str, Provenance], path: str) -> Provenance | None:
    """The provenance of ``path`` or of its nearest ancestor."""
    while True:
        got = prov.get(path)
        if got is not None or "." not in path:
            return got
        path = path.rsplit(".", 1)[0]


def _field_changes(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    before_prov: Mapping[str, Provenance] | None = None,
    after_prov: Mapping[str, Provenance] | None = None,
) -> tuple[FieldChange, ...]:
    old = dict(_leaves(before))
    new = dict(_leaves(after))
    out = []
    for path in sorted(old.keys() | new.keys()):
        in_old, in_new = path in old, path in new
        a = _jsonable(old.get(path))
        b = _jsonable(new.get(path))
        if in_old and in_new and a == b:
            continue
        change = Change.CHANGED if in_old and in_new else Change.ADDED if in_new else Change.REMOVED
        out.append(
            FieldChange(
                path,
                change,
                a if in_old else None,
                b if in_new else None,
                _provenance(before_prov, path) if before_prov is not None and in_old else None,
                _provenance(after_prov, path) if after_prov is not None and in_new else None,
            )
        )
    return tuple(out)


def _queue_fields(q: QueueSpec, repo: CompiledRepo | None = None) -> dict[str, Any]:
    """Every setting of a queue that moves what runs; with ``repo``, also what its budget
    is counted with there: the prices on each of its clusters (the org's, with the
    cluster's own instead), the org's timezone and currency."""
    fields: dict[str, Any] = {
        "cluster": q.cluster,
        "priority": q.priority,
        "concurrency": q.concurrency,
        "quota": dict(q.quota),
        "strategy": q.strategy,
        "paused": q.paused,
        "kinds": q.kinds,
        "maxPods": q.max_pods,
        "startTimeout": q.start_timeout,
        "cohort": q.cohort,
        "borrowingLimit": dict(q.borrowing_limit),
        "lendingLimit": dict(q.lending_limit),
        "defaultTimeout": q.default_timeout,
    }
    if q.budget is not None:
        fields["budget"] = {
            "limit": _amount(q.budget.limit),
            "per": q.budget.per,
            "resource": q.budget.resource,
        }
        if repo is not None:
            fields["budget"]["timezone"] = repo.org.timezone
            if q.budget.hours_of is None:  # a cost budget: what each hour costs where it runs
                fields["budget"]["currency"] = repo.org.currency
                fields["budget"]["prices"] = {
                    c: _prices(
                        prices_for(
                            repo.org.prices,
                            repo.clusters[c].prices if c in repo.clusters else {},
                        )
                    )
                    for c in q.members
                }
                if q.flavors:  # and per flavor, what an hour of each costs there
                    fields["budget"]["flavorPrices"] = {
                        f"{c}.{f.name}": _prices(
                            prices_for(
                                repo.org.prices,
                                repo.clusters[c].prices if c in repo.clusters else {},
                                f.name,
                                repo.org.flavor_prices,
                                repo.clusters[c].flavor_prices if c in repo.clusters else {},
                            )
                        )
                        for c in q.members
                        for f in q.flavors
                    }
    if q.fleet:  # only a fleet queue has them: a single-cluster queue's diff is unchanged
        fields["clusters"] = list(q.clusters)
        fields["clusterQuota"] = {c: dict(v) for c, v in q.cluster_quota.items()}
        fields["requireCapacity"] = q.require_capacity
    if q.flavors:  # only a queue with flavors: their order, then each one's quota and limits
        fields["flavors"] = [f.name for f in q.flavors]
        for f in q.flavors:
            fields[f"flavors.{f.name}"] = {
                key: value
                for key, value in (
                    ("quota", dict(f.quota)),
                    ("borrowingLimit", dict(f.borrowing_limit)),
                    ("lendingLimit", dict(f.lending_limit)),
                    ("clusterQuota", {c: dict(v) for c, v in f.cluster_quota.items()}),
                )
                if value
            }
    if q.fair_weight != 1:
        fields["fairSharing"] = {"weight": format(q.fair_weight.normalize(), "f")}
    return fields


def _amount(value: Decimal) -> str:
    """A price or a budget as written (``2.5``), not as a quantity (``2500m``)."""
    return format(value.normalize(), "f")


def _prices(prices: Mapping[str, Decimal]) -> dict[str, str]:
    return {r: _amount(v) for r, v in prices.items()}


def _cluster_fields(c: ClusterSpec) -> dict[str, Any]:
    """A cluster's settings that move what runs: its concurrency (check 10) and prices (of
    each flavor too)."""
    return {
        "concurrency": c.concurrency,
        "prices": _prices(c.prices),
        **{f"flavorPrices.{f}": _prices(p) for f, p in sorted(c.flavor_prices.items())},
    }


def _cohort_fields(c: CohortSpec) -> dict[str, Any]:
    """A cohort's settings: who may borrow (``maxBorrowDuration``) and its cap."""
    return {"maxBorrowDuration": c.max_borrow_seconds, "quota": dict(c.quota)}


def _org_fields(org: OrgSettings) -> dict[str, Any]:
    """reconciler.yaml's settings that move what runs or stops (its policy shows as the
    operations it refuses)."""
    return {
        "defaults.queue": org.default_queue,
        "defaults.outputs": org.default_outputs,
        "prune.enabled": org.prune,
        "prune.maxFraction": org.max_prune_fraction,
        "prune.allowMassPrune": org.allow_mass_prune,
        "prices": _prices(org.prices),
        **{f"flavorPrices.{f}": _prices(p) for f, p in sorted(org.flavor_prices.items())},
        "currency": org.currency,
        "timezone": org.timezone,
    }


def may_borrow(repo: CompiledRepo, name: str) -> str | None:
    """What queue ``name`` may borrow from its cohort, in words; None when it may not (no
    cohort, or no ``borrowingLimit`` above 0)."""
    q = repo.queues.get(name)
    cohort = repo.cohorts.get(q.cohort) if q is not None and q.cohort else None
    if q is None or cohort is None:
        return None
    limits = [f"{r} {format_quantity(v)}" for r, v in sorted(q.borrowing_limit.items()) if v > 0]
    limits += [  # a queue with flavors: per flavor, in its order
        f"{r} {format_quantity(v)} of {f.name}"
        for f in q.flavors
        for r, v in sorted(f.borrowing_limit.items())
        if v > 0
    ]
    if not limits:
        return None
    text = (
        f"up to {', '.join(limits)} from cohort {cohort.name}, for operations with a timeout "
        f"of at most {format_duration(cohort.max_borrow_seconds)}"
    )
    if cohort.quota:
        caps = ", ".join(f"{r} {format_quantity(v)}" for r, v in sorted(cohort.quota.items()))
        text += f" (cohort cap {caps})"
    return text


def _op_fields(op: CompiledOperation) -> dict[str, Any]:
    """The compiled spec, plus what the compiler resolved outside it."""
    return {
        **op.spec,
        "(resolved)": {
            "queue": op.queue,
            "cluster": op.cluster,
            "namespace": op.namespace,
            "presets": list(op.presets),
            "requests": dict(op.requests),
            "isApproved": op.is_approved,
        },
    }


# --- the diff -------------------------------------------------------------------------


def _states(plan: Plan) -> dict[str, tuple[str, str, Any]]:
    """operation -> (state, queue, pending entry or None)."""
    out: dict[str, tuple[str, str, Any]] = {
        d.operation: ("dispatch", d.queue, None) for d in plan.dispatch
    }
    for p in plan.pending:
        out[p.operation] = (str(p.reason), p.queue, p)
    return out


def diff_plans(
    base: tuple[CompiledRepo, Plan],
    head: tuple[CompiledRepo, Plan],
    estimates: tuple[Estimates, Estimates] = (NO_ESTIMATES, NO_ESTIMATES),
) -> PlanDiff:
    """What merging head into base changes: config, then the plan's decisions, then the
    start estimates that move (``estimates`` of base and head, docs/estimates.md)."""
    base_repo, base_plan = base
    head_repo, head_plan = head

    # 1: queue settings before -> after
    queues = []
    for name in sorted(base_repo.queues.keys() | head_repo.queues.keys()):
        bq, hq = base_repo.queues.get(name), head_repo.queues.get(name)
        fields = _field_changes(
            _queue_fields(bq, base_repo) if bq else {}, _queue_fields(hq, head_repo) if hq else {}
        )
        if fields:
            change = Change.CHANGED if bq and hq else Change.ADDED if hq else Change.REMOVED
            either = hq or bq
            queues.append(QueueChange(name, change, fields, either.source if either else ""))

    # 1b: the clusters' and the org's settings
    settings = []
    for name in sorted(base_repo.clusters.keys() | head_repo.clusters.keys()):
        bc, hc = base_repo.clusters.get(name), head_repo.clusters.get(name)
        fields = _field_changes(
            _cluster_fields(bc) if bc else {}, _cluster_fields(hc) if hc else {}
        )
        if fields:
            change = Change.CHANGED if bc and hc else Change.ADDED if hc else Change.REMOVED
            settings.append(QueueChange(f"cluster {name}", change, fields))
    for name in sorted(base_repo.cohorts.keys() | head_repo.cohorts.keys()):
        bh, hh = base_repo.cohorts.get(name), head_repo.cohorts.get(name)
        fields = _field_changes(_cohort_fields(bh) if bh else {}, _cohort_fields(hh) if hh else {})
        if fields:
            change = Change.CHANGED if bh and hh else Change.ADDED if hh else Change.REMOVED
            settings.append(QueueChange(f"cohort {name}", change, fields))
    fields = _field_changes(_org_fields(base_repo.org), _org_fields(head_repo.org))
    if fields:
        settings.append(QueueChange("reconciler.yaml", Change.CHANGED, fields))

    # 2: compiled specs, field by field with provenance
    base_ops = {op.id: op for op in (*base_repo.operations, *base_repo.schedules)}
    head_ops = {op.id: op for op in (*head_repo.operations, *head_repo.schedules)}
    operations = []
    for oid in sorted(base_ops.keys() | head_ops.keys()):
        bo, ho = base_ops.get(oid), head_ops.get(oid)
        fields = _field_changes(
            _op_fields(bo) if bo else {},
            _op_fields(ho) if ho else {},
            bo.provenance if bo else None,
            ho.provenance if ho else None,
        )
        if fields:
            change = Change.CHANGED if bo and ho else Change.ADDED if ho else Change.REMOVED
            op = ho or bo
            operations.append(OperationChange(oid, change, fields, op.path if op else ""))

    # 3: the plan's decisions
    before = _states(base_plan)
    dispatched, pending, exceeds = [], [], []
    base_flavor = {d.operation: d.flavor for d in base_plan.dispatch}
    moves = []
    for d in head_plan.dispatch:
        was = before.get(d.operation)
        if was is None or was[0] != "dispatch":
            prior = was[0] if was else "absent"
            dispatched.append(Transition(d.operation, d.queue, prior, flavor=d.flavor))
        elif base_flavor[d.operation] != d.flavor:
            moves.append(FlavorMove(d.operation, d.queue, base_flavor[d.operation], d.flavor))
    head_at = head_plan.positions()
    for p in head_plan.pending:
        was = before.get(p.operation)
        prior = was[0] if was else "absent"
        t = Transition(
            p.operation,
            p.queue,
            prior,
            p.reason,
            head_at[p.operation],
            p.message,
            p.admit,
            p.blocked_by.to_json(),
        )
        if was is None or was[0] == "dispatch":
            pending.append(t)
        if p.reason is PendingReason.EXCEEDS_QUOTA and prior != PendingReason.EXCEEDS_QUOTA:
            exceeds.append(t)

    def violations(repo: CompiledRepo) -> dict[str, RejectedOperation]:
        return {r.operation: r for r in repo.rejected if r.reason is RejectReason.POLICY_VIOLATION}

    base_bad = violations(base_repo)
    newly_bad = tuple(r for oid, r in sorted(violations(head_repo).items()) if oid not in base_bad)

    base_stops = {s.operation for s in base_plan.stop}
    stopped = tuple(s.operation for s in head_plan.stop if s.operation not in base_stops)
    stops = _stops(base_ops, head_ops, base_plan, head_plan)

    # position inside its queue, for those pending in both in the same queue
    base_pending: dict[str, Pending] = {p.operation: p for p in base_plan.pending}
    base_at = base_plan.positions()
    positions = tuple(
        PositionMove(p.operation, p.queue, base_at[p.operation], head_at[p.operation])
        for p in head_plan.pending
        if (earlier := base_pending.get(p.operation)) is not None
        and earlier.queue == p.queue
        and base_at[p.operation] != head_at[p.operation]
    )

    # 4: pending count per queue
    bcount = {q.name: q.pending for q in base_plan.queues}
    hcount = {q.name: q.pending for q in head_plan.queues}
    counts = tuple(
        PendingCount(name, bcount.get(name), hcount.get(name))
        for name in sorted(bcount.keys() | hcount.keys())
        if bcount.get(name) != hcount.get(name)
    )
    # 4b: what the budgets read, and the operations whose budget check reads differently
    budget_moved = []
    for p in head_plan.pending:
        was = before.get(p.operation)
        if was is None or was[0] == "dispatch":
            continue  # newly pending: listed above
        old_p = was[2]
        if not ({p.reason, old_p.reason} & _BUDGET_REASONS):
            continue
        if old_p.reason != p.reason or old_p.blocked_by.to_json() != p.blocked_by.to_json():
            budget_moved.append(
                Transition(
                    p.operation,
                    p.queue,
                    str(old_p.reason),
                    p.reason,
                    head_at[p.operation],
                    p.message,
                    p.admit,
                    p.blocked_by.to_json(),
                )
            )
    bbudget = {q.name: _budget_json(q.budget) for q in base_plan.queues}
    hbudget = {q.name: _budget_json(q.budget) for q in head_plan.queues}
    budgets = tuple(
        BudgetChange(name, bbudget.get(name), hbudget.get(name))
        for name in sorted(bbudget.keys() | hbudget.keys())
        if bbudget.get(name) != hbudget.get(name)
    )
    # 5: who may borrow from a cohort
    borrowing = []
    for name in sorted(base_repo.queues.keys() | head_repo.queues.keys()):
        could, can = may_borrow(base_repo, name), may_borrow(head_repo, name)
        if could != can:
            borrowing.append(BorrowingChange(name, could, can))
    return PlanDiff(
        base_version=base_repo.version,
        head_version=head_repo.version,
        queues=tuple(queues),
        operations=tuple(operations),
        newly_dispatched=tuple(dispatched),
        newly_pending=tuple(pending),
        newly_exceeds_quota=tuple(exceeds),
        newly_policy_violation=newly_bad,
        newly_stopped=stopped,
        pending_counts=counts,
        moved=_moves(before, head_plan, estimates),
        borrowing=tuple(borrowing),
        flavor_moves=tuple(moves),
        budget_moved=tuple(budget_moved),
        budgets=budgets,
        settings=tuple(settings),
        position_moves=positions,
        stops=stops,
        schedules=_schedule_changes(base_repo, head_repo, head_plan),
    )


def _schedule_changes(
    base: CompiledRepo, head: CompiledRepo, plan: Plan
) -> tuple[ScheduleChange, ...]:
    """The schedules head adds, alters (another spec) or removes, each with its next fire
    times at the plan's time."""
    before = {k: v[0].schedule for k, v in schedule_groups(base).items()}
    after = {k: v[0].schedule for k, v in schedule_groups(head).items()}
    out = []
    for oid in sorted(before.keys() | after.keys()):
        old, new = before.get(oid), after.get(oid)
        if old == new:
            continue
        if new is None:
            out.append(ScheduleChange(oid, Change.REMOVED))
            continue
        fires = tuple(utc_text(t) for t in next_fires(new, plan.at, NEXT_FIRES))
        out.append(ScheduleChange(oid, Change.CHANGED if old else Change.ADDED, fires))
    return tuple(out)


_BUDGET_REASONS = frozenset({PendingReason.BUDGET_EXCEEDED, PendingReason.LEDGER_UNREADABLE})


def _budget_json(summary: BudgetSummary | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {
        "unit": summary.unit,
        "per": summary.per,
        "limit": format_quantity(summary.limit),
        "spent": format_quantity(summary.spent),
        "committed": format_quantity(summary.committed),
        "committedAfter": format_quantity(summary.committed_after),
        "windowStart": summary.window_start.isoformat(),
        "windowEnd": summary.window_end.isoformat(),
    }


def _stops(
    base_ops: Mapping[str, CompiledOperation],
    head_ops: Mapping[str, CompiledOperation],
    base_plan: Plan,
    head_plan: Plan,
) -> tuple[StopChange, ...]:
    """What head stops that base did not: each run it deletes (``StoppedInRepo``,
    ``RemovedFromRepo``), and each operation it newly holds with ``stopped: true``."""
    base_stops = {s.operation for s in base_plan.stop}
    out = {
        s.operation: StopChange(s.operation, s.queue or "", str(s.reason), "delete")
        for s in head_plan.stop
        if s.operation not in base_stops
    }
    for oid, op in head_ops.items():
        was = base_ops.get(oid)
        newly = op.stopped and (was is None or not was.stopped)
        if newly and oid not in out and oid not in base_stops:
            out[oid] = StopChange(oid, op.queue, str(StopReason.STOPPED_IN_REPO), "hold")
    return tuple(out[k] for k in sorted(out))


def _moves(
    before: Mapping[str, tuple[str, str, Any]],
    head_plan: Plan,
    estimates: tuple[Estimates, Estimates],
) -> tuple[EstimateMove, ...]:
    base_est, head_est = estimates
    out = []
    for p in head_plan.pending:
        after = head_est.text(p.operation)
        was = before.get(p.operation)
        if not after or was is None:
            continue
        prior = "dispatched now" if was[0] == "dispatch" else base_est.text(p.operation)
        if prior and prior != after:
            out.append(
                EstimateMove(
                    p.operation,
                    p.queue,
                    prior,
                    after,
                    base_est.json_of(p.operation),
                    head_est.json_of(p.operation),
                )
            )
    return tuple(out)


# --- renderers ------------------------------------------------------------------------


def _prov_json(p: Provenance | None) -> dict[str, Any] | None:
    return None if p is None else {"file": p.file, "line": p.line, "step": p.step}


def _field_json(f: FieldChange) -> dict[str, Any]:
    return {
        "path": f.path,
        "change": f.change.value,
        "before": f.before,
        "after": f.after,
        "beforeFrom": _prov_json(f.before_from),
        "afterFrom": _prov_json(f.after_from),
    }


def _transition_json(t: Transition) -> dict[str, Any]:
    out: dict[str, Any] = {"operation": t.operation, "queue": t.queue, "before": t.before}
    if t.reason is not None:
        out.update(reason=t.reason.value, position=t.position, message=t.message)
    if t.admit is not None:
        out["admit"] = t.admit.to_json()
    if t.blocked_by is not None:
        out["blockedBy"] = dict(t.blocked_by)
    if t.flavor is not None:
        out["flavor"] = t.flavor
    return out


def diff_to_dict(diff: PlanDiff) -> dict[str, Any]:
    return {
        "base": diff.base_version,
        "head": diff.head_version,
        "changed": diff.has_changes,
        "queues": [
            {
                "name": q.name,
                "change": q.change.value,
                "source": q.source,
                "fields": [_field_json(f) for f in q.fields],
            }
            for q in diff.queues
        ],
        "operations": [
            {
                "operation": o.operation,
                "change": o.change.value,
                "path": o.path,
                "fields": [_field_json(f) for f in o.fields],
            }
            for o in diff.operations
        ],
        "newlyDispatched": [_transition_json(t) for t in diff.newly_dispatched],
        "newlyPending": [_transition_json(t) for t in diff.newly_pending],
        "newlyExceedsQuota": [_transition_json(t) for t in diff.newly_exceeds_quota],
        "newlyPolicyViolation": [
            {"operation": r.operation, "path": r.path, "message": r.message}
            for r in diff.newly_policy_violation
        ],
        "newlyStopped": list(diff.newly_stopped),
        "pendingCounts": [
            {"queue": c.queue, "before": c.before, "after": c.after, "delta": c.delta}
            for c in diff.pending_counts
        ],
        "estimateMoves": [
            {
                "operation": m.operation,
                "queue": m.queue,
                "before": m.before,
                "after": m.after,
                "beforeEstimate": m.before_json,
                "afterEstimate": m.after_json,
            }
            for m in diff.moved
        ],
        "borrowing": [
            {"queue": b.queue, "change": b.verdict, "before": b.before, "after": b.after}
            for b in diff.borrowing
        ],
        "flavorMoves": [
            {"operation": m.operation, "queue": m.queue, "before": m.before, "after": m.after}
            for m in diff.flavor_moves
        ],
        "settings": [
            {"name": q.name, "change": q.change.value, "fields": [_field_json(f) for f in q.fields]}
            for q in diff.settings
        ],
        "budgetMoved": [_transition_json(t) for t in diff.budget_moved],
        "budgets": [{"queue": b.queue, "before": b.before, "after": b.after} for b in diff.budgets],
        "positionMoves": [
            {"operation": m.operation, "queue": m.queue, "before": m.before, "after": m.after}
            for m in diff.position_moves
        ],
        "stops": [
            {"operation": s.operation, "queue": s.queue, "reason": s.reason, "action": s.action}
            for s in diff.stops
        ],
        "schedules": [
            {"operation": c.operation, "change": c.change.value, "nextFires": list(c.next)}
            for c in diff.schedules
        ],
    }


def diff_to_json(diff: PlanDiff) -> str:
    return json.dumps(diff_to_dict(diff), indent=2, ensure_ascii=False) + "\n"


def _cell(value: Any, present: bool = True) -> str:
    if not present:
        return "—"
    if isinstance(value, str):
        return md_code(value)
    return md_code(json.dumps(value, sort_keys=True, ensure_ascii=False))


def _from(p: Provenance | None) -> str:
    if p is None:
        return ""
    where = f"{printable_path(p.file)}:{p.line}" if p.line else printable_path(p.file)
    return f"{where} ({p.step})"


def _short(version: str) -> str:
    return version[:12] if len(version) == 40 else version


def diff_to_markdown(diff: PlanDiff) -> str:
    """A pull-request comment."""
    out = [f"## Dispatch plan: `{_short(diff.base_version)}` → `{_short(diff.head_version)}`", ""]
    if not diff.has_changes:
        out.append("No change to queues, operations or the dispatch plan.")
        return "\n".join(out) + "\n"
    summary = [
        f"{len(diff.queues)} queue(s) changed",
        f"{len(diff.operations)} operation(s) changed",
        f"{len(diff.newly_dispatched)} newly dispatched",
        f"{len(diff.newly_pending)} newly pending",
        f"{len(diff.newly_exceeds_quota)} newly ExceedsQuota",
        f"{len(diff.newly_policy_violation)} newly PolicyViolation",
    ]
    if diff.stops:
        summary.append(f"{len(diff.stops)} stop(s)")
    if diff.schedules:
        summary.append(f"{len(diff.schedules)} schedule(s) changed")
    if diff.position_moves:
        summary.append(f"{len(diff.position_moves)} move(s) position")
    if diff.borrowing:
        summary.append(f"{len(diff.borrowing)} queue(s) borrow differently")
    if diff.flavor_moves:
        summary.append(f"{len(diff.flavor_moves)} move(s) flavor")
    out += ["**" + ", ".join(summary) + "**", ""]

    if diff.queues:
        out += ["### Queue settings", ""]
        rows = []
        for q in diff.queues:
            for f in q.fields:
                rows.append(
                    [
                        q.name if q.change is Change.CHANGED else f"{q.name} ({q.change})",
                        f.path,
                        _cell(f.before, f.change is not Change.ADDED),
                        _cell(f.after, f.change is not Change.REMOVED),
                    ]
                )
        out += [md_table(["Queue", "Field", "Before", "After"], rows), ""]

    if diff.settings:
        out += ["### Cluster, cohort and org settings", ""]
        rows = [
            [
                q.name if q.change is Change.CHANGED else f"{q.name} ({q.change})",
                f.path,
                _cell(f.before, f.change is not Change.ADDED),
                _cell(f.after, f.change is not Change.REMOVED),
            ]
            for q in diff.settings
            for f in q.fields
        ]
        out += [md_table(["Of", "Field", "Before", "After"], rows), ""]

    if diff.schedules:
        out += ["### Schedules", ""]
        rows = [
            [md_code(c.operation), c.change.value, ", ".join(c.next) or "—"] for c in diff.schedules
        ]
        out += [md_table(["Operation", "Change", "Next fire times (UTC)"], rows), ""]

    if diff.borrowing:
        out += ["### Borrowing from a cohort", ""]
        rows = [
            [b.queue, b.verdict, b.before or "may not borrow", b.after or "may not borrow"]
            for b in diff.borrowing
        ]
        out += [md_table(["Queue", "Change", "Before", "After"], rows), ""]

    if diff.operations:
        out += ["### Operations whose compiled spec changes", ""]
        for o in diff.operations:
            title = o.operation if o.change is Change.CHANGED else f"{o.operation} ({o.change})"
            out += [f"#### `{title}`", ""]
            rows = [
                [
                    md_code(f.path),
                    _cell(f.before, f.change is not Change.ADDED),
                    _cell(f.after, f.change is not Change.REMOVED),
                    _from(f.after_from if f.change is not Change.REMOVED else f.before_from),
                ]
                for f in o.fields
            ]
            out += [md_table(["Field", "Before", "After", "Set by"], rows), ""]

    def transitions(title: str, items: tuple[Transition, ...]) -> None:
        if not items:
            return
        out.extend([f"### {title}", ""])
        rows = [
            [
                t.operation,
                t.queue,
                t.before,
                str(t.reason) if t.reason else _dispatch(t.flavor),
                str(t.position) if t.position else "",
                t.message,
            ]
            for t in items
        ]
        out.extend(
            [md_table(["Operation", "Queue", "Before", "After", "Position", "Message"], rows), ""]
        )

    transitions("Newly dispatched", diff.newly_dispatched)
    if diff.flavor_moves:
        out += ["### Moves flavor", ""]
        rows = [
            [m.operation, m.queue, m.before or "no flavor", m.after or "no flavor"]
            for m in diff.flavor_moves
        ]
        out += [md_table(["Operation", "Queue", "Before", "After"], rows), ""]
    transitions("Newly pending", diff.newly_pending)
    transitions("Budget check changes", diff.budget_moved)
    if diff.budgets:
        out += ["### Budgets (the burn this plan implies)", ""]
        rows = [
            [
                b.queue,
                _burn(b.before),
                _burn(b.after),
            ]
            for b in diff.budgets
        ]
        out += [md_table(["Queue", "Before", "After"], rows), ""]
    transitions("Newly ExceedsQuota (can never be admitted)", diff.newly_exceeds_quota)
    if diff.newly_policy_violation:
        out += ["### Newly PolicyViolation", ""]
        rows = [[r.operation, r.path, r.message] for r in diff.newly_policy_violation]
        out += [md_table(["Operation", "File", "Violation"], rows), ""]
    if diff.stops:
        out += ["### Stops", ""]
        rows = [[s.operation, s.queue, s.reason, _STOP_ACTIONS[s.action]] for s in diff.stops]
        out += [md_table(["Operation", "Queue", "Reason", "On merge"], rows), ""]
    if diff.position_moves:
        out += ["### Position changes in a queue", ""]
        rows = [
            [m.operation, m.queue, str(m.before), str(m.after)]
            for m in diff.position_moves[:MAX_MOVES_LISTED]
        ]
        out += [md_table(["Operation", "Queue", "Before", "After"], rows), ""]
        if len(diff.position_moves) > MAX_MOVES_LISTED:
            more = len(diff.position_moves) - MAX_MOVES_LISTED
            out += [f"and {more} more (see `-o json`)", ""]
    if diff.pending_counts:
        out += ["### Pending per queue", ""]
        rows = [
            [
                c.queue,
                "—" if c.before is None else str(c.before),
                "—" if c.after is None else str(c.after),
                f"{c.delta:+d}",
            ]
            for c in diff.pending_counts
        ]
        out += [md_table(["Queue", "Before", "After", "Change"], rows), ""]
    if diff.moved:
        out += ["### Start estimates that move", ""]
        out += [f"- {md_escape(m.sentence)}" for m in diff.moved[:MAX_MOVES_LISTED]]
        if len(diff.moved) > MAX_MOVES_LISTED:
            out.append(f"- and {len(diff.moved) - MAX_MOVES_LISTED} more (see `-o json`)")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _dispatch(flavor: str | None) -> str:
    """A newly dispatched operation's After cell: ``dispatch``, or ``dispatch (h100)``."""
    return "dispatch" if flavor is None else f"dispatch ({flavor})"


def _burn(budget: Mapping[str, Any] | None) -> str:
    """``spent 120 + committed 376.8 of 500 USD a day (after this plan: 452.16)``."""
    if budget is None:
        return "no budget"
    unit = f" {budget['unit']}" if budget["unit"] else ""
    return md_escape(
        f"spent {budget['spent']} + committed {budget['committed']} of {budget['limit']}{unit} "
        f"a {budget['per']} (after this plan: {budget['committedAfter']} committed)"
    )


# A PR comment lists this many moved estimates, then says how many more.
_STOP_ACTIONS = {
    "delete": "its running workload is deleted",
    "hold": "not dispatched",
}

# A PR comment lists this many moved estimates (and position changes), then how many more.
MAX_MOVES_LISTED = 50
