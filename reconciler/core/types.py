"""Frozen value types shared by the pure core: the compiler produces them, the planner,
renderer and status writer consume them. No I/O here; adapters build ``RepoSnapshot``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
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


class Phase(enum.StrEnum):
    QUEUED = "Queued"
    DISPATCHED = "Dispatched"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"

    @property
    def active(self) -> bool:
        return self in (Phase.DISPATCHED, Phase.RUNNING)

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED)


# --- the repo as the core sees it -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepoFile:
    """One blob of the config repo. ``symlink_target`` is set for symlinks (content empty)."""

    path: str  # posix, relative to the repo root
    content: bytes
    symlink_target: str | None = None
    first_commit_time: datetime | None = None  # when the file was first added, if known


@dataclass(frozen=True)
class RepoSnapshot:
    """A whole config tree at one version (a commit SHA, or ``worktree`` outside Git)."""

    files: Mapping[str, RepoFile]
    version: str = "worktree"


# --- diagnostics ------------------------------------------------------------------------


@dataclass(frozen=True, order=True, slots=True)
class Location:
    file: str
    line: int = 0  # 1-based; 0 when unknown
    col: int = 0  # 1-based; 0 when unknown

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True, order=True, slots=True)
class ConfigError:
    """A problem in the config repo, printed as ``file:line:col: message``."""

    location: Location
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


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
        return f"{self.step} at {self.file}:{self.line}"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    concurrency: int | None = None
    kubeconfig: Mapping[str, Any] = field(default_factory=dict)
    context: str | None = None


@dataclass(frozen=True)
class ConnectionSpec:
    """A resolved ``connections/<name>.yaml``; the renderer turns it into env/volumes/mounts.

    ``type`` is ``volume``, ``secret``, ``configMap``, ``bucket`` or ``git``; ``spec`` holds that
    source's fields as written (camelCase) with defaults filled in."""

    name: str
    type: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class QueueSpec:
    name: str
    cluster: str
    priority: int = 0
    concurrency: int | None = None
    quota: Mapping[str, Decimal] = field(default_factory=dict)
    kinds: frozenset[RunKind] = frozenset(RunKind)
    strategy: QueueStrategy = QueueStrategy.BEST_EFFORT_FIFO
    paused: bool = False
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
    requests: Mapping[str, Decimal]  # total per resource (requests, or limits where only set)
    presets: tuple[str, ...] = ()
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    connections: tuple[str, ...] = ()
    generation: int = 1
    is_approved: bool = True
    workflow: WorkflowRef | None = None
    dependencies: tuple[str, ...] = ()  # "project/name" ids of DAG siblings
    submitted_at: datetime | None = None  # first commit time of the operation file
    params: Mapping[str, Any] = field(default_factory=dict)  # matrix/DAG child parameters

    @property
    def id(self) -> str:
        return f"{self.project}/{self.name}"


@dataclass(frozen=True, slots=True)
class ObservedOperation:
    """What the cluster (or the status branch) says about an operation."""

    operation: str  # "project/name"
    phase: Phase
    requests: Mapping[str, Decimal] | None = None  # of the running workload, when known
    queue: str | None = None
    cluster: str | None = None


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
    children: tuple[str, ...] = ()  # ids of a workflow's children: refused, never pruned


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


@dataclass(frozen=True)
class OrgSettings:
    default_queue: str | None = None
    prune: bool = False
    # The mass-deletion guard: refuse to stop more than this share of active ops in one plan.
    max_prune_fraction: float = 0.5
    allow_mass_prune: bool = False
    status_branch: str = "reconciler/status"
    policy: OrgPolicy = field(default_factory=OrgPolicy)


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

    @property
    def valid(self) -> bool:
        return not self.errors
