"""Check 10: a fleet queue's choice of cluster (docs/dispatch.md, "Fleet queues").

What must live here: the planner-private state of the fleet queues while one plan is made
(each cluster's free capacity per node, in units, decremented as operations are chosen;
each fleet queue's usage per cluster), the choice rule, and the fleet slices of the queue
summaries. The admission loop (``planner.admit``) calls :meth:`FleetState.choose` for a
fleet queue's candidate that passed checks 0..8, and :meth:`FleetState.take` when it is
dispatched.

The rule: in the queue's listed order, skip a cluster that could not be read, is at its
``concurrency`` or would go over the queue's ``clusterQuota`` for it; of the others (under
quota), choose the first whose free capacity (``core/observation/capacity.py``: the nodes the
operation may use) fits every resource of the whole request. When none fits, the first
under quota is chosen (kube-scheduler then keeps its pods Pending, ``WaitingForCapacity``),
unless the queue sets ``requireCapacity``: then it waits, ``NoClusterHasCapacity``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from decimal import Decimal
from typing import NamedTuple

from reconciler.core.observation.capacity import ClusterCapacity, Placement, placement_of
from reconciler.core.plan.flavors import FlavorSlots, flavored_placement
from reconciler.core.plan.model import (
    FleetMember,
    FleetSlice,
    MemberState,
    PendingReason,
)
from reconciler.core.plan.state import Counters, QueueState
from reconciler.core.plan.units import quota_units, request_units, to_decimal
from reconciler.core.types import (
    CompiledOperation,
    DistributedBackend,
    ObservedOperation,
    QueueSpec,
)


class Choice(NamedTuple):
    """What check 10 decided: ``cluster`` chosen, or None with why (``reason``) and how
    each cluster stood (``members``)."""

    cluster: str | None
    reason: PendingReason | None = None
    members: tuple[FleetMember, ...] = ()


class _Cluster:
    """One observed cluster while planning: its nodes' free units, the reserved units."""

    __slots__ = ("capacity", "free", "matching", "reserved")

    def __init__(self, capacity: ClusterCapacity) -> None:
        self.capacity = capacity
        self.free: list[dict[str, int]] = [
            {
                r: max(0, quota_units(a) - request_units(n.requested.get(r, Decimal(0))))
                for r, a in n.allocatable.items()
            }
            for n in capacity.nodes
        ]
        self.reserved = {r: request_units(a) for r, a in capacity.reserved.items()}
        self.matching: dict[Placement, tuple[int, ...]] = {}

    def nodes_for(self, placement: Placement) -> tuple[int, ...]:
        got = self.matching.get(placement)
        if got is None:
            got = self.matching[placement] = tuple(
                i for i, n in enumerate(self.capacity.nodes) if placement.admits(n)
            )
        return got

    def free_units(self, resource: str, nodes: Iterable[int]) -> int:
        total = sum(self.free[i].get(resource, 0) for i in nodes)
        return max(0, total - self.reserved.get(resource, 0))

    def pods_fitting(self, pod: Mapping[str, int], nodes: Iterable[int], want: int) -> int:
        """How many pods of request ``pod`` fit, node by node, on ``nodes`` (at most
        ``want``): a pod needs one node with room for all of it."""
        if not pod:
            return want
        count = 0
        for i in nodes:
            free = self.free[i]
            count += min(free.get(r, 0) // a for r, a in pod.items())
            if count >= want:
                return want
        return count

    def take(
        self,
        request: Mapping[str, int],
        nodes: tuple[int, ...],
        pod: Mapping[str, int] | None = None,
        replicas: int = 1,
    ) -> None:
        """Count a chosen operation (a prediction; kube-scheduler places the pods): each of
        its ``replicas`` pods on the first node with room for it, then what did not fit
        (chosen without room) from the nodes it may use, first node first."""
        if pod:
            placed = 0
            for i in nodes:
                free = self.free[i]
                while placed < replicas and all(free.get(r, 0) >= a for r, a in pod.items()):
                    for r, a in pod.items():
                        free[r] = free.get(r, 0) - a
                    placed += 1
                if placed == replicas:
                    return
            request = {r: a * (replicas - placed) for r, a in pod.items()}
        for resource, amount in request.items():
            for i in nodes:
                if amount <= 0:
                    break
                have = self.free[i].get(resource, 0)
                used = min(have, amount)
                if used:
                    self.free[i][resource] = have - used
                    amount -= used


class FleetState:
    """The fleet queues' per-cluster state for one plan."""

    __slots__ = (
        "active",
        "backends",
        "clusters",
        "counters",
        "dispatched",
        "queues",
        "unreachable",
        "used",
    )

    def __init__(
        self,
        queues: Mapping[str, QueueSpec],
        capacity: Mapping[str, ClusterCapacity],
        unreachable: Collection[str],
        backends: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.queues = {name: q for name, q in queues.items() if q.fleet}
        self.unreachable = frozenset(unreachable)
        self.backends = backends or {}
        self.clusters: dict[str, _Cluster] = {}
        self.dispatched: dict[tuple[str, str], int] = {}
        self.observe(capacity)
        # per (queue, cluster, flavor): the usage in units of every resource requested there
        self.used: dict[tuple[str, str, str | None], dict[str, int]] = {}
        self.active: dict[tuple[str, str], int] = {}
        self.counters: Counters | None = None  # the plan's cluster counters, once admitting

    def __bool__(self) -> bool:
        return bool(self.queues)

    def hold(
        self,
        queue: str,
        cluster: str,
        requests: Mapping[str, Decimal],
        flavor: str | None = None,
        by: int = 1,
    ) -> None:
        """An active operation of a fleet queue on ``cluster`` (in ``flavor``); ``by=-1``:
        one that ended (the free capacity observed is not given back: what a cluster frees
        is seen by the next observation)."""
        used = self.used.setdefault((queue, cluster, flavor), {})
        for r, a in requests.items():
            used[r] = used.get(r, 0) + by * request_units(a)
        key = (queue, cluster)
        self.active[key] = self.active.get(key, 0) + by

    def observe(self, capacity: Mapping[str, ClusterCapacity]) -> None:
        """Start an admission from the free capacity observed (what earlier admissions took
        from it is the clusters' to report), with nothing dispatched yet."""
        wanted = {c for q in self.queues.values() for c in q.clusters}
        self.clusters = {
            name: _Cluster(cap)
            for name, cap in capacity.items()
            if name in wanted and name not in self.unreachable
        }
        self.dispatched = {}

    def count(
        self,
        seen: Mapping[str, ObservedOperation],
        ops: Mapping[str, CompiledOperation],
        qstate: Mapping[str, QueueState] | None = None,
    ) -> None:
        """Step 3b: the active operations of the fleet queues, per cluster (and flavor: the
        one each holds quota in, ``QueueState.flavor_of``)."""
        for oid in sorted(seen):
            obs = seen[oid]
            if not obs.phase.active:
                continue
            known = ops.get(oid)
            qname = obs.queue or (known.queue if known is not None else None)
            if qname not in self.queues:
                continue
            cname = obs.cluster or (known.cluster if known is not None else None)
            if cname is None:
                continue
            requests = obs.requests
            if requests is None:
                requests = known.requests if known is not None else {}
            q = qstate.get(qname) if qstate is not None else None
            flavor = None
            if q is not None and q.flavors:
                flavor = q.flavors[q.flavor_of(known, obs.flavor)].name
            self.hold(qname, cname, requests, flavor)

    def final_members(
        self,
        spec: QueueSpec,
        op: CompiledOperation,
        members: tuple[FleetMember, ...],
        flavor: FlavorSlots | None = None,
    ) -> tuple[FleetMember, ...]:
        """How each cluster stands for a pending operation with the whole plan applied
        (what the next cycle sees; step 6). Capacity is only taken and usage only added
        while planning, so the operation still finds no cluster; ``members`` (as check 10
        saw them) otherwise."""
        if self.counters is None:
            return members
        again = self.choose(spec, op, self.counters, flavor)
        return again.members if again.cluster is None else members

    def choose(
        self,
        spec: QueueSpec,
        op: CompiledOperation,
        counters: Counters,
        flavor: FlavorSlots | None = None,
    ) -> Choice:
        """Check 10 for one candidate of the fleet queue ``spec`` (assigned ``flavor`` by
        check 8: only the nodes with its labels count, and its ``clusterQuota``)."""
        self.counters = counters
        request = {r: request_units(a) for r, a in op.requests.items() if a > 0}
        pod = {r: request_units(a) for r, a in op.per_pod.items() if a > 0}
        placement = flavored_placement(
            placement_of(op.spec), flavor.spec if flavor is not None else None
        )
        members: list[FleetMember] = []
        under_quota: str | None = None
        dist = op.distributed
        backend = None if dist is None or dist.backend is DistributedBackend.JOB else dist.backend
        for name in spec.clusters:
            if name in self.unreachable:
                members.append(FleetMember(name, MemberState.UNREACHABLE))
                continue
            if backend is not None and backend not in self.backends.get(name, ()):
                members.append(FleetMember(name, MemberState.BACKEND_UNAVAILABLE))
                continue
            counter = counters.cluster(name)
            if counter.limit is not None and counter.active >= counter.limit:
                members.append(FleetMember(name, MemberState.CONCURRENCY_LIMIT))
                continue
            over = self._over_cap(spec, name, request, flavor)
            if over is not None:
                members.append(FleetMember(name, MemberState.OVER_CLUSTER_QUOTA, short=over))
                continue
            if under_quota is None:
                under_quota = name
            cluster = self.clusters.get(name)
            if cluster is None:
                members.append(FleetMember(name, MemberState.NOT_OBSERVED))
                continue
            nodes = cluster.nodes_for(placement)
            free = {r: cluster.free_units(r, nodes) for r in sorted(request)}
            short = next((r for r in sorted(request) if free[r] < request[r]), None)
            scattered = False
            if short is None:
                replicas = op.replicas
                if cluster.pods_fitting(pod, nodes, replicas) >= replicas:
                    return Choice(name)
                # enough in all, but not node by node: each pod needs one node with room
                scattered = True
                short = next(
                    (
                        r
                        for r in sorted(pod)
                        if cluster.pods_fitting({r: pod[r]}, nodes, replicas) < replicas
                    ),
                    next(iter(sorted(pod)), None),
                )
            members.append(
                FleetMember(
                    name,
                    MemberState.NO_CAPACITY,
                    {r: to_decimal(u) for r, u in free.items()},
                    short,
                    scattered,
                )
            )
        if under_quota is None:
            return Choice(None, PendingReason.NO_CLUSTER_UNDER_QUOTA, tuple(members))
        if spec.require_capacity:
            return Choice(None, PendingReason.NO_CLUSTER_HAS_CAPACITY, tuple(members))
        return Choice(under_quota)

    def _over_cap(
        self,
        spec: QueueSpec,
        cluster: str,
        request: Mapping[str, int],
        flavor: FlavorSlots | None = None,
    ) -> str | None:
        fname = flavor.name if flavor is not None else None
        if fname is None:
            caps = spec.cluster_quota.get(cluster)
        else:
            caps = next(
                (f.cluster_quota.get(cluster) for f in spec.flavors if f.name == fname), None
            )
        if not caps:
            return None
        used = self.used.get((spec.name, cluster, fname), {})
        for r in sorted(caps):
            amount = request.get(r, 0)
            if amount and used.get(r, 0) + amount > quota_units(caps[r]):
                return r
        return None

    def take(
        self,
        spec: QueueSpec,
        op: CompiledOperation,
        cluster: str,
        flavor: FlavorSlots | None = None,
    ) -> None:
        """Count a dispatch of the fleet queue ``spec`` to ``cluster`` (in ``flavor``)."""
        self.hold(spec.name, cluster, op.requests, flavor.name if flavor is not None else None)
        key = (spec.name, cluster)
        self.dispatched[key] = self.dispatched.get(key, 0) + 1
        observed = self.clusters.get(cluster)
        if observed is not None:
            request = {r: request_units(a) for r, a in op.requests.items() if a > 0}
            pod = {r: request_units(a) for r, a in op.per_pod.items() if a > 0}
            placement = flavored_placement(
                placement_of(op.spec), flavor.spec if flavor is not None else None
            )
            nodes = observed.nodes_for(placement)
            observed.take(request, nodes, pod, op.replicas)

    def _used(self, key: tuple[str, str]) -> dict[str, int]:
        """A fleet queue's usage on a cluster, every flavor counted."""
        out: dict[str, int] = {}
        for (queue, cluster, _), used in self.used.items():
            if (queue, cluster) == key:
                for r, u in used.items():
                    out[r] = out.get(r, 0) + u
        return out

    def slices(self, spec: QueueSpec) -> tuple[FleetSlice, ...]:
        """The queue summary's fleet slices, with this plan applied."""
        out: list[FleetSlice] = []
        for name in spec.clusters:
            key = (spec.name, name)
            cluster = self.clusters.get(name)
            free: dict[str, Decimal] | None = None
            nodes = 0
            if cluster is not None:
                every = tuple(range(len(cluster.capacity.nodes)))
                names = sorted({r for n in cluster.free for r in n})
                free = {r: to_decimal(cluster.free_units(r, every)) for r in names}
                nodes = len(every)
            out.append(
                FleetSlice(
                    cluster=name,
                    reachable=name not in self.unreachable,
                    active=self.active.get(key, 0),
                    dispatching=self.dispatched.get(key, 0),
                    used={r: to_decimal(u) for r, u in sorted(self._used(key).items())},
                    quota=_caps(spec, name),
                    free=free,
                    nodes=nodes,
                )
            )
        return tuple(out)


def _caps(spec: QueueSpec, cluster: str) -> dict[str, Decimal]:
    """A fleet queue's ``clusterQuota`` for ``cluster``; with flavors, summed over them."""
    if not spec.flavors:
        return dict(sorted(spec.cluster_quota.get(cluster, {}).items()))
    out: dict[str, Decimal] = {}
    for f in spec.flavors:
        for r, a in f.cluster_quota.get(cluster, {}).items():
            out[r] = out.get(r, Decimal(0)) + a
    return dict(sorted(out.items()))
