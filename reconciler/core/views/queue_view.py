"""The queue management view (pure): one frozen row per queue in priority order, fleet
totals, and the detail of one queue or one operation. ``reconciler queues`` and the web
pages render these; nothing here reads a cluster or Git.

Two sources build the same rows:

- a cycle's :class:`~reconciler.core.reporting.report.Report` (``queues_view``, ``queue_detail``,
  ``operation_detail``): each queue's use as the report counts it from what was carried
  out (the leader's cycle) or not (``--live``, ``serve``, a follower: the plan's dispatches
  are then ``next``, not active). ``build_queues_view`` and its siblings take a plan over
  given states and make its report (every dispatch carried out with ``applied``, none
  without);
- the status branch (``queues_view_from_status``), as the reconciler last wrote it.

Counts: ``active`` is every Dispatched or Running operation (what holds concurrency and
quota), ``pods`` their pods (every replica of a distributed operation: what ``maxPods``
limits); of those ``running`` have a running pod and ``waiting`` are dispatched but not
running yet (``WaitingForCapacity``: no node has room, or still starting). Dispatch is not
placement: a waiting operation holds its queue's quota like a running one.

What must live here: the view's frozen rows and details, built from a report or read from
the status branch, and their JSON. No HTML (``web_html.py``), no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from itertools import chain
from typing import Annotated, Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from reconciler.core.compile.explain import ProvenanceRow, provenance_rows
from reconciler.core.decision.schedule import schedule_groups, schedule_times, tick_time
from reconciler.core.load import parse_yaml
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.observation.outputs import named_outputs
from reconciler.core.plan import Admit, BudgetSummary, Dispatch, Pending, Plan, numbered
from reconciler.core.plan.estimate import NO_ESTIMATES, Estimates
from reconciler.core.plan.history import forecast_burn, forecast_text
from reconciler.core.plan.ledger import MAX_COST, BudgetWindow, Window, zone
from reconciler.core.quantity import QuantityError, format_quantity, parse_quantity
from reconciler.core.reporting.report import Failure, Report, planned_report
from reconciler.core.reporting.status import (
    OperationStatus,
    QueueStatus,
    StatusPhase,
    StatusReason,
    StatusView,
    budget_record,
    rejected_message,
    removed_reason,
    workflow_summary,
)
from reconciler.core.reporting.wire import (
    ApiModel,
    EmptyAsNull,
    IsoTime,
    Items,
    JsonObject,
    OmitEmpty,
    QuantityText,
)
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    CompiledOperation,
    CompiledRepo,
    Phase,
    QueueSpec,
)
from reconciler.core.views.plan_render import text_table

ALL_CLUSTERS = ""  # the cluster of the fleet-wide total


# --- rows -------------------------------------------------------------------------------


class QuotaUse(ApiModel):
    resource: str
    used: QuantityText
    limit: QuantityText  # the queue's own (nominal) quota
    # in a cohort: how much of ``used`` is above the limit (borrowed), and how much of the
    # limit other queues of the cohort use (lent)
    borrowed: QuantityText = Decimal(0)
    lent: QuantityText = Decimal(0)

    @property
    def fraction(self) -> float:
        """Share of the limit in use, 0..1 (1 when the limit is 0 and something is used)."""
        if self.limit <= 0:
            return 1.0 if self.used > 0 else 0.0
        return float(min(self.used / self.limit, Decimal(1)))

    @property
    def text(self) -> str:
        text = f"{format_quantity(self.used)}/{format_quantity(self.limit)}"
        if self.borrowed:
            text += f" (+{format_quantity(self.borrowed)} borrowed)"
        if self.lent:
            text += f" ({format_quantity(self.lent)} lent)"
        return text


# Per resource name; ``quota`` in the JSON.
Quotas = Annotated[Items[QuotaUse], Field(serialization_alias="quota")]


class FlavorQuota(ApiModel):
    """One flavor of a queue with flavors (``flavors`` of its row), in the queue's order:
    its quota use per resource, as ``quota`` of the row is the queue's (the row's ``quota``
    is then the sum over its flavors)."""

    name: str
    quotas: Quotas

    @property
    def text(self) -> str:
        """``h100: nvidia.com/gpu 1/2 (+1 borrowed)``."""
        return f"{self.name}: {_quota_cell(self.quotas)}"


class QueueBudget(ApiModel):
    """A budgeted queue's window (docs/budgets.md): what its finished runs ``spent`` in it
    and its active runs ``committed`` (cost so far and to their timeouts), against its
    ``limit``; amounts as decimal text in ``unit`` (a currency, or resource-hours)."""

    limit: str
    spent: str
    committed: str
    unit: str = ""
    per: str = ""
    window_start: str = ""
    window_end: str = ""
    timezone: str = ""  # the org's (a record written before it was kept: none)
    # when the window's limit is spent at the rate its finished runs spent so far
    # (docs/budgets.md, "Burn forecast"); "" when the view has no clock
    forecast: OmitEmpty[str] = ""

    def with_forecast(self, queue: str, now: datetime | None, timezone: str) -> QueueBudget:
        """This window with its burn forecast at ``now``, its days in its own timezone
        (``timezone`` when it does not say)."""
        if now is None:
            return self
        try:
            per = BudgetPeriod(self.per)
            window = Window(
                datetime.fromisoformat(self.window_start), datetime.fromisoformat(self.window_end)
            )
            limit, spent = Decimal(self.limit), Decimal(self.spent)
            zone_name = self.timezone or timezone
            zone(zone_name)
        except (ValueError, ArithmeticError, KeyError):  # a hand-edited record: no forecast
            return self
        amounts = (limit, spent)
        if not all(a.is_finite() and a.copy_abs() <= _MOST for a in amounts) or None in (
            window.start.tzinfo,
            window.end.tzinfo,
        ):  # NaN, 1e999999999 or a local time: hand-edited too
            return self
        budget = BudgetWindow(queue, BudgetSpec(limit, per), window, spent, zone_name)
        return self.model_copy(update={"forecast": forecast_text(forecast_burn(budget, now))})

    @property
    def text(self) -> str:
        """``2.5+5/10 USD/day``: spent + committed / limit, per window."""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.spent}+{self.committed}/{self.limit}{unit}/{self.per}"

    @classmethod
    def of(cls, summary: BudgetSummary | None) -> QueueBudget | None:
        """A report's summary of the window (the planner's, from the decision's inputs)."""
        return None if summary is None else cls(**budget_record(summary))

    @classmethod
    def recorded(cls, record: Mapping[str, Any] | None) -> QueueBudget | None:
        """What the status branch recorded (``budget_record`` of the same summary)."""
        if not record:
            return None
        return cls(**{k: str(v) for k, v in record.items() if k in _BUDGET_KEYS})


# The largest amount a recorded window is forecast at: far past a limit (at most 10**15)
# and what ledger costs (at most ``MAX_COST``) sum to; 1e999999999 overflows the forecast
_MOST = MAX_COST * 10**20
_BUDGET_KEYS = (
    "limit",
    "spent",
    "committed",
    "unit",
    "per",
    "windowStart",
    "windowEnd",
    "timezone",
)


class ClusterShare(ApiModel):
    """A fleet queue's share of one of its clusters (``clusters`` of its row), with the
    plan's dispatches counted (carried out or not: as the status branch records it): its
    active operations there, what they request, its ``clusterQuota`` there, and the
    cluster's free capacity left (null: not observed)."""

    cluster: str
    reachable: bool
    active: int
    used: Mapping[str, str]
    cluster_quota: Mapping[str, str]
    free: Mapping[str, str] | None
    nodes: int

    @property
    def used_text(self) -> str:
        if not self.cluster_quota:
            return _map_text(self.used)
        return ", ".join(
            f"{r} {self.used.get(r, '0')}/{limit}"
            for r, limit in sorted(self.cluster_quota.items())
        )

    @property
    def free_text(self) -> str:
        return "not observed" if self.free is None else _map_text(self.free)


def _map_text(values: Mapping[str, str]) -> str:
    return ", ".join(f"{r} {v}" for r, v in sorted(values.items())) or "-"


def _texts(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {r: format_quantity(v) for r, v in sorted(values.items())}


class QueueRow(ApiModel):
    name: str
    cluster: str  # a fleet queue's clusters, comma-separated in choice order
    priority: int
    active: int
    concurrency: int | None  # the limit; None: unlimited
    quotas: Quotas
    running: int
    waiting: int  # dispatched, not running yet (WaitingForCapacity or starting)
    pending: int
    next: int = 0  # the plan would dispatch these; not created (read-only or not leading)
    head_reason: str | None = None
    head_message: EmptyAsNull[str] = ""
    # when the head (position 1) is estimated to start: {p50, p90, text} (docs/estimates.md)
    head_estimate: JsonObject | None = None
    kinds: Items[str] = ()
    strategy: str = "BestEffortFIFO"
    paused: bool = False
    pods: int = 0  # of the active operations, every replica counted
    max_pods: int | None = None  # the limit; None: unlimited
    cohort: str | None = None
    budget: QueueBudget | None = None  # a budgeted queue's window
    clusters: Items[ClusterShare] = ()  # a fleet queue's clusters, in choice order
    # a queue with flavors: each flavor's quota use, in the queue's order (left out of the
    # JSON for a queue without flavors)
    flavors: OmitEmpty[Items[FlavorQuota]] = ()

    @property
    def quota_text(self) -> str:
        """The quota cell: per resource, or per flavor for a queue with flavors
        (``h100: nvidia.com/gpu 1/2; a100: nvidia.com/gpu 3/4``)."""
        if self.flavors:
            return "; ".join(f.text for f in self.flavors)
        return _quota_cell(self.quotas)

    @property
    def budget_text(self) -> str:
        return self.budget.text if self.budget is not None else ""

    @property
    def head_starts(self) -> str:
        return str((self.head_estimate or {}).get("text") or "")

    @property
    def concurrency_text(self) -> str:
        return f"{self.active}/{'-' if self.concurrency is None else self.concurrency}"

    @property
    def pods_text(self) -> str:
        return f"{self.pods}/{'-' if self.max_pods is None else self.max_pods}"


class FleetTotal(ApiModel):
    """Totals over the queues of one cluster, or of every cluster (``ALL_CLUSTERS``)."""

    cluster: EmptyAsNull[str]
    queues: int
    active: int
    running: int
    waiting: int
    pending: int
    next: int
    quotas: Quotas  # summed over the queues that limit the resource
    pods: int = 0


class Fleet(ApiModel):
    """``fleet`` in the JSON: the totals per cluster and over every cluster."""

    clusters: Items[FleetTotal]  # by cluster name
    total: FleetTotal


class QueuesView(ApiModel):
    version: str  # the config commit the rows describe
    # in priority order (the planner's consideration order); ``queues`` in the JSON
    rows: Annotated[Items[QueueRow], Field(serialization_alias="queues")]
    totals: Annotated[Fleet, Field(serialization_alias="fleet")]
    source: str = "cycle"  # "cycle" | "live" | "status-branch"
    at: IsoTime | None = None

    @property
    def clusters(self) -> tuple[FleetTotal, ...]:
        return self.totals.clusters

    @property
    def fleet(self) -> FleetTotal:
        return self.totals.total

    def row(self, name: str) -> QueueRow | None:
        return next((r for r in self.rows if r.name == name), None)

    @property
    def fleet_queues(self) -> tuple[QueueRow, ...]:
        return tuple(r for r in self.rows if r.clusters)


def fleet_json(view: QueuesView) -> dict[str, Any]:
    return view.totals.to_json()


def total_fleet(rows: Sequence[QueueRow]) -> Fleet:
    """Per cluster and across all clusters."""
    clusters = sorted({r.cluster for r in rows})
    per = tuple(_total(c, [r for r in rows if r.cluster == c]) for c in clusters)
    return Fleet(clusters=per, total=_total(ALL_CLUSTERS, rows))


def _total(cluster: str, rows: Sequence[QueueRow]) -> FleetTotal:
    used: dict[str, Decimal] = {}
    limit: dict[str, Decimal] = {}
    for r in rows:
        for q in r.quotas:
            used[q.resource] = used.get(q.resource, Decimal(0)) + q.used
            limit[q.resource] = limit.get(q.resource, Decimal(0)) + q.limit
    return FleetTotal(
        cluster=cluster,
        queues=len(rows),
        active=sum(r.active for r in rows),
        running=sum(r.running for r in rows),
        waiting=sum(r.waiting for r in rows),
        pending=sum(r.pending for r in rows),
        next=sum(r.next for r in rows),
        pods=sum(r.pods for r in rows),
        quotas=tuple(QuotaUse(resource=k, used=used[k], limit=limit[k]) for k in sorted(limit)),
    )


def _counts(phases: Iterable[tuple[str | None, str]]) -> dict[str, tuple[int, int]]:
    """Per queue: (running, waiting) from (queue, phase) pairs."""
    out: dict[str, tuple[int, int]] = {}
    for queue, phase in phases:
        if queue is None:
            continue
        running, waiting = out.get(queue, (0, 0))
        if phase == Phase.RUNNING.value:
            out[queue] = (running + 1, waiting)
        elif phase == Phase.DISPATCHED.value:
            out[queue] = (running, waiting + 1)
    return out


def _heads(pending: Iterable[Pending]) -> dict[str, Pending]:
    """Each queue's first entry of ``pending`` (in consideration order: its head)."""
    out: dict[str, Pending] = {}
    for p in pending:
        out.setdefault(p.queue, p)
    return out


def _kinds(spec: QueueSpec | None) -> tuple[str, ...]:
    return tuple(sorted(str(k) for k in spec.kinds)) if spec is not None else ()


def build_queues_view(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    *,
    applied: bool,
    source: str = "cycle",
    estimates: Estimates = NO_ESTIMATES,
) -> QueuesView:
    """The view of a plan over ``states`` made without a decision: ``queues_view`` of its
    report, every dispatch carried out with ``applied`` (``states`` then hold those the
    cycle created), none without."""
    shown = planned_report(repo, plan, states, carried_out=applied)
    return queues_view(shown, estimates, source=source)


def queues_view(
    shown: Report, estimates: Estimates = NO_ESTIMATES, *, source: str = "cycle"
) -> QueuesView:
    """The queue rows of one cycle's report: each queue's use as the report counts it (a
    failed create holds nothing), its planned dispatches not carried out as ``next``;
    ``estimates`` the cycle's start estimates (``estimate_decision``)."""
    repo, plan = shown.compiled, shown.plan
    counts = _counts((s.queue, s.phase.value) for s in shown.workloads.values())
    heads = _heads(plan.pending)
    rows = []
    for q in shown.queues:
        used, borrowed, lent = q.used_after, q.borrowed_after, q.lent_after
        running, waiting = counts.get(q.name, (0, 0))
        head = heads.get(q.name)
        rows.append(
            QueueRow(
                name=q.name,
                cluster=",".join(m.cluster for m in q.members) or q.cluster,
                priority=q.priority,
                active=q.active + q.dispatching,
                concurrency=q.concurrency,
                quotas=_quota_uses(q.quota, used, borrowed, lent),
                running=running,
                waiting=waiting,
                pending=q.pending,
                next=shown.next.get(q.name, 0),
                head_reason=str(q.head_reason) if q.head_reason is not None else None,
                head_message=head.message if head is not None else "",
                head_estimate=estimates.json_of(head.operation) if head is not None else None,
                kinds=_kinds(repo.queues.get(q.name)),
                strategy=str(q.strategy),
                paused=q.paused,
                pods=q.pods_after,
                max_pods=q.max_pods,
                cohort=q.cohort,
                budget=_forecast(QueueBudget.of(q.budget), q.name, plan.at, repo.org.timezone),
                clusters=tuple(
                    ClusterShare(
                        cluster=m.cluster,
                        reachable=m.reachable,
                        active=m.active,
                        used=_texts(m.used),
                        cluster_quota=_texts(m.quota),
                        free=None if m.free is None else _texts(m.free),
                        nodes=m.nodes,
                    )
                    for m in q.members
                ),
                flavors=tuple(
                    FlavorQuota(
                        name=f.name,
                        quotas=_quota_uses(f.quota, f.used_after, f.borrowed_after, f.lent_after),
                    )
                    for f in q.flavors
                ),
            )
        )
    return QueuesView(
        version=repo.version,
        rows=tuple(rows),
        totals=total_fleet(rows),
        source=source,
        at=plan.at,
    )


def _quota_uses(
    quota: Mapping[str, Decimal],
    used: Mapping[str, Decimal],
    borrowed: Mapping[str, Decimal],
    lent: Mapping[str, Decimal],
) -> tuple[QuotaUse, ...]:
    zero = Decimal(0)
    return tuple(
        QuotaUse(
            resource=r,
            used=used.get(r, zero),
            limit=limit,
            borrowed=borrowed.get(r, zero),
            lent=lent.get(r, zero),
        )
        for r, limit in sorted(quota.items())
    )


def _recorded_uses(
    quota: Mapping[str, str],
    used: Mapping[str, str],
    borrowed: Mapping[str, str],
    lent: Mapping[str, str],
) -> tuple[QuotaUse, ...]:
    """``_quota_uses`` of what a status record holds (quantities as text)."""
    return tuple(
        QuotaUse(
            resource=r,
            used=_quantity(used.get(r, "0")),
            limit=_quantity(v),
            borrowed=_quantity(borrowed.get(r, "0")),
            lent=_quantity(lent.get(r, "0")),
        )
        for r, v in sorted(quota.items())
    )


def _quantity(text: str) -> Decimal:
    try:
        return parse_quantity(text)
    except QuantityError:
        return Decimal(0)


def queues_view_from_status(view: StatusView, estimates: Estimates = NO_ESTIMATES) -> QueuesView:
    """The view the status branch records (usage with that cycle's dispatches applied);
    ``estimates``: those of the next cycle over what it records (the branch has none)."""
    ops = [o for o in view.operations.values() if not o.children]
    # an older generation still running holds its queue's quota: it runs (or waits) there,
    # as the cycle's view counts it (``Decision.workloads``)
    older = ((r.queue or o.queue, r.phase) for o in ops for r in o.superseded)
    counts = _counts(chain(((o.queue, o.phase) for o in ops), older))
    heads = {o.queue: o for o in ops if o.position == 1 and o.queue is not None}
    rows = []
    clock = _recorded_clock(view)
    for q in view.queues:
        running, waiting = counts.get(q.name, (0, 0))
        head = heads.get(q.name)
        row = _status_row(q, running, waiting, head)
        if row.budget is not None:
            budget = row.budget.with_forecast(q.name, clock, "UTC")
            row = row.model_copy(update={"budget": budget})
        if head is not None:
            row = row.model_copy(update={"head_estimate": estimates.json_of(head.operation)})
        rows.append(row)
    version = view.config.applied if view.config is not None else ""
    return QueuesView(
        version=version, rows=tuple(rows), totals=total_fleet(rows), source="status-branch"
    )


def _forecast(
    budget: QueueBudget | None, queue: str, now: datetime, timezone: str
) -> QueueBudget | None:
    return None if budget is None else budget.with_forecast(queue, now, timezone)


def _recorded_clock(view: StatusView) -> datetime | None:
    """The instant of the cycle the status branch records (None: it records none)."""
    if view.decision is None:
        return None
    try:
        at = datetime.fromisoformat(view.decision.clock)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _status_row(
    q: QueueStatus, running: int, waiting: int, head: OperationStatus | None
) -> QueueRow:
    return QueueRow(
        name=q.name,
        cluster=",".join(f.cluster for f in q.fleet) or q.cluster,
        priority=q.priority,
        active=q.active,
        concurrency=q.concurrency,
        quotas=_recorded_uses(q.quota, q.used, q.borrowed, q.lent),
        running=running,
        waiting=waiting,
        pending=q.pending,
        head_reason=q.head_reason,
        head_message=head.message if head is not None else "",
        kinds=q.kinds,
        strategy=q.strategy,
        paused=q.paused,
        pods=q.active if q.pods is None else q.pods,
        max_pods=q.max_pods,
        cohort=q.cohort,
        budget=QueueBudget.recorded(q.budget),
        clusters=tuple(
            ClusterShare(
                cluster=f.cluster,
                reachable=f.reachable,
                active=f.active,
                used=dict(f.used),
                cluster_quota=dict(f.cluster_quota),
                free=None if f.free is None else dict(f.free),
                nodes=f.nodes,
            )
            for f in q.fleet
        ),
        flavors=tuple(
            FlavorQuota(name=f.name, quotas=_recorded_uses(f.quota, f.used, f.borrowed, f.lent))
            for f in q.flavors
        ),
    )


# --- one queue --------------------------------------------------------------------------


@dataclass(frozen=True)
class BlameLine:
    """One line of a file as ``git blame`` attributes it."""

    line: int  # 1-based
    commit: str
    author: str
    committed_at: datetime | None
    summary: str
    text: str


class Setting(ApiModel):
    key: str  # ``priority``, ``quota.nvidia.com/gpu``, ...
    value: str
    line: EmptyAsNull[int]  # in the queue's file; 0: not written there (a default)
    commit: EmptyAsNull[str] = ""  # the commit that last changed that line, when blamed
    author: EmptyAsNull[str] = ""
    committed_at: IsoTime | None = None
    summary: EmptyAsNull[str] = ""


class ActiveOp(ApiModel):
    operation: str
    phase: str
    reason: str | None
    message: EmptyAsNull[str]
    cluster: str
    namespace: str
    workload: str
    node: str | None
    dispatched_at: str | None
    started_at: str | None
    requests: str
    flavor: OmitEmpty[str | None] = None  # the flavor it holds quota in (a queue with flavors)


class PendingOp(ApiModel):
    operation: str
    position: int
    reason: str
    message: str  # the planner's full explanation
    admitted_when: str  # the part that says what would admit it (``admit.text``)
    admit: JsonObject  # what would admit it, as data (``Admit.to_json``)
    blocked_by: JsonObject  # what holds it, as ``plan -o json`` says (``blockedBy``)
    never_runs: bool
    requests: str
    estimate: JsonObject | None = None  # when it is estimated to start: {p50, p90, text}

    @property
    def starts(self) -> str:
        return str((self.estimate or {}).get("text") or "")


class QueueDetail(ApiModel):
    """The JSON is the queue's row, then the detail's fields."""

    row: QueueRow
    source: str  # the queue's file
    settings: Items[Setting]
    active: Annotated[Items[ActiveOp], Field(serialization_alias="activeOperations")]
    # the plan would dispatch these next (not created yet)
    next: Annotated[Items[str], Field(serialization_alias="nextDispatch")]
    # by position
    pending: Annotated[Items[PendingOp], Field(serialization_alias="pendingOperations")]

    @model_serializer(mode="wrap")
    def _row_inline(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {**data.pop("row"), **data}


def requests_text(requests: Mapping[str, Decimal]) -> str:
    return _requests_text(tuple(sorted(requests.items())))


@lru_cache(maxsize=4096)
def _requests_text(items: tuple[tuple[str, Decimal], ...]) -> str:
    """Memoised: most operations share a handful of sizes."""
    return ", ".join(f"{k}={format_quantity(v)}" for k, v in items)


def queue_settings(
    spec: QueueSpec,
    source_text: bytes | None = None,
    blame: Sequence[BlameLine] | None = None,
) -> tuple[Setting, ...]:
    """The queue's effective settings, each with its line in ``source_text`` (the queue
    file) and, given ``blame`` of that file, the commit that last changed that line."""
    keys: Mapping[tuple[Any, ...], tuple[int, int]] = {}
    if source_text is not None:
        doc, _ = parse_yaml(spec.source, source_text)
        if doc is not None:
            keys = doc.keys
    by_line = {b.line: b for b in blame or ()}
    values: list[tuple[tuple[str, ...], str]] = []
    if spec.fleet:
        values.append((("clusters",), ", ".join(spec.clusters)))
        values += [
            (("clusterQuota", c, r), format_quantity(v))
            for c, caps in spec.cluster_quota.items()
            for r, v in sorted(caps.items())
        ]
        values.append((("requireCapacity",), "true" if spec.require_capacity else "false"))
    else:
        values.append((("cluster",), spec.cluster))
    values += [
        (("priority",), str(spec.priority)),
        (("concurrency",), "unlimited" if spec.concurrency is None else str(spec.concurrency)),
        (("maxPods",), "unlimited" if spec.max_pods is None else str(spec.max_pods)),
    ]
    values += [(("quota", r), format_quantity(v)) for r, v in sorted(spec.quota.items())]
    if not spec.quota and not spec.flavors:
        values.append((("quota",), "none"))
    # a queue with flavors: their order, then each one's quota and limits (the key names
    # the flavor; its line is found by its index in the list)
    flavored: dict[tuple[str, ...], tuple[Any, ...]] = {}
    if spec.flavors:
        values.append((("flavors",), ", ".join(f.name for f in spec.flavors)))
    for i, f in enumerate(spec.flavors):
        for field, limits in (
            ("quota", f.quota),
            ("borrowingLimit", f.borrowing_limit),
            ("lendingLimit", f.lending_limit),
        ):
            for r, v in sorted(limits.items()):
                key = ("flavors", f.name, field, r)
                flavored[key] = ("flavors", i, field, r)
                values.append((key, format_quantity(v)))
    if spec.cohort is not None:
        values.append((("cohort",), spec.cohort))
        values += [
            ((field, r), format_quantity(v))
            for field, limits in (
                ("borrowingLimit", spec.borrowing_limit),
                ("lendingLimit", spec.lending_limit),
            )
            for r, v in sorted(limits.items())
        ]
    if spec.fair_weight != 1:
        values.append((("fairSharing", "weight"), format(spec.fair_weight.normalize(), "f")))
    values += [
        (("kinds",), ", ".join(_kinds(spec))),
        (("strategy",), str(spec.strategy)),
        (("paused",), "true" if spec.paused else "false"),
        (("startTimeout",), "none" if spec.start_timeout is None else f"{spec.start_timeout}s"),
    ]
    out = []
    for path, value in values:
        line = keys.get(flavored.get(path, path), (0, 0))[0]
        b = by_line.get(line)
        out.append(
            Setting(
                key=".".join(path),
                value=value,
                line=line,
                commit=b.commit if b else "",
                author=b.author if b else "",
                committed_at=b.committed_at if b else None,
                summary=b.summary if b else "",
            )
        )
    return tuple(out)


def build_queue_detail(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    name: str,
    *,
    applied: bool,
    source_text: bytes | None = None,
    blame: Sequence[BlameLine] | None = None,
    estimates: Estimates = NO_ESTIMATES,
) -> QueueDetail | None:
    """``queue_detail`` of a plan over ``states`` made without a decision (its dispatches
    carried out with ``applied``, none without)."""
    shown = planned_report(repo, plan, states, carried_out=applied)
    return queue_detail(shown, name, source_text=source_text, blame=blame, estimates=estimates)


def queue_detail(
    shown: Report,
    name: str,
    *,
    source_text: bytes | None = None,
    blame: Sequence[BlameLine] | None = None,
    estimates: Estimates = NO_ESTIMATES,
) -> QueueDetail | None:
    """One queue of a cycle's report, or None when the config has no such queue: its row,
    settings, active runs, pending entries, and ``next``, its planned dispatches not
    carried out."""
    repo, plan, states = shown.compiled, shown.plan, shown.workloads
    spec = repo.queues.get(name)
    row = queues_view(shown, estimates).row(name)
    if spec is None or row is None:
        return None
    active = tuple(
        ActiveOp(
            operation=s.operation,
            phase=s.phase.value,
            reason=str(s.reason) if s.reason is not None else None,
            message=s.message,
            cluster=s.cluster,
            namespace=s.namespace,
            workload=s.name,
            node=s.node,
            dispatched_at=s.dispatched_at,
            started_at=s.started_at,
            requests=requests_text(s.requests),
            flavor=s.flavor,
        )
        for _, s in sorted(states.items())
        if s.queue == name and s.phase.active
    )
    ops = {op.id: op for op in repo.operations}
    # Pending entries of one queue share blockers: word each blocker once.
    worded: dict[int, tuple[str, Admit, dict[str, Any], dict[str, Any]]] = {}

    def explain(p: Pending) -> tuple[str, Admit, dict[str, Any], dict[str, Any]]:
        got = worded.get(id(p.blocked_by))
        if got is None:
            block = p.blocked_by
            admit = block.admit()
            got = (block.message(), admit, admit.to_json(), block.to_json())
            worded[id(block)] = got
        return got

    pending = tuple(
        PendingOp(
            operation=p.operation,
            position=position,
            reason=str(p.reason),
            message=message,
            admitted_when=admit.text,
            admit=admit_json,
            blocked_by=blocked_by,
            never_runs=p.never_runs,
            requests=requests_text(ops[p.operation].requests) if p.operation in ops else "",
            estimate=estimates.json_of(p.operation),
        )
        for position, p in numbered(p for p in plan.pending if p.queue == name)
        for message, admit, admit_json, blocked_by in (explain(p),)
    )
    settings = queue_settings(spec, source_text, blame)
    return QueueDetail(
        row=row,
        source=spec.source,
        settings=settings,
        active=active,
        next=shown.upcoming(name),
        pending=pending,
    )


# --- one operation ----------------------------------------------------------------------


class PhaseEvent(ApiModel):
    phase: str
    at: str | None  # ISO time, when known
    note: EmptyAsNull[str] = ""


class ChildRun(ApiModel):
    """A workflow child in its parent's comparison table: its phase and named outputs."""

    operation: str
    phase: str
    outputs: (
        JsonObject  # named outputs (``core.observation.outputs``): name -> number, text or bool
    )


class OperationDetail(ApiModel):
    operation: str
    phase: str
    reason: str | None = None
    message: EmptyAsNull[str] = ""
    kind: str | None = None
    path: str | None = None
    queue: str | None = None
    cluster: str | None = None
    namespace: str | None = None
    workload: str | None = None
    pod: str | None = None
    node: str | None = None
    generation: int | None = None
    position: int | None = None
    admitted_when: EmptyAsNull[str] = ""  # a pending one: what would admit it, in words
    admit: JsonObject | None = None  # ... as data (``Admit.to_json``)
    blocked_by: JsonObject | None = None  # what holds it (``blockedBy`` of ``plan -o json``)
    estimate: JsonObject | None = None  # a pending one: when it is estimated to start
    config_commit: str | None = None
    requests: str = ""
    presets: Items[str] = ()
    outputs: JsonObject | None = None
    history: Items[PhaseEvent] = ()
    # transitions the status branch recorded; ``recordedHistory`` in the JSON
    recorded: Annotated[Items[PhaseEvent], Field(serialization_alias="recordedHistory")] = ()
    provenance: Items[ProvenanceRow] = ()
    spec: JsonObject | None = None
    children: Items[str] = ()  # a workflow parent's children
    parent: str | None = None  # a workflow child's parent
    # the flavor its run holds quota in, or the plan assigns it (a queue with flavors)
    flavor: OmitEmpty[str | None] = None
    # where its run writes its outputs (run.outputs), as its workload was dispatched
    outputs_path: OmitEmpty[str | None] = None
    # a workflow parent: each child's phase and named outputs, to compare
    child_runs: OmitEmpty[Items[ChildRun]] = ()
    # a scheduled operation: {lastRun, lastFire, nextFire} (its runs are its children)
    schedule: OmitEmpty[JsonObject | None] = None


def phase_history(
    op: CompiledOperation | None, state: WorkloadState | None
) -> tuple[PhaseEvent, ...]:
    """The current run's phases with the times the workload and the repo record: submitted
    (the operation file's first commit), dispatched, started, finished."""
    submitted = op.submitted_at.isoformat() if op is not None and op.submitted_at else None
    out = [PhaseEvent(phase=Phase.QUEUED, at=submitted, note="committed to the config repo")]
    if state is None:
        return tuple(out)
    out.append(
        PhaseEvent(phase=Phase.DISPATCHED, at=state.dispatched_at, note=f"workload {state.name}")
    )
    if state.started_at or state.phase is Phase.RUNNING or state.phase.finished:
        out.append(PhaseEvent(phase=Phase.RUNNING, at=state.started_at, note=state.node or ""))
    if state.phase.finished:
        reason = str(state.reason) if state.reason is not None else ""
        note = state.message or reason
        out.append(PhaseEvent(phase=state.phase, at=state.finished_at, note=note))
    return tuple(out)


def recorded_history(
    versions: Sequence[tuple[str, datetime, OperationStatus]],
) -> tuple[PhaseEvent, ...]:
    """From the versions of an operation's status file (oldest first, with the commit
    that wrote each and its time), one event per change of generation, phase or reason."""
    out: list[PhaseEvent] = []
    last: tuple[int | None, str, str | None] | None = None
    for sha, when, rec in versions:
        key = (rec.generation, rec.phase, rec.reason)
        if key == last:
            continue
        last = key
        notes = [f"generation {rec.generation}"] if rec.generation is not None else []
        if rec.reason:
            notes.append(rec.reason)
        if rec.position is not None:
            notes.append(f"position {rec.position}")
        notes.append(f"status commit {sha[:12]}")
        at = when.isoformat(timespec="seconds")
        out.append(PhaseEvent(phase=rec.phase, at=at, note=", ".join(notes)))
    return tuple(out)


def build_operation_detail(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    op_id: str,
    *,
    applied: bool,
    recorded: Sequence[tuple[str, datetime, OperationStatus]] = (),
    estimates: Estimates = NO_ESTIMATES,
    failed: Mapping[str, tuple[str, str]] | None = None,
) -> OperationDetail | None:
    """``operation_detail`` of a plan over ``states`` made without a decision: its
    dispatches carried out with ``applied`` but ``failed`` (reason and error), none
    without."""
    failures = {op: Failure(StatusReason(r), e) for op, (r, e) in (failed or {}).items()}
    shown = planned_report(repo, plan, states, carried_out=applied, failed=failures)
    return operation_detail(shown, op_id, recorded=recorded, estimates=estimates)


def _schedule_detail(
    shown: Report,
    op_id: str,
    templates: Sequence[CompiledOperation],
    recorded: tuple[PhaseEvent, ...],
) -> OperationDetail:
    """A scheduled operation: its runs (a scheduled workflow's: each night's workflow) are
    its children, its phase their aggregate, with its last run and next fire time."""
    carried = shown.carried_out
    failed = {op: (str(f.reason), f.error) for op, f in shown.failed.items()}
    runs: dict[str, list[str]] = {}  # each run -> the operations it dispatches
    for o in shown.compiled.operations:
        wf = o.workflow
        if wf is not None and wf.parent == op_id:
            runs.setdefault(o.id, []).append(o.id)
        elif wf is not None and tick_time(op_id, wf.parent) is not None:
            runs.setdefault(wf.parent, []).append(o.id)
    if runs:
        # each run's phase (a workflow's: its children's aggregate), as its status record
        phase, message = workflow_summary(
            workflow_summary(Phase(_phase_of(c, shown.states, carried, failed)) for c in run)[0]
            for run in runs.values()
        )
    else:
        phase, message = Phase.QUEUED, "no run yet"
    first = templates[0]
    assert first.schedule is not None
    return OperationDetail(
        operation=op_id,
        phase=phase.value,
        message=message,
        kind="schedule",
        path=first.path,
        queue=first.queue,
        cluster=first.cluster,
        namespace=first.namespace,
        children=tuple(sorted(runs)),
        recorded=recorded,
        schedule=schedule_times(
            first.schedule, runs, shown.plan.at, stopped=any(t.stopped for t in templates)
        ),
    )


def operation_detail(
    shown: Report,
    op_id: str,
    *,
    recorded: Sequence[tuple[str, datetime, OperationStatus]] = (),
    estimates: Estimates = NO_ESTIMATES,
) -> OperationDetail | None:
    """One operation of a cycle's report (a workflow parent lists its children), or None
    if neither the config nor any cluster knows it. A planned dispatch is Dispatched when
    it was carried out, Queued with its reason and error when its create failed (as the
    status branch records it), and Queued as the plan's next when it was not tried."""
    repo, plan, states = shown.compiled, shown.plan, shown.states
    carried = shown.carried_out
    failed = {op: (str(f.reason), f.error) for op, f in shown.failed.items()}
    applied = op_id in carried or op_id in failed  # tried: its create's result is known
    op = next((o for o in repo.operations if o.id == op_id), None)
    state = states.get(op_id)
    if state is not None and op is not None and state.generation != op.generation:
        state = None  # an older generation's workload; the current run has not started
    pending, position = next(
        ((p, at) for at, p in numbered(plan.pending) if p.operation == op_id),
        (None, 0),
    )
    rejected = next((r for r in repo.rejected if r.operation == op_id), None)
    group = schedule_groups(repo).get(op_id) if op is None else None
    if group:
        return _schedule_detail(shown, op_id, group, recorded_history(recorded))
    if op is None:
        children = tuple(o.id for o in repo.operations if o.workflow and o.workflow.parent == op_id)
        if children:
            first = next(o for o in repo.operations if o.id == children[0])
            phase, message = workflow_summary(
                Phase(_phase_of(c, states, carried, failed)) for c in children
            )
            return OperationDetail(
                operation=op_id,
                phase=phase.value,
                message=message,
                kind=first.workflow.kind if first.workflow else None,
                path=first.path,
                queue=first.queue,
                cluster=first.cluster,
                namespace=first.namespace,
                children=children,
                child_runs=tuple(_child_run(c, states, carried, failed) for c in children),
                recorded=recorded_history(recorded),
            )
        if state is None and rejected is None:
            return None
    base = OperationDetail(
        operation=op_id,
        # refused by policy: Rejected, or the phase of its workload that still runs (as its
        # status record says)
        phase=_phase_of(op_id, states, carried, failed)
        if rejected is None or state is not None
        else StatusPhase.REJECTED.value,
        kind=str(op.kind) if op else None,
        path=op.path if op else (rejected.path if rejected else None),
        queue=op.queue if op else (state.queue if state else None),
        cluster=op.cluster if op else (state.cluster if state else None),
        namespace=op.namespace if op else (state.namespace if state else None),
        generation=op.generation if op else (state.generation if state else None),
        config_commit=repo.version,
        requests=requests_text(op.requests) if op else "",
        presets=op.presets if op else (),
        history=phase_history(op, state),
        recorded=recorded_history(recorded),
        provenance=provenance_rows(op) if op else (),
        spec=op.spec if op else None,
        parent=op.workflow.parent if op and op.workflow else None,
    )
    fields: dict[str, Any] = {}
    if state is not None:
        fields.update(
            reason=str(state.reason) if state.reason is not None else None,
            message=state.message,
            queue=state.queue or (op.queue if op else None),  # the queue that admitted it
            cluster=state.cluster,
            namespace=state.namespace,
            workload=state.name,
            pod=state.pod,
            node=state.node,
            outputs=state.outputs,
            outputs_path=state.outputs_path,
            config_commit=state.config_commit or repo.version,
            flavor=state.flavor,
        )
    if rejected is not None:  # what its status record says, with a workload or not
        fields.update(reason=str(rejected.reason), message=rejected_message(rejected))
    elif op is None and state is not None:  # removed from the repo, its workload still there
        refusal = plan.prune_refused
        refused = refusal is not None and op_id in refusal.refused
        stopping = any(s.operation == op_id for s in plan.stop)
        reason, message = removed_reason(state, stopping, refusal if refused else None)
        fields.update(reason=reason.value, message=message)
    elif state is None and op_id in failed:  # its create failed: Queued, as recorded
        fields.update(reason=failed[op_id][0], message=failed[op_id][1])
    elif state is None and pending is not None:
        fields.update(
            reason=str(pending.reason),
            message=pending.message,
            position=position,
            admitted_when=pending.admit.text,
            admit=pending.admit.to_json(),
            blocked_by=pending.blocked_by.to_json(),
            estimate=estimates.json_of(op_id),
        )
    elif state is None and (chosen := _dispatched_to(plan, op_id)) is not None:
        # a fleet queue's: the cluster check 10 chose; a queue with flavors': the flavor
        fields.update(cluster=chosen.cluster, flavor=chosen.flavor)
        if not applied:
            fields.update(message="the plan dispatches it next (not created yet)")
    return _replace(base, fields)


def _dispatched_to(plan: Plan, op_id: str) -> Dispatch | None:
    """The plan's dispatch of ``op_id``; None when it does not dispatch it."""
    return next((d for d in plan.dispatch if d.operation == op_id), None)


def _replace(detail: OperationDetail, fields: Mapping[str, Any]) -> OperationDetail:
    return detail.model_copy(update=fields)


def _child_run(
    op_id: str,
    states: Mapping[str, WorkloadState],
    carried: frozenset[str],
    failed: Mapping[str, tuple[str, str]],
) -> ChildRun:
    state = states.get(op_id)
    return ChildRun(
        operation=op_id,
        phase=_phase_of(op_id, states, carried, failed),
        outputs=named_outputs(state.outputs if state is not None else None),
    )


def _phase_of(
    op_id: str,
    states: Mapping[str, WorkloadState],
    carried: frozenset[str],
    failed: Mapping[str, tuple[str, str]],
) -> str:
    state = states.get(op_id)
    if state is not None:
        return state.phase.value
    if op_id in carried and op_id not in failed:
        return Phase.DISPATCHED.value
    return Phase.QUEUED.value


# --- text -------------------------------------------------------------------------------

HEADERS = ["QUEUE", "CLUSTER", "PRIORITY", "ACTIVE/LIMIT", "QUOTA USED/LIMIT", "BUDGET"]
HEADERS += ["RUNNING", "WAITING", "PENDING", "HEAD REASON", "HEAD STARTS"]
WIDE_HEADERS = [*HEADERS, "NEXT", "PODS/LIMIT", "COHORT", "KINDS", "STRATEGY", "PAUSED"]
FLEET_HEADERS = ["CLUSTER", "QUEUES", "ACTIVE", "RUNNING", "WAITING", "PENDING", "QUOTA USED/LIMIT"]
FLEET_QUEUE_HEADERS = ["FLEET QUEUE", "CLUSTER", "ACTIVE", "USED/CLUSTERQUOTA", "FREE", "NODES"]


def _quota_cell(quotas: Sequence[QuotaUse]) -> str:
    return ", ".join(f"{q.resource} {q.text}" for q in quotas) or "-"


def queues_to_table(view: QueuesView, *, wide: bool = False) -> str:
    """``reconciler queues``: the rows, then the fleet totals per cluster and overall, then
    each fleet queue's clusters with their free capacity."""
    rows = []
    for r in view.rows:
        cells = [
            r.name,
            r.cluster,
            str(r.priority),
            r.concurrency_text,
            r.quota_text,
            r.budget_text or "-",
            str(r.running),
            str(r.waiting),
            str(r.pending),
            r.head_reason or "-",
            r.head_starts or "-",
        ]
        if wide:
            cells += [str(r.next), r.pods_text, r.cohort or "-", ",".join(r.kinds) or "-"]
            cells += [r.strategy, str(r.paused).lower()]
        rows.append(cells)
    fleet = [
        [
            t.cluster or "(all)",
            str(t.queues),
            str(t.active),
            str(t.running),
            str(t.waiting),
            str(t.pending),
            _quota_cell(t.quotas),
        ]
        for t in (*view.clusters, view.fleet)
    ]
    shares = [
        [
            r.name,
            c.cluster if c.reachable else f"{c.cluster} (unreachable)",
            str(c.active),
            c.used_text,
            c.free_text,
            str(c.nodes),
        ]
        for r in view.fleet_queues
        for c in r.clusters
    ]
    fleet_queues = "\n\n" + text_table(FLEET_QUEUE_HEADERS, shares) if shares else ""
    forecasts = [r.budget.forecast for r in view.rows if r.budget is not None]
    burn = "".join(f"\n{f}" for f in forecasts if f)
    return (
        text_table(WIDE_HEADERS if wide else HEADERS, rows)
        + ("\n" + burn if burn else "")
        + "\n\n"
        + text_table(FLEET_HEADERS, fleet)
        + fleet_queues
        + "\n"
    )
