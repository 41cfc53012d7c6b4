"""The views' cycle: one fresh read of every cluster, then the same ``decide`` as
``reconciler run``, carrying out nothing. Used by ``plan --live``, ``queues --live`` and
``status --live``; ``serve`` runs the Reconciler itself as a follower."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


def read_clusters(compiled: CompiledRepo, connect: Connect) -> dict[str, ClusterListing]:
    """Every cluster of the config, listed fresh (nothing can lag), or why it could not be;
    a fleet queue's cluster with its capacity (as ``run`` reads it)."""
    listing: dict[str, ClusterListing] = {}
    fleet = compiled.fleet_clusters
    wanted = wanted_backends(compiled)
    for name in sorted(compiled.clusters):
        try:
            kube = connect(compiled.clusters[name])
            jobs = kube.list_managed("Job").items
            pods = kube.list_managed("Pod").items
            pytorchjobs = list_pytorchjobs(kube)
            served = kube.served_backends(wanted[name]) if name in wanted else frozenset()
        except KubeError as exc:
            listing[name] = ClusterListing.unreachable(str(exc))
            continue
        capacity: ClusterCapacity | None = None
        if name in fleet:
            try:
                capacity = read_capacity(kube)
            except KubeError:
                capacity = None  # not observed; the cluster itself was read
        listing[name] = ClusterListing(
            observe_workloads(name, jobs, pods, pytorchjobs), capacity=capacity, backends=served
        )
    return listing


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
