"""A fake ``Kube`` for fast cycle tests: Jobs, PyTorchJobs and Pods kept in memory and
moved through phases by the test (a PyTorchJob's status and pods as the Kubeflow Training
Operator v1.8.1 writes them; its kind is served only when ``backends`` has
``pytorchjob``). It answers the calls the Reconciler makes (list, create or adopt,
annotate, delete, events) the way the apiserver does, with increasing resourceVersions, and
watches: every change is logged as a watch event, and ``watch_managed`` replays the
events after a resourceVersion, then waits for more, as the apiserver does. The same
behaviour is shown on the real control plane by tests/cluster/."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from reconciler.adapters.kube import (
    MANAGED_SELECTOR,
    ApplyResult,
    KubeError,
    NotServed,
    ObjectList,
    WatchEvent,
    narrowed,
)
from reconciler.core.decision.cycle import Memory, memory_from_status
from reconciler.core.reporting.status import read_status
from reconciler.core.types import ClusterSpec, CompiledRepo, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.status import render_cycle_status
from support.clocks import SteppedClock

MANAGED = ("app.kubernetes.io/managed-by", "dispatch-reconciler")
NOW = "2026-01-01T12:00:00Z"
# The Job controller's times of a run the fake set going or finished (status.startTime,
# status.completionTime or the Failed condition's lastTransitionTime).
STARTED = "2026-01-01T11:00:00Z"
ENDED = "2026-01-01T11:40:00Z"


def _stamp(moment: datetime) -> str:
    """A Kubernetes time: UTC, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeCluster:
    """One cluster's objects. ``reachable=False`` makes every call fail like a dead apiserver."""

    name: str
    reachable: bool = True
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pytorchjobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name
    others: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # not ours
    nodes_forbidden: bool = False  # listing Nodes answers 403 (the RBAC is missing)
    invalid: set[str] = field(default_factory=set)  # workload names a create answers 422
    calls: list[str] = field(default_factory=list)  # mutating calls, in order
    logs: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, pod) -> text
    backends: set[str] = field(default_factory=set)  # optional backends served (CRDs)
    discoveries: int = 0  # served_backends calls
    version: int = 100
    # every change as a watch event: (resourceVersion, kind, type, object)
    changes: list[tuple[int, str, str, dict[str, Any]]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    closed: bool = False  # ends every watch (test teardown)

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    def _emit(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        with self.changed:
            version = int(obj["metadata"]["resourceVersion"])
            self.changes.append((version, kind, event_type, copy.deepcopy(obj)))
            self.changed.notify_all()

    def _changed(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        """``obj`` changed: its next resourceVersion, and the watch event."""
        obj["metadata"]["resourceVersion"] = self._next()
        self._emit(kind, event_type, obj)

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    # --- the test moves workloads through phases ----------------------------------------

    def add_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return self._add(self.jobs, "Job", manifest)

    def _add(
        self, store: dict[tuple[str, str], dict[str, Any]], kind: str, manifest: dict[str, Any]
    ) -> dict[str, Any]:
        obj = copy.deepcopy(manifest)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        obj.setdefault("status", {})
        store[(meta["namespace"], meta["name"])] = obj
        self._changed(kind, "ADDED", obj)
        return obj

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

    def end_job(
        self, namespace: str, name: str, phase: str, started: datetime, ended: datetime
    ) -> None:
        """The Job ends ``Succeeded`` or ``Failed`` with its controller's times: it started
        at ``started`` and ended at ``ended`` (a history of runs of their own lengths)."""
        self.set_phase(namespace, name, phase, started=_stamp(started), ended=_stamp(ended))

    def set_phase(
        self, namespace: str, name: str, phase: str, *, started: str = STARTED, ended: str = ENDED
    ) -> None:
        """``PodPending``, ``Unschedulable``, ``Running``, ``Succeeded``, ``Failed`` or
        ``Deleting``; a run that ends started at ``started`` and ended at ``ended``."""
        job = self.jobs[(namespace, name)]
        pod_key = (namespace, f"{name}-pod")
        if phase in ("Deleting", "Succeeded", "Failed"):
            job["metadata"]["resourceVersion"] = self._next()
            if phase == "Deleting":
                job["metadata"]["deletionTimestamp"] = NOW
            elif phase == "Succeeded":
                job["status"] = {
                    "conditions": [{"type": "Complete", "status": "True"}],
                    "startTime": started,
                    "completionTime": ended,
                }
            else:
                job["status"] = {
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "lastTransitionTime": ended,
                        }
                    ],
                    "startTime": started,
                }
            self._emit("Job", "MODIFIED", job)
            return
        if phase == "PodPending":
            gone = self.pods.pop(pod_key, None)
            if gone is not None:
                self._changed("Pod", "DELETED", gone)
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
            job["status"] = {**job.get("status", {}), "startTime": STARTED}
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
        pod["metadata"]["uid"] = f"uid-{pod_key[1]}"
        pod["metadata"]["resourceVersion"] = self._next()
        existed = pod_key in self.pods
        self.pods[pod_key] = pod
        self._emit("Pod", "MODIFIED" if existed else "ADDED", pod)

    def delete(self, namespace: str, name: str) -> bool:
        """Delete the Job and its pods (as a background deletion ends); False if absent."""
        return self._delete(self.jobs, "Job", _job_of, namespace, name)

    def _delete(
        self,
        store: dict[tuple[str, str], dict[str, Any]],
        kind: str,
        owner: Callable[[dict[str, Any]], tuple[str, str]],
        namespace: str,
        name: str,
    ) -> bool:
        keys = [k for k, p in self.pods.items() if owner(p) == (namespace, name)]
        pods = [self.pods.pop(k) for k in keys]
        obj = store.pop((namespace, name), None)
        for item_kind, item in ((kind, obj), *(("Pod", pod) for pod in pods)):
            if item is not None:
                self._changed(item_kind, "DELETED", item)
        return obj is not None

    def pod_succeeded(self, namespace: str, name: str) -> None:
        """The Job's pod ends Succeeded; the Job has no terminal condition yet."""
        pod = self.pods[(namespace, f"{name}-pod")]
        pod["status"]["phase"] = "Succeeded"
        self._changed("Pod", "MODIFIED", pod)

    def set_gang(
        self,
        namespace: str,
        name: str,
        replicas: int,
        placed: int,
        running: int = 0,
        message: str = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    ) -> None:
        """The pods of an Indexed Job, as the Job controller and scheduler leave them:
        indexes below ``placed`` bound to a node (the first ``running`` of them Running),
        the rest Pending and Unschedulable with the scheduler's ``message``. Each pod's
        log reads ``log of replica <i>``."""
        job = self.jobs[(namespace, name)]
        self._changed("Job", "MODIFIED", job)
        self._drop_pods(_job_of, namespace, name)
        template = job["spec"]["template"]
        for i in range(replicas):
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels.update({"job-name": name, MANAGED[0]: MANAGED[1]})
            annotations = dict((template.get("metadata") or {}).get("annotations") or {})
            annotations["batch.kubernetes.io/job-completion-index"] = str(i)
            self._add_pod(
                namespace,
                f"{name}-{i}-x{i}",
                template,
                labels,
                annotations,
                i,
                placed=placed,
                running=running,
                message=message,
            )

    def _drop_pods(
        self, owner: Callable[[dict[str, Any]], tuple[str, str]], namespace: str, name: str
    ) -> None:
        """Delete the pods ``owner`` says belong to ``namespace/name``."""
        for key in [k for k, p in self.pods.items() if owner(p) == (namespace, name)]:
            gone = self.pods.pop(key)
            self._changed("Pod", "DELETED", gone)

    def _add_pod(
        self,
        namespace: str,
        name: str,
        template: dict[str, Any],
        labels: dict[str, str],
        annotations: dict[str, str],
        rank: int,
        *,
        placed: int,
        running: int,
        message: str,
    ) -> None:
        """A pod of ``template`` as the scheduler leaves it: bound to ``gpu-node-<rank>``
        when ``rank < placed`` (Running when ``rank < running``), else Pending and
        Unschedulable with its ``message``. Its log reads ``log of replica <rank>``."""
        pod: dict[str, Any] = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "creationTimestamp": NOW,
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        if rank < placed:
            pod["spec"]["nodeName"] = f"gpu-node-{rank}"
            if rank < running:
                pod["status"]["phase"] = "Running"
        else:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
        pod["metadata"]["uid"] = f"uid-{name}"
        pod["metadata"]["resourceVersion"] = self._next()
        self.pods[(namespace, name)] = pod
        self._emit("Pod", "ADDED", pod)
        self.logs[(namespace, name)] = f"log of replica {rank}\n"

    # --- PyTorchJobs, as the Training Operator moves them ----------------------------------

    def add_pytorchjob(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return self._add(self.pytorchjobs, "PyTorchJob", manifest)

    def set_pytorchjob_condition(
        self, namespace: str, name: str, kind: str, message: str = "", at: str = ENDED
    ) -> None:
        """The operator's status write: ``kind`` (Created, Running, Restarting, Succeeded,
        Failed) becomes true at ``at``; Running and Restarting replace each other, and a
        run that ends leaves Running false, as ``UpdateJobConditions`` does."""
        obj = self.pytorchjobs[(namespace, name)]
        status = obj.setdefault("status", {})
        status.setdefault("startTime", STARTED)
        conditions = [c for c in status.get("conditions") or [] if c["type"] != kind]
        if kind in ("Running", "Restarting"):
            other = "Restarting" if kind == "Running" else "Running"
            conditions = [c for c in conditions if c["type"] != other]
        if kind in ("Succeeded", "Failed"):
            status["completionTime"] = at
            for c in conditions:
                if c["type"] == "Running":
                    c["status"] = "False"
        conditions.append(
            {
                "type": kind,
                "status": "True",
                "reason": f"PyTorchJob{kind}",
                "message": message or f"PyTorchJob {name} is {kind.lower()}.",
                "lastTransitionTime": at,
                "lastUpdateTime": at,
            }
        )
        status["conditions"] = conditions
        self._changed("PyTorchJob", "MODIFIED", obj)

    def set_operator_pods(
        self,
        namespace: str,
        name: str,
        placed: int,
        running: int = 0,
        message: str = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    ) -> None:
        """The pods of a PyTorchJob as the operator creates them (``<name>-master-0``,
        ``<name>-worker-<i>``, labelled ``training.kubeflow.org/*``) and the scheduler
        leaves them: the first ``placed`` bound to a node (the first ``running`` Running),
        the rest Pending and Unschedulable. Each pod's log reads ``log of replica <rank>``."""
        obj = self.pytorchjobs[(namespace, name)]
        self._drop_pods(_pytorchjob_of, namespace, name)
        specs = obj["spec"]["pytorchReplicaSpecs"]
        ranks = [("master", 0, specs["Master"])]
        if "Worker" in specs:
            ranks += [("worker", i, specs["Worker"]) for i in range(specs["Worker"]["replicas"])]
        for rank, (kind, index, spec) in enumerate(ranks):
            template = spec["template"]
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels.update(
                {
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": kind,
                    "training.kubeflow.org/replica-index": str(index),
                }
            )
            if kind == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            annotations = dict((template.get("metadata") or {}).get("annotations") or {})
            self._add_pod(
                namespace,
                f"{name}-{kind}-{index}",
                template,
                labels,
                annotations,
                rank,
                placed=placed,
                running=running,
                message=message,
            )

    def delete_pytorchjob(self, namespace: str, name: str) -> bool:
        """Delete the PyTorchJob and its pods (as the garbage collector ends a background
        deletion); False if absent."""
        return self._delete(self.pytorchjobs, "PyTorchJob", _pytorchjob_of, namespace, name)


def _pytorchjob_of(pod: dict[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    return meta["namespace"], labels.get("training.kubeflow.org/job-name", "")


def _job_of(pod: dict[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    return meta["namespace"], (meta.get("labels") or {}).get("job-name", "")


def _matches(obj: dict[str, Any], label_selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, label_selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKube:
    """The client of one :class:`FakeCluster`."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def _up(self) -> None:
        if not self.cluster.reachable:
            raise KubeError(f"cluster {self.cluster.name}: connection refused")

    def _source(self, kind: str) -> dict[tuple[str, str], dict[str, Any]]:
        if kind == "PyTorchJob":
            if "pytorchjob" not in self.cluster.backends:
                raise NotServed(f"listing {kind}s: the server could not find it", 404, "NotFound")
            return self.cluster.pytorchjobs
        if kind == "Node":
            return {}  # listed by list_managed; never changes while watched
        return self.cluster.jobs if kind == "Job" else self.cluster.pods

    def list_managed(
        self,
        kind: str,
        page_size: int = 500,
        *,
        selector: str = MANAGED_SELECTOR,
        fields: str = "",
        narrow: bool = False,
    ) -> ObjectList:
        """As ``Kube.list_managed``; with ``narrow``, each object as the narrow decode
        keeps it (``narrowed``: the adapter's own decoder)."""
        listed = self._list_managed(kind, selector, fields)
        if not narrow:
            return listed
        return ObjectList(
            tuple(narrowed(kind, obj) for obj in listed.items), listed.resource_version
        )

    def _list_managed(self, kind: str, selector: str, fields: str) -> ObjectList:
        self._up()
        if kind == "Node":
            if self.cluster.nodes_forbidden:
                raise KubeError("listing Nodes: forbidden", 403, "Forbidden")
            nodes = tuple(copy.deepcopy(v) for _, v in sorted(self.cluster.nodes.items()))
            return ObjectList(nodes, str(self.cluster.version))
        source = self._source(kind)
        # under the cluster's lock, as the apiserver reads whole objects: the runtime's
        # phase writer annotates workloads on its own threads meanwhile (``apply_metadata``)
        with self.cluster.changed:
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
        if meta["name"] in self.cluster.invalid:  # as the API server refuses a bad object
            raise KubeError(
                f"creating {manifest['kind']} {key[0]}/{key[1]}: {manifest['kind']} "
                f"{key[1]!r} is invalid: metadata.annotations: Too long",
                422,
                "Invalid",
            )
        existing = self.cluster.jobs.get(key) if manifest["kind"] == "Job" else None
        created = existing is None
        if manifest["kind"] == "PyTorchJob":
            if "pytorchjob" not in self.cluster.backends:
                raise KubeError(f"creating PyTorchJob {key[0]}/{key[1]}: not found", 404)
            found = self.cluster.pytorchjobs.get(key)
            obj = found if found is not None else self.cluster.add_pytorchjob(manifest)
            verb = "create" if found is None else "adopt"
            self.cluster.calls.append(f"{verb} PyTorchJob {key[0]}/{key[1]}")
            m = obj["metadata"]
            return ApplyResult(
                "PyTorchJob",
                key[0],
                key[1],
                m["uid"],
                m["resourceVersion"],
                found is None,
                dict(m.get("annotations") or {}),
            )
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
        if manifest["kind"] != "Service":  # as Kube._create
            raise KubeError(f"cannot create {manifest['kind']}: not a workload kind")
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
        source = self.cluster.pytorchjobs if kind == "PyTorchJob" else self.cluster.jobs
        with self.cluster.changed:  # one write, never seen half done by a list (above)
            job = source.get((namespace, name))
            if job is None:
                raise KubeError(f"{kind} {namespace}/{name} not found")
            job["metadata"].setdefault("annotations", {}).update(annotations or {})
            job["metadata"]["resourceVersion"] = self.cluster._next()
            self.cluster._emit(kind, "MODIFIED", job)
            self.cluster.calls.append(f"annotate {namespace}/{name}")

    def emit_event(
        self, namespace: str, involved: dict[str, Any], reason: str, message: str, **_: Any
    ) -> None:
        self._up()
        self.cluster.events.append((involved["name"], reason, message))

    def delete_workload(self, namespace: str, name: str, kind: str = "Job") -> bool:
        self._up()
        if kind == "PyTorchJob":
            self.cluster.calls.append(f"delete PyTorchJob {namespace}/{name}")
            return self.cluster.delete_pytorchjob(namespace, name)
        self.cluster.calls.append(f"delete {namespace}/{name}")
        return self.cluster.delete(namespace, name)

    def watch_managed(
        self,
        kind: str,
        resource_version: str,
        timeout_seconds: int = 60,
        *,
        selector: str = MANAGED_SELECTOR,
        fields: str = "",
        narrow: bool = False,
    ) -> Iterator[WatchEvent]:
        """The events of ``kind`` after ``resource_version``, then each new one as it
        comes, until ``timeout_seconds`` pass or the cluster is closed. (Only our own Jobs
        and Pods change here: a watch of every pod or of the Nodes sees those changes.)
        With ``narrow``, each object as the narrow decode keeps it (``narrowed``)."""
        self._up()
        self._source(kind)  # NotServed, as the apiserver answers 404
        after = int(resource_version)
        deadline = time.monotonic() + timeout_seconds
        position = 0
        while True:
            with self.cluster.changed:
                while position == len(self.cluster.changes) and not self.cluster.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.cluster.changed.wait(left)
                if self.cluster.closed:
                    return
                batch = self.cluster.changes[position:]
                position = len(self.cluster.changes)
            for version, what, event_type, obj in batch:
                if what == kind and version > after:
                    yield WatchEvent(event_type, narrowed(kind, obj) if narrow else obj)

    def served_backends(self, wanted: Any) -> frozenset[str]:
        self._up()
        self.cluster.discoveries += 1
        return frozenset(b for b in wanted if b in self.cluster.backends)

    def list_labelled(
        self, kind: str, label_selector: str, namespace: str | None = None
    ) -> tuple[dict[str, Any], ...]:
        self._up()
        source = self._source(kind)
        with self.cluster.changed:
            return tuple(
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(source.items())
                if (namespace is None or ns == namespace) and _matches(obj, label_selector)
            )

    def read_logs(
        self,
        namespace: str,
        pod: str,
        container: str = "main",
        follow: bool = False,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        self._up()
        if (namespace, pod) not in self.cluster.pods:
            raise KubeError(f"pods {pod!r} not found", status=404)
        return self.cluster.logs.get((namespace, pod), "")


# --- cycles over a fake cluster ----------------------------------------------------------


class FakeCycles:
    """One Reconciler (a process) over one :class:`FakeCluster` (``local``; with
    ``backends``, e.g. ``{"pytorchjob"}``, when none is given), whose every cycle compiles
    to ``repo``, on a clock the test moves: ``cycle(after=30)``."""

    def __init__(
        self,
        repo: CompiledRepo,
        cluster: FakeCluster | None = None,
        *,
        backends: set[str] | None = None,
        watch: bool = False,
        clock: SteppedClock | None = None,
        leading: bool = True,
        leader_record: Callable[[], Memory | None] | None = None,
    ) -> None:
        self.repo = repo
        self.clock = clock or SteppedClock()
        self.cluster = cluster or FakeCluster("local", backends=set(backends or ()))
        self.reconciler = Reconciler(
            lambda: RepoSnapshot(files={}, version=self.repo.version),
            self._connect,  # type: ignore[arg-type]
            self.clock,
            is_leader=lambda: leading,
            watch=watch,
            sync_timeout=5.0,
            leader_record=leader_record,
        )

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.cluster)

    def cycle(self, after: float = 0) -> CycleResult:
        """A cycle ``after`` seconds after the clock's time."""
        self.clock.at += timedelta(seconds=after)
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: self.repo):
            return self.reconciler.run_once()

    def status_of(self, result: CycleResult) -> dict[str, bytes]:
        """The status files the status writer commits for ``result``."""
        assert result.plan is not None
        return render_cycle_status(result, self.repo, result.plan)

    def restart(self, status: Mapping[str, bytes]) -> FakeCycles:
        """A new process over the same cluster, at the same time, that knows only what the
        status branch's ``status`` files record."""
        again = type(self)(self.repo, self.cluster, clock=SteppedClock(self.clock.at))
        again.reconciler.seed(memory_from_status(read_status(status)))
        return again

    def bound_gpus(self) -> int:
        """The GPUs of the cluster's pods bound to a node."""
        return sum(
            int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
            for p in self.cluster.pods.values()
            if p["spec"].get("nodeName")
            for c in p["spec"].get("containers") or []
        )


class FollowerCycles(FakeCycles):
    """A replica that never leads (``serve``, ``run`` without the Lease) over ``leader``'s
    cluster and clock, seeded with ``status`` (the status branch when it starts). With
    ``follow`` it follows the leader's record: ``record`` is what the status branch holds
    when the replica next fetches it (None: the branch did not move), read once; ``asked``
    counts the fetches. ``cut`` cuts it off from the cluster (every call fails)."""

    def __init__(
        self, leader: FakeCycles, status: Mapping[str, bytes], *, follow: bool = True
    ) -> None:
        super().__init__(
            leader.repo,
            leader.cluster,
            clock=leader.clock,
            leading=False,
            leader_record=self._leader_record if follow else None,
        )
        self.cut = False
        self.record: Mapping[str, bytes] | None = None
        self.asked = 0
        self.reconciler.seed(memory_from_status(read_status(status)))

    def _leader_record(self) -> Memory | None:
        self.asked += 1
        record, self.record = self.record, None
        return None if record is None else memory_from_status(read_status(record))

    def _connect(self, spec: ClusterSpec) -> Any:
        return _CutKube(self)


class _CutKube(FakeKube):
    """A follower's client: every call fails while the follower is cut off."""

    def __init__(self, follower: FollowerCycles) -> None:
        super().__init__(follower.cluster)
        self.follower = follower

    def _up(self) -> None:
        if self.follower.cut:
            raise KubeError("connection refused")
        super()._up()
