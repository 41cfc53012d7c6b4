"""``run.distributed.backend: pytorchjob`` is dispatched only to a cluster that serves the
PyTorchJob CRD: a planner input read with the workloads (``ClusterListing.backends``),
never a side check in a view. Against the fake Kube; the dev-cluster version installs the
real CRD (tests/cluster/test_pytorchjob_crd.py)."""

from __future__ import annotations

from support.builders import NOW, World
from support.fake_kube import FakeCycles

from reconciler.core.decision.cycle import ClusterListing, Memory, decide, listing_from_memory
from reconciler.core.plan import AdmitWhen, PendingReason
from reconciler.core.types import (
    Distributed,
    DistributedBackend,
)


def world(strict: bool = False) -> World:
    w = World().queue("gpu", quota={"nvidia.com/gpu": 16}, strict=strict)
    pytorchjob = Distributed(backend=DistributedBackend.PYTORCHJOB)
    w.op("p/pj").requests(gpu=2).replicas(4, pytorchjob)
    w.op("p/after", gpu=1)
    return w


def test_a_cluster_without_the_crd_keeps_the_op_queued_with_backend_unavailable() -> None:
    repo = world().repo()
    cycles = FakeCycles(repo)
    cluster = cycles.cluster
    result = cycles.cycle()
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
    # the runtime creates the PyTorchJob (tests/runtime/test_pytorchjob_cycles.py)
    cycles = FakeCycles(repo, backends={"pytorchjob"})
    cluster = cycles.cluster
    result = cycles.cycle()
    assert not result.failed
    assert cluster.calls == ["create PyTorchJob p/p-pj-g1", "create p/p-after-g1"]
    assert result.dispatched == ("p/pj", "p/after")
    assert not any(name.startswith("p-pj") for _, name in cluster.jobs)  # no Job for it


def test_no_discovery_request_without_an_op_that_needs_a_backend() -> None:
    w = World().queue("gpu", quota={"nvidia.com/gpu": 16})
    w.op("p/plain", gpu=1)
    repo = w.repo()
    cycles = FakeCycles(repo)
    cycles.cycle()
    assert cycles.cluster.discoveries == 0


def test_a_view_from_the_status_branch_uses_the_backends_the_last_cycle_recorded() -> None:
    repo = world().repo()
    decision = decide(repo, listing_from_memory(repo, Memory()), Memory(), NOW)
    (entry,) = [p for p in decision.plan.pending if p.operation == "p/pj"]
    assert entry.reason is PendingReason.BACKEND_UNAVAILABLE
    served = {"local": frozenset({"pytorchjob"})}
    recorded = decide(repo, listing_from_memory(repo, Memory(), None, served), Memory(), NOW)
    assert [d.operation for d in recorded.plan.dispatch] == ["p/pj", "p/after"]
    assert recorded.clusters[0].backends == frozenset({"pytorchjob"})
