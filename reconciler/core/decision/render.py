"""Render a compiled operation into the Kubernetes objects that dispatch it.

Pure: the same operation, connections and config version give byte-identical manifests.
``job`` and ``batch`` become a ``batch/v1`` Job that runs to completion; a distributed one
(``run.replicas`` > 1 or ``run.distributed``) an Indexed Job of ``replicas`` pods plus a
headless Service that names each pod ``<job>-<index>.<service>``. ``notebook`` and
``sandbox`` are long-running: a single-pod Job bounded by ``activeDeadlineSeconds`` plus a
Service for the port. The workload name is deterministic from project, operation and
generation, so a repeated create meets ``AlreadyExists`` and adopts instead of duplicating.

What must live here: the Job, its pod and its headless Service for a distributed run, the
workload's name and spec hash, the flavor's placement (``with_flavor``), and where each pod
field came from. The PyTorchJob backend is ``render_kubeflow.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reconciler.core.quantity import duration_seconds
from reconciler.core.types import (
    CompiledOperation,
    ConnectionSpec,
    Distributed,
    DistributedBackend,
    FlavorSpec,
    Framework,
    RunKind,
)

MANAGER = "dispatch-reconciler"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PROJECT = "reconciler.dev/project"
LABEL_OPERATION = "reconciler.dev/operation"
LABEL_QUEUE = "reconciler.dev/queue"
LABEL_WORKLOAD = "reconciler.dev/workload"
LABEL_KIND = "reconciler.dev/kind"
LABEL_FLAVOR = "reconciler.dev/flavor"  # the flavor the plan assigned (its quota is held)
ANNOTATION_COMMIT = "reconciler.dev/config-commit"
ANNOTATION_SPEC_HASH = "reconciler.dev/spec-hash"
ANNOTATION_DISPATCHED_AT = "reconciler.dev/dispatched-at"
ANNOTATION_OPERATION = "reconciler.dev/operation-id"
ANNOTATION_GENERATION = "reconciler.dev/generation"
ANNOTATION_PHASE = "reconciler.dev/phase"  # see core/decision/cycle.py phase_annotation_due
ANNOTATION_PHASE_REASON = "reconciler.dev/phase-reason"
# The workflow a child was dispatched for ("" for an operation that is none's child): a
# workflow refused by policy keeps only its own children running, never another's workload.
ANNOTATION_WORKFLOW = "reconciler.dev/workflow"
ANNOTATION_OUTPUTS = "reconciler.dev/outputs"  # where the run writes its outputs

PORTS = {RunKind.NOTEBOOK: 8888, RunKind.SANDBOX: 8080}
SANDBOX_DEFAULT_TIMEOUT = 4 * 3600  # sandboxes never run unbounded
MAIN_CONTAINER = "main"
GIT_IMAGE = "alpine/git:2.45.2"
ENV_OPERATION = "RECONCILER_OPERATION"
ENV_QUEUE = "RECONCILER_QUEUE"
ENV_CONNECTION_PREFIX = "RECONCILER_CONNECTION_"
ENV_OUTPUTS = "RECONCILER_OUTPUTS"
# Pod-level fields copied from ``run.environment``.
POD_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "schedulerName",
    "priorityClassName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
)

_MAX_NAME = 63

# The annotation the Job controller sets on each pod of an Indexed Job: its index.
ANNOTATION_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_INDEX_FIELD = f"metadata.annotations['{ANNOTATION_COMPLETION_INDEX}']"


@dataclass(frozen=True)
class RenderedWorkload:
    operation: str  # "project/name"
    cluster: str
    namespace: str
    name: str
    kind: RunKind
    spec_hash: str
    manifests: tuple[Mapping[str, Any], ...]  # the Job first, then the Service if any

    @property
    def job(self) -> Mapping[str, Any]:
        return self.manifests[0]


def workload_name(project: str, operation: str, generation: int, replicas: int = 1) -> str:
    """``<project>-<operation>-g<generation>``, shortened with a hash to stay a DNS label.

    Job names become pod labels (``job-name``), so 63 characters is the limit. The pods of
    a distributed operation (``replicas`` > 1) get the hostname ``<name>-<index>``, itself
    a DNS label: the name leaves room for the largest index."""
    limit = _MAX_NAME - (len(f"-{replicas - 1}") if replicas > 1 else 0)
    base = f"{project}-{operation}-g{generation}"
    if len(base) <= limit:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    keep = limit - len(digest) - len(f"-g{generation}") - 1
    return f"{base[:keep].rstrip('-')}-{digest}-g{generation}"


def operation_workload(op: CompiledOperation) -> str:
    """The name of ``op``'s workload (its Job, and its Service if any)."""
    replicas = op.replicas if op.distributed is not None else 1
    return workload_name(op.project, op.name, op.generation, replicas)


def outputs_path(op: CompiledOperation, connections: Mapping[str, ConnectionSpec]) -> str | None:
    """Where this run of ``op`` writes its outputs (``run.outputs``): under the bucket's URL
    or the volume's mountPath, ``<project>/<operation>/<workload>/``; the workload's name
    (one per generation) keeps each run's apart. None when it has no outputs connection."""
    name = (op.spec.get("run") or {}).get("outputs")
    conn = connections.get(name) if isinstance(name, str) else None
    if conn is None:
        return None
    base = str(conn.spec["url"] if conn.type == "bucket" else conn.spec["mountPath"])
    return f"{base.rstrip('/')}/{op.project}/{op.name}/{operation_workload(op)}/"


def _label_value(value: str) -> str:
    """Label values are at most 63 characters of ``[A-Za-z0-9._-]``."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", value)[:_MAX_NAME]
    return clean.strip("-._")


def spec_hash(op: CompiledOperation, connections: Mapping[str, ConnectionSpec]) -> str:
    """A stable hash of everything that shapes the workload (not when or from which commit)."""
    payload = {
        "spec": op.spec,
        "namespace": op.namespace,
        "queue": op.queue,
        "connections": [
            {"name": n, "type": connections[n].type, "spec": connections[n].spec}
            for n in op.connections
            if n in connections
        ],
    }
    blob = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _env_list(env: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"name": k, "value": str(v)} for k, v in (env or {}).items()]


def _resources(resources: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section in ("requests", "limits"):
        values = (resources or {}).get(section)
        if values:
            out[section] = {k: str(v) for k, v in values.items()}
    return out


@dataclass
class _PodParts:
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    env: list[dict[str, Any]]
    env_from: list[dict[str, Any]]
    init_containers: list[dict[str, Any]]


def _git_security_context(main: Mapping[str, Any]) -> dict[str, Any]:
    """The clone needs no privilege: it meets Pod Security *restricted* except for the user,
    which is the main container's when that one names a non-root UID (the checkout is then
    owned by the user that works in it)."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    uid = main.get("runAsUser")
    if isinstance(uid, int) and uid > 0:
        context["runAsUser"] = uid
        context["runAsNonRoot"] = True
        if main.get("runAsGroup") is not None:
            context["runAsGroup"] = main["runAsGroup"]
    return context


def _render_connections(
    conns: Sequence[ConnectionSpec], main_security: Mapping[str, Any]
) -> _PodParts:
    parts = _PodParts([], [], [], [], [])
    for conn in conns:
        name = conn.name
        spec = conn.spec
        volume = f"conn-{name}"
        if conn.type == "volume":
            source: dict[str, Any]
            if "claimName" in spec:
                source = {
                    "persistentVolumeClaim": {
                        "claimName": spec["claimName"],
                        "readOnly": bool(spec.get("readOnly", False)),
                    }
                }
            else:
                source = {"hostPath": {"path": spec["hostPath"]}}
            parts.volumes.append({"name": volume, **source})
            mount = {
                "name": volume,
                "mountPath": spec["mountPath"],
                "readOnly": bool(spec.get("readOnly", False)),
            }
            if spec.get("subPath"):
                mount["subPath"] = spec["subPath"]
            parts.mounts.append(mount)
        elif conn.type in ("secret", "configMap"):
            ref_key = "secretRef" if conn.type == "secret" else "configMapRef"
            if spec.get("mountPath"):
                vol_source = (
                    {"secret": {"secretName": spec["name"]}}
                    if conn.type == "secret"
                    else {"configMap": {"name": spec["name"]}}
                )
                parts.volumes.append({"name": volume, **vol_source})
                parts.mounts.append(
                    {"name": volume, "mountPath": spec["mountPath"], "readOnly": True}
                )
            if spec.get("envFrom"):
                parts.env_from.append({ref_key: {"name": spec["name"]}})
        elif conn.type == "bucket":
            parts.env.append({"name": spec.get("urlEnv", "BUCKET_URL"), "value": spec["url"]})
            parts.env.extend(_env_list(spec.get("env")))
            if spec.get("secret"):
                parts.env_from.append({"secretRef": {"name": spec["secret"]}})
        elif conn.type == "git":
            mount_path = spec.get("mountPath", "/code")
            parts.volumes.append({"name": volume, "emptyDir": {}})
            parts.mounts.append({"name": volume, "mountPath": mount_path})
            init: dict[str, Any] = {
                "name": f"git-{name}"[:_MAX_NAME],
                "image": GIT_IMAGE,
                "args": [
                    "clone",
                    "--",
                    spec["url"],
                    "/repo",
                ],
                "volumeMounts": [{"name": volume, "mountPath": "/repo"}],
            }
            revision = spec.get("revision", "HEAD")
            if revision != "HEAD":
                init["command"] = ["sh", "-c"]
                init["args"] = [
                    'git clone -- "$GIT_URL" /repo && git -C /repo checkout "$GIT_REVISION"'
                ]
                init["env"] = [
                    {"name": "GIT_URL", "value": spec["url"]},
                    {"name": "GIT_REVISION", "value": revision},
                ]
            if spec.get("secret"):
                init["envFrom"] = [{"secretRef": {"name": spec["secret"]}}]
            init["securityContext"] = _git_security_context(main_security)
            parts.init_containers.append(init)
        parts.env.append({"name": f"RECONCILER_CONNECTION_{_env_suffix(name)}", "value": conn.type})
    return parts


def _env_suffix(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _volume(volume: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(volume))
    empty_dir = out.get("emptyDir")
    if isinstance(empty_dir, dict) and empty_dir.get("sizeLimit") is not None:
        empty_dir["sizeLimit"] = str(empty_dir["sizeLimit"])
    return out


def _mount(mount: Mapping[str, Any]) -> dict[str, Any]:
    out = {"name": mount["name"], "mountPath": mount["mountPath"]}
    for key in ("subPath", "readOnly"):
        if mount.get(key) is not None:
            out[key] = mount[key]
    return out


def _extra_containers(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``run.initContainers`` then ``run.sidecars``, as pod init containers: a sidecar is a
    Kubernetes native sidecar (``restartPolicy: Always``), started after the init
    containers, running beside ``main`` and stopped when it ends, so the Job completes."""
    out: list[dict[str, Any]] = []
    for section in ("initContainers", "sidecars"):
        for spec in run.get(section) or []:
            container: dict[str, Any] = {"name": spec["name"], "image": spec["image"]}
            if section == "sidecars":
                container["restartPolicy"] = "Always"
            for key in ("command", "args", "workingDir"):
                if spec.get(key) is not None:
                    container[key] = spec[key]
            if spec.get("env"):
                container["env"] = _env_list(spec["env"])
            if spec.get("resources"):
                container["resources"] = _resources(spec["resources"])
            if spec.get("securityContext"):
                container["securityContext"] = dict(spec["securityContext"])
            if spec.get("volumeMounts"):
                container["volumeMounts"] = [_mount(m) for m in spec["volumeMounts"]]
            out.append(container)
    return out


def _timeout_seconds(op: CompiledOperation) -> int | None:
    timeout = (op.spec.get("run") or {}).get("timeout")
    if timeout is not None:
        return duration_seconds(timeout)
    if op.kind is RunKind.SANDBOX:
        return SANDBOX_DEFAULT_TIMEOUT
    return None


def env_sources(
    spec: Mapping[str, Any], conns: Sequence[ConnectionSpec]
) -> list[tuple[str, str | None]]:
    """The main container's env names in rendered order, each with the connection that sets
    it (``None``: the reconciler's own or ``run.container.env``)."""
    container = (spec.get("run") or {}).get("container") or {}
    out: list[tuple[str, str | None]] = [(ENV_OPERATION, None), (ENV_QUEUE, None)]
    out += [(k, None) for k in container.get("env") or {}]
    for conn in conns:
        if conn.type == "bucket":
            out.append((conn.spec.get("urlEnv", "BUCKET_URL"), conn.name))
            out += [(k, conn.name) for k in conn.spec.get("env") or {}]
        out.append((f"{ENV_CONNECTION_PREFIX}{_env_suffix(conn.name)}", conn.name))
    return out


def _index_env(name: str) -> dict[str, Any]:
    """``name`` set to the pod's index in its Indexed Job."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": _INDEX_FIELD}}}


def distributed_env(distributed: Distributed, replicas: int, workload: str) -> list[dict[str, Any]]:
    """The rendezvous environment of each pod of a distributed operation named ``workload``
    (the Job and its headless Service share the name): replica 0 is the coordinator at
    ``<workload>-0.<workload>``, and each pod's rank is its completion index."""
    coordinator = f"{workload}-0.{workload}"
    port = str(distributed.port)
    if distributed.framework is Framework.TORCH:
        return [
            {"name": "MASTER_ADDR", "value": coordinator},
            {"name": "MASTER_PORT", "value": port},
            {"name": "WORLD_SIZE", "value": str(replicas)},
            _index_env("RANK"),
            {"name": "PET_NNODES", "value": str(replicas)},
            _index_env("PET_NODE_RANK"),
        ]
    if distributed.framework is Framework.JAX:
        return [
            {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{coordinator}:{port}"},
            {"name": "JAX_NUM_PROCESSES", "value": str(replicas)},
            _index_env("JAX_PROCESS_ID"),
        ]
    return []


# The env names each framework sets (``distributed_env``), for the duplicate check.
DISTRIBUTED_ENV: dict[Framework, tuple[str, ...]] = {
    framework: tuple(e["name"] for e in distributed_env(Distributed(framework), 2, "w"))
    for framework in Framework
}


def render_pod(
    spec: Mapping[str, Any],
    kind: RunKind,
    conns: Sequence[ConnectionSpec],
    *,
    operation: str,
    queue: str,
) -> dict[str, Any]:
    """The pod template of a compiled spec with its connections (in ``run.connections``
    order): ``metadata`` holds only the user's labels and annotations. Policy checks this
    pod (Pod Security), so whatever reaches a pod is checked."""
    run = spec.get("run") or {}
    container_spec = run.get("container") or {}
    environment = run.get("environment") or {}
    security = container_spec.get("securityContext") or {}
    parts = _render_connections(conns, security)
    env = [
        {"name": ENV_OPERATION, "value": operation},
        {"name": ENV_QUEUE, "value": queue},
        *_env_list(container_spec.get("env")),
        *parts.env,
    ]
    volumes = list(parts.volumes)
    mounts = list(parts.mounts)
    if container_spec.get("shmSize"):
        volumes.append(
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": str(container_spec["shmSize"])},
            }
        )
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})

    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": container_spec.get("image")}
    for key in ("command", "args", "workingDir"):
        if container_spec.get(key) is not None:
            container[key] = container_spec[key]
    container["env"] = env
    if parts.env_from:
        container["envFrom"] = parts.env_from
    container["resources"] = _resources(container_spec.get("resources"))
    if mounts:
        container["volumeMounts"] = mounts
    if security:
        container["securityContext"] = dict(security)
    port = PORTS.get(kind)
    if port:
        container["ports"] = [{"name": "http", "containerPort": port}]

    volumes += [_volume(v) for v in run.get("volumes") or []]
    if container_spec.get("volumeMounts"):
        container.setdefault("volumeMounts", []).extend(
            _mount(m) for m in container_spec["volumeMounts"]
        )
    init_containers = parts.init_containers + _extra_containers(run)

    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if init_containers:
        pod_spec["initContainers"] = init_containers
    if volumes:
        pod_spec["volumes"] = volumes
    for key in POD_FIELDS:
        if environment.get(key):
            pod_spec[key] = environment[key]
    if environment.get("serviceAccountName"):
        pod_spec["serviceAccountName"] = environment["serviceAccountName"]
    if environment.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = [{"name": n} for n in environment["imagePullSecrets"]]
    pod_spec["enableServiceLinks"] = False
    return {
        "metadata": {
            "labels": {k: str(v) for k, v in (environment.get("labels") or {}).items()},
            "annotations": {k: str(v) for k, v in (environment.get("annotations") or {}).items()},
        },
        "spec": pod_spec,
    }


@dataclass(frozen=True)
class FieldOrigin:
    """Where a field of a rendered pod comes from: ``path`` in the compiled spec, and the
    connection that rendered it, if one did (``path`` is then its ``run.connections`` entry)."""

    path: tuple[str | int, ...]
    connection: str | None = None


def pod_field_origin(
    spec: Mapping[str, Any], pod: Mapping[str, Any], path: tuple[str | int, ...]
) -> FieldOrigin:
    """The origin of the field at ``path`` of a pod from :func:`render_pod` of ``spec``: this
    knows the layout ``render_pod`` writes, so the two change together."""
    run = spec.get("run") or {}
    listed = list(run.get("connections") or [])
    outputs = run.get("outputs")  # mounted too when not listed
    volumes = [v.get("name") for v in run.get("volumes") or [] if isinstance(v, Mapping)]

    def connection(name: str) -> FieldOrigin:
        if name not in listed and name == outputs:
            return FieldOrigin(("run", "outputs"), name)
        index = listed.index(name) if name in listed else None
        where: tuple[str | int, ...] = ("run", "connections")
        return FieldOrigin((*where, index) if index is not None else where, name)

    def volume(name: str, *field: str | int) -> FieldOrigin:
        if name == "dshm":
            return FieldOrigin(("run", "container", "shmSize"))
        if name.startswith("conn-") and name.removeprefix("conn-") in (*listed, outputs):
            return connection(name.removeprefix("conn-"))
        if name in volumes:
            return FieldOrigin(("run", "volumes", volumes.index(name), *field))
        return FieldOrigin(("run",))

    def extra(name: str, field: tuple[str | int, ...]) -> FieldOrigin:
        """An init container or sidecar the spec names, else a git connection's clone."""
        for section in ("initContainers", "sidecars"):
            for i, c in enumerate(run.get(section) or []):
                if isinstance(c, Mapping) and c.get("name") == name:
                    return FieldOrigin(("run", section, i, *field))
        git = next((c for c in listed if f"git-{c}"[:_MAX_NAME] == name), None)
        return connection(git) if git else FieldOrigin(("run",))

    head, rest = path[:1], path[1:]
    if head == ("metadata",) and rest[:1] in (("labels",), ("annotations",)):
        return FieldOrigin(("run", "environment", *rest))
    if head != ("spec",) or not rest:
        return FieldOrigin(("run",))
    section, sub = rest[0], rest[1:]
    pod_spec = pod.get("spec") or {}
    if section in (*POD_FIELDS, "serviceAccountName", "imagePullSecrets"):
        return FieldOrigin(("run", "environment", section, *sub))
    if section == "volumes" and sub and isinstance(sub[0], int):
        item = (pod_spec.get("volumes") or [])[sub[0]]
        return volume(str(item.get("name", "")), *sub[1:2])
    if section in ("containers", "initContainers") and sub and isinstance(sub[0], int):
        item = (pod_spec.get(section) or [])[sub[0]]
        name, field = str(item.get("name", "")), sub[1:]
        if section == "initContainers":
            return extra(name, field)
        if name != MAIN_CONTAINER:
            return FieldOrigin(("run",))
        if field[:1] == ("ports",):
            return FieldOrigin(("run", "kind"))
        if field[:1] == ("volumeMounts",) and len(field) > 1 and isinstance(field[1], int):
            return volume(str(item["volumeMounts"][field[1]].get("name", "")))
        if field[:1] in (("securityContext",), ("image",), ("command",), ("args",)):
            return FieldOrigin(("run", "container", *field))
        return FieldOrigin(("run", "container"))
    return FieldOrigin(("run",))


def with_flavor(spec: Mapping[str, Any], flavor: FlavorSpec | None) -> Mapping[str, Any]:
    """The spec with the assigned flavor's nodeLabels added to its nodeSelector (its own
    entries win: the plan assigns a flavor only where they agree) and the flavor's
    tolerations after its own. The spec hash is of the spec without them: the flavor is
    the plan's choice, not a change to the operation."""
    if flavor is None:
        return spec
    run = dict(spec.get("run") or {})
    env = dict(run.get("environment") or {})
    env["nodeSelector"] = {**flavor.node_labels, **(env.get("nodeSelector") or {})}
    own = list(env.get("tolerations") or ())
    env["tolerations"] = own + [dict(t) for t in flavor.tolerations if t not in own]
    run["environment"] = env
    return {**spec, "run": run}


def render_operation(
    op: CompiledOperation,
    connections: Mapping[str, ConnectionSpec],
    *,
    config_version: str,
    dispatched_at: datetime,
) -> RenderedWorkload:
    """The Job (and Service for notebooks, sandboxes and distributed operations) that
    dispatches ``op``; with ``run.distributed.backend: pytorchjob``, a Kubeflow PyTorchJob
    (``render_kubeflow``, which renders the pod through this function)."""
    if op.distributed is not None and op.distributed.backend is DistributedBackend.PYTORCHJOB:
        from reconciler.core.decision.render_kubeflow import render_pytorchjob

        return render_pytorchjob(
            op, connections, config_version=config_version, dispatched_at=dispatched_at
        )
    run = op.spec.get("run") or {}
    gang = op.distributed
    name = operation_workload(op)
    digest = spec_hash(op, connections)
    # resolved by the compiler: unknown names never get here
    pod = render_pod(
        with_flavor(op.spec, op.flavor),
        op.kind,
        [connections[c] for c in op.connections],
        operation=op.id,
        queue=op.queue,
    )
    # The reconciler's own keys come last: users cannot set them (the schema refuses them).
    labels = {
        **pod["metadata"]["labels"],
        LABEL_MANAGED_BY: MANAGER,
        LABEL_PROJECT: op.project,
        LABEL_OPERATION: _label_value(op.name),
        LABEL_QUEUE: op.queue,
        LABEL_KIND: op.kind.value,
        LABEL_WORKLOAD: name,
        **({LABEL_FLAVOR: op.flavor.name} if op.flavor is not None else {}),
    }
    annotations = {
        **pod["metadata"]["annotations"],
        ANNOTATION_OPERATION: op.id,
        ANNOTATION_GENERATION: str(op.generation),
        ANNOTATION_WORKFLOW: op.workflow.parent if op.workflow is not None else "",
        ANNOTATION_COMMIT: config_version,
        ANNOTATION_SPEC_HASH: digest,
        ANNOTATION_DISPATCHED_AT: dispatched_at.isoformat().replace("+00:00", "Z"),
    }
    pod_spec = pod["spec"]
    port = PORTS.get(op.kind)
    outputs = outputs_path(op, connections)
    if outputs is not None:
        pod_spec["containers"][0]["env"].append({"name": ENV_OUTPUTS, "value": outputs})
        annotations[ANNOTATION_OUTPUTS] = outputs

    retries = int(run.get("maxRetries") or 0)
    job_spec: dict[str, Any]
    if gang is None:
        job_spec = {"backoffLimit": retries, "completions": 1, "parallelism": 1}
    else:
        # Every replica at once; one index that fails (after its own run.maxRetries) fails
        # the run and the Job controller ends the others.
        job_spec = {
            "backoffLimitPerIndex": retries,
            "completionMode": "Indexed",
            "completions": op.replicas,
            "maxFailedIndexes": 0,
            "parallelism": op.replicas,
        }
        pod_spec["subdomain"] = name
        main = pod_spec["containers"][0]
        main["env"].extend(distributed_env(gang, op.replicas, name))
    job_spec.update(
        {
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": dict(annotations),
                },
                "spec": pod_spec,
            },
        }
    )
    deadline = _timeout_seconds(op)
    if deadline is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    if run.get("ttl") is not None:
        job_spec["ttlSecondsAfterFinished"] = duration_seconds(run["ttl"])

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": op.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": job_spec,
    }
    manifests: list[Mapping[str, Any]] = [job]
    if gang is not None:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": op.namespace,
                    "labels": labels,
                    "annotations": {ANNOTATION_OPERATION: op.id, ANNOTATION_SPEC_HASH: digest},
                },
                # headless: a DNS name per pod (hostname <name>-<index>, subdomain <name>),
                # published before the pods are ready so that replicas can find replica 0
                # while they all start
                "spec": {
                    "clusterIP": "None",
                    "selector": {LABEL_WORKLOAD: name},
                    "publishNotReadyAddresses": True,
                },
            }
        )
    elif port:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": op.namespace,
                    "labels": labels,
                    "annotations": {ANNOTATION_OPERATION: op.id, ANNOTATION_SPEC_HASH: digest},
                },
                "spec": {
                    "selector": {LABEL_WORKLOAD: name},
                    "ports": [{"name": "http", "port": port, "targetPort": "http"}],
                },
            }
        )
    return RenderedWorkload(
        operation=op.id,
        cluster=op.cluster,
        namespace=op.namespace,
        name=name,
        kind=op.kind,
        spec_hash=digest,
        manifests=tuple(manifests),
    )
