"""Derive each operation's observed phase from the workloads (Jobs, and the Kubeflow
Training Operator's PyTorchJobs) and Pods we manage (pure).

Dispatch is not placement: a Job whose pod the scheduler cannot place is ``Dispatched``
with reason ``WaitingForCapacity``; it counts against its queue like a running one.

A PyTorchJob's run ends when the operator sets its ``Succeeded`` or ``Failed`` condition
(``kubeflow.org/v1`` ``JobCondition``); ``Created`` and ``Running`` say nothing the pods do
not, so while it runs its phase comes from its pods (Master and Workers, by the
``training.kubeflow.org/*`` labels the operator sets), as an Indexed Job's does. While the
operator restarts a failed replica (``Restarting``) the run is ``Running`` with that reason.

What must live here: the workload and pod shapes observation reads (``ObservedJob``,
``ObservedPyTorchJob``, ``ObservedPod``: the fields the watch caches keep), the observed
phase and reason of each operation (``WorkloadState``, ``ObservedReason``), a workload's
end, and the incremental ``Observer`` fed by the watch caches' changes.
"""

from __future__ import annotations

import bisect
import enum
import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict

from reconciler.core.decision.render import (
    ANNOTATION_COMMIT,
    ANNOTATION_DISPATCHED_AT,
    ANNOTATION_GENERATION,
    ANNOTATION_OPERATION,
    ANNOTATION_OUTPUTS,
    ANNOTATION_PHASE,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_WORKFLOW,
    LABEL_FLAVOR,
    LABEL_QUEUE,
)
from reconciler.core.decision.render_kubeflow import KIND as PYTORCHJOB
from reconciler.core.load import MAX_NUMBER_CHARS
from reconciler.core.observation.gang import (
    LABEL_KUBEFLOW_JOB_NAME,
    Placement,
    latest_per_replica,
    placement,
)
from reconciler.core.quantity import QuantityError, parse_quantity, pod_requests
from reconciler.core.types import ObservedOperation, Phase

JOB = "Job"

MAX_OUTPUTS_BYTES = 4096  # the kubelet caps termination messages at 4 KiB


class ObservedReason(enum.StrEnum):
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # pod Unschedulable: no node fits (yet)
    SCHEDULED = "Scheduled"  # bound to a node, containers not running yet
    PENDING_POD = "PodPending"  # Job exists, its pod not created or not scheduled yet
    COMPLETED = "Completed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    JOB_FAILED = "JobFailed"
    DELETING = "Deleting"
    FINISHING = "Finishing"
    CLUSTER_UNREACHABLE = "ClusterUnreachable"  # the last state seen; the cluster is down
    GANG_TIMEOUT = "GangTimeout"  # a gang not all running within the queue's startTimeout
    RESTARTING = "Restarting"  # a PyTorchJob's operator restarts a failed replica
    STOPPED_IN_REPO = "StoppedInRepo"  # ``stopped: true``: its workload deleted


@dataclass(frozen=True)
class WorkloadState:
    """One workload (a Job and its pod) of one generation of an operation."""

    operation: str
    generation: int
    cluster: str
    namespace: str
    name: str
    uid: str
    phase: Phase
    reason: ObservedReason | None = None
    message: str = ""
    queue: str | None = None
    spec_hash: str | None = None
    config_commit: str | None = None
    dispatched_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    node: str | None = None
    pod: str | None = None
    outputs: Mapping[str, Any] | None = None
    outputs_path: str | None = None  # where it writes its outputs (run.outputs), as dispatched
    # every pod's: one pod's request times ``pods``
    requests: Mapping[str, Decimal] = field(default_factory=dict)
    annotated_phase: str | None = None  # the phase last written onto the workload
    workflow: str | None = None  # the workflow it was dispatched for ("" none, None unknown)
    pods: int | None = None  # the Job's parallelism (its replicas); None when not known
    gang: Placement | None = None  # a distributed run's pods: how many placed and running
    kind: str = JOB  # the workload's kind: Job, or PyTorchJob (backend pytorchjob)
    flavor: str | None = None  # the flavor it was dispatched with (a queue with flavors)
    # seconds: the timeout it was dispatched with (its activeDeadlineSeconds); its budget
    # reservation runs to it, whatever the repo says now. None: unbounded or not known
    timeout: int | None = None
    # ``StoppedInRepo``: the commit that set ``stopped: true`` and its author, and where
    # ({commit, author, file, line}; the author only where Git could say)
    stopped_by: Mapping[str, Any] | None = None

    def to_observed(self) -> ObservedOperation:
        """The workload as the planner sees it. Built once per state: a workload's state is
        the same object from cycle to cycle until it changes (``Observer``), and every
        cycle's ``decide`` asks each one."""
        return self._observed

    @functools.cached_property
    def _observed(self) -> ObservedOperation:
        return ObservedOperation(
            operation=self.operation,
            phase=self.phase,
            # not known (a state recorded on the status branch): the compiled requests count
            requests=dict(self.requests) if self.requests else None,
            queue=self.queue,
            cluster=self.cluster,
            workflow=self.workflow,
            pods=self.pods,
            flavor=self.flavor,
            dispatched_at=parse_time(self.dispatched_at),
            started_at=parse_time(self.started_at or self.dispatched_at),
            timeout=self.timeout,
        )


def cached(obj: dict[str, Any]) -> dict[str, Any]:
    """What the watch caches keep of an object read from a cluster: all of it but
    ``metadata.managedFields``, server-side apply's record of who set which field (about
    half of a Job's JSON, read by nothing here). Observation gives the same on it as on the
    whole object (tests/core/test_observe_cached.py). Changes ``obj`` in place: it is the
    caller's own, just parsed."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


# What observation reads of each kind (this module, ``core/observation/gang.py`` and
# ``core/decision/trigger.py`` through ``workload_end_phase``): the watch caches of the
# workloads and their pods keep only these fields (``adapters/kube.py`` decodes a watch
# event or a list straight into them, without building the rest: ``managedFields``, the
# pod's volumes, env, images...).
# A field read here must be in these; tests/adapters/test_observe_narrow.py checks that the
# observation of the narrow objects equals that of the whole ones on real Jobs, Indexed
# Jobs, PyTorchJobs and pods (failed, evicted, deleted). Leaves are ``Any``: any JSON value
# reads as the whole object's would. An object that does not fit (a value of another JSON
# type where an object or list is expected) is parsed whole instead.


class _Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    labels: Any
    annotations: Any


class _Condition(TypedDict, total=False):
    type: Any
    status: Any
    reason: Any
    message: Any
    lastTransitionTime: Any


class _Terminated(TypedDict, total=False):
    message: Any


class _ContainerState(TypedDict, total=False):
    terminated: _Terminated | None


class _ContainerStatus(TypedDict, total=False):
    state: _ContainerState | None


class _Status(TypedDict, total=False):
    phase: Any
    conditions: list[_Condition] | None
    startTime: Any
    completionTime: Any
    containerStatuses: list[_ContainerStatus] | None


class _Container(TypedDict, total=False):
    resources: Any
    restartPolicy: Any


class _PodSpec(TypedDict, total=False):
    containers: list[_Container] | None
    initContainers: list[_Container] | None


class _Template(TypedDict, total=False):
    spec: _PodSpec | None


class _JobSpec(TypedDict, total=False):
    parallelism: Any
    activeDeadlineSeconds: Any
    completionMode: Any
    template: _Template | None


class _ReplicaSpec(TypedDict, total=False):
    replicas: Any
    template: _Template | None


class _RunPolicy(TypedDict, total=False):
    activeDeadlineSeconds: Any


class _PyTorchJobSpec(TypedDict, total=False):
    pytorchReplicaSpecs: dict[str, _ReplicaSpec | None] | None
    runPolicy: _RunPolicy | None


class _BoundSpec(TypedDict, total=False):
    nodeName: Any


class ObservedJob(TypedDict, total=False):
    metadata: _Metadata | None
    spec: _JobSpec | None
    status: _Status | None


class ObservedPyTorchJob(TypedDict, total=False):
    metadata: _Metadata | None
    spec: _PyTorchJobSpec | None
    status: _Status | None


class ObservedPod(TypedDict, total=False):
    metadata: _Metadata | None
    spec: _BoundSpec | None
    status: _Status | None


# The fields observation reads, per kind of object cached for it.
OBSERVED_FIELDS: Mapping[str, type] = {
    JOB: ObservedJob,
    "Pod": ObservedPod,
    PYTORCHJOB: ObservedPyTorchJob,
}


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        str(c.get("type")): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if c.get("status") == "True" or c.get("type") == "PodScheduled"
    }


def effective_pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """The pod's effective requests: its containers summed, with init containers and
    native sidecars counted as the scheduler does (``pod_requests``); where a container
    sets only a limit, the limit counts."""
    return pod_requests(
        [_container_requests(c) for c in pod_spec.get("containers") or []],
        [
            (_container_requests(c), c.get("restartPolicy") == "Always")
            for c in pod_spec.get("initContainers") or []
        ],
    )


def _replicas_of(job: Mapping[str, Any]) -> int:
    """The pods a Job runs at once: its ``parallelism`` (1 when unset or unreadable)."""
    value = (job.get("spec") or {}).get("parallelism", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for name in set(requests) | set(limits):
        raw = requests.get(name, limits.get(name))
        if raw is None:
            continue
        try:
            total[name] = parse_quantity(raw)
        except QuantityError:
            continue  # the apiserver validated it; never fail observation on it
    return total


def _outputs(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """JSON the main container wrote to its termination message, if any."""
    if not pod:
        return None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        message = terminated.get("message")
        if not message or len(message) > MAX_OUTPUTS_BYTES:
            continue
        try:
            value = json.loads(
                message, parse_int=_int, parse_float=_float, parse_constant=_constant
            )
        except (ValueError, RecursionError):
            return {"message": message}
        if _depth(value) > MAX_OUTPUTS_DEPTH:
            return {"message": message}
        return value if isinstance(value, dict) else {"value": value}
    return None


# Outputs go to the status branch, which is read back with the config loader's limits:
# JSON that would not read back (deep nesting, a 4000-digit number, NaN, 1e400) is kept as
# its text. The pod's author controls it: it must never make a status file unreadable.
MAX_OUTPUTS_DEPTH = 16


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError("number too long")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if len(text) > MAX_NUMBER_CHARS or not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not a number")


def _depth(value: Any) -> int:
    """Nesting of lists and maps (iterative: a 4 KiB message can nest 2000 deep)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            inner = item.values() if isinstance(item, dict) else item
            stack.extend((v, depth + 1) for v in inner)
    return deepest


def _job_end(job: Mapping[str, Any]) -> tuple[Phase, ObservedReason, str] | None:
    """The phase the Job alone says its run ended in (finished, failed, being deleted), or
    None while it runs: the part of a workload's phase that releases its quota."""
    conditions = _conditions(job)
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        return Phase.SUCCEEDED, ObservedReason.COMPLETED, ""
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    if failed:
        reason = str(failed.get("reason") or "")
        mapped = {
            "DeadlineExceeded": ObservedReason.DEADLINE_EXCEEDED,
            "BackoffLimitExceeded": ObservedReason.BACKOFF_LIMIT_EXCEEDED,
        }.get(reason, ObservedReason.JOB_FAILED)
        return Phase.FAILED, mapped, str(failed.get("message") or reason)
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return Phase.STOPPED, ObservedReason.DELETING, "the workload is being deleted"
    return None


def _pytorchjob_end(obj: Mapping[str, Any]) -> tuple[Phase, ObservedReason, str] | None:
    """The phase a PyTorchJob's conditions say its run ended in, or None while it runs.
    The operator sets ``Succeeded`` when the Master succeeds, and ``Failed`` when a replica
    fails with restartPolicy Never, or past runPolicy's backoffLimit or
    activeDeadlineSeconds (its reason is then ``PyTorchJobFailed``; the message says
    which)."""
    conditions = _conditions(obj)
    if "Succeeded" in conditions:
        return Phase.SUCCEEDED, ObservedReason.COMPLETED, ""
    failed = conditions.get("Failed")
    if failed:
        message = str(failed.get("message") or failed.get("reason") or "")
        reason = ObservedReason.JOB_FAILED
        if "backoff limit" in message:
            reason = ObservedReason.BACKOFF_LIMIT_EXCEEDED
        elif "deadline" in message:
            reason = ObservedReason.DEADLINE_EXCEEDED
        return Phase.FAILED, reason, message
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return Phase.STOPPED, ObservedReason.DELETING, "the workload is being deleted"
    return None


def pytorchjob_finished_at(obj: Mapping[str, Any]) -> str | None:
    """When a PyTorchJob's run ended, the same whenever it is read: the time its
    ``Succeeded`` or ``Failed`` condition became true (the operator keeps it while the
    condition stays true), else its ``completionTime``; None while it runs."""
    conditions = _conditions(obj)
    for kind in ("Succeeded", "Failed"):
        moment = (conditions.get(kind) or {}).get("lastTransitionTime")
        if moment:
            return str(moment)
    moment = (obj.get("status") or {}).get("completionTime")
    return str(moment) if moment else None


def workload_end_phase(kind: str, obj: Mapping[str, Any]) -> Phase | None:
    """``job_end_phase`` for any workload kind the reconciler creates."""
    end = _pytorchjob_end(obj) if kind == PYTORCHJOB else _job_end(obj)
    return end[0] if end else None


def job_finished_at(job: Mapping[str, Any]) -> str | None:
    """When the Job's run ended, by the Job alone and the same whenever it is read: the
    time its success or failure was first established (``SuccessCriteriaMet`` or
    ``FailureTarget``, set before ``Complete``/``Failed`` and kept after them), else its
    ``completionTime`` or the ``Failed`` condition's time (a Job controller that sets
    only those); None while it runs."""
    conditions = _conditions(job)
    for kind in ("SuccessCriteriaMet", "FailureTarget"):
        moment = (conditions.get(kind) or {}).get("lastTransitionTime")
        if moment:
            return str(moment)
    status = job.get("status") or {}
    moment = status.get("completionTime") or (conditions.get("Failed") or {}).get(
        "lastTransitionTime"
    )
    return str(moment) if moment else None


def job_end_phase(job: Mapping[str, Any]) -> Phase | None:
    """``Succeeded``, ``Failed`` or ``Stopped`` (being deleted) when the Job itself says its
    run has ended, whatever its pods say; None while it runs. ``observe_workloads`` gives
    the same phase for it."""
    end = _job_end(job)
    return end[0] if end else None


def _job_phase(
    job: Mapping[str, Any], pod: Mapping[str, Any] | None
) -> tuple[Phase, ObservedReason | None, str]:
    end = _job_end(job)
    if end is not None:
        return end
    if pod is None:
        return Phase.DISPATCHED, ObservedReason.PENDING_POD, "waiting for the Job's pod"
    pod_status = pod.get("status") or {}
    phase = pod_status.get("phase")
    if phase == "Running":
        return Phase.RUNNING, None, ""
    if phase in ("Succeeded", "Failed"):
        # The pod is done but the Job has no terminal condition yet: it still holds its
        # quota until the Job controller finishes it, as Kueue does.
        return Phase.RUNNING, ObservedReason.FINISHING, f"pod {phase}; the Job is finishing"
    scheduled = _conditions(pod).get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        message = str(scheduled.get("message") or "no node has room for it")
        return Phase.DISPATCHED, ObservedReason.WAITING_FOR_CAPACITY, message
    if (pod.get("spec") or {}).get("nodeName"):
        return Phase.DISPATCHED, ObservedReason.SCHEDULED, "starting on its node"
    return Phase.DISPATCHED, ObservedReason.PENDING_POD, "waiting for the scheduler"


def gang_size(job: Mapping[str, Any]) -> int:
    """How many pods must run together: an Indexed Job's parallelism (1 for any other Job)."""
    spec = job.get("spec") or {}
    if spec.get("completionMode") != "Indexed":
        return 1
    try:
        return max(1, int(spec.get("parallelism") or 1))
    except (TypeError, ValueError):
        return 1


def _gang_phase(
    phase: Phase, reason: ObservedReason | None, message: str, gang: Placement
) -> tuple[Phase, ObservedReason | None, str]:
    """A distributed run is not Running until every pod runs; while the scheduler has
    placed only some, it waits for capacity ("k of N pods placed")."""
    if phase.finished or reason is ObservedReason.DELETING:
        return phase, reason, message
    if not gang.complete and gang.unschedulable:
        return Phase.DISPATCHED, ObservedReason.WAITING_FOR_CAPACITY, gang.message()
    if not gang.complete:
        created = f"{gang.created} of {gang.replicas} pods created"
        return Phase.DISPATCHED, ObservedReason.PENDING_POD, f"{gang.message()}; {created}"
    if gang.running < gang.replicas:
        return (
            Phase.DISPATCHED,
            ObservedReason.SCHEDULED,
            f"all {gang.replicas} pods placed, {gang.running} running",
        )
    return phase, reason, message


def _pytorchjob_phase(
    obj: Mapping[str, Any], master: Mapping[str, Any] | None, gang: Placement
) -> tuple[Phase, ObservedReason | None, str]:
    """A PyTorchJob's phase: its conditions when its run ended or the operator restarts a
    replica; else, as an Indexed Job's, its pods' (the Master's, then the gang's)."""
    end = _pytorchjob_end(obj)
    if end is not None:
        return end
    restarting = _conditions(obj).get("Restarting")
    if restarting:
        message = str(restarting.get("message") or "the operator restarts a failed replica")
        return Phase.RUNNING, ObservedReason.RESTARTING, message
    if master is None and not gang.created:
        return Phase.DISPATCHED, ObservedReason.PENDING_POD, "waiting for the operator's pods"
    return _gang_phase(*_job_phase({}, master), gang)


def _pytorchjob_replicas(obj: Mapping[str, Any]) -> tuple[int, dict[str, Decimal]]:
    """A PyTorchJob's pods (every replica spec's ``replicas``) and what they request
    together (each spec's pod requests times its replicas)."""
    specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    pods = 0
    total: dict[str, Decimal] = {}
    for spec in specs.values():
        if not isinstance(spec, Mapping):
            continue
        raw = spec.get("replicas", 1)
        count = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0
        pods += count
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        for name, value in effective_pod_requests(pod_spec).items():
            total[name] = total.get(name, Decimal(0)) + value * count
    return max(pods, 1), total


def _latest_pod(pods: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    if not pods:
        return None
    return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))


_Owner = tuple[str, str]  # (namespace, name) of a workload


def _pod_owners(pod: Mapping[str, Any]) -> tuple[_Owner | None, _Owner | None]:
    """The (namespace, name) of the Job and of the PyTorchJob a pod belongs to, by the
    ``job-name`` and ``training.kubeflow.org/job-name`` labels; None where unlabelled."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace"))
    job_name = labels.get("job-name")
    owner = labels.get(LABEL_KUBEFLOW_JOB_NAME)
    return (
        (namespace, str(job_name)) if job_name else None,
        (namespace, str(owner)) if owner else None,
    )


def _pods_by_owner(
    pods: Iterable[Mapping[str, Any]],
) -> tuple[dict[_Owner, list[Mapping[str, Any]]], dict[_Owner, list[Mapping[str, Any]]]]:
    """The pods per (namespace, Job name) and per (namespace, PyTorchJob name)."""
    pods_by_job: dict[_Owner, list[Mapping[str, Any]]] = {}
    pods_by_pytorchjob: dict[_Owner, list[Mapping[str, Any]]] = {}
    for candidate in pods:
        job, pytorchjob = _pod_owners(candidate)
        if job is not None:
            pods_by_job.setdefault(job, []).append(candidate)
        if pytorchjob is not None:
            pods_by_pytorchjob.setdefault(pytorchjob, []).append(candidate)
    return pods_by_job, pods_by_pytorchjob


def _operation_of(obj: Mapping[str, Any]) -> str | None:
    """The operation a workload was rendered for; None for one labelled by hand, not
    rendered by us: never ours to judge."""
    operation = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_OPERATION)
    return str(operation) if operation else None


def _owner_key(obj: Mapping[str, Any]) -> _Owner:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _observe_job(
    cluster: str, job: Mapping[str, Any], operation: str, job_pods: list[Mapping[str, Any]]
) -> WorkloadState:
    size = gang_size(job)
    gang: Placement | None = None
    if size > 1:
        # replica 0's pod is the run's: its node, its outputs
        pod = latest_per_replica(job_pods).get(0) or _latest_pod(job_pods)
        gang = placement(job_pods, size)
        phase, reason, message = _gang_phase(*_job_phase(job, pod), gang)
    else:
        pod = _latest_pod(job_pods)
        phase, reason, message = _job_phase(job, pod)
    pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    replicas = _replicas_of(job)
    requests = {k: v * replicas for k, v in effective_pod_requests(pod_spec).items()}
    return _state(
        cluster,
        job,
        operation,
        (phase, reason, message),
        pod,
        gang,
        replicas,
        requests=requests,
        finished_at=job_finished_at(job),
        kind=JOB,
        timeout=_deadline((job.get("spec") or {}).get("activeDeadlineSeconds")),
    )


def _observe_pytorchjob(
    cluster: str, obj: Mapping[str, Any], operation: str, own: list[Mapping[str, Any]]
) -> WorkloadState:
    replicas, requests = _pytorchjob_replicas(obj)
    pod = latest_per_replica(own).get(0)  # the Master: its node, its outputs
    gang = placement(own, replicas)
    return _state(
        cluster,
        obj,
        operation,
        _pytorchjob_phase(obj, pod, gang),
        pod,
        gang,
        replicas,
        requests=requests,
        finished_at=pytorchjob_finished_at(obj),
        kind=PYTORCHJOB,
        timeout=_deadline(
            (((obj.get("spec") or {}).get("runPolicy")) or {}).get("activeDeadlineSeconds")
        ),
    )


def _deadline(value: Any) -> int | None:
    """A workload's activeDeadlineSeconds; None when unset or not a positive integer."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _sorted(states: Iterable[WorkloadState]) -> tuple[WorkloadState, ...]:
    return tuple(sorted(states, key=lambda s: (s.operation, s.generation, s.cluster)))


def observe_workloads(
    cluster: str,
    jobs: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pytorchjobs: Iterable[Mapping[str, Any]] = (),
) -> tuple[WorkloadState, ...]:
    """The state of every managed Job and PyTorchJob in ``cluster``, matched to its pods
    by ``job-name`` (set by the Job controller) or ``training.kubeflow.org/job-name`` (set
    by the Training Operator)."""
    pods_by_job, pods_by_pytorchjob = _pods_by_owner(pods)
    states = []
    for job in jobs:
        operation = _operation_of(job)
        if operation is not None:
            states.append(
                _observe_job(cluster, job, operation, pods_by_job.get(_owner_key(job), []))
            )
    for obj in pytorchjobs:
        operation = _operation_of(obj)
        if operation is not None:
            own = pods_by_pytorchjob.get(_owner_key(obj), [])
            states.append(_observe_pytorchjob(cluster, obj, operation, own))
    return _sorted(states)


# A workload's inputs to observation: the resourceVersions of it and of its pods, in
# order. The apiserver gives each write a resourceVersion no other object has, so these
# say which version of each object was read.
_Versions = tuple[str, ...]


def _versions(obj: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> _Versions | None:
    """What observation of ``obj`` with ``pods`` depends on, or None when an object has no
    resourceVersion (then it is observed afresh each time)."""
    try:
        versions = (
            obj["metadata"]["resourceVersion"],
            *(pod["metadata"]["resourceVersion"] for pod in pods),
        )
    except (KeyError, TypeError):
        return None
    return versions if all(versions) else None


# One change of a cached object, by uid: the object now (None: deleted), and whether it was
# inserted anew, i.e. placed after every other (a dict places a new key last; a change in
# place keeps the object's place).
Change = tuple[Mapping[str, Any] | None, bool]


@dataclass(frozen=True, slots=True)
class CacheChanges:
    """What changed in one watch cache (``runtime/informer.py``) since it was last read:
    ``changed`` per uid, in the order the changes were made (an object inserted anew is
    last, as in the cache). With ``reset``, ``changed`` is everything the cache holds, in
    its order: the first read, after a list (a 410, a kind no longer served), or from a
    fresh list."""

    changed: Mapping[str, Change]
    reset: bool = False

    @classmethod
    def listing(cls, objects: Iterable[Mapping[str, Any]]) -> CacheChanges:
        """A whole listing, as a reset (an object whose uid was seen already is kept too,
        under another key: observation counts every object listed)."""
        changed: dict[str, Change] = {}
        for obj in objects:
            uid = str((obj.get("metadata") or {}).get("uid"))
            changed[uid if uid not in changed else f"{uid}\0{len(changed)}"] = (obj, True)
        return cls(changed, reset=True)


NO_CHANGES = CacheChanges({})
_KINDS = (JOB, PYTORCHJOB)  # in the order observe_workloads lists them


class Observer:
    """``observe_workloads`` kept up to date from the watch caches' changes: a cycle
    observes again only the workloads whose object or pods changed (``update``), not every
    cached Job and pod, and keeps the states sorted as they change, so a cycle over 10,000
    running Jobs costs what changed in it (docs/runtime.md, "One cycle", step 3).
    ``observe`` reads whole listings (a fresh list) the same way. A workload whose object
    and pods are at the resourceVersions it was last observed at is not observed again
    (a relist gives every object anew). For any sequence of changes, the states are equal
    to ``observe_workloads`` over the objects the caches hold, in their order
    (tests/runtime/test_observe_deltas.py, tests/core/test_observe_cached.py). Not
    thread-safe: one cycle at a time, as the Reconciler runs them."""

    def __init__(self) -> None:
        self._clusters: dict[str, _ClusterView] = {}

    def observe(
        self,
        cluster: str,
        jobs: Iterable[Mapping[str, Any]],
        pods: Iterable[Mapping[str, Any]],
        pytorchjobs: Iterable[Mapping[str, Any]] = (),
    ) -> tuple[WorkloadState, ...]:
        """The states of whole listings of ``cluster`` (what it held before is replaced)."""
        return self.update(
            cluster,
            CacheChanges.listing(jobs),
            CacheChanges.listing(pods),
            CacheChanges.listing(pytorchjobs),
        )

    def update(
        self,
        cluster: str,
        jobs: CacheChanges,
        pods: CacheChanges,
        pytorchjobs: CacheChanges = NO_CHANGES,
    ) -> tuple[WorkloadState, ...]:
        """The states of ``cluster`` after these changes to what it held."""
        view = self._clusters.get(cluster)
        if view is None:
            view = self._clusters[cluster] = _ClusterView(cluster)
        return view.update(jobs, pods, pytorchjobs)


_Key = tuple[str, str]  # (kind, uid) of a workload
_SortKey = tuple[str, int, int, int]  # operation, generation, kind's rank, place


class _ClusterView:
    """One cluster's cached workloads and pods, indexed by owner, and their states in
    ``observe_workloads``' order: by (operation, generation), then Jobs before PyTorchJobs,
    then in cache order (its sort is stable). A place is a counter given to an object when
    it is inserted into its cache, so places are in cache order."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.workloads: dict[str, dict[str, Mapping[str, Any]]] = {k: {} for k in _KINDS}
        self.owned: dict[str, dict[_Owner, set[str]]] = {k: {} for k in _KINDS}  # uids
        self.pod_owners: dict[str, tuple[_Owner | None, _Owner | None]] = {}
        # per kind, per owner, its pods by uid in cache order
        self.pods: dict[str, dict[_Owner, dict[str, Mapping[str, Any]]]] = {k: {} for k in _KINDS}
        self.places: dict[str, dict[str, int]] = {k: {} for k in (*_KINDS, "Pod")}
        self.counter = 0
        self.seen: dict[_Key, tuple[_Versions | None, WorkloadState, _SortKey]] = {}
        self.order: list[_SortKey] = []  # sorted, beside the states in that order
        self.states: list[WorkloadState] = []
        self.out: tuple[WorkloadState, ...] = ()

    def update(
        self, jobs: CacheChanges, pods: CacheChanges, pytorchjobs: CacheChanges
    ) -> tuple[WorkloadState, ...]:
        dirty: set[_Key] = set()
        self._workloads(JOB, jobs, dirty)
        self._workloads(PYTORCHJOB, pytorchjobs, dirty)
        self._pods(pods, dirty)
        reset = jobs.reset or pods.reset or pytorchjobs.reset
        if reset:  # every state again, so that none is left of what a failed change left
            dirty.update(self.seen)
        # many changed (a list, a relist): sorted once, not moved one by one
        bulk = reset or len(dirty) > 64 + len(self.seen) // 8
        moved = False
        for key in dirty:
            moved = self._observe(*key, bulk=bulk) or moved
        if bulk:
            ordered = sorted(self.seen.values(), key=lambda seen: seen[2])
            self.order = [seen[2] for seen in ordered]
            self.states = [seen[1] for seen in ordered]
        if moved:
            self.out = tuple(self.states)
        return self.out

    def _place(self, kind: str, uid: str) -> None:
        self.counter += 1
        self.places[kind][uid] = self.counter

    def _workloads(self, kind: str, changes: CacheChanges, dirty: set[_Key]) -> None:
        objects, owned, places = self.workloads[kind], self.owned[kind], self.places[kind]
        if changes.reset:
            dirty.update((kind, uid) for uid in objects)
            objects.clear()
            owned.clear()
            places.clear()
        for uid, (obj, inserted) in changes.changed.items():
            dirty.add((kind, uid))
            old = objects.pop(uid, None)
            if old is not None:
                _discard(owned, _owner_key(old), uid)
            if obj is None:
                places.pop(uid, None)
                continue
            objects[uid] = obj
            if inserted or old is None:
                self._place(kind, uid)
            owned.setdefault(_owner_key(obj), set()).add(uid)

    def _touch(self, kind: str, owner: _Owner, dirty: set[_Key]) -> None:
        dirty.update((kind, uid) for uid in self.owned[kind].get(owner, ()))

    def _pods(self, changes: CacheChanges, dirty: set[_Key]) -> None:
        places = self.places["Pod"]
        touch = not changes.reset  # else every workload is observed again
        if changes.reset:
            dirty.update((kind, uid) for kind in _KINDS for uid in self.workloads[kind])
            for kind in _KINDS:
                self.pods[kind].clear()
            self.pod_owners.clear()
            places.clear()
        for uid, (obj, inserted) in changes.changed.items():
            before = self.pod_owners.pop(uid, (None, None))
            moved = inserted or uid not in places
            if obj is None:
                places.pop(uid, None)
                after: tuple[_Owner | None, _Owner | None] = (None, None)
            else:
                if moved:
                    self._place("Pod", uid)
                after = self.pod_owners[uid] = _pod_owners(obj)
            for kind, was, now in zip(_KINDS, before, after, strict=True):
                groups = self.pods[kind]
                if was is not None and (was != now or moved):
                    group = groups[was]
                    del group[uid]
                    if not group:
                        del groups[was]
                    if touch:
                        self._touch(kind, was, dirty)
                if now is None or obj is None:
                    continue
                group = groups.setdefault(now, {})
                # in cache order; only an owner changed in place can come in before the last
                last = next(reversed(group), None)
                late = uid not in group and last is not None and places[last] > places[uid]
                group[uid] = obj
                if late:  # its owner changed in place: among the others by its place
                    groups[now] = dict(sorted(group.items(), key=lambda kv: places[kv[0]]))
                if touch:
                    self._touch(kind, now, dirty)

    def _observe(self, kind: str, uid: str, *, bulk: bool = False) -> bool:
        """Observe one workload again (its object or pods changed); True when the states
        moved. With ``bulk``, the sorted lists are left to the caller to rebuild."""
        key = (kind, uid)
        obj = self.workloads[kind].get(uid)
        last = self.seen.get(key)
        operation = _operation_of(obj) if obj is not None else None
        if obj is None or operation is None:
            if last is None:
                return False
            del self.seen[key]
            if not bulk:
                self._remove(last[2])
            return True
        own = list(self.pods[kind].get(_owner_key(obj), {}).values())
        versions = _versions(obj, own)
        if versions is not None and last is not None and last[0] == versions:
            state = last[1]
        else:
            observe = _observe_job if kind == JOB else _observe_pytorchjob
            state = observe(self.cluster, obj, operation, own)
        order = (state.operation, state.generation, _KINDS.index(kind), self.places[kind][uid])
        self.seen[key] = (versions, state, order)
        if last is not None and last[1] is state and last[2] == order:
            return False
        if bulk:
            return True
        if last is not None:
            self._remove(last[2])
        at = bisect.bisect_left(self.order, order)
        self.order.insert(at, order)
        self.states.insert(at, state)
        return True

    def _remove(self, order: _SortKey) -> None:
        at = bisect.bisect_left(self.order, order)
        del self.order[at]
        del self.states[at]


def _discard(owned: dict[_Owner, set[str]], owner: _Owner, uid: str) -> None:
    uids = owned.get(owner)
    if uids is not None:
        uids.discard(uid)
        if not uids:
            del owned[owner]


def _state(
    cluster: str,
    obj: Mapping[str, Any],
    operation: str,
    observed: tuple[Phase, ObservedReason | None, str],
    pod: Mapping[str, Any] | None,
    gang: Placement | None,
    replicas: int,
    *,
    requests: Mapping[str, Decimal],
    finished_at: str | None,
    kind: str,
    timeout: int | None = None,
) -> WorkloadState:
    """One workload's state: what every kind's metadata says, and what its kind says."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        generation = int(annotations.get(ANNOTATION_GENERATION, "1"))
    except ValueError:
        generation = 1
    phase, reason, message = observed
    return WorkloadState(
        operation=operation,
        generation=generation,
        cluster=cluster,
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid", "")),
        phase=phase,
        reason=reason,
        message=message,
        queue=(meta.get("labels") or {}).get(LABEL_QUEUE),
        flavor=(meta.get("labels") or {}).get(LABEL_FLAVOR) or None,
        spec_hash=annotations.get(ANNOTATION_SPEC_HASH),
        config_commit=annotations.get(ANNOTATION_COMMIT),
        dispatched_at=annotations.get(ANNOTATION_DISPATCHED_AT),
        started_at=(obj.get("status") or {}).get("startTime"),
        node=((pod or {}).get("spec") or {}).get("nodeName"),
        pod=((pod or {}).get("metadata") or {}).get("name"),
        outputs=_outputs(pod),
        outputs_path=annotations.get(ANNOTATION_OUTPUTS) or None,
        annotated_phase=annotations.get(ANNOTATION_PHASE),
        workflow=annotations.get(ANNOTATION_WORKFLOW),
        pods=replicas,
        gang=gang if gang is not None and gang.replicas > 1 else None,
        requests=requests,
        finished_at=finished_at,
        kind=kind,
        timeout=timeout,
    )


def current_states(
    states: Iterable[WorkloadState], generations: Mapping[str, int]
) -> dict[str, WorkloadState]:
    """Per operation, the workload of the generation the repo asks for (``generations``);
    for operations no longer in the repo, their newest workload."""
    out: dict[str, WorkloadState] = {}
    for state in states:
        wanted = generations.get(state.operation)
        if wanted is not None and state.generation != wanted:
            continue
        best = out.get(state.operation)
        if best is None or state.generation > best.generation:
            out[state.operation] = state
    return out


@functools.lru_cache(maxsize=1 << 16)
def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time from an object or a record; None when absent or unreadable. Cached:
    each cycle reads the same dispatch and start times of every workload again."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
