"""The views' cycle: one fresh read of every cluster, then the same ``decide`` as
``reconciler run``, carrying out nothing. Used by ``plan --live``, ``queues --live`` and
``status --live``; ``serve`` runs the Reconciler itself as a follower."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
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
from reconciler.core.decision.cycle import ClusterListing, Decision, Memory, decide, wanted_backends
from reconciler.core.observation.capacity import ClusterCapacity, observe_capacity
from reconciler.core.observation.observe import observe_workloads
from reconciler.core.plan.flavors import flavor_node_warnings
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


def read_node_labels(kube: Kube) -> list[dict[str, str]]:
    """The labels of every Node of a cluster (Ready or not: a flavor names kinds of node)."""
    nodes = kube.list_managed("Node", selector=ALL_OBJECTS).items
    return [
        {str(k): str(v) for k, v in ((n.get("metadata") or {}).get("labels") or {}).items()}
        for n in nodes
    ]


def flavor_warnings(compiled: CompiledRepo, connect: Connect) -> list[str]:
    """``validate --live``: a warning per flavor whose nodeLabels match no node of any
    cluster of the config (each cluster's Nodes read once), and one per cluster that
    could not be read."""
    if not compiled.flavors:
        return []
    nodes: dict[str, list[dict[str, str]]] = {}
    unread: dict[str, str] = {}
    for name in sorted(compiled.clusters):
        try:
            nodes[name] = read_node_labels(connect(compiled.clusters[name]))
        except KubeError as exc:
            unread[name] = str(exc)
    notes = [
        f"warning: cluster {name} cannot be read: {error} (its nodes are not checked "
        "against the flavors)"
        for name, error in unread.items()
    ]
    if not nodes:
        return [*notes, "warning: no cluster could be read: the flavors' nodeLabels are unchecked"]
    return [*notes, *flavor_node_warnings(compiled.flavors, nodes, tuple(unread))]


@dataclass(frozen=True, slots=True)
class _Read:
    """One cluster as read: its connection, its workloads (or why it could not be read),
    the backends asked about and those served, its capacity once read."""

    spec: ClusterSpec
    kube: Kube | None
    listing: ClusterListing
    asked: frozenset[str] = frozenset()
    served: frozenset[str] = frozenset()
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
        self._nodes: dict[str, tuple[ClusterSpec, list[dict[str, str]]]] = {}

    def flavor_warnings(self, compiled: CompiledRepo) -> list[str]:
        """A warning per flavor of ``compiled`` whose nodeLabels match no node of its
        clusters (each cluster's Nodes listed once, on the connection this instance read
        it with; call after reading ``compiled``). A cluster that could not be read is
        named in the warning, not checked."""
        if not compiled.flavors:
            return []
        nodes: dict[str, list[dict[str, str]]] = {}
        unread: list[str] = []
        for name in sorted(compiled.clusters):
            read = self._reads.get(name)
            if read is None or read.kube is None:
                unread.append(name)
                continue
            cached = self._nodes.get(name)
            if cached is None or cached[0] != read.spec:
                try:
                    cached = self._nodes[name] = (read.spec, read_node_labels(read.kube))
                except KubeError:
                    unread.append(name)
                    continue
            nodes[name] = cached[1]
        return flavor_node_warnings(compiled.flavors, nodes, tuple(unread))

    def __call__(self, compiled: CompiledRepo) -> dict[str, ClusterListing]:
        listing: dict[str, ClusterListing] = {}
        fleet = compiled.fleet_clusters
        wanted = wanted_backends(compiled)
        for name in sorted(compiled.clusters):
            spec = compiled.clusters[name]
            read = self._reads.get(name)
            if read is None or read.spec != spec:
                read = self._list(spec)
            read, listing[name] = self._more(read, wanted.get(name, frozenset()), name in fleet)
            self._reads[name] = read
        return listing

    def _list(self, spec: ClusterSpec) -> _Read:
        try:
            kube = self._connect(spec)
            jobs = kube.list_managed("Job").items
            pods = kube.list_managed("Pod").items
            pytorchjobs = list_pytorchjobs(kube)
        except KubeError as exc:
            return _Read(spec, None, ClusterListing.unreachable(str(exc)))
        workloads = observe_workloads(spec.name, jobs, pods, pytorchjobs)
        return _Read(spec, kube, ClusterListing(workloads))

    def _more(
        self, read: _Read, wanted: frozenset[str], fleet: bool
    ) -> tuple[_Read, ClusterListing]:
        """``read`` with what this revision needs of it read too, and its listing."""
        kube = read.kube
        if kube is None:
            return read, read.listing
        missing = wanted - read.asked
        if missing:
            try:
                served = kube.served_backends(missing)
            except KubeError as exc:  # unreachable, as a fresh read says, for every revision
                read = replace(read, kube=None, listing=ClusterListing.unreachable(str(exc)))
                return read, read.listing
            read = replace(read, asked=read.asked | missing, served=read.served | served)
        if fleet and not read.capacity_read:
            try:
                capacity: ClusterCapacity | None = read_capacity(kube)
            except KubeError:
                capacity = None  # not observed; the cluster itself was read
            read = replace(read, capacity=capacity, capacity_read=True)
        listing = replace(
            read.listing,
            capacity=read.capacity if fleet else None,
            backends=read.served & wanted,
        )
        return read, listing


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
