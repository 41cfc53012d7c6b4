"""The dev cluster behaves like a real one: the real kube-scheduler places pods on kwok
GPU nodes, the real Job controller completes Jobs, and ``down`` leaves nothing behind."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from support.cluster import KubeCluster
from support.helpers import wait_until

from reconciler.devcluster.cluster import ProcessRecord

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"


def _pod_spec(
    *,
    gpus: int = 0,
    node_selector: dict[str, str] | None = None,
    restart: str = "Never",
) -> dict[str, Any]:
    resources = {"limits": {GPU: str(gpus)}} if gpus else {}
    return {
        "restartPolicy": restart,
        "nodeSelector": node_selector or {},
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
    }


def _job(name: str, annotations: dict[str, str], **pod: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": annotations}, "spec": _pod_spec(**pod)},
        },
    }


def _pod(name: str, **pod: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": _pod_spec(**pod)}


def _job_condition(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    job = batch.read_namespaced_job(name, ns)
    for cond in job.status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return str(cond.type)
    return None


def _scheduling_events(core: client.CoreV1Api, ns: str, pod: str) -> list[client.CoreV1Event]:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    return [e for e in events if e.reason == "FailedScheduling"]


def test_gpu_job_runs_on_gpu_node_then_succeeds(kube_cluster: KubeCluster, namespace: str) -> None:
    api = kube_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(
        namespace, _job("train", {"reconciler.dev/simulated-duration": "3s"}, gpus=1)
    )

    def running_pod() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod = wait_until(running_pod, timeout=60, what="the GPU pod to run")
    node = core.read_node(pod.spec.node_name)
    assert int(node.status.allocatable[GPU]) >= 1
    assert node.metadata.labels["gpu.type"] in {"h100", "a100"}  # the default fleet's products
    assert _job_condition(batch, namespace, "train") is None  # not done before its duration

    assert (
        wait_until(
            lambda: _job_condition(batch, namespace, "train"), timeout=60, what="the Job to finish"
        )
        == "Complete"
    )
    job = batch.read_namespaced_job("train", namespace)
    assert job.status.succeeded == 1
    pod = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert pod.status.phase == "Succeeded"
    started = pod.status.start_time
    finished = pod.status.container_statuses[0].state.terminated.finished_at
    assert (finished - started).total_seconds() >= 2  # the simulated duration, to 1s precision


def test_simulated_failure_fails_the_job(kube_cluster: KubeCluster, namespace: str) -> None:
    batch = client.BatchV1Api(kube_cluster.api_client())
    batch.create_namespaced_job(
        namespace, _job("broken", {"reconciler.dev/simulated-failure": "1s"})
    )
    assert (
        wait_until(
            lambda: _job_condition(batch, namespace, "broken"), timeout=60, what="the Job to fail"
        )
        == "Failed"
    )
    assert batch.read_namespaced_job("broken", namespace).status.failed == 1


def _pod_condition(core: client.CoreV1Api, namespace: str, name: str, kind: str) -> Any:
    pod = core.read_namespaced_pod(name, namespace)
    return {c.type: c for c in pod.status.conditions or []}.get(kind)


def test_pod_asking_for_five_gpus_stays_pending(kube_cluster: KubeCluster, namespace: str) -> None:
    core = client.CoreV1Api(kube_cluster.api_client())
    core.create_namespaced_pod(namespace, _pod("too-big", gpus=5))
    events = wait_until(
        lambda: _scheduling_events(core, namespace, "too-big"),
        timeout=60,
        what="a FailedScheduling event",
    )
    assert any(f"Insufficient {GPU}" in (e.message or "") for e in events), events
    assert events[0].source.component == "default-scheduler" or (
        events[0].reporting_component == "default-scheduler"
    )
    # the scheduler records the event and the pod's condition in two writes: wait for both
    scheduled = wait_until(
        lambda: _pod_condition(core, namespace, "too-big", "PodScheduled"),
        timeout=30,
        what="the PodScheduled condition",
    )
    pod = core.read_namespaced_pod("too-big", namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")


def test_node_selector_is_respected(kube_cluster: KubeCluster, namespace: str) -> None:
    core = client.CoreV1Api(kube_cluster.api_client())
    core.create_namespaced_pod(
        namespace, _pod("on-cpu", node_selector={"reconciler.dev/pool": "cpu"})
    )
    core.create_namespaced_pod(namespace, _pod("on-l4", gpus=1, node_selector={"gpu.type": "l4"}))

    def bound() -> str | None:
        return core.read_namespaced_pod("on-cpu", namespace).spec.node_name  # type: ignore[no-any-return]

    node_name = wait_until(bound, timeout=60, what="on-cpu to be bound")
    node = core.read_node(node_name)
    assert node.metadata.labels["reconciler.dev/pool"] == "cpu"
    assert GPU not in (node.status.allocatable or {})

    events = wait_until(
        lambda: _scheduling_events(core, namespace, "on-l4"),
        timeout=60,
        what="FailedScheduling for the l4 selector (no L4 node)",
    )
    assert any("node affinity/selector" in (e.message or "") for e in events), events
    assert core.read_namespaced_pod("on-l4", namespace).spec.node_name is None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args], capture_output=True, text=True, timeout=300
    )


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_cli_up_status_down_leaves_no_process(tmp_path: Path, kube_cluster: KubeCluster) -> None:
    """A second, small dev cluster driven through the CLI, so the session's cluster stays up."""
    if kube_cluster.dev is None:
        pytest.skip("needs the dev-cluster binaries; this session uses an external cluster")
    state = tmp_path / "dc"
    shape = tmp_path / "shape.yaml"
    shape.write_text("pools:\n- {name: gpu, count: 1, gpus: 2, labels: {gpu.type: t4}}\n")
    up = _cli("dev-cluster", "up", "--state-dir", str(state), "--shape", str(shape))
    assert up.returncode == 0, up.stderr
    assert "[4/7] kube-apiserver" in up.stderr  # progress for each step

    status = _cli("dev-cluster", "status", "--state-dir", str(state), "-o", "json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["ready"] is True
    assert Path(info["kubeconfig"]).is_file()
    assert [(n["name"], n["gpus"], n["ready"]) for n in info["nodes"]] == [
        ("kwok-gpu-0", "2", True)
    ]
    env = _cli("dev-cluster", "env", "--state-dir", str(state))
    assert env.stdout.strip() == f"export KUBECONFIG={info['kubeconfig']}"

    recorded = json.loads((state / "cluster.json").read_text())
    ports = recorded["ports"]
    assert {p["name"] for p in recorded["processes"]} == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }

    down = _cli("dev-cluster", "down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert not any(ProcessRecord(**p).alive() for p in recorded["processes"])
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(state) not in ps  # nothing started from this state dir still runs
    time.sleep(0.5)
    assert not any(_port_open(ports[name]) for name in ("apiserver", "etcd"))
    after = _cli("dev-cluster", "status", "--state-dir", str(state), "-o", "json")
    assert after.returncode == 1 and json.loads(after.stdout)["ready"] is False


def test_simulated_outputs_become_the_termination_message(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    core = client.CoreV1Api(kube_cluster.api_client())
    pod = _pod("with-outputs")
    pod["metadata"]["annotations"] = {
        "reconciler.dev/simulated-duration": "1s",
        "reconciler.dev/simulated-outputs": '{"loss": 0.12}',
    }
    core.create_namespaced_pod(namespace, pod)

    def terminated() -> client.V1ContainerStateTerminated | None:
        status = core.read_namespaced_pod("with-outputs", namespace).status
        if status.phase != "Succeeded":
            return None
        return status.container_statuses[0].state.terminated

    state = wait_until(terminated, timeout=60, what="the pod to succeed")
    assert json.loads(state.message) == {"loss": 0.12}
    assert state.exit_code == 0
