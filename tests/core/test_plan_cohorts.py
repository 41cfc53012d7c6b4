"""Cohorts in the planner: one test per rule of docs/dispatch.md, "Cohorts"."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from support.builders import NOW, World

from reconciler.core.plan import (
    AdmitWhen,
    BorrowingNotAllowedBlock,
    CohortLimitBlock,
    LentQuotaBlock,
    PendingReason,
    Plan,
    PlanInputError,
)
from reconciler.core.plan.state import MAX_RESERVED
from reconciler.core.types import Phase

R = PendingReason
GPU = "nvidia.com/gpu"


def dispatched(plan: Plan) -> list[str]:
    return [d.operation for d in plan.dispatch]


def reasons(plan: Plan) -> dict[str, PendingReason]:
    return {p.operation: p.reason for p in plan.pending}


def pending(plan: Plan, op_id: str):  # type: ignore[no-untyped-def]
    return next(p for p in plan.pending if p.operation == op_id)


def summary(plan: Plan, queue: str):  # type: ignore[no-untyped-def]
    return next(q for q in plan.queues if q.name == queue)


def teams(
    *,
    a_priority: int = 100,
    b_priority: int = 90,
    borrowing: int = 2,
    lending: int | None = None,
    cap: int | None = None,
) -> World:
    """The docs' example: team-a (2 GPUs, may borrow 2) and team-b (4 GPUs) in cohort
    gpu-pool, maxBorrowDuration 2h."""
    return (
        World()
        .cluster("local")
        .cohort("gpu-pool", "2h", quota={GPU: cap} if cap is not None else None)
        .queue(
            "team-a",
            priority=a_priority,
            quota={GPU: 2},
            cohort="gpu-pool",
            borrowing_limit={GPU: borrowing},
        )
        .queue(
            "team-b",
            priority=b_priority,
            quota={GPU: 4},
            cohort="gpu-pool",
            lending_limit={GPU: lending} if lending is not None else None,
        )
    )


def a_busy(w: World) -> World:
    """team-a's own 2 GPUs in use."""
    w.op("vision/own", queue="team-a", gpu=2)
    return w.observe("vision/own", Phase.RUNNING, dispatched_at=NOW - timedelta(hours=5))


def test_an_op_with_a_short_enough_timeout_borrows_idle_quota() -> None:
    w = a_busy(teams())
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/borrow"]
    # the next cycle sees team-a 2 above its quota, team-b lending 2
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=NOW)
    after = w.plan()
    assert summary(after, "team-a").borrowed == {GPU: Decimal(2)}
    assert summary(after, "team-a").lent == {GPU: Decimal(0)}
    assert summary(after, "team-b").lent == {GPU: Decimal(2)}
    assert summary(after, "team-b").borrowed == {GPU: Decimal(0)}
    assert summary(after, "team-a").cohort == "gpu-pool"


def test_no_timeout_or_a_too_long_one_may_not_borrow() -> None:
    w = a_busy(teams())
    w.op("vision/none", queue="team-a", gpu=1)
    w.op("vision/long", queue="team-a", gpu=1).timeout("3h")
    plan = w.plan()
    assert dispatched(plan) == []
    assert reasons(plan) == {
        "vision/none": R.BORROWING_NOT_ALLOWED,
        "vision/long": R.BORROWING_NOT_ALLOWED,
    }
    long = pending(plan, "vision/long")
    assert isinstance(long.blocked_by, BorrowingNotAllowedBlock)
    assert long.blocked_by.timeout_seconds == 3 * 3600
    assert "its timeout is 3h (at most 2h may borrow)" in long.message
    assert "it has no timeout" in pending(plan, "vision/none").message
    # meanwhile it waits for its own quota, as QuotaExceeded would
    assert long.admit.when is AdmitWhen.RESOURCES_RELEASED
    assert long.admit.operations == ("vision/own",)
    assert "or by borrowing, with a timeout of at most 2h" in long.admit.text


def test_the_timeout_at_the_limit_may_borrow() -> None:
    w = a_busy(teams())
    w.op("vision/edge", queue="team-a", gpu=1).timeout(7200)
    assert dispatched(w.plan()) == ["vision/edge"]


def test_no_borrowing_limit_means_no_borrowing() -> None:
    w = a_busy(teams(borrowing=0))
    w.op("vision/x", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert reasons(plan) == {"vision/x": R.QUOTA_EXCEEDED}


def test_borrowing_stops_at_the_borrowing_limit() -> None:
    w = a_busy(teams(borrowing=1))
    w.op("vision/two", queue="team-a", gpu=2).timeout("1h")
    w.op("vision/one", queue="team-a", gpu=1).timeout("1h")
    w.op("vision/another", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/one"]
    assert reasons(plan) == {"vision/two": R.QUOTA_EXCEEDED, "vision/another": R.QUOTA_EXCEEDED}


def test_a_request_over_quota_plus_borrowing_limit_is_never_admitted() -> None:
    w = teams(borrowing=1)
    w.op("vision/huge", queue="team-a", gpu=4).timeout("1h")
    w.op("vision/three", queue="team-a", gpu=3).timeout("1h")
    plan = w.plan()
    assert reasons(plan) == {"vision/huge": R.EXCEEDS_QUOTA}
    assert dispatched(plan) == ["vision/three"]  # 2 own + 1 borrowed


def test_a_lender_lends_at_most_its_lending_limit() -> None:
    w = a_busy(teams(lending=1))
    w.op("vision/two", queue="team-a", gpu=2).timeout("1h")
    w.op("vision/one", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/one"]
    assert reasons(plan) == {"vision/two": R.QUOTA_EXCEEDED}


def test_only_unused_quota_is_lent() -> None:
    w = a_busy(teams())
    w.ops("nlp/run-{}", 3, queue="team-b", gpu=1)
    w.running("nlp/run-1", "nlp/run-2", "nlp/run-3")
    w.op("vision/two", queue="team-a", gpu=2).timeout("1h")
    w.op("vision/one", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/one"]


def test_a_lenders_own_op_goes_before_any_borrower_whatever_the_priority() -> None:
    w = a_busy(teams(a_priority=100, b_priority=10))
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.op("nlp/big", queue="team-b", gpu=4)
    plan = w.plan()
    assert dispatched(plan) == ["nlp/big"]
    assert reasons(plan) == {"vision/borrow": R.QUOTA_EXCEEDED}


def test_a_lenders_op_waits_for_its_lent_quota_with_the_borrowers_end_time() -> None:
    w = a_busy(teams())
    started = NOW - timedelta(minutes=10)
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=started)
    w.op("nlp/big", queue="team-b", gpu=4)
    w.op("nlp/small", queue="team-b", gpu=2)
    plan = w.plan()
    # 2 of team-b's 4 are lent: the small one fits what is left, the big one waits
    assert dispatched(plan) == ["nlp/small"]
    p = pending(plan, "nlp/big")
    assert p.reason is R.WAITING_FOR_LENT_QUOTA
    assert isinstance(p.blocked_by, LentQuotaBlock)
    assert p.blocked_by.lent == Decimal(2)
    assert p.admit.when is AdmitWhen.BORROWERS_FINISH
    assert p.admit.operations == ("vision/borrow",)
    assert p.admit.at == started + timedelta(hours=1)
    assert "vision/borrow ends, by 2026-01-01T12:50:00Z at the latest" in p.message
    assert "2 of team-b's quota is lent in cohort gpu-pool" in p.message
    assert p.blocked_by.to_json()["endsBy"] == "2026-01-01T12:50:00Z"


def test_a_borrower_with_the_longest_timeout_kubernetes_allows_ends_far_but_in_range() -> None:
    """``run.timeout`` and ``maxBorrowDuration`` may be up to 2^63-1 seconds (Kubernetes'
    int64); the borrower's end was its start plus that: an OverflowError out of the
    planner on every cycle. The end is capped as the planner's other holds are."""
    longest = 2**63 - 1

    def borrowing(timeout: int | str, started: datetime) -> World:
        w = a_busy(
            World()
            .cluster("local")
            .cohort("gpu-pool", longest)
            .queue("team-a", quota={GPU: 2}, cohort="gpu-pool", borrowing_limit={GPU: 2})
            .queue("team-b", quota={GPU: 4}, cohort="gpu-pool")
        )
        w.op("vision/borrow", queue="team-a", gpu=2).timeout(timeout)
        w.observe("vision/borrow", Phase.RUNNING, dispatched_at=started)
        w.op("nlp/big", queue="team-b", gpu=4)
        return w

    started = NOW - timedelta(minutes=10)
    p = pending(borrowing(longest, started).plan(), "nlp/big")
    assert p.reason is R.WAITING_FOR_LENT_QUOTA
    assert p.admit.at == started + timedelta(seconds=MAX_RESERVED)
    # a dispatch time recorded in the future (the status branch, a Job's annotation) is
    # taken as now, as a budget's holds take it: 9999-12-31T23:30Z + 1h overflowed too
    far = datetime(9999, 12, 31, 23, 30, tzinfo=UTC)
    assert pending(borrowing("1h", far).plan(), "nlp/big").admit.at == NOW + timedelta(hours=1)


def test_the_end_time_is_said_to_the_second_rounded_up() -> None:
    """A dispatch time read from a Job's annotation has microseconds: the latest end is
    said to the next whole second (the message and the status record alike)."""
    w = a_busy(teams())
    started = NOW - timedelta(minutes=10, microseconds=-463573)  # 11:50:00.463573
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=started)
    w.op("nlp/big", queue="team-b", gpu=4)
    p = pending(w.plan(), "nlp/big")
    assert isinstance(p.blocked_by, LentQuotaBlock)
    assert p.admit.at == started + timedelta(hours=1)  # exact; only the text is rounded
    assert "by 2026-01-01T12:50:01Z at the latest" in p.message
    assert p.blocked_by.to_json()["endsBy"] == "2026-01-01T12:50:01Z"


def test_the_lender_starts_when_the_borrower_finishes() -> None:
    w = a_busy(teams())
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.SUCCEEDED, dispatched_at=NOW - timedelta(minutes=50))
    w.op("nlp/big", queue="team-b", gpu=4)
    assert dispatched(w.plan()) == ["nlp/big"]


def test_nothing_new_borrows_a_resource_a_lender_waits_for() -> None:
    """team-b waits for what team-a borrowed; team-c's idle GPU is not lent meanwhile, so
    team-b waits at most maxBorrowDuration."""
    w = a_busy(teams())
    w.queue("team-c", priority=200, quota={GPU: 1}, cohort="gpu-pool")
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=NOW)
    w.ops("nlp/run-{}", 2, queue="team-b", gpu=1)
    w.running("nlp/run-1", "nlp/run-2")
    w.op("nlp/more", queue="team-b", gpu=2)  # fits team-b's 4, but 2 are lent; c lends 1
    w.op("vision/again", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert reasons(plan)["nlp/more"] is R.WAITING_FOR_LENT_QUOTA
    assert reasons(plan)["vision/again"] is R.QUOTA_EXCEEDED
    assert dispatched(plan) == []


def test_another_lender_can_carry_the_loan() -> None:
    """The borrowed amount is recomputed each time: when team-c can lend it, team-b's own
    op runs at once (team-a's borrowed GPUs now count against team-c's idle quota)."""
    w = a_busy(teams())
    w.queue("team-c", quota={GPU: 2}, cohort="gpu-pool")
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=NOW)
    w.op("nlp/big", queue="team-b", gpu=4)
    plan = w.plan()
    assert dispatched(plan) == ["nlp/big"]
    w.observe("nlp/big", Phase.RUNNING, dispatched_at=NOW)
    after = w.plan()
    assert summary(after, "team-b").lent == {GPU: Decimal(0)}
    assert summary(after, "team-c").lent == {GPU: Decimal(2)}


def test_the_cohort_cap() -> None:
    w = a_busy(teams(cap=5))
    w.op("nlp/three", queue="team-b", gpu=3)
    w.op("nlp/two", queue="team-b", gpu=2)
    plan = w.plan()
    assert dispatched(plan) == ["nlp/three"]
    p = pending(plan, "nlp/two")
    assert p.reason is R.COHORT_LIMIT
    assert isinstance(p.blocked_by, CohortLimitBlock)
    assert p.message == (
        "needs nvidia.com/gpu 2; cohort gpu-pool uses 5 of its cap 5; "
        "admitted when 2 GPUs are released in cohort gpu-pool"
    )


def test_the_cohort_cap_applies_to_borrowers() -> None:
    w = a_busy(teams(cap=3))
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    plan = w.plan()
    assert reasons(plan) == {"vision/borrow": R.COHORT_LIMIT}


def test_priority_orders_borrowers_of_equal_share() -> None:
    # both borrow nothing yet (share 0): the higher priority borrows first, and the other
    # then waits for its fair share of what is left
    w = a_busy(teams(borrowing=2))
    w.queue(
        "team-c",
        priority=500,
        quota={GPU: 1},
        cohort="gpu-pool",
        borrowing_limit={GPU: 4},
    )
    w.op("ml/own", queue="team-c", gpu=1)
    w.observe("ml/own", Phase.RUNNING)
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")  # submitted first
    w.op("ml/borrow", queue="team-c", gpu=3).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["ml/borrow"]
    assert reasons(plan) == {"vision/borrow": R.WAITING_FOR_FAIR_SHARE}


def test_queue_concurrency_still_holds_a_borrower() -> None:
    w = a_busy(teams())
    w.set_queue("team-a", concurrency=2)
    w.op("vision/b1", queue="team-a", gpu=1).timeout("1h")
    w.op("vision/b2", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/b1"]
    assert reasons(plan) == {"vision/b2": R.QUEUE_CONCURRENCY_LIMIT}


def test_strict_fifo_head_borrows() -> None:
    w = a_busy(teams())
    w.set_queue("team-a", strategy=w.queues["team-b"].strategy.STRICT_FIFO)
    w.op("vision/head", queue="team-a", gpu=1)  # no timeout: may not borrow
    w.op("vision/next", queue="team-a", gpu=1).timeout("1h")
    plan = w.plan()
    assert reasons(plan) == {
        "vision/head": R.BORROWING_NOT_ALLOWED,
        "vision/next": R.WAITING_BEHIND_HEAD,
    }


def test_a_queue_outside_any_cohort_is_unchanged() -> None:
    w = a_busy(teams())
    w.queue("solo", quota={GPU: 1})
    w.ops("x/s-{}", 2, queue="solo", gpu=1)
    plan = w.plan()
    assert dispatched(plan) == ["x/s-1"]
    assert summary(plan, "solo").cohort is None
    assert summary(plan, "solo").borrowed == {}


def test_an_unknown_cohort_is_refused() -> None:
    w = World().cluster("local").queue("q", quota={GPU: 1}, cohort="nope")
    with pytest.raises(PlanInputError, match="cohort 'nope'"):
        w.plan()


def test_the_worked_example_of_the_docs() -> None:
    """docs/dispatch.md, "Example: team-a and team-b", at 10:00, 10:20 and after 11:00."""
    ten = NOW.replace(hour=10)
    w = teams()
    w.op("vision/train-1", queue="team-a", gpu=2)
    w.op("vision/long-run", queue="team-a", gpu=1)
    w.op("vision/big-sweep", queue="team-a", gpu=2).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/train-1", "vision/big-sweep"]
    assert reasons(plan) == {"vision/long-run": R.BORROWING_NOT_ALLOWED}
    assert pending(plan, "vision/long-run").message == (
        "needs nvidia.com/gpu 1; team-a uses 4 of 2; it would fit by borrowing in cohort "
        "gpu-pool, but it has no timeout (at most 2h may borrow); admitted when 3 GPUs are "
        "released by vision/big-sweep, vision/train-1; or by borrowing, with a timeout of at "
        "most 2h"
    )
    w.observe("vision/train-1", Phase.RUNNING, dispatched_at=ten)
    w.observe("vision/big-sweep", Phase.RUNNING, dispatched_at=ten)
    w.op("nlp/eval", queue="team-b", gpu=2)
    w.op("nlp/finetune", queue="team-b", gpu=2)
    plan = w.plan()
    assert dispatched(plan) == ["nlp/eval"]
    finetune = pending(plan, "nlp/finetune")
    assert finetune.reason is R.WAITING_FOR_LENT_QUOTA
    assert finetune.admit.at == ten + timedelta(hours=1)
    assert finetune.message == (
        "needs nvidia.com/gpu 2; 2 of team-b's quota is lent in cohort gpu-pool; admitted "
        "when vision/big-sweep ends, by 2026-01-01T11:00:00Z at the latest"
    )
    a, b = summary(plan, "team-a"), summary(plan, "team-b")
    assert (a.used[GPU], a.borrowed[GPU], b.used[GPU], b.lent[GPU]) == (4, 2, 0, 2)
    assert (b.used_after[GPU], b.lent_after[GPU]) == (2, 2)
    w.observe("nlp/eval", Phase.RUNNING, dispatched_at=ten)
    w.observe("vision/big-sweep", Phase.SUCCEEDED, dispatched_at=ten)
    plan = w.plan()
    assert dispatched(plan) == ["nlp/finetune"]
    b = summary(plan, "team-b")
    assert (b.used_after[GPU], b.lent_after[GPU]) == (4, 0)


def test_only_ops_that_may_borrow_are_named_as_borrowers() -> None:
    """team-a's own-quota op has a 12h timeout: it is not a borrower, and the lender's wait
    ends with the 1h borrower, not 12h later."""
    w = teams()
    w.op("vision/own", queue="team-a", gpu=2).timeout("12h")
    w.observe("vision/own", Phase.RUNNING, dispatched_at=NOW)
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=NOW)
    w.op("nlp/big", queue="team-b", gpu=4)
    p = pending(w.plan(), "nlp/big")
    assert p.admit.operations == ("vision/borrow",)
    assert p.admit.at == NOW + timedelta(hours=1)


def test_a_borrower_of_one_resource_respects_what_is_lent_of_another() -> None:
    """team-a borrows GPUs but fits its own CPU quota, of which 2 are lent to team-b: it
    may not take those back by borrowing GPUs."""
    w = (
        World()
        .cluster("local")
        .cohort("pool", "2h")
        .queue(
            "team-a",
            quota={GPU: 1, "cpu": 4},
            cohort="pool",
            borrowing_limit={GPU: 1},
        )
        .queue("team-b", quota={GPU: 2, "cpu": 2}, cohort="pool", borrowing_limit={"cpu": 2})
    )
    w.op("a/own", queue="team-a").requests(gpu=1, cpu=1)
    w.observe("a/own", Phase.RUNNING)
    w.op("b/cpu", queue="team-b").requests(cpu=4).timeout("1h")
    w.observe("b/cpu", Phase.RUNNING, dispatched_at=NOW)  # 2 of team-a's cpu borrowed
    w.op("a/gpu", queue="team-a").requests(gpu=1, cpu=2).timeout("1h")
    w.op("a/small", queue="team-a").requests(gpu=1, cpu=1).timeout("1h")
    plan = w.plan()
    # 1 + 2 cpu of team-a's 4, with 2 lent: over; 1 + 1 fits
    assert reasons(plan) == {"a/gpu": R.QUOTA_EXCEEDED}
    assert dispatched(plan) == ["a/small"]


def test_the_plan_json_and_table_show_borrowed_and_lent() -> None:
    from reconciler.core.views.plan_render import plan_to_dict, queue_rows

    w = a_busy(teams())
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("1h")
    w.observe("vision/borrow", Phase.RUNNING, dispatched_at=NOW)
    plan = w.plan()
    queues = {q["name"]: q for q in plan_to_dict(plan)["queues"]}
    assert (queues["team-a"]["cohort"], queues["team-a"]["borrowed"]) == (
        "gpu-pool",
        {GPU: "2"},
    )
    assert queues["team-b"]["lent"] == {GPU: "2"}
    rows = {r[0]: r for r in queue_rows(plan)}
    assert rows["team-a"][4] == "nvidia.com/gpu 4/2 (+2 borrowed)"
    assert rows["team-b"][4] == "nvidia.com/gpu 0/4 (2 lent)"


# --- cohorts with budgets (issue 16): a borrower passes check 11 too ------------------------


def test_a_borrower_of_a_budgeted_queue_pays_for_what_it_borrows() -> None:
    """Step 4b applies check 11: an op that may borrow still waits BudgetExceeded when its
    reservation does not fit its queue's budget; one that fits is charged for it."""
    from reconciler.core.plan import BudgetBlock
    from reconciler.core.types import BudgetPeriod, BudgetSpec

    gpu_hours = BudgetSpec(Decimal(3), BudgetPeriod.DAY, "nvidia.com/gpu-hours")
    w = a_busy(teams()).set_queue("team-a", budget=gpu_hours)
    own = next(b for b in w.builders if b.build().id == "vision/own")
    own.timeout("1h")  # the running op (its start not known) reserves 2 GPU-hours from now
    w.op("vision/fits", queue="team-a", gpu=1).timeout("1h")  # 1 GPU-hour: 3 of 3
    w.op("vision/over", queue="team-a", gpu=1).timeout("1h")  # would borrow, over budget
    plan = w.plan()
    assert dispatched(plan) == ["vision/fits"]
    assert reasons(plan) == {"vision/over": R.BUDGET_EXCEEDED}
    block = pending(plan, "vision/over").blocked_by
    assert isinstance(block, BudgetBlock)
    assert (block.committed, block.reservation, block.limit) == (3, 1, 3)
    a = summary(plan, "team-a")
    assert a.borrowed_after == {GPU: Decimal(1)}
    assert a.budget is not None and a.budget.committed_after == 3


def test_the_jobs_deadline_bounds_a_borrower_without_a_run_timeout() -> None:
    """An op's timeout is its Job's deadline: ``run.timeout``, else its queue's
    ``defaultTimeout`` or a sandbox's default (compile sets ``CompiledOperation.timeout``);
    such an op may borrow as one with ``run.timeout`` does."""
    w = a_busy(teams())
    b = w.op("language/sandbox", queue="team-a", gpu=1)
    assert "run" not in b.build().spec
    b._fields["timeout"] = 3600  # what compile sets from defaultTimeout: 1h
    w.op("vision/unbounded", queue="team-a", gpu=1)
    plan = w.plan()
    assert dispatched(plan) == ["language/sandbox"]
    assert reasons(plan) == {"vision/unbounded": R.BORROWING_NOT_ALLOWED}


# --- cohorts with distributed operations (issue 14): a gang borrows all or nothing --------


def test_a_gang_borrows_its_whole_request_or_nothing() -> None:
    """A 2-replica op of 2 GPUs each needs 4: with team-a's own 2 busy it must borrow all 4,
    over its borrowingLimit of 2, so it waits (never takes part); one of 2 x 1 GPU borrows
    its whole 2, and the summaries count both replicas."""
    w = a_busy(teams())
    w.op("vision/ddp-big", queue="team-a", gpu=2).replicas(2).timeout("1h")
    w.op("vision/ddp", queue="team-a", gpu=1).replicas(2).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/ddp"]
    assert reasons(plan) == {"vision/ddp-big": R.QUOTA_EXCEEDED}
    assert summary(plan, "team-a").borrowed_after == {GPU: Decimal(2)}
    assert summary(plan, "team-b").lent_after == {GPU: Decimal(2)}
    assert summary(plan, "team-a").pods_after == 3
    big = pending(plan, "vision/ddp-big")
    assert "2 replicas \u00d7 2" in big.message


def test_step_4b_applies_max_pods_to_a_borrowing_gang() -> None:
    """Check 7 (maxPods) is applied again in step 4b: both borrowers pass it in step 4 (1 pod
    in use, maxPods 3), the first borrows a GPU and a pod, and the gang, which the cohort
    could still lend 2 GPUs, waits MaxPodsReached for its 2 pods."""
    w = a_busy(teams(borrowing=4))
    w.set_queue("team-a", max_pods=3)
    w.op("vision/one", queue="team-a", gpu=1).timeout("1h")
    w.op("vision/ddp", queue="team-a", gpu=1).replicas(2).timeout("1h")
    plan = w.plan()
    assert dispatched(plan) == ["vision/one"]
    assert reasons(plan) == {"vision/ddp": R.MAX_PODS_REACHED}
    assert summary(plan, "team-a").pods_after == 2


def test_a_removed_borrower_still_holds_until_its_own_deadline() -> None:
    """A borrower whose file was removed keeps running (prune off) and keeps what it
    borrowed until its deadline: the lender's "by T at the latest" is read from the run's
    own timeout (as dispatched), not from the compiled operations."""
    w = a_busy(teams())
    started = NOW - timedelta(minutes=15)
    w.observe(
        "vision/borrow",
        Phase.RUNNING,
        queue="team-a",
        requests={GPU: 2},
        dispatched_at=started,
    )
    w.observed["vision/borrow"] = replace(w.observed["vision/borrow"], timeout=2 * 3600)
    w.op("nlp/big", queue="team-b", gpu=4)
    p = pending(w.plan(), "nlp/big")
    assert p.reason is R.WAITING_FOR_LENT_QUOTA
    assert p.admit.operations == ("vision/borrow",)
    assert p.admit.at == started + timedelta(hours=2)
    # and the same when its file is still there but says a shorter timeout now
    w.op("vision/borrow", queue="team-a", gpu=2).timeout("15m")
    p = pending(w.plan(), "nlp/big")
    assert p.admit.at == started + timedelta(hours=2)
