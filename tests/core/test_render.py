"""The pure renderer: operations become Jobs (and Services) deterministically."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from support.builders import run_op

from reconciler.core.decision.render import (
    ANNOTATION_COMMIT,
    ANNOTATION_DISPATCHED_AT,
    ANNOTATION_SPEC_HASH,
    LABEL_MANAGED_BY,
    LABEL_OPERATION,
    LABEL_PROJECT,
    LABEL_QUEUE,
    SANDBOX_DEFAULT_TIMEOUT,
    render_operation,
    spec_hash,
    workload_name,
)
from reconciler.core.types import CompiledOperation, ConnectionSpec, RunKind

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def _op(
    kind: RunKind = RunKind.JOB, run: dict[str, Any] | None = None, **kw: Any
) -> CompiledOperation:
    full_run = {
        "kind": kind.value,
        "container": {
            "image": "pytorch/pytorch:2.4",
            "command": ["python", "train.py"],
            "env": {"EPOCHS": "3"},
            "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "4"}},
        },
        "environment": {
            "nodeSelector": {"gpu.type": "a100"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "annotations": {"reconciler.dev/simulated-duration": "5s"},
            "labels": {"team": "vision"},
        },
        **(run or {}),
    }
    requests = {"nvidia.com/gpu": 1, "cpu": 4}
    return run_op("train-1", full_run, kind=kind, requests=requests, **kw)


def _render(op: CompiledOperation, connections: dict[str, ConnectionSpec] | None = None) -> Any:
    return render_operation(op, connections or {}, config_version="c", dispatched_at=NOW)


def test_job_carries_identity_labels_annotations_and_placement() -> None:
    rendered = render_operation(_op(), {}, config_version="abc123", dispatched_at=NOW)
    (job,) = rendered.manifests
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    meta = job["metadata"]
    assert meta["name"] == "vision-train-1-g1" == rendered.name
    assert meta["namespace"] == "vision"
    labels = meta["labels"]
    assert labels[LABEL_MANAGED_BY] == "dispatch-reconciler"
    assert (labels[LABEL_PROJECT], labels[LABEL_OPERATION]) == ("vision", "train-1")
    assert labels[LABEL_QUEUE] == "team-a"
    assert labels["team"] == "vision"
    assert meta["annotations"][ANNOTATION_COMMIT] == "abc123"
    assert meta["annotations"][ANNOTATION_DISPATCHED_AT] == "2026-12-03T09:00:00Z"
    assert meta["annotations"][ANNOTATION_SPEC_HASH] == rendered.spec_hash
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"]["reconciler.dev/simulated-duration"] == "5s"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"gpu.type": "a100"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    (main,) = spec["containers"]
    assert main["image"] == "pytorch/pytorch:2.4"
    assert main["command"] == ["python", "train.py"]
    assert main["resources"] == {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": "1"}}
    assert {"name": "EPOCHS", "value": "3"} in main["env"]
    assert job["spec"]["backoffLimit"] == 0
    assert "activeDeadlineSeconds" not in job["spec"]


def test_rendering_is_deterministic_and_hash_ignores_commit_and_time() -> None:
    a = render_operation(_op(), {}, config_version="c1", dispatched_at=NOW)
    b = render_operation(_op(), {}, config_version="c1", dispatched_at=NOW)
    assert json.dumps(a.manifests, sort_keys=True) == json.dumps(b.manifests, sort_keys=True)
    later = render_operation(_op(), {}, config_version="c2", dispatched_at=NOW.replace(hour=10))
    assert later.spec_hash == a.spec_hash
    assert spec_hash(_op(run={"timeout": "1h"}), {}) != a.spec_hash


def test_generation_bump_gives_a_new_workload_name() -> None:
    assert workload_name("vision", "train-1", 1) != workload_name("vision", "train-1", 2)
    long = workload_name("a" * 40, "b" * 40, 12)
    assert len(long) <= 63 and long.endswith("-g12")
    assert long == workload_name("a" * 40, "b" * 40, 12)
    assert long != workload_name("a" * 40, "b" * 39 + "c", 12)


def test_timeout_is_active_deadline_and_sandboxes_are_bounded() -> None:
    assert _render(_op(run={"timeout": "1h30m"})).job["spec"]["activeDeadlineSeconds"] == 5400
    sandbox = _render(_op(RunKind.SANDBOX))
    assert sandbox.job["spec"]["activeDeadlineSeconds"] == SANDBOX_DEFAULT_TIMEOUT


@pytest.mark.parametrize(("kind", "port"), [(RunKind.NOTEBOOK, 8888), (RunKind.SANDBOX, 8080)])
def test_long_running_kinds_get_a_service_for_their_port(kind: RunKind, port: int) -> None:
    job, service = _render(_op(kind)).manifests
    assert service["kind"] == "Service"
    assert service["metadata"]["name"] == job["metadata"]["name"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["port"] == port
    assert job["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == port


def test_batch_and_job_have_no_service() -> None:
    for kind in (RunKind.JOB, RunKind.BATCH):
        assert len(_render(_op(kind)).manifests) == 1


def test_connections_render_into_env_volumes_and_mounts() -> None:
    connections = {
        "datasets": ConnectionSpec(
            "datasets", "volume", {"claimName": "datasets", "mountPath": "/data", "readOnly": True}
        ),
        "creds": ConnectionSpec("creds", "secret", {"name": "aws-creds", "envFrom": True}),
        "cfg": ConnectionSpec("cfg", "configMap", {"name": "train-cfg", "mountPath": "/etc/cfg"}),
        "s3": ConnectionSpec(
            "s3", "bucket", {"url": "s3://ml/data", "secret": "s3-creds", "urlEnv": "DATA_URL"}
        ),
        "code": ConnectionSpec(
            "code",
            "git",
            {"url": "https://git.example/ml.git", "revision": "v1", "mountPath": "/code"},
        ),
    }
    pod = _render(_op(connections=tuple(connections)), connections).job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["conn-datasets"]["persistentVolumeClaim"] == {
        "claimName": "datasets",
        "readOnly": True,
    }
    assert volumes["conn-cfg"]["configMap"] == {"name": "train-cfg"}
    assert volumes["conn-code"] == {"name": "conn-code", "emptyDir": {}}
    main = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/data"]["readOnly"] is True
    assert "/etc/cfg" in mounts and "/code" in mounts
    assert {"secretRef": {"name": "aws-creds"}} in main["envFrom"]
    assert {"secretRef": {"name": "s3-creds"}} in main["envFrom"]
    assert {"name": "DATA_URL", "value": "s3://ml/data"} in main["env"]
    (init,) = pod["initContainers"]
    assert {"name": "GIT_REVISION", "value": "v1"} in init["env"]


def test_shared_memory_becomes_a_memory_backed_volume() -> None:
    pod = _render(_op(run={"container": {"image": "x", "shmSize": "8Gi"}})).job["spec"]["template"][
        "spec"
    ]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


GIT = ConnectionSpec("code", "git", {"url": "https://git.example/ml.git", "mountPath": "/code"})


def test_the_git_clone_is_hardened_and_runs_as_the_main_containers_non_root_user() -> None:
    def init(security: dict[str, Any]) -> Any:
        run = {"container": {"image": "x", "securityContext": security}, "connections": ["code"]}
        op = _op(run=run, connections=("code",))
        return _render(op, {"code": GIT}).job["spec"]["template"]["spec"]["initContainers"][0]

    hardened = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert init({})["securityContext"] == hardened
    assert init({"runAsUser": 0, "privileged": True})["securityContext"] == hardened
    assert init({"runAsUser": 1000, "runAsGroup": 100})["securityContext"] == {
        **hardened,
        "runAsUser": 1000,
        "runAsNonRoot": True,
        "runAsGroup": 100,
    }


def test_host_namespaces_reach_the_pod_and_the_users_keys_never_replace_the_reconcilers() -> None:
    environment = {"hostNetwork": True, "hostPID": False, "labels": {"team": "a"}}
    job = _render(_op(run={"environment": environment})).job
    pod = job["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and "hostPID" not in pod and "hostIPC" not in pod
    names = [e["name"] for e in pod["containers"][0]["env"]]
    assert names[:2] == ["RECONCILER_OPERATION", "RECONCILER_QUEUE"]
    assert len(names) == len(set(names))
    assert job["metadata"]["labels"][LABEL_MANAGED_BY] == "dispatch-reconciler"


def test_every_field_of_the_rendered_pod_maps_back_to_the_spec() -> None:
    from reconciler.core.decision.render import pod_field_origin, render_pod

    spec = {
        "run": {
            "kind": "notebook",
            "container": {
                "image": "x",
                "shmSize": "1Gi",
                "securityContext": {"privileged": True},
            },
            "environment": {"hostIPC": True, "annotations": {"a": "b"}},
            "connections": ["data", "code"],
        }
    }
    data = ConnectionSpec("data", "volume", {"hostPath": "/srv", "mountPath": "/d"})
    pod = render_pod(spec, RunKind.NOTEBOOK, [data, GIT], operation="p/o", queue="q")

    def origin(*path: str | int) -> tuple[tuple[str | int, ...], str | None]:
        found = pod_field_origin(spec, pod, path)
        return found.path, found.connection

    sc = ("spec", "containers", 0, "securityContext", "privileged")
    assert origin(*sc) == (("run", "container", "securityContext", "privileged"), None)
    assert origin("spec", "hostIPC") == (("run", "environment", "hostIPC"), None)
    assert origin("metadata", "annotations", "a") == (
        ("run", "environment", "annotations", "a"),
        None,
    )
    assert origin("spec", "volumes", 0, "hostPath") == (("run", "connections", 0), "data")
    assert origin("spec", "volumes", 2) == (("run", "container", "shmSize"), None)
    assert origin("spec", "initContainers", 0, "securityContext") == (
        ("run", "connections", 1),
        "code",
    )
    assert origin("spec", "containers", 0, "ports", 0) == (("run", "kind"), None)
    assert origin("spec", "containers", 0, "volumeMounts", 1) == (("run", "connections", 1), "code")


def test_an_assigned_flavor_adds_its_labels_tolerations_and_label_not_to_the_hash() -> None:
    from dataclasses import replace

    from reconciler.core.decision.render import LABEL_FLAVOR
    from reconciler.core.types import FlavorSpec

    op = _op()
    h100 = FlavorSpec(
        "h100",
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gpu.type": "h100"},
        ({"key": "h100", "operator": "Exists", "effect": "NoSchedule"},),
    )
    plain = _render(op)
    flavored = _render(replace(op, flavor=h100))
    pod = flavored.job["spec"]["template"]["spec"]
    # the operation's own entries win (gpu.type: a100 stays); the flavor's are added
    assert pod["nodeSelector"] == {
        "gpu.type": "a100",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "h100", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert flavored.job["metadata"]["labels"][LABEL_FLAVOR] == "h100"
    assert flavored.job["spec"]["template"]["metadata"]["labels"][LABEL_FLAVOR] == "h100"
    assert LABEL_FLAVOR not in plain.job["metadata"]["labels"]
    # the plan's choice, not a change to the operation: the hash (syncStatus) is the same
    assert flavored.spec_hash == plain.spec_hash == spec_hash(op, {})
