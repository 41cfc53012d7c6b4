"""OPTIONAL: the real Kubeflow Training Operator v1.8.1 runs a PyTorchJob the reconciler
dispatched, on kwok nodes, to ``Succeeded``.

The operator is built from bench/training_operator into the binary cache
(``PYTHONPATH=$PWD python tests/support/kubeflow_operator.py``); this test skips when it is not
there, so CI (which never builds operator peers) skips it. It runs out of cluster on the dev
cluster's kubeconfig. Its webhook server reads its certificate from a fixed directory
(/tmp/k8s-webhook-server/serving-certs): the operator runs in a private mount namespace
(root, ``unshare``) with a tmpfs there holding a self-signed certificate, so the host's
directory is not touched. No ValidatingWebhookConfiguration is installed (the apiserver
never calls it); its cert rotator only needs its Secret to exist.

What it shows: the reconciler creates the PyTorchJob; the operator creates the Master and
Worker pods (labels ``training.kubeflow.org/replica-type``/``replica-index``, env
``MASTER_ADDR``, ``WORLD_SIZE``, ``RANK``); the scheduler places them on the gang kwok
nodes and kwok ends them after their simulated duration; the operator sets ``Succeeded``
when the Master succeeds; the reconciler observes the run Succeeded, its end the
condition's time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from support.cluster import KubeCluster, Reconcilers
from support.helpers import wait_until
from support.kubeflow_operator import cached_operator
from support.reconciler_env import cycle_until, gang_op, small_repo

from reconciler.core.types import Phase
from reconciler.devcluster.cluster import free_port
from reconciler.devcluster.pki import write_self_signed

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

GPU = "nvidia.com/gpu"
OP = "d/ddp"
NAME = "d-ddp-g1"
SECRET = "training-operator-webhook-cert"  # the operator's --webhook-secret-name default


@pytest.fixture
def operator(
    kube_cluster: KubeCluster,
    pytorchjob_crd_installed: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> Iterator[Path]:
    binary = cached_operator()
    if not binary.is_file():
        pytest.skip(
            "the training-operator v1.8.1 binary is not cached "
            "(build it: PYTHONPATH=$PWD python tests/support/kubeflow_operator.py)"
        )
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("running the operator needs root and unshare (a private mount namespace)")
    core = client.CoreV1Api(pytorchjob_crd_installed)
    core.create_namespaced_secret(namespace, {"metadata": {"name": SECRET}})
    certs = tmp_path / "certs"
    write_self_signed(certs, "training-operator")
    ports = {name: free_port() for name in ("metrics", "health", "webhook")}
    script = (
        "set -e; mkdir -p /tmp/k8s-webhook-server; "
        "mount -t tmpfs tmpfs /tmp/k8s-webhook-server; "
        "mkdir -p /tmp/k8s-webhook-server/serving-certs; "
        'cp "$CERTS/tls.crt" "$CERTS/tls.key" /tmp/k8s-webhook-server/serving-certs/; '
        'exec "$OPERATOR" --enable-scheme=pytorchjob --leader-elect=false '
        '--metrics-bind-address="127.0.0.1:$METRICS" '
        '--health-probe-bind-address="127.0.0.1:$HEALTH" --webhook-server-port="$WEBHOOK"'
    )
    env = dict(
        os.environ,
        KUBECONFIG=str(kube_cluster.kubeconfig),
        MY_POD_NAMESPACE=namespace,
        CERTS=str(certs),
        OPERATOR=str(binary),
        METRICS=str(ports["metrics"]),
        HEALTH=str(ports["health"]),
        WEBHOOK=str(ports["webhook"]),
    )
    log_path = tmp_path / "training-operator.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def ready() -> bool:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"training-operator exited ({proc.returncode}):\n{tail}")
        try:
            url = f"http://127.0.0.1:{ports['health']}/readyz"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        wait_until(ready, timeout=120, what="the training-operator to be ready")
        yield log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _env(pod: Any) -> dict[str, str]:
    (container,) = [c for c in pod.spec.containers if c.name == "pytorch"]
    return {e.name: e.value for e in container.env or [] if e.value is not None}


def test_the_operator_runs_a_dispatched_pytorchjob_to_succeeded(
    kube_cluster: KubeCluster,
    operator: Path,
    pytorchjob_crd_installed: client.ApiClient,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    api = pytorchjob_crd_installed
    ddp = gang_op(
        2,
        2,
        backend="pytorchjob",
        command="[torchrun, --nnodes=$(PET_NNODES), train.py]",
        duration="4s",
    )
    repo = small_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace, {"ddp": ddp})
    reconciler = reconcilers.start(repo)
    cycle_until(reconciler, lambda r: OP in r.dispatched, timeout=60, what="the dispatch")
    core = client.CoreV1Api(api)
    selector = f"training.kubeflow.org/job-name={NAME}"

    def both_pods() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return pods if len(pods) == 2 else []

    pods = wait_until(both_pods, timeout=60, what="the operator's Master and Worker pods")
    by_type = {p.metadata.labels["training.kubeflow.org/replica-type"]: p for p in pods}
    assert set(by_type) == {"master", "worker"}
    assert by_type["worker"].metadata.labels["training.kubeflow.org/replica-index"] == "0"
    master, worker = _env(by_type["master"]), _env(by_type["worker"])
    assert (master["RANK"], worker["RANK"]) == ("0", "1")
    assert master["WORLD_SIZE"] == worker["WORLD_SIZE"] == "2"
    assert worker["MASTER_ADDR"] == f"{NAME}-master-0"
    # our labels and annotations on the operator's pods: the reconciler lists them
    assert by_type["master"].metadata.labels["app.kubernetes.io/managed-by"] == (
        "dispatch-reconciler"
    )

    started = time.monotonic()
    done = cycle_until(
        reconciler,
        lambda r: r.states[OP].phase is Phase.SUCCEEDED,
        timeout=120,
        what="the run Succeeded (the operator's condition)",
    ).states[OP]
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", NAME
    )
    (succeeded,) = [c for c in obj["status"]["conditions"] if c["type"] == "Succeeded"]
    assert succeeded["status"] == "True"
    assert done.finished_at == succeeded["lastTransitionTime"]
    assert done.kind == "PyTorchJob" and done.pods == 2
    (entry,) = [e for e in reconciler.memory.ledger if e.operation == OP]
    assert entry.phase == "Succeeded"
    print(f"Succeeded {time.monotonic() - started:.1f}s after both pods were created")
