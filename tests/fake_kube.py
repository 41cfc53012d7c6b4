"""A fake ``Kube`` for fast cycle tests: Jobs and Pods kept in memory and moved through
phases by the test. It answers the calls the Reconciler makes (list, create or adopt,
annotate, delete, events) the way the apiserver does, with increasing resourceVersions.
The same behaviour is shown on the real control plane by tests/cluster/."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from reconciler.adapters.kube import MANAGED_SELECTOR, ApplyResult, KubeError, ObjectList

MANAGED = ("app.kubernetes.io/managed-by", "dispatch-reconciler")
NOW = "2026-01-01T12:00:00Z"


@dataclass
class FakeCluster:
    """One cluster's objects. ``reachable=False`` makes every call fail like a dead apiserver."""

    name: str
    reachable: bool = True
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name
    others: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # not ours
    nodes_forbidden: bool = False  # listing Nodes answers 403 (the RBAC is missing)
    calls: list[str] = field(default_factory=list)  # mutating calls, in order
    version: int = 100

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    # --- the test moves workloads through phases ----------------------------------------

    def add_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        job = copy.deepcopy(manifest)
        meta = job.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = self._next()
        job.setdefault("status", {})
        self.jobs[(meta["namespace"], meta["name"])] = job
        return job

    def add_node(
        self,
        name: str,
        *,
        ready: bool = True,
        unschedulable: bool = False,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        **allocatable: str,
    ) -> None:
        """A Node; ``allocatable`` by resource (``gpu`` means ``nvidia.com/gpu``)."""
        alloc = {("nvidia.com/gpu" if k == "gpu" else k): v for k, v in allocatable.items()}
        self.nodes[name] = {
            "metadata": {"name": name, "labels": dict(labels or {}), "uid": f"uid-{name}"},
            "spec": {"unschedulable": unschedulable, "taints": list(taints or [])},
            "status": {
                "allocatable": alloc,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def add_pod(self, namespace: str, name: str, node: str, **requests: str) -> None:
        """Someone else's running pod bound to ``node``."""
        req = {("nvidia.com/gpu" if k == "gpu" else k): v for k, v in requests.items()}
        self.others[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "resources": {"requests": req}}],
            },
            "status": {"phase": "Running"},
        }

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        """``PodPending``, ``Unschedulable``, ``Running``, ``Succeeded``, ``Failed`` or
        ``Deleting``."""
        job = self.jobs[(namespace, name)]
        job["metadata"]["resourceVersion"] = self._next()
        pod_key = (namespace, f"{name}-pod")
        if phase == "Deleting":
            job["metadata"]["deletionTimestamp"] = NOW
            return
        if phase == "Succeeded":
            job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            return
        if phase == "Failed":
            job["status"] = {
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ]
            }
            return
        if phase == "PodPending":
            self.pods.pop(pod_key, None)
            return
        pod: dict[str, Any] = {
            "metadata": {
                "name": pod_key[1],
                "namespace": namespace,
                "labels": {"job-name": name, MANAGED[0]: MANAGED[1]},
                "creationTimestamp": NOW,
            },
            "spec": {},
            "status": {},
        }
        if phase == "Running":
            pod["spec"]["nodeName"] = "gpu-node-0"
            pod["status"]["phase"] = "Running"
        elif phase == "Unschedulable":
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "message": "0/2 nodes fit"}
                ],
            }
        else:
            raise ValueError(phase)
        self.pods[pod_key] = pod


class FakeKube:
    """The client of one :class:`FakeCluster`."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def _up(self) -> None:
        if not self.cluster.reachable:
            raise KubeError(f"cluster {self.cluster.name}: connection refused")

    def list_managed(
        self, kind: str, page_size: int = 500, *, selector: str = MANAGED_SELECTOR, fields: str = ""
    ) -> ObjectList:
        self._up()
        if kind == "Node":
            if self.cluster.nodes_forbidden:
                raise KubeError("listing Nodes: forbidden", 403, "Forbidden")
            nodes = tuple(copy.deepcopy(v) for _, v in sorted(self.cluster.nodes.items()))
            return ObjectList(nodes, str(self.cluster.version))
        source: dict[Any, dict[str, Any]] = (
            self.cluster.jobs if kind == "Job" else self.cluster.pods
        )
        if kind == "Pod" and selector != MANAGED_SELECTOR:
            source = {**self.cluster.others, **self.cluster.pods}
        items = tuple(copy.deepcopy(v) for _, v in sorted(source.items()))
        return ObjectList(items, str(self.cluster.version))

    def ensure_namespace(self, name: str) -> None:
        self._up()
        self.cluster.namespaces.add(name)

    def create_or_adopt(self, manifest: dict[str, Any]) -> ApplyResult:
        self._up()
        meta = manifest["metadata"]
        key = (meta["namespace"], meta["name"])
        existing = self.cluster.jobs.get(key) if manifest["kind"] == "Job" else None
        created = existing is None
        if manifest["kind"] == "Job":
            job = existing if existing is not None else self.cluster.add_job(manifest)
            self.cluster.calls.append(f"{'create' if created else 'adopt'} {key[0]}/{key[1]}")
            m = job["metadata"]
            return ApplyResult(
                "Job",
                key[0],
                key[1],
                m["uid"],
                m["resourceVersion"],
                created,
                dict(m.get("annotations") or {}),
            )
        self.cluster.calls.append(f"create {manifest['kind']} {key[0]}/{key[1]}")
        return ApplyResult(manifest["kind"], key[0], key[1], "", self.cluster._next(), True)

    def apply_metadata(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        annotations: dict[str, str] | None = None,
        force: bool = False,
    ) -> None:
        self._up()
        job = self.cluster.jobs.get((namespace, name))
        if job is None:
            raise KubeError(f"{kind} {namespace}/{name} not found")
        job["metadata"].setdefault("annotations", {}).update(annotations or {})
        job["metadata"]["resourceVersion"] = self.cluster._next()
        self.cluster.calls.append(f"annotate {namespace}/{name}")

    def emit_event(
        self, namespace: str, involved: dict[str, Any], reason: str, message: str, **_: Any
    ) -> None:
        self._up()
        self.cluster.events.append((involved["name"], reason, message))

    def delete_workload(self, namespace: str, name: str) -> bool:
        self._up()
        self.cluster.calls.append(f"delete {namespace}/{name}")
        self.cluster.pods.pop((namespace, f"{name}-pod"), None)
        return self.cluster.jobs.pop((namespace, name), None) is not None
