"""The queue view model on the seed example and on builders' worlds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from support.builders import World
from support.worlds import dispatched_states as _dispatched_states

from reconciler.core.compile import compile_repo
from reconciler.core.decision.schedule import with_ticks
from reconciler.core.plan import Plan, plan_repo
from reconciler.core.reporting.status import read_status, render_status
from reconciler.core.types import CompiledRepo, Phase, RepoSnapshot
from reconciler.core.views.queue_view import (
    BlameLine,
    QueueBudget,
    QuotaUse,
    build_operation_detail,
    build_queue_detail,
    build_queues_view,
    queues_to_table,
    queues_view_from_status,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _seed(template: RepoSnapshot) -> tuple[CompiledRepo, Plan]:
    repo = compile_repo(template)
    assert repo.valid, repo.errors
    repo = with_ticks(repo, {}, NOW)  # as a cycle at NOW decides over it
    return repo, plan_repo(repo, [], NOW)


def test_seed_rows_are_in_priority_order_with_quota_and_concurrency(
    template: RepoSnapshot,
) -> None:
    repo, plan = _seed(template)
    view = build_queues_view(repo, plan, {}, applied=True)
    assert [r.name for r in view.rows] == [
        "notebooks",
        "sandboxes",
        "team-a",
        "team-b",
        "gpu-fleet",
        "batch",
    ]
    team_a, team_b, batch = view.row("team-a"), view.row("team-b"), view.row("batch")
    assert team_a is not None and team_b is not None and batch is not None
    # summed over the flavors: team-a's own H100 and A100 and one H100 borrowed from team-b
    assert team_a.quotas == (
        QuotaUse(resource="nvidia.com/gpu", used=Decimal(3), limit=Decimal(2), borrowed=Decimal(1)),
    )
    assert team_b.quotas[0].text == "2/4 (1 lent)" and team_b.quotas[0].fraction == 0.5
    assert (batch.active, batch.concurrency, batch.concurrency_text) == (3, 3, "3/3")
    assert (team_a.pending, team_a.head_reason) == (3, "BorrowingNotAllowed")
    assert "its timeout is 12h" in team_a.head_message
    assert batch.kinds == ("batch", "job") and batch.strategy == "StrictFIFO"
    assert not batch.paused


def test_unapplied_plan_counts_its_dispatches_as_next_not_active(template: RepoSnapshot) -> None:
    repo, plan = _seed(template)
    view = build_queues_view(repo, plan, {}, applied=False, source="live")
    team_a = view.row("team-a")
    assert team_a is not None
    assert (team_a.active, team_a.next, team_a.quotas[0].used) == (0, 3, 0)
    assert view.source == "live" and view.fleet.next == len(plan.dispatch)


def test_running_and_waiting_come_from_the_observed_workloads(template: RepoSnapshot) -> None:
    repo, first = _seed(template)
    states = _dispatched_states(repo, first)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    view = build_queues_view(repo, plan, states, applied=True)
    team_b = view.row("team-b")
    assert team_b is not None
    assert (team_b.active, team_b.running, team_b.waiting) == (2, 1, 1)
    assert team_b.quotas[0].text == "2/4 (1 lent)"  # an H100 to team-a's train-vit
    # fleet totals: per cluster and over all clusters, per resource
    assert [c.cluster for c in view.clusters] == ["local"]
    total = view.fleet
    assert total.active == sum(r.active for r in view.rows) == len(states)
    assert total.running + total.waiting == total.active
    gpu = {q.resource: q for q in total.quotas}["nvidia.com/gpu"]
    assert gpu.limit == 1 + 2 + 2 + 4 + 4  # notebooks, sandboxes, team-a, team-b, gpu-fleet
    assert gpu.used == sum(
        q.used for r in view.rows for q in r.quotas if q.resource == "nvidia.com/gpu"
    )


def test_the_status_branch_gives_the_same_rows_as_the_cycle(template: RepoSnapshot) -> None:
    repo, first = _seed(template)
    states = _dispatched_states(repo, first)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    from_cycle = build_queues_view(repo, plan, states, applied=True)
    from_branch = queues_view_from_status(read_status(render_status(repo, plan, states)))
    assert from_branch.source == "status-branch" and from_branch.version == repo.version
    # these status files record no decision: no clock to forecast a budget's burn at
    burns = {r.name: r.budget.forecast for r in from_cycle.rows if r.budget is not None}
    assert burns == {"team-b": "at this rate team-b does not spend its daily budget this day"}
    assert [
        r.model_copy(update={"next": 0, "budget": _unforecast(r.budget)}) for r in from_cycle.rows
    ] == list(from_branch.rows)
    assert from_cycle.fleet == from_branch.fleet


def test_queue_detail_lists_pending_with_position_and_what_admits_it(
    template: RepoSnapshot,
) -> None:
    repo, plan = _seed(template)
    states = _dispatched_states(repo, plan)
    source = template.files["queues/team-a.yaml"].content
    lines = source.decode().splitlines()
    blame = [
        BlameLine(i, f"{i:040x}", "alice", NOW, f"change {i}", text)
        for i, text in enumerate(lines, start=1)
    ]
    detail = build_queue_detail(
        repo, plan, states, "team-a", applied=True, source_text=source, blame=blame
    )
    assert detail is not None and detail.source == "queues/team-a.yaml"
    assert [(p.position, p.reason) for p in detail.pending] == [
        (1, "BorrowingNotAllowed"),  # sweep-lr-2: 12h timeout, both of team-a's flavors full
        (2, "QuotaExceeded"),
        (3, "QuotaExceeded"),
    ]
    # the distributed train-ddp (2 x 1 A100) waits for both GPUs at once; each way in names
    # the flavor whose quota it is
    assert [
        (p.admit["when"], p.admit["resource"], p.admit["amount"], p.admit["flavor"])
        for p in detail.pending
    ] == [
        ("ResourcesReleased", "nvidia.com/gpu", "2", "h100"),
        ("ResourcesReleased", "nvidia.com/gpu", "2", "a100"),
        ("ResourcesReleased", "nvidia.com/gpu", "1", "a100"),
    ]
    assert [p.admitted_when for p in detail.pending] == [
        p.admit.text for p in plan.pending if p.queue == "team-a"
    ]
    assert detail.pending[1].operation == "vision/train-ddp"
    assert detail.pending[1].requests == "cpu=8, memory=64Gi, nvidia.com/gpu=2"
    assert {a.operation for a in detail.active} == {
        d.operation for d in plan.dispatch if d.queue == "team-a"
    }
    settings = {s.key: s for s in detail.settings}
    priority = settings["priority"]
    assert priority.value == "100" and lines[priority.line - 1] == "priority: 100"
    assert priority.commit == f"{priority.line:040x}" and priority.author == "alice"
    cohort = settings["cohort"]
    assert cohort.value == "gpu-pool" and lines[cohort.line - 1] == "cohort: gpu-pool"
    assert settings["concurrency"].line == 0  # not written: the default
    assert build_queue_detail(repo, plan, states, "nope", applied=True) is None


def test_operation_detail_has_history_workload_and_provenance(template: RepoSnapshot) -> None:
    repo, first = _seed(template)
    states = _dispatched_states(repo, first)
    plan = plan_repo(repo, [s.to_observed() for s in states.values()], NOW)
    running = next(s for s in states.values() if s.phase is Phase.RUNNING)
    detail = build_operation_detail(repo, plan, states, running.operation, applied=True)
    assert detail is not None
    assert (detail.phase, detail.workload, detail.pod) == ("Running", running.name, running.pod)
    assert [h.phase for h in detail.history] == ["Queued", "Dispatched", "Running"]
    assert detail.history[2].at == running.started_at
    steps = {p.step for p in detail.provenance}
    assert "operation" in steps and any(s.startswith("preset ") for s in steps)
    assert any("(" in s and s.endswith(")") for s in steps if s.startswith("preset "))
    queued = next(p for p in plan.pending if p.queue == "team-a")
    waiting = build_operation_detail(repo, plan, states, queued.operation, applied=True)
    assert waiting is not None and waiting.phase == "Queued"
    assert (waiting.position, waiting.reason) == (1, "QuotaExceeded")
    assert waiting.admitted_when == queued.admit.text
    assert waiting.admit == queued.admit.to_json() and waiting.admit["when"] == "ResourcesReleased"
    parent = build_operation_detail(repo, plan, states, "vision/sweep-lr", applied=True)
    assert parent is not None and parent.children == (
        "vision/sweep-lr-0",
        "vision/sweep-lr-1",
        "vision/sweep-lr-2",
    )
    assert build_operation_detail(repo, plan, states, "vision/none", applied=True) is None


def test_paused_queue_and_exceeds_quota_on_a_built_world() -> None:
    w = World().queue("gpu", quota={"nvidia.com/gpu": 1}).queue("off", paused=True)
    w.op("p/big", queue="gpu", gpu=2)
    w.op("p/idle", queue="off")
    repo, plan = w.repo(), w.plan()
    view = build_queues_view(repo, plan, {}, applied=True)
    off, gpu = view.row("off"), view.row("gpu")
    assert off is not None and off.paused and off.head_reason == "QueuePaused"
    assert gpu is not None and gpu.head_reason == "ExceedsQuota"
    detail = build_queue_detail(repo, plan, {}, "gpu", applied=True)
    assert detail is not None and detail.pending[0].never_runs
    assert detail.pending[0].admitted_when.startswith("it can never be admitted")
    assert detail.pending[0].admit["when"] == "Never"
    table = queues_to_table(view, wide=True)
    assert table.splitlines()[0].split()[:2] == ["QUEUE", "CLUSTER"]
    assert "PAUSED" in table and "(all)" in table


def test_admit_is_a_structured_field_not_parsed_from_the_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 12 item 5: the page's "what would admit it" comes from ``Pending.admit``; a
    reworded message changes nothing on the page."""
    from reconciler.core import plan as plan_mod

    world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    world.op("vision/a", gpu=2)
    world.op("vision/b", gpu=2)
    repo = world.repo()
    plan = plan_repo(repo, [], NOW)
    [pending] = plan.pending
    assert pending.admit.when is plan_mod.AdmitWhen.RESOURCES_RELEASED
    assert pending.admit.operations == ("vision/a",)
    assert pending.admit.resource == "nvidia.com/gpu" and pending.admit.amount == 2
    assert pending.message.endswith("; " + pending.admit.text)
    monkeypatch.setattr(plan_mod.QuotaBlock, "message", lambda self: "reworded entirely")
    detail = build_queue_detail(repo, plan, {}, "team-a", applied=False)
    assert detail is not None
    assert detail.pending[0].message == "reworded entirely"
    assert detail.pending[0].admitted_when == "admitted when 2 GPUs are released by vision/a"
    page = build_operation_detail(repo, plan, {}, "vision/b", applied=False)
    assert page is not None
    assert page.admitted_when == "admitted when 2 GPUs are released by vision/a"
    assert page.admit == pending.admit.to_json()


def test_recorded_history_keeps_one_event_per_change() -> None:
    from reconciler.core.reporting.status import OperationStatus
    from reconciler.core.views.queue_view import recorded_history

    def rec(phase: str, reason: str | None, position: int | None = None) -> OperationStatus:
        return OperationStatus(
            operation="p/a", phase=phase, reason=reason, position=position, generation=1
        )

    versions = [
        ("a" * 40, NOW, rec("Queued", "QuotaExceeded", 2)),
        ("b" * 40, NOW, rec("Queued", "QuotaExceeded", 1)),
        ("c" * 40, NOW, rec("Dispatched", "WorkloadCreated")),
        ("d" * 40, NOW, rec("Running", None)),
        ("e" * 40, NOW, rec("Succeeded", "Completed")),
    ]
    events = recorded_history(versions)
    assert [e.phase for e in events] == ["Queued", "Dispatched", "Running", "Succeeded"]
    assert events[0].note == "generation 1, QuotaExceeded, position 2, status commit " + "a" * 12
    assert events[1].at == NOW.isoformat(timespec="seconds")


def test_a_budgeted_queue_shows_spent_and_committed_against_its_limit() -> None:
    """The BUDGET column (``reconciler queues``, the web pages, ``/api/v1``): the plan's
    own summary of the window, spent + committed / limit, the same from the cycle and from
    the status branch."""
    from reconciler.core.plan.ledger import Ledger, LedgerEntry
    from reconciler.core.types import BudgetPeriod, BudgetSpec
    from reconciler.core.views.web_html import render_queue_page, render_queues_page

    world = World().with_org(prices={"nvidia.com/gpu": Decimal(2)}, currency="USD")
    world.queue("b", budget=BudgetSpec(Decimal(20), BudgetPeriod.DAY), quota={"nvidia.com/gpu": 4})
    world.queue("free")
    world.op("p/one", queue="b", gpu=1).timeout("2h")  # reserves 1 GPU x 2 h x 2 = 4
    world.op("p/two", queue="b", gpu=2).timeout("3h")  # 12: over 20 with 5 spent and 4
    repo = world.repo()
    spent = LedgerEntry(
        operation="p/old",
        generation=1,
        workload="p-old-g1",
        queue="b",
        cluster="local",
        phase="Succeeded",
        requests={"nvidia.com/gpu": Decimal(1)},
        start=NOW + timedelta(hours=1),
        end=NOW + timedelta(hours=3, minutes=30),
        cost=Decimal(5),
    )
    at = NOW + timedelta(hours=4)
    plan = plan_repo(repo, [], at, ledger=[spent])
    assert [d.operation for d in plan.dispatch] == ["p/one"]
    view = build_queues_view(repo, plan, {}, applied=True)
    rows = {r.name: r for r in view.rows}
    assert rows["b"].budget_text == "5+4/20 USD/day"
    assert rows["free"].budget is None and rows["free"].budget_text == ""
    unapplied = build_queues_view(repo, plan, {}, applied=False)
    assert {r.name: r for r in unapplied.rows}["b"].budget_text == "5+0/20 USD/day"
    table = queues_to_table(view).splitlines()
    assert table[0].split()[5:7] == ["USED/LIMIT", "BUDGET"]
    assert "5+4/20 USD/day" in table[1 + [r.name for r in view.rows].index("b")]
    assert table[2 + len(view.rows)] == "at this rate b spends its daily budget by 16:00"
    assert rows["b"].to_json()["budget"] == {
        "limit": "20",
        "spent": "5",
        "committed": "4",
        "unit": "USD",
        "per": "day",
        "windowStart": "2026-01-01T00:00:00+00:00",
        "windowEnd": "2026-01-02T00:00:00+00:00",
        "timezone": "UTC",
        # 5 spent in the 4 hours since midnight: the 15 left last 12 hours more
        "forecast": "at this rate b spends its daily budget by 16:00",
    }
    recorded = queues_view_from_status(
        read_status(render_status(repo, plan, {}, ledger=Ledger.of([spent])))
    )
    # no decision recorded: no clock, no forecast
    assert {r.name: r for r in recorded.rows}["b"].budget == _unforecast(rows["b"].budget)
    assert "5+4/20 USD/day" in render_queues_page(view)
    detail = build_queue_detail(repo, plan, {}, "b", applied=True)
    assert detail is not None
    page = render_queue_page(detail)
    assert "<dt>Burn forecast</dt><dd>at this rate b spends its daily budget by 16:00</dd>" in page


def test_a_recorded_window_forecasts_in_its_own_timezone_and_a_bad_one_not_at_all() -> None:
    record = {
        "limit": "10",
        "spent": "5",
        "committed": "0",
        "unit": "USD",
        "per": "week",
        "windowStart": "2025-12-28T15:00:00+00:00",
        "windowEnd": "2026-01-04T15:00:00+00:00",
    }
    # half the budget in 2 days 3 hours: all of it by Jan 1 21:00 UTC, Jan 2 06:00 in Tokyo
    now = datetime(2025, 12, 30, 18, 0, tzinfo=UTC)
    tokyo = QueueBudget.recorded({**record, "timezone": "Asia/Tokyo"})
    assert tokyo is not None
    # the view's fallback zone (UTC) is not the one its days are in
    assert tokyo.with_forecast("q", now, "UTC").forecast.endswith("by Friday the 2nd")
    for bad in ("Mars/Olympus", "../etc/passwd", ""):
        hand_edited = QueueBudget.recorded({**record, "timezone": bad, "limit": "x"})
        assert hand_edited is not None
        assert hand_edited.with_forecast("q", now, "UTC").forecast == ""
    mars = QueueBudget.recorded({**record, "timezone": "Mars/Olympus"})
    assert mars is not None and mars.with_forecast("q", now, "UTC").forecast == ""


RECORDED_BUDGET = {
    "limit": "100",
    "spent": "1",
    "committed": "0",
    "unit": "USD",
    "per": "month",
    "window_start": "2026-01-01T00:00:00+00:00",
    "window_end": "2026-02-01T00:00:00+00:00",
}


@pytest.mark.parametrize(
    "edit",
    [
        {"limit": "NaN"},
        {"limit": "sNaN"},
        {"limit": "Infinity"},
        {"spent": "NaN"},
        {"limit": "1e999999999"},
        {"spent": "-1e999999999"},
        {"window_start": "2026-01-01T00:00:00"},
        {"window_end": "2026-02-01T00:00:00"},
    ],
)
def test_a_hand_edited_budget_record_has_no_forecast(edit: dict[str, str]) -> None:
    """What no cycle writes (a number that is none, past the arithmetic, a local time) is a
    hand edit of the status branch: the view shows it without a forecast."""
    budget = QueueBudget(**{**RECORDED_BUDGET, **edit})
    assert budget.with_forecast("q", NOW + timedelta(days=4), "UTC") == budget


def test_a_recorded_budget_spent_far_past_its_limit_is_forecast_spent() -> None:
    budget = QueueBudget(**{**RECORDED_BUDGET, "spent": "1e29", "limit": "1e20"})
    forecast = budget.with_forecast("q", NOW + timedelta(days=4), "UTC").forecast
    assert forecast == "q has spent its monthly budget"


def _unforecast(budget: QueueBudget | None) -> QueueBudget | None:
    return None if budget is None else budget.model_copy(update={"forecast": ""})
