"""plan_dispatch: one test per reason, both FIFO strategies, workflows, prune and the guard."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from support.builders import NOW, T0, World
from support.worlds import seed_world

from reconciler.core.plan import (
    ConcurrencyBlock,
    PendingReason,
    Plan,
    PlanInputError,
    QuotaBlock,
    StopReason,
    numbered,
    plan_dispatch,
)
from reconciler.core.types import OrgSettings, Phase

R = PendingReason


def dispatched(plan: Plan) -> list[str]:
    return [d.operation for d in plan.dispatch]


def reasons(plan: Plan) -> dict[str, PendingReason]:
    return {p.operation: p.reason for p in plan.pending}


def pending(plan: Plan, op_id: str):  # type: ignore[no-untyped-def]
    return next(p for p in plan.pending if p.operation == op_id)


# --- the seed example -------------------------------------------------------------------


def test_seed_example() -> None:
    plan = seed_world().plan()
    by_queue = {q.name: q for q in plan.queues}

    team_a = [d.operation for d in plan.dispatch if d.queue == "team-a"]
    assert team_a == ["vision/train-1", "vision/train-2"]
    a_pending = [p for p in plan.pending if p.queue == "team-a"]
    at = plan.positions()
    assert [(p.operation, p.reason, at[p.operation]) for p in a_pending] == [
        ("vision/train-3", R.QUOTA_EXCEEDED, 1),
        ("vision/train-4", R.QUOTA_EXCEEDED, 2),
        ("vision/train-5", R.QUOTA_EXCEEDED, 3),
    ]
    assert a_pending[0].message == (
        "needs nvidia.com/gpu 1; team-a uses 2 of 2; "
        "admitted when 1 GPU is released by vision/train-1"
    )

    assert len([d for d in plan.dispatch if d.queue == "team-b"]) == 4
    assert [p.reason for p in plan.pending if p.queue == "team-b"] == [R.QUOTA_EXCEEDED] * 2

    assert [d.operation for d in plan.dispatch if d.queue == "batch"] == [
        "etl/job-1",
        "etl/job-2",
        "etl/job-3",
    ]
    assert pending(plan, "etl/job-4").message.startswith("3 of 3 active in batch")

    assert (by_queue["team-a"].dispatching, by_queue["team-a"].pending) == (2, 3)
    assert by_queue["team-a"].used == {"nvidia.com/gpu": Decimal(0)}
    assert by_queue["team-a"].used_after == {"nvidia.com/gpu": Decimal(2)}
    assert plan.stop == ()


def test_quota_message_names_the_ops_that_would_release_enough() -> None:
    w = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    w.ops("vision/train-{}", 2, queue="team-a", gpu=1)
    w.op("vision/big", queue="team-a", gpu=2)
    w.running("vision/train-1", "vision/train-2")
    p = pending(w.plan(), "vision/big")
    assert p.reason is R.QUOTA_EXCEEDED
    assert p.message == (
        "needs nvidia.com/gpu 2; team-a uses 2 of 2; "
        "admitted when 2 GPUs are released by vision/train-1, vision/train-2"
    )
    assert isinstance(p.blocked_by, QuotaBlock)
    assert p.blocked_by.to_json()["releasedBy"] == ["vision/train-1", "vision/train-2"]


def test_quota_picks_the_fewest_releasers_largest_first() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 8})
    w.op("p/small", queue="q", gpu=1)
    w.op("p/large", queue="q", gpu=4)
    w.op("p/mid", queue="q", gpu=3)
    w.op("p/want", queue="q", gpu=3)
    w.running("p/small", "p/large", "p/mid")
    block = pending(w.plan(), "p/want").blocked_by
    assert isinstance(block, QuotaBlock)
    assert block.release == Decimal(3)  # 8 used + 3 wanted - 8 quota
    assert block.released_by == ("p/large",)


# --- checks 1..9 ------------------------------------------------------------------------


def test_1_queue_paused_wins_over_everything() -> None:
    w = World().queue("q", paused=True, quota={"nvidia.com/gpu": 1})
    w.op("p/a", queue="q", gpu=4).unapproved()
    plan = w.plan()
    assert reasons(plan) == {"p/a": R.QUEUE_PAUSED}
    assert plan.dispatch == ()
    assert "paused" in plan.pending[0].message


def test_2_awaiting_approval() -> None:
    w = World().queue("q")
    w.op("p/a", queue="q").unapproved()
    w.op("p/b", queue="q")
    plan = w.plan()
    assert reasons(plan) == {"p/a": R.AWAITING_APPROVAL}
    assert dispatched(plan) == ["p/b"]
    assert pending(plan, "p/a").blocked_by.to_json() == {"isApproved": False}


def test_3_dag_waits_for_dependencies() -> None:
    w = World().queue("q")
    w.op("p/prep", queue="q").child_of("p/dag", 0, kind="dag")
    w.op("p/train", queue="q").child_of("p/dag", 1, kind="dag").after("p/prep")
    w.op("p/eval", queue="q").child_of("p/dag", 2, kind="dag").after("p/train")
    plan = w.plan()
    assert dispatched(plan) == ["p/prep"]  # dispatched, not yet Succeeded
    assert reasons(plan) == {
        "p/train": R.WAITING_FOR_DEPENDENCIES,
        "p/eval": R.WAITING_FOR_DEPENDENCIES,
    }
    assert pending(plan, "p/train").blocked_by.to_json() == {
        "dependencies": [{"operation": "p/prep", "phase": "Queued"}]
    }

    w.observe("p/prep", Phase.SUCCEEDED)
    plan = w.plan()
    assert dispatched(plan) == ["p/train"]
    assert reasons(plan) == {"p/eval": R.WAITING_FOR_DEPENDENCIES}


def test_3_upstream_failed_never_runs_transitively() -> None:
    w = World().queue("q")
    w.op("p/prep", queue="q").child_of("p/dag", 0, kind="dag")
    w.op("p/train", queue="q").child_of("p/dag", 1, kind="dag").after("p/prep")
    w.op("p/eval", queue="q").child_of("p/dag", 2, kind="dag").after("p/train")
    w.op("p/other", queue="q").child_of("p/dag", 3, kind="dag")
    w.observe("p/prep", Phase.FAILED)
    plan = w.plan()
    assert reasons(plan) == {"p/train": R.UPSTREAM_FAILED, "p/eval": R.UPSTREAM_FAILED}
    assert dispatched(plan) == ["p/other"]
    train, ev = pending(plan, "p/train"), pending(plan, "p/eval")
    assert train.never_runs and ev.never_runs
    assert train.blocked_by.to_json() == {
        "failed": [{"operation": "p/prep", "phase": "Failed"}],
        "neverRuns": True,
    }
    assert ev.blocked_by.to_json()["failed"] == [
        {"operation": "p/train", "phase": "UpstreamFailed"}
    ]
    assert "will never run" in ev.message


def test_3_stopped_upstream_also_never_runs() -> None:
    w = World().queue("q")
    w.op("p/a", queue="q").child_of("p/dag", 0, kind="dag")
    w.op("p/b", queue="q").child_of("p/dag", 1, kind="dag").after("p/a")
    w.observe("p/a", Phase.STOPPED)
    assert reasons(w.plan()) == {"p/b": R.UPSTREAM_FAILED}


def test_3_missing_dependency_waits() -> None:
    w = World().queue("q")
    w.op("p/b", queue="q").after("p/gone")
    block = pending(w.plan(), "p/b").blocked_by.to_json()
    assert block == {"dependencies": [{"operation": "p/gone", "phase": "Missing"}]}


def test_4_exceeds_quota_can_never_be_admitted() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 2, "cpu": 8})
    w.op("p/huge", queue="q").requests(gpu=4, cpu=2)
    w.op("p/ok", queue="q", gpu=2)
    plan = w.plan()
    assert reasons(plan) == {"p/huge": R.EXCEEDS_QUOTA}
    assert dispatched(plan) == ["p/ok"]
    p = pending(plan, "p/huge")
    assert p.never_runs
    assert p.message.startswith(
        "needs nvidia.com/gpu 4 but q's quota is 2; it can never be admitted"
    )
    assert p.blocked_by.to_json() == {
        "queue": "q",
        "exceeds": [{"resource": "nvidia.com/gpu", "request": "4", "quota": "2"}],
        "neverRuns": True,
    }


def test_4_exceeds_quota_does_not_block_a_strict_fifo_queue() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 2}, strict=True)
    w.op("p/huge", queue="q", gpu=3)
    w.op("p/ok", queue="q", gpu=1)
    plan = w.plan()
    assert dispatched(plan) == ["p/ok"]
    assert reasons(plan) == {"p/huge": R.EXCEEDS_QUOTA}


def test_5_strict_fifo_waits_behind_head() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 2}, strict=True)
    w.op("p/a", queue="q", gpu=1)
    w.op("p/b", queue="q", gpu=2)  # head: does not fit after a
    w.op("p/c", queue="q", gpu=1)  # would fit, but must wait
    plan = w.plan()
    assert dispatched(plan) == ["p/a"]
    assert reasons(plan) == {"p/b": R.QUOTA_EXCEEDED, "p/c": R.WAITING_BEHIND_HEAD}
    assert pending(plan, "p/c").blocked_by.to_json() == {
        "queue": "q",
        "head": "p/b",
        "headReason": "QuotaExceeded",
    }
    assert list(plan.positions().values()) == [1, 2]


def test_5_best_effort_fifo_goes_on_to_the_next_candidate() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 2})
    w.op("p/a", queue="q", gpu=1)
    w.op("p/b", queue="q", gpu=2)
    w.op("p/c", queue="q", gpu=1)
    plan = w.plan()
    assert dispatched(plan) == ["p/a", "p/c"]
    assert reasons(plan) == {"p/b": R.QUOTA_EXCEEDED}


def test_5_strict_fifo_is_not_held_by_workflow_parallelism() -> None:
    w = World().queue("q", strict=True)
    w.op("p/m-0", queue="q").child_of("p/m", 0, concurrency=1)
    w.op("p/m-1", queue="q").child_of("p/m", 1, concurrency=1)
    w.op("p/solo", queue="q")
    plan = w.plan()
    assert dispatched(plan) == ["p/m-0", "p/solo"]
    assert reasons(plan) == {"p/m-1": R.WORKFLOW_PARALLELISM}


def test_5_strict_fifo_held_by_cluster_concurrency() -> None:
    w = World().cluster("local", concurrency=1).queue("q", strict=True)
    w.op("p/a", queue="q")
    w.op("p/b", queue="q")
    w.op("p/c", queue="q")
    plan = w.plan()
    assert reasons(plan) == {"p/b": R.CLUSTER_CONCURRENCY_LIMIT, "p/c": R.WAITING_BEHIND_HEAD}


def test_6_queue_concurrency_counts_observed_and_planned() -> None:
    w = World().queue("batch", concurrency=3)
    w.ops("etl/job-{}", 5, queue="batch")
    w.running("etl/job-1")
    w.observe("etl/job-2", Phase.DISPATCHED)
    w.observe("etl/job-3", Phase.SUCCEEDED)  # finished: frees its slot
    plan = w.plan()
    assert dispatched(plan) == ["etl/job-4"]
    p = pending(plan, "etl/job-5")
    assert p.reason is R.QUEUE_CONCURRENCY_LIMIT
    assert isinstance(p.blocked_by, ConcurrencyBlock)
    assert p.message == (
        "3 of 3 active in batch; admitted when 1 of etl/job-1, etl/job-2, etl/job-4 finishes"
    )


def test_7_quota_exceeded_names_the_resource() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 4, "memory": "64Gi"})
    w.op("p/a", queue="q").requests(gpu=1, memory="48Gi")
    w.op("p/b", queue="q").requests(gpu=1, memory="32Gi")
    p = pending(w.plan(), "p/b")
    assert p.reason is R.QUOTA_EXCEEDED
    assert p.blocked_by.to_json()["resource"] == "memory"
    assert p.message == (
        "needs memory 32Gi; q uses 48Gi of 64Gi; admitted when 16Gi memory is released by p/a"
    )


def test_7_fractional_quantities_are_exact() -> None:
    w = World().queue("q", quota={"cpu": "1"})
    w.ops("p/x-{}", 11, queue="q")
    for b in w.builders:
        b.requests(cpu="100m")
    plan = w.plan()
    assert len(plan.dispatch) == 10
    assert reasons(plan) == {"p/x-11": R.QUOTA_EXCEEDED}


def test_7_unrequested_resources_are_unconstrained() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 1})
    w.op("p/gpu", queue="q", gpu=1)
    w.op("p/cpu", queue="q").requests(cpu=64)
    w.running("p/gpu")
    assert dispatched(w.plan()) == ["p/cpu"]


def test_7_lowered_quota_leaves_usage_over_the_limit_and_stops_nothing() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 1})
    w.ops("p/r-{}", 3, queue="q", gpu=1)
    w.op("p/next", queue="q", gpu=1)
    w.running("p/r-1", "p/r-2", "p/r-3")
    plan = w.plan()
    assert plan.stop == ()
    assert reasons(plan) == {"p/next": R.QUOTA_EXCEEDED}
    assert plan.queues[0].used == {"nvidia.com/gpu": Decimal(3)}
    block = pending(plan, "p/next").blocked_by
    assert isinstance(block, QuotaBlock)
    assert block.release == Decimal(3)  # 3 + 1 - 1
    assert block.released_by == ("p/r-1", "p/r-2", "p/r-3")


def test_7_observed_requests_override_compiled_ones() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 4})
    w.op("p/run", queue="q", gpu=1)
    w.op("p/next", queue="q", gpu=1)
    w.observe("p/run", Phase.RUNNING, requests={"nvidia.com/gpu": 4})
    assert reasons(w.plan()) == {"p/next": R.QUOTA_EXCEEDED}


def test_8_workflow_parallelism() -> None:
    w = World().queue("q")
    for i in range(4):
        w.op(f"p/sweep-{i}", queue="q").child_of("p/sweep", i, concurrency=2)
    w.running("p/sweep-0")
    plan = w.plan()
    assert dispatched(plan) == ["p/sweep-1"]
    assert reasons(plan) == {
        "p/sweep-2": R.WORKFLOW_PARALLELISM,
        "p/sweep-3": R.WORKFLOW_PARALLELISM,
    }
    assert pending(plan, "p/sweep-2").message == (
        "2 of 2 children of workflow p/sweep active; "
        "admitted when 1 of p/sweep-0, p/sweep-1 finishes"
    )


def test_9_cluster_concurrency_is_shared_across_queues_in_priority_order() -> None:
    w = World().cluster("local", concurrency=2)
    w.queue("low", priority=1).queue("high", priority=10)
    w.op("p/low-1", queue="low")
    w.op("p/high-1", queue="high")
    w.op("p/high-2", queue="high")
    plan = w.plan()
    assert dispatched(plan) == ["p/high-1", "p/high-2"]
    assert reasons(plan) == {"p/low-1": R.CLUSTER_CONCURRENCY_LIMIT}
    assert pending(plan, "p/low-1").blocked_by.to_json()["cluster"] == "local"


def test_9_cluster_concurrency_counts_removed_active_ops() -> None:
    w = World().cluster("local", concurrency=1).queue("q")
    w.op("p/a", queue="q")
    w.observe("p/gone", Phase.RUNNING, queue="q", cluster="local")
    assert reasons(w.plan()) == {"p/a": R.CLUSTER_CONCURRENCY_LIMIT}


# --- order ------------------------------------------------------------------------------


def test_order_priority_then_queue_name_then_submission() -> None:
    w = World().queue("b", priority=5).queue("a", priority=5).queue("z", priority=9)
    w.op("p/b-late", queue="b").submitted(T0 + timedelta(days=2))
    w.op("p/b-early", queue="b").submitted(T0 + timedelta(days=1))
    w.op("p/a-1", queue="a")
    w.op("p/z-1", queue="z")
    plan = w.plan()
    assert dispatched(plan) == ["p/z-1", "p/a-1", "p/b-early", "p/b-late"]
    assert [q.name for q in plan.queues] == ["z", "a", "b"]


def test_order_same_time_by_path_and_outside_git_by_path() -> None:
    w = World().queue("q")
    w.op("p/y", queue="q").submitted(None).path("p/operations/y.yaml")
    w.op("p/x", queue="q").submitted(None).path("p/operations/x.yaml")
    w.op("p/committed", queue="q").submitted(T0)
    assert dispatched(w.plan()) == ["p/committed", "p/x", "p/y"]


def test_order_workflow_children_follow_parent_in_index_order() -> None:
    w = World().queue("q", concurrency=10)
    w.op("p/first", queue="q").submitted(T0)
    for i in (2, 0, 1):
        w.op(f"p/m-{i}", queue="q").submitted(T0 + timedelta(hours=1)).path(
            "p/operations/m.yaml"
        ).child_of("p/m", i)
    w.op("p/last", queue="q").submitted(T0 + timedelta(hours=2))
    assert dispatched(w.plan()) == ["p/first", "p/m-0", "p/m-1", "p/m-2", "p/last"]


def test_position_counts_per_queue() -> None:
    w = World().queue("a", concurrency=0).queue("b", concurrency=0)
    w.ops("p/a-{}", 3, queue="a")
    w.ops("p/b-{}", 2, queue="b")
    plan = w.plan()
    assert [(p.queue, at) for at, p in numbered(plan.pending)] == [
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 1),
        ("b", 2),
    ]
    assert plan.positions() == {"p/a-1": 1, "p/a-2": 2, "p/a-3": 3, "p/b-1": 1, "p/b-2": 2}
    # each queue's own count, whichever order the entries are listed in
    assert [at for at, _ in numbered(reversed(plan.pending))] == [1, 2, 1, 2, 3]
    assert plan.queues[0].head_reason is R.QUEUE_CONCURRENCY_LIMIT


def test_non_queued_ops_are_not_candidates() -> None:
    w = World().queue("q")
    w.ops("p/x-{}", 4, queue="q")
    w.running("p/x-1")
    w.observe("p/x-2", Phase.SUCCEEDED).observe("p/x-3", Phase.FAILED)
    assert dispatched(w.plan()) == ["p/x-4"]
    assert w.plan().pending == ()


# --- prune ------------------------------------------------------------------------------


def prune_world(active: int, removed: int) -> World:
    w = World().queue("q")
    w.ops("p/x-{}", active, queue="q")
    for i in range(1, active + 1):
        w.observe(f"p/x-{i}", Phase.RUNNING, queue="q", cluster="local")
    w.remove(*[f"p/x-{i}" for i in range(1, removed + 1)])
    return w


def test_no_prune_unless_the_org_enables_it() -> None:
    plan = prune_world(4, 1).plan()
    assert plan.stop == () and plan.prune_refused is None


def test_prune_stops_removed_active_ops() -> None:
    w = prune_world(4, 2).with_org(prune=True)
    w.observe("p/done", Phase.SUCCEEDED)  # removed but finished: nothing to stop
    plan = w.plan()
    assert [(s.operation, s.reason) for s in plan.stop] == [
        ("p/x-1", StopReason.REMOVED_FROM_REPO),
        ("p/x-2", StopReason.REMOVED_FROM_REPO),
    ]
    assert (plan.stop[0].queue, plan.stop[0].cluster) == ("q", "local")


def test_mass_deletion_guard_refuses_and_can_be_overridden() -> None:
    w = prune_world(4, 3).with_org(prune=True)
    plan = w.plan()
    assert plan.stop == ()
    assert plan.prune_refused is not None
    assert plan.prune_refused.refused == ("p/x-1", "p/x-2", "p/x-3")
    assert "refusing to prune 3 of 4 active operations" in plan.prune_refused.message()

    plan = w.with_org(allow_mass_prune=True).plan()
    assert len(plan.stop) == 3 and plan.prune_refused is None

    plan = prune_world(4, 3).with_org(prune=True, max_prune_fraction=0.75).plan()
    assert len(plan.stop) == 3


def test_rejected_ops_are_not_pruned() -> None:
    w = prune_world(2, 1).with_org(prune=True, allow_mass_prune=True)
    plan = plan_dispatch(
        w.operations(), w.queues, w.clusters, w.observed.values(), w.org, NOW, rejected={"p/x-1"}
    )
    assert plan.stop == ()


# --- inputs -----------------------------------------------------------------------------


def test_unknown_queue_is_an_input_error() -> None:
    w = World().queue("q")
    w.op("p/a", queue="nope")
    with pytest.raises(PlanInputError, match="queue 'nope'"):
        w.plan()


def test_duplicate_observation_is_an_input_error() -> None:
    w = World().queue("q")
    w.op("p/a", queue="q")
    w.running("p/a")
    obs = [w.observed["p/a"], w.observed["p/a"]]
    with pytest.raises(PlanInputError, match="observed twice"):
        plan_dispatch(w.operations(), w.queues, w.clusters, obs, OrgSettings(), NOW)


def test_9_workflow_child_held_by_cluster_names_the_cluster() -> None:
    w = World().cluster("local", concurrency=1).queue("q")
    w.op("p/m-0", queue="q").child_of("p/m", 0, concurrency=4)
    w.op("p/m-1", queue="q").child_of("p/m", 1, concurrency=4)
    block = pending(w.plan(), "p/m-1").blocked_by.to_json()
    assert block == {
        "cluster": "local",
        "active": 1,
        "concurrency": 1,
        "releasesNeeded": 1,
        "activeOperations": ["p/m-0"],
    }


def test_4_exceeds_quota_lists_every_resource_over() -> None:
    w = World().queue("q", quota={"nvidia.com/gpu": 1, "cpu": 4, "memory": "1Ti"})
    w.op("p/x", queue="q").requests(gpu=2, cpu="4500m", memory="1Gi")
    block = pending(w.plan(), "p/x").blocked_by.to_json()
    assert block["exceeds"] == [
        {"resource": "cpu", "request": "4500m", "quota": "4"},
        {"resource": "nvidia.com/gpu", "request": "2", "quota": "1"},
    ]


def test_long_lists_are_capped_in_messages() -> None:
    w = World().queue("q", concurrency=12)
    w.ops("p/r-{}", 13, queue="q")
    w.running(*[f"p/r-{i}" for i in range(1, 13)])
    p = pending(w.plan(), "p/r-13")
    assert p.message.endswith("p/r-7 and 2 more finishes")
    assert len(p.blocked_by.to_json()["activeOperations"]) == 10


def test_gc_state_is_restored() -> None:
    import gc

    w = seed_world()
    assert gc.isenabled()
    w.plan()
    assert gc.isenabled()
    gc.disable()
    try:
        w.plan()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_plan_renderers_show_stops_and_refused_prunes() -> None:
    from reconciler.core.views.plan_render import plan_to_markdown, plan_to_table

    allowed = prune_world(4, 1).with_org(prune=True).plan()
    assert "p/x-1  RemovedFromRepo" in plan_to_table(allowed)
    assert "| p/x-1 | RemovedFromRepo |" in plan_to_markdown(allowed)
    refused = prune_world(2, 2).with_org(prune=True).plan()
    assert "warning: refusing to prune 2 of 2" in plan_to_table(refused)
    assert "> **Warning:** refusing to prune 2 of 2" in plan_to_markdown(refused)
