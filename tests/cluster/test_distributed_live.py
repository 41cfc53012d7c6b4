"""Distributed operations on the dev cluster, end to end (issue 14, "Done when"): the
reconciler's cycles against the real apiserver, scheduler and Job controller, with the
``gang`` shape's four 8-GPU nodes (``gang_nodes``: pool gang, selected by the ops).

The kwok pods run no container, so ``RANK`` and ``MASTER_ADDR`` are checked where they
are decided: the pod's env (``RANK`` from its completion index, ``MASTER_ADDR`` naming
replica 0's hostname in the headless Service), the pods' hostname and subdomain, and the
Service's endpoints (what a cluster DNS would serve; the dev cluster has no DNS server)."""

from __future__ import annotations

import random
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from support.cluster import KubeCluster, Reconcilers
from support.helpers import wait_until
from support.reconciler_env import cycle_until, gang_op, small_repo

from reconciler.adapters.kube import Kube
from reconciler.core.observation.observe import ObservedReason
from reconciler.core.plan import PendingReason
from reconciler.core.types import Phase
from reconciler.runtime.cycle import CycleResult

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

GPU = "nvidia.com/gpu"
INDEX = "batch.kubernetes.io/job-completion-index"


def op_yaml(replicas: int, gpus: int, duration: str | None = "6s") -> str:
    return gang_op(replicas, gpus, duration=duration)


def pending(result: CycleResult, op: str) -> Any:
    assert result.plan is not None
    return next((p for p in result.plan.pending if p.operation == op), None)


def pods_of(core: client.CoreV1Api, namespace: str, job: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items)


def bound_gpus(core: client.CoreV1Api, namespace: str) -> int:
    """GPUs held on nodes: the GPU limits of the namespace's bound, unfinished pods."""
    total = 0
    for pod in core.list_namespaced_pod(namespace).items:
        if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
            continue
        for c in pod.spec.containers:
            total += int(((c.resources and c.resources.limits) or {}).get(GPU, 0))
    return total


def test_a_gang_is_dispatched_whole_ranked_and_succeeds_and_the_next_waits_for_quota(
    kube_cluster: KubeCluster,
    kube: Kube,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    ops = {"a-gang": op_yaml(4, 2), "b-gang": op_yaml(4, 2)}
    reconciler = reconcilers.start(
        small_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace, ops)
    )
    core = client.CoreV1Api(kube_cluster.api_client())
    discovery = client.DiscoveryV1Api(kube_cluster.api_client())

    first = reconciler.run_once()
    assert first.dispatched == ("d/a-gang",), first.failed
    waiting = pending(first, "d/b-gang")
    assert waiting.reason is PendingReason.QUOTA_EXCEEDED
    assert "nvidia.com/gpu 8 (4 replicas \u00d7 2, all or nothing)" in waiting.message  # whole

    job = "d-a-gang-g1"

    def all_running() -> list[client.V1Pod] | None:
        pods = pods_of(core, namespace, job)
        return pods if len(pods) == 4 and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_until(all_running, timeout=60, what="the 4 pods of the gang to run")
    assert sorted(int(p.metadata.annotations[INDEX]) for p in pods) == [0, 1, 2, 3]
    assert {p.spec.node_name for p in pods} <= set(gang_nodes)
    for pod in pods:
        (main,) = [c for c in pod.spec.containers if c.name == "main"]
        env = {e.name: e for e in main.env or []}
        assert env["MASTER_ADDR"].value == f"{job}-0.{job}"
        assert env["MASTER_PORT"].value == "29500" and env["WORLD_SIZE"].value == "4"
        # RANK is the pod's completion index, which the Job controller set to 0..3
        assert env["RANK"].value_from.field_ref.field_path == f"metadata.annotations['{INDEX}']"
        assert env["PET_NODE_RANK"].value_from.field_ref.field_path == (
            f"metadata.annotations['{INDEX}']"
        )
        index = pod.metadata.annotations[INDEX]
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"{job}-{index}", job)
    # MASTER_ADDR <job>-0.<job>: the headless Service <job> publishes replica 0's hostname
    service = core.read_namespaced_service(job, namespace)
    assert service.spec.cluster_ip == "None"

    def endpoints() -> dict[str, str] | None:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={job}"
        ).items
        found = {e.hostname: e.addresses[0] for s in slices for e in s.endpoints or []}
        return found if len(found) == 4 else None

    found = wait_until(endpoints, timeout=60, what="the headless Service's 4 endpoints")
    by_index = {p.metadata.annotations[INDEX]: p for p in pods}
    assert found[f"{job}-0"] == by_index["0"].status.pod_ip

    running = cycle_until(
        reconciler,
        lambda r: r.states["d/a-gang"].phase is Phase.RUNNING,
        timeout=30,
        what="the gang to be Running",
    )
    assert pending(running, "d/b-gang").reason is PendingReason.QUOTA_EXCEEDED
    done = cycle_until(
        reconciler,
        lambda r: r.states["d/a-gang"].phase.finished,
        timeout=90,
        what="the gang to finish",
    )
    assert done.states["d/a-gang"].phase is Phase.SUCCEEDED
    after = cycle_until(
        reconciler, lambda r: "d/b-gang" in r.states, timeout=30, what="the second gang to go"
    )
    assert after.states["d/b-gang"].phase.active


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_a_small_job_passes_a_waiting_gang_only_under_best_effort(
    kube_cluster: KubeCluster,
    kube: Kube,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
    strategy: str,
) -> None:
    ops = {
        "a-warm": op_yaml(1, 1, duration=None),  # holds 1 of the 8 GPUs
        "b-gang": op_yaml(4, 2),
        "c-small": op_yaml(1, 1),
    }
    extra = f"strategy: {strategy}\n"
    repo = small_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace, ops, queue_extra=extra)
    reconciler = reconcilers.start(repo)
    first = reconciler.run_once()
    gang = pending(first, "d/b-gang")
    assert gang.reason is PendingReason.QUOTA_EXCEEDED  # 1 + 8 > 8: never a part of it
    assert "nvidia.com/gpu 8 (4 replicas \u00d7 2, all or nothing)" in gang.message
    assert not kube.list_labelled("Job", "reconciler.dev/operation=b-gang", namespace)
    if strategy == "BestEffortFIFO":
        assert first.dispatched == ("d/a-warm", "d/c-small")
    else:
        assert first.dispatched == ("d/a-warm",)
        assert pending(first, "d/c-small").reason is PendingReason.WAITING_BEHIND_HEAD


def test_a_gang_larger_than_the_quota_is_exceeds_quota_at_once(
    kube_cluster: KubeCluster,
    kube: Kube,
    namespace: str,
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    ops = {"five": op_yaml(5, 2)}
    reconciler = reconcilers.start(
        small_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace, ops)
    )
    result = reconciler.run_once()
    entry = pending(result, "d/five")
    assert entry.reason is PendingReason.EXCEEDS_QUOTA
    assert "10" in entry.message and "8" in entry.message  # the numbers
    assert result.dispatched == ()


def test_a_half_placed_gang_waits_for_capacity_then_times_out_and_requeues_once(
    kube_cluster: KubeCluster,
    kube: Kube,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    """5 pods of 8 GPUs: the 64-GPU quota admits them, the four 8-GPU nodes place 4."""
    repo = small_repo(
        tmp_path / "repo",
        kube_cluster.kubeconfig,
        namespace,
        {"wide": op_yaml(5, 8, duration=None)},
        quota=64,
        # room for the scheduler to place all it can on a busy machine
        queue_extra="startTimeout: 20s\n",
    )
    reconciler = reconcilers.start(repo)
    core = client.CoreV1Api(kube_cluster.api_client())
    assert reconciler.run_once().dispatched == ("d/wide",)
    waiting = cycle_until(  # the scheduler places the four it can one by one
        reconciler,
        lambda r: (
            r.states["d/wide"].reason is ObservedReason.WAITING_FOR_CAPACITY
            and r.states["d/wide"].message.startswith("4 of 5 pods placed")
        ),
        timeout=30,
        what="WaitingForCapacity with 4 of 5 placed",
    )
    state = waiting.states["d/wide"]
    assert state.phase is Phase.DISPATCHED
    assert state.message.startswith("4 of 5 pods placed; "), state.message
    assert f"Insufficient {GPU}" in state.message
    assert bound_gpus(core, namespace) == 32

    stopped = cycle_until(
        reconciler, lambda r: r.stopped == ("d/wide",), timeout=45, what="the GangTimeout"
    )
    assert stopped.states["d/wide"].reason is ObservedReason.GANG_TIMEOUT
    assert "re-queued" in stopped.states["d/wide"].message
    wait_until(lambda: bound_gpus(core, namespace) == 0, timeout=60, what="the GPUs to be released")
    again = cycle_until(
        reconciler, lambda r: r.dispatched == ("d/wide",), timeout=60, what="the re-dispatch"
    )
    assert again.decision is not None
    assert again.decision.memory.gang_timeouts["d/wide"].count == 1
    final = cycle_until(
        reconciler, lambda r: r.stopped == ("d/wide",), timeout=60, what="the second timeout"
    )
    assert "again after it was re-queued once: stopped" in final.states["d/wide"].message
    wait_until(lambda: bound_gpus(core, namespace) == 0, timeout=60, what="the GPUs to be released")
    for _ in range(4):  # never dispatched a third time
        later = reconciler.run_once()
        assert later.dispatched == ()
        assert later.states["d/wide"].phase is Phase.STOPPED
        time.sleep(0.5)
    assert bound_gpus(core, namespace) == 0
    assert not kube.list_labelled("Job", "reconciler.dev/operation=wide", namespace)


class QuotaSampler(threading.Thread):
    """Every 0.2 s, the GPU limits the queue's pods hold, as the apiserver lists them: every
    pod not yet terminal (Pending or Running), every replica counted. A Job whose pods have
    all ended holds nothing, even before its ``Complete`` condition (the reconciler counts
    it finished at ``SuccessCriteriaMet``, docs/dispatch.md)."""

    def __init__(self, core: client.CoreV1Api, namespace: str, quota: int) -> None:
        super().__init__(daemon=True, name="quota-sampler")
        self.core, self.namespace, self.quota = core, namespace, quota
        self.samples: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                pods = self.core.list_namespaced_pod(self.namespace).items
            except Exception:  # a lost sample (API busy), not a verdict
                self.halt.wait(0.2)
                continue
            used = 0
            for pod in pods:
                if (pod.status and pod.status.phase) in ("Succeeded", "Failed"):
                    continue
                used += sum(
                    int(((c.resources and c.resources.limits) or {}).get(GPU, 0))
                    for c in pod.spec.containers
                )
            self.samples.append(used)
            self.halt.wait(0.2)


def test_quota_is_never_exceeded_by_30_random_distributed_and_single_pod_ops(
    kube_cluster: KubeCluster,
    kube: Kube,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    rng = random.Random(14)
    ops: dict[str, str] = {}
    for i in range(30):
        replicas = rng.choice([1, 1, 2, 3, 4])
        gpus = rng.choice([1, 2]) if replicas > 1 else rng.choice([1, 2, 4])
        ops[f"op-{i:02d}"] = op_yaml(replicas, gpus, duration=f"{rng.randint(1, 4)}s")
    reconciler = reconcilers.start(
        small_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace, ops, quota=8)
    )
    sampler = QuotaSampler(client.CoreV1Api(kube_cluster.api_client()), namespace, 8)
    sampler.start()
    try:
        done = cycle_until(
            reconciler,
            lambda r: len(r.states) == 30 and all(s.phase.finished for s in r.states.values()),
            timeout=360,
            what="all 30 ops to finish",
            period=0.3,
        )
    finally:
        sampler.halt.set()
        sampler.join()
    assert all(s.phase is Phase.SUCCEEDED for s in done.states.values()), {
        k: s.phase for k, s in done.states.items() if s.phase is not Phase.SUCCEEDED
    }
    assert len(sampler.samples) > 50
    assert max(sampler.samples) <= 8, max(sampler.samples)
    assert max(sampler.samples) > 0  # the sampler saw the work
    assert Decimal(max(sampler.samples)) <= Decimal(8)
