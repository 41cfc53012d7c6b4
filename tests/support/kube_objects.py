"""Kubernetes objects as the API server returns them (Jobs, pods, with managed fields), and
compiled operations to list them under, for the watch and observation tests."""

from __future__ import annotations

import copy
from typing import Any

from reconciler.core.types import CompiledOperation, RunKind
from support.builders import run_op

MANAGED = {
    "annotations": {
        "reconciler.dev/operation-id": "p/a",
        "reconciler.dev/generation": "1",
        "reconciler.dev/config-commit": "c" * 40,
        "reconciler.dev/dispatched-at": "2026-12-04T05:00:00Z",
    },
    "labels": {"app.kubernetes.io/managed-by": "dispatch-reconciler", "reconciler.dev/queue": "q"},
}


FIELDS = [
    {
        "manager": "dispatch-reconciler",
        "operation": "Update",
        "apiVersion": "batch/v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {"f:template": {}}},
    },
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "subresource": "status",
        "fieldsV1": {"f:status": {"f:active": {}, "f:ready": {}}},
    },
]


def job(i: int, end: str, version: int, parallelism: int = 1) -> dict[str, Any]:
    meta = copy.deepcopy(MANAGED)
    meta["annotations"]["reconciler.dev/operation-id"] = f"p/op-{i}"
    meta.update(
        name=f"p-op-{i}-g1",
        namespace="p",
        uid=f"uid-{i}",
        resourceVersion=str(version),
        managedFields=copy.deepcopy(FIELDS),
    )
    status: dict[str, Any] = {"startTime": "2026-12-04T05:00:01Z"}
    if end in ("Complete", "Failed"):
        status["conditions"] = [
            {"type": end, "status": "True", "lastTransitionTime": "2026-12-04T05:01:00Z"}
        ]
    if end == "Deleting":
        meta["deletionTimestamp"] = "2026-12-04T05:02:00Z"
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}
        },
    }
    if parallelism > 1:
        spec["completionMode"] = "Indexed"
    return {"metadata": meta, "spec": spec, "status": status}


def pod(i: int, n: int, phase: str, version: int) -> dict[str, Any]:
    status: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    if phase == "Unschedulable":
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "no room"}],
        }
    elif phase:
        status = {"phase": phase}
        spec = {"nodeName": "node-1"}
    return {
        "metadata": {
            "name": f"p-op-{i}-g1-{n}",
            "namespace": "p",
            "uid": f"pod-{i}-{n}",
            "resourceVersion": str(version),
            "creationTimestamp": f"2026-12-04T05:00:0{n}Z",
            "labels": {"job-name": f"p-op-{i}-g1", "batch.kubernetes.io/job-completion-index": "0"},
            "managedFields": copy.deepcopy(FIELDS),
        },
        "spec": spec,
        "status": status,
    }


def op(namespace: str, name: str, kind: RunKind = RunKind.JOB) -> CompiledOperation:
    return run_op(
        name,
        {
            "container": {"image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}},
            "environment": {
                "nodeSelector": {"gpu.type": "a100"},
                "annotations": {"reconciler.dev/simulated-duration": "2s"},
            },
        },
        namespace=namespace,
        kind=kind,
        requests={"nvidia.com/gpu": 1},
    )
