"""Flavors and fair sharing in the planner: one test per rule of docs/dispatch.md,
"Flavors" and "Fair sharing"."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from support.builders import NOW, World

from reconciler.core.plan import (
    AdmitWhen,
    PendingReason,
    Plan,
)
from reconciler.core.plan.model import (
    ExceedsQuotaBlock,
    FairShareBlock,
    FlavorsQuotaBlock,
    NoEligibleFlavorBlock,
    QuotaBlock,
)
from reconciler.core.types import Phase

R = PendingReason
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def flavors(w: World) -> dict[str, str | None]:
    return {d.operation: d.flavor for d in w.plan().dispatch}


def pending(plan: Plan, op_id: str):  # type: ignore[no-untyped-def]
    return next(p for p in plan.pending if p.operation == op_id)


def team_a(h100: int = 2, a100: int = 4) -> World:
    """The issue's example: team-a with 2 H100 and 4 A100, H100 first."""
    return (
        World()
        .cluster("local")
        .flavor("h100", H100)
        .flavor("a100", A100)
        .queue("team-a", priority=100)
        .flavored("team-a", ("h100", {"gpu": h100}), ("a100", {"gpu": a100}))
    )


def test_the_first_flavor_that_fits_is_assigned_then_the_next() -> None:
    w = team_a()
    w.ops("vision/train-{}", 4, queue="team-a", gpu=1)
    assert flavors(w) == {
        "vision/train-1": "h100",
        "vision/train-2": "h100",
        "vision/train-3": "a100",
        "vision/train-4": "a100",
    }


def test_a_full_first_flavor_falls_back_to_the_next() -> None:
    w = team_a()
    w.op("vision/running", queue="team-a", gpu=2)
    w.observe("vision/running", Phase.RUNNING, flavor="h100")
    w.op("vision/new", queue="team-a", gpu=1)
    assert flavors(w) == {"vision/new": "a100"}


def test_an_active_run_holds_the_quota_of_its_own_flavor() -> None:
    w = team_a()
    w.op("vision/running", queue="team-a", gpu=4)
    w.observe("vision/running", Phase.RUNNING, flavor="a100")
    w.op("vision/new", queue="team-a", gpu=2)
    plan = w.plan()
    assert [(d.operation, d.flavor) for d in plan.dispatch] == [("vision/new", "h100")]
    (summary,) = plan.queues
    used = {f.name: f.used for f in summary.flavors}
    assert used == {"h100": {GPU: Decimal(0)}, "a100": {GPU: Decimal(4)}}
    after = {f.name: f.used_after for f in summary.flavors}
    assert after == {"h100": {GPU: Decimal(2)}, "a100": {GPU: Decimal(4)}}
    # the queue's totals are the sums over its flavors
    assert summary.quota == {GPU: Decimal(6)}
    assert summary.used_after == {GPU: Decimal(6)}


def test_a_run_without_a_recorded_flavor_counts_in_its_first_eligible_flavor() -> None:
    w = team_a()
    w.op("vision/old", queue="team-a", gpu=2).environment(
        nodeSelector={"nvidia.com/gpu.product": A100}
    )
    w.observe("vision/old", Phase.RUNNING)  # dispatched before the queue had flavors
    (summary,) = w.plan().queues
    assert {f.name: f.used for f in summary.flavors}["a100"] == {GPU: Decimal(2)}


def test_a_pinned_op_never_gets_a_flavor_its_pins_contradict() -> None:
    w = team_a()
    w.op("vision/a100-only", queue="team-a", gpu=1).environment(
        nodeSelector={"nvidia.com/gpu.product": A100}
    )
    assert flavors(w) == {"vision/a100-only": "a100"}


def test_required_node_affinity_is_read_too() -> None:
    w = team_a()
    term = {
        "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]}]
    }
    w.op("vision/affine", queue="team-a", gpu=1).environment(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    )
    assert flavors(w) == {"vision/affine": "a100"}


def test_a_label_the_flavor_does_not_name_never_contradicts() -> None:
    w = team_a()
    w.op("vision/zone", queue="team-a", gpu=1).environment(
        nodeSelector={"topology.kubernetes.io/zone": "eu-1"}
    )
    assert flavors(w) == {"vision/zone": "h100"}


def test_an_op_no_flavor_admits_never_runs_and_says_why() -> None:
    w = team_a()
    w.op("vision/l4", queue="team-a", gpu=1).environment(
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"}
    )
    plan = w.plan()
    p = pending(plan, "vision/l4")
    assert p.reason is R.NO_ELIGIBLE_FLAVOR
    assert p.never_runs
    assert isinstance(p.blocked_by, NoEligibleFlavorBlock)
    assert [f for f, _ in p.blocked_by.conflicts] == ["h100", "a100"]
    assert "NVIDIA-L4" in p.message and p.admit.when is AdmitWhen.NEVER


def test_a_gang_is_never_split_across_flavors() -> None:
    # 2 H100 and 4 A100: 4 replicas x 1 GPU fit only in a100, whole
    w = team_a()
    w.op("vision/ddp", queue="team-a").replicas(4).requests(gpu=1)
    assert flavors(w) == {"vision/ddp": "a100"}
    # 6 GPUs fit no single flavor: it exceeds the quota, though 2 + 4 = 6
    w2 = team_a()
    w2.op("vision/ddp6", queue="team-a").replicas(6).requests(gpu=1)
    p = pending(w2.plan(), "vision/ddp6")
    assert p.reason is R.EXCEEDS_QUOTA
    assert isinstance(p.blocked_by, ExceedsQuotaBlock)
    assert [s.flavor for s in p.blocked_by.exceeds] == ["h100", "a100"]
    assert "h100 quota is 2" in p.message and "a100 quota is 4" in p.message


def test_no_flavor_fits_names_each_flavor_and_each_way_in() -> None:
    w = team_a()
    w.op("vision/h", queue="team-a", gpu=2)
    w.observe("vision/h", Phase.RUNNING, flavor="h100")
    w.op("vision/a", queue="team-a", gpu=4)
    w.observe("vision/a", Phase.RUNNING, flavor="a100")
    w.op("vision/wait", queue="team-a", gpu=1)
    p = pending(w.plan(), "vision/wait")
    assert p.reason is R.QUOTA_EXCEEDED
    assert isinstance(p.blocked_by, FlavorsQuotaBlock)
    assert [b.flavor for b in p.blocked_by.tried] == ["h100", "a100"]
    admit = p.admit
    assert admit.flavor == "h100" and admit.operations == ("vision/h",)
    assert [(a.flavor, a.operations) for a in admit.alternatives] == [("a100", ("vision/a",))]
    assert admit.text == (
        "admitted when 1 h100 GPU is released by vision/h, or 1 a100 GPU is released by vision/a"
    )
    assert admit.to_json()["or"][0]["flavor"] == "a100"


def test_one_flavor_tried_is_a_plain_quota_block_with_its_flavor() -> None:
    w = team_a()
    w.op("vision/h", queue="team-a", gpu=2)
    w.observe("vision/h", Phase.RUNNING, flavor="h100")
    w.op("vision/pinned", queue="team-a", gpu=1).environment(
        nodeSelector={"nvidia.com/gpu.product": H100}
    )
    p = pending(w.plan(), "vision/pinned")
    assert isinstance(p.blocked_by, QuotaBlock)
    assert p.blocked_by.flavor == "h100"
    assert p.admit.to_json()["flavor"] == "h100"


def test_a_flavorless_queue_dispatches_with_no_flavor() -> None:
    w = World().cluster("local").queue("q", quota={"gpu": 2})
    w.op("p/a", queue="q", gpu=1)
    plan = w.plan()
    assert [d.flavor for d in plan.dispatch] == [None]
    assert plan.queues[0].flavors == ()


def test_prices_per_flavor_in_the_budget() -> None:
    from reconciler.core.types import BudgetPeriod, BudgetSpec

    w = team_a()
    w.set_queue(
        "team-a",
        budget=BudgetSpec(Decimal(10), BudgetPeriod.DAY),
        default_timeout=3600,
    )
    w.with_org(
        prices={GPU: Decimal(2)},
        flavor_prices={"h100": {GPU: Decimal(6)}},
    )
    # an h100 hour costs 6, an a100 hour 2; the flavor is chosen by quota, then its
    # reservation is checked: 6 fits 10, a second h100 (12) does not
    w.ops("vision/t-{}", 2, queue="team-a", gpu=1)
    plan = w.plan()
    assert [(d.operation, d.flavor) for d in plan.dispatch] == [("vision/t-1", "h100")]
    assert pending(plan, "vision/t-2").reason is R.BUDGET_EXCEEDED
    # with the h100s in use, the a100 fallback is charged at the a100 price (6 + 2 + 2)
    w2 = team_a(h100=1)
    w2.set_queue("team-a", budget=BudgetSpec(Decimal(10), BudgetPeriod.DAY), default_timeout=3600)
    w2.with_org(prices={GPU: Decimal(2)}, flavor_prices={"h100": {GPU: Decimal(6)}})
    w2.ops("vision/t-{}", 4, queue="team-a", gpu=1)
    plan2 = w2.plan()
    assert [(d.operation, d.flavor) for d in plan2.dispatch] == [
        ("vision/t-1", "h100"),
        ("vision/t-2", "a100"),
        ("vision/t-3", "a100"),
    ]
    assert pending(plan2, "vision/t-4").reason is R.BUDGET_EXCEEDED


# --- cohorts per flavor -------------------------------------------------------------------


def two_teams(weight_a: int = 1, weight_b: int = 1) -> World:
    """team-a and team-b (1 h100 each) borrow from team-c's 12 idle h100s."""
    w = World().cluster("local").cohort("pool", "2h").flavor("h100", H100).flavor("a100", A100)
    for name, weight in (("team-a", weight_a), ("team-b", weight_b)):
        w.queue(name, priority=100, cohort="pool")
        w.flavored(name, ("h100", {"gpu": 1}), borrowing_limit={"h100": {"gpu": 100}})
        w.set_queue(name, fair_weight=Decimal(weight))
    w.queue("team-c", priority=50, cohort="pool")
    w.flavored("team-c", ("h100", {"gpu": 12}))
    return w


def test_borrowing_and_lending_are_per_flavor() -> None:
    w = (
        World()
        .cluster("local")
        .cohort("pool", "2h")
        .queue("team-a", cohort="pool")
        .flavored(
            "team-a",
            ("h100", {"gpu": 1}),
            ("a100", {"gpu": 1}),
            borrowing_limit={"a100": {"gpu": 2}},
        )
        .queue("team-b", cohort="pool")
        .flavored("team-b", ("h100", {"gpu": 4}), ("a100", {"gpu": 4}))
    )
    w.op("vision/big", queue="team-a", gpu=3).timeout("1h")
    plan = w.plan()
    # h100 may not be borrowed (no borrowingLimit there); a100 may, up to 2 above its 1
    assert [(d.operation, d.flavor) for d in plan.dispatch] == [("vision/big", "a100")]
    w.observe("vision/big", Phase.RUNNING, flavor="a100", dispatched_at=NOW)
    after = {q.name: q for q in w.plan().queues}
    a = {f.name: f for f in after["team-a"].flavors}
    b = {f.name: f for f in after["team-b"].flavors}
    assert a["a100"].borrowed == {GPU: Decimal(2)} and a["h100"].borrowed == {GPU: Decimal(0)}
    assert b["a100"].lent == {GPU: Decimal(2)} and b["h100"].lent == {GPU: Decimal(0)}


def simulate(w: World, cycles: int, per_cycle_end: int) -> list[tuple[int, int]]:
    """Cycles of a long backlog of 1-GPU ops in team-a and team-b: each cycle plans, then
    the ``per_cycle_end`` oldest runs end. Returns, after each cycle's plan, what team-a
    and team-b borrow (above their own 1 h100)."""
    for team in ("team-a", "team-b"):
        w.ops(team.replace("team-", "") + "/op-{}", 80, queue=team, gpu=1)
        for b in w.builders:
            if b.build().queue == team:
                b.timeout("1h")
    borrowed: list[tuple[int, int]] = []
    running: list[str] = []
    for cycle in range(cycles):
        plan = w.plan(now=NOW + timedelta(minutes=cycle))
        for d in plan.dispatch:
            running.append(d.operation)
            w.observe(d.operation, Phase.RUNNING, flavor=d.flavor, dispatched_at=NOW)
        after = {q.name: q.borrowed_after.get(GPU, Decimal(0)) for q in plan.queues}
        borrowed.append((int(after["team-a"]), int(after["team-b"])))
        for op_id in running[:per_cycle_end]:
            w.observe(op_id, Phase.SUCCEEDED, flavor="h100")
        running = running[per_cycle_end:]
    return borrowed


def test_fair_sharing_splits_by_weight() -> None:
    history = simulate(two_teams(1, 3), cycles=30, per_cycle_end=3)
    # the 12 idle h100s, borrowed 1:3, within one operation, cycle after cycle
    for a, b in history:
        assert a + b == 12 and abs(3 * a - b) <= 3, history


def test_fair_sharing_with_equal_weights_is_even() -> None:
    history = simulate(two_teams(1, 1), cycles=30, per_cycle_end=3)
    for a, b in history:
        assert a + b == 12 and abs(a - b) <= 1, history


def test_an_op_that_lost_its_share_waits_for_its_fair_share() -> None:
    w = two_teams(1, 1)
    w.op("a/big", queue="team-a", gpu=8).timeout("1h")
    w.op("b/big", queue="team-b", gpu=8).timeout("1h")
    plan = w.plan()
    # 12 idle h100s: team-a (ahead by priority tie-break: the same priority, then name)
    # borrows 7 above its 1; team-b's 8 no longer fit in what is left
    assert [d.operation for d in plan.dispatch] == ["a/big"]
    p = pending(plan, "b/big")
    assert p.reason is R.WAITING_FOR_FAIR_SHARE
    assert isinstance(p.blocked_by, FairShareBlock)
    assert p.blocked_by.ahead == ("team-a",) and p.blocked_by.flavor == "h100"
    assert "waits for its fair share" in p.message
    assert p.admit.when is AdmitWhen.BORROWERS_FINISH and p.admit.operations == ("a/big",)


def test_a_flavor_whose_node_labels_no_node_carries_is_a_warning_at_its_node_labels() -> None:
    from reconciler.core.plan.flavors import flavor_node_warnings
    from reconciler.core.types import FlavorSpec, Location

    at = Location("flavors/l4.yaml", 4, 1)
    flavors = {
        "h100": FlavorSpec("h100", {"nvidia.com/gpu.product": H100}),
        "l4": FlavorSpec("l4", {"nvidia.com/gpu.product": "NVIDIA-L4", "zone": "a"}, location=at),
    }
    nodes = {
        "local": [{"nvidia.com/gpu.product": H100, "zone": "b"}],
        "remote": [{"nvidia.com/gpu.product": "NVIDIA-L4", "zone": "b"}],  # not zone a
    }
    (warning,) = flavor_node_warnings(flavors, nodes, unread=("far",))
    assert warning == (
        "flavors/l4.yaml:4:1: warning: flavor 'l4' matches no node: no node of cluster "
        "local, remote has all of its nodeLabels (nvidia.com/gpu.product=NVIDIA-L4, zone=a); "
        "not read: far; an operation assigned it will not be placed until such nodes exist"
    )
    nodes["remote"].append({"nvidia.com/gpu.product": "NVIDIA-L4", "zone": "a"})
    assert flavor_node_warnings(flavors, nodes) == []
    assert flavor_node_warnings(flavors, {}) == []  # nothing read: nothing to compare
