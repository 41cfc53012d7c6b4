"""One reconcile cycle as a pure function: ``decide(compiled, listing, memory, now)``.

What must live here: every rule that turns what was read from the clusters, plus what is
remembered, into the observed state, the plan and the actions of one cycle. The runtime
only reads the clusters, calls :func:`decide`, carries out ``Decision.actions`` and records
their results with :meth:`Memory.record`. Every view (``plan``, ``--live``, ``serve``, the
web pages, ``/api/v1``) calls the same :func:`decide` with the memory it has (the status
branch) and carries out nothing, so it says what the next cycle does.

The rules, in the order :func:`decide` applies them:

1. **listing**: each reachable cluster's workloads; for each operation, the workload of the
   generation the repo asks for (an operation no longer in the repo: its newest one);
2. **in flight**: a create whose response came back but which the cluster's watch cache
   has not shown yet still counts (a lagging watch must never let a quota be over-admitted);
3. **memory** (the last state seen of each operation's current run; a restart or a
   read-only replica starts from the status branch):

   | the operation's cluster | last state seen | now                                   |
   |-------------------------|-----------------|---------------------------------------|
   | unreachable, or no longer in the config | active | that state, reason `ClusterUnreachable` |
   | unreachable, or no longer in the config | finished | that state                    |
   | reachable, not listed   | finished        | that state (e.g. deleted by its TTL)  |
   | reachable, not listed   | active          | `Stopped`: deleted by hand, never re-created |
   | (a generation bump)     | any             | forgotten: the new run is `Queued`    |

4. **superseded** runs (an older generation still active after a bump) keep holding their
   quota under the id ``op@gN`` until they finish, and are never pruned. Memory (the
   status branch) keeps them too: one in a cluster that cannot be read still holds its
   quota, and ``plan`` from the status branch counts them as the cycle does;
5. **plan**: the unreachable clusters are an input of the planner (check 0), never a
   filter applied to its output; so is each cluster's observed free capacity (a fleet
   queue's choice of cluster, check 10: ``ClusterListing.capacity``);
6. **actions**: create what the plan dispatches, stop what it stops (a workload we know),
   and write each listed workload's phase onto it when it changed (not one being stopped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from reconciler.core.capacity import ClusterCapacity
from reconciler.core.observe import ObservedReason, WorkloadState, current_states
from reconciler.core.plan import Plan, StopReason, plan_repo
from reconciler.core.status import CapacityStatus, ClusterStatus, StatusView, recorded_requests
from reconciler.core.types import CompiledOperation, CompiledRepo, Phase

# --- inputs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterListing:
    """What one read of a cluster gave: its managed workloads, or why it could not be read.

    ``version`` is the resourceVersion of the watch cache the workloads came from; None for
    a fresh list (which cannot lag behind our own creates). ``capacity`` is the free
    capacity of its nodes (``core/capacity.py``), read for the clusters of a fleet queue;
    None when it was not read."""

    workloads: tuple[WorkloadState, ...] = ()
    error: str | None = None
    version: str | None = None
    capacity: ClusterCapacity | None = None

    @property
    def reachable(self) -> bool:
        return self.error is None

    @classmethod
    def unreachable(cls, error: str) -> ClusterListing:
        return cls(error=error or "unreachable")


# Per cluster of the config. A cluster missing from the listing was not read: unreachable.
Listing = Mapping[str, ClusterListing]


@dataclass(frozen=True, slots=True)
class InFlight:
    """A workload we created, with the resourceVersion of the create's response."""

    state: WorkloadState
    resource_version: str


@dataclass(frozen=True, slots=True)
class Memory:
    """What a cycle knows that the clusters may not say: the last state seen of each
    operation's current run, creates the watch may not show yet, and the superseded runs
    last seen active (by their planner id ``op@gN``)."""

    seen: Mapping[str, WorkloadState] = field(default_factory=dict)
    inflight: Mapping[str, InFlight] = field(default_factory=dict)
    superseded: Mapping[str, WorkloadState] = field(default_factory=dict)

    def record(
        self, created: Iterable[InFlight] = (), stopped: Iterable[WorkloadState] = ()
    ) -> Memory:
        """This memory with the results of the actions carried out."""
        seen = dict(self.seen)
        inflight = dict(self.inflight)
        for c in created:
            seen[c.state.operation] = c.state
            inflight[c.state.operation] = c
        for s in stopped:
            seen[s.operation] = s
        return Memory(seen, inflight, self.superseded)

    def under(self, recorded: Memory) -> Memory:
        """This memory, with what ``recorded`` (a previous process's) knows and this one
        does not: what this process saw itself wins."""
        return Memory(
            {**recorded.seen, **self.seen},
            self.inflight,
            {**recorded.superseded, **self.superseded},
        )


_RECORDED = frozenset(p for p in Phase if p is not Phase.QUEUED)


def memory_from_status(view: StatusView) -> Memory:
    """The workloads the status branch records (the last state a leader saw of each), so a
    restart or a read-only replica starts from what is known."""
    seen: dict[str, WorkloadState] = {}
    superseded: dict[str, WorkloadState] = {}
    for op_id, rec in view.operations.items():
        for run in rec.superseded:
            old = run.state(op_id)
            if old is not None and old.phase.active:
                superseded[superseded_id(old)] = old
        try:
            phase = Phase(rec.phase)
        except ValueError:
            continue
        if phase not in _RECORDED or rec.children:
            continue
        if not (rec.workload and rec.cluster and rec.namespace):
            continue
        seen[op_id] = WorkloadState(
            operation=op_id,
            generation=rec.generation or 1,
            cluster=rec.cluster,
            namespace=rec.namespace,
            name=rec.workload,
            uid="",
            phase=phase,
            message=rec.message,
            queue=rec.queue,
            spec_hash=rec.spec_hash,
            config_commit=rec.config_commit,
            dispatched_at=rec.dispatched_at,
            started_at=rec.started_at,
            finished_at=rec.finished_at,
            outputs=rec.outputs,
            requests=recorded_requests(rec) or {},
        )
    return Memory(seen, superseded=superseded)


def capacity_from_status(view: StatusView) -> dict[str, ClusterCapacity]:
    """The capacity the status branch recorded per cluster (``status/clusters.yaml``)."""
    return {c.name: c.capacity.value() for c in view.clusters if c.capacity is not None}


def listing_from_memory(
    compiled: CompiledRepo,
    memory: Memory,
    unreachable: Mapping[str, str] | None = None,
    capacity: Mapping[str, ClusterCapacity] | None = None,
) -> dict[str, ClusterListing]:
    """Every cluster as the memory last saw it (``plan`` without ``--live``: the status
    branch stands in for the clusters); ``unreachable`` (cluster -> error) were down at the
    last cycle, and still are as far as this listing knows; ``capacity`` is the free
    capacity the last cycle recorded (``status/clusters.yaml``)."""
    down = unreachable or {}
    recorded = capacity or {}
    by_cluster: dict[str, list[WorkloadState]] = {name: [] for name in compiled.clusters}
    for state in (*memory.seen.values(), *memory.superseded.values()):
        if state.cluster in by_cluster:  # the cycle reads only the config's clusters
            by_cluster[state.cluster].append(state)
    return {
        name: ClusterListing.unreachable(down[name])
        if name in down
        else ClusterListing(
            tuple(sorted(states, key=lambda s: (s.operation, s.generation))),
            capacity=recorded.get(name),
        )
        for name, states in by_cluster.items()
    }


# --- outputs ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    name: str
    reachable: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class Create:
    """Render ``operation`` and create (or adopt) its workload in ``cluster``."""

    operation: CompiledOperation
    cluster: str
    queue: str


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the workload of a stopped operation."""

    operation: str
    workload: WorkloadState
    reason: StopReason


@dataclass(frozen=True, slots=True)
class Annotate:
    """Write the operation's phase (and reason) onto its workload."""

    workload: WorkloadState


@dataclass(frozen=True, slots=True)
class Actions:
    creates: tuple[Create, ...] = ()  # in plan order
    deletes: tuple[Delete, ...] = ()
    annotations: tuple[Annotate, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """Everything one cycle decides. ``states``: per operation, the workload the cycle
    counts (listed, in flight or remembered); ``memory``: the next cycle's, before the
    actions' results are recorded."""

    states: Mapping[str, WorkloadState]
    clusters: tuple[ClusterHealth, ...]
    plan: Plan
    actions: Actions
    memory: Memory
    listed: frozenset[str]  # operations with a workload in this cycle's listing
    # older generations still active after a bump, by their planner id ``op@gN``
    superseded: Mapping[str, WorkloadState] = field(default_factory=dict)
    # the free capacity the plan chose fleet clusters by, per cluster
    capacity: Mapping[str, ClusterCapacity] = field(default_factory=dict)

    def cluster_records(self) -> tuple[ClusterStatus, ...]:
        """``status/clusters.yaml``'s entries: each cluster's health and its capacity."""
        return tuple(
            ClusterStatus(
                name=c.name,
                reachable=c.reachable,
                error=c.error,
                capacity=CapacityStatus.of(self.capacity[c.name])
                if c.name in self.capacity
                else None,
            )
            for c in self.clusters
        )

    @property
    def unreachable(self) -> frozenset[str]:
        return frozenset(c.name for c in self.clusters if not c.reachable)

    @property
    def workloads(self) -> dict[str, WorkloadState]:
        """Every workload the queue views count: ``states`` and the superseded runs (which
        hold quota too, so a queue's usage is never shown without its holders)."""
        return {**self.states, **self.superseded}


# --- the decision -----------------------------------------------------------------------


def decide(compiled: CompiledRepo, listing: Listing, memory: Memory, now: datetime) -> Decision:
    """The observed state, the plan and the actions of one cycle (pure).

    Raises :class:`~reconciler.core.plan.PlanInputError` when the inputs contradict each
    other (the compiler rules that out)."""
    # 1. what each cluster listed
    health = tuple(
        ClusterHealth(name, False, listing[name].error or "")
        if name in listing and not listing[name].reachable
        else ClusterHealth(name, name in listing, "" if name in listing else "not read")
        for name in sorted(compiled.clusters)
    )
    down = frozenset(h.name for h in health if not h.reachable)
    listed = [
        w for name in sorted(listing) if listing[name].reachable for w in listing[name].workloads
    ]
    generations = {op.id: op.generation for op in compiled.operations}
    current = current_states(listed, generations)
    present = frozenset(current)

    # 2. creates the watch has not shown yet
    inflight: dict[str, InFlight] = {}
    for op_id, created in memory.inflight.items():
        cluster = created.state.cluster
        if cluster in down:
            inflight[op_id] = created  # decided when the cluster can be read again
            continue
        version = listing[cluster].version if cluster in listing else None
        if (
            op_id in current
            or version is None
            or _version_at_least(version, created.resource_version)
        ):
            continue  # in the listing, or the listing is past our create
        inflight[op_id] = created
        current[op_id] = created.state

    # 3. what memory knows that the listing does not say
    for op_id, seen in memory.seen.items():
        if op_id in current:
            continue
        wanted = generations.get(op_id)
        if wanted is not None and wanted != seen.generation:
            continue  # a generation bump: a new run, Queued until dispatched
        if seen.cluster in down or seen.cluster not in compiled.clusters:
            if not seen.phase.finished:
                why = "unreachable" if seen.cluster in down else "not in the config"
                seen = replace(
                    seen,
                    reason=ObservedReason.CLUSTER_UNREACHABLE,
                    message=f"cluster {seen.cluster} {why}; last seen {seen.phase}",
                )
            current[op_id] = seen
        elif seen.phase.finished:
            current[op_id] = seen
        else:
            current[op_id] = replace(  # deleted by hand: never recreated
                seen, phase=Phase.STOPPED, reason=None, message="the workload was deleted"
            )

    # 4. older generations still active keep their quota (their own requests; where the
    # workload does not say, the operation's)
    ops = {op.id: op for op in compiled.operations}
    observed = [s.to_observed() for s in current.values()]
    superseded: dict[str, WorkloadState] = {}
    for state in listed:
        wanted = generations.get(state.operation)
        if wanted is not None and state.generation != wanted and state.phase.active:
            superseded[superseded_id(state)] = state
    for old_id, state in memory.superseded.items():  # last seen where nothing can be read
        wanted = generations.get(state.operation)
        if (
            (state.cluster in down or state.cluster not in compiled.clusters)
            and wanted not in (None, state.generation)
            and old_id not in superseded
        ):
            superseded[old_id] = state
    for old_id, state in sorted(superseded.items()):
        old = replace(state.to_observed(), operation=old_id)
        if old.requests is None:
            old = replace(old, requests=dict(ops[state.operation].requests))
        observed.append(old)

    # 5. the plan
    capacity = {
        name: got.capacity
        for name, got in listing.items()
        if got.reachable and got.capacity is not None
    }
    plan = plan_repo(
        compiled, observed, now, superseded=superseded, unreachable=down, capacity=capacity
    )

    # 6. the actions (a fleet queue's operation is rendered for the cluster chosen)
    creates = tuple(
        Create(_on(ops[d.operation], d.cluster), d.cluster, d.queue) for d in plan.dispatch
    )
    deletes = tuple(
        Delete(s.operation, current[s.operation], s.reason)
        for s in plan.stop
        if s.operation in current
    )
    stopping = {d.operation for d in deletes}
    annotations = tuple(
        Annotate(s)
        for s in current.values()
        if s.operation in present
        and s.operation not in stopping
        and s.phase.value != s.annotated_phase
        and s.phase is not Phase.STOPPED
        and s.cluster in compiled.clusters
        and s.cluster not in down
    )
    seen_next = dict(memory.seen)
    for op_id, state in current.items():
        if state.phase is not Phase.QUEUED:
            seen_next[op_id] = state
    return Decision(
        states=current,
        clusters=health,
        plan=plan,
        actions=Actions(creates, deletes, annotations),
        memory=Memory(seen_next, inflight, superseded),
        listed=present,
        superseded=superseded,
        capacity=capacity,
    )


def _on(op: CompiledOperation, cluster: str) -> CompiledOperation:
    return op if op.cluster == cluster else replace(op, cluster=cluster)


def superseded_id(state: WorkloadState) -> str:
    """The planner's id for an older generation of an operation that is still running."""
    return f"{state.operation}@g{state.generation}"


def _version_at_least(seen: str, created: str) -> bool:
    """resourceVersions are opaque, but etcd-backed ones are increasing integers."""
    try:
        return int(seen) >= int(created)
    except ValueError:
        return True  # not comparable: trust the cache rather than hold quota forever
