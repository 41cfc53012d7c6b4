"""The pod parts presets may set reach the Job: service account, pull secrets, volumes and
mounts, init containers, native sidecars, backoffLimit and ttlSecondsAfterFinished; and
the observed requests of such a pod are counted as the compiler counts them."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from support.builders import run_op
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import render_operation
from reconciler.core.observation.observe import observe_workloads
from reconciler.core.quantity import pod_requests
from reconciler.core.types import CompiledOperation, ConnectionSpec

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def _op(run: dict[str, Any]) -> CompiledOperation:
    return run_op("train", run, queue="q")


def _job(run: dict[str, Any], connections: dict[str, ConnectionSpec] | None = None) -> Any:
    op = _op(run)
    if connections:
        op = dataclasses.replace(op, connections=tuple(connections))
    rendered = render_operation(op, connections or {}, config_version="c", dispatched_at=NOW)
    return rendered.job


def test_nothing_new_is_rendered_when_nothing_new_is_set() -> None:
    job = _job({"container": {"image": "x"}})
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and "ttlSecondsAfterFinished" not in spec
    pod = spec["template"]["spec"]
    for key in ("serviceAccountName", "imagePullSecrets", "initContainers", "volumes"):
        assert key not in pod
    assert "volumeMounts" not in pod["containers"][0]


def test_service_account_and_image_pull_secrets() -> None:
    job = _job(
        {
            "container": {"image": "x"},
            "environment": {"serviceAccountName": "trainer", "imagePullSecrets": ["a", "b"]},
        }
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer"
    assert pod["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]


def test_termination_becomes_backoff_limit_and_ttl_seconds_after_finished() -> None:
    job = _job({"container": {"image": "x"}, "maxRetries": 3, "ttl": "1h30m"})
    assert job["spec"]["backoffLimit"] == 3
    assert job["spec"]["ttlSecondsAfterFinished"] == 5400
    assert _job({"container": {"image": "x"}, "ttl": 0})["spec"]["ttlSecondsAfterFinished"] == 0


def test_volumes_follow_the_connections_and_mounts_follow_theirs() -> None:
    connections = {
        "data": ConnectionSpec("data", "volume", {"claimName": "data", "mountPath": "/data"})
    }
    job = _job(
        {
            "container": {
                "image": "x",
                "shmSize": "1Gi",
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg", "readOnly": True}],
            },
            "volumes": [
                {
                    "name": "cfg",
                    "configMap": {"name": "settings", "items": [{"key": "k", "path": "k"}]},
                },
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": 2}},
            ],
        },
        connections,
    )
    pod = job["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["conn-data", "dshm", "cfg", "tmp"]
    assert pod["volumes"][2]["configMap"] == {
        "name": "settings",
        "items": [{"key": "k", "path": "k"}],
    }
    assert pod["volumes"][3]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2"}
    mounts = pod["containers"][0]["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/data", "/dev/shm", "/cfg"]
    assert mounts[2] == {"name": "cfg", "mountPath": "/cfg", "readOnly": True}


def test_init_containers_then_native_sidecars_after_the_connections_checkouts() -> None:
    connections = {"code": ConnectionSpec("code", "git", {"url": "https://x/y.git"})}
    job = _job(
        {
            "container": {"image": "x"},
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [
                {
                    "name": "warm",
                    "image": "busybox",
                    "command": ["sh", "-c"],
                    "args": ["echo hi"],
                    "env": {"A": "1"},
                    "volumeMounts": [{"name": "shared", "mountPath": "/s", "subPath": "w"}],
                }
            ],
            "sidecars": [
                {
                    "name": "logs",
                    "image": "fluent-bit",
                    "workingDir": "/w",
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": 1}},
                    "securityContext": {"runAsUser": 1000},
                }
            ],
        },
        connections,
    )
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["main"]
    git, warm, logs = pod["initContainers"]
    assert git["name"] == "git-code" and "restartPolicy" not in git
    assert warm == {
        "name": "warm",
        "image": "busybox",
        "command": ["sh", "-c"],
        "args": ["echo hi"],
        "env": [{"name": "A", "value": "1"}],
        "volumeMounts": [{"name": "shared", "mountPath": "/s", "subPath": "w"}],
    }
    assert logs == {
        "name": "logs",
        "image": "fluent-bit",
        "restartPolicy": "Always",
        "workingDir": "/w",
        "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1"}},
        "securityContext": {"runAsUser": 1000},
    }
    # Sidecars get none of the operation's env, connections or mounts.
    assert "envFrom" not in logs and "env" not in logs


def test_the_renderer_is_pure_and_shares_nothing_with_the_spec() -> None:
    run = {"container": {"image": "x"}, "volumes": [{"name": "t", "emptyDir": {"sizeLimit": 1}}]}
    op = _op(run)
    a = render_operation(op, {}, config_version="c", dispatched_at=NOW)
    a.job["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] = "Memory"
    assert op.spec["run"]["volumes"][0]["emptyDir"] == {"sizeLimit": 1}
    b = render_operation(op, {}, config_version="c", dispatched_at=NOW)
    assert b.job["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] == {"sizeLimit": "1"}


def test_pod_requests_follow_the_scheduler() -> None:
    cpu = {"cpu": Decimal(1)}
    assert pod_requests([cpu, cpu]) == {"cpu": Decimal(2)}
    # an init container counts alone; sidecars add to the containers
    assert pod_requests([cpu], [({"cpu": Decimal(5)}, False)]) == {"cpu": Decimal(5)}
    assert pod_requests([cpu], [({"cpu": Decimal(1)}, True)]) == {"cpu": Decimal(2)}
    # an init container after a sidecar runs beside it
    init = [({"cpu": Decimal(1)}, True), ({"cpu": Decimal(3)}, False)]
    assert pod_requests([cpu], init) == {"cpu": Decimal(4)}
    gpu = [({"nvidia.com/gpu": Decimal(1)}, False)]
    assert pod_requests([{}], gpu) == {"nvidia.com/gpu": Decimal(1)}


def test_observed_requests_of_a_rendered_pod_equal_the_compiled_ones() -> None:
    """What the compiler counts for quota is what observation reads back from the Job."""
    files = {
        "reconciler.yaml": "kind: Org\n",
        "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
        "queues/q.yaml": "kind: Queue\ncluster: local\n",
        "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
        "projects/p/operations/t.yaml": """kind: Operation
run:
  kind: job
  container:
    image: x
    resources: {requests: {cpu: 2}, limits: {nvidia.com/gpu: 1}}
  initContainers:
    - {name: big, image: x, resources: {requests: {cpu: 6, memory: 1Gi}}}
  sidecars:
    - {name: s, image: x, resources: {requests: {cpu: 500m, memory: 2Gi}}}
""",
    }
    compiled = compile_repo(repo(files))
    assert compiled.errors == ()
    (op,) = compiled.operations
    assert op.requests == {
        "cpu": Decimal(6),
        "memory": Decimal(2 * 2**30),
        "nvidia.com/gpu": Decimal(1),
    }
    job = render_operation(op, {}, config_version="c", dispatched_at=NOW).job
    (state,) = observe_workloads("local", [job], [])
    assert state.requests == op.requests
