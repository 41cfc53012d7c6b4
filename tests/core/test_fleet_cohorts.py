"""Cohorts of fleet queues (docs/dispatch.md, "Cohorts of fleet queues"): queues over the
same clusters borrow each other's idle quota fleet-wide, with the same rules and reasons
as a single-cluster cohort (step 4b), and check 10 then chooses where the borrower goes.
A cohort that mixes a single-cluster queue with a fleet queue, or fleet queues over
different clusters, is a config error at the queue's line."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from support.builders import NOW, World, node
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.plan import (
    BorrowingNotAllowedBlock,
    FleetBlock,
    LentQuotaBlock,
    MemberState,
    PendingReason,
    Plan,
)
from reconciler.core.types import BudgetPeriod, BudgetSpec, ClusterSpec, Phase

R = PendingReason
GPU = "nvidia.com/gpu"


def gpus(n: Any) -> dict[str, Decimal]:
    return {GPU: Decimal(n)}


def placed(plan: Plan) -> list[tuple[str, str]]:
    return [(d.operation, d.cluster) for d in plan.dispatch]


def summary(plan: Plan, queue: str):  # type: ignore[no-untyped-def]
    return next(q for q in plan.queues if q.name == queue)


def fleet_teams(*, require_capacity: bool = False, a_order: tuple[str, ...] = ("a", "b")) -> World:
    """team-a (2 GPUs, may borrow 2) and team-b (4 GPUs), fleet queues over clusters a
    (one 2-GPU node) and b (one 8-GPU node), in cohort gpu-pool (maxBorrowDuration 2h)."""
    world = World().cohort("gpu-pool", "2h")
    world.fleet(
        "team-a",
        a_order,
        priority=100,
        quota={GPU: 2},
        cohort="gpu-pool",
        borrowing_limit={GPU: 2},
        require_capacity=require_capacity,
    )
    world.fleet(
        "team-b",
        ("a", "b"),
        priority=90,
        quota={GPU: 4},
        cohort="gpu-pool",
        require_capacity=require_capacity,
    )
    world.nodes("a", node("a-1", gpu=2))
    return world.nodes("b", node("b-1", gpu=8))


def test_a_fleet_queue_borrows_idle_quota_fleet_wide_and_the_borrower_goes_where_it_fits() -> None:
    world = fleet_teams()
    world.op("p/own", queue="team-a", gpu=2).timeout("1h")
    world.op("p/borrow", queue="team-a", gpu=2).timeout("1h")
    plan = world.plan()
    # own quota first (step 4) on a, listed first; the borrower (4b) where room is left: b
    assert placed(plan) == [("p/own", "a"), ("p/borrow", "b")]
    a, b = summary(plan, "team-a"), summary(plan, "team-b")
    assert (a.borrowed_after, b.lent_after) == (gpus(2), gpus(2))
    slices = {s.cluster: s for s in a.members}
    assert (slices["a"].used, slices["b"].used) == (gpus(2), gpus(2))


def test_a_lenders_own_op_fits_its_unlent_quota_on_any_cluster_before_a_borrower() -> None:
    world = fleet_teams()
    world.op("p/borrow", queue="team-a", gpu=4).timeout("1h")  # 2 own + 2 borrowed
    world.op("p/lender", queue="team-b", gpu=3).timeout("1h")
    plan = world.plan()
    # team-a is considered first, but its op fits only by borrowing: deferred to 4b, after
    # team-b's own op (fits its quota; a has only 2 GPUs, so b); then nothing idle is left
    assert placed(plan) == [("p/lender", "b")]
    assert plan.pending[0].reason is R.QUOTA_EXCEEDED


def test_a_lenders_op_waits_for_its_lent_quota_until_the_borrower_ends() -> None:
    world = fleet_teams()
    started = NOW - timedelta(minutes=30)
    world.op("p/own", queue="team-a", gpu=2).timeout("12h")  # too long to be a borrower
    world.op("p/borrower", queue="team-a", gpu=2).timeout("1h")
    world.observe("p/own", Phase.RUNNING, queue="team-a", cluster="a", requests=gpus(2))
    world.observe(
        "p/borrower",
        Phase.RUNNING,
        queue="team-a",
        cluster="b",
        requests=gpus(2),
        dispatched_at=started,
    )
    world.nodes("a", node("a-1", gpu=2, requested={"gpu": 2}))
    world.nodes("b", node("b-1", gpu=8, requested={"gpu": 2}))
    world.op("p/big", queue="team-b", gpu=4).timeout("1h")  # needs all of team-b's quota
    world.op("p/small", queue="team-b", gpu=2).timeout("1h")  # fits what is not lent
    plan = world.plan()
    assert placed(plan) == [("p/small", "b")]  # a has no GPU free
    (entry,) = plan.pending
    assert entry.reason is R.WAITING_FOR_LENT_QUOTA
    block = entry.blocked_by
    assert isinstance(block, LentQuotaBlock)
    assert (block.borrowers, block.ends_by) == (("p/borrower",), started + timedelta(hours=1))


def test_borrowing_needs_a_timeout_within_max_borrow_duration_on_fleet_queues_too() -> None:
    world = fleet_teams()
    world.op("p/own", queue="team-a", gpu=2).timeout("1h")
    world.op("p/long", queue="team-a", gpu=2).timeout("3h")
    plan = world.plan()
    assert placed(plan) == [("p/own", "a")]
    (entry,) = plan.pending
    assert entry.reason is R.BORROWING_NOT_ALLOWED
    assert isinstance(entry.blocked_by, BorrowingNotAllowedBlock)
    assert "it would fit by borrowing in cohort gpu-pool, but its timeout is 3h" in entry.message


def test_a_borrower_still_needs_a_cluster_check_10_in_step_4b() -> None:
    """It may borrow, but with requireCapacity no cluster has room: NoClusterHasCapacity,
    and nothing is counted as borrowed."""
    world = fleet_teams(require_capacity=True)
    world.nodes("b", node("b-1", gpu=2))
    world.op("p/own", queue="team-a", gpu=2).timeout("1h")
    world.op("p/borrow", queue="team-a", gpu=4).timeout("1h")  # own 0 left: borrows... 4 > 2
    world.op("p/pair", queue="team-a", gpu=2).timeout("1h")
    world.op("p/b", queue="team-b", gpu=2).timeout("1h")
    plan = world.plan()
    # p/own on a, p/b on b (step 4); p/borrow is over borrowingLimit (QuotaExceeded);
    # p/pair may borrow 2, but neither cluster has 2 GPUs free any more
    assert placed(plan) == [("p/own", "a"), ("p/b", "b")]
    reasons = {p.operation: p.reason for p in plan.pending}
    assert reasons == {"p/borrow": R.QUOTA_EXCEEDED, "p/pair": R.NO_CLUSTER_HAS_CAPACITY}
    pair = next(p for p in plan.pending if p.operation == "p/pair")
    assert isinstance(pair.blocked_by, FleetBlock)
    assert [m.state for m in pair.blocked_by.members] == [MemberState.NO_CAPACITY] * 2
    assert summary(plan, "team-a").borrowed_after == gpus(0)


def test_a_borrowers_cluster_cap_and_price_are_its_own_queues() -> None:
    """clusterQuota caps the borrower per cluster; its budget pays at the chosen cluster."""
    world = fleet_teams(a_order=("b", "a"))
    world.with_org(prices={GPU: Decimal("3.00")}, currency="USD")
    world.clusters["a"] = ClusterSpec("a", prices={GPU: Decimal("1.00")})
    world.set_queue(
        "team-a",
        cluster_quota={"b": gpus(2)},
        budget=BudgetSpec(Decimal(10), BudgetPeriod.DAY),
    )
    world.op("p/own", queue="team-a", gpu=2).timeout("1h")  # on b (listed first): 6 USD
    world.op("p/borrow", queue="team-a", gpu=2).timeout("1h")  # b's cap is used: a, 2 USD
    world.op("p/more", queue="team-a", gpu=1).timeout("1h")
    plan = world.plan()
    assert placed(plan) == [("p/own", "b"), ("p/borrow", "a")]
    more = next(p for p in plan.pending if p.operation == "p/more")
    # borrowingLimit 2 is used up
    assert more.reason is R.QUOTA_EXCEEDED
    assert summary(plan, "team-a").budget.committed_after == Decimal(8)


# --- config: who may share a cohort ----------------------------------------------------


_CLUSTER = "kind: Cluster\nname: {name}\nkubeconfig:\n  inCluster: true\n"
_COHORT = "kind: Cohort\nname: pool\nmaxBorrowDuration: 2h\n"


def _compile(**queues: str) -> list[str]:
    files = {
        "reconciler.yaml": "kind: Org\n",
        "clusters/a.yaml": _CLUSTER.format(name="a"),
        "clusters/b.yaml": _CLUSTER.format(name="b"),
        "clusters/c.yaml": _CLUSTER.format(name="c"),
        "cohorts/pool.yaml": _COHORT,
    }
    for name, where in queues.items():
        files[f"queues/{name}.yaml"] = (
            f"kind: Queue\nname: {name}\n{where}quota:\n  nvidia.com/gpu: 2\ncohort: pool\n"
        )
    return [str(e) for e in compile_repo(repo(files)).errors]


def test_fleet_queues_over_the_same_clusters_in_any_order_share_a_cohort() -> None:
    assert _compile(qa="clusters: [a, b]\n", qb="clusters: [b, a]\n") == []
    assert _compile(qa="cluster: a\n", qb="cluster: a\n") == []


def test_a_cohort_mixing_queue_shapes_is_an_error_at_the_queues_line() -> None:
    assert _compile(qa="clusters: [a, b]\n", qb="clusters: [a, c]\n") == [
        "queues/qb.yaml:3:11: queue 'qb' is in cohort 'pool', whose queue 'qa' is a fleet "
        "queue over a, b: the fleet queues of one cohort must be over the same clusters"
    ]
    assert _compile(qa="clusters: [a]\n", qb="cluster: a\n") == [
        "queues/qb.yaml:3:10: queue 'qb' is in cohort 'pool', whose queue 'qa' is a fleet "
        "queue over a: a cohort's queues are all on one cluster or all fleet queues over "
        "the same ones"
    ]
    assert _compile(qa="cluster: a\n", qb="clusters: [a, b]\n") == [
        "queues/qb.yaml:3:11: queue 'qb' is in cohort 'pool', whose queue 'qa' is on cluster "
        "'a': a cohort's queues are all on one cluster or all fleet queues over the same ones"
    ]
