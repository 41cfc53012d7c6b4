"""The what-if replay (core/plan/history.py) and its rendering (core/views/replay_render.py):
a recorded history played again over the planner's admission, compared per queue, and the
budget burn forecast. Goldens: ``UPDATE_GOLDEN=1 python -m pytest
tests/core/test_history_replay.py``."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from support.builders import World
from support.paths import DATA

from reconciler.core.plan.history import (
    BurnForecast,
    ForecastMove,
    budget_window,
    compare_replays,
    forecast_burn,
    forecast_move_text,
    forecast_text,
    ordinal,
    recorded_runs,
    replay_runs,
)
from reconciler.core.plan.ledger import BudgetWindow, LedgerEntry, Window, window_at
from reconciler.core.types import BudgetPeriod, BudgetSpec, CompiledRepo
from reconciler.core.views.replay_render import replay_to_dict, replay_to_markdown

T0 = datetime(2026, 12, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=12)


def world() -> CompiledRepo:
    """Two queues on one cluster: ``train`` holds 2 GPUs, ``batch`` 1, with a daily budget
    of 30 USD at 2.5 USD a GPU-hour; eight operations of 1 GPU each."""
    w = World().with_org(prices={"nvidia.com/gpu": Decimal("2.5")}, currency="USD")
    w.queue("train", priority=10, quota={"nvidia.com/gpu": 2})
    w.queue(
        "batch",
        quota={"nvidia.com/gpu": 1},
        budget=BudgetSpec(Decimal(30), BudgetPeriod.DAY),
        default_timeout=7200,
    )
    for i in range(6):
        w.op(f"p/t{i}", queue="train", gpu=1).submitted(T0 + timedelta(minutes=10 * i))
    for i in range(2):
        w.op(f"p/b{i}", queue="batch", gpu=1).timeout(7200).submitted(T0 + timedelta(minutes=5))
    return w.repo("base")


def ran(op: str, queue: str, start: int, minutes: int, phase: str = "Succeeded") -> LedgerEntry:
    at = T0 + timedelta(minutes=start)
    return LedgerEntry(
        operation=op,
        generation=1,
        workload=f"{op.replace('/', '-')}-1",
        queue=queue,
        cluster="local",
        phase=phase,
        requests={"nvidia.com/gpu": Decimal(1)},
        start=at,
        end=at + timedelta(minutes=minutes),
        cost=Decimal("2.5") * minutes / 60,
    )


# What the cycle did under ``world()``: train runs two at a time, each 60 minutes.
LEDGER = [
    ran("p/t0", "train", 0, 60),
    ran("p/t1", "train", 10, 60),
    ran("p/t2", "train", 60, 60),
    ran("p/t3", "train", 70, 60, "Failed"),
    ran("p/t4", "train", 120, 60),
    ran("p/t5", "train", 130, 60),
    ran("p/b0", "batch", 5, 90),
    ran("p/b1", "batch", 95, 90),
]


def submitted(repo: CompiledRepo) -> dict[str, datetime]:
    return {op.id: op.submitted_at for op in repo.operations if op.submitted_at is not None}


def test_the_history_under_its_own_config_starts_each_run_when_it_started() -> None:
    repo = world()
    runs = recorded_runs(LEDGER, submitted(repo), T0, NOW)
    replayed = replay_runs(repo, runs, T0, NOW, prior=LEDGER)
    for p in replayed.played:
        assert p.start == p.run.start, p.run.operation
    assert [p.waited for p in replayed.played if p.run.operation == "p/t2"] == [40 * 60.0]


def test_a_change_moves_starts_and_the_replay_is_the_same_each_time() -> None:
    base = world()
    head = replace(base, version="head", queues={**base.queues})
    head.queues["train"] = replace(base.queues["train"], quota={"nvidia.com/gpu": Decimal(1)})
    runs = recorded_runs(LEDGER, submitted(base), T0, NOW)
    sides = [(r, replay_runs(r, runs, T0, NOW, prior=LEDGER)) for r in (base, head)]
    what = compare_replays(sides[0], sides[1], LEDGER, NOW)
    train = {q.queue: q for q in what.queues}["train"]
    assert train.later == 5 and train.earlier == 0
    assert train.head.wait_p90 is not None and train.base.wait_p90 is not None
    assert train.head.wait_p90 > train.base.wait_p90
    assert [m.operation for m in train.moves] == ["p/t5", "p/t4", "p/t3", "p/t2", "p/t1"]
    again = compare_replays(
        *[(r, replay_runs(r, runs, T0, NOW, prior=LEDGER)) for r in (base, head)], LEDGER, NOW
    )
    assert replay_to_markdown(again, "12h") == replay_to_markdown(what, "12h")
    _golden("replay_section.md", replay_to_markdown(what, "12h"))
    _golden("replay_section.json", json.dumps(replay_to_dict(what, "12h"), indent=2) + "\n")


def test_a_later_generation_waits_for_the_run_before_it() -> None:
    repo = world()
    first = ran("p/t0", "train", 0, 60)
    second = ran("p/t0", "train", 30, 60).model_copy(update={"generation": 2, "workload": "w2"})
    runs = recorded_runs([first, second], submitted(repo), T0, NOW)
    played = replay_runs(repo, runs, T0, NOW).played
    assert [(p.run.generation, p.start) for p in played] == [
        (1, T0),
        (2, T0 + timedelta(minutes=60)),
    ]


def test_a_budget_that_stops_a_queue_wakes_it_when_its_next_window_starts() -> None:
    repo = world()
    day2 = T0 + timedelta(days=1)
    # batch spent its 30 USD on the first day: b1 waits for the next day's window
    spent = ran("p/b0", "batch", 0, 60 * 12)
    late = ran("p/b1", "batch", 60 * 23, 60)
    since = T0 + timedelta(hours=12)
    runs = recorded_runs([late], {"p/b1": T0 + timedelta(hours=23)}, since, day2)
    played = replay_runs(repo, runs, since, day2 + timedelta(hours=1), prior=[spent]).played
    assert played[0].start == day2


def test_the_forecast_names_the_day_a_budget_is_spent() -> None:
    budget = BudgetSpec(Decimal(1000), BudgetPeriod.MONTH)
    now = datetime(2026, 12, 10, tzinfo=UTC)
    window = window_at(now, BudgetPeriod.MONTH)
    f = forecast_burn(BudgetWindow("team-b", budget, window, Decimal(400)), now)
    assert f.at == datetime(2026, 12, 23, 12, tzinfo=UTC)  # 40 a day: 600 more in 15 days
    assert forecast_text(f) == "at this rate team-b spends its monthly budget by the 23rd"
    faster = forecast_burn(
        BudgetWindow("team-b", budget, window, Decimal(400)), now, Decimal(400) / 9 / 24 * 2
    )
    move = ForecastMove("team-b", f, faster)
    assert forecast_move_text(move) == (
        "at this rate team-b spends its monthly budget by the 23rd; "
        "this change moves that to the 16th"
    )
    slow = forecast_burn(BudgetWindow("q", budget, window, Decimal(10)), now)
    assert forecast_text(slow) == "at this rate q does not spend its monthly budget this month"
    spent = forecast_burn(BudgetWindow("q", budget, window, Decimal(1000)), now)
    assert forecast_text(spent) == "q has spent its monthly budget"


def test_the_forecast_counts_only_runs_ended_by_its_clock() -> None:
    # plan --now in the past over a ledger that has grown since: a run that ends later
    # had spent nothing yet, and later runs change nothing (the forecast stays reproducible)
    repo = world()
    before = [ran("p/b0", "batch", 60, 60)]  # 2.5 spent by 02:00
    later = [ran("p/b1", "batch", 90, 120), ran("p/b2", "batch", 600, 60)]
    at = T0 + timedelta(hours=2)
    window = budget_window(repo, "batch", before + later, at)
    assert window == budget_window(repo, "batch", before, at)
    assert window.spent == Decimal("2.5")


def test_a_large_budget_at_a_small_rate_has_no_date_this_window() -> None:
    # 0.01 spent in four days of a 100,000 month: a billion hours on, past any datetime
    budget = BudgetSpec(Decimal(100_000), BudgetPeriod.MONTH)
    now = datetime(2026, 1, 5, tzinfo=UTC)
    window = window_at(now, BudgetPeriod.MONTH)
    f = forecast_burn(BudgetWindow("q", budget, window, Decimal("0.01")), now)
    assert f.at is None and f.rate == Decimal("0.000104")
    assert forecast_text(f) == "at this rate q does not spend its monthly budget this month"
    most = BudgetSpec(Decimal(10**15), BudgetPeriod.DAY)
    day = window_at(now, BudgetPeriod.DAY)
    assert forecast_burn(BudgetWindow("q", most, day, Decimal(1)), now, Decimal("1e-9")).at is None


def test_a_spend_past_ten_to_the_22_is_still_quantized() -> None:
    # the default context's 28 digits hold 22 before the point at 6 places; sums of
    # ledger costs (each at most 10**18) may hold more
    spent = Decimal(10**18) * 20_000
    f = forecast_burn(
        BudgetWindow(
            "q", BudgetSpec(Decimal(1), BudgetPeriod.DAY), window_at(T0, BudgetPeriod.DAY), spent
        ),
        T0 + timedelta(hours=1),
    )
    assert f.exhausted and f.spent == spent


@pytest.mark.parametrize(
    ("day", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (11, "11th"), (22, "22nd"), (23, "23rd")]
)
def test_ordinal(day: int, text: str) -> None:
    assert ordinal(day) == text


def test_a_week_budget_names_the_weekday() -> None:
    budget = BudgetSpec(Decimal(70), BudgetPeriod.WEEK)
    now = datetime(2026, 12, 8, tzinfo=UTC)  # a Tuesday
    window = Window(datetime(2026, 12, 7, tzinfo=UTC), datetime(2026, 12, 14, tzinfo=UTC))
    f: BurnForecast = forecast_burn(BudgetWindow("q", budget, window, Decimal(15)), now)
    assert forecast_text(f) == "at this rate q spends its weekly budget by Friday the 11th"


def _golden(name: str, text: str) -> None:
    path = DATA / "golden" / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden {name}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_a_dependency_not_arrived_yet_holds_its_dependent() -> None:
    w = World()
    w.queue("train", quota={"nvidia.com/gpu": 4})
    w.op("p/prep", queue="train", gpu=1).submitted(T0 + timedelta(minutes=30))
    w.op("p/fit", queue="train", gpu=1).after("p/prep").submitted(T0)
    repo = w.repo()
    ledger = [ran("p/prep", "train", 30, 60), ran("p/fit", "train", 90, 60)]
    runs = recorded_runs(ledger, submitted(repo), T0, NOW)
    played = {p.run.operation: p.start for p in replay_runs(repo, runs, T0, NOW).played}
    assert played == {"p/prep": T0 + timedelta(minutes=30), "p/fit": T0 + timedelta(minutes=90)}


def test_runs_running_when_the_window_starts_hold_their_quota_as_recorded() -> None:
    repo = world()
    since = T0 + timedelta(minutes=30)
    runs = recorded_runs(LEDGER, submitted(repo), since, NOW)
    played = {p.run.operation: p for p in replay_runs(repo, runs, since, NOW).played}
    assert played["p/t0"].carried and played["p/t0"].start == T0
    assert played["p/t1"].carried and played["p/t1"].start == T0 + timedelta(minutes=10)
    assert played["p/t2"].start == T0 + timedelta(minutes=60)  # when t0 ends, as it did


def test_a_run_the_reconciler_stopped_is_not_replayed_but_counts_as_spent() -> None:
    repo = world()
    stopped = ran("p/b0", "batch", 0, 60 * 12, "Stopped")  # 30 USD: the day's budget
    late = ran("p/b1", "batch", 60 * 13, 60)
    day2 = T0 + timedelta(days=1)
    ledger = [stopped, late]
    runs = recorded_runs(ledger, {"p/b1": T0 + timedelta(hours=13)}, T0, day2)
    assert [r.operation for r in runs] == ["p/b1"]
    played = replay_runs(repo, runs, T0, day2, prior=ledger).played
    assert played[0].start == day2
