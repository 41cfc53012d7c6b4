"""The pods of a distributed operation (a gang): which replica a pod is, and how many of a
gang's pods the scheduler has placed (pure).

A distributed run is an Indexed Job (one pod per completion index) or, with the
``pytorchjob`` backend, a Kubeflow ``PyTorchJob`` (one Master and N-1 Workers). Replica 0
is index 0 or the Master: its outputs and log are the run's.

What must live here: the replica a pod is, the newest pod per replica, how much of a gang
the scheduler has placed (``Placement``), and the gang's start timeout (``GangTimeout``).
Nothing here decides: the planner and ``decide`` read these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# A gang not all running within its queue's startTimeout is stopped and re-queued this
# many times; the next timeout stops it for good (docs/dispatch.md, "Start timeout").
GANG_REQUEUES = 1

# Set by the Job controller on every pod of an Indexed Job (annotation, and a label since
# Kubernetes 1.28).
ANNOTATION_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Set by the Kubeflow Training Operator on the pods of a PyTorchJob.
LABEL_KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"  # the PyTorchJob of a pod


def replica_index(pod: Mapping[str, Any]) -> int | None:
    """The replica (rank) a pod runs: its completion index; for a PyTorchJob, 0 for the
    Master and 1 + its index for a Worker; 0 for the one pod of a single-pod Job. None when
    the pod's labels say it is a replica but the number does not read."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    raw = annotations.get(ANNOTATION_COMPLETION_INDEX, labels.get(ANNOTATION_COMPLETION_INDEX))
    if raw is not None:
        return _non_negative(raw)
    kind = str(labels.get(LABEL_KUBEFLOW_REPLICA_TYPE) or "").lower()
    if kind == "master":
        return 0
    if kind == "worker":
        index = _non_negative(labels.get(LABEL_KUBEFLOW_REPLICA_INDEX))
        return None if index is None else index + 1
    return 0


def _non_negative(raw: object) -> int | None:
    try:
        value = int(str(raw))
    except ValueError:
        return None
    return value if value >= 0 else None


def latest_per_replica(pods: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """The newest pod of each replica (a retried index has an older, failed pod)."""
    out: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        index = replica_index(pod)
        if index is None:
            continue
        best = out.get(index)
        if best is None or _created(pod) >= _created(best):
            out[index] = pod
    return out


def _created(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


@dataclass(frozen=True)
class Placement:
    """How much of a gang of ``replicas`` pods the scheduler has placed."""

    replicas: int
    placed: int  # pods bound to a node
    running: int  # pods Running (or already finished)
    unplaced_reason: str = ""  # the scheduler's message for a pod it could not place
    created: int = 0  # pods the Job controller has created (one per replica at most)

    @property
    def complete(self) -> bool:
        return self.placed >= self.replicas

    @property
    def unschedulable(self) -> bool:
        """The scheduler found no node for at least one pod (not merely: not yet)."""
        return bool(self.unplaced_reason)

    def message(self) -> str:
        text = f"{self.placed} of {self.replicas} pods placed"
        return f"{text}; {self.unplaced_reason}" if self.unplaced_reason else text


def placement(pods: Iterable[Mapping[str, Any]], replicas: int) -> Placement:
    """Count the gang's placed and running pods (the newest pod of each replica)."""
    latest = latest_per_replica(pods)
    placed = running = 0
    reason = ""
    for index in sorted(latest):
        pod = latest[index]
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        if spec.get("nodeName"):
            placed += 1
            if status.get("phase") in ("Running", "Succeeded", "Failed"):
                running += 1
            continue
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason = reason or str(cond.get("message") or cond.get("reason") or "no room")
    return Placement(
        replicas=replicas,
        placed=placed,
        running=running,
        unplaced_reason=reason,
        created=len(latest),
    )


@dataclass(frozen=True, slots=True)
class GangTimeout:
    """A distributed operation stopped because its pods were not all running within its
    queue's ``startTimeout``: of which generation, how many times, and the stopped
    attempt's ``dispatched_at`` (the attempt a listed workload is, or is not)."""

    generation: int
    count: int
    dispatched_at: str | None

    @property
    def requeue(self) -> bool:
        return self.count <= GANG_REQUEUES

    def message(self) -> str:
        """Said of the stopped attempt once its numbers are gone."""
        if self.requeue:
            return "its pods were not all running within startTimeout: stopped and re-queued"
        return (
            "its pods were not all running within startTimeout again after it was "
            "re-queued once: stopped"
        )

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "dispatchedAt": self.dispatched_at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], generation: int) -> GangTimeout | None:
        count = data.get("count")
        at = data.get("dispatchedAt")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            return None
        return cls(generation, count, at if isinstance(at, str) else None)


def gang_timeout_message(gang: Placement, limit: int, requeue: bool) -> str:
    what = (
        f"{gang.placed} of {gang.replicas} pods placed, {gang.running} running "
        f"after startTimeout {limit}s"
    )
    if requeue:
        return f"{what}: stopped and re-queued (once), so it holds no GPUs while it waits"
    return f"{what} again after it was re-queued once: stopped"
