"""``run.distributed.backend: pytorchjob`` is dispatched only to a cluster that serves the
PyTorchJob CRD: a planner input read with the workloads (``ClusterListing.backends``),
never a side check in a view. Against the fake Kube; the dev-cluster version installs the
real CRD (tests/cluster/test_pytorchjob_crd.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from unittest import mock

from builders import NOW, World
from fake_kube import FakeCluster, FakeKube

from reconciler.core.cycle import ClusterListing, Memory, decide, listing_from_memory
from reconciler.core.plan import AdmitWhen, PendingReason
from reconciler.core.types import (
    ClusterSpec,
    CompiledRepo,
    Distributed,
    DistributedBackend,
    RepoSnapshot,
)
from reconciler.runtime.cycle import Reconciler


class Clock:
    def now(self) -> datetime:
        return NOW


def world(strict: bool = False) -> World:
    w = World().queue("gpu", quota={"nvidia.com/gpu": 16}, strict=strict)
    pj = w.op("p/pj", gpu=8)
    pj._fields.update(
        replicas=4,
        distributed=Distributed(backend=DistributedBackend.PYTORCHJOB),
        pod_requests={"nvidia.com/gpu": 2},
    )
    w.op("p/after", gpu=1)
    return w


def harness(repo: CompiledRepo, cluster: FakeCluster) -> Reconciler:
    def connect(spec: ClusterSpec) -> Any:
        return FakeKube(cluster)

    return Reconciler(
        lambda: RepoSnapshot(files={}, version=repo.version),
        connect,  # type: ignore[arg-type]
        Clock(),
        is_leader=lambda: True,
        watch=False,
    )


def test_a_cluster_without_the_crd_keeps_the_op_queued_with_backend_unavailable() -> None:
    repo = world().repo()
    cluster = FakeCluster("local")
    reconciler = harness(repo, cluster)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
        result = reconciler.run_once()
    assert result.plan is not None
    (entry,) = [p for p in result.plan.pending if p.operation == "p/pj"]
    assert entry.reason is PendingReason.BACKEND_UNAVAILABLE
    assert entry.message == (
        "cluster local does not serve kubeflow.org/v1 PyTorchJob (backend pytorchjob); "
        "admitted when the cluster serves it (install the operator), "
        "or with run.distributed.backend: job"
    )
    assert entry.admit.when is AdmitWhen.BACKEND_SERVED
    assert entry.blocked_by.to_json() == {
        "cluster": "local",
        "backend": "pytorchjob",
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
    }
    assert result.dispatched == ("p/after",)  # nothing held, nothing behind it waits
    assert cluster.discoveries == 1


def test_it_does_not_hold_a_strict_fifo_queue() -> None:
    repo = world(strict=True).repo()
    listing = {"local": ClusterListing()}
    decision = decide(repo, listing, Memory(), NOW)
    assert [d.operation for d in decision.plan.dispatch] == ["p/after"]


def test_a_cluster_serving_the_crd_gets_the_dispatch() -> None:
    repo = world().repo()
    served = decide(
        repo, {"local": ClusterListing(backends=frozenset({"pytorchjob"}))}, Memory(), NOW
    )
    assert [d.operation for d in served.plan.dispatch] == ["p/pj", "p/after"]
    # the runtime creates the PyTorchJob (tests/unit/test_pytorchjob_cycles.py)
    cluster = FakeCluster("local", backends={"pytorchjob"})
    reconciler = harness(repo, cluster)
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
        result = reconciler.run_once()
    assert not result.failed
    assert cluster.calls == ["create PyTorchJob p/p-pj-g1", "create p/p-after-g1"]
    assert result.dispatched == ("p/pj", "p/after")
    assert not any(name.startswith("p-pj") for _, name in cluster.jobs)  # no Job for it


def test_no_discovery_request_without_an_op_that_needs_a_backend() -> None:
    w = World().queue("gpu", quota={"nvidia.com/gpu": 16})
    w.op("p/plain", gpu=1)
    repo = w.repo()
    cluster = FakeCluster("local")
    with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
        harness(repo, cluster).run_once()
    assert cluster.discoveries == 0


def test_a_view_from_the_status_branch_uses_the_backends_the_last_cycle_recorded() -> None:
    repo = world().repo()
    decision = decide(repo, listing_from_memory(repo, Memory()), Memory(), NOW)
    (entry,) = [p for p in decision.plan.pending if p.operation == "p/pj"]
    assert entry.reason is PendingReason.BACKEND_UNAVAILABLE
    served = {"local": frozenset({"pytorchjob"})}
    recorded = decide(repo, listing_from_memory(repo, Memory(), None, served), Memory(), NOW)
    assert [d.operation for d in recorded.plan.dispatch] == ["p/pj", "p/after"]
    assert recorded.clusters[0].backends == frozenset({"pytorchjob"})
