"""The pure steps of ``reconciler logs``: which op, which cluster, which pod, why no log."""

from __future__ import annotations

from typing import Any

import pytest
from support.builders import World

from reconciler.cli.logs_cmd import (
    LogsError,
    find_target,
    newest_pod,
    parse_op_id,
    selector,
    show_logs,
    waiting_reason,
)


def _world() -> World:
    w = World().cluster("local").queue("batch", concurrency=3)
    w.op("vision/train", queue="batch")
    w.op("vision/sweep-0", queue="batch").child_of("vision/sweep", 0)
    w.op("vision/sweep-1", queue="batch").child_of("vision/sweep", 1)
    w.op("vision/bad", queue="batch")
    return w.reject("vision/bad", "run.container.securityContext.privileged: not allowed")


def _pod(name: str, created: str, op: str | None = "vision/train", **status: object) -> dict:  # type: ignore[type-arg]
    annotations = {"reconciler.dev/operation-id": op} if op else {}
    return {
        "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
        "status": status,
    }


def test_parse_op_id() -> None:
    assert parse_op_id("vision/train") == ("vision", "train")
    for bad in ("train", "/train", "vision/", "a/b/c"):
        with pytest.raises(LogsError, match="expected PROJECT/OPERATION"):
            parse_op_id(bad)


def test_find_target_routes_to_the_ops_cluster_and_namespace() -> None:
    repo = _world().repo()
    target = find_target(repo, "vision/train", have_kubeconfig=False)
    op = next(o for o in repo.operations if o.id == "vision/train")
    assert target.cluster is not None and target.cluster.name == "local"
    assert target.namespace == op.namespace
    with pytest.raises(LogsError, match=r"is a workflow; .* vision/sweep-0, vision/sweep-1"):
        find_target(repo, "vision/sweep", have_kubeconfig=False)
    with pytest.raises(LogsError, match=r"rejected and never dispatched: run\.container"):
        find_target(repo, "vision/bad", have_kubeconfig=False)
    with pytest.raises(LogsError, match="no such operation"):
        find_target(repo, "vision/gone", have_kubeconfig=False)
    gone = find_target(repo, "vision/gone", have_kubeconfig=True)
    assert (gone.cluster, gone.namespace) == (None, None)  # search every namespace


def test_selector_uses_the_operation_label_when_it_is_a_valid_value() -> None:
    assert selector("vision/train") == (
        "app.kubernetes.io/managed-by=dispatch-reconciler,"
        "reconciler.dev/project=vision,reconciler.dev/operation=train"
    )
    long_name = "x" * 70
    assert "reconciler.dev/operation" not in selector(f"vision/{long_name}")


def test_newest_pod_of_the_operation() -> None:
    pods = [
        _pod("train-g1-a", "2024-01-01T00:00:00Z"),
        _pod("train-g2-b", "2024-01-02T00:00:00Z"),
        _pod("other", "2024-01-03T00:00:00Z", op="vision/train-other"),
    ]
    newest = newest_pod(pods, "vision/train")
    assert newest is not None and newest["metadata"]["name"] == "train-g2-b"
    assert newest_pod([], "vision/train") is None


def test_waiting_reason() -> None:
    unschedulable = _pod(
        "p",
        "t",
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            }
        ],
    )
    assert waiting_reason(unschedulable) == (
        "Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    pulling = _pod(
        "p",
        "t",
        phase="Pending",
        containerStatuses=[{"state": {"waiting": {"reason": "ErrImagePull"}}}],
    )
    assert waiting_reason(pulling) == "ErrImagePull"
    assert waiting_reason(_pod("p", "t", phase="Running")) is None
    assert waiting_reason(_pod("p", "t", phase="Succeeded")) is None


# --- --replica, through the fake kube ---------------------------------------------------


def _gang_cluster(placed: int = 4) -> tuple[Any, Any, Any]:
    from datetime import UTC, datetime

    from support.fake_kube import FakeCluster, FakeKube

    from reconciler.core.decision.render import render_operation

    repo = _world().repo()
    op = next(o for o in repo.operations if o.id == "vision/train")
    rendered = render_operation(op, {}, config_version="c1", dispatched_at=datetime.now(UTC))
    cluster = FakeCluster("local")
    cluster.add_job(dict(rendered.job))
    cluster.set_gang(op.namespace, rendered.name, replicas=4, placed=placed, running=placed)
    return find_target(repo, "vision/train", have_kubeconfig=False), FakeKube(cluster), cluster


def _show(target: Any, kube: Any, replica: int | None = None) -> str:
    out: list[str] = []
    kwargs = {} if replica is None else {"replica": replica}
    show_logs(target, kube, False, None, echo=lambda s, nl=True: out.append(s), **kwargs)
    return "".join(out)


def test_logs_of_a_distributed_run_come_from_replica_0_unless_asked() -> None:
    target, kube, _ = _gang_cluster()
    assert _show(target, kube) == "log of replica 0\n"
    assert _show(target, kube, 3) == "log of replica 3\n"
    with pytest.raises(LogsError, match=r"no pod for replica 7 \(replicas: 0, 1, 2, 3\)"):
        _show(target, kube, 7)


def test_logs_of_an_unplaced_replica_say_why() -> None:
    target, kube, _ = _gang_cluster(placed=3)
    assert _show(target, kube, 2) == "log of replica 2\n"
    with pytest.raises(
        LogsError, match=r"has not started: Unschedulable: 0/4 nodes .* nvidia.com/gpu"
    ):
        _show(target, kube, 3)


def test_replica_index_of_indexed_job_pytorchjob_and_single_pods() -> None:
    from reconciler.core.observation.gang import replica_index

    def pod(annotations: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
        return {"metadata": {"annotations": annotations or {}, "labels": labels}}

    assert replica_index(pod({"batch.kubernetes.io/job-completion-index": "2"})) == 2
    assert replica_index(pod(**{"batch.kubernetes.io/job-completion-index": "5"})) == 5
    master = {"training.kubeflow.org/replica-type": "master"}
    worker = {
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "1",
    }
    assert replica_index(pod(**master)) == 0
    assert replica_index(pod(**worker)) == 2  # worker 1 is rank 2 (the master is rank 0)
    assert replica_index(pod()) == 0  # a single-pod Job's pod
    assert replica_index(pod({"batch.kubernetes.io/job-completion-index": "x"})) is None
