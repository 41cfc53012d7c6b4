"""The views' cycle: one fresh read of every cluster, then the same ``decide`` as
``reconciler run``, carrying out nothing. Used by ``plan --live``, ``queues --live`` and
``status --live``; ``serve`` runs the Reconciler itself as a follower."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

from reconciler.adapters.kube import Kube, KubeError, connect_cluster, list_pytorchjobs
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


def read_clusters(compiled: CompiledRepo, connect: Connect) -> dict[str, ClusterListing]:
    """Every cluster of the config, listed fresh (nothing can lag), or why it could not be."""
    listing: dict[str, ClusterListing] = {}
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
        listing[name] = ClusterListing(
            observe_workloads(name, jobs, pods, pytorchjobs), backends=served
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
