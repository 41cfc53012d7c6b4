"""``run.distributed.backend: pytorchjob`` renders a Kubeflow PyTorchJob: Master 1 and
Worker N-1 from one pod template, no rendezvous env of ours (the operator sets it). The
schema check runs against the real CRD (training-operator v1.8.1) when it can be fetched;
tests/cluster/test_pytorchjob_crd.py creates the objects on a real apiserver."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.render_kubeflow import render_pytorchjob, uses_pytorchjob
from reconciler.core.types import CompiledOperation

FILES = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: gpu\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/gpu.yaml": "kind: Queue\ncluster: local\nquota:\n  nvidia.com/gpu: 8\n",
    "projects/p/project.yaml": "kind: Project\n",
}
RUN = (
    "kind: Operation\nrun:\n  kind: job\n  container:\n    image: img\n"
    "    command: [torchrun, train.py]\n    resources:\n      limits:\n"
    "        nvidia.com/gpu: 2\n"
)
DISPATCHED = datetime(2026, 12, 3, 12, tzinfo=UTC)
RENDEZVOUS = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES", "PET_NODE_RANK"}


def op(extra: str = "", replicas: int = 4) -> CompiledOperation:
    body = RUN + f"  replicas: {replicas}\n  distributed:\n    backend: pytorchjob\n" + extra
    compiled = compile_repo(repo({**FILES, "projects/p/operations/t.yaml": body}))
    assert compiled.errors == () and compiled.rejected == (), (
        compiled.errors,
        [r.message for r in compiled.rejected],
    )
    (found,) = compiled.operations
    return found


def render(o: CompiledOperation) -> dict[str, Any]:
    rendered = render_pytorchjob(o, {}, config_version="c1", dispatched_at=DISPATCHED)
    (manifest,) = rendered.manifests
    return dict(manifest)


def test_master_and_workers_share_one_template() -> None:
    o = op()
    assert uses_pytorchjob(o)
    pj = render(o)
    assert (pj["apiVersion"], pj["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert pj["metadata"]["name"] == "p-t-g1"
    assert pj["metadata"]["annotations"]["reconciler.dev/operation-id"] == "p/t"
    specs = pj["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    assert specs["Master"]["template"] == specs["Worker"]["template"]
    assert specs["Master"]["restartPolicy"] == "Never"  # one failed pod fails the run
    assert pj["spec"]["runPolicy"]["backoffLimit"] == 0
    template = specs["Master"]["template"]
    assert "restartPolicy" not in template["spec"]  # set from the replica spec
    assert template["metadata"]["labels"]["reconciler.dev/operation"] == "t"
    (main,) = [c for c in template["spec"]["containers"] if c["name"] == "pytorch"]
    assert main["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500, "protocol": "TCP"}]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "2"
    # the operator sets the rendezvous env on every pod: none of ours to conflict with it
    assert not RENDEZVOUS & {e["name"] for e in main.get("env") or []}


def test_retries_restart_in_place_and_deadlines_go_to_the_run_policy() -> None:
    pj = render(op("  maxRetries: 2\n  timeout: 1h\n  ttl: 2h\n"))
    assert pj["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    policy = pj["spec"]["runPolicy"]
    assert policy["backoffLimit"] == 2
    assert policy["activeDeadlineSeconds"] == 3600
    assert policy["ttlSecondsAfterFinished"] == 7200


def test_a_single_replica_has_no_worker_and_the_port_is_the_distributed_port() -> None:
    body = RUN + "  distributed:\n    backend: pytorchjob\n    port: 1234\n"
    compiled = compile_repo(repo({**FILES, "projects/p/operations/t.yaml": body}))
    (o,) = compiled.operations
    pj = render(o)
    assert set(pj["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    (main,) = pj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert main["ports"][-1]["containerPort"] == 1234


def test_an_indexed_job_op_is_not_rendered_as_a_pytorchjob() -> None:
    body = RUN + "  replicas: 2\n"
    compiled = compile_repo(repo({**FILES, "projects/p/operations/t.yaml": body}))
    (o,) = compiled.operations
    assert not uses_pytorchjob(o)
    with pytest.raises(ValueError, match="does not use the pytorchjob backend"):
        render(o)


@pytest.mark.slow
def test_the_rendering_validates_against_the_training_operator_crd_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from support.kubeflow_crd import CrdUnavailable, pytorchjob_crd, pytorchjob_schema

    try:
        crd = pytorchjob_crd()
    except CrdUnavailable as exc:
        pytest.skip(f"the PyTorchJob CRD (training-operator v1.8.1) is not available: {exc}")
    schema = pytorchjob_schema(crd)
    for o in (op(), op(replicas=1), op("  maxRetries: 3\n")):
        jsonschema.validate(render(o), schema)
    bad = render(op())
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_render_operation_renders_the_pytorchjob_for_that_backend() -> None:
    from reconciler.core.decision.render import render_operation

    rendered = render_operation(op(), {}, config_version="c1", dispatched_at=DISPATCHED)
    assert [m["kind"] for m in rendered.manifests] == ["PyTorchJob"]  # no headless Service
    assert rendered.job == render(op())
