"""Distributed runs on the dev cluster's fake nodes: the real Job controller runs every
index of an Indexed Job on kwok nodes and finishes the Job when all indexes succeed; the
real scheduler places a gang that fits the ``gang`` shape and leaves the rest of one that
does not pending."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from support.cluster import KubeCluster
from support.helpers import wait_until

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
INDEX = "batch.kubernetes.io/job-completion-index"


def _indexed(
    name: str, replicas: int, gpus: int, annotations: dict[str, str], backoff_per_index: bool
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {
                "restartPolicy": "Never",
                "subdomain": name,
                "nodeSelector": {"reconciler.dev/pool": "gang"},
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}
                ],
            },
        },
    }
    if backoff_per_index:
        spec["backoffLimitPerIndex"] = 0
        spec["maxFailedIndexes"] = 0
    else:
        spec["backoffLimit"] = 0
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _headless(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"job-name": name},
        },
    }


def _finished(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    for cond in batch.read_namespaced_job(name, ns).status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return str(cond.type)
    return None


def _pods(core: client.CoreV1Api, ns: str, job: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items)


def test_every_index_runs_on_kwok_nodes_and_the_job_completes(
    kube_cluster: KubeCluster, namespace: str, gang_nodes: list[str]
) -> None:
    api = kube_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    discovery = client.DiscoveryV1Api(api)
    core.create_namespaced_service(namespace, _headless("gang"))
    batch.create_namespaced_job(
        namespace,
        _indexed("gang", 4, 2, {"reconciler.dev/simulated-duration": "4s"}, True),
    )

    def all_running() -> list[client.V1Pod] | None:
        pods = _pods(core, namespace, "gang")
        return pods if len(pods) == 4 and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_until(all_running, timeout=60, what="the 4 indexes to run")
    by_index = {int(p.metadata.annotations[INDEX]): p for p in pods}
    assert sorted(by_index) == [0, 1, 2, 3]
    for i, pod in by_index.items():
        # the Job controller names each pod's host after its index: <job>-<i>.<subdomain>
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"gang-{i}", "gang")
        assert pod.spec.node_name in gang_nodes
        assert pod.status.pod_ip
    # 8 GPUs over 4 nodes of 8: the scheduler spreads or packs, never over a node's room
    per_node: dict[str, int] = {}
    for pod in pods:
        per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 2
    assert sum(per_node.values()) == 8 and max(per_node.values()) <= 8

    def endpoints() -> dict[str, str] | None:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=gang"
        ).items
        found = {
            ep.hostname: ep.addresses[0] for s in slices for ep in s.endpoints or [] if ep.hostname
        }
        return found if len(found) == 4 else None

    # the headless Service publishes one endpoint per pod, named by its hostname: the
    # records a cluster DNS serves as gang-<i>.gang.<ns>.svc (the dev cluster runs no DNS)
    found = wait_until(endpoints, timeout=60, what="the Service's 4 endpoints")
    assert found == {f"gang-{i}": by_index[i].status.pod_ip for i in range(4)}

    assert wait_until(lambda: _finished(batch, namespace, "gang"), timeout=60, what="the end") == (
        "Complete"
    )
    job = batch.read_namespaced_job("gang", namespace)
    assert job.status.succeeded == 4
    assert job.status.completed_indexes == "0-3"
    assert all(p.status.phase == "Succeeded" for p in _pods(core, namespace, "gang"))


@pytest.mark.parametrize("per_index", [True, False], ids=["backoffLimitPerIndex", "backoffLimit"])
def test_a_failed_index_fails_the_indexed_job(
    kube_cluster: KubeCluster, namespace: str, gang_nodes: list[str], per_index: bool
) -> None:
    batch = client.BatchV1Api(kube_cluster.api_client())
    name = "failing"
    batch.create_namespaced_job(
        namespace,
        _indexed(name, 2, 1, {"reconciler.dev/simulated-failure": "1s"}, per_index),
    )
    assert wait_until(lambda: _finished(batch, namespace, name), timeout=60, what="the end") == (
        "Failed"
    )
    job = batch.read_namespaced_job(name, namespace)
    assert job.status.succeeded in (None, 0)
    assert (job.status.failed or 0) >= 1


def test_a_gang_larger_than_the_nodes_is_placed_in_part(
    kube_cluster: KubeCluster, namespace: str, gang_nodes: list[str]
) -> None:
    """5 pods of 8 GPUs on 4 nodes of 8: the scheduler binds 4 and the fifth stays pending
    with Insufficient nvidia.com/gpu (what the reconciler reports as k of N pods placed)."""
    api = kube_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, _indexed("big", 5, 8, {}, True))

    def split() -> tuple[list[client.V1Pod], list[client.V1Pod]] | None:
        pods = _pods(core, namespace, "big")
        bound = [p for p in pods if p.spec.node_name]
        pending = [
            p
            for p in pods
            if not p.spec.node_name
            and any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in p.status.conditions or []
            )
        ]
        return (bound, pending) if len(bound) == 4 and len(pending) == 1 else None

    bound, pending = wait_until(split, timeout=60, what="4 pods bound and 1 unschedulable")
    assert sorted(p.spec.node_name for p in bound) == sorted(gang_nodes)
    (cond,) = [c for c in pending[0].status.conditions if c.type == "PodScheduled"]
    assert f"Insufficient {GPU}" in (cond.message or "")
