"""``run.distributed.backend: pytorchjob``: a Kubeflow Training Operator ``PyTorchJob``
(``kubeflow.org/v1``) instead of an Indexed Job and a headless Service (pure).

The pod template is the one a single-pod run of the operation gets (same labels,
annotations, connections, resources, node selection), with the main container named
``pytorch`` and its port named ``pytorchjob-port``: the operator finds the container by that
name (its webhook refuses a job without one) and takes ``MASTER_PORT`` from that port. The
operator sets ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``PET_NNODES`` and
``PET_NODE_RANK`` on every pod itself, so the template carries none of them. The Master is
rank 0 and Worker ``i`` is rank ``i + 1``.

What must live here: the PyTorchJob rendering and which container's log is the run's; the
pod itself is ``render.py``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from reconciler.core.decision.render import MAIN_CONTAINER, RenderedWorkload, render_operation
from reconciler.core.types import CompiledOperation, ConnectionSpec, DistributedBackend

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
PLURAL = "pytorchjobs"
CONTAINER = "pytorch"  # PyTorchJobDefaultContainerName in the operator
PORT_NAME = "pytorchjob-port"  # PyTorchJobDefaultPortName


def log_container(kind: str) -> str:
    """The container whose log is a run's, in a pod of a workload of ``kind``."""
    return CONTAINER if kind == KIND else MAIN_CONTAINER


def uses_pytorchjob(op: CompiledOperation) -> bool:
    return op.distributed is not None and op.distributed.backend is DistributedBackend.PYTORCHJOB


def render_pytorchjob(
    op: CompiledOperation,
    connections: Mapping[str, ConnectionSpec],
    *,
    config_version: str,
    dispatched_at: datetime,
) -> RenderedWorkload:
    """The ``PyTorchJob`` that dispatches ``op``: Master (1 replica) and Worker
    (``replicas - 1``, omitted for a single replica), both from one pod template."""
    if not uses_pytorchjob(op) or op.distributed is None:
        raise ValueError(f"{op.id} does not use the pytorchjob backend")
    # The one-pod Job of the same operation: the same name, labels, annotations and pod.
    single = render_operation(
        replace(op, replicas=1, distributed=None),
        connections,
        config_version=config_version,
        dispatched_at=dispatched_at,
    )
    job = single.job
    job_spec = job["spec"]
    template = copy.deepcopy(job_spec["template"])
    pod = template["spec"]
    pod.pop("restartPolicy", None)  # the replica spec's restartPolicy sets it
    for container in pod.get("containers") or []:
        if container.get("name") == MAIN_CONTAINER:
            container["name"] = CONTAINER
            ports = [p for p in container.get("ports") or [] if p.get("name") != PORT_NAME]
            ports.append(
                {"name": PORT_NAME, "containerPort": op.distributed.port, "protocol": "TCP"}
            )
            container["ports"] = ports
    retries = int(job_spec.get("backoffLimit") or 0)
    # With retries, a failed pod is restarted in place (OnFailure); without, one failed
    # pod fails the run, as with the Indexed Job.
    restart = "OnFailure" if retries else "Never"
    replica_specs: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": restart, "template": template}
    }
    if op.replicas > 1:
        replica_specs["Worker"] = {
            "replicas": op.replicas - 1,
            "restartPolicy": restart,
            "template": copy.deepcopy(template),
        }
    run_policy: dict[str, Any] = {"backoffLimit": retries, "cleanPodPolicy": "Running"}
    for source, target in (
        ("activeDeadlineSeconds", "activeDeadlineSeconds"),
        ("ttlSecondsAfterFinished", "ttlSecondsAfterFinished"),
    ):
        if job_spec.get(source) is not None:
            run_policy[target] = job_spec[source]
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": copy.deepcopy(job["metadata"]),
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": replica_specs},
    }
    return RenderedWorkload(
        operation=single.operation,
        cluster=single.cluster,
        namespace=single.namespace,
        name=single.name,
        kind=single.kind,
        spec_hash=single.spec_hash,
        manifests=(manifest,),
    )
