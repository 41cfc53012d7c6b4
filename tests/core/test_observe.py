"""Observed phases derived from Job and Pod objects as the apiserver returns them."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from reconciler.core.decision.render import ANNOTATION_GENERATION, ANNOTATION_OPERATION
from reconciler.core.observation.observe import (
    ObservedReason,
    WorkloadState,
    current_states,
    job_finished_at,
    observe_workloads,
)
from reconciler.core.types import Phase


def _job(
    name: str = "vision-train-1-g1",
    op: str = "vision/train-1",
    gen: int = 1,
    conditions: list[dict[str, Any]] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "vision",
            "uid": f"uid-{name}",
            "labels": {"reconciler.dev/queue": "team-a"},
            "annotations": {ANNOTATION_OPERATION: op, ANNOTATION_GENERATION: str(gen)},
            **meta,
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "resources": {
                                "limits": {"nvidia.com/gpu": "2"},
                                "requests": {"cpu": "500m"},
                            },
                        },
                        {"name": "side", "resources": {"requests": {"cpu": "1"}}},
                    ]
                }
            }
        },
        "status": {"conditions": conditions or [], "startTime": "2026-12-03T08:00:00Z"},
    }


def _pod(job: str = "vision-train-1-g1", phase: str = "Pending", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-abcde",
            "namespace": "vision",
            "labels": {"job-name": job},
            "creationTimestamp": "2026-12-03T08:00:01Z",
        },
        "spec": {"nodeName": status.pop("node", None)},
        "status": {"phase": phase, **status},
    }


def _one(jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Any:
    (state,) = observe_workloads("local", jobs, pods)
    return state


def test_unschedulable_pod_is_dispatched_waiting_for_capacity() -> None:
    pod = _pod(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            }
        ]
    )
    state = _one([_job()], [pod])
    assert state.phase is Phase.DISPATCHED
    assert state.reason is ObservedReason.WAITING_FOR_CAPACITY
    assert "Insufficient nvidia.com/gpu" in state.message
    assert state.phase.active  # it still counts against its queue


def test_requests_sum_containers_and_fall_back_to_limits() -> None:
    state = _one([_job()], [])
    assert state.requests == {"nvidia.com/gpu": Decimal(2), "cpu": Decimal("1.5")}
    assert (state.phase, state.reason) == (Phase.DISPATCHED, ObservedReason.PENDING_POD)
    observed = state.to_observed()
    assert (observed.operation, observed.queue, observed.cluster) == (
        "vision/train-1",
        "team-a",
        "local",
    )


def test_running_succeeded_failed_and_outputs() -> None:
    assert _one([_job()], [_pod(phase="Running", node="kwok-gpu-0")]).phase is Phase.RUNNING
    done = _one(
        [_job(conditions=[{"type": "Complete", "status": "True"}])],
        [
            _pod(
                phase="Succeeded",
                containerStatuses=[
                    {"state": {"terminated": {"exitCode": 0, "message": '{"loss": 0.1}'}}}
                ],
            )
        ],
    )
    assert (done.phase, done.outputs) == (Phase.SUCCEEDED, {"loss": 0.1})
    failed = _one(
        [
            _job(
                conditions=[
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": "too slow",
                    }
                ]
            )
        ],
        [],
    )
    assert (failed.phase, failed.reason) == (Phase.FAILED, ObservedReason.DEADLINE_EXCEEDED)
    assert failed.message == "too slow"


def test_jobs_without_our_operation_annotation_are_ignored() -> None:
    stray = _job()
    del stray["metadata"]["annotations"][ANNOTATION_OPERATION]
    assert observe_workloads("local", [stray], []) == ()


def test_current_state_follows_the_generation_the_repo_asks_for() -> None:
    states = observe_workloads(
        "local",
        [
            _job("vision-train-1-g1", gen=1, conditions=[{"type": "Complete", "status": "True"}]),
            _job("vision-train-1-g2", gen=2),
        ],
        [],
    )
    assert current_states(states, {"vision/train-1": 2})["vision/train-1"].generation == 2
    assert "vision/train-1" not in current_states(states, {"vision/train-1": 3})
    assert current_states(states, {})["vision/train-1"].generation == 2  # removed: newest


def test_a_finished_pod_holds_quota_until_the_job_is_finished() -> None:
    state = _one([_job()], [_pod(phase="Succeeded")])
    assert (state.phase, state.reason) == (Phase.RUNNING, ObservedReason.FINISHING)
    assert state.phase.active


# --- a distributed run: an Indexed Job's pods, all or nothing ----------------------------


def _gang_job(replicas: int = 4, **kw: Any) -> dict[str, Any]:
    job = _job(**kw)
    job["spec"].update(completionMode="Indexed", completions=replicas, parallelism=replicas)
    return job


def _replica(index: int, phase: str = "Pending", node: str | None = None, **status: Any) -> Any:
    pod = _pod(phase=phase, node=node, **status)
    pod["metadata"]["name"] = f"vision-train-1-g1-{index}-abcde"
    pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    return pod


_NO_ROOM = [
    {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/8 nodes are available: 4 Insufficient nvidia.com/gpu.",
    }
]


def test_a_gang_placed_in_part_waits_for_capacity_k_of_n() -> None:
    pods = [_replica(i, "Running", f"kwok-h100-{i}") for i in range(3)]
    pods.append(_replica(3, conditions=_NO_ROOM))
    state = _one([_gang_job()], pods)
    assert state.phase is Phase.DISPATCHED  # replica 0 runs, the run does not
    assert state.reason is ObservedReason.WAITING_FOR_CAPACITY
    assert state.message == (
        "3 of 4 pods placed; 0/8 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    assert state.gang is not None and (state.gang.placed, state.gang.running) == (3, 3)
    assert state.node == "kwok-h100-0"  # replica 0's


def test_a_gang_whose_pods_are_not_all_created_is_not_waiting_for_capacity() -> None:
    state = _one([_gang_job()], [_replica(0, "Running", "n0"), _replica(1, "Running", "n1")])
    assert (state.phase, state.reason) == (Phase.DISPATCHED, ObservedReason.PENDING_POD)
    assert state.message == "2 of 4 pods placed; 2 of 4 pods created"


def test_a_gang_runs_when_every_pod_runs_and_outputs_come_from_replica_0() -> None:
    done = {"terminated": {"exitCode": 0, "message": '{"loss": 0.5}'}}
    other = {"terminated": {"exitCode": 0, "message": '{"loss": 9}'}}
    pods = [_replica(i, "Running", f"n{i}") for i in range(1, 4)]
    pods[0]["status"]["containerStatuses"] = [{"state": other}]
    pods.append(_replica(0, "Succeeded", "n0", containerStatuses=[{"state": done}]))
    state = _one([_gang_job()], pods)
    assert (state.phase, state.reason) == (Phase.RUNNING, ObservedReason.FINISHING)
    assert state.outputs == {"loss": 0.5}
    all_placed = _one(
        [_gang_job()],
        [_replica(0, "Running", "n0")] + [_replica(i, "Pending", f"n{i}") for i in range(1, 4)],
    )
    assert (all_placed.phase, all_placed.reason) == (Phase.DISPATCHED, ObservedReason.SCHEDULED)
    assert all_placed.message == "all 4 pods placed, 1 running"
    complete = _gang_job(conditions=[{"type": "Complete", "status": "True"}])
    finished = _one(
        [complete], [_replica(0, "Succeeded", "n0", containerStatuses=[{"state": done}])]
    )
    assert finished.phase is Phase.SUCCEEDED and finished.outputs == {"loss": 0.5}


def test_a_retried_index_counts_its_newest_pod() -> None:
    old = _replica(1, "Failed", "n1")
    old["metadata"]["creationTimestamp"] = "2026-12-03T07:00:00Z"
    new = _replica(1, conditions=_NO_ROOM)
    new["metadata"]["name"] += "-retry"
    state = _one([_gang_job(replicas=2)], [_replica(0, "Running", "n0"), old, new])
    assert state.reason is ObservedReason.WAITING_FOR_CAPACITY
    assert state.message.startswith("1 of 2 pods placed; ")


def test_a_run_ends_when_its_success_or_failure_is_established() -> None:
    """The ledger's end time is the same whenever the Job is read: before ``Complete``
    (only ``SuccessCriteriaMet``) and after it."""
    met = {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "T1"}
    done = {"type": "Complete", "status": "True", "lastTransitionTime": "T2"}
    finishing = {"status": {"conditions": [met]}}
    complete = {"status": {"conditions": [met, done], "completionTime": "T2"}}
    assert job_finished_at(finishing) == job_finished_at(complete) == "T1"
    target = {"type": "FailureTarget", "status": "True", "lastTransitionTime": "F1"}
    failed = {"type": "Failed", "status": "True", "lastTransitionTime": "F2"}
    assert job_finished_at({"status": {"conditions": [target, failed]}}) == "F1"
    assert job_finished_at({"status": {"conditions": [failed]}}) == "F2"
    assert job_finished_at({"status": {"completionTime": "T3"}}) == "T3"
    assert job_finished_at({"status": {}}) is None


def test_a_state_is_turned_into_the_planners_view_once() -> None:
    """``to_observed`` is built once per state (each cycle asks every state again), and a
    state changed by ``replace`` is a new one with its own view."""
    state = WorkloadState(
        operation="p/a",
        generation=1,
        cluster="local",
        namespace="ns",
        name="p-a-g1",
        uid="u",
        phase=Phase.RUNNING,
        queue="q",
        requests={"cpu": Decimal(1)},
        dispatched_at="2026-01-01T10:00:00Z",
        started_at="2026-01-01T10:01:00Z",
    )
    seen = state.to_observed()
    assert state.to_observed() is seen
    assert (seen.operation, seen.phase, seen.requests, seen.queue) == (
        "p/a",
        Phase.RUNNING,
        {"cpu": Decimal(1)},
        "q",
    )
    assert seen.started_at is not None and seen.started_at.minute == 1
    done = replace(state, phase=Phase.SUCCEEDED)
    assert done.to_observed().phase is Phase.SUCCEEDED and state.to_observed() is seen
    assert done == replace(done)  # the view is no field: equality is the fields'
