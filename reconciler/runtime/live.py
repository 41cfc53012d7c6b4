"""The views' cycle: one fresh read of every cluster, then the same ``decide`` as
``reconciler run``, carrying out nothing. Used by ``plan --live``, ``queues --live`` and
``status --live``; ``serve`` runs the Reconciler itself as a follower."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from reconciler.adapters.kube import (
    ALL_OBJECTS,
    LIVE_PODS,
    Kube,
    KubeError,
    connect_cluster,
    list_pytorchjobs,
)
from reconciler.core.capacity import ClusterCapacity, observe_capacity
from reconciler.core.cycle import ClusterListing, Decision, Memory, decide, wanted_backends
from reconciler.core.observe import observe_workloads
from reconciler.core.types import ClusterSpec, CompiledRepo

Connect = Callable[[ClusterSpec], Kube]


def connector(overrides: Mapping[str, Path] | None = None) -> Connect:
    """A client per Cluster file (its kubeconfig, or ``overrides[name]``)."""

    def connect(spec: ClusterSpec) -> Kube:
        override = (overrides or {}).get(spec.name)
        return Kube(connect_cluster(spec.kubeconfig, spec.context, override))

    return connect


def read_capacity(kube: Kube) -> ClusterCapacity:
    """A cluster's capacity from a fresh list of its Nodes and live pods."""
    nodes = kube.list_managed("Node", selector=ALL_OBJECTS).items
    pods = kube.list_managed("Pod", selector=ALL_OBJECTS, fields=LIVE_PODS).items
    return observe_capacity(nodes, pods)


@dataclass
class _Read:
    """One cluster as read once: its connection, its workloads (or why it could not be
    read), the backends asked about and those served, its capacity once read."""

    spec: ClusterSpec
    kube: Kube | None
    listing: ClusterListing
    asked: set[str] = field(default_factory=set)
    served: set[str] = field(default_factory=set)
    capacity: ClusterCapacity | None = None
    capacity_read: bool = False


class ClusterReads:
    """Every cluster of the config listed fresh (nothing can lag), or why it could not be;
    a fleet queue's cluster with its capacity (as ``run`` reads it). Each cluster is read
    once per instance, however many revisions ask for it: ``plan --live --base`` plans
    both revisions over the same observed state (a Job that ends between two reads is no
    change of the PR). A revision that needs more of a cluster (a backend, or its capacity
    for a fleet queue the other revision does not have) reads only that; a cluster whose
    connection a revision changes is another cluster, read again."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._reads: dict[str, _Read] = {}

    def __call__(self, compiled: CompiledRepo) -> dict[str, ClusterListing]:
        listing: dict[str, ClusterListing] = {}
        fleet = compiled.fleet_clusters
        wanted = wanted_backends(compiled)
        for name in sorted(compiled.clusters):
            spec = compiled.clusters[name]
            read = self._reads.get(name)
            if read is None or read.spec != spec:
                read = self._reads[name] = self._list(spec)
            listing[name] = self._listing(read, wanted.get(name, frozenset()), name in fleet)
        return listing

    def _list(self, spec: ClusterSpec) -> _Read:
        try:
            kube = self._connect(spec)
            jobs = kube.list_managed("Job").items
            pods = kube.list_managed("Pod").items
            pytorchjobs = list_pytorchjobs(kube)
        except KubeError as exc:
            return _Read(spec, None, ClusterListing.unreachable(str(exc)))
        return _Read(
            spec, kube, ClusterListing(observe_workloads(spec.name, jobs, pods, pytorchjobs))
        )

    def _listing(self, read: _Read, wanted: frozenset[str], fleet: bool) -> ClusterListing:
        if read.kube is None:
            return read.listing
        missing = wanted - read.asked
        if missing:
            try:
                read.served |= read.kube.served_backends(missing)
            except KubeError as exc:
                return ClusterListing.unreachable(str(exc))  # as a fresh read says
            read.asked |= missing
        if fleet and not read.capacity_read:
            try:
                read.capacity = read_capacity(read.kube)
            except KubeError:
                read.capacity = None  # not observed; the cluster itself was read
            read.capacity_read = True
        return replace(
            read.listing,
            capacity=read.capacity if fleet else None,
            backends=frozenset(read.served & wanted),
        )


def read_clusters(compiled: CompiledRepo, connect: Connect) -> dict[str, ClusterListing]:
    """Every cluster of the config, read once (``ClusterReads``)."""
    return ClusterReads(connect)(compiled)


def decide_live(
    compiled: CompiledRepo, memory: Memory, now: datetime, connect: Connect
) -> Decision:
    """What the next cycle decides, from the clusters as they are now and ``memory`` (the
    status branch: what the leader last saw)."""
    return decide(compiled, read_clusters(compiled, connect), memory, now)


def unreachable_warnings(decision: Decision) -> list[str]:
    return [
        f"warning: cluster {c.name} cannot be read: {c.error} (its queues wait; its "
        "operations keep their last recorded phases)"
        for c in decision.clusters
        if not c.reachable
    ]
