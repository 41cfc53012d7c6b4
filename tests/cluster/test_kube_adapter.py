"""The kube adapter against the real control plane: rendered workloads are created once,
adopted on a repeated create, listed and watched by our label, and run to completion."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from support.builders import run_op
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.kube_objects import op as _op

from reconciler.adapters.kube import Kube, KubeError
from reconciler.core.decision.render import ANNOTATION_SPEC_HASH, render_operation
from reconciler.core.types import CompiledOperation, RunKind

pytestmark = pytest.mark.cluster


def test_create_adopt_list_and_complete(kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube(kube_cluster.api_client())
    rendered = render_operation(
        _op(namespace, "train-1"), {}, config_version="c0ffee", dispatched_at=datetime.now(UTC)
    )
    first = kube.create_or_adopt(rendered.job)
    assert first.created is True
    again = kube.create_or_adopt(rendered.job)
    assert (again.created, again.uid) == (False, first.uid)  # adopted, not duplicated
    assert again.annotations[ANNOTATION_SPEC_HASH] == rendered.spec_hash

    listed = kube.list_managed("Job")
    mine = [j for j in listed.items if j["metadata"]["namespace"] == namespace]
    assert [j["metadata"]["name"] for j in mine] == [rendered.name]
    assert listed.resource_version

    def complete() -> bool:
        job = kube.batch.read_namespaced_job(rendered.name, namespace)
        return bool(job.status.succeeded)

    wait_until(complete, timeout=60, what="the dispatched Job to succeed")
    pods = [p for p in kube.list_managed("Pod").items if p["metadata"]["namespace"] == namespace]
    assert len(pods) == 1
    assert pods[0]["status"]["phase"] == "Succeeded"
    assert pods[0]["metadata"]["labels"]["reconciler.dev/operation"] == "train-1"


def test_watch_reports_changes_after_a_resource_version(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    kube = Kube(kube_cluster.api_client())
    start = kube.list_managed("Job").resource_version
    rendered = render_operation(
        _op(namespace, "watched"), {}, config_version="c1", dispatched_at=datetime.now(UTC)
    )
    kube.create_or_adopt(rendered.job)
    seen = []
    for event in kube.watch_managed("Job", start, timeout_seconds=30):
        if event.object["metadata"]["name"] == rendered.name:
            seen.append(event.type)
            if event.object.get("status", {}).get("succeeded"):
                break
    assert seen[0] == "ADDED"
    assert "MODIFIED" in seen


def test_notebook_service_and_metadata_apply(kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube(kube_cluster.api_client())
    rendered = render_operation(
        _op(namespace, "nb", RunKind.NOTEBOOK),
        {},
        config_version="c2",
        dispatched_at=datetime.now(UTC),
    )
    results = [kube.create_or_adopt(m) for m in rendered.manifests]
    assert [r.kind for r in results] == ["Job", "Service"]
    commit = {"reconciler.dev/config-commit": "other"}
    with pytest.raises(KubeError) as conflict:  # set by the create: owned by its Update entry
        kube.apply_metadata("Job", namespace, rendered.name, annotations=commit)
    assert conflict.value.status == 409
    phase = {"reconciler.dev/phase": "Running"}
    kube.apply_metadata("Job", namespace, rendered.name, annotations=phase, force=True)
    job = kube.batch.read_namespaced_job(rendered.name, namespace)
    assert job.metadata.annotations["reconciler.dev/phase"] == "Running"
    assert job.metadata.annotations[ANNOTATION_SPEC_HASH] == rendered.spec_hash  # kept
    assert kube.delete_workload(namespace, rendered.name) is True
    assert kube.delete_workload(namespace, rendered.name) is False


def test_the_api_server_refuses_what_validate_now_refuses(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    """The ground truth behind three compile rules: each value refused below passed
    ``validate`` and is refused here: 422 Invalid, or 400 for a quantity the API server
    cannot even decode."""
    kube = Kube(kube_cluster.api_client())
    now = datetime.now(UTC)

    def refused(op: CompiledOperation) -> KubeError:
        rendered = render_operation(op, {}, config_version="c3", dispatched_at=now)
        with pytest.raises(KubeError) as caught:
            for manifest in rendered.manifests:
                kube.create_or_adopt(manifest)
        kube.delete_workload(namespace, rendered.name)
        return caught.value

    # quantities as Kubernetes parses them: ASCII digits (it trims spaces, as validate
    # does: " 2" is taken); resources it knows
    op = run_op(
        "q", {"container": {"image": "busybox", "resources": {"requests": {"memory": "\u0663Gi"}}}}
    )
    assert refused(replace(op, namespace=namespace)).status in (400, 422)
    spaced = run_op(
        "s", {"container": {"image": "busybox", "resources": {"requests": {"cpu": " 2"}}}}
    )
    rendered = render_operation(
        replace(spaced, namespace=namespace), {}, config_version="c3", dispatched_at=now
    )
    assert kube.create_or_adopt(rendered.job).created
    assert kube.delete_workload(namespace, rendered.name) is True
    op = run_op("r", {"container": {"image": "busybox", "resources": {"limits": {"CPU": "1"}}}})
    assert refused(replace(op, namespace=namespace)).status == 422
    # names end where they end: Go's "$" does not pass a final newline, as Python's does
    op = run_op("n", {"container": {"image": "busybox", "env": {"A\n": "x"}}})
    assert refused(replace(op, namespace=namespace)).status == 422
