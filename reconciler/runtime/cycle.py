"""One reconcile cycle: load, read, decide, apply, record.

The guard ladder, in order:
1. read the config snapshot; on failure keep the last good one;
2. compile it; an invalid commit is rejected whole and the last good config stays in force;
   so does a bug in the compiler (``InternalError``: logged with its traceback, reported as
   ``internal_error``, never as a config error);
3. read every cluster from its list-then-watch caches (a fresh list where a cache is not
   synced); a cluster that cannot be read is listed as unreachable; a fleet queue's
   cluster also gives its capacity (its Nodes and every live pod; when they cannot be
   read, the capacity is not observed, and the cluster is still read);
4. ``decide`` (pure, ``core/decision/cycle.py``): the observed state, the plan and the actions, from
   the listing and the memory (in-flight creates, the last state seen of each run);
5. apply the actions, only while leading: create or adopt what the plan dispatches (a
   bounded pool of creates in flight), stop what it stops, annotate phases. Nothing else in
   a cluster is ever changed;
6. record the results in the memory for the next cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Protocol

from reconciler.adapters.git import GitSyncError
from reconciler.adapters.kube import (
    ALL_OBJECTS,
    API_VERSIONS,
    LIVE_PODS,
    ApplyResult,
    Kube,
    KubeError,
    NamespaceForbidden,
    list_pytorchjobs,
)
from reconciler.core import gcpause
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.decision.cycle import (
    Actions,
    ClusterHealth,
    ClusterListing,
    Decision,
    InFlight,
    Memory,
    decide,
    wanted_backends,
)
from reconciler.core.decision.render import (
    ANNOTATION_PHASE,
    ANNOTATION_PHASE_REASON,
    ANNOTATION_WORKFLOW,
    RenderedWorkload,
    render_operation,
)
from reconciler.core.decision.render_kubeflow import KIND as PYTORCHJOB
from reconciler.core.decision.trigger import Trigger
from reconciler.core.observation.capacity import ClusterCapacity, observe_capacity
from reconciler.core.observation.observe import Observer, WorkloadState
from reconciler.core.plan import Plan, PlanInputError, StopReason
from reconciler.core.plan.groups import PlanCache
from reconciler.core.plan.partitions import (
    Partition,
    ShardScope,
    moved_runs,
    operation_queues,
    partition_repo,
    restrict_repo,
    shard_scope,
)
from reconciler.core.reporting.report import Outcome, Report, failures, planned_report, report
from reconciler.core.reporting.status import ClusterStatus, StatusReason
from reconciler.core.types import (
    BUG_NOTE,
    ClusterSpec,
    CompiledOperation,
    CompiledRepo,
    ConfigError,
    InternalError,
    Location,
    Phase,
    RepoFile,
    RepoSnapshot,
)
from reconciler.core.views.queue_view import BlameLine
from reconciler.runtime.faults import FaultPoints
from reconciler.runtime.informer import Informer
from reconciler.runtime.live import read_capacity

log = logging.getLogger("reconciler.cycle")


class Clock(Protocol):
    def now(self) -> datetime: ...


class SnapshotSource(Protocol):
    def __call__(self) -> RepoSnapshot: ...


@dataclass(frozen=True)
class CycleResult:
    """What one cycle saw and did. ``plan`` is None when no valid config was ever loaded."""

    at: datetime
    version: str | None  # the config version in force
    compiled: CompiledRepo | None
    plan: Plan | None
    states: Mapping[str, WorkloadState]
    config_errors: tuple[ConfigError, ...] = ()
    sync_error: str = ""
    clusters: tuple[ClusterHealth, ...] = ()
    dispatched: tuple[str, ...] = ()
    adopted: tuple[str, ...] = ()
    stopped: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)  # operation -> error
    failure_reasons: Mapping[str, StatusReason] = field(default_factory=dict)  # of failed
    leading: bool = True
    attempted_version: str | None = None  # the newest version read, valid or not
    duration: float = 0.0  # seconds the cycle took
    decision: Decision | None = None  # what decide returned (None: it did not run)
    internal_error: str = ""  # a bug compiling attempted_version (not a config error)
    outcome: Outcome | None = None  # what carrying out the decision did (None: nothing)
    # sharded (``--shards``): the partitions decided over; ``compiled`` is theirs alone
    shard: ShardScope | None = None

    @cached_property
    def report(self) -> Report | None:
        """The decision with its outcome: what this cycle shows (``core/reporting/report.py``). A
        result made without a decision (a plan over given states) reports that plan: its
        dispatches carried out when ``leading`` (but ``failed``), else none."""
        if self.compiled is None or self.plan is None:
            return None
        if self.decision is None:
            planned = (d.operation for d in self.plan.dispatch)
            failed = failures(self.failed, self.failure_reasons, planned)
            clusters = tuple(
                ClusterStatus(
                    name=h.name,
                    reachable=h.reachable,
                    error=h.error,
                    backends=tuple(sorted(h.backends)),
                )
                for h in self.clusters
            )
            return planned_report(
                self.compiled,
                self.plan,
                self.states,
                carried_out=self.leading,
                failed=failed,
                clusters=clusters,
            )
        return report(self.compiled, self.decision, self.outcome or Outcome.none())

    @property
    def workloads(self) -> Mapping[str, WorkloadState]:
        """``states`` and the superseded runs still holding quota: what queue views count."""
        if self.decision is None or not self.decision.superseded:
            return self.states
        return {**self.states, **self.decision.superseded}

    @property
    def ok(self) -> bool:
        return self.plan is not None and not self.sync_error and not self.failed


ConnectCluster = Callable[[ClusterSpec], Kube]
# (last good commit or None, new commit, allowed-signers path) -> "" or why it is refused
VerifyCommits = Callable[[str | None, str, str], str]


@dataclass
class ChangeSet:
    """What carrying out a decision's actions did."""

    dispatched: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    created: list[InFlight] = field(default_factory=list)  # dispatched and adopted
    stopped: list[WorkloadState] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # operation -> error
    reasons: dict[str, StatusReason] = field(default_factory=dict)  # of failed

    def result(
        self, base: CycleResult, decision: Decision, *, leading: bool, attempted: str | None
    ) -> CycleResult:
        """The cycle's result: ``base`` (its time, config and errors) with the decision and
        these results of carrying it out (none: a cycle that does not lead)."""
        outcome = self.outcome(decision.actions)
        assert base.compiled is not None  # a decision is made over a compiled config
        return replace(
            base,
            plan=decision.plan,
            states=report(base.compiled, decision, outcome).states,
            clusters=decision.clusters,
            dispatched=tuple(self.dispatched),
            adopted=tuple(self.adopted),
            stopped=tuple(s.operation for s in self.stopped),
            failed=self.failed,
            failure_reasons=self.reasons,
            leading=leading,
            attempted_version=attempted,
            decision=decision,
            outcome=outcome,
        )

    def outcome(self, actions: Actions) -> Outcome:
        """These results as the value the report reads: a failed create with its reason
        (a failed delete is not a failed dispatch: its workload is still counted)."""
        return Outcome(
            created=tuple(self.created),
            adopted=frozenset(self.adopted),
            failed=failures(self.failed, self.reasons, (c.operation.id for c in actions.creates)),
            stopped=tuple(self.stopped),
        )


# The workload kinds the runtime creates, lists, observes and deletes (docs/runtime.md).
CREATABLE_KINDS = frozenset({"Job", PYTORCHJOB})


def _listed_version(jobs: Informer, pytorchjobs: Informer) -> str | None:
    """The resourceVersion every workload created at or before it is listed by: the older
    of the Job and PyTorchJob caches' (each follows its own watch; an unserved kind's cache
    holds nothing to wait for). A create newer than it is counted from its response."""
    versions = [jobs.resource_version]
    if pytorchjobs.served:
        versions.append(pytorchjobs.resource_version)
    if any(v is None for v in versions):
        return None
    try:
        return min(versions, key=lambda v: int(str(v)))
    except ValueError:
        return versions[0]


# A cluster that cannot be read is tried again after 1 s, then twice as long after each
# failed attempt up to this; meanwhile it is listed unreachable with its last error, and
# nothing about it is logged: one line per failed attempt (docs/reliability.md).
CLUSTER_BACKOFF = (1.0, 30.0)


@dataclass
class _Down:
    """A cluster that the last attempt could not read."""

    error: str
    since: datetime
    attempts: int
    retry_at: datetime


def _stop_message(operation: str, message: str, gang: bool, version: str) -> str:
    """The message of the Event on a workload the reconciler deleted."""
    if gang:
        return f"operation {operation}: {message}"
    return f"operation {operation} is no longer in the repo at config {version[:12]}: deleted"


# A create the API server answers with these refuses the object itself (a value it does not
# accept: 400 BadRequest, 422 Invalid), not the cluster: the other creates go on.
_OBJECT_REFUSED = (400, 422)


def _refused_object(exc: Exception) -> bool:
    return isinstance(exc, KubeError) and exc.status in _OBJECT_REFUSED


def _decides(
    scope: ShardScope,
) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """``Memory.split``'s arguments for the runs ``scope`` decides."""
    return scope.clusters, scope.operations, scope.known_operations


class Shards(Protocol):
    """The partitions this replica holds (``runtime/shards.py``)."""

    def assign(self, partitions: Iterable[str]) -> None: ...

    def owned(self) -> frozenset[str]: ...

    def owns(self, partition: str) -> bool: ...

    def retains(self) -> bool: ...


class Reconciler:
    """Holds what must survive between cycles: the last good config, the cluster clients,
    and which workloads we have seen (so a Job deleted by hand becomes ``Stopped``).

    With ``shards``, each cycle decides over the partitions this replica holds
    (``core/plan/partitions.py``), reads only their clusters, and acts while it still
    holds every one of them."""

    def __init__(
        self,
        source: SnapshotSource,
        connect: ConnectCluster,
        clock: Clock,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        faults: FaultPoints | None = None,
        watch: bool = True,
        sync_timeout: float = 10.0,
        create_workers: int = 8,
        on_trigger: Callable[[Trigger], None] | None = None,
        leader_record: Callable[[], Memory | None] | None = None,
        blame: Callable[[str, str], list[BlameLine]] | None = None,
        verify_commits: VerifyCommits | None = None,
        shards: Shards | None = None,
        taken_record: Callable[[], Memory] | None = None,
    ) -> None:
        self._source = source
        self._shards = shards
        # sharded: the status branch's record now, read when a partition is taken
        self._taken_record = taken_record
        # sharded: told of the partitions taken and the record read then (the notifier
        # takes their owed notifications and their last states)
        self.on_taken: Callable[[ShardScope, Memory], None] | None = None
        self._held: tuple[str, ...] = ()  # the partitions the cycle in progress decides
        self._held_clusters: frozenset[str] = frozenset()  # and their clusters
        # sharded: the status branch's record as last read (the runs of the partitions
        # not held, that the partitions are cut from)
        self._recorded = Memory()
        # the config last partitioned, its queues moved with active runs, its partitions,
        # and the repo and scope of those held
        self._partitioned: (
            tuple[
                CompiledRepo,
                dict[str, frozenset[str]],
                tuple[Partition, ...],
                tuple[tuple[str, ...], CompiledRepo, ShardScope] | None,
            ]
            | None
        ) = None
        # each operation's queue in the config last partitioned (``moved_runs``' index)
        self._queues: tuple[CompiledRepo, dict[str, str]] | None = None
        # ``git blame`` of a file at a commit: who set an operation's ``stopped: true``
        self._blame = blame
        # policy.requireSignedCommits: checks the commits from the last good config to a
        # new one (None: the source is no Git repository, nothing to check)
        self._verify_commits = verify_commits
        # the last check: (good, tip, allowed-signers path) and its answer ("": signed)
        self._checked: tuple[tuple[str | None, str, str], str] | None = None
        # the config a previous process had in force, and how to read a commit: at a start,
        # the last good config the signature check begins from (``trust``)
        self._anchor: tuple[str, Callable[[str], RepoSnapshot]] | None = None
        # while not leading: the leader's record when it changed, joined before each cycle
        self._leader_record = leader_record
        # told of each watch event by which a run ends (the loop runs a cycle at once)
        self._on_trigger = on_trigger
        self._connect = connect
        self._clock = clock
        self._is_leader = is_leader
        if shards is not None:
            self._is_leader = lambda: is_leader() and self._holds()
        self._faults = faults or FaultPoints()
        self._last_good: CompiledRepo | None = None
        # a new commit reparses only the files it changed, and recompiles only the
        # operations whose inputs changed
        self._compile_cache = CompileCache()
        self._plans = PlanCache()  # each group of queues' last plan (core/plan/groups.py)
        self._parse_cache = self._compile_cache.parse_cache
        # the last snapshot's files and what they compiled to (unchanged files are the
        # same objects, so comparing them is cheap)
        self._compiled: tuple[CompiledRepo | None, Mapping[str, RepoFile]] = (None, {})
        self._clients: dict[str, Kube] = {}
        self._watch = watch
        self._sync_timeout = sync_timeout
        self._informers: dict[str, tuple[Informer, ...]] = {}
        # a fleet queue's cluster: its Nodes and all its live pods (capacity)
        self._capacity_informers: dict[str, tuple[Informer, Informer]] = {}
        self._namespaces: set[tuple[str, str]] = set()  # (cluster, namespace) known to exist
        self._down: dict[str, _Down] = {}  # clusters not read, until their next attempt
        self._events = ThreadPoolExecutor(max_workers=2, thread_name_prefix="events")
        # the phase annotations, off the cycle's path: per workload uid, the state last
        # asked to be written, and the uids whose write is in progress
        self._writes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="annotate")
        self._annotating = threading.Lock()
        self._annotated: dict[str, WorkloadState] = {}
        self._writing: set[str] = set()
        # creates in flight per cycle; results are recorded in plan order
        self._creates = ThreadPoolExecutor(max_workers=create_workers, thread_name_prefix="create")
        self.memory = Memory()  # what decide needs to know that the clusters may not say
        # each workload observed again only when it or its pods changed: fed what the watch
        # caches say changed since the last cycle (``Informer.changes``)
        self._observer = Observer()
        self._observed_from: dict[str, tuple[Informer, ...]] = {}  # the caches it follows
        self._internal_error = ""  # of the last _load
        self.last: CycleResult | None = None

    @property
    def compiled_operations(self) -> int:
        """How many operation files were compiled so far (not reused from the cache)."""
        return self._compile_cache.compiled

    @property
    def sharded(self) -> bool:
        return self._shards is not None

    @property
    def config_in_force(self) -> CompiledRepo | None:
        """The whole config last loaded (a shard decides over part of it)."""
        return self._last_good

    def _holds(self) -> bool:
        """Sharded: this replica still holds every partition the cycle decides over."""
        shards = self._shards
        return shards is not None and bool(self._held) and all(map(shards.owns, self._held))

    def _shard(self, compiled: CompiledRepo) -> tuple[CompiledRepo, ShardScope | None]:
        """The repo this cycle decides over: the partitions held, and their scope. A new
        config, or a queue moved with runs still active in its old cluster, reads the
        status branch first: the replicas cut the partitions from the same record."""
        if self._shards is None:
            return compiled, None
        memo = self._partitioned
        if self._queues is None or self._queues[0] is not compiled:
            self._queues = (compiled, operation_queues(compiled))
        queues = self._queues[1]
        moved = moved_runs(compiled, self._runs(), queues)
        if memo is None or memo[0] is not compiled or moved:
            if self._follow_branch(self.memory.following) is None:
                return self._nothing(compiled)
            moved = moved_runs(compiled, self._runs(), queues)
        if memo is None or memo[0] is not compiled or memo[1] != moved:
            memo = self._partitioned = (compiled, moved, partition_repo(compiled, moved), None)
        partitions = memo[2]
        self._shards.assign(p.id for p in partitions)
        owned = self._shards.owned()
        held = tuple(p for p in partitions if p.id in owned)
        taken = [p for p in held if p.id not in self._held]
        self._held = tuple(p.id for p in held)
        self._held_clusters = frozenset(c for p in held for c in p.clusters)
        if taken:
            # a partition taken: its runs as its last owner recorded them, not as this
            # replica last saw them (maybe before that owner ran them)
            gone = shard_scope(compiled, taken)
            recorded = self._follow_branch(self.memory.split(*_decides(gone))[1].following)
            if recorded is None:
                return self._nothing(compiled)
            if self.on_taken is not None:
                self.on_taken(gone, recorded)
            if moved_runs(compiled, self._runs(), queues) != moved:  # cut again next cycle
                return self._nothing(compiled)
        kept = memo[3]
        if kept is None or kept[0] != self._held:  # 0.1 s at 100,000 operations: once
            kept = (self._held, restrict_repo(compiled, held), shard_scope(compiled, held))
            self._partitioned = (compiled, moved, partitions, kept)
        return kept[1], kept[2]

    def _runs(self) -> Iterable[WorkloadState]:
        """The last state known of every run: on the clusters of the partitions held, as
        this replica saw them; elsewhere, as the status branch last read records them (not
        as this replica last saw them: what it saw there is no longer kept up to date, and
        the replicas agree on the branch)."""
        memory, recorded, held = self.memory, self._recorded, self._held_clusters
        for state in (*memory.seen.values(), *memory.superseded.values()):
            if state.cluster in held:
                yield state
        for flight in memory.inflight.values():
            if flight.state.cluster in held:
                yield flight.state
        for state in (*recorded.seen.values(), *recorded.superseded.values()):
            if state.cluster not in held:
                yield state

    def _follow_branch(self, join: Callable[[Memory], Memory]) -> Memory | None:
        """The status branch's record now, joined into memory by ``join``; None (logged)
        when it cannot be read."""
        if self._taken_record is None:
            return Memory()
        try:
            recorded = self._taken_record()
        except GitSyncError as exc:
            log.warning("cannot read the status branch: %s", exc)
            return None
        self.memory = join(recorded)
        self._recorded = recorded
        return recorded

    def _nothing(self, compiled: CompiledRepo) -> tuple[CompiledRepo, ShardScope]:
        """No partition acted on this cycle (its record not read, or cut again)."""
        self._held = ()
        self._held_clusters = frozenset()
        return restrict_repo(compiled, ()), shard_scope(compiled, ())

    def trust(self, commit: str, read: Callable[[str], RepoSnapshot]) -> None:
        """Start from ``commit``, the config a previous process had in force (the status
        branch's ``applied``), read by ``read``: at the first load of a new tip, when it
        asks for signed commits, it is the last good config, so
        ``policy.requireSignedCommits`` checks every commit since it, and a refused or
        invalid tip leaves it in force. Otherwise (unreadable, invalid, no such policy) it
        is ignored, and the tip alone is checked under its own policy."""
        self._anchor = (commit, read)

    def _load_anchor(self, version: str) -> None:
        anchor, self._anchor = self._anchor, None
        if anchor is None or anchor[0] == version:
            return
        commit, read = anchor
        try:  # through the cache: the tip then recompiles only what differs
            compiled = compile_repo(read(commit), cache=self._compile_cache)
        except Exception as exc:  # an adapter boundary (git), or a bug compiling it
            log.warning("config %s recorded in force cannot be read: %s", commit[:12], exc)
            return
        # only a config that asks for signed commits is kept in force from the start
        if compiled.valid and compiled.org.policy.allowed_signers is not None:
            self._last_good = compiled

    def seed(self, memory: Memory) -> None:
        """Start from what a previous process recorded (the status branch)."""
        self.memory = self.memory.under(memory)
        self._recorded = memory

    # --- steps -------------------------------------------------------------------------

    def _load(self) -> tuple[CompiledRepo | None, tuple[ConfigError, ...], str, str | None]:
        self._internal_error = ""
        try:
            snapshot = self._source()
        except Exception as exc:  # an adapter boundary: git, filesystem
            log.warning("config sync failed: %s", exc)
            return self._last_good, (), str(exc) or type(exc).__name__, None
        if self._last_good is None and self._anchor is not None:
            self._load_anchor(snapshot.version)
        if self._last_good is not None:  # the policy in force decides
            refusal = self._unsigned(self._last_good, snapshot.version)
            if refusal is not None:
                log.error("refused config %s: %s", snapshot.version, refusal)
                return self._last_good, (refusal,), "", snapshot.version
        compiled, files = self._compiled
        if compiled is None or compiled.version != snapshot.version or files != snapshot.files:
            try:
                compiled = compile_repo(snapshot, cache=self._compile_cache)
            except InternalError as exc:  # a bug: the last good config stays in force
                log.exception("internal error compiling config %s (%s)", snapshot.version, BUG_NOTE)
                self._internal_error = str(exc)
                return self._last_good, (), "", snapshot.version
            self._compiled = (compiled, snapshot.files)
        # else: the same files at the same version, valid or not, compile the same: reuse
        if not compiled.valid:
            for error in compiled.errors:
                log.error("invalid config %s: %s", snapshot.version, error)
            return self._last_good, compiled.errors, "", snapshot.version
        if self._last_good is None:  # a first start: the tip's own policy, on the tip alone
            refusal = self._unsigned(compiled, snapshot.version, first=True)
            if refusal is not None:
                log.error("refused config %s: %s", snapshot.version, refusal)
                return None, (refusal,), "", snapshot.version
        self._last_good = compiled
        return compiled, (), "", snapshot.version

    def _unsigned(
        self, good: CompiledRepo, version: str, *, first: bool = False
    ) -> ConfigError | None:
        """Why commit ``version`` is refused under ``policy.requireSignedCommits`` of
        ``good`` (the last good config), or None: every commit since that config must be
        signed by a key allowed before it (``verify_signatures``). With ``first`` (no config
        in force yet), ``good`` is ``version``'s own and the commit alone is checked. The
        answer is remembered: the same commits are not checked again each cycle (a tip
        signed but invalid stays so until the next commit)."""
        if self._verify_commits is None or (good.version == version and not first):
            return None
        signers = good.org.policy.allowed_signers
        if signers is None:
            return None
        key = (None if first else good.version, version, signers)
        if self._checked is not None and self._checked[0] == key:
            reason = self._checked[1]
        else:
            reason = self._verify_commits(*key)
            self._checked = (key, reason)
        if not reason:
            return None
        return ConfigError(Location(signers), f"{reason} (policy.requireSignedCommits)")

    def _client(self, spec: ClusterSpec) -> Kube:
        kube = self._clients.get(spec.name)
        if kube is None:
            kube = self._connect(spec)
            self._clients[spec.name] = kube
        return kube

    def connected(self, name: str) -> Kube:
        """The client of cluster ``name`` once a cycle has connected it (for another thread:
        it never connects); a ``KubeError`` before."""
        kube = self._clients.get(name)
        if kube is None:
            raise KubeError(f"cluster {name!r} is not connected yet")
        return kube

    def api_servers(self) -> tuple[str, ...]:
        """The API server URLs of the clusters connected so far."""
        return tuple(k.server for k in list(self._clients.values()))

    def _informers_for(self, name: str, kube: Kube) -> tuple[Informer, ...]:
        """The watch caches of one cluster: Jobs, Pods and PyTorchJobs (an empty cache
        where the cluster does not serve the CRD), each object narrowed to the fields
        observation reads (the observer and the triggers are their only readers)."""
        pair = self._informers.get(name)
        if pair is None or pair[0].kube is not kube:
            self._stop_informers(name)
            pair = tuple(
                Informer(kube, kind, on_trigger=self._on_trigger, narrow=True, track=True)
                for kind in ("Job", "Pod", PYTORCHJOB)
            )
            for informer in pair:
                informer.start()
            self._informers[name] = pair
        return pair

    def _stop_informers(self, name: str) -> None:
        self._observed_from.pop(name, None)
        for informer in self._informers.pop(name, ()):
            informer.stop()
        for informer in self._capacity_informers.pop(name, ()):
            informer.stop()

    def _capacity(self, name: str, kube: Kube) -> ClusterCapacity | None:
        """The cluster's capacity, from its Node and live-pod caches (a fresh list where
        they are not synced); None, logged, when they cannot be read (e.g. the RBAC to
        list Nodes is missing): the choice then treats it as not observed."""
        try:
            if not self._watch:
                return read_capacity(kube)
            pair = self._capacity_informers.get(name)
            if pair is None or pair[0].kube is not kube:
                for informer in self._capacity_informers.pop(name, ()):
                    informer.stop()
                pair = (
                    Informer(kube, "Node", selector=ALL_OBJECTS),
                    Informer(kube, "Pod", selector=ALL_OBJECTS, fields=LIVE_PODS),
                )
                for informer in pair:
                    informer.start()
                self._capacity_informers[name] = pair
            if all(c.wait_synced(self._sync_timeout) and c.healthy for c in pair):
                return observe_capacity(pair[0].items(), pair[1].items())
            return read_capacity(kube)
        except KubeError as exc:
            log.warning("capacity of cluster %s not observed: %s", name, exc)
            return None

    def close(self) -> None:
        """Stop every watch and send the Events still queued (phase annotations still
        queued are dropped)."""
        for name in list(self._informers) + list(self._capacity_informers):
            self._stop_informers(name)
        self._creates.shutdown(wait=True)
        self._events.shutdown(wait=True)
        # idempotent and informative: the next leader writes what is left
        self._writes.shutdown(wait=False, cancel_futures=True)

    def _read(self, compiled: CompiledRepo) -> dict[str, ClusterListing]:
        """Jobs, PyTorchJobs and Pods per cluster from the watch caches; a fresh list where a
        cache is not synced or its watch is failing, or where the cluster serves a backend
        (its discovery says) whose cache has not listed it yet (a CRD just installed)."""
        listing: dict[str, ClusterListing] = {}
        fleet = compiled.fleet_clusters
        for name in list(self._capacity_informers):
            if name not in fleet:  # no fleet queue lists it any more
                for informer in self._capacity_informers.pop(name):
                    informer.stop()
        wanted = wanted_backends(compiled)
        now = self._clock.now()
        for name in list(self._down):
            if name not in compiled.clusters:
                del self._down[name]
        for name in list(self._informers):
            if name not in compiled.clusters:  # gone from the config (or from this shard)
                self._stop_informers(name)
        for name in sorted(compiled.clusters):
            spec = compiled.clusters[name]
            down = self._down.get(name)
            if down is not None and now < down.retry_at:
                listing[name] = ClusterListing.unreachable(down.error)  # not tried: no line
                continue
            version: str | None = None  # a fresh list: nothing can lag
            backends: frozenset[str] = frozenset()
            try:
                kube = self._client(spec)
                if name in wanted:  # asked only where an operation needs one
                    backends = kube.served_backends(wanted[name])
                # a cluster that was down is probed with one list: its watches start
                # once it answers (the next cycle), not to fail three times meanwhile
                watch = self._watch and down is None
                caches = self._informers_for(name, kube) if watch else ()
                synced = bool(caches) and all(
                    c.wait_synced(self._sync_timeout) and c.healthy for c in caches
                )
                if synced and "pytorchjob" in backends and not caches[2].served:
                    caches[2].retry_now()
                    synced = False
                seen = self._observe_caches(name, caches) if synced else None
                if seen is not None:
                    states, version = seen
                else:
                    self._observed_from.pop(name, None)
                    states = self._observer.observe(
                        name,
                        kube.list_managed("Job").items,
                        kube.list_managed("Pod").items,
                        list_pytorchjobs(kube),
                    )
            except KubeError as exc:
                self._clients.pop(name, None)
                self._stop_informers(name)
                listing[name] = ClusterListing.unreachable(str(exc))
                self._failed_attempt(name, str(exc), now)
                continue
            if down is not None:
                del self._down[name]
                log.info(
                    "cluster %s reachable again after %d failed attempts (down %.0fs)",
                    name,
                    down.attempts,
                    (now - down.since).total_seconds(),
                )
            capacity = self._capacity(name, kube) if name in fleet else None
            listing[name] = ClusterListing(
                states, version=version, capacity=capacity, backends=backends
            )
        return listing

    def _observe_caches(
        self, name: str, caches: tuple[Informer, ...]
    ) -> tuple[tuple[WorkloadState, ...], str] | None:
        """Cluster ``name``'s states from its synced watch caches, and the resourceVersion
        they are listed to: the observer takes what changed since it last read these caches
        (all they hold when its copy of the cluster came from elsewhere). The version is
        read first: an event the watch applies between the two reads is then in the
        changes, never past a version the states do not reach. None, nothing read, when a
        cache has no version (a relist under way after a 410: what it holds may be stale,
        and no version would mean a fresh list, which nothing lags): list afresh."""
        version = _listed_version(caches[0], caches[2])
        if version is None:
            return None
        again = self._observed_from.pop(name, None) is caches
        jobs, pods, pytorchjobs = (c.changes(reset=not again) for c in caches)
        states = self._observer.update(name, jobs, pods, pytorchjobs)
        self._observed_from[name] = caches
        return states, version

    def fold_watch_changes(self) -> None:
        """Hand what the watch caches changed since the last read to the observer, between
        cycles (on the cycle's thread: the observer is the cycle's). A round of Jobs and
        pods starting is then observed as it comes, and the next cycle's read, on the way
        to a commit's first create, costs only what changed since the last fold. A cluster
        whose caches changed nothing is not read (an idle fleet costs a glance a cluster);
        one whose caches are not all synced and healthy is left to the cycle."""
        for name, caches in list(self._observed_from.items()):
            if any(c.changed for c in caches) and all(c.healthy for c in caches):
                self._observe_caches(name, caches)

    def _failed_attempt(self, name: str, error: str, now: datetime) -> None:
        """Record a failed read of cluster ``name`` and log it, once, with the delay until
        the next attempt (doubled after each failure, up to ``CLUSTER_BACKOFF``)."""
        first, cap = CLUSTER_BACKOFF
        down = self._down.get(name)
        attempts = 1 if down is None else down.attempts + 1
        delay = min(cap, first * 2 ** (attempts - 1))
        since = now if down is None else down.since
        self._down[name] = _Down(error, since, attempts, now + timedelta(seconds=delay))
        log.warning("cluster %s unreachable: %s (retrying in %.0fs)", name, error, delay)

    def _apply(
        self,
        compiled: CompiledRepo,
        actions: Actions,
        now: datetime,
        sent: Callable[[], None] = lambda: None,
    ) -> ChangeSet:
        """Carry out the creates and deletes, in plan order; the results as a ChangeSet.
        ``sent`` is called once every create is handed to the pool, before their results
        are waited for."""
        changes = ChangeSet()
        broken: set[str] = set()
        lock = threading.Lock()

        def create(
            op_id: str, cluster: str, kube: Kube, manifests: tuple[Mapping[str, Any], ...]
        ) -> list[ApplyResult]:
            with lock:
                if cluster in broken:
                    changes.failed[op_id] = f"cluster {cluster} failed earlier in this cycle"
                    return []
            if not self._is_leader():
                return []
            try:
                results = [kube.create_or_adopt(m) for m in manifests]
            except (KubeError, OSError) as exc:
                with lock:
                    if not _refused_object(exc):  # else this operation only: the cluster is fine
                        broken.add(cluster)
                    changes.failed[op_id] = str(exc)
                log.error("dispatch of %s failed: %s", op_id, exc)
                return []
            self._faults.hit("after-create")
            return results

        # Render and submit in plan order; the pool bounds the creates in flight. The plan
        # was made before any create, so concurrency cannot over-admit a quota.
        submitted: list[tuple[CompiledOperation, RenderedWorkload, Future[list[ApplyResult]]]] = []
        for item in actions.creates:
            op = item.operation
            if op.cluster in broken:
                changes.failed[op.id] = f"cluster {op.cluster} failed earlier in this cycle"
                continue
            if not self._is_leader():
                log.info("lost leadership: dispatching stops")
                break
            rendered = render_operation(
                op, compiled.connections, config_version=compiled.version, dispatched_at=now
            )
            kind = str(rendered.job["kind"])
            if kind not in CREATABLE_KINDS:  # this operation only: the cluster is fine
                changes.failed[op.id] = f"the reconciler cannot create {kind} workloads"
                log.error("dispatch of %s failed: %s", op.id, changes.failed[op.id])
                continue
            try:
                kube = self._client(compiled.clusters[op.cluster])
                if (op.cluster, op.namespace) not in self._namespaces:
                    kube.ensure_namespace(op.namespace)
                    self._namespaces.add((op.cluster, op.namespace))
            except NamespaceForbidden as exc:  # this namespace only: the cluster is fine
                changes.failed[op.id] = str(exc)
                changes.reasons[op.id] = StatusReason.NAMESPACE_FORBIDDEN
                log.error("dispatch of %s failed: %s", op.id, exc)
                continue
            except (KubeError, OSError) as exc:
                with lock:
                    broken.add(op.cluster)
                    changes.failed[op.id] = str(exc)
                log.error("dispatch of %s failed: %s", op.id, exc)
                continue
            future = self._creates.submit(create, op.id, op.cluster, kube, rendered.manifests)
            submitted.append((op, rendered, future))
        sent()
        for op, rendered, future in submitted:
            results = future.result()
            if not results:
                continue
            job = results[0]  # the workload (a Service, if any, comes after it)
            (changes.dispatched if job.created else changes.adopted).append(op.id)
            # No Event for a dispatch (docs/runtime.md, "Events and phase annotations"): the
            # Job carries its queue, config commit and dispatch time, and the Job
            # controller's SuccessfulCreate Event follows; one more POST per operation
            # would say nothing new.
            state = WorkloadState(
                operation=op.id,
                generation=op.generation,
                cluster=op.cluster,
                namespace=op.namespace,
                name=rendered.name,
                uid=job.uid,
                phase=Phase.DISPATCHED,
                queue=op.queue,
                spec_hash=job.annotations.get("reconciler.dev/spec-hash", rendered.spec_hash),
                config_commit=job.annotations.get("reconciler.dev/config-commit"),
                dispatched_at=job.annotations.get("reconciler.dev/dispatched-at"),
                annotated_phase=job.annotations.get(ANNOTATION_PHASE),
                requests=dict(op.requests),
                workflow=job.annotations.get(ANNOTATION_WORKFLOW),
                pods=op.replicas,
                flavor=op.flavor.name if op.flavor is not None else None,
                kind=job.kind,
                timeout=op.timeout,
            )
            # counted from the create response, not the watch
            changes.created.append(InFlight(state, job.resource_version))
            log.info(
                "dispatched %s to %s/%s (%s)",
                op.id,
                op.cluster,
                rendered.name,
                "created" if job.created else "adopted",
            )
        for delete in actions.deletes:
            if not self._is_leader():
                break
            victim = delete.workload
            if victim.cluster in broken:
                continue
            try:
                kube = self._client(compiled.clusters[victim.cluster])
                kube.delete_workload(victim.namespace, victim.name, victim.kind)
            except (KubeError, OSError, KeyError) as exc:
                changes.failed[delete.operation] = str(exc)
                continue
            self._faults.hit("after-stop")
            # a GangTimeout says how many pods ran and whether it is re-queued; a stop in
            # the repo, where and by whom
            gang = delete.reason is StopReason.GANG_TIMEOUT
            in_repo = delete.reason is StopReason.STOPPED_IN_REPO
            message = victim.message if gang or in_repo else str(delete.reason)
            by = self._stopped_by(victim.stopped_by) if in_repo else victim.stopped_by
            if by and by.get("author"):
                message += f"; set by {by['author']} in {str(by['commit'])[:12]}"
            changes.stopped.append(
                replace(victim, phase=Phase.STOPPED, message=message, stopped_by=by)
            )
            log.info("stopped %s: %s", delete.operation, delete.reason)
            # The workload is gone: the Event is what `kubectl get events` keeps of why.
            self._event(
                kube,
                victim.namespace,
                victim.kind,
                victim.name,
                victim.uid,
                str(delete.reason),
                _stop_message(delete.operation, message, gang or in_repo, compiled.version),
                now,
                warning=gang,
            )
        return changes

    def _stopped_by(self, where: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """``where`` (the config commit, the file and line of ``stopped: true``) with the
        commit that last changed that line and its author, when Git can say; else as it
        is (a worktree, or Git failed: the stop goes on without them)."""
        if where is None or self._blame is None or not where.get("line"):
            return where
        try:
            lines = self._blame(str(where["commit"]), str(where["file"]))
        except Exception as exc:  # an adapter boundary: git
            log.warning("blame %s at %s: %s", where["file"], str(where["commit"])[:12], exc)
            return where
        line = int(where["line"])
        if not 0 < line <= len(lines):
            return where
        found = lines[line - 1]
        return {**where, "commit": found.commit, "author": found.author}

    def _event(
        self,
        kube: Kube,
        namespace: str,
        kind: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        now: datetime,
        *,
        warning: bool = False,
    ) -> None:
        api_version = API_VERSIONS.get(kind, "v1")
        involved = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
        event_type = "Warning" if warning else "Normal"

        def emit() -> None:
            try:
                kube.emit_event(
                    namespace, involved, reason, message, event_type=event_type, now=now
                )
            except KubeError as exc:  # events are informative; never fail a dispatch on them
                log.warning("event %s on %s/%s: %s", reason, namespace, name, exc)

        # Off the dispatch path: an Event must never slow or block a dispatch.
        self._events.submit(emit)

    def _annotate(self, compiled: CompiledRepo, decision: Decision) -> None:
        """Write each workload's op phase onto it, off the cycle's path (the decision lists
        only workloads seen in this cycle's listing: a state carried over may have no Job
        any more, and an apply to a missing Job would try to create it).

        The writes go through a small pool: they are informative (``kubectl get jobs``
        shows the phase) and must not hold the next cycle back. With queues at their limit,
        about two writes per Job (Running, then Succeeded) done in the cycle took most of
        its time on a loaded apiserver (docs/benchmarks.md). A phase written or being
        written is not sent again while the watch has not shown it yet; the writes to one
        Job are made in order, the last phase asked for last, so an older phase never
        lands after a newer one. A failed write is forgotten, and the next cycle that
        still lists it sends it again."""
        with self._annotating:
            if self._annotated:  # most cycles ask for none: no set of every uid then
                live = {s.uid for s in decision.states.values()}
                gone = [u for u in self._annotated if u not in live and u not in self._writing]
                for uid in gone:
                    del self._annotated[uid]  # the Job is gone from what we count
        for item in decision.actions.annotations:
            state = item.workload
            try:
                kube = self._client(compiled.clusters[state.cluster])
            except KubeError as exc:
                log.warning("annotating %s: %s", state.operation, exc)
                continue
            with self._annotating:
                asked = self._annotated.get(state.uid)
                if asked is not None and asked.phase is state.phase:
                    continue  # written or being written: the watch has not shown it yet
                self._annotated[state.uid] = state
                if state.uid in self._writing:
                    continue  # the write in progress sends it next
                self._writing.add(state.uid)
            self._writes.submit(self._write_phase, kube, state.uid)

    def _write_phase(self, kube: Kube, uid: str) -> None:
        """Write the phase last asked for onto the workload ``uid``, until none newer is."""
        while True:
            with self._annotating:
                state = self._annotated.get(uid)
                if state is None or not self._is_leader():
                    self._annotated.pop(uid, None)  # a later cycle that leads sends it
                    self._writing.discard(uid)
                    return
            annotations = {ANNOTATION_PHASE: state.phase.value}
            annotations[ANNOTATION_PHASE_REASON] = state.reason.value if state.reason else ""
            try:
                # The phase keys are reserved to the reconciler. The create that set the
                # first value is an Update entry of our manager, which server-side apply
                # counts as another owner: force takes these two keys back, nothing else.
                kube.apply_metadata(
                    state.kind, state.namespace, state.name, annotations=annotations, force=True
                )
            except (KubeError, OSError) as exc:
                log.warning("annotating %s: %s", state.operation, exc)
                with self._annotating:
                    if self._annotated.get(uid) is state:
                        del self._annotated[uid]  # the next cycle that lists it retries
                        self._writing.discard(uid)
                        return
                continue  # a newer phase was asked for meanwhile: write that one
            with self._annotating:
                if self._annotated.get(uid) is state:
                    self._writing.discard(uid)
                    return

    def wait_writes(self, timeout: float) -> bool:
        """Wait until no phase annotation is being written (tests and tools; the loop
        never waits for them). False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._annotating:
                if not self._writing:
                    return True
            time.sleep(0.01)
        return False

    # --- the cycle ---------------------------------------------------------------------

    def run_once(self) -> CycleResult:
        started = time.monotonic()
        result = self._cycle()
        result = replace(
            result, duration=time.monotonic() - started, internal_error=self._internal_error
        )
        self.last = result
        return result

    def run_final(self) -> CycleResult | None:
        """At shutdown, once no cycle runs: the clusters as the watch caches hold them now,
        decided over and nothing carried out (what a Job that ended since the last cycle
        changed). It reads nothing over the network, so it never holds an exit up: the
        config in force, the backends and capacity the last cycle read. None, logged, when
        it cannot say more than the last cycle did: no config, no watch caches, or a
        cluster whose caches are not synced."""
        last = self.last
        compiled = self._last_good
        if compiled is None or last is None or last.decision is None or not self._watch:
            return None
        if self._shards is not None:  # the partitions may have moved: the last cycle's stands
            return None
        started = time.monotonic()
        listing: dict[str, ClusterListing] = {}
        for name in sorted(compiled.clusters):
            caches = self._informers.get(name)
            if caches is None or not all(c.healthy for c in caches):
                log.warning("shutdown: the watch of cluster %s is not synced", name)
                return None
            seen = self._observe_caches(name, caches)
            if seen is None:
                log.warning("shutdown: the watch of cluster %s is listing again", name)
                return None
            states, version = seen
            listing[name] = ClusterListing(
                states,
                version=version,
                capacity=last.decision.capacity.get(name),
                backends=last.decision.backends.get(name, frozenset()),
            )
        now = self._clock.now()
        try:
            decision = decide(compiled, listing, self.memory, now, self._plans)
        except PlanInputError as exc:
            log.warning("shutdown: cannot plan: %s", exc)
            return None
        self.memory = decision.memory
        result = ChangeSet().result(
            replace(last, at=now, version=compiled.version, compiled=decision.compiled),
            decision,
            leading=False,
            attempted=last.attempted_version,
        )
        self.last = replace(result, duration=time.monotonic() - started)
        return self.last

    def _cycle(self) -> CycleResult:
        # the collector held from the config's read until the creates are sent: the
        # collections the compile's and decide's own pauses would end with (what they
        # leave alive, ~30 ms at 100k operations) run after the first create, not before
        with gcpause.Pause() as pause:
            return self._paused_cycle(pause)

    def _paused_cycle(self, pause: gcpause.Pause) -> CycleResult:
        now = self._clock.now()
        compiled, config_errors, sync_error, attempted = self._load()
        if compiled is None:
            return CycleResult(
                at=now,
                version=None,
                compiled=None,
                plan=None,
                states={},
                config_errors=config_errors,
                sync_error=sync_error,
                attempted_version=attempted,
            )
        self._faults.hit("after-load")
        compiled, scope = self._shard(compiled)
        if self._leader_record is not None and not self._is_leader():
            recorded = self._leader_record()
            if recorded is not None:
                self.memory = self.memory.following(recorded)
        listing = self._read(compiled)
        self._faults.hit("after-observe")
        memory, rest = self.memory, None
        if scope is not None:  # the runs of the other partitions are kept, not decided
            memory, rest = memory.split(*_decides(scope))
        try:
            decision = decide(compiled, listing, memory, now, self._plans)
        except PlanInputError as exc:
            log.error("cannot plan: %s", exc)
            return CycleResult(
                now,
                compiled.version,
                compiled,
                None,
                {},
                config_errors,
                str(exc),
                attempted_version=attempted,
            )
        self._faults.hit("after-plan")
        compiled = decision.compiled  # with the runs its schedules make now
        leading = self._is_leader()
        changes = ChangeSet()
        if leading:
            changes = self._apply(compiled, decision.actions, now, sent=pause.resume)
            self._annotate(compiled, decision)
        self.memory = decision.memory.record(changes.created, changes.stopped)
        if rest is not None:
            self.memory = self.memory.beside(rest)
        return changes.result(
            CycleResult(
                now, compiled.version, compiled, None, {}, config_errors, sync_error, shard=scope
            ),
            decision,
            leading=leading,
            attempted=attempted,
        )
