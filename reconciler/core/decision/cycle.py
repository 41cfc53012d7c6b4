"""One reconcile cycle as a pure function: ``decide(compiled, listing, memory, now)``.

What must live here: every rule that turns what was read from the clusters, plus what is
remembered, into the observed state, the plan and the actions of one cycle. The runtime
only reads the clusters, calls :func:`decide`, carries out ``Decision.actions`` and records
their results with :meth:`Memory.record`. Every view (``plan``, ``--live``, ``serve``, the
web pages, ``/api/v1``) calls the same :func:`decide` with the memory it has (the status
branch) and carries out nothing, so it says what the next cycle does.

The rules, in the order :func:`decide` applies them, each one named pure function (as
kueue's scheduler runs numbered phases, one call each): ``with_ticks`` (0),
``read_listing`` (1),
``hold_inflight`` (2), ``recall_memory`` (3), ``time_out_gangs`` (3b), ``keep_superseded``
(4), ``enter_ledger`` (5), ``plan_inputs`` and ``plan_over`` (6: the planner's inputs are
one :class:`PlanInputs`), ``make_actions`` (7):

0. **schedules**: each scheduled operation's runs at ``now`` join the config's operations,
   derived from the runs known (listed, in flight, remembered, in the ledger) and never
   from a memory of their own (``core/decision/schedule.py``); ``Decision.compiled`` is that config;
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
   | reachable, not listed   | stopped by a `GangTimeout` that re-queues | `Queued` again |

3b. **gang start timeout**: a distributed run (an Indexed Job) of a queue with
   `startTimeout`, not all of whose pods run that long after its dispatch, is deleted
   (reason `GangTimeout`) and re-queued once; the second time it stays `Stopped`. It keeps
   its quota for the cycle that deletes it. The count and the stopped attempt (its
   ``dispatched_at``) are ``Memory.gang_timeouts``, recorded in the status branch;

4. **superseded** runs (an older generation still active after a bump) keep holding their
   quota under the id ``op@gN`` until they finish, and are never pruned. Memory (the
   status branch) keeps them too: one in a cluster that cannot be read still holds its
   quota, and ``plan`` from the status branch counts them as the cycle does;
5. **ledger**: each finished run (listed or remembered, any generation) not yet in the
   memory's ledger is entered once, keyed by operation, generation and workload, costed from
   its Job's own start and end (docs/budgets.md);
6. **plan**: the unreachable clusters, the optional backends each reachable cluster
   serves (``ClusterListing.backends``) and each cluster's observed free capacity (a fleet
   queue's choice of cluster, check 10: ``ClusterListing.capacity``) are inputs of the
   planner, never a filter applied to its output; the ledger is one too (check 11, budgets);
7. **actions**: create what the plan dispatches, stop what it stops (a workload we know),
   and write each listed workload's phase onto it when it changed (not one being stopped).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from reconciler.core import gcpause
from reconciler.core.decision.schedule import known_runs, with_ticks
from reconciler.core.observation.capacity import ClusterCapacity
from reconciler.core.observation.gang import GangTimeout, gang_timeout_message
from reconciler.core.observation.observe import (
    ObservedReason,
    WorkloadState,
    current_states,
    parse_time,
)
from reconciler.core.plan import Plan, StopReason, plan_repo
from reconciler.core.plan.groups import PlanCache, plan_repo_by_groups
from reconciler.core.plan.ledger import (
    Ledger,
    LedgerEntry,
    LedgerKey,
    parse_moment,
    prices_for,
    run_cost,
)
from reconciler.core.reporting.status import (
    CapacityStatus,
    ClusterStatus,
    StatusView,
    recorded_placement,
    recorded_pods,
    recorded_requests,
)
from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    DistributedBackend,
    FlavorSpec,
    ObservedOperation,
    Phase,
)

# --- inputs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterListing:
    """What one read of a cluster gave: its managed workloads, or why it could not be read.

    ``version`` is the resourceVersion of the watch cache the workloads came from; None for
    a fresh list (which cannot lag behind our own creates). ``capacity`` is the free
    capacity of its nodes (``core/observation/capacity.py``), read for the clusters of a fleet
    queue; None when it was not read."""

    workloads: tuple[WorkloadState, ...] = ()
    error: str | None = None
    version: str | None = None
    capacity: ClusterCapacity | None = None
    # the optional backends (``run.distributed.backend``) whose API the cluster serves,
    # e.g. ``pytorchjob`` when the Kubeflow Training Operator's CRD is installed
    backends: frozenset[str] = frozenset()

    @property
    def reachable(self) -> bool:
        return self.error is None

    @classmethod
    def unreachable(cls, error: str) -> ClusterListing:
        return cls(error=error or "unreachable")


def wanted_backends(compiled: CompiledRepo) -> dict[str, frozenset[str]]:
    """Per cluster, the optional backends (``run.distributed.backend`` other than ``job``)
    its operations use (a schedule's runs: its templates'): what a read must ask the cluster
    whether it serves."""
    out: dict[str, set[str]] = {}
    for op in (*compiled.operations, *compiled.schedules):
        dist = op.distributed
        if dist is not None and dist.backend is not DistributedBackend.JOB:
            queue = compiled.queues.get(op.queue)
            # a fleet queue's operation may go to any of its clusters (check 10)
            for name in queue.members if queue is not None else (op.cluster,):
                out.setdefault(name, set()).add(str(dist.backend))
    return {name: frozenset(b) for name, b in out.items()}


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
    operation's current run, creates the watch may not show yet, the superseded runs
    last seen active (by their planner id ``op@gN``), and the ledger of finished runs
    (what budgets have spent; the status branch's ``status/ledger/``)."""

    seen: Mapping[str, WorkloadState] = field(default_factory=dict)
    inflight: Mapping[str, InFlight] = field(default_factory=dict)
    superseded: Mapping[str, WorkloadState] = field(default_factory=dict)
    # distributed operations stopped by their queue's startTimeout (rule 3b)
    gang_timeouts: Mapping[str, GangTimeout] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)

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
        return Memory(seen, inflight, self.superseded, self.gang_timeouts, self.ledger)

    def split(
        self,
        clusters: Collection[str],
        operations: Collection[str] = (),
        known: Collection[str] = (),
    ) -> tuple[Memory, Memory]:
        """(what is of the runs a shard decides, what is of the others'): a shard decides
        over the first, and keeps the second for the partitions it may take later. A run
        is the shard's when its operation is one of ``operations``, or, its operation not
        ``known`` (gone from the repo), when it is on one of ``clusters``: a run that ended
        in the old cluster of a queue moved goes with its operation. The ledger and the
        gang timeouts (keyed by operation) are in both."""

        def mine(state: WorkloadState) -> bool:
            if state.operation in operations:
                return True
            return state.operation not in known and state.cluster in clusters

        def on(states: Mapping[str, WorkloadState], inside: bool) -> dict[str, WorkloadState]:
            return {k: v for k, v in states.items() if mine(v) is inside}

        flights = {k: v for k, v in self.inflight.items() if mine(v.state)}
        rest = {k: v for k, v in self.inflight.items() if k not in flights}
        marks, ledger = self.gang_timeouts, self.ledger
        return (
            Memory(on(self.seen, True), flights, on(self.superseded, True), marks, ledger),
            Memory(on(self.seen, False), rest, on(self.superseded, False), marks, ledger),
        )

    def beside(self, rest: Memory) -> Memory:
        """This memory (a shard's cycle's) with ``rest`` (``split``'s second) kept."""
        return Memory(
            {**rest.seen, **self.seen},
            {**rest.inflight, **self.inflight},
            {**rest.superseded, **self.superseded},
            {**rest.gang_timeouts, **self.gang_timeouts},
            self.ledger,
        )

    def under(self, recorded: Memory) -> Memory:
        """This memory, with what ``recorded`` (a previous process's) knows and this one
        does not: what this process saw itself wins; the ledgers are joined."""
        return Memory(
            {**recorded.seen, **self.seen},
            self.inflight,
            {**recorded.superseded, **self.superseded},
            {**recorded.gang_timeouts, **self.gang_timeouts},
            recorded.ledger.with_entries(self.ledger),
        )

    def following(self, recorded: Memory) -> Memory:
        """A follower's memory (``serve``, a standby replica) joined with the leader's newer
        record: as ``under``, and a run this process last saw active that the record has
        seen end takes the record's state. The follower may not have seen it end: cut off
        from its cluster, it finds the Job gone (deleted by its ``run.ttl``), which alone
        would read as deleted by hand."""
        seen = {**recorded.seen, **self.seen}
        for op_id, theirs in recorded.seen.items():
            ours = self.seen.get(op_id)
            ended = ours is not None and ours.phase.active and theirs.phase.finished
            if ended and ours is not None and _same_run(ours, theirs):
                seen[op_id] = theirs
        return replace(self.under(recorded), seen=seen)


def _same_run(a: WorkloadState, b: WorkloadState) -> bool:
    """The same workload: its name where it runs, and its uid where both know it."""
    where = (a.cluster, a.namespace, a.name) == (b.cluster, b.namespace, b.name)
    return where and (not a.uid or not b.uid or a.uid == b.uid)


_RECORDED = frozenset(p for p in Phase if p is not Phase.QUEUED)
_READ_BACK = {r.value: r for r in (ObservedReason.GANG_TIMEOUT, ObservedReason.STOPPED_IN_REPO)}


def memory_from_status(view: StatusView) -> Memory:
    """The workloads the status branch records (the last state a leader saw of each), so a
    restart or a read-only replica starts from what is known."""
    seen: dict[str, WorkloadState] = {}
    superseded: dict[str, WorkloadState] = {}
    timeouts: dict[str, GangTimeout] = {}
    for op_id, rec in view.operations.items():
        for run in rec.superseded:
            old = run.state(op_id)
            if old is not None and old.phase.active:
                superseded[superseded_id(old)] = old
        if rec.gang_timeouts is not None:
            mark = GangTimeout.from_json(rec.gang_timeouts, rec.generation or 1)
            if mark is not None:
                timeouts[op_id] = mark
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
            outputs_path=rec.outputs_path,
            requests=recorded_requests(rec) or {},
            pods=recorded_pods(rec),
            flavor=rec.flavor,
            timeout=rec.timeout if rec.timeout is not None and rec.timeout > 0 else None,
            gang=recorded_placement(rec),
            kind=rec.workload_kind or "Job",
            # the workload reasons rules read back (3, 3b); the others are re-derived
            reason=_READ_BACK.get(rec.reason or ""),
            stopped_by=rec.stopped_by,
        )
    return Memory(
        seen,
        superseded=superseded,
        gang_timeouts=timeouts,
        ledger=Ledger.of(view.ledger, view.ledger_problems),
    )


def capacity_from_status(view: StatusView) -> dict[str, ClusterCapacity]:
    """The capacity the status branch recorded per cluster (``status/clusters.yaml``)."""
    return {c.name: c.capacity.value() for c in view.clusters if c.capacity is not None}


def listing_from_memory(
    compiled: CompiledRepo,
    memory: Memory,
    unreachable: Mapping[str, str] | None = None,
    backends: Mapping[str, frozenset[str]] | None = None,
    capacity: Mapping[str, ClusterCapacity] | None = None,
) -> dict[str, ClusterListing]:
    """Every cluster as the memory last saw it (``plan`` without ``--live``: the status
    branch stands in for the clusters); ``unreachable`` (cluster -> error) were down at the
    last cycle, and still are as far as this listing knows; ``capacity`` is the free
    capacity the last cycle recorded and ``backends`` (cluster -> the optional backends it
    served) the backends it saw (``status/clusters.yaml``)."""
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
            backends=(backends or {}).get(name, frozenset()),
        )
        for name, states in by_cluster.items()
    }


def listing_from_status(compiled: CompiledRepo, view: StatusView | None, memory: Memory) -> Listing:
    """Every cluster as the status branch ``view`` last recorded it (``memory`` is
    ``memory_from_status(view)``): its workloads, the clusters its last cycle could not
    read, the backends each served and the free capacity each had (a fleet queue's choice
    of cluster). Every view without ``--live`` (``plan``, ``status``, ``queues``) decides
    over this one listing."""
    if view is None:
        return listing_from_memory(compiled, memory)
    return listing_from_memory(
        compiled,
        memory,
        {c.name: c.error for c in view.clusters if not c.reachable},
        {c.name: frozenset(c.backends) for c in view.clusters},
        capacity_from_status(view),
    )


def decide_recorded(compiled: CompiledRepo, view: StatusView | None, now: datetime) -> Decision:
    """The next cycle's decision if the clusters are as the status branch ``view`` last
    recorded them, with that branch as memory (no branch: nothing dispatched yet)."""
    memory = Memory() if view is None else memory_from_status(view)
    return decide(compiled, listing_from_status(compiled, view, memory), memory, now)


# --- outputs ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    name: str
    reachable: bool
    error: str = ""
    backends: frozenset[str] = frozenset()  # the optional backends it serves (as read)


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


def phase_annotation_due(state: WorkloadState) -> bool:
    """Whether the workload's op phase is written onto it now (docs/runtime.md, "The phase
    annotations"): only what the workload's own status does not say, and never an annotation
    left to lie. Each write is an apply the apiserver stores and sends to every watcher, so
    the common path of a run (created, Running, Succeeded) costs one, at its end:

    - the run has ended (``Succeeded``, ``Failed``): the final word stays on the workload;
    - it waits for room (``Dispatched``, ``WaitingForCapacity``): the Job says only that it
      is active;
    - an annotation already on it says another phase (written earlier in the run, or at
      create by a version that wrote ``Dispatched`` then): it is brought up to date.

    While the run is in flight with nothing written yet (``Dispatched`` waiting for its
    pod, ``Running``), nothing is written: ``kubectl get jobs`` shows the Job's status, and
    ``reconciler status`` the phase. A ``Stopped`` workload is being deleted."""
    if state.phase is Phase.STOPPED or state.phase.value == state.annotated_phase:
        return False
    return (
        state.phase.finished
        or state.reason is ObservedReason.WAITING_FOR_CAPACITY
        or state.annotated_phase is not None
    )


@dataclass(frozen=True, slots=True)
class Actions:
    creates: tuple[Create, ...] = ()  # in plan order
    deletes: tuple[Delete, ...] = ()
    annotations: tuple[Annotate, ...] = ()


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """Everything the planner is given besides the config and the time: the workloads it
    counts (``observed``: each operation's current run, and each superseded run under its
    id ``op@gN``), the superseded runs, the clusters it cannot read, the free capacity and
    the optional backends of those it can, and the ledger (budgets)."""

    observed: tuple[ObservedOperation, ...] = ()
    superseded: Mapping[str, WorkloadState] = field(default_factory=dict)
    unreachable: frozenset[str] = frozenset()
    capacity: Mapping[str, ClusterCapacity] = field(default_factory=dict)
    backends: Mapping[str, frozenset[str]] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)


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
    # what was decided over: the config with the runs its schedules make now (rule 0)
    compiled: CompiledRepo
    inputs: PlanInputs = field(default_factory=lambda: PlanInputs())  # what was planned over

    @property
    def superseded(self) -> Mapping[str, WorkloadState]:
        """Older generations still active after a bump, by their planner id ``op@gN``."""
        return self.inputs.superseded

    @property
    def observed(self) -> tuple[ObservedOperation, ...]:
        """The planner's observed input, as given to it (the estimate replans from it)."""
        return self.inputs.observed

    @property
    def backends(self) -> Mapping[str, frozenset[str]]:
        """Per reachable cluster, the optional backends it serves (check 0's input)."""
        return self.inputs.backends

    @property
    def capacity(self) -> Mapping[str, ClusterCapacity]:
        """The free capacity the plan chose fleet clusters by, per cluster."""
        return self.inputs.capacity

    def cluster_records(self) -> tuple[ClusterStatus, ...]:
        """``status/clusters.yaml``'s entries: each cluster's health and its capacity."""
        return tuple(
            ClusterStatus(
                name=c.name,
                reachable=c.reachable,
                error=c.error,
                backends=tuple(sorted(c.backends)),
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


def decide(
    compiled: CompiledRepo,
    listing: Listing,
    memory: Memory,
    now: datetime,
    plans: PlanCache | None = None,
) -> Decision:
    """The observed state, the plan and the actions of one cycle (pure), in the order of
    the rules above, one named phase each. With ``plans`` (kept by the caller from cycle
    to cycle), the queues whose inputs did not change keep their part of the last plan
    (``core/plan/groups.py``): the same plan.

    Raises :class:`~reconciler.core.plan.PlanInputError` when the inputs contradict each
    other (the compiler rules that out).

    The cyclic collector is paused for the call, as for the compile (``gcpause.py``): a
    collection of the young objects of a big repo's cycle (its compiled operations, plan,
    listing) that starts in a step here costs tens of milliseconds on the way to the
    cycle's first create; after it, it costs no one a wait."""
    with gcpause.paused():
        return _decide(compiled, listing, memory, now, plans)


def _decide(
    compiled: CompiledRepo,
    listing: Listing,
    memory: Memory,
    now: datetime,
    plans: PlanCache | None,
) -> Decision:
    compiled = with_ticks(compiled, runs_known(compiled, listing, memory), now)  # 0
    seen = read_listing(compiled, listing)  # 1
    current, inflight = hold_inflight(seen, listing, memory)  # 2
    marks = gang_marks(seen, memory)
    current = recall_memory(compiled, seen, memory, marks, current)  # 3
    current, marks, gang_deletes = time_out_gangs(compiled, seen, marks, current, now)  # 3b
    superseded = keep_superseded(compiled, seen, memory, current)  # 4
    ledger = enter_ledger(compiled, seen, memory, current, gang_deletes, now)  # 5
    inputs = plan_inputs(compiled, seen, listing, current, superseded, ledger)  # 6
    plan = plan_over(compiled, inputs, now, plans)
    current = mark_stopped(compiled, seen, plan, current)  # 7
    actions = make_actions(compiled, seen, plan, current, gang_deletes)
    return Decision(
        states=current,
        clusters=seen.health,
        plan=plan,
        actions=actions,
        memory=Memory(remembered(memory, current), inflight, superseded, marks, ledger),
        listed=seen.present,
        compiled=compiled,
        inputs=inputs,
    )


def runs_known(compiled: CompiledRepo, listing: Listing, memory: Memory) -> dict[str, bool]:
    """Rule 0's input: each operation with a run known, and whether one is active: as the
    listing says, else as a create in flight or memory does, else finished (in the ledger).
    Only read when the config has schedules."""
    if not compiled.schedules:
        return {}
    out = {e.operation: False for e in memory.ledger}
    out.update((op_id, s.phase.active) for op_id, s in memory.seen.items())
    out.update((op_id, c.state.phase.active) for op_id, c in memory.inflight.items())
    listed = (w for got in listing.values() if got.reachable for w in got.workloads)
    out.update(known_runs((w.operation, w.phase.active) for w in listed))
    return out


@dataclass(frozen=True, slots=True)
class Listed:
    """What the listing says (rule 1): each cluster's health, those that cannot be read,
    every workload listed, the generation the repo asks of each operation, and per
    operation the workload of that generation (``present``: the operations listed)."""

    health: tuple[ClusterHealth, ...]
    down: frozenset[str]
    workloads: tuple[WorkloadState, ...]
    generations: Mapping[str, int]
    current: Mapping[str, WorkloadState]
    present: frozenset[str]
    ops: Mapping[str, CompiledOperation]


def read_listing(compiled: CompiledRepo, listing: Listing) -> Listed:
    """Rule 1: each cluster's health, and each operation's workload of the generation the
    repo asks for (an operation no longer in the repo: its newest)."""
    health = tuple(
        ClusterHealth(name, False, listing[name].error or "")
        if name in listing and not listing[name].reachable
        else ClusterHealth(
            name,
            name in listing,
            "" if name in listing else "not read",
            listing[name].backends if name in listing else frozenset(),
        )
        for name in sorted(compiled.clusters)
    )
    listed = tuple(
        w for name in sorted(listing) if listing[name].reachable for w in listing[name].workloads
    )
    current = current_states(listed, compiled.generations)
    return Listed(
        health=health,
        down=frozenset(h.name for h in health if not h.reachable),
        workloads=listed,
        generations=compiled.generations,
        current=current,
        present=frozenset(current),
        ops=compiled.by_id,
    )


def hold_inflight(
    seen: Listed, listing: Listing, memory: Memory
) -> tuple[dict[str, WorkloadState], dict[str, InFlight]]:
    """Rule 2: a create the watch has not shown yet still counts, until the listing's
    resourceVersion is past the create's (one in a cluster that cannot be read waits for
    it). The states with them, and the creates still in flight."""
    current = dict(seen.current)
    inflight: dict[str, InFlight] = {}
    for op_id, created in memory.inflight.items():
        cluster = created.state.cluster
        if cluster in seen.down:
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
    return current, inflight


def gang_marks(seen: Listed, memory: Memory) -> dict[str, GangTimeout]:
    """The gang timeouts remembered of each operation's current generation (a bump starts
    the count again)."""
    return {
        op_id: mark
        for op_id, mark in memory.gang_timeouts.items()
        if seen.generations.get(op_id) == mark.generation
    }


def recall_memory(
    compiled: CompiledRepo,
    seen: Listed,
    memory: Memory,
    marks: Mapping[str, GangTimeout],
    current: Mapping[str, WorkloadState],
) -> dict[str, WorkloadState]:
    """Rule 3: what memory knows of each operation the listing does not say."""
    out = dict(current)
    for op_id, last in memory.seen.items():
        if op_id in out:
            continue
        wanted = seen.generations.get(op_id)
        if wanted is not None and wanted != last.generation:
            continue  # a generation bump: a new run, Queued until dispatched
        state = _recalled(compiled, seen.down, marks.get(op_id), last, seen.ops)
        if state is not None:
            out[op_id] = state
    return keep_stop_records(compiled, memory, out)


def keep_stop_records(
    compiled: CompiledRepo, memory: Memory, current: dict[str, WorkloadState]
) -> dict[str, WorkloadState]:
    """(3, continued) A run stopped in the repo whose Job is still being deleted (listed,
    Stopped) keeps the reason, message and ``stoppedBy`` its stop recorded."""
    for op_id in compiled.stopped_ids:
        state, prior = current.get(op_id), memory.seen.get(op_id)
        if (
            state is not None
            and prior is not None
            and state is not prior
            and prior.reason is ObservedReason.STOPPED_IN_REPO
            and state.reason is not ObservedReason.STOPPED_IN_REPO
            and state.phase is Phase.STOPPED
            and state.generation == prior.generation
        ):
            current[op_id] = replace(
                state,
                reason=ObservedReason.STOPPED_IN_REPO,
                message=prior.message,
                stopped_by=prior.stopped_by,
            )
    return current


def mark_stopped(
    compiled: CompiledRepo, seen: Listed, plan: Plan, current: Mapping[str, WorkloadState]
) -> dict[str, WorkloadState]:
    """(7) A run the plan stops because the repo says ``stopped: true`` says so, and where."""
    out = dict(current)
    for s in plan.stop:
        if s.reason is StopReason.STOPPED_IN_REPO and s.operation in out:
            state = out[s.operation]
            op = seen.ops[s.operation]
            if state.reason is not ObservedReason.STOPPED_IN_REPO:
                out[s.operation] = replace(
                    state,
                    reason=ObservedReason.STOPPED_IN_REPO,
                    message=stopped_message(op, compiled.version),
                    stopped_by=stopped_by(op, compiled.version),
                )
    return out


def _recalled(
    compiled: CompiledRepo,
    down: frozenset[str],
    mark: GangTimeout | None,
    last: WorkloadState,
    seen_ops: Mapping[str, CompiledOperation],
) -> WorkloadState | None:
    """One remembered run the listing does not show, as this cycle counts it (rule 3's
    table); None: it is Queued again (a gang stopped by its GangTimeout, and gone)."""
    reachable = last.cluster not in down
    if mark is not None and mark.dispatched_at == last.dispatched_at:
        if mark.requeue and reachable:
            return None  # stopped by a GangTimeout and gone: Queued again (3b)
        message = last.message if last.reason is ObservedReason.GANG_TIMEOUT else ""
        return replace(
            last,
            phase=Phase.STOPPED if reachable else last.phase,
            reason=ObservedReason.GANG_TIMEOUT,
            message=message or mark.message(),
        )
    if not reachable or last.cluster not in compiled.clusters:
        if last.phase.finished:
            return last
        why = "unreachable" if not reachable else "not in the config"
        return replace(
            last,
            reason=ObservedReason.CLUSTER_UNREACHABLE,
            message=f"cluster {last.cluster} {why}; last seen {last.phase}",
        )
    if last.phase.finished:
        return last
    op = seen_ops.get(last.operation)
    if last.reason is ObservedReason.STOPPED_IN_REPO or (op is not None and op.stopped):
        # its delete was carried out (or done by hand): stopped, as the repo asks
        return replace(
            last,
            phase=Phase.STOPPED,
            reason=ObservedReason.STOPPED_IN_REPO,
            message=last.message
            if last.reason is ObservedReason.STOPPED_IN_REPO or op is None
            else stopped_message(op, compiled.version),
            stopped_by=last.stopped_by
            or (stopped_by(op, compiled.version) if op is not None else None),
        )
    # deleted by hand: never recreated
    return replace(last, phase=Phase.STOPPED, reason=None, message="the workload was deleted")


def time_out_gangs(
    compiled: CompiledRepo,
    seen: Listed,
    marks: Mapping[str, GangTimeout],
    current: Mapping[str, WorkloadState],
    now: datetime,
) -> tuple[dict[str, WorkloadState], dict[str, GangTimeout], list[Delete]]:
    """Rule 3b: a listed gang not all running within its queue's ``startTimeout`` of its
    dispatch is stopped (re-queued once); it keeps its quota this cycle. The states, the
    marks and the deletes."""
    out = dict(current)
    marks_next = dict(marks)
    deletes: list[Delete] = []
    for op_id, state in sorted(current.items()):
        if op_id not in seen.present:
            continue
        mark = marks_next.get(op_id)
        if mark is not None and mark.dispatched_at == state.dispatched_at:
            # this attempt was stopped already: its delete is under way, or was lost
            out[op_id] = replace(state, reason=ObservedReason.GANG_TIMEOUT, message=mark.message())
            if state.phase.active:
                deletes.append(Delete(op_id, out[op_id], StopReason.GANG_TIMEOUT))
            continue
        if state.gang is None or not state.phase.active:
            continue
        limit = _start_timeout(compiled, seen.ops.get(op_id))
        if limit is None or not _gang_timed_out(state, limit, now):
            continue
        mark = GangTimeout(state.generation, (mark.count if mark else 0) + 1, state.dispatched_at)
        marks_next[op_id] = mark
        message = gang_timeout_message(state.gang, limit, mark.requeue)
        # it keeps its quota this cycle: its pods are still there until the delete
        out[op_id] = replace(state, reason=ObservedReason.GANG_TIMEOUT, message=message)
        deletes.append(Delete(op_id, out[op_id], StopReason.GANG_TIMEOUT))
    return out, marks_next, deletes


def _start_timeout(compiled: CompiledRepo, op: CompiledOperation | None) -> int | None:
    queue = compiled.queues.get(op.queue) if op is not None else None
    return queue.start_timeout if queue is not None else None


def _gang_timed_out(state: WorkloadState, limit: int, now: datetime) -> bool:
    """A gang still Dispatched ``limit`` seconds after its dispatch."""
    started = parse_time(state.dispatched_at)
    return (
        state.phase is Phase.DISPATCHED
        and started is not None
        and (now - started).total_seconds() >= limit
    )


def keep_superseded(
    compiled: CompiledRepo,
    seen: Listed,
    memory: Memory,
    current: Mapping[str, WorkloadState],
) -> dict[str, WorkloadState]:
    """Rule 4: older generations still active keep their quota, by their id ``op@gN``:
    those listed, and those last seen where nothing can be read now (``_older``: of an
    operation whose file is gone too, older than its newest run)."""
    out: dict[str, WorkloadState] = {}
    for state in seen.workloads:
        if state.phase.active and _older(state, seen.generations, current):
            out[superseded_id(state)] = state
    for old_id, state in memory.superseded.items():
        if (
            (state.cluster in seen.down or state.cluster not in compiled.clusters)
            and _older(state, seen.generations, current)
            and old_id not in out
        ):
            out[old_id] = state
    return out


def enter_ledger(
    compiled: CompiledRepo,
    seen: Listed,
    memory: Memory,
    current: Mapping[str, WorkloadState],
    gang_deletes: Iterable[Delete],
    now: datetime,
) -> Ledger:
    """Rule 5: every finished run not entered yet (a superseded generation's too), and each
    gang this cycle stops, enters the ledger once."""
    return memory.ledger.with_entries(
        finished_runs(
            compiled,
            (*current.values(), *seen.workloads),
            memory.ledger,
            now,
            stopped=[d.workload for d in gang_deletes],
        )
    )


def plan_inputs(
    compiled: CompiledRepo,
    seen: Listed,
    listing: Listing,
    current: Mapping[str, WorkloadState],
    superseded: Mapping[str, WorkloadState],
    ledger: Ledger,
) -> PlanInputs:
    """Rule 6's inputs: the current runs and the superseded ones (with their own requests
    and replicas; where the workload does not say, the operation's), the clusters that
    cannot be read, the capacity and backends of those that can, the ledger."""
    observed = [s.to_observed() for s in current.values()]
    for old_id, state in sorted(superseded.items()):
        old = replace(state.to_observed(), operation=old_id)
        known = seen.ops.get(state.operation)  # None: its file is gone, and it still runs
        if old.requests is None:
            old = replace(old, requests=dict(known.requests) if known is not None else {})
        if old.pods is None:  # every replica of the old run holds its pod
            old = replace(old, pods=known.replicas if known is not None else 1)
        observed.append(old)
    reachable = {name: got for name, got in listing.items() if got.reachable}
    return PlanInputs(
        observed=tuple(observed),
        superseded=superseded,
        unreachable=seen.down,
        capacity={n: got.capacity for n, got in reachable.items() if got.capacity is not None},
        backends={n: got.backends for n, got in reachable.items()},
        ledger=ledger,
    )


def plan_over(
    compiled: CompiledRepo, inputs: PlanInputs, now: datetime, plans: PlanCache | None = None
) -> Plan:
    """Rule 6: the plan. Every input is the planner's; no output is filtered after it.
    With ``plans`` (the caller's, kept between cycles), the same plan by groups."""
    planner = plan_repo if plans is None else partial(plan_repo_by_groups, plans)
    return planner(
        compiled,
        inputs.observed,
        now,
        superseded=inputs.superseded,
        unreachable=inputs.unreachable,
        capacity=inputs.capacity,
        backends=inputs.backends,
        ledger=inputs.ledger,
    )


def make_actions(
    compiled: CompiledRepo,
    seen: Listed,
    plan: Plan,
    current: Mapping[str, WorkloadState],
    gang_deletes: Iterable[Delete],
) -> Actions:
    """Rule 7: create what the plan dispatches (a fleet queue's operation rendered for the
    cluster chosen, a flavored queue's with the flavor assigned), delete what it stops and
    the gangs timed out, and write each listed workload's phase when due."""
    creates = tuple(
        Create(
            _on(seen.ops[d.operation], d.cluster, compiled.flavors.get(d.flavor or "")),
            d.cluster,
            d.queue,
        )
        for d in plan.dispatch
    )
    stopped = {s.operation for s in plan.stop}
    deletes = tuple(
        Delete(s.operation, current[s.operation], s.reason)
        for s in plan.stop
        if s.operation in current
    ) + tuple(d for d in gang_deletes if d.operation not in stopped)
    stopping = {d.operation for d in deletes}
    annotations = tuple(
        Annotate(s)
        for s in current.values()
        if s.operation in seen.present
        and s.operation not in stopping
        and phase_annotation_due(s)
        and s.cluster in compiled.clusters
        and s.cluster not in seen.down
    )
    return Actions(creates, deletes, annotations)


def remembered(memory: Memory, current: Mapping[str, WorkloadState]) -> dict[str, WorkloadState]:
    """The next cycle's last state seen of each run: every one this cycle counts that is
    not Queued, over what was remembered."""
    out = dict(memory.seen)
    for op_id, state in current.items():
        if state.phase is not Phase.QUEUED:
            out[op_id] = state
    return out


def stopped_by(op: CompiledOperation, version: str) -> dict[str, Any]:
    """Where ``stopped: true`` is set (a workflow child: in its parent's file) and the config
    commit in force; the runtime puts the commit that last changed that line, and its
    author, in their place when Git can say (``git blame``)."""
    where = op.provenance.get("stopped")
    return {
        "commit": version,
        "author": "",
        "file": where.file if where is not None else op.path,
        "line": where.line if where is not None else 0,
    }


def stopped_message(op: CompiledOperation, version: str) -> str:
    """A run stopped in the repo: why, and at which line and commit."""
    where = op.provenance.get("stopped")
    at = f" at {where.file}:{where.line}" if where is not None else ""
    return f"stopped: true{at} (config {version[:12]}): its workload is deleted"


def _on(op: CompiledOperation, cluster: str, flavor: FlavorSpec | None) -> CompiledOperation:
    if flavor is not None:
        return replace(op, cluster=cluster, flavor=flavor)
    return op if op.cluster == cluster else replace(op, cluster=cluster)


def finished_runs(
    compiled: CompiledRepo,
    states: Iterable[WorkloadState],
    ledger: Ledger,
    now: datetime,
    *,
    stopped: Iterable[WorkloadState] = (),
) -> list[LedgerEntry]:
    """A ledger entry for each finished run of ``states`` the ledger does not hold yet, and
    for each run of ``stopped`` (gangs this cycle deletes, ``GangTimeout``: still active
    until the delete, charged for what they held, their Job's start to now).

    Its start and end are its Job's own (``startTime``, completion or failure time), so a
    run that ended while no reconciler was running is costed by when it ran. Without a
    start: its dispatch time; without an end (a Job deleted before it was seen to finish):
    ``now``, when it was noticed. Its cost is its requests (the workload's, else the
    operation's) times the prices of its cluster now."""
    ops = None
    out: list[LedgerEntry] = []
    for state in (*states, *stopped):
        if not state.phase.finished and state.reason is not ObservedReason.GANG_TIMEOUT:
            continue
        key = LedgerKey(state.operation, state.generation, ledger_workload(state))
        if key in ledger:
            continue
        if ops is None:
            ops = {op.id: op for op in compiled.operations}
        op = ops.get(state.operation)
        end = parse_moment(state.finished_at) or now
        start = parse_moment(state.started_at) or parse_moment(state.dispatched_at) or end
        start = min(start, end)
        requests = dict(state.requests) if state.requests else dict(op.requests if op else {})
        cluster = compiled.clusters.get(state.cluster)
        prices = prices_for(
            compiled.org.prices,
            cluster.prices if cluster is not None else {},
            state.flavor,
            compiled.org.flavor_prices,
            cluster.flavor_prices if cluster is not None else {},
        )
        out.append(
            LedgerEntry(
                operation=state.operation,
                generation=state.generation,
                workload=key.workload,
                queue=state.queue or (op.queue if op else ""),
                cluster=state.cluster,
                phase=str(Phase.STOPPED if state.phase.active else state.phase),
                requests=requests,
                start=start,
                end=end,
                cost=run_cost(requests, prices, start, end),
                currency=compiled.org.currency,
                flavor=state.flavor or "",
            )
        )
    return out


def ledger_workload(state: WorkloadState) -> str:
    """The workload a run is entered under: its name; for an attempt of a gang stopped by
    ``GangTimeout``, its name and dispatch time (a re-queued gang runs again under the same
    name: each attempt is its own run, entered once)."""
    if state.reason is ObservedReason.GANG_TIMEOUT:
        return f"{state.name}@{state.dispatched_at}"
    return state.name


def _older(
    state: WorkloadState, generations: Mapping[str, int], current: Mapping[str, WorkloadState]
) -> bool:
    """A run of an older generation than its operation's current one: the repo's, or, for
    an operation no longer in the repo, its newest run's (both still run and hold)."""
    wanted = generations.get(state.operation)
    if wanted is None:
        newest = current.get(state.operation)
        wanted = newest.generation if newest is not None else None
    return wanted is not None and state.generation != wanted


def superseded_id(state: WorkloadState) -> str:
    """The planner's id for an older generation of an operation that is still running."""
    return f"{state.operation}@g{state.generation}"


def _version_at_least(seen: str, created: str) -> bool:
    """resourceVersions are opaque, but etcd-backed ones are increasing integers."""
    try:
        return int(seen) >= int(created)
    except ValueError:
        return True  # not comparable: trust the cache rather than hold quota forever
