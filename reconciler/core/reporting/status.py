"""The status branch's files, rendered from one cycle's compiled config, plan and
observations (pure), and read back.

Layout (see ``docs/status.md``): ``status/<project>/<bucket>/<operation>.yaml`` per
operation (``operation_path``; branches written before the buckets hold
``status/<project>/<operation>.yaml``, still read, and moved by the next write),
``status/queues.yaml``, each queue's pending order ``status/_queues/<queue>.yaml``,
``status/config.yaml`` and the ledger of finished runs,
``status/ledger/<YYYY-MM>.yaml`` (``core/plan/ledger.py``). Files are deterministic YAML with sorted
keys and no per-cycle field (no "now"): an unchanged world renders byte-identical files, so
the writer makes no commit.

What must live here: the status records (one model and one serializer each), their rendering
from a cycle (whole, or again where a cycle changed their inputs: ``render_changes``), their
reading back (``read_status``, lenient to hand edits), and what changed between two sets of
files (the commit message). The report that feeds them is
``report.py``'s.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections import ChainMap, Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from functools import cache, lru_cache
from itertools import compress, count, filterfalse, groupby, repeat
from operator import attrgetter, is_not, ne
from types import SimpleNamespace
from typing import Annotated, Any, Self, TypeVar

import yaml
from pydantic import Field

from reconciler.core.decision.render import operation_workload, spec_hash
from reconciler.core.decision.schedule import schedule_groups, schedule_times, tick_time
from reconciler.core.load import YAML12_RESOLVERS, parse_yaml
from reconciler.core.observation.capacity import ClusterCapacity, NodeCapacity, Taint
from reconciler.core.observation.gang import GangTimeout, Placement
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.observation.outputs import OutputValue, named_outputs
from reconciler.core.plan import (
    BudgetSummary,
    Dispatch,
    FlavorUsage,
    FleetSlice,
    Pending,
    Plan,
    PruneRefusal,
    QueueSummary,
    StopReason,
)
from reconciler.core.plan.ledger import (
    LEDGER_DIR,
    Ledger,
    LedgerEntry,
    LedgerFile,
    LedgerProblems,
    entries_from_document,
    is_ledger_path,
    ledger_files,
    ledger_month,
)
from reconciler.core.quantity import format_quantity, parse_quantity
from reconciler.core.reporting.block_yaml import BlockYaml
from reconciler.core.reporting.wire import Items, JsonObject, OmitEmpty, WireModel
from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    ConfigError,
    Location,
    Phase,
    RejectedOperation,
)

T = TypeVar("T")

STATUS_DIR = "status"
QUEUES_FILE = f"{STATUS_DIR}/queues.yaml"
CONFIG_FILE = f"{STATUS_DIR}/config.yaml"
CLUSTERS_FILE = f"{STATUS_DIR}/clusters.yaml"
# what a status commit's cycle decided over, to replay it (``core/reporting/replay.py``); its
# runs continue in ``_decision.2.yaml``, ... ``RUNS_PER_FILE`` a file (a run is ~25 values)
DECISION_FILE = f"{STATUS_DIR}/_decision.yaml"
RUNS_PER_FILE = 500
_DECISION_PART = re.compile(r"^status/_decision\.([2-9]|[1-9][0-9]+)\.yaml$")


# the notifications decided but not yet confirmed delivered (``core/reporting/notify.py``):
# written only with a commit the status makes anyway, read by the next leader
NOTIFY_FILE = f"{STATUS_DIR}/_notify.yaml"


def decision_path(part: int = 1) -> str:
    return DECISION_FILE if part == 1 else f"{STATUS_DIR}/_decision.{part}.yaml"


def is_decision_path(path: str) -> bool:
    return path == DECISION_FILE or _DECISION_PART.match(path) is not None


# Each queue's pending operations in order (their positions): ``status/_queues/<queue>.yaml``,
# continued in ``<queue>.2.yaml``, ... The ``_`` keeps the folder apart from the projects'
# (a project name is a DNS label), and a queue name has no dot.
ORDER_DIR = f"{STATUS_DIR}/_queues"
ORDER_PER_FILE = 5000  # ids per file: well within the reader's limits (1 MiB, 20,000 values)
_ORDER_FILE = re.compile(r"^status/_queues/([^/.]+)(?:\.([1-9][0-9]*))?\.yaml$")


def order_path(queue: str, part: int = 1) -> str:
    """``status/_queues/<queue>.yaml``, then ``<queue>.2.yaml``, ..."""
    return f"{ORDER_DIR}/{queue}.yaml" if part == 1 else f"{ORDER_DIR}/{queue}.{part}.yaml"


def is_order_path(path: str) -> bool:
    return path.startswith(ORDER_DIR) and _ORDER_FILE.match(path) is not None


class StatusPhase(enum.StrEnum):
    """The phases only a status record has, never a workload."""

    REJECTED = "Rejected"  # refused by policy and no workload: it will not run


# A status record's phase: its workload's, its children's aggregate, or ``Rejected``.
RecordPhase = Phase | StatusPhase
REJECTED = StatusPhase.REJECTED
# The aggregate of a workflow parent's children ("matrix" or "dag").
WORKFLOW = "workflow"


class Sync(enum.StrEnum):
    SYNCED = "Synced"
    OUT_OF_SYNC = "OutOfSync"  # an active workload runs another spec than the repo's


class StatusReason(enum.StrEnum):
    WORKLOAD_CREATED = "WorkloadCreated"  # dispatched this cycle, not observed yet
    REMOVED_FROM_REPO = "RemovedFromRepo"
    PRUNE_REFUSED = "PruneRefused"  # removed, but the mass-deletion guard held
    DISPATCH_FAILED = "DispatchFailed"  # planned, but creating the workload failed
    NAMESPACE_FORBIDDEN = "NamespaceForbidden"  # its namespace is missing, may not create it
    INTERNAL_ERROR = "InternalError"  # config.yaml: a bug compiling ``version``, not its fault


class StatusFileError(ValueError):
    """A status file that cannot be read back; ``str()`` is ``file:line:col: message``."""


# An operation's record sits in one of 4,096 bucket folders of its project's, by a hash of
# its name: a write then rewrites a few small trees, where one folder of 100,000 records
# made Git rehash, pack and unpack a 4.5 MB tree at every write. The hash is blake2b's, not
# ``hash()``: the same in every process and Python version, as a path must be. A bucket
# cannot be taken for another status file: those sit directly under ``status/`` or in
# ``_queues/`` and ``ledger/``, which no project is named (a project is a DNS label, and
# ``ledger`` is reserved), and a bucket is a folder one level below a project's.
_BUCKET_DIGITS = 3  # 4,096 buckets: ~24 records a folder at 100,000, a project's tree ~130 KB


def record_bucket(name: str) -> str:
    """The bucket of an operation named ``name`` in its project: 3 hex digits."""
    return hashlib.blake2b(name.encode(), digest_size=2).hexdigest()[:_BUCKET_DIGITS]


def operation_path(operation: str) -> str:
    """``team-a/train`` -> ``status/team-a/<bucket>/train.yaml`` (``record_bucket``): the
    one place a record's path is made."""
    project, _, name = operation.partition("/")
    return f"{STATUS_DIR}/{project}/{record_bucket(name)}/{name}.yaml"


def flat_operation_path(operation: str) -> str:
    """``team-a/train`` -> ``status/team-a/train.yaml``: where a branch written before the
    buckets holds its record (read still; the next write moves it)."""
    return f"{STATUS_DIR}/{operation}.yaml"


def record_paths(operation: str) -> tuple[str, str]:
    """Where an operation's record may be, the first found wins: its bucket's, then the
    flat layout's (a branch, or a past commit, written before the buckets)."""
    return operation_path(operation), flat_operation_path(operation)


def path_operation(path: str) -> str | None:
    """The operation whose record ``path`` is by its place, in either layout
    (``record_paths``); None for any other path (a queue's order, the ledger, a record in
    a bucket not its name's)."""
    if not path.startswith(f"{STATUS_DIR}/") or not path.endswith(".yaml"):
        return None
    parts = path[len(STATUS_DIR) + 1 : -len(".yaml")].split("/")
    if len(parts) == 2 and not path.startswith((f"{ORDER_DIR}/", f"{LEDGER_DIR}/")):
        return path[len(STATUS_DIR) + 1 : -len(".yaml")]
    if len(parts) == 3 and parts[1] == record_bucket(parts[2]):
        return f"{parts[0]}/{parts[2]}"
    return None


def logs_command(operation: str) -> str:
    return f"reconciler logs {operation}"


# --- the records ------------------------------------------------------------------------
# One pydantic model per file record (``wire``): written by ``to_dict``, read by
# ``from_dict``. Reading keeps what the reconciler always accepted from old, partial or
# hand-edited files: unknown keys are ignored, a missing optional key takes its default,
# scalars are read as text where the record holds text, and a mistyped number or mapping
# is dropped. What cannot be a record is a ``not a status file`` problem.


@dataclass(frozen=True, slots=True)
class _Read:
    """How ``from_dict`` reads a field's value as a file holds it. Pydantic ignores this
    marker: a record built in code is validated by its field types alone."""

    convert: Callable[[Any], Any]


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _text_or_empty(value: Any) -> str:
    return "" if value is None else str(value)


def _text_or_nothing(value: Any) -> str:
    return str(value or "")


def _number_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping_or_none(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


def _text_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _sync(value: Any) -> str:
    return _text_or_empty(value) or Sync.SYNCED.value


_PHASES: dict[str, RecordPhase] = {p.value: p for p in (*Phase, *StatusPhase)}


def _phase(value: Any) -> RecordPhase:
    phase = _PHASES.get(str(value))
    if phase is None:
        raise ValueError(f"unknown phase {str(value)!r}")
    return phase


# How a field is read; ``OmitEmpty`` ones are left out of the file when empty.
Text = Annotated[str, _Read(str)]
OptText = Annotated[str | None, _Read(_text_or_none)]
EmptyText = OmitEmpty[Annotated[str, _Read(_text_or_empty)]]  # "" when missing or null
Texts = OmitEmpty[Annotated[Items[str], _Read(_texts)]]
TextMap = Annotated[Mapping[str, str], _Read(_text_map)]
Number = Annotated[int, _Read(int)]
OptNumber = Annotated[int | None, _Read(_int_or_none)]
Flag = Annotated[bool, _Read(bool)]
# An operation's optional number or mapping: dropped, not refused, when mistyped.
LooseNumber = Annotated[int | None, _Read(_number_or_none)]
LooseObject = Annotated[JsonObject | None, _Read(_mapping_or_none)]
PhaseText = Annotated[RecordPhase, _Read(_phase)]
SyncText = Annotated[str, _Read(_sync)]


class StatusRecord(WireModel):
    """A record of a status file: camelCase keys, sorted by the writer, and a field
    without a value (None, or empty where marked) left out."""

    def to_dict(self) -> dict[str, Any]:
        """The record as its file holds it (before ``dump_yaml``)."""
        return self.model_dump(by_alias=True, exclude_none=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """A record from a file, read field by field in field order; only the camelCase
        keys count (a snake_case key is an unknown one). Raises ``ValueError`` naming the
        first bad field: ``'operation'`` when a required key is missing, else the
        reading's own message."""
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping, not {type(data).__name__}")
        values: dict[str, Any] = {}
        for key, required, read in _fields(cls):
            if key not in data:
                if required:
                    raise ValueError(repr(key))
                continue
            try:
                values[key] = data[key] if read is None else read(data[key])
            except (TypeError, AttributeError, ValueError) as err:
                raise ValueError(str(err)) from None
        return cls.model_validate(values, by_alias=True, by_name=False)


@cache
def _fields(
    record: type[StatusRecord],
) -> tuple[tuple[str, bool, Callable[[Any], Any] | None], ...]:
    """Per field of ``record``, in order: its key in a file, whether it is required, and
    how it is read."""
    return tuple(
        (
            info.alias or name,
            info.is_required(),
            next((m.convert for m in info.metadata if isinstance(m, _Read)), None),
        )
        for name, info in record.model_fields.items()
    )


class SupersededRun(StatusRecord):
    """An older generation of an operation still active after a bump: it holds its quota
    until it finishes (``docs/dispatch.md``), so ``plan`` from the status branch counts it."""

    generation: Number
    cluster: Text
    namespace: Text
    workload: Text
    phase: PhaseText
    queue: OptText = None
    requests: OmitEmpty[TextMap] = Field(default_factory=dict)
    pods: OptNumber = None  # its replicas, when more than one
    dispatched_at: OptText = None
    started_at: OptText = None
    flavor: OptText = None  # the flavor it holds quota in
    timeout: OptNumber = None  # seconds it was dispatched with: its reservation's end

    @classmethod
    def of(cls, state: WorkloadState) -> SupersededRun:
        return cls(
            generation=state.generation,
            cluster=state.cluster,
            namespace=state.namespace,
            workload=state.name,
            phase=state.phase,
            queue=state.queue,
            requests={r: format_quantity(v) for r, v in sorted(state.requests.items())},
            pods=_pods(state),
            dispatched_at=state.dispatched_at,
            started_at=state.started_at,
            flavor=state.flavor,
            timeout=_held_timeout(state),
        )

    def state(self, operation: str) -> WorkloadState | None:
        """The run as a workload of ``operation``; None when the record cannot be one (an
        unreadable quantity, or a phase a workload cannot have)."""
        if not isinstance(self.phase, Phase):
            return None
        return WorkloadState(
            operation=operation,
            generation=self.generation,
            cluster=self.cluster,
            namespace=self.namespace,
            name=self.workload,
            uid="",
            phase=self.phase,
            queue=self.queue,
            requests=recorded_requests(self) or {},
            pods=recorded_pods(self),
            dispatched_at=self.dispatched_at,
            started_at=self.started_at,
            flavor=self.flavor,
            timeout=_positive(self.timeout),
        )


def _superseded_runs(value: Any) -> tuple[SupersededRun, ...]:
    """The readable entries of a ``superseded`` list (an unreadable one is dropped, as a
    mistyped optional field is)."""
    runs = []
    for entry in value or ():
        try:
            runs.append(SupersededRun.from_dict(entry))
        except ValueError:
            continue
    return tuple(runs)


class InputRun(SupersededRun):
    """A run the cycle counted that its operation's record no longer says: the state the
    planner was given of a run the cycle stopped."""

    operation: Text


def _input_runs(value: Any) -> tuple[InputRun, ...]:
    return tuple(InputRun.from_dict(v) for v in value or ())


class DecisionRecord(StatusRecord):
    """``status/_decision.yaml``: what a replay of the commit's cycle needs besides the
    files beside it. The records say each run after the cycle; the planner counted each
    before it: ``dispatched`` (created this cycle: no run before) and ``runs`` (stopped this
    cycle: the run as it was) are the difference. ``clock`` is the cycle's instant,
    ``config`` the commit in force. A shard's (``run --shards``) names the ``clusters``
    and ``queues`` of the partitions it decided over: its replay decides over them alone
    (empty: the whole config)."""

    clock: Text
    config: Text
    clusters: Texts = ()
    queues: Texts = ()
    dispatched: Texts = ()
    runs: OmitEmpty[Annotated[Items[InputRun], _Read(_input_runs)]] = ()
    part: OmitEmpty[Number] = 0  # a continuation file's number (2, 3, ...): more runs

    def files(self) -> dict[str, bytes]:
        """The record's files: its runs ``RUNS_PER_FILE`` a file, each file within the
        reader's limits."""
        out: dict[str, bytes] = {}
        for start in range(0, max(len(self.runs), 1), RUNS_PER_FILE):
            part = start // RUNS_PER_FILE + 1
            chunk = self.runs[start : start + RUNS_PER_FILE]
            record = (
                self.model_copy(update={"runs": chunk})
                if part == 1
                else DecisionRecord(clock=self.clock, config=self.config, runs=chunk, part=part)
            )
            out[decision_path(part)] = dump_yaml(record.to_dict())
        return out


class OperationStatus(StatusRecord):
    """One ``status/<project>/<operation>.yaml``. ``phase`` is a :class:`Phase`, or
    ``Rejected`` (:class:`StatusPhase`); a workflow parent's is the aggregate of its
    children's."""

    operation: Text
    phase: PhaseText
    reason: OptText = None
    message: EmptyText = ""
    kind: OptText = None
    path: OptText = None  # the operation's file in the config repo
    queue: OptText = None
    cluster: OptText = None
    namespace: OptText = None
    workload: OptText = None
    # the workload's kind when it is not a Job: PyTorchJob (run.distributed.backend)
    workload_kind: EmptyText = ""
    # 1-based among the queue's pending: read from ``status/_queues`` (``read_status``); only
    # records written before that folder existed hold it themselves
    position: LooseNumber = None
    generation: LooseNumber = None
    config_commit: OptText = None
    dispatched_at: OptText = None
    started_at: OptText = None
    finished_at: OptText = None
    outputs: LooseObject = None
    outputs_path: OptText = None  # where its run writes its outputs (run.outputs)
    spec_hash: OptText = None
    workload_spec_hash: OptText = None  # only when it differs from ``spec_hash``
    sync: SyncText = Sync.SYNCED.value
    blocked_by: LooseObject = None
    workflow: LooseObject = None  # a child: {parent, kind, index}
    children: Texts = ()  # a workflow parent: its children's ids
    logs: EmptyText = ""
    # what its active workload requests (the quota it holds), as the cluster said
    requests: OmitEmpty[TextMap] = Field(default_factory=dict)
    # the pods its active workload runs (a distributed run's replicas), when more than one
    pods: OptNumber = None
    # seconds its active workload was dispatched with (its reservation runs to it)
    timeout: OptNumber = None
    # older generations still active (holding quota), oldest first
    superseded: OmitEmpty[Annotated[Items[SupersededRun], _Read(_superseded_runs)]] = ()
    # a distributed run stopped by its queue's startTimeout: {count, dispatchedAt}
    gang_timeouts: LooseObject = None
    # a run stopped in the repo (StoppedInRepo): the commit that set ``stopped: true``, its
    # author (when Git could say) and the file and line: {commit, author, file, line}
    stopped_by: LooseObject = None
    # the flavor its run was assigned (a queue with flavors): the quota it holds
    flavor: OptText = None
    # an active distributed run's pods: {replicas, placed, running}, so the views from the
    # status branch see a gang past its queue's startTimeout as the cycle does
    placement: LooseObject = None
    # a scheduled operation: {lastRun, lastFire, nextFire} (its runs are its children)
    schedule: LooseObject = None

    @property
    def named_outputs(self) -> dict[str, OutputValue]:
        """Its run's named outputs (``accuracy: 0.93``), bounded
        (``core.observation.outputs``): what a notification or a comparison shows of
        ``outputs``."""
        return named_outputs(self.outputs)


class FleetSliceStatus(StatusRecord):
    """A fleet queue's share of one of its clusters (``fleet`` in ``status/queues.yaml``),
    with this cycle's dispatches applied; ``free`` is left out when not observed."""

    cluster: Text
    reachable: Flag = True
    active: Number = 0
    used: TextMap = Field(default_factory=dict)
    cluster_quota: OmitEmpty[TextMap] = Field(default_factory=dict)
    # left out when not observed (None); written when observed, even with nothing free ({})
    free: TextMap | None = None
    nodes: Number = 0

    @classmethod
    def from_slice(cls, s: FleetSlice) -> FleetSliceStatus:
        return cls(
            cluster=s.cluster,
            reachable=s.reachable,
            active=s.active,
            used=_quantities_text(s.used),
            cluster_quota=_quantities_text(s.quota),
            free=None if s.free is None else _quantities_text(s.free),
            nodes=s.nodes,
        )


def _quantities_text(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {r: format_quantity(v) for r, v in sorted(values.items())}


def _fleet(value: Any) -> tuple[FleetSliceStatus, ...]:
    return tuple(FleetSliceStatus.from_dict(v) for v in value or ())


class FlavorStatus(StatusRecord):
    """One flavor of a queue with flavors (``flavors`` in ``status/queues.yaml``): its quota
    and use per resource, and in a cohort what it borrowed and lent of the flavor, with this
    cycle's dispatches applied (like the queue's ``used``)."""

    name: Text
    quota: TextMap = Field(default_factory=dict)
    used: TextMap = Field(default_factory=dict)
    borrowed: OmitEmpty[TextMap] = Field(default_factory=dict)
    lent: OmitEmpty[TextMap] = Field(default_factory=dict)

    @classmethod
    def from_usage(cls, f: FlavorUsage) -> FlavorStatus:
        return cls(
            name=f.name,
            quota=_quantities_text(f.quota),
            used=_quantities_text(f.used_after),
            borrowed=_quantities_text(f.borrowed_after),
            lent=_quantities_text(f.lent_after),
        )


def _flavors(value: Any) -> tuple[FlavorStatus, ...]:
    """A queue's flavors as recorded; an entry that is not a flavor record is skipped (a
    hand-edited file loses that flavor's line in the views, not the queue)."""
    out = []
    for entry in value or ():
        try:
            out.append(FlavorStatus.from_dict(entry))
        except ValueError:
            continue
    return tuple(out)


class QueueOrder(StatusRecord):
    """One ``status/_queues/<queue>.yaml`` (or a continuation, ``part`` 2, 3, ...): a queue's
    pending operations in consideration order. ``first`` is the position of the first one.
    A dispatch, an arrival or a change of order rewrites only these files, never the
    operations' own records."""

    queue: Text
    first: Number = 1
    pending: Texts = ()


class QueueStatus(StatusRecord):
    """One queue in ``status/queues.yaml``: usage with this cycle's dispatches applied."""

    name: Text
    cluster: Text = ""
    priority: Number = 0
    concurrency: OptNumber = None
    quota: TextMap = Field(default_factory=dict)
    active: Number = 0
    used: TextMap = Field(default_factory=dict)
    pending: Number = 0
    head_reason: OptText = None
    strategy: Text = "BestEffortFIFO"
    paused: Flag = False
    kinds: Texts = ()  # the run kinds the queue admits
    # pods of the active operations (every replica); written only when not ``active`` (a
    # queue of single-pod operations has one pod per active operation)
    pods: OptNumber = None
    max_pods: OptNumber = None
    # cohort members: the cohort, and per quota resource how much of ``used`` is borrowed
    # and how much of ``quota`` is lent (this cycle's dispatches applied, like ``used``)
    cohort: OptText = None
    borrowed: OmitEmpty[TextMap] = Field(default_factory=dict)
    lent: OmitEmpty[TextMap] = Field(default_factory=dict)
    # a budgeted queue's window, with this cycle's dispatches: limit, spent, committed, unit,
    # per, windowStart, windowEnd (docs/budgets.md)
    budget: LooseObject = None
    # a fleet queue: each of its clusters, in choice order
    fleet: OmitEmpty[Annotated[Items[FleetSliceStatus], _Read(_fleet)]] = ()
    # a queue with flavors: each flavor's quota and use, in the queue's order (``quota``,
    # ``used``, ``borrowed`` and ``lent`` above are then the sums over its flavors)
    flavors: OmitEmpty[Annotated[Items[FlavorStatus], _Read(_flavors)]] = ()

    @classmethod
    def from_summary(cls, q: QueueSummary, kinds: tuple[str, ...] = ()) -> QueueStatus:
        budget = budget_record(q.budget) if q.budget is not None else None
        return cls(
            name=q.name,
            cluster=q.cluster,
            priority=q.priority,
            concurrency=q.concurrency,
            quota={r: format_quantity(v) for r, v in sorted(q.quota.items())},
            active=q.active + q.dispatching,
            used={r: format_quantity(v) for r, v in sorted(q.used_after.items())},
            pending=q.pending,
            head_reason=str(q.head_reason) if q.head_reason is not None else None,
            strategy=str(q.strategy),
            paused=q.paused,
            kinds=kinds,
            pods=q.pods_after if q.pods_after != q.active + q.dispatching else None,
            max_pods=q.max_pods,
            cohort=q.cohort,
            borrowed={r: format_quantity(v) for r, v in sorted(q.borrowed_after.items())},
            lent={r: format_quantity(v) for r, v in sorted(q.lent_after.items())},
            budget=budget,
            fleet=tuple(FleetSliceStatus.from_slice(m) for m in q.members),
            flavors=tuple(FlavorStatus.from_usage(f) for f in q.flavors),
        )


def budget_record(b: BudgetSummary) -> dict[str, str]:
    """A budgeted queue's window as every view shows it (the status record, the queue
    view's row, ``/api/v1``): limit, spent, committed (a report's: with the dispatches
    carried out), unit, per, windowStart, windowEnd, and the org's timezone (its windows'
    days, and the days a burn forecast names)."""
    return {
        "limit": _amount(b.limit),
        "spent": _amount(b.spent),
        "committed": _amount(b.committed_after),
        "unit": b.unit,
        "per": b.per,
        "windowStart": b.window_start.isoformat(),
        "windowEnd": b.window_end.isoformat(),
        "timezone": b.timezone,
    }


def _amount(value: Decimal) -> str:
    """A budget amount in a status file: at most 6 decimals, no trailing zeros."""
    return format(value.quantize(Decimal("0.000001")).normalize(), "f")


class ConfigStatus(StatusRecord):
    """``status/config.yaml``: the commit last read, the one in force, and its errors.

    ``reason`` is ``InternalError`` when ``version`` could not be compiled because of a bug
    in the reconciler (``internal_error`` says what failed): not a config error, so
    ``errors`` stays empty. Both keys are written only then."""

    version: Text = ""
    applied: Text = ""
    valid: Flag = True
    errors: Texts = ()
    warnings: Texts = ()
    reason: OmitEmpty[OptText] = None
    internal_error: OmitEmpty[Annotated[str, _Read(_text_or_nothing)]] = ""

    @property
    def is_internal_error(self) -> bool:
        return self.reason == StatusReason.INTERNAL_ERROR.value


def _taint_text(t: Taint) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as kubectl writes taints."""
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def _taint(text: str) -> Taint:
    head, _, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    return Taint(key, value, effect)


def _quantity_map(values: Mapping[str, str]) -> dict[str, Decimal]:
    return {r: parse_quantity(v) for r, v in values.items()}


class NodeStatus(StatusRecord):
    """A usable node in a cluster's ``capacity``: what the fleet choice needs of it."""

    name: Text
    labels: OmitEmpty[TextMap] = Field(default_factory=dict)
    taints: Texts = ()  # ``key=value:Effect``
    allocatable: TextMap = Field(default_factory=dict)
    requested: OmitEmpty[TextMap] = Field(default_factory=dict)

    def value(self) -> NodeCapacity:
        return NodeCapacity(
            self.name,
            dict(self.labels),
            tuple(sorted(_taint(t) for t in self.taints)),
            _quantity_map(self.allocatable),
            _quantity_map(self.requested),
        )


def _nodes(value: Any) -> tuple[NodeStatus, ...]:
    return tuple(NodeStatus.from_dict(v) for v in value or ())


class CapacityStatus(StatusRecord):
    """A cluster's observed capacity (``core/observation/capacity.py``), so that ``plan`` without
    ``--live`` chooses a fleet queue's cluster as the last cycle would have."""

    nodes: OmitEmpty[Annotated[Items[NodeStatus], _Read(_nodes)]] = ()
    reserved: OmitEmpty[TextMap] = Field(default_factory=dict)
    not_ready: OmitEmpty[Number] = 0
    cordoned: OmitEmpty[Number] = 0

    @classmethod
    def of(cls, c: ClusterCapacity) -> CapacityStatus:
        return cls(
            nodes=tuple(
                NodeStatus(
                    name=n.name,
                    labels=dict(n.labels),
                    taints=tuple(_taint_text(t) for t in n.taints),
                    allocatable=_quantities_text(n.allocatable),
                    requested=_quantities_text(n.requested),
                )
                for n in c.nodes
            ),
            reserved=_quantities_text(c.reserved),
            not_ready=c.not_ready,
            cordoned=c.cordoned,
        )

    def value(self) -> ClusterCapacity:
        return ClusterCapacity(
            tuple(n.value() for n in self.nodes),
            _quantity_map(self.reserved),
            self.not_ready,
            self.cordoned,
        )


def _capacity(value: Any) -> CapacityStatus | None:
    return None if value is None else CapacityStatus.from_dict(value)


class ClusterStatus(StatusRecord):
    """One entry of ``status/clusters.yaml``: could the last cycle read the cluster, and
    (a fleet queue's cluster) the capacity it observed."""

    name: Text
    reachable: Flag = True
    error: OmitEmpty[Text] = ""
    backends: Texts = ()  # the optional backends it served (e.g. pytorchjob: the CRD)
    capacity: Annotated[CapacityStatus | None, _Read(_capacity)] = None


# Object addresses in a client error ("<... object at 0x7f...>") change on every attempt; an
# outage must render the same file each cycle, not one commit per cycle.
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def stable_error(message: str) -> str:
    return _ADDRESS.sub("", message)


StatusFile = (
    OperationStatus
    | QueueOrder
    | tuple[QueueStatus, ...]
    | ConfigStatus
    | tuple[ClusterStatus, ...]
    | LedgerFile
    | DecisionRecord
)


# --- rendering --------------------------------------------------------------------------


def render_status(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    *,
    config_error: tuple[ConfigError, ...] = (),
    config_version: str | None = None,
    failed: Mapping[str, tuple[StatusReason, str]] | None = None,
    clusters: tuple[ClusterStatus, ...] = (),
    internal_error: str = "",
    superseded: Mapping[str, WorkloadState] | None = None,
    gang_timeouts: Mapping[str, GangTimeout] | None = None,
    ledger: Ledger | None = None,
    memo: RenderMemo | None = None,
    hashes: SpecHashMemo | None = None,
    phases: PhaseMemo | None = None,
    built: RecordMemo | None = None,
) -> dict[str, bytes]:
    """Every status file for one cycle, by path.

    ``repo`` is the config in force (the last good one when the newest commit is invalid:
    pass that commit's errors as ``config_error`` and its SHA as ``config_version``; when
    compiling it hit a bug, pass what failed as ``internal_error`` instead).
    ``states`` are the current workloads per operation id (``observe.current_states``);
    ``plan`` is this cycle's plan over them; ``failed`` the planned dispatches that failed
    (operation -> reason and error): they stay Queued. ``superseded`` are the older
    generations still active (``Decision.superseded``), recorded on their operation.
    ``gang_timeouts`` (the decision's ``Memory.gang_timeouts``) are written on their
    operations' records, whatever their phase, so a restart knows a re-queued gang was
    re-queued already. ``ledger``: the finished runs, one ``status/ledger/<YYYY-MM>.yaml``
    per month (not given: the ledger files are left as they are; they are never deleted).
    ``memo`` (kept by the caller between cycles) spares dumping a record equal to the one
    last dumped, and ``hashes`` hashing again the spec of an operation compiled as before
    (the same object: the incremental compile reuses it). ``phases`` (``summarize_cycle``'s
    memo) is given each operation file's run as rendered, so the commit message does not
    parse back the YAML just dumped: in a dispatch, most files change at every write.
    ``built`` (``build_status``'s memo) spares building again the record of a compiled
    operation whose inputs are the same objects, or equal, as last time."""
    records = build_status(repo, plan, states, failed, superseded, hashes, built)
    for i, record in enumerate(records):
        mark = (gang_timeouts or {}).get(record.operation)
        if mark is not None:
            records[i] = record.model_copy(update={"gang_timeouts": mark.to_json()})
    paths = [operation_path(r.operation) for r in records]  # a hash each: made once
    if memo is None:
        files = {path: dump_yaml(r.to_dict()) for path, r in zip(paths, records, strict=True)}
    else:
        files = {path: _dumped(path, r, memo) for path, r in zip(paths, records, strict=True)}
    if phases is not None:
        for path, r in zip(paths, records, strict=True):
            phases[files[path]] = _run_of_record(r)
    files.update(_order_files(plan, memo))
    if memo is not None:
        for gone in [p for p in memo if p not in files]:
            del memo[gone]
    files.update(
        _cycle_files(repo, plan, config_error, config_version, internal_error, clusters, ledger)
    )
    return dict(sorted(files.items()))


def _cycle_files(
    repo: CompiledRepo,
    plan: Plan,
    config_error: tuple[ConfigError, ...],
    config_version: str | None,
    internal_error: str,
    clusters: tuple[ClusterStatus, ...],
    ledger: Ledger | None,
) -> dict[str, bytes]:
    """The files of the cycle as a whole: the queues, the config, the clusters, the ledger."""
    files: dict[str, bytes] = {}
    queues = [QueueStatus.from_summary(q, queue_kinds(repo, q.name)).to_dict() for q in plan.queues]
    files[QUEUES_FILE] = dump_yaml({"queues": queues})
    errors = config_error or repo.errors
    warnings = (plan.prune_refused.message(),) if plan.prune_refused is not None else ()
    config = ConfigStatus(
        version=config_version or repo.version,
        applied=repo.version,
        valid=not errors and not internal_error,
        errors=listed_errors(str(e) for e in sorted(errors)),
        warnings=warnings,
        reason=StatusReason.INTERNAL_ERROR.value if internal_error else None,
        internal_error=stable_error(internal_error),
    )
    files[CONFIG_FILE] = dump_yaml(config.to_dict())
    if clusters:
        entries = [
            c.model_copy(update={"error": stable_error(c.error)}).to_dict() for c in clusters
        ]
        files[CLUSTERS_FILE] = dump_yaml({"clusters": sorted(entries, key=lambda c: c["name"])})
    if ledger is not None:
        files.update(ledger_files(ledger, dump_yaml))
    return files


# The last record dumped of each operation's file (or queue order file), and its bytes.
RenderMemo = dict[str, tuple["OperationStatus | QueueOrder", bytes]]


def _order_files(plan: Plan, memo: RenderMemo | None) -> dict[str, bytes]:
    """Each queue's pending operations in order, ``ORDER_PER_FILE`` a file; a queue with
    none has no file. Dumped without ``dump_yaml``'s memo: a long list keys it badly."""
    by_queue: dict[str, list[str]] = {}
    for p in plan.pending:  # in consideration order: by queue, then position
        by_queue.setdefault(p.queue, []).append(p.operation)
    out: dict[str, bytes] = {}
    for queue, ids in by_queue.items():
        out.update(_queue_order_files(queue, ids, memo))
    return out


def _queue_order_files(queue: str, ids: list[str], memo: RenderMemo | None) -> dict[str, bytes]:
    """One queue's order files (``_order_files``)."""
    out: dict[str, bytes] = {}
    for start in range(0, len(ids), ORDER_PER_FILE):
        path = order_path(queue, start // ORDER_PER_FILE + 1)
        record = QueueOrder(
            queue=queue, first=start + 1, pending=tuple(ids[start : start + ORDER_PER_FILE])
        )
        known = None if memo is None else memo.get(path)
        if known is not None and known[0] == record:
            out[path] = known[1]
            continue
        out[path] = data = _yaml_dump(record.to_dict())
        if memo is not None:
            memo[path] = (record, data)
    return out


def _dumped(path: str, record: OperationStatus, memo: RenderMemo) -> bytes:
    """``record``'s file at ``path`` (its ``operation_path``), from ``memo`` when equal."""
    known = memo.get(path)
    if known is not None and (known[0] is record or known[0] == record):
        return known[1]
    data = dump_yaml(record.to_dict())
    memo[path] = (record, data)
    return data


# --- rendering again what changed ------------------------------------------------------


# What an operation file says of its run (``summarize_cycle``'s): (operation, generation,
# phase), or None for a workflow parent's.
Run = tuple[str, int | None, RecordPhase] | None


@dataclass(slots=True)
class RenderedStatus:
    """A writer's status files as last rendered, and what each record was rendered from
    (kept between cycles in ``StatusMemos``): ``render_changes`` compares a cycle's inputs
    with these, by identity first (the incremental compile and the ``PlanCache`` hand the
    same objects again when nothing changed), and renders again only what differs."""

    files: dict[str, bytes] = field(default_factory=dict)  # every file, by path
    runs: dict[str, Run] = field(default_factory=dict)  # each operation file's run
    queued: int = 0  # the operation files whose run is Queued
    started: bool = False  # rendered once: the fields below hold its inputs
    connections: Mapping[str, Any] = field(default_factory=dict)
    ops: Mapping[str, CompiledOperation] = field(default_factory=dict)
    operations: tuple[CompiledOperation, ...] = ()
    order: tuple[Pending, ...] = ()  # the plan's pending entries, in its order
    pending: dict[str, Pending] = field(default_factory=dict)
    dispatch: dict[str, Dispatch] = field(default_factory=dict)
    states: dict[str, WorkloadState] = field(default_factory=dict)
    failed: dict[str, tuple[StatusReason, str]] = field(default_factory=dict)
    older: dict[str, tuple[WorkloadState, ...]] = field(default_factory=dict)
    gang: dict[str, GangTimeout] = field(default_factory=dict)
    # the compiled operations' and the workflow parents' records, and the others' ids
    base: dict[str, OperationStatus] = field(default_factory=dict)
    others: frozenset[str] = frozenset()
    children: dict[str, set[str]] = field(default_factory=dict)  # parent -> its children
    orders: dict[str, tuple[str, ...]] = field(default_factory=dict)  # queue -> its files
    cycle: frozenset[str] = frozenset()  # the paths of the cycle's own files


@dataclass(frozen=True, slots=True)
class StatusDelta:
    """What ``render_changes`` rendered: every file (``files``, the writer's: read it before
    the next render), the files that differ from the last render (``None``: gone) and the
    runs of those."""

    files: Mapping[str, bytes]
    changes: Mapping[str, bytes | None]
    runs_before: Mapping[str, Run]  # of the operation files changed: before, and now
    runs_after: Mapping[str, Run]
    queued: int  # the operation files whose run is Queued, of all ``files``


def render_changes(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    memos: StatusMemos,
    *,
    config_error: tuple[ConfigError, ...] = (),
    config_version: str | None = None,
    failed: Mapping[str, tuple[StatusReason, str]] | None = None,
    clusters: tuple[ClusterStatus, ...] = (),
    internal_error: str = "",
    superseded: Mapping[str, WorkloadState] | None = None,
    gang_timeouts: Mapping[str, GangTimeout] | None = None,
    ledger: Ledger | None = None,
    decision: Mapping[str, bytes] | None = None,
    pause: Callable[[], None] | None = None,
) -> StatusDelta:
    """``render_status`` (and ``decision``, the decision record's files) rendering again only
    the records whose inputs differ from the last call's with the same ``memos``: their
    compiled operation, plan entry, workload, failed create, superseded runs or gang mark
    (a workflow parent: its children's); the queues' order files only for a queue whose
    pending entries differ. ``files`` equals ``render_status``'s, byte for byte.

    ``pause`` is called every ``PAUSE_EVERY`` records and between the steps: it lets a
    writer thread hold the render while something with priority runs (a cycle)."""
    pause = pause or _go_on
    last = memos.last
    failed = dict(failed or {})
    older = _older_runs(superseded)
    gang = dict(gang_timeouts or {})
    by_id = repo.by_id
    dispatch = {d.operation: d for d in plan.dispatch}
    if not last.started or last.connections != repo.connections:
        pending = dict(zip(map(_OPERATION, plan.pending), plan.pending, strict=True))
        dirty = set(by_id) | set(last.ops)  # every spec hash may differ
        queues = {p.queue for p in plan.pending} | last.orders.keys()
    else:
        added, removed = _middles(repo.operations, last.operations)
        # a long middle (a preset's operations, all over the order) is mostly the same
        # objects: what is new among them, by id (compared at C speed: the middles of a
        # change spread over the order are nearly the whole of it)
        ids = list(map(_OPERATION_ID, added))
        dirty = set(compress(ids, map(is_not, map(last.ops.get, ids), added)))
        dirty.update(filterfalse(by_id.__contains__, map(_OPERATION_ID, removed)))
        came, went = _middles(plan.pending, last.order)
        left = dict(zip(map(_OPERATION, went), went, strict=True))
        pending = last.pending  # patched: the entries outside the middles are the same
        deque(map(pending.__delitem__, left), maxlen=0)
        ids = list(map(_OPERATION, came))
        pending.update(zip(ids, came, strict=True))
        # what a record says of its wait (not its position: the order files say that)
        waits = map(_WAIT, map(left.get, ids, repeat(_NOT_PENDING)))
        dirty.update(compress(ids, map(ne, map(_WAIT, came), waits)))
        dirty.update(filterfalse(pending.__contains__, left))  # no longer pending
        queues = set(map(_QUEUE, came))
        queues.update(map(_QUEUE, went))
        dirty.update(dispatch.keys() | last.dispatch.keys())
        dirty.update(k for k, v in states.items() if last.states.get(k) is not v)
        dirty.update(last.states.keys() - states.keys())
        dirty.update(failed.keys() | last.failed.keys())
    parents: set[str] = set()
    for i, oid in enumerate(dirty):
        if i % PAUSE_EVERY == 0:
            pause()
        was = last.ops.get(oid)
        if was is not None and was.workflow is not None:
            parents.add(was.workflow.parent)
            last.children.get(was.workflow.parent, set()).discard(oid)
        op = by_id.get(oid)
        if op is None:
            last.base.pop(oid, None)
            memos.built.pop(oid, None)
            memos.hashes.pop(oid, None)
            continue
        last.base[oid] = _built_record(
            repo, op, dispatch, pending, states, failed, memos.hashes, memos.built
        )
        if op.workflow is not None:
            parents.add(op.workflow.parent)
            last.children.setdefault(op.workflow.parent, set()).add(oid)
    parents |= dirty & last.children.keys()
    _parent_records(repo, parents, last)
    others = _other_records(repo, plan, states, last.base)
    changes: dict[str, bytes | None] = {}
    runs_before: dict[str, Run] = {}
    runs_after: dict[str, Run] = {}
    touched = (
        dirty
        | parents
        | others.keys()
        | last.others
        | older.keys()
        | last.older.keys()
        | gang.keys()
        | last.gang.keys()
    )
    for i, oid in enumerate(touched):
        if i % PAUSE_EVERY == 0:
            pause()
        record = others.get(oid)
        if record is None:
            record = last.base.get(oid)
        path = operation_path(oid)
        if record is not None:
            runs = older.get(oid)
            if runs is not None:
                record = _with_superseded(record, runs)
            mark = gang.get(oid)
            if mark is not None:
                record = record.model_copy(update={"gang_timeouts": mark.to_json()})
            data = _dumped(path, record, memos.rendered)
            run = _run_of_record(record)
            memos.phases[data] = run
        elif path not in last.files:
            continue
        else:
            memos.rendered.pop(path, None)
            data, run = None, None
        if last.files.get(path) == data:
            continue
        runs_before[path] = was_run = last.runs.get(path)
        runs_after[path] = run
        last.queued += _queued(run) - _queued(was_run)
        gone = last.files.get(path)
        if gone is not None:
            memos.phases.pop(gone, None)  # no file holds it any more
        _put(last.files, changes, path, data)
        if data is None:
            del last.runs[path]
        else:
            last.runs[path] = run
    pause()
    _order_changes(plan, queues, last, memos.rendered, changes, pause)
    cycle = _cycle_files(repo, plan, config_error, config_version, internal_error, clusters, ledger)
    cycle.update(decision or {})
    for path in last.cycle - cycle.keys():
        _put(last.files, changes, path, None)
    for path, data in cycle.items():
        if last.files.get(path) != data:
            _put(last.files, changes, path, data)
    last.cycle = frozenset(cycle)
    last.started = True
    last.connections = repo.connections
    last.ops, last.operations, last.order = by_id, repo.operations, plan.pending
    last.pending, last.dispatch, last.states = pending, dispatch, dict(states)
    last.failed, last.older, last.gang, last.others = failed, older, gang, frozenset(others)
    return StatusDelta(
        last.files, dict(sorted(changes.items())), runs_before, runs_after, last.queued
    )


# records rendered between two calls of ``render_changes``'s ``pause`` (~10 ms of CPU)
PAUSE_EVERY = 100


def _go_on() -> None:
    """The default pause: never holds the render."""


_OPERATION = attrgetter("operation")
_OPERATION_ID = attrgetter("id")
_QUEUE = attrgetter("queue")
_WAIT = attrgetter("reason", "blocked_by")
# what ``_WAIT`` reads of an operation that was not pending
_NOT_PENDING = SimpleNamespace(reason=None, blocked_by=None)


def _middles(now: Sequence[T], last: Sequence[T]) -> tuple[Sequence[T], Sequence[T]]:
    """What lies between the longest common head and tail (the same objects, compared at
    C speed) of ``now`` and ``last``: a few entries added, removed or replaced leave a
    short middle, and every entry outside it is the same object as before."""
    common = min(len(now), len(last))
    head = next(compress(count(), map(is_not, now, last)), common)
    tail = next(compress(count(), map(is_not, reversed(now), reversed(last))), common)
    tail = min(tail, common - head)
    return now[head : len(now) - tail], last[head : len(last) - tail]


def _queued(run: Run) -> int:
    return 1 if run is not None and run[2] is Phase.QUEUED else 0


def _put(
    files: dict[str, bytes], changes: dict[str, bytes | None], path: str, data: bytes | None
) -> None:
    if data is None:
        files.pop(path, None)
    else:
        files[path] = data
    changes[path] = data


def _parent_records(repo: CompiledRepo, parents: set[str], last: RenderedStatus) -> None:
    """The workflow parents' records of ``parents`` again, over their children's records in
    the compiled order (``build_status``'s); a parent compiled as an operation keeps its own."""
    if not parents:
        return
    kids: dict[str, list[OperationStatus]] = {}
    for op in repo.operations:
        if op.workflow is not None and op.workflow.parent in parents:
            kids.setdefault(op.workflow.parent, []).append(last.base[op.id])
    for parent in parents:
        if not last.children.get(parent):
            last.children.pop(parent, None)
        if parent in repo.by_id:
            continue
        if parent in kids:
            last.base[parent] = _workflow_record(parent, kids[parent])
        else:
            last.base.pop(parent, None)


def _order_changes(
    plan: Plan,
    queues: set[str],
    last: RenderedStatus,
    memo: RenderMemo,
    changes: dict[str, bytes | None],
    pause: Callable[[], None],
) -> None:
    """The order files of ``queues`` (those with a pending entry that entered, left or
    changed) again."""
    if not queues:
        return
    by_queue: dict[str, list[str]] = {}
    for queue, entries in groupby(plan.pending, _QUEUE):  # a queue's entries are one run
        if queue in queues:
            by_queue.setdefault(queue, []).extend(map(_OPERATION, entries))
    for queue in queues:
        pause()
        files = _queue_order_files(queue, by_queue.get(queue, []), memo)
        for path in set(last.orders.get(queue, ())) - files.keys():
            memo.pop(path, None)
            _put(last.files, changes, path, None)
        for path, data in files.items():
            if last.files.get(path) != data:
                _put(last.files, changes, path, data)
        if files:
            last.orders[queue] = tuple(files)
        else:
            last.orders.pop(queue, None)


# config.yaml lists at most this many errors (then how many more): a commit with 100 000
# errors must not write a status file the reader (and its loader's limits) would refuse.
MAX_STATUS_ERRORS = 1000


def listed_errors(errors: Iterable[str]) -> tuple[str, ...]:
    listed = list(errors)
    if len(listed) <= MAX_STATUS_ERRORS:
        return tuple(listed)
    more = len(listed) - MAX_STATUS_ERRORS
    return (*listed[:MAX_STATUS_ERRORS], f"... and {more} more (run reconciler validate)")


def queue_kinds(repo: CompiledRepo, queue: str) -> tuple[str, ...]:
    spec = repo.queues.get(queue)
    return tuple(sorted(str(k) for k in spec.kinds)) if spec is not None else ()


def build_status(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    failed: Mapping[str, tuple[StatusReason, str]] | None = None,
    superseded: Mapping[str, WorkloadState] | None = None,
    hashes: SpecHashMemo | None = None,
    built: RecordMemo | None = None,
) -> list[OperationStatus]:
    """The per-operation records, sorted by id: compiled operations (workflow children and
    their parents), rejected ones, and those only observed (e.g. removed but still running).
    An operation's superseded runs still active are listed on its record.

    ``built`` (kept by the caller between cycles): each compiled operation's record and
    what it was built from; a record whose inputs are the same (most of them, cycle after
    cycle) is not built again."""
    dispatched = {d.operation: d for d in plan.dispatch}
    pending = {p.operation: p for p in plan.pending}
    out: dict[str, OperationStatus] = {}
    children: dict[str, list[OperationStatus]] = {}
    for op in repo.operations:
        record = _built_record(repo, op, dispatched, pending, states, failed, hashes, built)
        out[op.id] = record
        if op.workflow is not None:
            children.setdefault(op.workflow.parent, []).append(record)
    for memo in (hashes, built):
        if memo is not None and len(memo) > len(repo.operations):
            for gone in memo.keys() - {op.id for op in repo.operations}:
                del memo[gone]
    for parent, kids in children.items():
        if parent not in out:
            out[parent] = _workflow_record(parent, kids)
    out.update(_other_records(repo, plan, states, out))
    for oid, runs in _older_runs(superseded).items():
        if oid in out:
            out[oid] = _with_superseded(out[oid], runs)
    return [out[k] for k in sorted(out)]


def _built_record(
    repo: CompiledRepo,
    op: CompiledOperation,
    dispatched: Mapping[str, Dispatch],
    pending: Mapping[str, Pending],
    states: Mapping[str, WorkloadState],
    failed: Mapping[str, tuple[StatusReason, str]] | None,
    hashes: SpecHashMemo | None,
    built: RecordMemo | None,
) -> OperationStatus:
    """A compiled operation's record (``built``: unless its inputs are those of last time)."""
    state = states.get(op.id)
    if state is not None and state.generation != op.generation:
        state = None  # a previous generation's workload: the current one is not out yet
    dispatch = dispatched.get(op.id)
    chosen = None if dispatch is None else (dispatch.cluster, dispatch.flavor)
    waiting = pending.get(op.id)
    failure = (failed or {}).get(op.id)
    desired = _spec_hash(repo, op, hashes)
    inputs = (
        op,
        chosen,
        state,
        None if waiting is None else (waiting.reason, waiting.blocked_by),
        failure,
        desired,
        repo.version if chosen is not None and state is None else None,
    )
    known = None if built is None else built.get(op.id)
    if known is not None and known[0] == inputs:
        return known[1]
    if chosen is not None and chosen[0] != op.cluster:
        op = replace(op, cluster=chosen[0])  # a fleet queue's: the cluster chosen
    record = _compiled_record(
        repo,
        op,
        state,
        chosen is not None,
        waiting,
        failure,
        desired,
        None if chosen is None else chosen[1],
    )
    if built is not None:
        built[op.id] = (inputs, record)
    return record


def _other_records(
    repo: CompiledRepo,
    plan: Plan,
    states: Mapping[str, WorkloadState],
    base: dict[str, OperationStatus],
) -> dict[str, OperationStatus]:
    """The records over ``base`` (the compiled operations' and workflow parents'): the
    scheduled operations', the rejected ones' and those only observed, which replace a
    record of ``base`` of the same id (an observed one never does)."""
    out: dict[str, OperationStatus] = {}
    for scheduled, members in schedule_groups(repo).items():
        out[scheduled] = _schedule_record(scheduled, members, ChainMap(out, base), plan.at)
    for rejected in repo.rejected:
        out[rejected.operation] = _rejected_record(repo, rejected, states.get(rejected.operation))
    stops = {s.operation for s in plan.stop}
    refused = set(plan.prune_refused.refused) if plan.prune_refused is not None else set()
    for oid, state in states.items():
        if oid not in out and oid not in base:
            out[oid] = _observed_record(repo, state, oid in stops, oid in refused, plan)
    return out


def _older_runs(
    superseded: Mapping[str, WorkloadState] | None,
) -> dict[str, tuple[WorkloadState, ...]]:
    """The superseded runs still active, by operation, oldest first."""
    older: dict[str, list[WorkloadState]] = {}
    for old in (superseded or {}).values():
        older.setdefault(old.operation, []).append(old)
    return {oid: tuple(sorted(runs, key=lambda r: r.generation)) for oid, runs in older.items()}


def _with_superseded(record: OperationStatus, runs: tuple[WorkloadState, ...]) -> OperationStatus:
    return record.model_copy(update={"superseded": tuple(SupersededRun.of(r) for r in runs)})


def _compiled_record(
    repo: CompiledRepo,
    op: CompiledOperation,
    state: WorkloadState | None,
    dispatched: bool,
    pending: Pending | None,
    failure: tuple[StatusReason, str] | None = None,
    desired: str | None = None,
    flavor: str | None = None,
) -> OperationStatus:
    desired = desired or spec_hash(op, repo.connections)
    workflow = (
        {"parent": op.workflow.parent, "kind": op.workflow.kind, "index": op.workflow.index}
        if op.workflow is not None
        else None
    )
    common: dict[str, Any] = {
        "operation": op.id,
        "kind": str(op.kind),
        "path": op.path,
        "queue": op.queue,
        "cluster": op.cluster,
        "namespace": op.namespace,
        "generation": op.generation,
        "spec_hash": desired,
        "workflow": workflow,
        "logs": logs_command(op.id),
    }
    if state is not None:
        out_of_sync = state.phase.active and state.spec_hash not in (None, desired)
        # where it runs: the queue that admitted it (its workload's label) holds its quota,
        # whatever queue the repo names now (docs/dispatch.md, "Usage")
        where = {"cluster": state.cluster, "namespace": state.namespace}
        return OperationStatus(
            **{**common, **where, "queue": state.queue or op.queue},
            phase=state.phase,
            reason=_reason(state),
            message=state.message,
            workload=state.name,
            workload_kind=_workload_kind(state.kind),
            config_commit=state.config_commit,
            dispatched_at=state.dispatched_at,
            started_at=state.started_at,
            finished_at=state.finished_at,
            outputs=state.outputs,
            outputs_path=state.outputs_path,
            workload_spec_hash=state.spec_hash if state.spec_hash != desired else None,
            sync=(Sync.OUT_OF_SYNC if out_of_sync else Sync.SYNCED).value,
            requests=_held(state),
            pods=_pods(state),
            flavor=state.flavor,
            timeout=_held_timeout(state),
            placement=_placement(state),
            stopped_by=dict(state.stopped_by) if state.stopped_by else None,
        )
    name = operation_workload(op)
    if op.stopped and not dispatched:  # never dispatched: held, as the repo asks
        stop_at = op.provenance.get("stopped")
        return OperationStatus(
            **common,
            phase=Phase.QUEUED,
            reason=StopReason.STOPPED_IN_REPO.value,
            message="stopped: true"
            + (f" at {stop_at.file}:{stop_at.line}" if stop_at is not None else "")
            + ": not dispatched (set it to false and bump generation to run it)",
            workload=name,
        )
    if dispatched and failure is not None:
        return OperationStatus(
            **common,
            phase=Phase.QUEUED,
            reason=failure[0].value,
            message=failure[1],
            workload=name,
        )
    if dispatched:
        return OperationStatus(
            **common,
            phase=Phase.DISPATCHED,
            reason=StatusReason.WORKLOAD_CREATED.value,
            message=f"dispatched to cluster {op.cluster}"
            + (f" in flavor {flavor}" if flavor else ""),
            workload=name,
            config_commit=repo.version,
            flavor=flavor,
        )
    if pending is not None:
        return OperationStatus(
            **common,
            phase=Phase.QUEUED,
            reason=str(pending.reason),
            message=pending.message,
            workload=name,
            blocked_by=pending.blocked_by.to_json(),
        )
    return OperationStatus(**common, phase=Phase.QUEUED, workload=name)


# Per operation id: what its record was built from (the compiled operation, the cluster
# chosen, its workload, why it waits, its failed dispatch, its spec hash, the commit it is
# dispatched at) and the record.
RecordMemo = dict[str, tuple[tuple[Any, ...], OperationStatus]]

# Per operation id: the compiled operation last hashed, the connections it used, its hash.
SpecHashMemo = dict[str, tuple[CompiledOperation, tuple[Any, ...], str]]


def _spec_hash(repo: CompiledRepo, op: CompiledOperation, memo: SpecHashMemo | None) -> str:
    if memo is None:
        return spec_hash(op, repo.connections)
    used = tuple(map(repo.connections.get, op.connections)) if op.connections else ()
    known = memo.get(op.id)
    if known is not None and known[0] is op and known[1] == used:
        return known[2]
    digest = spec_hash(op, repo.connections)
    memo[op.id] = (op, used, digest)
    return digest


def _reason(state: WorkloadState) -> str | None:
    return str(state.reason) if state.reason is not None else None


def workflow_summary(children: Iterable[RecordPhase]) -> tuple[Phase, str]:
    """A workflow parent's phase, the aggregate of its children's phases, and its message
    (``3 children: 1 queued, 2 running``): what its status record and its page say."""
    phases = Counter(children)
    total = sum(phases.values())
    finished = sum(phases[p] for p in Phase if p.finished)
    active = sum(phases[p] for p in Phase if p.active)
    if finished == total:
        if phases[Phase.FAILED]:
            phase = Phase.FAILED
        elif phases[Phase.STOPPED]:
            phase = Phase.STOPPED
        else:
            phase = Phase.SUCCEEDED
    elif active and not phases[Phase.RUNNING] and not finished:
        phase = Phase.DISPATCHED
    elif active or finished:
        phase = Phase.RUNNING
    else:
        phase = Phase.QUEUED
    counts = ", ".join(f"{n} {p.lower()}" for p, n in sorted(phases.items()))
    return phase, f"{total} children: {counts}"


def _workflow_record(parent: str, kids: list[OperationStatus]) -> OperationStatus:
    """A workflow parent: its phase is the aggregate of its children's."""
    phase, message = workflow_summary(k.phase for k in kids)
    first = kids[0]
    wf = first.workflow or {}
    return OperationStatus(
        operation=parent,
        phase=phase,
        message=message,
        kind=str(wf.get("kind", WORKFLOW)),
        path=first.path,
        queue=first.queue,
        cluster=first.cluster,
        namespace=first.namespace,
        children=tuple(sorted(k.operation for k in kids)),
        sync=(
            Sync.OUT_OF_SYNC if any(k.sync == Sync.OUT_OF_SYNC for k in kids) else Sync.SYNCED
        ).value,
    )


def _schedule_record(
    scheduled: str,
    members: list[CompiledOperation],
    records: Mapping[str, OperationStatus],
    now: datetime,
) -> OperationStatus:
    """A scheduled operation: its runs (each tick's record) are its children, its phase
    their aggregate (``Queued`` before the first), with its last run and its last and next
    fire times at ``now``."""
    first = members[0]
    spec = first.schedule
    assert spec is not None
    ticks = sorted(
        r
        for r in records
        if tick_time(scheduled, r) is not None
        and (records[r].workflow or {}).get("parent", scheduled) == scheduled
    )
    if ticks:
        phase, message = workflow_summary(records[t].phase for t in ticks)
    else:
        phase, message = Phase.QUEUED, "no run yet"
    return OperationStatus(
        operation=scheduled,
        phase=phase,
        message=message,
        kind="schedule",
        path=first.path,
        queue=first.queue,
        cluster=first.cluster,
        namespace=first.namespace,
        children=tuple(ticks),
        schedule=schedule_times(spec, ticks, now, stopped=first.stopped),
    )


def rejected_message(rejected: RejectedOperation) -> str:
    """Why an operation is refused, at the file:line:col of the violation when known: what
    its status record and its page say."""
    return f"{rejected.location}: {rejected.message}" if rejected.location else rejected.message


def _rejected_record(
    repo: CompiledRepo, rejected: RejectedOperation, state: WorkloadState | None
) -> OperationStatus:
    """Refused by policy (``PolicyViolation``): never dispatched under this config."""
    base = OperationStatus(
        operation=rejected.operation,
        phase=REJECTED,
        reason=str(rejected.reason),
        message=rejected_message(rejected),
        path=rejected.path,
        logs=logs_command(rejected.operation),
    )
    if state is None:
        return base
    return _with_state(base, state)


def removed_reason(
    state: WorkloadState, stopping: bool, refusal: PruneRefusal | None
) -> tuple[StatusReason, str]:
    """Why an operation no longer in the repo whose workload still exists is where it is
    (``stopping``: the plan stops it; ``refusal``: the guard that refused to stop it):
    what its status record and its page say."""
    if stopping:
        return StatusReason.REMOVED_FROM_REPO, "removed from the repo; stopping it"
    if refusal is not None:
        return StatusReason.PRUNE_REFUSED, refusal.message()
    if state.phase.active:
        return StatusReason.REMOVED_FROM_REPO, "removed from the repo; left running (prune is off)"
    return StatusReason.REMOVED_FROM_REPO, "removed from the repo"


def _observed_record(
    repo: CompiledRepo,
    state: WorkloadState,
    stopping: bool,
    refused: bool,
    plan: Plan,
) -> OperationStatus:
    """No longer in the repo, but its workload still exists in a cluster."""
    reason, message = removed_reason(state, stopping, plan.prune_refused if refused else None)
    base = OperationStatus(
        operation=state.operation,
        phase=state.phase,
        reason=reason.value,
        message=message,
        config_commit=state.config_commit,
        logs=logs_command(state.operation),
        sync=(Sync.OUT_OF_SYNC if state.phase.active else Sync.SYNCED).value,
    )
    return _with_state(base, state)


def _with_state(base: OperationStatus, state: WorkloadState) -> OperationStatus:
    """``base`` with its workload's phase and whereabouts."""
    return base.model_copy(
        update={
            "phase": state.phase,
            "queue": state.queue,
            "cluster": state.cluster,
            "namespace": state.namespace,
            "workload": state.name,
            "workload_kind": _workload_kind(state.kind),
            "generation": state.generation,
            "config_commit": state.config_commit or base.config_commit,
            "dispatched_at": state.dispatched_at,
            "started_at": state.started_at,
            "finished_at": state.finished_at,
            "outputs": state.outputs,
            "outputs_path": state.outputs_path,
            "spec_hash": state.spec_hash,
            "requests": _held(state),
            "pods": _pods(state),
            "flavor": state.flavor,
            "timeout": _held_timeout(state),
            "placement": _placement(state),
        }
    )


def _workload_kind(kind: str) -> str:
    """``workloadKind`` in a record: written only for a kind other than Job."""
    return "" if kind == "Job" else kind


def _held(state: WorkloadState) -> dict[str, str]:
    """The requests an active workload holds (a finished one holds none)."""
    if not state.phase.active:
        return {}
    return {r: format_quantity(v) for r, v in sorted(state.requests.items())}


def _held_timeout(state: WorkloadState) -> int | None:
    """The timeout an active workload was dispatched with (none once it ended)."""
    return state.timeout if state.phase.active else None


def _placement(state: WorkloadState) -> dict[str, int] | None:
    """An active gang's pods, as the cycle last saw them."""
    gang = state.gang
    if gang is None or not state.phase.active:
        return None
    return {"replicas": gang.replicas, "placed": gang.placed, "running": gang.running}


def recorded_placement(record: OperationStatus) -> Placement | None:
    """The gang's pods a record holds; None when it holds none or they cannot be read."""
    data = record.placement or {}
    try:
        replicas, placed, running = (int(data[k]) for k in ("replicas", "placed", "running"))
    except (KeyError, TypeError, ValueError):
        return None
    if replicas <= 1 or not 0 <= running <= placed <= replicas:
        return None
    return Placement(replicas, placed, running)


def _positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


def _pods(state: WorkloadState) -> int | None:
    """The pods an active workload runs, when more than one (a distributed run)."""
    if not state.phase.active or state.pods is None or state.pods <= 1:
        return None
    return state.pods


def recorded_pods(record: OperationStatus | SupersededRun) -> int | None:
    """The pods a record says its workload runs: ``pods``, else one when it records what
    the workload requests (a single-pod workload), else not known (None: the compiled
    operation's replicas count)."""
    if record.pods is not None and record.pods > 0:
        return record.pods
    return 1 if recorded_requests(record) else None


def recorded_requests(record: OperationStatus | SupersededRun) -> dict[str, Decimal] | None:
    """The requests a record says its workload holds; None when it says none or cannot be
    read (the compiled operation's then count, as for a workload that does not say)."""
    try:
        return {r: parse_quantity(v) for r, v in record.requests.items()} or None
    except ValueError:
        return None


# --- YAML -------------------------------------------------------------------------------

_BaseDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[misc]
    """PyYAML's YAML 1.1 dumper that also quotes every string YAML 1.2 (the reader's
    schema) would take for a number or a boolean, e.g. ``1e3`` or ``0o17``."""


for _first, _resolvers in YAML12_RESOLVERS.items():
    for _tag, _regexp in _resolvers:
        _Dumper.add_implicit_resolver(_tag, _regexp, [_first])


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format_quantity(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, frozenset | set):
        return sorted(value, key=str)
    raise TypeError(f"cannot write {type(value).__name__} to a status file")


def dump_yaml(data: Mapping[str, Any]) -> bytes:
    """Deterministic YAML: sorted keys, block style, no line wrapping.

    Data of JSON's own types (dict, list, str or a str subclass, int, float, bool, None)
    is written by the direct writer as it is: the same text as through the canonical JSON
    below, which would give back equal data. Other data (a Decimal, a tuple, a set, a
    mapping that is not a dict) goes through its canonical JSON, which keys a memo of
    PyYAML's text: most of those records are the same from one cycle to the next."""
    if _BLOCK is not None:
        direct = _BLOCK.document(data)
        if direct is not None:
            return direct.encode()
    key = json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )
    return _yaml_text(key)


@lru_cache(maxsize=32768)
def _yaml_text(canonical_json: str) -> bytes:
    return _yaml_dump(json.loads(canonical_json))


# The same text as ``yaml.dump`` below for the values status records hold, without PyYAML's
# representer (most of the dump's cost); None for anything else. Only for libyaml's
# dumper: the writer follows its emitter's rules.
_BLOCK = BlockYaml(_Dumper.yaml_implicit_resolvers) if _BaseDumper is not yaml.SafeDumper else None


def _yaml_dump(data: Mapping[str, Any]) -> bytes:
    if _BLOCK is not None:
        fast = _BLOCK.document(data)
        if fast is not None:
            return fast.encode()
    return _pyyaml_dump(data)


def _pyyaml_dump(data: Mapping[str, Any]) -> bytes:
    text = yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 30,
    )
    return str(text).encode()


# --- reading back -----------------------------------------------------------------------


def parse_status_file(path: str, content: bytes) -> StatusFile:
    """One status file: an :class:`OperationStatus`, the queues, or the config status.
    Raises :class:`StatusFileError` (``file:line:col: message``).

    Read by the config's strict loader with its limits (``core/load.py``): anyone who can
    push to the status branch can write it, so an alias bomb, a huge file, deep nesting, a
    custom tag or a 5000-digit number is refused like in a config file."""
    doc, errors = parse_yaml(path, content, written=True)
    if doc is None:
        raise StatusFileError(str(errors[0]))
    data = doc.data
    if not isinstance(data, Mapping):
        raise StatusFileError(f"{Location(path, 1, 1)}: expected a mapping")
    try:
        if path == QUEUES_FILE:
            return tuple(QueueStatus.from_dict(q) for q in data.get("queues") or ())
        if path == CONFIG_FILE:
            return ConfigStatus.from_dict(data)
        if path == CLUSTERS_FILE:
            return tuple(ClusterStatus.from_dict(c) for c in data.get("clusters") or ())
        if is_decision_path(path):
            return DecisionRecord.from_dict(data)
        if is_ledger_path(path):
            return entries_from_document(data)
        if is_order_path(path):
            return QueueOrder.from_dict(data)
        return OperationStatus.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise StatusFileError(f"{Location(path, 1, 1)}: not a status file ({err!s})") from None


@dataclass(frozen=True)
class StatusView:
    """A whole status branch, read back. Each operation's ``position`` is the one its
    queue's order file gives (``status/_queues``), and a Queued or Rejected record's
    ``config_commit`` the commit in force (``config.applied``): the records themselves hold
    neither, so that a commit or a dispatch does not rewrite every pending record."""

    operations: Mapping[str, OperationStatus]
    queues: tuple[QueueStatus, ...] = ()
    config: ConfigStatus | None = None
    problems: tuple[str, ...] = field(default=())  # files that could not be read
    clusters: tuple[ClusterStatus, ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()  # every finished run, by file month then end
    # per queue, its pending operations in order (position 1 first)
    order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # what of the ledger could not be read (budgets it may belong to wait)
    ledger_problems: LedgerProblems = field(default_factory=LedgerProblems)
    decision: DecisionRecord | None = None  # what the commit's cycle decided over


def read_status(files: Mapping[str, bytes]) -> StatusView:
    """Parse every status file; unreadable ones are reported in ``problems``, not raised.
    An operation's record is the one at its ``operation_path`` when there is one there, else
    the one found elsewhere (the flat layout's, ``record_paths``)."""
    operations: dict[str, OperationStatus] = {}
    bucketed: set[str] = set()  # the operations read from their own path
    queues: tuple[QueueStatus, ...] = ()
    config: ConfigStatus | None = None
    decisions: list[DecisionRecord] = []
    clusters: tuple[ClusterStatus, ...] = ()
    ledger: list[LedgerEntry] = []
    parts: dict[str, list[QueueOrder]] = {}
    problems: list[str] = []
    unread: dict[str, str] = {}
    raw: dict[str, list[Any]] = {}
    worst: list[LedgerEntry] = []
    frozen: set[str] = set()
    for path in sorted(files):
        if not _is_ours(path) or path == NOTIFY_FILE:  # the notifier's (``read_owed``)
            continue
        try:
            parsed = parse_status_file(path, files[path])
        except StatusFileError as err:
            problems.append(str(err))
            if is_ledger_path(path):  # which budgets it holds cannot be known: all wait
                unread.setdefault("", str(err))
                frozen.add(path)
            continue
        if isinstance(parsed, OperationStatus):
            # a branch with both layouts' records of one operation (a flat one written by
            # hand or by an older version since): the one in its bucket is the record
            oid = parsed.operation
            if oid not in bucketed:
                operations[oid] = parsed
                if path == operation_path(oid):
                    bucketed.add(oid)
        elif isinstance(parsed, QueueOrder):
            parts.setdefault(parsed.queue, []).append(parsed)
        elif isinstance(parsed, ConfigStatus):
            config = parsed
        elif isinstance(parsed, DecisionRecord):
            decisions.append(parsed)
        elif isinstance(parsed, LedgerFile):
            ledger.extend(parsed.entries)
            where = Location(path, 1, 1)
            for entry, message, item in parsed.worst:
                worst.append(entry)
                raw.setdefault(ledger_month(path), []).append(item)
                problems.append(f"{where}: {message}")
            for queue, message, item in parsed.unread:
                unread.setdefault(queue, f"{where}: {message}")
                raw.setdefault(ledger_month(path), []).append(item)
                problems.append(f"{where}: {message}")
        elif path == CLUSTERS_FILE:
            clusters = tuple(c for c in parsed if isinstance(c, ClusterStatus))
        else:
            queues = tuple(q for q in parsed if isinstance(q, QueueStatus))
    order: dict[str, tuple[str, ...]] = {}
    positions: dict[str, int] = {}
    for queue, found in sorted(parts.items()):
        found.sort(key=lambda o: o.first)
        order[queue] = tuple(op for part in found for op in part.pending)
        for part in found:  # each part says where it starts (a lost part shifts nothing)
            positions.update((op, part.first + i) for i, op in enumerate(part.pending))
    join_records(operations, positions, config.applied if config is not None else "")
    decision = _joined(decisions, problems)
    unreadable = LedgerProblems(
        unread,
        {m: tuple(r) for m, r in raw.items()},
        frozenset(frozen),
        tuple(worst),
        tuple(p for p in problems if p.startswith(f"{LEDGER_DIR}/")),
    )
    return StatusView(
        operations,
        queues,
        config,
        tuple(problems),
        clusters,
        tuple(ledger),
        order,
        unreadable,
        decision,
    )


def _joined(parts: list[DecisionRecord], problems: list[str]) -> DecisionRecord | None:
    """The decision record from its files, its runs in part order; None, with a problem,
    when a part is missing or belongs to another cycle (a lost or hand-edited file)."""
    first = next((p for p in parts if not p.part), None)
    if first is None:
        return None
    rest = sorted((p for p in parts if p.part), key=lambda p: p.part)
    for number, part in enumerate(rest, start=2):
        if part.part != number or (part.clock, part.config) != (first.clock, first.config):
            problems.append(
                f"{Location(decision_path(part.part), 1, 1)}: not a part of the decision "
                f"record of {first.clock} (part {number} expected)"
            )
            return None
    runs = tuple(r for p in (first, *rest) for r in p.runs)
    return first.model_copy(update={"runs": runs}) if rest else first


def join_records(
    operations: dict[str, OperationStatus], positions: Mapping[str, int], applied: str
) -> None:
    """Each pending operation's position from its queue's order, and the commit in force on
    Queued and Rejected records (their files hold neither). A record written before the
    order files existed keeps the position it holds, unless an order file lists it."""
    for oid, rec in operations.items():
        update: dict[str, Any] = {}
        position = positions.get(oid)
        if position is not None and rec.position != position:
            update["position"] = position
        if rec.config_commit is None and applied and rec.phase in (Phase.QUEUED, REJECTED):
            update["config_commit"] = applied
        if update:
            operations[oid] = rec.model_copy(update=update)


def _is_ours(path: str) -> bool:
    return path.startswith(f"{STATUS_DIR}/") and path.endswith(".yaml")


# --- cycle to cycle ---------------------------------------------------------------------


def status_changes(
    before: Mapping[str, bytes], after: Mapping[str, bytes]
) -> dict[str, bytes | None]:
    """The files to write (changed or new) and to delete (``None``): status files in
    ``before`` that this cycle no longer renders (ops no longer in the repo nor any cluster);
    never a ledger file (the history of what was spent). So a branch written before the
    buckets has its records moved in one commit: each flat file (``flat_operation_path``)
    is deleted as its bucket's is written. Other files on the branch (a
    human's notes) are left alone. The decision record alone is no change: its clock moves
    every cycle, and it is written with the commit whose records it replays."""
    changes: dict[str, bytes | None] = {
        path: data for path, data in after.items() if before.get(path) != data
    }
    for path in before:
        if path not in after and _is_ours(path) and not is_ledger_path(path):
            changes[path] = None
    if all(is_decision_path(path) for path in changes):
        return {}
    return dict(sorted(changes.items()))


def delta_changes(
    before: Mapping[str, bytes], files: Mapping[str, bytes], paths: Iterable[str]
) -> dict[str, bytes | None]:
    """``status_changes(before, files)`` looking at ``paths`` alone: when every other path
    of ``files`` holds what ``before`` holds, and ``before`` holds no other status file
    that ``files`` lacks but the ledger's (a writer's own last write, and ``paths`` what its
    renders changed since)."""
    changes: dict[str, bytes | None] = {}
    for path in sorted(paths):
        data = files.get(path)
        if data is None:
            if path in before and _is_ours(path) and not is_ledger_path(path):
                changes[path] = None
        elif before.get(path) != data:
            changes[path] = data
    if all(is_decision_path(path) for path in changes):
        return {}
    return changes


MAX_BODY_LINES = 50


# What an operation's status file says of its run: (operation, generation, phase), or None
# for a workflow parent's (or a file that cannot be read), by the file's content. Keyed by
# content, not path: the previous write's content of a file that changed is still known
# (it is the ``before`` of the next commit message), so nothing is parsed back twice.
PhaseMemo = dict[bytes, tuple[str, int | None, RecordPhase] | None]


@dataclass(frozen=True, slots=True)
class StatusMemos:
    """What a status writer keeps from cycle to cycle (``render_status``'s memos): each
    file's last record and bytes, each operation's spec hash and record by what they were
    made from, each file's run by its content (``summarize_cycle``'s), and the last
    render's files and inputs (``render_changes``')."""

    rendered: RenderMemo = field(default_factory=dict)
    hashes: SpecHashMemo = field(default_factory=dict)
    phases: PhaseMemo = field(default_factory=dict)
    built: RecordMemo = field(default_factory=dict)
    last: RenderedStatus = field(default_factory=RenderedStatus)  # ``render_changes``'s

    def arguments(self) -> dict[str, Any]:
        """``render_status``'s memo arguments."""
        return {
            "memo": self.rendered,
            "hashes": self.hashes,
            "phases": self.phases,
            "built": self.built,
        }


def summarize_cycle(
    before: Mapping[str, bytes], after: Mapping[str, bytes], memo: PhaseMemo | None = None
) -> str:
    """A commit message: ``dispatched 3, finished 1, pending 12`` from the phase transitions
    between two sets of status files, then up to ``MAX_BODY_LINES`` transitions, one a line.

    ``memo`` (kept by the caller between cycles) spares parsing the files that did not
    change: with 10,000 operations, most of them."""
    memo = {} if memo is None else memo
    old = _phases(before, memo)
    new = _phases(after, memo)
    if len(memo) > len(after):  # forget the contents no file has any more
        kept = set(after.values())
        for gone in [data for data in memo if data not in kept]:
            del memo[gone]
    pending = sum(1 for _, p in new.values() if p is Phase.QUEUED)
    return _message(old, new, pending, _config(before), _config(after))


def summarize_changes(before: Mapping[str, bytes], delta: StatusDelta) -> str:
    """``summarize_cycle(before, delta.files)`` from the changed files alone, when the
    operation files of ``before`` are those of the render before ``delta`` (the writer's
    last write of them): the others hold the same run on both sides."""
    old: dict[str, tuple[int | None, RecordPhase]] = {}
    new: dict[str, tuple[int | None, RecordPhase]] = {}
    for was in delta.runs_before.values():
        if was is not None:
            old[was[0]] = was[1:]
    for now in delta.runs_after.values():
        if now is not None:
            new[now[0]] = now[1:]
    return _message(old, new, delta.queued, _config(before), _config(delta.files))


def _message(
    old: Mapping[str, tuple[int | None, RecordPhase]],
    new: Mapping[str, tuple[int | None, RecordPhase]],
    pending: int,
    config_before: tuple[str, bool, int, bool] | None,
    config: tuple[str, bool, int, bool] | None,
) -> str:
    """The commit message of the runs that changed, ``old`` to ``new`` (by operation)."""
    counts: Counter[str] = Counter()
    lines: list[str] = []
    for oid in sorted(set(old) | set(new)):
        was, now = old.get(oid), new.get(oid)
        if now is None:
            counts["removed"] += 1
            lines.append(f"{oid}: removed")
            continue
        rerun = was is not None and was[0] != now[0]
        was_phase = None if was is None or rerun else was[1]
        if was_phase == now[1]:
            continue
        event = _event(was_phase, now[1])
        if event:
            counts[event] += 1
        lines.append(f"{oid}: {was_phase or 'new'} -> {now[1]}")
    parts = []
    if config is not None and config != config_before:
        version, valid, errors, internal = config
        short = version[:12]
        if internal:
            parts.append(f"config {short} not compiled (internal error)")
        else:
            parts.append(
                f"config {short}" if valid else f"config {short} invalid ({errors} errors)"
            )
    for key in ("dispatched", "started"):
        if counts[key]:
            parts.append(f"{key} {counts[key]}")
    finished = counts["succeeded"] + counts["failed"] + counts["stopped"]
    if finished:
        detail = ", ".join(f"{counts[k]} {k}" for k in ("failed", "stopped") if counts[k])
        parts.append(f"finished {finished}" + (f" ({detail})" if detail else ""))
    if counts["removed"]:
        parts.append(f"removed {counts['removed']}")
    parts.append(f"pending {pending}")
    subject = ", ".join(parts)
    if not lines:
        return subject
    body = lines[:MAX_BODY_LINES]
    if len(lines) > MAX_BODY_LINES:
        body.append(f"... and {len(lines) - MAX_BODY_LINES} more")
    return subject + "\n\n" + "\n".join(body) + "\n"


def _event(was: RecordPhase | None, now: RecordPhase) -> str | None:
    active = {Phase.DISPATCHED, Phase.RUNNING}
    if now in active and was not in active:
        return "dispatched"
    if now is Phase.RUNNING and was is Phase.DISPATCHED:
        return "started"
    if isinstance(now, Phase) and now.finished:
        return now.lower()
    return None


def _phases(
    files: Mapping[str, bytes], memo: PhaseMemo
) -> dict[str, tuple[int | None, RecordPhase]]:
    """Per operation (workflow parents excluded): (generation, phase)."""
    out: dict[str, tuple[int | None, RecordPhase]] = {}
    for path, data in files.items():
        if (
            not _is_ours(path)
            or path in (QUEUES_FILE, CONFIG_FILE, CLUSTERS_FILE, NOTIFY_FILE)
            or is_decision_path(path)
            or is_ledger_path(path)
            or is_order_path(path)
        ):
            continue
        if data in memo:
            run = memo[data]
        else:
            run = memo[data] = _run_of(path, data)
        if run is not None:
            out[run[0]] = run[1:]
    return out


def _run_of(path: str, data: bytes) -> tuple[str, int | None, RecordPhase] | None:
    try:
        parsed = parse_status_file(path, data)
    except StatusFileError:
        return None
    if isinstance(parsed, OperationStatus):
        return _run_of_record(parsed)
    return None


def _run_of_record(record: OperationStatus) -> tuple[str, int | None, RecordPhase] | None:
    """An operation file's run (workflow parents: none), from its record."""
    if record.children:
        return None
    return record.operation, record.generation, record.phase


def _config(files: Mapping[str, bytes]) -> tuple[str, bool, int, bool] | None:
    data = files.get(CONFIG_FILE)
    if data is None:
        return None
    try:
        parsed = parse_status_file(CONFIG_FILE, data)
    except StatusFileError:
        return None
    if not isinstance(parsed, ConfigStatus):
        return None
    return parsed.version, parsed.valid, len(parsed.errors), parsed.is_internal_error
