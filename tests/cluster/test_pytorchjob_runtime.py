"""``run.distributed.backend: pytorchjob`` run by the reconciler against the real
apiserver, with the Kubeflow Training Operator v1.8.1's PyTorchJob CRD installed: the
reconciler creates the PyTorchJob, lists it (its watch cache, and a fresh list), observes
it, writes its phase onto it, deletes it (pruned), and a restarted reconciler adopts it.

No training-operator runs in CI (an operator peer is never a CI dependency), so this test
does the operator's part itself, through the same API the operator uses: it creates the
Master and Worker pods from the PyTorchJob's replica templates, labelled and owned as the
operator v1.8.1 does (``training.kubeflow.org/replica-type``/``replica-index``/
``job-name``, a controller ownerReference), and writes the PyTorchJob's ``/status``
subresource (conditions, startTime, replicaStatuses). The real scheduler places those pods
on kwok nodes and kwok runs them; every read of the reconciler goes through the real API.
With the operator itself: tests/cluster/test_pytorchjob_operator.py (optional)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.cluster import KubeCluster, Reconcilers
from support.helpers import wait_until
from support.reconciler_env import commit_all, cycle_until, gang_op, small_repo

from reconciler.adapters.kube import Kube, list_pytorchjobs
from reconciler.core.decision.cycle import memory_from_status
from reconciler.core.decision.render import ANNOTATION_PHASE
from reconciler.core.observation.observe import ObservedReason
from reconciler.core.reporting.status import operation_path, read_status, render_status
from reconciler.core.types import Phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

GPU = "nvidia.com/gpu"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
OP = "d/train"
NAME = "d-train-g1"
ENDED = "2026-01-01T11:40:00Z"


def make_repo(root: Path, kubeconfig: Path, namespace: str, *, prune: bool = False) -> Path:
    return small_repo(
        root,
        kubeconfig,
        namespace,
        {"train": gang_op(2, 2, backend="pytorchjob")},
        org_extra="prune:\n  enabled: true\n  allowMassPrune: true\n" if prune else "",
    )


def _get(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    got: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, NAME
    )
    return got


def write_status(api: client.ApiClient, namespace: str, status: dict[str, Any]) -> None:
    """The operator's status write: the ``/status`` subresource."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        NAME,
        {"status": status},
        _content_type="application/merge-patch+json",
    )


def condition(kind: str, at: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": f"PyTorchJob{kind}",
        "message": message or f"PyTorchJob {NAME} is {kind.lower()}.",
        "lastTransitionTime": at,
        "lastUpdateTime": at,
    }


def create_operator_pods(api: client.ApiClient, namespace: str) -> None:
    """The pods the operator v1.8.1 creates for the PyTorchJob (``createNewPod``): one per
    replica, named ``<job>-<type>-<index>``, the replica template's labels plus the
    operator's, owned by the PyTorchJob (so its deletion deletes them)."""
    obj = _get(api, namespace)
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "name": NAME,
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    core = client.CoreV1Api(api)
    for rtype, spec in obj["spec"]["pytorchReplicaSpecs"].items():
        kind = rtype.lower()
        for index in range(int(spec["replicas"])):
            template = spec["template"]
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels.update(
                {
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    "training.kubeflow.org/job-name": NAME,
                    "training.kubeflow.org/replica-type": kind,
                    "training.kubeflow.org/replica-index": str(index),
                }
            )
            if kind == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            pod_spec = dict(template["spec"])
            pod_spec["restartPolicy"] = "Never"  # the replica spec's restartPolicy
            body = {
                "metadata": {
                    "name": f"{NAME}-{kind}-{index}",
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": (template.get("metadata") or {}).get("annotations") or {},
                    "ownerReferences": [owner],
                },
                "spec": pod_spec,
            }
            core.create_namespaced_pod(namespace, body)


def test_a_pytorchjob_is_created_listed_observed_and_annotated(
    kube_cluster: KubeCluster,
    pytorchjob_crd_installed: client.ApiClient,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    api = pytorchjob_crd_installed
    repo = make_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace)
    reconciler = reconcilers.start(repo)
    first = cycle_until(
        reconciler, lambda r: r.dispatched == (OP,), timeout=60, what="the dispatch"
    )
    assert not first.failed
    state = first.states[OP]
    assert (state.kind, state.phase, state.pods) == ("PyTorchJob", Phase.DISPATCHED, 2)
    obj = _get(api, namespace)
    assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dispatch-reconciler"
    assert obj["metadata"]["annotations"]["reconciler.dev/operation-id"] == OP
    assert state.uid == obj["metadata"]["uid"]
    kube = Kube(kube_cluster.api_client())
    assert [o["metadata"]["name"] for o in list_pytorchjobs(kube)] == [NAME]

    # listed (the watch cache) and observed: no operator pods yet
    listed = cycle_until(
        reconciler,
        lambda r: r.states[OP].reason is ObservedReason.PENDING_POD,
        timeout=30,
        what="the PyTorchJob listed",
    )
    assert listed.dispatched == () and listed.states[OP].uid == state.uid

    # the operator's part: Created, then its pods, which kwok runs on the gang nodes
    started = "2026-01-01T11:00:00Z"
    write_status(api, namespace, {"conditions": [condition("Created", started)]})
    create_operator_pods(api, namespace)
    running = cycle_until(
        reconciler,
        lambda r: r.states[OP].phase is Phase.RUNNING,
        timeout=60,
        what="both pods running",
    )
    assert running.states[OP].pod == f"{NAME}-master-0"
    assert running.states[OP].node in gang_nodes
    assert running.states[OP].requests == {GPU: 4}
    write_status(
        api,
        namespace,
        {
            "startTime": started,
            "conditions": [condition("Created", started), condition("Running", started)],
            "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 1}},
        },
    )
    # running: the PyTorchJob's own status says so, no phase is written onto it
    assert reconciler.wait_writes(10)
    assert ANNOTATION_PHASE not in _get(api, namespace)["metadata"]["annotations"]

    # the run ends when the operator says so: its Succeeded condition's time is its end
    write_status(
        api,
        namespace,
        {
            "completionTime": ENDED,
            "conditions": [
                condition("Created", started),
                {**condition("Running", started), "status": "False"},
                condition("Succeeded", ENDED),
            ],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"active": 1}},
        },
    )
    done = cycle_until(
        reconciler,
        lambda r: r.states[OP].phase is Phase.SUCCEEDED,
        timeout=30,
        what="Succeeded",
    )
    assert done.states[OP].finished_at == ENDED
    assert done.states[OP].started_at == started
    # the end of the run is written onto it
    wait_until(
        lambda: (
            _get(api, namespace)["metadata"]["annotations"].get(ANNOTATION_PHASE) == "Succeeded"
        ),
        timeout=30,
        what="the phase annotation on the PyTorchJob",
    )
    (entry,) = [e for e in reconciler.memory.ledger if e.operation == OP]
    assert entry.end.isoformat() == "2026-01-01T11:40:00+00:00"
    assert entry.requests == {GPU: 4}
    # a fresh list (no watch) says the same
    fresh = reconcilers.start(repo, watch=False)
    assert fresh.run_once().states[OP].phase is Phase.SUCCEEDED


def test_a_restart_adopts_it_and_a_deleted_operation_prunes_it(
    kube_cluster: KubeCluster,
    pytorchjob_crd_installed: client.ApiClient,
    namespace: str,
    gang_nodes: list[str],
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    api = pytorchjob_crd_installed
    repo = make_repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace, prune=True)
    reconciler = reconcilers.start(repo)
    first = cycle_until(
        reconciler, lambda r: r.dispatched == (OP,), timeout=60, what="the dispatch"
    )
    uid = first.states[OP].uid
    create_operator_pods(api, namespace)
    assert first.plan is not None
    files = render_status(first.compiled, first.plan, first.states)  # type: ignore[arg-type]
    assert b"workloadKind: PyTorchJob" in files[operation_path("d/train")]
    reconciler.close()

    # a new process, from the status branch: it finds the PyTorchJob, creates no other
    restarted = reconcilers.start(repo)
    restarted.seed(memory_from_status(read_status(files)))
    adopted = cycle_until(
        restarted,
        lambda r: r.states[OP].phase is Phase.RUNNING,
        timeout=60,
        what="the restarted reconciler to see it running",
    )
    assert adopted.dispatched == () and adopted.states[OP].uid == uid
    assert adopted.states[OP].kind == "PyTorchJob"
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    assert [o["metadata"]["uid"] for o in listed["items"]] == [uid]
    # a create that meets the existing object adopts it (AlreadyExists)
    kube = Kube(kube_cluster.api_client())
    again = kube.create_or_adopt(
        {k: v for k, v in _get(api, namespace).items() if k in ("apiVersion", "kind", "spec")}
        | {"metadata": {"name": NAME, "namespace": namespace}}
    )
    assert (again.kind, again.created, again.uid) == ("PyTorchJob", False, uid)

    # the operation is deleted from the repo: prune deletes its PyTorchJob, and the
    # garbage collector its pods
    (repo / "projects/d/operations/train.yaml").unlink()
    commit_all(repo, "remove train")
    pruned = cycle_until(restarted, lambda r: OP in r.stopped, timeout=30, what="the prune")
    assert pruned.states[OP].phase is Phase.STOPPED

    def gone() -> bool:
        try:
            _get(api, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_until(gone, timeout=60, what="the PyTorchJob deleted")
    core = client.CoreV1Api(api)
    wait_until(
        lambda: (
            not core.list_namespaced_pod(
                namespace, label_selector=f"training.kubeflow.org/job-name={NAME}"
            ).items
        ),
        timeout=90,
        what="its pods deleted by the garbage collector",
    )
