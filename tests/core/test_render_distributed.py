"""Rendering a distributed operation: one Indexed Job and a headless Service, with the
framework's rendezvous environment (issue 14)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from support.builders import World, run_op
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import (
    ANNOTATION_COMPLETION_INDEX,
    LABEL_WORKLOAD,
    render_operation,
    workload_name,
)
from reconciler.core.observation.observe import observe_workloads
from reconciler.core.plan import plan_repo
from reconciler.core.reporting.status import build_status
from reconciler.core.types import (
    CompiledOperation,
    Distributed,
    DistributedBackend,
    Framework,
)

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
TORCH = Distributed()
INDEX = {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_COMPLETION_INDEX}']"}}


def _op(
    replicas: int = 4,
    distributed: Distributed | None = TORCH,
    run: dict[str, Any] | None = None,
    name: str = "ddp",
) -> CompiledOperation:
    pod = {"nvidia.com/gpu": Decimal(2)}
    container = {
        "image": "pytorch/pytorch:2.4",
        "command": ["torchrun", "train.py"],
        "env": {"EPOCHS": "3"},
        "resources": {"limits": {"nvidia.com/gpu": 2}},
    }
    return run_op(
        name,
        {"replicas": replicas, "container": container, **(run or {})},
        requests={k: v * replicas for k, v in pod.items()},
        pod_requests=pod,
        replicas=replicas,
        distributed=distributed,
    )


def _render(op: CompiledOperation) -> tuple[Any, Any]:
    rendered = render_operation(op, {}, config_version="c", dispatched_at=NOW)
    job, service = rendered.manifests
    return job, service


def _env(job: Any) -> dict[str, Any]:
    (main,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in main["env"]}


def test_one_indexed_job_all_replicas_one_failure_fails_the_run() -> None:
    job, _ = _render(_op())
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 4
    assert spec["backoffLimitPerIndex"] == 0 and spec["maxFailedIndexes"] == 0
    assert "backoffLimit" not in spec  # the Job's default with backoffLimitPerIndex
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_max_retries_are_per_index() -> None:
    job, _ = _render(_op(run={"maxRetries": 2}))
    assert job["spec"]["backoffLimitPerIndex"] == 2 and job["spec"]["maxFailedIndexes"] == 0


def test_headless_service_names_every_pod() -> None:
    job, service = _render(_op())
    name = job["metadata"]["name"]
    assert name == "vision-ddp-g1"
    assert (service["apiVersion"], service["kind"]) == ("v1", "Service")
    assert service["metadata"]["name"] == name
    assert service["metadata"]["namespace"] == "vision"
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {LABEL_WORKLOAD: name},
        "publishNotReadyAddresses": True,
    }
    template = job["spec"]["template"]
    assert template["spec"]["subdomain"] == name
    # the selector matches the pods (and their labels are the Job's)
    assert template["metadata"]["labels"][LABEL_WORKLOAD] == name


def test_torch_environment() -> None:
    job, _ = _render(_op(distributed=Distributed(Framework.TORCH, port=23456)))
    env = _env(job)
    assert env["MASTER_ADDR"] == "vision-ddp-g1-0.vision-ddp-g1"
    assert env["MASTER_PORT"] == "23456"
    assert env["WORLD_SIZE"] == "4" and env["PET_NNODES"] == "4"
    assert env["RANK"] == INDEX and env["PET_NODE_RANK"] == INDEX
    assert env["EPOCHS"] == "3"  # the operation's own env is kept, before the framework's
    names = list(env)
    assert names.index("EPOCHS") < names.index("MASTER_ADDR")


def test_jax_environment() -> None:
    job, _ = _render(_op(replicas=2, distributed=Distributed(Framework.JAX)))
    env = _env(job)
    assert env["JAX_COORDINATOR_ADDRESS"] == "vision-ddp-g1-0.vision-ddp-g1:29500"
    assert env["JAX_NUM_PROCESSES"] == "2"
    assert env["JAX_PROCESS_ID"] == INDEX
    assert "MASTER_ADDR" not in env and "RANK" not in env


def test_framework_none_gets_only_the_service_and_the_index() -> None:
    job, service = _render(_op(replicas=3, distributed=Distributed(Framework.NONE)))
    env = _env(job)
    assert not {"MASTER_ADDR", "RANK", "JAX_PROCESS_ID", "WORLD_SIZE"} & set(env)
    assert job["spec"]["completionMode"] == "Indexed"
    assert service["spec"]["clusterIP"] == "None"


def test_one_replica_with_distributed_is_still_an_indexed_job() -> None:
    job, _ = _render(_op(replicas=1))
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 1
    assert _env(job)["WORLD_SIZE"] == "1"


def test_single_pod_operation_has_no_index_and_no_service() -> None:
    rendered = render_operation(
        _op(replicas=1, distributed=None), {}, config_version="c", dispatched_at=NOW
    )
    (job,) = rendered.manifests
    assert "completionMode" not in job["spec"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["parallelism"] == 1
    assert "subdomain" not in job["spec"]["template"]["spec"]


@pytest.mark.parametrize("replicas", [2, 10, 100, 100_000])
def test_long_names_leave_room_for_the_pod_hostname(replicas: int) -> None:
    name = "x" * 63
    job, service = _render(_op(replicas=replicas, name=name))
    job_name = job["metadata"]["name"]
    assert len(f"{job_name}-{replicas - 1}") <= 63  # the pod's hostname is a DNS label
    assert service["metadata"]["name"] == job_name
    assert job_name.endswith("-g1")
    # stable, and still distinct from the single-pod name of the same operation
    assert job_name == workload_name("vision", name, 1, replicas)
    assert workload_name("vision", name, 1) != job_name or replicas == 1


def test_short_names_are_unchanged_by_replicas() -> None:
    assert (
        workload_name("vision", "ddp", 2, 8)
        == workload_name("vision", "ddp", 2)
        == ("vision-ddp-g2")
    )


def test_render_is_deterministic_and_replicas_change_the_hash() -> None:
    a = render_operation(_op(), {}, config_version="c", dispatched_at=NOW)
    b = render_operation(_op(), {}, config_version="c", dispatched_at=NOW)
    assert a == b
    c = render_operation(_op(replicas=8), {}, config_version="c", dispatched_at=NOW)
    assert c.spec_hash != a.spec_hash


BASE = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: gpu\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/gpu.yaml": "kind: Queue\ncluster: local\n",
    "projects/p/project.yaml": "kind: Project\n",
    "connections/b.yaml": "kind: Connection\nbucket:\n  url: s3://b\n  env:\n    RANK: '1'\n",
}


def test_env_a_framework_sets_is_an_error_where_it_is_set() -> None:
    op = (
        "kind: Operation\nrun:\n  kind: job\n  replicas: 2\n  container:\n    image: i\n"
        "    env:\n      MASTER_PORT: '1'\n"
    )
    errors = [
        str(e) for e in compile_repo(repo({**BASE, "projects/p/operations/t.yaml": op})).errors
    ]
    assert errors == [
        "projects/p/operations/t.yaml:8:20: environment variable 'MASTER_PORT' is set for "
        "every replica by run.distributed (framework torch); run.container.env cannot set it too"
    ]
    # the same name is fine for a framework that does not set it, and for a single pod
    for extra in ("  distributed:\n    framework: jax\n", ""):
        body = op.replace("  replicas: 2\n", "  replicas: 2\n" + extra if extra else "")
        compiled = compile_repo(repo({**BASE, "projects/p/operations/t.yaml": body}))
        assert compiled.errors == ()


def test_connection_env_a_framework_sets_is_an_error_at_the_connection() -> None:
    op = (
        "kind: Operation\nrun:\n  kind: job\n  replicas: 2\n  connections: [b]\n"
        "  container:\n    image: i\n"
    )
    errors = [
        str(e) for e in compile_repo(repo({**BASE, "projects/p/operations/t.yaml": op})).errors
    ]
    assert len(errors) == 1 and errors[0].startswith("projects/p/operations/t.yaml:5:17:")
    assert "connection 'b' cannot set it too" in errors[0]


def test_compiled_then_rendered() -> None:
    op = (
        "kind: Operation\nrun:\n  kind: batch\n  replicas: 3\n  distributed:\n    port: 1234\n"
        "  container:\n    image: i\n    resources:\n      limits: {nvidia.com/gpu: 1}\n"
    )
    compiled = compile_repo(repo({**BASE, "projects/p/operations/t.yaml": op}))
    (c,) = compiled.operations
    assert c.distributed == Distributed(Framework.TORCH, 1234, DistributedBackend.JOB)
    rendered = render_operation(c, compiled.connections, config_version="v", dispatched_at=NOW)
    job, service = rendered.manifests
    assert job["spec"]["parallelism"] == 3
    assert _env(job)["MASTER_ADDR"] == "p-t-g1-0.p-t-g1"
    assert service["spec"]["selector"] == {LABEL_WORKLOAD: "p-t-g1"}


def test_observation_counts_every_replica_of_the_rendered_job() -> None:
    """What the planner counts for a dispatched gang, read back from its Job: the pod
    template's request times parallelism, and its pods."""
    op = _op(replicas=4)
    job, _ = _render(op)
    (state,) = observe_workloads("local", [job], [])
    assert state.pods == 4
    assert state.requests == {"nvidia.com/gpu": Decimal(8)} == op.requests
    observed = state.to_observed()
    assert observed.pods == 4 and observed.requests == {"nvidia.com/gpu": Decimal(8)}
    single = render_operation(
        _op(replicas=1, distributed=None), {}, config_version="c", dispatched_at=NOW
    )
    (state,) = observe_workloads("local", [single.job], [])
    assert state.pods == 1 and state.requests == {"nvidia.com/gpu": Decimal(2)}


def test_the_status_branch_names_a_long_gangs_workload_as_rendered() -> None:
    long_name = "a-very-long-operation-name-for-a-distributed-training-run"
    w = World().cluster("local").queue("q")
    w.op(f"vision/{long_name}", gpu=1).replicas(16)
    repo = w.repo()
    (op,) = repo.operations
    rendered = render_operation(op, {}, config_version="c", dispatched_at=NOW)
    (record,) = build_status(repo, plan_repo(repo, [], NOW), {})
    assert record.workload == rendered.name and len(f"{rendered.name}-15") <= 63
