"""Frozen value types shared by the pure core: the compiler produces them, the planner,
renderer and status writer consume them. No I/O here; adapters build ``RepoSnapshot``.

What must live here: the values that cross stages (the snapshot, the specs, the compiled and
observed operations, provenance, errors, and the enums they use). A value used by one stage
only lives in that stage's package.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import cached_property
from itertools import compress
from operator import attrgetter
from typing import Any


class RunKind(enum.StrEnum):
    JOB = "job"
    NOTEBOOK = "notebook"
    SANDBOX = "sandbox"
    BATCH = "batch"


class QueueStrategy(enum.StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class MergeStrategy(enum.StrEnum):
    """How a preset (or a DAG child's overrides) patches a spec: ``patchStrategy``."""

    REPLACE = "replace"
    ISNULL = "isnull"
    POST_MERGE = "post_merge"
    PRE_MERGE = "pre_merge"


class Framework(enum.StrEnum):
    """``run.distributed.framework``: the rendezvous environment the replicas get."""

    TORCH = "torch"
    JAX = "jax"
    NONE = "none"


class DistributedBackend(enum.StrEnum):
    """``run.distributed.backend``: the object a distributed operation renders to."""

    JOB = "job"  # an Indexed Job and a headless Service
    PYTORCHJOB = "pytorchjob"  # a Kubeflow Training Operator PyTorchJob


DEFAULT_PORT = 29500


@dataclass(frozen=True, slots=True)
class Distributed:
    """``run.distributed`` compiled, defaults filled in."""

    framework: Framework = Framework.TORCH
    port: int = DEFAULT_PORT
    backend: DistributedBackend = DistributedBackend.JOB


class Phase(enum.StrEnum):
    QUEUED = "Queued"
    DISPATCHED = "Dispatched"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"

    # each member's, set once below: plain attributes, not properties, because every
    # cycle asks them of every workload listed (several times each)
    active: bool  # Dispatched or Running
    finished: bool  # Succeeded, Failed or Stopped


for _phase in Phase:
    _phase.active = _phase in (Phase.DISPATCHED, Phase.RUNNING)
    _phase.finished = _phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED)
del _phase


# --- the repo as the core sees it -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepoFile:
    """One blob of the config repo. ``symlink_target`` is set for symlinks (content empty);
    ``submodule`` for a Git submodule (a commit of another repo; content empty), which the
    loader refuses where it reads and ignores elsewhere."""

    path: str  # posix, relative to the repo root
    content: bytes
    symlink_target: str | None = None
    first_commit_time: datetime | None = None  # when the file was first added, if known
    submodule: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotChanges:
    """What a snapshot's reader knows changed since the snapshot of version ``since``:
    every path whose file differs (content, first-commit time, kind; added or removed) is
    one of ``paths`` (a path that did not change may be one too). A Git reader knows it
    from ``git diff-tree`` between the two commits."""

    since: str
    paths: frozenset[str]


@dataclass(frozen=True)
class RepoSnapshot:
    """A whole config tree at one version (a commit SHA, or ``worktree`` outside Git).
    ``changes``: what changed since an earlier snapshot, when the reader knows (an index
    derived from that snapshot's then diffs only those paths). ``dataclasses.replace``
    keeps it: a copy with other files must give ``changes=None``."""

    files: Mapping[str, RepoFile]
    version: str = "worktree"
    changes: SnapshotChanges | None = field(default=None, compare=False, repr=False)


# --- diagnostics ------------------------------------------------------------------------

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable_text(text: str) -> str:
    """``text`` on one line with nothing hidden: every character that is not printable (a
    control character such as a newline or ESC, a format character such as a bidi override,
    a line separator, a lone surrogate) is escaped as ``\\n``, ``\\x1b``, ``\\u202e``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_path(path: str) -> str:
    """How every path is printed (CLI, status branch, logs, web pages): as is when all its
    characters are printable; otherwise in double quotes, with ``"`` and ``\\`` escaped and
    every unprintable character escaped as in :func:`printable_text`. A file name with a
    newline can then never forge a line of ``file:line:col: message`` output."""
    if path.isprintable() and '"' not in path and "\\" not in path:
        return path
    body = "".join("\\" + c if c in '"\\' else c if c.isprintable() else _escape(c) for c in path)
    return f'"{body}"'


@dataclass(frozen=True, order=True, slots=True)
class Location:
    file: str
    line: int = 0  # 1-based; 0 when unknown
    col: int = 0  # 1-based; 0 when unknown

    def __str__(self) -> str:
        return f"{printable_path(self.file)}:{self.line}:{self.col}"


@dataclass(frozen=True, order=True, slots=True)
class ConfigError:
    """A problem in the config repo, printed as ``file:line:col: message`` on one line (see
    :func:`printable_path`, :func:`printable_text`)."""

    location: Location
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {printable_text(self.message)}"


BUG_NOTE = "this is a bug in the reconciler, please report it"


class InternalError(Exception):
    """A bug in the reconciler, not a problem in the config: an unexpected exception while
    compiling. It is never a :class:`ConfigError` (no ``file:line:col``, the commit is not
    judged invalid): the runtime keeps the last good config and reports it as a bug; the
    CLI prints the traceback and exits 70.

    ``what`` is the step that failed (``compiling operation team-a/train``), ``path`` the
    config file it was working on when known, ``cause`` the original exception (also the
    ``__cause__``, so its traceback is kept)."""

    def __init__(self, what: str, cause: BaseException, path: str | None = None) -> None:
        where = f" ({printable_path(path)})" if path else ""
        super().__init__(f"{what}{where}: {type(cause).__name__}: {cause}")
        self.what = what
        self.path = path
        self.cause = cause
        self.__cause__ = cause


# --- compiled config --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a compiled leaf came from: ``step`` is ``operation``, ``preset <name> (<strategy>)``,
    ``project default`` or ``org default``."""

    file: str
    line: int
    step: str
    col: int = 0

    @property
    def location(self) -> Location:
        return Location(self.file, self.line, self.col)

    def __str__(self) -> str:
        return f"{self.step} at {printable_path(self.file)}:{self.line}"


@dataclass(frozen=True, slots=True, eq=False)
class ProvenanceKeys:
    """The leaves of a compiled spec, in order, and where each is in the values: one object
    per distinct layering, shared by every operation compiled the same way (the same
    presets applied to operations of the same shape)."""

    names: tuple[str, ...]
    index: Mapping[str, int]

    @classmethod
    def of(cls, names: tuple[str, ...]) -> ProvenanceKeys:
        return cls(names, {name: i for i, name in enumerate(names)})


# An operation's own leaf, packed: its line and column in one int (half the size of a
# ``Provenance``, not tracked by the cyclic collector).
_COL_BITS = 32


class ProvenanceMap(Mapping[str, Provenance]):
    """A compiled operation's provenance (dotted leaf -> :class:`Provenance`), compact: the
    shared :class:`ProvenanceKeys` of its layering and a tuple of values. A value set by a
    preset or a default is an object shared between operations where it comes from the same
    line; one from the operation's own file (``own``: that file and its step, every such
    line its own) is kept as its packed line and column. Reads as the ordered mapping it
    replaces, and equals one with the same items."""

    __slots__ = ("_keys", "_own", "_values")

    def __init__(
        self,
        keys: ProvenanceKeys,
        values: tuple[Provenance | int, ...],
        own: tuple[str, str] | None = None,
    ) -> None:
        if len(keys.names) != len(values):
            raise ValueError("one provenance per leaf")
        if own is None and any(isinstance(v, int) for v in values):
            raise ValueError("a packed position needs its file")
        self._keys = keys
        self._values = values
        self._own = own

    @classmethod
    def of(
        cls,
        keys: ProvenanceKeys,
        values: Sequence[Provenance],
        own_file: str,
        shared: Callable[[Provenance], Provenance],
    ) -> ProvenanceMap:
        """The map of ``values``: those from ``own_file`` (with the step of its first)
        packed, the others ``shared``."""
        step = next((v.step for v in values if v.file == own_file), None)
        if step is None:
            return cls(keys, tuple(shared(v) for v in values))
        return cls(
            keys,
            tuple(
                (v.line << _COL_BITS) | v.col
                if v.file == own_file
                and v.step == step
                and 0 <= v.col < 1 << _COL_BITS
                and v.line >= 0
                else shared(v)
                for v in values
            ),
            (own_file, step),
        )

    def __getitem__(self, key: str) -> Provenance:
        value = self._values[self._keys.index[key]]
        if isinstance(value, int):
            file, step = self._own or ("", "")
            return Provenance(file, value >> _COL_BITS, step, value & ((1 << _COL_BITS) - 1))
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._keys.index

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys.names)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProvenanceMap) and self._keys.names == other._keys.names:
            if self._own == other._own and self._values == other._values:
                return True
            return all(self[k] == other[k] for k in self._keys.names)
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ProvenanceMap({dict(self.items())!r})"


class BudgetPeriod(enum.StrEnum):
    """The calendar window a queue budget covers (docs/budgets.md)."""

    DAY = "day"
    WEEK = "week"  # ISO weeks: Monday 00:00 to Monday 00:00
    MONTH = "month"


# A budget's ``resource``: money (``cost``), or the hours of one resource
# (``<resource>-hours``: ``nvidia.com/gpu-hours``, ``cpu-hours``, ``memory-hours`` in GiB-hours).
BUDGET_COST = "cost"
HOURS_SUFFIX = "-hours"


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A queue's ``budget``: at most ``limit`` of ``resource`` per calendar ``per``."""

    limit: Decimal
    per: BudgetPeriod
    resource: str = BUDGET_COST  # ``cost`` or ``<resource>-hours``

    @property
    def hours_of(self) -> str | None:
        """The resource whose hours are counted; None for a ``cost`` budget."""
        if self.resource == BUDGET_COST:
            return None
        return self.resource.removesuffix(HOURS_SUFFIX)


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    concurrency: int | None = None
    kubeconfig: Mapping[str, Any] = field(default_factory=dict)
    context: str | None = None
    # per resource, the price of one unit-hour here (memory: per GiB-hour); overrides the
    # org's price list for those resources
    prices: Mapping[str, Decimal] = field(default_factory=dict)
    # per flavor, per resource: the price of an op assigned that flavor here (over
    # ``prices`` and the org's flavor prices)
    flavor_prices: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)


@dataclass(frozen=True)
class FlavorSpec:
    """A ``flavors/<name>.yaml``: a kind of node (a GPU product), by the labels its nodes
    carry. An operation assigned the flavor gets ``node_labels`` as its nodeSelector and
    ``tolerations`` added to its pod."""

    name: str
    node_labels: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()
    description: str = ""
    source: str = ""
    location: Location | None = None  # its nodeLabels, for a warning about them


@dataclass(frozen=True)
class QueueFlavor:
    """One entry of a queue's ``flavors``: its quota of that flavor, and what it may borrow
    and lend of it in its cohort, and (a fleet queue) its cap per cluster."""

    name: str
    quota: Mapping[str, Decimal] = field(default_factory=dict)
    borrowing_limit: Mapping[str, Decimal] = field(default_factory=dict)
    lending_limit: Mapping[str, Decimal] = field(default_factory=dict)
    cluster_quota: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectionSpec:
    """A resolved ``connections/<name>.yaml``; the renderer turns it into env/volumes/mounts.

    ``type`` is ``volume``, ``secret``, ``configMap``, ``bucket`` or ``git``; ``spec`` holds that
    source's fields as written (camelCase) with defaults filled in."""

    name: str
    type: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True, slots=True)
class SecretKey:
    """A value the reconciler itself reads from a Secret: the one a ``secret`` Connection
    names (``connection``), at ``key``."""

    connection: str
    name: str  # the Secret's
    key: str


@dataclass(frozen=True, slots=True)
class NotifyRule:
    """One ``notifications`` entry (org, project or operation): a webhook told when an
    operation enters one of ``on`` (a phase, or ``PolicyViolation``)."""

    on: frozenset[str]
    url: str
    secret: SecretKey | None
    location: Location  # the entry's, for what the runtime refuses


@dataclass(frozen=True, slots=True)
class CommitStatusSpec:
    """``commitStatus`` in reconciler.yaml: where each applied config commit is reported."""

    provider: str  # github | gitlab
    url: str  # the API's base URL
    repository: str  # owner/name (GitHub); a project id or path (GitLab)
    token: SecretKey
    cluster: str  # whose Secret holds the token
    namespace: str
    context: str = "reconciler"


@dataclass(frozen=True)
class QueueSpec:
    """A queue. A fleet queue (``clusters: [a, b]``) has ``cluster`` set to its first
    cluster (where an operation goes when no cluster is chosen) and ``clusters`` to all of
    them in order; a single-cluster queue has ``clusters`` empty."""

    name: str
    cluster: str
    priority: int = 0
    concurrency: int | None = None
    quota: Mapping[str, Decimal] = field(default_factory=dict)
    kinds: frozenset[RunKind] = frozenset(RunKind)
    strategy: QueueStrategy = QueueStrategy.BEST_EFFORT_FIFO
    paused: bool = False
    source: str = ""
    clusters: tuple[str, ...] = ()  # a fleet queue's clusters, in choice order
    # a fleet queue's per-cluster caps: cluster -> resource -> amount
    cluster_quota: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    require_capacity: bool = False  # hold an op no cluster has the free capacity for
    max_pods: int | None = None  # pods of active operations, every replica counted
    start_timeout: int | None = None  # seconds; a gang not all running by then: GangTimeout
    # Cohort borrowing (docs/dispatch.md, "Cohorts"): per quota resource, how much above its
    # quota it may borrow (absent: none) and how much of its unused quota it lends (absent:
    # all of it).
    cohort: str | None = None
    borrowing_limit: Mapping[str, Decimal] = field(default_factory=dict)
    lending_limit: Mapping[str, Decimal] = field(default_factory=dict)
    budget: BudgetSpec | None = None
    default_timeout: int | None = None  # seconds, for operations that set no run.timeout
    # Flavors, in fallback order (empty: ``quota`` is one pool with no flavor); a flavored
    # queue's ``quota`` and limits above are empty.
    flavors: tuple[QueueFlavor, ...] = ()
    # fairSharing.weight: a larger weight borrows a larger share of what its cohort lends
    fair_weight: Decimal = Decimal(1)

    @property
    def fleet(self) -> bool:
        return bool(self.clusters)

    @property
    def members(self) -> tuple[str, ...]:
        """The clusters the queue may dispatch to, in choice order."""
        return self.clusters or (self.cluster,)


@dataclass(frozen=True)
class CohortSpec:
    """A ``cohorts/<name>.yaml``: queues that lend each other unused quota. Only an
    operation with a ``timeout`` of at most ``max_borrow_seconds`` may borrow, so a lender
    gets its quota back within that time; ``quota`` caps the members' total use."""

    name: str
    max_borrow_seconds: int
    quota: Mapping[str, Decimal] = field(default_factory=dict)
    description: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class WorkflowRef:
    """Set on children of a matrix or DAG operation."""

    parent: str  # "project/name" of the workflow operation
    kind: str  # "matrix" | "dag"
    index: int  # position among siblings, 0-based
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class CompiledOperation:
    """One dispatchable unit. Workflow parents are expanded into their children."""

    project: str
    name: str
    path: str  # the operation's file
    queue: str
    cluster: str
    namespace: str
    kind: RunKind
    spec: Mapping[str, Any]  # compiled, same shape as the operation file
    # Total per resource over all replicas (each pod's request, or its limit where only a
    # limit is set, times ``replicas``): what the operation takes of a queue's quota.
    requests: Mapping[str, Decimal]
    presets: tuple[str, ...] = ()
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    connections: tuple[str, ...] = ()
    generation: int = 1
    is_approved: bool = True
    # Rank inside its queue (0..1000): higher is considered first, then commit order
    priority: int = 0
    # ``stopped: true`` in the repo (a workflow's, for each child): never dispatched, and an
    # active run is deleted (StoppedInRepo)
    stopped: bool = False
    workflow: WorkflowRef | None = None
    dependencies: tuple[str, ...] = ()  # "project/name" ids of DAG siblings
    submitted_at: datetime | None = None  # first commit time of the operation file
    params: Mapping[str, Any] = field(default_factory=dict)  # matrix/DAG child parameters
    # seconds: run.timeout (the Job's activeDeadlineSeconds), a sandbox's default, or its
    # queue's defaultTimeout; None when it may run unbounded
    timeout: int | None = None
    replicas: int = 1  # run.replicas: pods dispatched together, all or nothing
    # run.distributed with its defaults; set whenever the operation is distributed (more
    # than one replica, or run.distributed written), None for a single-pod operation.
    distributed: Distributed | None = None
    # One pod's request per resource (``requests`` is this times ``replicas``).
    pod_requests: Mapping[str, Decimal] | None = None
    # ``schedule``: a template, never dispatched itself; each fire time makes a run of it
    # (core/decision/schedule.py), in ``CompiledRepo.schedules``
    schedule: ScheduleSpec | None = None
    # The flavor the plan assigned (set on the operation a Create renders; never compiled)
    flavor: FlavorSpec | None = None
    # the org's, the project's and its own ``notifications`` (not in ``spec``: a webhook
    # changed does not change the workload)
    notifications: tuple[NotifyRule, ...] = ()
    # "project/name": one string, kept (every plan and view reads it for every operation)
    id: str = field(init=False, compare=False)
    # The planner's first sort key inside a queue (``-2 * priority``; it adds 1 for an op
    # without a commit time), None when stopped (never a candidate): one slot read per
    # operation in the admission's hot path, kept with the id
    rank: int | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.replicas > 1 and self.pod_requests is None:
            raise ValueError("a CompiledOperation with replicas > 1 needs pod_requests")
        object.__setattr__(self, "id", f"{self.project}/{self.name}")
        object.__setattr__(self, "rank", None if self.stopped else -2 * self.priority)

    @property
    def pods(self) -> int:
        """Pods the operation runs: its replicas."""
        return self.replicas

    @property
    def per_pod(self) -> Mapping[str, Decimal]:
        """One pod's request per resource."""
        return self.requests if self.pod_requests is None else self.pod_requests


@dataclass(frozen=True, slots=True)
class ObservedOperation:
    """What the cluster (or the status branch) says about an operation."""

    operation: str  # "project/name"
    phase: Phase
    # of the running workload (every pod), when known
    requests: Mapping[str, Decimal] | None = None
    queue: str | None = None
    cluster: str | None = None
    # The workflow the workload was dispatched for: "" for none, None when not known (a
    # workload from before this was recorded, the status branch, an --observed file).
    workflow: str | None = None
    pods: int | None = None  # the workload's pods (its replicas), when known
    flavor: str | None = None  # the flavor it was dispatched with, when known
    # When the workload was created (its dispatched-at annotation); a borrower's end time
    # is this plus its timeout.
    dispatched_at: datetime | None = None
    started_at: datetime | None = None  # when the run started (its Job's startTime), if known
    # seconds: the timeout the run was dispatched with (recorded on its workload and in
    # status); its budget reservation runs to it even when its file changed or is gone
    timeout: int | None = None


class RejectReason(enum.StrEnum):
    POLICY_VIOLATION = "PolicyViolation"
    INVALID_CONFIG = "InvalidConfig"


@dataclass(frozen=True)
class RejectedOperation:
    """An operation that compiled but may not run (e.g. ``PolicyViolation``); others go on."""

    operation: str  # "project/name"
    path: str
    reason: RejectReason
    message: str  # names the field and its provenance
    location: Location | None = None
    # ids of a workflow's children: refused, and never pruned while they run as its children
    children: tuple[str, ...] = ()
    # the project's and its own ``notifications``, and where it would have run (the
    # cluster and namespace their secrets are read from)
    notifications: tuple[NotifyRule, ...] = ()
    cluster: str = ""
    namespace: str = ""


class PodSecurityLevel(enum.StrEnum):
    """The Kubernetes Pod Security Standards profiles (``policy.podSecurity``)."""

    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


# Capabilities a container may add under each profile, unless policy.allowedCapabilities says
# otherwise (``privileged`` checks none).
PROFILE_CAPABILITIES: Mapping[PodSecurityLevel, frozenset[str]] = {
    PodSecurityLevel.PRIVILEGED: BASELINE_CAPABILITIES,
    PodSecurityLevel.BASELINE: BASELINE_CAPABILITIES,
    PodSecurityLevel.RESTRICTED: frozenset({"NET_BIND_SERVICE"}),
}

# The volume types run.volumes may use (``policy.allowedVolumeTypes`` narrows them).
VOLUME_TYPES = frozenset({"persistentVolumeClaim", "configMap", "secret", "emptyDir"})


@dataclass(frozen=True)
class OrgPolicy:
    """``policy`` in reconciler.yaml, checked after the merge (a preset is not a boundary)."""

    allowed_queues: frozenset[str] | None = None
    max_resources: Mapping[str, Decimal] = field(default_factory=dict)
    allowed_scheduler_names: frozenset[str] | None = None
    allow_privileged: bool = False
    allow_host_path: bool = False
    # Pod Security "baseline": capabilities a container may add (CAP_ prefix ignored).
    allowed_capabilities: frozenset[str] = BASELINE_CAPABILITIES
    allow_run_as_root: bool = True
    # Two projects may name the same namespace (workload names must still not collide).
    allow_shared_namespaces: bool = False
    # priorityClassName values an operation may set; none by default (the cluster's default
    # class applies). ``system-*`` is refused whatever this says.
    allowed_priority_classes: frozenset[str] = frozenset()
    # The Pod Security Standards profile each rendered pod must meet.
    pod_security: PodSecurityLevel = PodSecurityLevel.BASELINE
    # Service accounts an operation may name; empty: only the namespace's ``default``.
    allowed_service_accounts: frozenset[str] = frozenset()
    allowed_image_pull_secrets: frozenset[str] | None = None  # None: any
    allowed_volume_types: frozenset[str] = VOLUME_TYPES
    max_retries: int = 6  # ceiling on run.maxRetries (the Job's backoffLimit)
    max_operation_priority: int = 1000  # ceiling on an operation's priority
    max_replicas: int | None = None  # ceiling on run.replicas
    min_ttl: int = 3600  # floor on run.ttl in seconds (ttlSecondsAfterFinished)
    # The allowed-signers file (a path in the repo) every new config commit must be signed
    # by a key of, as of the last good config; None: commits need no signature.
    allowed_signers: str | None = None


@dataclass(frozen=True)
class OrgSettings:
    default_queue: str | None = None
    default_outputs: str | None = None  # ``defaults.outputs``: a connection's name
    prune: bool = False
    # The mass-deletion guard: refuse to stop more than this share of active ops in one plan.
    max_prune_fraction: float = 0.5
    allow_mass_prune: bool = False
    status_branch: str = "reconciler/status"
    # ``status.repo`` and ``status.retention`` (keepDays, maxCommits): validated; the
    # process's --status-repo, --status-keep-days and --status-max-commits decide
    status_repo: str | None = None
    status_keep_days: int | None = None
    status_max_commits: int | None = None
    policy: OrgPolicy = field(default_factory=OrgPolicy)
    # the price list: per resource, the price of one unit-hour (memory: per GiB-hour)
    prices: Mapping[str, Decimal] = field(default_factory=dict)
    # per flavor, per resource: prices of an op assigned that flavor (over ``prices``)
    flavor_prices: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    currency: str = ""
    timezone: str = "UTC"  # budget windows are calendar windows in this IANA zone
    notifications: tuple[NotifyRule, ...] = ()  # the org's own
    commit_status: CommitStatusSpec | None = None
    web_url: str = ""  # the base of the pages' links ("": none)


class _Generations(Mapping[str, int]):
    """Each operation's generation, by id: a view of the operations by id, not a copy."""

    __slots__ = ("_ops",)

    def __init__(self, ops: Mapping[str, CompiledOperation]) -> None:
        self._ops = ops

    def __getitem__(self, key: str) -> int:
        return self._ops[key].generation

    def get(self, key: str, default: Any = None) -> Any:
        # one lookup, not Mapping.get's __getitem__ and KeyError: every cycle asks it of
        # every workload listed
        op = self._ops.get(key)
        return default if op is None else op.generation

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)


@dataclass(frozen=True, slots=True)
class OperationChanges:
    """A compile's operations are ``since`` (an earlier compile's, that tuple) without
    ``removed`` and with ``added`` (each the same objects, in no order)."""

    since: tuple[CompiledOperation, ...]
    removed: tuple[CompiledOperation, ...]
    added: tuple[CompiledOperation, ...]


@dataclass(frozen=True)
class CompiledRepo:
    """The result of compiling a whole snapshot. ``errors`` non-empty means the commit is
    invalid: callers keep the last good config and change nothing in any cluster."""

    version: str
    org: OrgSettings
    clusters: Mapping[str, ClusterSpec]
    queues: Mapping[str, QueueSpec]
    operations: tuple[CompiledOperation, ...]
    rejected: tuple[RejectedOperation, ...] = ()
    errors: tuple[ConfigError, ...] = ()
    connections: Mapping[str, ConnectionSpec] = field(default_factory=dict)
    cohorts: Mapping[str, CohortSpec] = field(default_factory=dict)
    flavors: Mapping[str, FlavorSpec] = field(default_factory=dict)
    # the scheduled operations, each a template (``CompiledOperation.schedule``): a cycle
    # adds the runs their fire times make to ``operations`` (core/decision/schedule.py)
    schedules: tuple[CompiledOperation, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors

    @cached_property
    def by_id(self) -> Mapping[str, CompiledOperation]:
        """The operations by id: built once per compile, not once per cycle (a cycle with
        no new commit decides over the same object)."""
        ops = self.operations
        return dict(zip(map(attrgetter("id"), ops), ops, strict=True))

    @cached_property
    def workflow_queues(self) -> Mapping[str, frozenset[str]]:
        """Each workflow's queues (those of all its children) by its parent's id: built
        once per compile, as :attr:`by_id`."""
        out: dict[str, set[str]] = {}
        for op in self.operations:
            if op.workflow is not None:
                out.setdefault(op.workflow.parent, set()).add(op.queue)
        return {parent: frozenset(queues) for parent, queues in out.items()}

    @cached_property
    def generations(self) -> Mapping[str, int]:
        """The generation each operation asks for, by id (a view of :attr:`by_id`)."""
        return _Generations(self.by_id)

    @cached_property
    def stopped_ids(self) -> tuple[str, ...]:
        """The operations ``stopped: true`` in the repo (once per compile)."""
        ops = self.operations
        return tuple(compress(map(attrgetter("id"), ops), map(attrgetter("stopped"), ops)))

    @cached_property
    def operation_changes(self) -> OperationChanges | None:
        """How :attr:`operations` differ from an earlier compile's, when the compile
        knows (:meth:`indexed`)."""
        return None

    def indexed(
        self,
        by_id: Mapping[str, CompiledOperation],
        stopped_ids: tuple[str, ...],
        changes: OperationChanges | None = None,
    ) -> CompiledRepo:
        """This repo with :attr:`by_id`, :attr:`stopped_ids` and
        :attr:`operation_changes` given, as computed: a ``CompileCache`` keeps them from
        commit to commit, patched by what changed, where computing them walks every
        operation. A copy (``dataclasses.replace``) computes them again."""
        vars(self).update(by_id=by_id, stopped_ids=stopped_ids, operation_changes=changes)
        return self

    @property
    def fleet_clusters(self) -> frozenset[str]:
        """The clusters of the fleet queues: their capacity is observed."""
        return frozenset(c for q in self.queues.values() for c in q.clusters)

    def never_pruned(self, observed: Iterable[ObservedOperation]) -> frozenset[str]:
        """Observed ids that operations refused by policy keep from being pruned: the
        operation itself, and a refused workflow's children, but only those that run as its
        children (or whose workflow is not known). Another operation's workload that happens
        to have a child's id (its file deleted) is pruned as usual."""
        parents = {o.operation: o.workflow for o in observed}
        kept = {r.operation for r in self.rejected}
        for r in self.rejected:
            kept.update(c for c in r.children if parents.get(c) in (None, r.operation))
        return frozenset(kept)


class ConcurrencyPolicy(enum.StrEnum):
    """``schedule.concurrencyPolicy``: what a tick does while an earlier tick's run is active."""

    FORBID = "Forbid"  # the tick waits for it (and is skipped if it waits past its deadline)
    ALLOW = "Allow"  # both run
    REPLACE = "Replace"  # the earlier run is stopped (StoppedInRepo)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """An operation's ``schedule``, compiled: each fire time makes a run
    (core/decision/schedule.py). ``cron`` for ``kind: cron``, ``every`` (seconds, whole
    minutes) for ``kind: interval``."""

    kind: str  # "cron" | "interval"
    cron: str = ""
    every: int = 0
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.FORBID
    starting_deadline: int | None = None  # seconds
