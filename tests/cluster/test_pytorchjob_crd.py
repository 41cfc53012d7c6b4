"""The pytorchjob backend's rendering against the real PyTorchJob CRD of the Kubeflow
Training Operator v1.8.1, installed into the dev apiserver: the apiserver accepts the
rendered objects (server-side dry-run, so nothing is stored) with nothing pruned, and
rejects an invalid one. No operator runs here, so no pod starts: what is tested is the
schema, not the operator's behaviour (docs/dispatch.md, "The pytorchjob backend")."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.kubeflow_crd import crd_installed
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.render_kubeflow import render_pytorchjob

pytestmark = pytest.mark.cluster


def _rendered(namespace: str, replicas: int, extra: str = "") -> dict[str, Any]:
    files = {
        "reconciler.yaml": "kind: Org\ndefaults:\n  queue: gpu\n",
        "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
        "queues/gpu.yaml": "kind: Queue\ncluster: local\nquota:\n  nvidia.com/gpu: 8\n",
        "projects/p/project.yaml": f"kind: Project\nnamespace: {namespace}\n",
        "projects/p/operations/t.yaml": (
            "kind: Operation\nrun:\n  kind: job\n  container:\n    image: busybox\n"
            "    command: [torchrun, --nnodes=$(PET_NNODES), train.py]\n"
            "    resources:\n      limits:\n        nvidia.com/gpu: 2\n"
            f"  replicas: {replicas}\n  distributed:\n    backend: pytorchjob\n{extra}"
        ),
    }
    compiled = compile_repo(repo(files))
    assert compiled.valid and not compiled.rejected, compiled.errors
    (op,) = compiled.operations
    rendered = render_pytorchjob(op, {}, config_version="c1", dispatched_at=datetime.now(UTC))
    return dict(rendered.job)


def _pruned(sent: Any, got: Any, path: str = "spec") -> list[str]:
    """Paths of ``sent`` missing from, or changed in, ``got``."""
    if isinstance(sent, dict) and isinstance(got, dict):
        return [p for k, v in sent.items() for p in _pruned(v, got.get(k), f"{path}.{k}")]
    if isinstance(sent, list) and isinstance(got, list) and len(sent) == len(got):
        pairs = enumerate(zip(sent, got, strict=True))
        return [p for i, (a, b) in pairs for p in _pruned(a, b, f"{path}[{i}]")]
    return [] if sent == got else [path]


def _dry_run(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    got: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", body, dry_run="All"
    )
    return got


def test_the_apiserver_accepts_the_rendered_pytorchjob(
    pytorchjob_crd_installed: client.ApiClient, namespace: str
) -> None:
    api = pytorchjob_crd_installed
    for replicas, extra in ((4, ""), (1, ""), (3, "  maxRetries: 2\n  timeout: 2h\n")):
        body = _rendered(namespace, replicas, extra)
        got = _dry_run(api, namespace, body)
        # accepted, and nothing we sent was pruned as unknown by the structural schema
        # (the apiserver adds the schema's defaults, e.g. runPolicy.suspend: false)
        assert _pruned(body["spec"], got["spec"]) == [], replicas
        assert got["spec"]["runPolicy"]["suspend"] is False
        assert got["metadata"]["labels"] == body["metadata"]["labels"]
        assert got["metadata"]["annotations"] == body["metadata"]["annotations"]
    # dry-run stored nothing
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs"
    )
    assert listed["items"] == []


def test_the_apiserver_rejects_an_invalid_pytorchjob(
    pytorchjob_crd_installed: client.ApiClient, namespace: str
) -> None:
    body = _rendered(namespace, 4)
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "three"
    with pytest.raises(ApiException) as err:
        _dry_run(pytorchjob_crd_installed, namespace, body)
    assert err.value.status == 422
    assert "pytorchReplicaSpecs.Worker.replicas" in str(err.value.body)
    body = _rendered(namespace, 4)
    del body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    with pytest.raises(ApiException) as err:
        _dry_run(pytorchjob_crd_installed, namespace, body)
    assert err.value.status == 422
    assert "containers" in str(err.value.body)


def test_the_reconciler_sees_whether_the_cluster_serves_the_crd(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """Without the CRD a pytorchjob op waits BackendUnavailable; once it is installed, the
    same cycle plans it and the runtime creates the PyTorchJob (and no Job)."""
    from support.reconciler_env import gang_op, make_reconciler, small_repo

    from reconciler.adapters.kube import Kube
    from reconciler.core.plan import PendingReason

    ops = {"t": gang_op(2, 2, backend="pytorchjob", selector=None)}
    repo = small_repo(tmp_path, kube_cluster.kubeconfig, namespace, ops, queue="gpu", project="p")
    kube = Kube(kube_cluster.api_client())
    # discovery follows a CRD's deletion by an earlier test within a moment
    wait_until(
        lambda: kube.served_backends(["pytorchjob"]) == frozenset(),
        timeout=30,
        what="the cluster to serve no PyTorchJob",
    )
    reconciler = make_reconciler(repo)
    try:
        before = reconciler.run_once()
        assert before.plan is not None
        (entry,) = before.plan.pending
        assert entry.reason is PendingReason.BACKEND_UNAVAILABLE
        assert "does not serve kubeflow.org/v1 PyTorchJob" in entry.message
        with _installed(kube_cluster):
            # discovery follows an Established CRD within a moment
            wait_until(
                lambda: kube.served_backends(["pytorchjob"]) == frozenset({"pytorchjob"}),
                timeout=30,
                what="the cluster to serve PyTorchJob",
            )
            # a CRD just established may answer its first lists with "storage is
            # (re)initializing": the cluster is unreachable that cycle, and tried again after
            # its backoff (docs/reliability.md, R2); the first cycle that reads it plans it
            results: list[Any] = []

            def read() -> bool:
                results.append(reconciler.run_once())
                return all(h.reachable for h in results[-1].clusters)

            wait_until(read, timeout=60, what="a cycle that reads the cluster again")
            after = results[-1]
            assert after.plan is not None and after.plan.pending == ()
            assert not after.failed and after.dispatched == ("p/t",)
            assert after.states["p/t"].kind == "PyTorchJob"
            made = kube.list_labelled("PyTorchJob", "reconciler.dev/operation=t", namespace)
            assert [o["metadata"]["name"] for o in made] == ["p-t-g1"]
            # the watch cache lists it, though the CRD came after the reconciler started
            listed = reconciler.run_once()
            assert (
                listed.dispatched == () and listed.states["p/t"].uid == made[0]["metadata"]["uid"]
            )
    finally:
        reconciler.close()
    assert not kube.list_labelled("Job", "reconciler.dev/operation=t", namespace)


def _installed(kube_cluster: KubeCluster) -> Any:
    return crd_installed(kube_cluster)
