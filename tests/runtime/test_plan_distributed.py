"""The planner and distributed operations (issue 14): quota counts every replica,
concurrency one per operation, maxPods, all or nothing under both FIFO strategies,
ExceedsQuota with the numbers, superseded runs holding their replicas."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from support.builders import NOW, World

from reconciler.core.decision.cycle import (
    ClusterListing,
    Memory,
    decide,
    listing_from_memory,
    memory_from_status,
)
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan import (
    AdmitWhen,
    ExceedsQuotaBlock,
    MaxPodsBlock,
    PendingReason,
    Plan,
    QuotaBlock,
)
from reconciler.core.reporting.status import operation_path, read_status, render_status
from reconciler.core.types import Phase
from reconciler.core.views.queue_view import (
    build_queue_detail,
    build_queues_view,
    queues_to_table,
    queues_view_from_status,
)
from reconciler.runtime.metrics import Metrics

R = PendingReason
GPU = "nvidia.com/gpu"


def dispatched(plan: Plan) -> list[str]:
    return [d.operation for d in plan.dispatch]


def pending(plan: Plan, op_id: str):  # type: ignore[no-untyped-def]
    return next(p for p in plan.pending if p.operation == op_id)


def gang_world(*, strict: bool = False, quota: int = 8, max_pods: int | None = None) -> World:
    """The issue's "done when": 4 x 2-GPU in a queue of 8 GPUs, another behind it, then a
    1-GPU job."""
    w = World().cluster("local")
    w.queue("team-a", quota={GPU: quota}, strict=strict, max_pods=max_pods)
    w.op("vision/ddp-1", gpu=2).replicas(4)
    w.op("vision/ddp-2", gpu=2).replicas(4)
    w.op("vision/small", gpu=1)
    return w


def test_a_gang_is_dispatched_whole_and_counts_every_replica() -> None:
    plan = gang_world().plan()
    assert dispatched(plan)[0] == "vision/ddp-1"
    (q,) = plan.queues
    assert q.used_after[GPU] == Decimal(8)
    assert q.pods_after == 4 and q.pods == 0
    # the second gang waits with its WHOLE request in the message
    p = pending(plan, "vision/ddp-2")
    assert p.reason is R.QUOTA_EXCEEDED
    assert isinstance(p.blocked_by, QuotaBlock)
    assert p.blocked_by.request == Decimal(8) and p.blocked_by.replicas == 4
    assert p.message.startswith(
        "needs nvidia.com/gpu 8 (4 replicas \u00d7 2, all or nothing); team-a uses 8 of 8"
    )
    assert p.admit.when is AdmitWhen.RESOURCES_RELEASED
    assert p.admit.operations == ("vision/ddp-1",) and p.admit.amount == Decimal(8)
    assert p.blocked_by.to_json()["replicas"] == 4


def test_best_effort_fifo_lets_a_smaller_op_pass_a_waiting_gang() -> None:
    w = gang_world(quota=9)
    plan = w.plan()
    assert dispatched(plan) == ["vision/ddp-1", "vision/small"]
    assert pending(plan, "vision/ddp-2").reason is R.QUOTA_EXCEEDED


def test_strict_fifo_holds_everything_behind_a_waiting_gang() -> None:
    plan = gang_world(strict=True, quota=9).plan()
    assert dispatched(plan) == ["vision/ddp-1"]
    small = pending(plan, "vision/small")
    assert small.reason is R.WAITING_BEHIND_HEAD
    assert small.admit.operations == ("vision/ddp-2",)
    assert "waits behind vision/ddp-2 (QuotaExceeded)" in small.message


def test_never_partial_a_gang_does_not_take_what_is_left() -> None:
    w = World().cluster("local").queue("q", quota={GPU: 8})
    w.op("p/one", gpu=2)
    w.op("p/gang", gpu=2).replicas(4)
    plan = w.plan()
    assert dispatched(plan) == ["p/one"]
    (q,) = plan.queues
    assert q.used_after[GPU] == Decimal(2)  # 6 are free, but the gang needs 8 at once
    assert pending(plan, "p/gang").blocked_by.release == Decimal(2)  # type: ignore[union-attr]


def test_exceeds_quota_at_once_with_the_numbers() -> None:
    w = World().cluster("local").queue("team-a", quota={GPU: 8})
    w.op("vision/big", gpu=2).replicas(5)
    w.op("vision/small", gpu=1)
    plan = w.plan()
    assert dispatched(plan) == ["vision/small"]
    p = pending(plan, "vision/big")
    assert p.reason is R.EXCEEDS_QUOTA and p.never_runs
    assert p.message == (
        "needs nvidia.com/gpu 10 (5 replicas \u00d7 2) but team-a's quota is 8; it can never "
        "be admitted unless the request is lowered or quota raised"
    )
    assert isinstance(p.blocked_by, ExceedsQuotaBlock)
    assert p.blocked_by.to_json()["exceeds"] == [
        {"resource": GPU, "request": "10", "quota": "8", "replicas": 5}
    ]


def test_exceeds_max_pods_at_once() -> None:
    w = World().cluster("local").queue("q", max_pods=3, quota={GPU: 100})
    w.op("p/gang", gpu=1).replicas(4)
    p = pending(w.plan(), "p/gang")
    assert p.reason is R.EXCEEDS_QUOTA and p.never_runs
    assert p.message.startswith("needs 4 pods but q's maxPods is 3")


def test_exceeds_both_max_pods_and_quota_names_both() -> None:
    w = World().cluster("local").queue("q", max_pods=3, quota={GPU: 2})
    w.op("p/gang", gpu=1).replicas(4)
    p = pending(w.plan(), "p/gang")
    assert p.reason is R.EXCEEDS_QUOTA
    assert "needs 4 pods but q's maxPods is 3; needs nvidia.com/gpu 4 (4 replicas" in p.message


def test_concurrency_counts_one_per_operation() -> None:
    w = World().cluster("local").queue("q", concurrency=2)
    w.op("p/gang-1").replicas(8)
    w.op("p/gang-2").replicas(8)
    w.op("p/third")
    plan = w.plan()
    assert dispatched(plan) == ["p/gang-1", "p/gang-2"]
    assert pending(plan, "p/third").reason is R.QUEUE_CONCURRENCY_LIMIT
    (q,) = plan.queues
    assert q.pods_after == 16


def test_max_pods_counts_every_replica_and_is_all_or_nothing() -> None:
    w = World().cluster("local").queue("q", max_pods=6)
    w.op("p/gang-1").replicas(4)
    w.op("p/gang-2").replicas(4)
    w.op("p/single")
    w.op("p/pair").replicas(2)
    plan = w.plan()
    # 4 + 4 > 6: the second gang waits; the single and then... 4 + 1 + 2 > 6
    assert dispatched(plan) == ["p/gang-1", "p/single"]
    p = pending(plan, "p/gang-2")
    assert p.reason is R.MAX_PODS_REACHED
    assert isinstance(p.blocked_by, MaxPodsBlock)
    assert p.message == (
        "needs 4 pods; q has 5 of 6 (maxPods) active; admitted when 3 pods are released by p/gang-1"
    )
    assert p.admit.when is AdmitWhen.RESOURCES_RELEASED
    assert (p.admit.resource, p.admit.amount) == ("pods", Decimal(3))
    assert p.blocked_by.to_json() == {
        "queue": "q",
        "pods": 4,
        "activePods": 5,
        "maxPods": 6,
        "release": 3,
        "releasedBy": ["p/gang-1"],
    }
    assert pending(plan, "p/pair").reason is R.MAX_PODS_REACHED


def test_max_pods_holds_a_strict_fifo_queue() -> None:
    w = World().cluster("local").queue("q", max_pods=4, strict=True)
    w.op("p/gang-1").replicas(4)
    w.op("p/gang-2").replicas(2)
    w.op("p/single")
    plan = w.plan()
    assert dispatched(plan) == ["p/gang-1"]
    assert pending(plan, "p/gang-2").reason is R.MAX_PODS_REACHED
    assert pending(plan, "p/single").reason is R.WAITING_BEHIND_HEAD


def test_max_pods_counts_observed_pods_else_the_compiled_replicas() -> None:
    w = World().cluster("local").queue("q", max_pods=8)
    w.op("p/running").replicas(4)
    w.op("p/other-run")
    w.op("p/next").replicas(3)
    w.observe("p/running", Phase.RUNNING)  # pods not observed: its 4 replicas count
    w.observe("p/other-run", Phase.RUNNING, pods=2)  # the workload says 2
    plan = w.plan()
    (q,) = plan.queues
    assert q.pods == 6
    assert pending(plan, "p/next").reason is R.MAX_PODS_REACHED
    w.observe("p/other-run", Phase.RUNNING, pods=1)
    assert dispatched(w.plan()) == ["p/next"]


def test_max_pods_with_no_active_operation_waits_for_the_limit_to_be_raised() -> None:
    w = World().cluster("local").queue("q", max_pods=0)
    w.op("p/one")
    p = pending(w.plan(), "p/one")
    # one pod over a maxPods of 0: can never run
    assert p.reason is R.EXCEEDS_QUOTA and "maxPods is 0" in p.message


def test_observed_requests_are_the_whole_workload() -> None:
    w = World().cluster("local").queue("q", quota={GPU: 8})
    w.op("p/gang", gpu=2).replicas(4)
    w.op("p/small", gpu=1)
    w.observe("p/gang", Phase.DISPATCHED)  # not placed yet: still holds its whole quota
    plan = w.plan()
    (q,) = plan.queues
    assert q.used[GPU] == Decimal(8)
    assert pending(plan, "p/small").reason is R.QUOTA_EXCEEDED


def test_policy_view_of_queue_summary_carries_max_pods() -> None:
    w = World().cluster("local").queue("q", max_pods=5)
    w.op("p/gang").replicas(2)
    (q,) = w.plan().queues
    assert (q.max_pods, q.pods, q.pods_after) == (5, 0, 2)


def test_superseded_run_counts_its_replicas_in_decide() -> None:
    """A generation bump while a 4-replica run is active: the old run keeps its 8 GPUs and
    4 pods (the planner's ``op@g1``), so the new generation waits."""
    w = World().cluster("local").queue("q", quota={GPU: 8}, max_pods=8)
    w.op("p/ddp", gpu=2).replicas(4)
    repo = w.repo()
    (op,) = repo.operations
    repo = replace(repo, operations=(replace(op, generation=2),))
    old = WorkloadState(
        operation="p/ddp",
        generation=1,
        cluster="local",
        namespace="p",
        name="p-ddp-g1",
        uid="u1",
        phase=Phase.RUNNING,
        queue="q",
    )  # no requests or pods on the state: the operation's count
    decision = decide(repo, {"local": ClusterListing((old,))}, Memory(), NOW)
    assert "p/ddp@g1" in decision.superseded
    (q,) = decision.plan.queues
    assert q.used[GPU] == Decimal(8) and q.pods == 4
    assert decision.plan.pending[0].reason is R.QUOTA_EXCEEDED
    # with the workload's own numbers (observed from the Job: 2 pods x 2 GPUs)
    old2 = replace(old, requests={GPU: Decimal(4)}, pods=2)
    decision = decide(repo, {"local": ClusterListing((old2,))}, Memory(), NOW)
    (q,) = decision.plan.queues
    assert q.used[GPU] == Decimal(4) and q.pods == 2


# --- every place quota is counted: queue view, status branch, metrics ---------------------


def _gang_cycle() -> tuple[Any, Plan, dict[str, WorkloadState]]:
    """One 4 x 2-GPU gang running in a queue of 8 GPUs and 6 pods, a 1-GPU job waiting."""
    w = World().cluster("local").queue("team-a", quota={GPU: 8}, max_pods=6)
    w.op("vision/ddp", gpu=2).replicas(4)
    w.op("vision/small", gpu=1)
    w.observe("vision/ddp", Phase.RUNNING, requests={GPU: 8}, pods=4, queue="team-a")
    repo = w.repo()
    plan = w.plan()
    state = WorkloadState(
        operation="vision/ddp",
        generation=1,
        cluster="local",
        namespace="vision",
        name="vision-ddp-g1",
        uid="u",
        phase=Phase.RUNNING,
        queue="team-a",
        requests={GPU: Decimal(8)},
        pods=4,
    )
    return repo, plan, {"vision/ddp": state}


def test_queue_view_counts_every_replica() -> None:
    repo, plan, states = _gang_cycle()
    view = build_queues_view(repo, plan, states, applied=True)
    (row,) = view.rows
    assert row.quotas[0].used == Decimal(8) and row.quotas[0].limit == Decimal(8)
    assert (row.active, row.pods, row.max_pods, row.pods_text) == (1, 4, 6, "4/6")
    assert view.fleet.pods == 4
    assert row.to_json()["pods"] == 4 and row.to_json()["maxPods"] == 6
    assert "4/6" in queues_to_table(view, wide=True)
    detail = build_queue_detail(repo, plan, states, "team-a", applied=True)
    assert detail is not None
    assert ("maxPods", "6") in [(s.key, s.value) for s in detail.settings]
    (active,) = detail.active
    assert active.requests == "nvidia.com/gpu=8"
    (waiting,) = detail.pending
    assert waiting.requests == "nvidia.com/gpu=1"


def test_status_branch_records_every_replica_and_reads_back() -> None:
    repo, plan, states = _gang_cycle()
    files = render_status(repo, plan, states)
    text = files["status/queues.yaml"].decode()
    assert "maxPods: 6" in text and "pods: 4" in text
    view = queues_view_from_status(read_status(files))
    (row,) = view.rows
    assert (row.pods, row.max_pods) == (4, 6)
    assert row.quotas[0].used == Decimal(8)


def test_metrics_count_every_replica() -> None:
    _, plan, _ = _gang_cycle()
    metrics = Metrics()
    metrics.observe_plan(plan)
    labels = {"queue": "team-a", "cluster": "local"}
    gpu = {"queue": "team-a", "resource": GPU, "flavor": ""}
    assert metrics.registry.get_sample_value("reconciler_queue_active_pods", labels) == 4
    assert metrics.registry.get_sample_value("reconciler_queue_quota_used", gpu) == 8
    assert metrics.registry.get_sample_value("reconciler_queue_active_operations", labels) == 1


def test_plan_from_the_status_branch_counts_a_gangs_pods_as_the_cycle_does() -> None:
    repo, plan, states = _gang_cycle()
    single = WorkloadState(
        operation="vision/small",
        generation=1,
        cluster="local",
        namespace="vision",
        name="vision-small-g1",
        uid="u2",
        phase=Phase.RUNNING,
        queue="team-a",
        requests={GPU: Decimal(1)},
        pods=1,
    )
    states = {**states, "vision/small": single}
    files = render_status(repo, plan, states)
    record = files[operation_path("vision/ddp")].decode()
    assert "pods: 4" in record and "nvidia.com/gpu: '8'" in record
    assert "pods:" not in files[operation_path("vision/small")].decode()  # one pod: not written
    memory = memory_from_status(read_status(files))
    assert memory.seen["vision/ddp"].pods == 4
    assert memory.seen["vision/small"].pods == 1  # its requests are recorded: one pod
    listing = listing_from_memory(repo, memory)
    from_status = decide(repo, listing, memory, NOW).plan
    live = decide(repo, {"local": ClusterListing(tuple(states.values()))}, Memory(), NOW).plan
    assert [(q.pods, dict(q.used)) for q in from_status.queues] == [
        (q.pods, dict(q.used)) for q in live.queues
    ]
    assert from_status.queues[0].pods == 5


def test_a_gang_and_a_single_op_short_of_the_same_amount_are_worded_apart() -> None:
    w = World().cluster("local").queue("q", quota={GPU: 8})
    w.op("p/hog", gpu=8)
    w.op("p/gang", gpu=2).replicas(4)
    w.op("p/big", gpu=8)
    plan = w.plan()
    gang, big = pending(plan, "p/gang"), pending(plan, "p/big")
    assert gang.message.startswith("needs nvidia.com/gpu 8 (4 replicas \u00d7 2, all or nothing)")
    assert big.message.startswith("needs nvidia.com/gpu 8; q uses 8 of 8")
    assert gang.blocked_by is not big.blocked_by
