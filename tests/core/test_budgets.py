"""Budgets (issue 16 §1, docs/budgets.md): calendar windows, reservations, early returns,
the ledger (one entry per run, across restarts) and the budget config."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from support.builders import NOW, World
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import ClusterListing, Memory, decide, memory_from_status
from reconciler.core.decision.render import render_operation
from reconciler.core.observation.observe import WorkloadState, observe_workloads
from reconciler.core.plan import AdmitWhen, BudgetBlock, PendingReason
from reconciler.core.plan.ledger import (
    ENTRIES_PER_FILE,
    Ledger,
    LedgerEntry,
    Window,
    entry_usage,
    hourly_rate,
    is_ledger_path,
    ledger_documents,
    run_cost,
    spent,
    window_at,
)
from reconciler.core.reporting.status import (
    operation_path,
    read_status,
    render_status,
    status_changes,
)
from reconciler.core.types import BudgetPeriod, BudgetSpec, ClusterSpec, Phase

GPU = "nvidia.com/gpu"
DAY = BudgetPeriod.DAY


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def gpu_hours(limit: str, per: BudgetPeriod = DAY) -> BudgetSpec:
    return BudgetSpec(Decimal(limit), per, "nvidia.com/gpu-hours")


def entry(
    op: str = "p/a",
    *,
    start: datetime,
    end: datetime,
    gpu: int = 1,
    cost: str = "0",
    queue: str = "q",
    generation: int = 1,
) -> LedgerEntry:
    return LedgerEntry(
        operation=op,
        generation=generation,
        workload=f"{op.split('/')[1]}-g{generation}",
        queue=queue,
        cluster="local",
        phase="Succeeded",
        requests={GPU: Decimal(gpu)},
        start=start,
        end=end,
        cost=Decimal(cost),
    )


# --- windows ----------------------------------------------------------------------------


def test_a_day_window_runs_from_midnight_to_midnight_utc() -> None:
    assert window_at(utc(2026, 12, 3, 22, 5), DAY) == Window(utc(2026, 12, 3), utc(2026, 12, 4))
    assert window_at(utc(2026, 12, 4), DAY).start == utc(2026, 12, 4)  # the end is open


def test_a_day_window_in_a_timezone_follows_its_midnight_and_daylight_saving() -> None:
    # Berlin is UTC+1 in winter: its 4 December starts at 23:00 UTC on the 3rd
    assert window_at(utc(2026, 12, 3, 23, 30), DAY, "Europe/Berlin") == Window(
        utc(2026, 12, 3, 23), utc(2026, 12, 4, 23)
    )
    # 29 March 2026: clocks go forward, the day has 23 hours
    spring = window_at(utc(2026, 3, 29, 12), DAY, "Europe/Berlin")
    assert spring.end - spring.start == timedelta(hours=23)
    autumn = window_at(utc(2026, 10, 25, 12), DAY, "Europe/Berlin")
    assert autumn.end - autumn.start == timedelta(hours=25)


def test_weeks_start_on_monday_and_months_on_the_first() -> None:
    thursday = utc(2026, 12, 3, 12)
    assert window_at(thursday, BudgetPeriod.WEEK) == Window(utc(2026, 11, 30), utc(2026, 12, 7))
    assert window_at(utc(2026, 12, 31, 23, 59), BudgetPeriod.MONTH) == Window(
        utc(2026, 12, 1), utc(2027, 1, 1)
    )
    assert window_at(utc(2028, 2, 29, 12), BudgetPeriod.MONTH) == Window(
        utc(2028, 2, 1), utc(2028, 3, 1)
    )
    # a month in New York starts at 05:00 UTC (EST)
    assert window_at(utc(2027, 1, 1, 3), BudgetPeriod.MONTH, "America/New_York") == Window(
        utc(2026, 12, 1, 5), utc(2027, 1, 1, 5)
    )


def test_a_run_across_a_boundary_counts_in_each_window_for_the_time_it_ran_there() -> None:
    run = entry(start=utc(2026, 12, 3, 23), end=utc(2026, 12, 4, 2), gpu=2, cost="15")
    before, after = window_at(utc(2026, 12, 3, 12), DAY), window_at(utc(2026, 12, 4, 12), DAY)
    assert entry_usage(run, gpu_hours("10"), before) == 2  # 1 h x 2 GPUs
    assert entry_usage(run, gpu_hours("10"), after) == 4
    cost = BudgetSpec(Decimal(100), DAY)
    assert entry_usage(run, cost, before) == 5  # a third of its cost
    assert entry_usage(run, cost, after) == 10
    assert spent([run], "q", cost, before) + spent([run], "q", cost, after) == 15
    assert spent([run], "other", cost, after) == 0


# --- prices -----------------------------------------------------------------------------


def test_cost_is_requests_times_price_times_hours_with_memory_per_gib() -> None:
    prices = {GPU: Decimal("2.50"), "cpu": Decimal("0.04"), "memory": Decimal("0.005")}
    requests = {GPU: Decimal(2), "cpu": Decimal(8), "memory": Decimal(64 * 2**30)}
    assert hourly_rate(requests, prices) == Decimal("5.00") + Decimal("0.32") + Decimal("0.320")
    assert run_cost(requests, prices, utc(2026, 1, 1), utc(2026, 1, 1, 1, 30)) == Decimal("8.46")
    assert hourly_rate({"example.com/fpga": Decimal(1)}, prices) == 0  # no price: free
    assert hourly_rate(requests, {}, "memory") == 64  # GiB-hours


# --- admission --------------------------------------------------------------------------


def budget_world(limit: str = "3", **queue: object) -> World:
    world = World().queue("q", budget=gpu_hours(limit), **queue)  # type: ignore[arg-type]
    return world


def test_dispatches_until_the_reservations_reach_the_limit() -> None:
    world = budget_world("3")
    for i in range(5):
        world.op(f"p/o{i}", queue="q", gpu=1).timeout(3600)
    plan = world.plan()
    assert [d.operation for d in plan.dispatch] == ["p/o0", "p/o1", "p/o2"]
    waiting = [p for p in plan.pending if p.reason is PendingReason.BUDGET_EXCEEDED]
    assert [p.operation for p in waiting] == ["p/o3", "p/o4"]
    block = waiting[0].blocked_by
    assert isinstance(block, BudgetBlock)
    assert (block.spent, block.committed, block.limit, block.reservation) == (0, 3, 3, 1)
    admit = waiting[0].admit
    assert admit.when is AdmitWhen.BUDGET_WINDOW_RESETS
    # every run reserved 1 h from 12:00: nothing is carried past midnight
    assert admit.at == utc(2026, 1, 2)
    assert waiting[0].message == (
        "needs 1 nvidia.com/gpu-hours; q spent 0 nvidia.com/gpu-hours and committed 3 "
        "nvidia.com/gpu-hours of 3 nvidia.com/gpu-hours this day; admitted when the day "
        "window resets at 2026-01-02 00:00 UTC (sooner if a run ends early)"
    )
    summary = next(q for q in plan.queues if q.name == "q").budget
    assert summary is not None
    assert (summary.spent, summary.committed, summary.committed_after) == (0, 0, 3)


def test_spent_and_committed_count_finished_and_running_runs() -> None:
    world = budget_world("3")
    world.op("p/run", queue="q", gpu=1).timeout(7200)
    world.op("p/next", queue="q", gpu=1).timeout(3600)
    # started 30 min ago with a 2 h timeout: 0.5 so far + 1.5 to its deadline
    world.observe("p/run", Phase.RUNNING, started_at=NOW - timedelta(minutes=30))
    done = entry("p/old", start=utc(2026, 1, 1, 8), end=utc(2026, 1, 1, 8, 30))
    plan = world.plan(ledger=[done])
    block = plan.pending[0].blocked_by
    assert isinstance(block, BudgetBlock)
    assert (block.spent, block.committed) == (Decimal("0.5"), 2)
    # the running op reserves 1.5 h past midnight? no: its deadline is 13:30; the reset admits
    assert plan.pending[0].admit.at == utc(2026, 1, 2)


def test_an_early_end_returns_the_unused_reservation_at_once() -> None:
    world = budget_world("2")
    world.op("p/a", queue="q", gpu=1).timeout(7200)
    world.op("p/b", queue="q", gpu=1).timeout(3600)
    world.observe("p/a", Phase.RUNNING, started_at=NOW - timedelta(minutes=10))
    plan = world.plan()
    assert plan.dispatch == ()
    assert plan.pending[0].reason is PendingReason.BUDGET_EXCEEDED
    # p/a ends 10 minutes in: its ledger entry counts 1/6 h, the rest of its 2 h returns
    world.observe("p/a", Phase.SUCCEEDED)
    ran = entry("p/a", start=NOW - timedelta(minutes=10), end=NOW)
    plan = world.plan(ledger=[ran])
    assert [d.operation for d in plan.dispatch] == ["p/b"]


def test_reservations_carried_past_the_reset_delay_admission_to_a_later_reset() -> None:
    world = budget_world("3")
    world.op("p/long", queue="q", gpu=1).timeout(40 * 3600)
    world.op("p/next", queue="q", gpu=1).timeout(2 * 3600)
    # running since 11:00 with a 40 h timeout: it may hold its GPU until 03:00 on day 3
    world.observe("p/long", Phase.RUNNING, started_at=NOW - timedelta(hours=1))
    plan = world.plan()
    pending = plan.pending[0]
    assert pending.reason is PendingReason.BUDGET_EXCEEDED
    # at the next midnight it still reserves 24 h (over 3); at the one after, 3 h: 3 + 2 > 3;
    # at the third reset nothing is carried
    assert pending.admit.at == utc(2026, 1, 4)
    assert "when enough committed reservation has fallen due" in pending.message


def test_a_reservation_over_the_limit_alone_waits_for_a_config_change() -> None:
    world = budget_world("1")
    world.op("p/big", queue="q", gpu=2).timeout(3600)
    pending = world.plan().pending[0]
    assert pending.reason is PendingReason.BUDGET_EXCEEDED
    assert pending.admit.when is AdmitWhen.LIMIT_RAISED
    assert "timeout lowered" in pending.message


def test_a_strict_fifo_queue_waits_behind_a_head_over_budget() -> None:
    world = budget_world("3", strict=True)
    world.op("p/big", queue="q", gpu=4).timeout(3600)  # 4 GPU-hours: never fits
    world.op("p/small", queue="q", gpu=1).timeout(3600)
    reasons = {p.operation: p.reason for p in world.plan().pending}
    assert reasons == {
        "p/big": PendingReason.BUDGET_EXCEEDED,
        "p/small": PendingReason.WAITING_BEHIND_HEAD,
    }


def test_a_cost_budget_uses_the_prices_of_the_operations_cluster() -> None:
    world = World().cluster("spot").queue("q", cluster="spot", budget=BudgetSpec(Decimal(10), DAY))
    world.with_org(prices={GPU: Decimal("2.50")}, currency="USD")
    world.clusters["spot"] = ClusterSpec("spot", prices={GPU: Decimal("1.00")})
    for i in range(4):
        world.op(f"p/o{i}", queue="q", gpu=1).timeout(3 * 3600)  # 3 USD each at spot prices
    plan = world.plan()
    assert len(plan.dispatch) == 3
    assert "needs 3 USD; q spent 0 USD and committed 9 USD of 10 USD" in plan.pending[0].message
    world.clusters["spot"] = ClusterSpec("spot")  # org prices: 7.50 USD each
    assert len(world.plan().dispatch) == 1


def test_the_window_uses_the_org_timezone() -> None:
    world = budget_world("1")
    world.with_org(timezone="Asia/Tokyo")  # UTC+9: noon UTC is 21:00, midnight at 15:00 UTC
    world.op("p/a", queue="q", gpu=1).timeout(3600)
    world.op("p/b", queue="q", gpu=1).timeout(3600)
    pending = world.plan().pending[0]
    assert pending.admit.at == utc(2026, 1, 1, 15)
    assert "resets at 2026-01-02 00:00 JST" in pending.message


# --- the ledger in decide ---------------------------------------------------------------


def finished_state(
    op: str = "p/a", *, phase: Phase = Phase.SUCCEEDED, gen: int = 1
) -> WorkloadState:
    return WorkloadState(
        operation=op,
        generation=gen,
        cluster="local",
        namespace="p",
        name=f"{op.split('/')[1]}-g{gen}",
        uid="u1",
        phase=phase,
        queue="q",
        dispatched_at="2026-01-01T09:00:00Z",
        started_at="2026-01-01T09:00:05Z",
        finished_at="2026-01-01T10:00:05Z",
        requests={GPU: Decimal(1)},
    )


def ledger_world() -> World:
    world = budget_world("3")
    world.with_org(prices={GPU: Decimal("2.50")}, currency="USD")
    world.op("p/a", queue="q", gpu=1).timeout(3600)
    return world


def test_a_run_that_ended_while_nobody_watched_is_costed_from_its_jobs_own_times() -> None:
    compiled = ledger_world().repo()
    listing = {"local": ClusterListing((finished_state(),))}
    decision = decide(compiled, listing, Memory(), NOW)  # noticed at 12:00, ended at 10:00
    (run,) = decision.memory.ledger
    assert (run.start, run.end) == (utc(2026, 1, 1, 9, 0, 5), utc(2026, 1, 1, 10, 0, 5))
    assert (run.cost, run.currency, run.queue, run.phase) == (
        Decimal("2.5"),
        "USD",
        "q",
        "Succeeded",
    )
    block = decision.plan.queues[0].budget
    assert block is not None and block.spent == 1


def test_each_run_is_entered_once_across_cycles_restarts_and_leaders() -> None:
    compiled = ledger_world().repo()
    listing = {"local": ClusterListing((finished_state(),))}
    first = decide(compiled, listing, Memory(), NOW)
    again = decide(compiled, listing, first.memory, NOW + timedelta(minutes=1))
    assert again.memory.ledger is first.memory.ledger  # nothing new: the same ledger
    # what the status branch holds after the first cycle, read by a new leader
    files = render_status(compiled, first.plan, first.states, ledger=first.memory.ledger)
    assert [p for p in files if is_ledger_path(p)] == ["status/ledger/2026-01.yaml"]
    restarted = memory_from_status(read_status(files))
    assert list(restarted.ledger) == list(first.memory.ledger)
    later = decide(compiled, listing, restarted, NOW + timedelta(hours=1))
    assert len(later.memory.ledger) == 1
    # the same files again: nothing to commit
    files2 = render_status(compiled, later.plan, later.states, ledger=later.memory.ledger)
    assert {p: files2[p] for p in files2 if is_ledger_path(p)} == {
        p: files[p] for p in files if is_ledger_path(p)
    }


def test_a_superseded_generation_that_finishes_is_entered_too() -> None:
    world = ledger_world()
    world.builders[0]._fields["generation"] = 2
    compiled = world.repo()
    old = finished_state(gen=1)
    decision = decide(compiled, {"local": ClusterListing((old,))}, Memory(), NOW)
    assert [e.key for e in decision.memory.ledger] == [("p/a", 1, "a-g1")]


def test_ledger_files_are_never_deleted_and_long_months_continue_in_parts() -> None:
    many = Ledger.of(
        entry(f"p/o{i}", start=utc(2026, 1, 1), end=utc(2026, 1, 1, 1) + timedelta(seconds=i))
        for i in range(ENTRIES_PER_FILE + 1)
    )
    docs = ledger_documents(many)
    assert sorted(docs) == ["status/ledger/2026-01.2.yaml", "status/ledger/2026-01.yaml"]
    assert len(docs["status/ledger/2026-01.2.yaml"]["entries"]) == 1
    gone = operation_path("p/gone")
    before = {"status/ledger/2025-12.yaml": b"entries: []\n", gone: b"x"}
    assert status_changes(before, {}) == {gone: None}


def test_a_ledger_entry_reads_back_equal_and_a_bad_one_is_a_problem() -> None:
    run = entry(start=utc(2026, 1, 1, 9), end=utc(2026, 1, 1, 10), cost="2.5")
    files = {"status/ledger/2026-01.yaml": b"entries:\n- operation: p/a\n  generation: x\n"}
    view = read_status(files)
    assert view.ledger == ()
    # the entry alone is skipped; no queue can be told from it, so every budget waits
    message = "status/ledger/2026-01.yaml:1:1: entry 1: missing 'workload', 'start', 'end', 'cost'"
    assert view.problems == (message,)
    assert view.ledger_problems.unread == {"": message}
    assert LedgerEntry.from_dict(run.to_dict()) == run


# --- config -----------------------------------------------------------------------------

ORG = """kind: Org
prices:
  nvidia.com/gpu: 2.50
  cpu: 0.04
  memory: 0.005
currency: USD
timezone: Europe/Berlin
"""
OP = """kind: Operation
queue: gpu
run:
  kind: job
  container:
    image: trainer
    resources:
      limits: {nvidia.com/gpu: 1}
"""


def files(queue: str, op: str = OP, org: str = ORG) -> dict[str, str]:
    return {
        "reconciler.yaml": org,
        "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n"
        "prices:\n  nvidia.com/gpu: 1.25\n",
        "queues/gpu.yaml": "kind: Queue\ncluster: local\n" + queue,
        "projects/p/project.yaml": "kind: Project\n",
        "projects/p/operations/train.yaml": op,
    }


def test_the_price_list_budget_and_cluster_prices_compile() -> None:
    compiled = compile_repo(
        repo(files("budget: {limit: 500, per: month}\n", OP + "  timeout: 2h\n"))
    )
    assert compiled.errors == ()
    assert compiled.org.prices == {
        GPU: Decimal("2.50"),
        "cpu": Decimal("0.04"),
        "memory": Decimal("0.005"),
    }
    assert (compiled.org.currency, compiled.org.timezone) == ("USD", "Europe/Berlin")
    assert compiled.clusters["local"].prices == {GPU: Decimal("1.25")}
    assert compiled.queues["gpu"].budget == BudgetSpec(Decimal(500), BudgetPeriod.MONTH)
    assert compiled.operations[0].timeout == 7200


def test_a_budgeted_queue_needs_a_timeout_on_every_operation() -> None:
    compiled = compile_repo(
        repo(files("budget: {limit: 3, per: day, resource: nvidia.com/gpu-hours}\n"))
    )
    (error,) = compiled.errors
    assert str(error).startswith("projects/p/operations/train.yaml:1:1: queue 'gpu' has a budget")
    assert "defaultTimeout" in str(error)


def test_a_queue_default_timeout_bounds_the_job() -> None:
    compiled = compile_repo(
        repo(
            files(
                "defaultTimeout: 30m\n"
                "budget: {limit: 3, per: day, resource: nvidia.com/gpu-hours}\n"
            )
        )
    )
    assert compiled.errors == ()
    op = compiled.operations[0]
    assert op.timeout == 1800
    job = render_operation(op, {}, config_version="c", dispatched_at=NOW).manifests[0]
    assert job["spec"]["activeDeadlineSeconds"] == 1800


@pytest.mark.parametrize(
    ("queue", "org", "message"),
    [
        (
            "budget: {limit: 3, per: day, resource: gpus}\n",
            ORG,
            "queues/gpu.yaml:3:40: budget.resource: 'gpus' is not a budget resource",
        ),
        (
            "budget: {limit: 3, per: fortnight}\n",
            ORG,
            "queues/gpu.yaml:3:25: budget.per: Input should be",
        ),
        ("budget: {limit: 0, per: day}\n", ORG, "queues/gpu.yaml:3:17: budget.limit"),
        (
            "defaultTimeout: 1h\nbudget: {limit: 3, per: day}\n",
            "kind: Org\n",
            "queues/gpu.yaml:4:9: a cost budget needs prices",
        ),
        (
            "",
            ORG.replace("Europe/Berlin", "Mars/Olympus"),
            "reconciler.yaml:7:11: timezone: 'Mars/Olympus' is not a time zone",
        ),
        ("budget: {limit: 3, per: day}\nbudgett: 1\n", ORG, "did you mean 'budget'"),
    ],
)
def test_bad_budget_config_is_an_error_at_its_place(queue: str, org: str, message: str) -> None:
    files_ = files(queue, OP + "  timeout: 1h\n", org)
    if "prices" in message:
        files_["clusters/local.yaml"] = "kind: Cluster\nkubeconfig:\n  inCluster: true\n"
    errors = [str(e) for e in compile_repo(repo(files_)).errors]
    assert any(message in e for e in errors), errors


def test_the_ledger_files_are_rendered_once_per_month_that_changed() -> None:
    from reconciler.core.plan.ledger import ledger_files
    from reconciler.core.reporting.status import dump_yaml

    calls: list[str] = []

    def dump(doc: object) -> bytes:
        calls.append("x")
        return dump_yaml(doc)  # type: ignore[arg-type]

    dec = entry("p/dec", start=utc(2025, 12, 1), end=utc(2025, 12, 1, 1))
    jan = entry("p/jan", start=utc(2026, 1, 1), end=utc(2026, 1, 1, 1))
    ledger = Ledger.of([dec, jan])
    first = ledger_files(ledger, dump)
    assert sorted(first) == ["status/ledger/2025-12.yaml", "status/ledger/2026-01.yaml"]
    assert ledger_files(ledger, dump) == first and len(calls) == 2
    grown = ledger.with_entries([entry("p/jan2", start=utc(2026, 1, 2), end=utc(2026, 1, 2, 1))])
    second = ledger_files(grown, dump)
    assert len(calls) == 3  # only January again
    assert second["status/ledger/2025-12.yaml"] == first["status/ledger/2025-12.yaml"]
    assert [e.operation for e in read_status(second).ledger] == ["p/dec", "p/jan", "p/jan2"]


# --- distributed runs (issue 14): every replica is reserved, spent and committed ----------


def test_a_gang_reserves_and_is_charged_for_every_replica() -> None:
    world = budget_world("12")
    world.with_org(prices={GPU: Decimal("2.50")}, currency="USD")
    world.op("p/a", queue="q", gpu=2).replicas(4).timeout(3600)  # 4 x 2 GPUs for 1 h
    world.op("p/b", queue="q", gpu=2).replicas(4).timeout(3600)
    plan = world.plan()
    assert [d.operation for d in plan.dispatch] == ["p/a"]
    (waiting,) = plan.pending
    assert waiting.reason is PendingReason.BUDGET_EXCEEDED
    block = waiting.blocked_by
    assert isinstance(block, BudgetBlock)
    assert (block.committed, block.reservation, block.limit) == (8, 8, 12)

    # the finished gang's ledger entry is costed from its Job: 8 GPUs for 30 minutes
    compiled = world.repo()
    op = next(o for o in compiled.operations if o.id == "p/a")
    job = next(
        m
        for m in render_operation(op, {}, config_version="c", dispatched_at=NOW).manifests
        if m["kind"] == "Job"
    )
    job["metadata"]["uid"] = "u-gang"
    job["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}],
        "startTime": "2026-01-01T10:00:00Z",
        "completionTime": "2026-01-01T10:30:00Z",
    }
    (state,) = observe_workloads("local", [job], [])
    decision = decide(compiled, {"local": ClusterListing((state,))}, Memory(), NOW)
    (run,) = decision.memory.ledger
    assert run.requests == {GPU: Decimal(8)}
    assert run.cost == Decimal("10")  # 8 GPUs x 0.5 h x 2.50
    summary = next(q for q in decision.plan.queues if q.name == "q").budget
    assert summary is not None and summary.spent == 4  # GPU-hours


def test_usage_is_split_by_the_flavor_each_run_ran_in() -> None:
    """``reconciler usage``: a queue with flavors has a row per flavor (table, JSON, CSV),
    from each ledger entry's ``flavor`` as the status branch holds it; a ledger without
    flavors renders as it did (no flavor column, no ``flavor`` key)."""
    import csv
    import io
    import json

    from reconciler.cli.usage_cmd import render_usage
    from reconciler.core.plan.ledger import entries_from_document, ledger_documents, usage

    def entry(op: str, flavor: str, gpu: int, cost: str) -> LedgerEntry:
        return LedgerEntry(
            operation=op,
            generation=1,
            workload=f"{op.replace('/', '-')}-g1",
            queue="team-a",
            cluster="local",
            phase="Succeeded",
            requests={"nvidia.com/gpu": Decimal(gpu)},
            start=datetime(2026, 1, 2, 8, tzinfo=UTC),
            end=datetime(2026, 1, 2, 10, tzinfo=UTC),
            cost=Decimal(cost),
            currency="USD",
            flavor=flavor,
        )

    ledger = Ledger.of(
        [entry("v/a", "h100", 1, "8"), entry("v/b", "a100", 2, "6"), entry("v/c", "h100", 1, "8")]
    )
    # through the status branch's ledger file and back
    (doc,) = ledger_documents(ledger).values()
    read = entries_from_document(doc)
    rows = usage(read.entries, BudgetPeriod.DAY)
    assert [(r.queue, r.flavor, r.runs, r.hours, r.cost) for r in rows] == [
        ("team-a", "a100", 1, {"nvidia.com/gpu": Decimal(4)}, Decimal(6)),
        ("team-a", "h100", 2, {"nvidia.com/gpu": Decimal(4)}, Decimal(16)),
    ]
    table = render_usage(rows, "day", "UTC", "table").splitlines()
    assert table[0].split()[:4] == ["WINDOW", "QUEUE", "FLAVOR", "RUNS"]
    assert table[1].split()[:5] == ["2026-01-02", "team-a", "a100", "1", "4"]
    data = json.loads(render_usage(rows, "day", "UTC", "json"))["usage"]
    assert [(u["flavor"], u["runs"], u["cost"]) for u in data] == [
        ("a100", 1, "6"),
        ("h100", 2, "16"),
    ]
    lines = list(csv.reader(io.StringIO(render_usage(rows, "day", "UTC", "csv"))))
    assert lines[0][:5] == ["window_start", "window_end", "queue", "flavor", "runs"]
    assert lines[2][2:5] == ["team-a", "h100", "2"]
    plain = usage([entry("v/d", "", 1, "2")], BudgetPeriod.DAY)
    assert plain[0].flavor == ""
    assert "FLAVOR" not in render_usage(plain, "day", "UTC", "table")
    assert "flavor" not in json.loads(render_usage(plain, "day", "UTC", "json"))["usage"][0]
    assert "flavor" not in render_usage(plain, "day", "UTC", "csv")
