"""One bad ledger entry never lowers what a budget counts as spent: it is skipped alone,
counted at its worst case when it can be read at all, and a budget whose ledger cannot be
read waits (``LedgerUnreadable``) instead of dispatching on a spend that may be too low."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from support.builders import NOW, World

from reconciler.core.decision.cycle import ClusterListing, Decision, decide, memory_from_status
from reconciler.core.plan import LedgerBlock, PendingReason
from reconciler.core.plan.ledger import (
    MAX_USAGE_WINDOWS,
    LedgerEntry,
    entries_from_document,
    ledger_files,
    usage_shown,
)
from reconciler.core.reporting.status import dump_yaml, read_status, render_status
from reconciler.core.types import BudgetPeriod, BudgetSpec

GPU = "nvidia.com/gpu"
PATH = "status/ledger/2026-01.yaml"


def good(i: int, queue: str = "q", gpu: str = "1") -> str:
    return (
        f"- operation: p/o{i}\n  generation: 1\n  workload: o{i}-g1\n  queue: {queue}\n"
        f"  cluster: local\n  phase: Succeeded\n  requests: {{{GPU}: '{gpu}'}}\n"
        f"  start: '2026-01-01T0{i}:00:00Z'\n  end: '2026-01-01T0{i}:30:00Z'\n  cost: '0'\n"
    )


def world(limit: str = "3") -> World:
    w = World()
    for name in ("q", "r"):
        w.queue(name, budget=BudgetSpec(Decimal(limit), BudgetPeriod.DAY, f"{GPU}-hours"))
    w.op("p/next", queue="q", gpu=1).timeout(3600)
    w.op("p/other", queue="r", gpu=1).timeout(3600)
    return w


def decided(files: dict[str, bytes], w: World | None = None) -> Decision:
    memory = memory_from_status(read_status(files))
    return decide((w or world()).repo(), {"local": ClusterListing(())}, memory, NOW)


def reasons(decision: Decision) -> dict[str, PendingReason]:
    return {p.operation: p.reason for p in decision.plan.pending}


def test_a_bad_entry_is_counted_at_its_worst_case_and_the_others_still_count() -> None:
    # four good half-hour runs (2 GPU-hours) and one with a negative request: before, the
    # whole file was dropped and the budget counted nothing spent
    text = "entries:\n" + good(1) + good(2) + good(3, gpu="-2") + good(4) + good(5)
    decision = decided({PATH: text.encode()})
    assert reasons(decision) == {"p/next": PendingReason.BUDGET_EXCEEDED}
    q = next(s for s in decision.plan.queues if s.name == "q")
    assert q.budget is not None and q.budget.spent == 3  # 4 x 0.5 + 2 x 0.5 (|-2|)


def test_a_negative_cost_is_counted_as_positive() -> None:
    entry = good(1).replace("cost: '0'", "cost: '-100'")
    read = entries_from_document({"entries": [_yaml(entry)]})
    assert read.entries == ()
    ((worst, message, _),) = read.worst
    assert worst.cost == 100
    assert "cost -100 is not a finite amount of at least 0" in message


def _yaml(text: str) -> dict:  # type: ignore[type-arg]
    import yaml

    return yaml.safe_load(text)[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("entry", "waits"),
    [
        (good(3).replace("start: '2026-01-01T03:00:00Z'", "start: never"), {"p/next"}),
        (good(3).replace("  queue: q\n", ""), {"p/next", "p/other"}),  # whose? every budget
        ("- just text\n", {"p/next", "p/other"}),
    ],
)
def test_a_budget_whose_ledger_cannot_be_read_waits_with_a_reason_of_its_own(
    entry: str, waits: set[str]
) -> None:
    text = "entries:\n" + good(1) + entry
    decision = decided({PATH: text.encode()})
    got = {op for op, r in reasons(decision).items() if r is PendingReason.LEDGER_UNREADABLE}
    assert got == waits
    assert {d.operation for d in decision.plan.dispatch} == {"p/next", "p/other"} - waits
    pending = next(p for p in decision.plan.pending if p.operation in waits)
    assert isinstance(pending.blocked_by, LedgerBlock)
    assert pending.message.startswith(pending.blocked_by.queue + "'s budget cannot be checked")
    assert f"{PATH}:1:1: entry 2:" in pending.message
    assert pending.blocked_by.to_json()["ledgerProblem"].startswith(f"{PATH}:1:1: entry 2:")


def test_a_ledger_file_that_does_not_parse_holds_every_budget_and_is_never_overwritten() -> None:
    files = {PATH: b"entries: [\n", "status/ledger/2025-12.yaml": ("entries:\n" + good(1)).encode()}
    decision = decided(files)
    assert set(reasons(decision).values()) == {PendingReason.LEDGER_UNREADABLE}
    # the writer renders the months it knows; the unreadable file is left as it is
    ledger = decision.memory.ledger.with_entries([_entry("2026-01-01T09:00:00Z")])
    assert PATH not in ledger_files(ledger, dump_yaml)


def test_unreadable_entries_are_written_back_as_they_were() -> None:
    bad = "- {operation: p/x, queue: q, start: never}\n"
    text = ("entries:\n" + good(1) + bad).encode()
    memory = memory_from_status(read_status({PATH: text}))
    w = world()
    plan = decide(w.repo(), {"local": ClusterListing(())}, memory, NOW)
    files = render_status(w.repo(), plan.plan, plan.states, ledger=plan.memory.ledger)
    again = read_status({PATH: files[PATH]})
    assert [e.operation for e in again.ledger] == ["p/o1"]
    assert again.ledger_problems.unread.keys() == {"q"}


def _entry(end: str) -> LedgerEntry:
    return LedgerEntry.from_dict(
        {
            "operation": "p/z",
            "generation": 1,
            "workload": "z-g1",
            "queue": "q",
            "start": "2026-01-01T08:00:00Z",
            "end": end,
            "cost": "1",
        }
    )


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2026-01-01T00:00:00Z", "9999-12-31T23:00:00Z"),
        ("0001-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
    ],
)
def test_dates_out_of_range_are_refused_at_read_time(start: str, end: str) -> None:
    entry = good(1).replace("'2026-01-01T01:00:00Z'", f"'{start}'")
    entry = entry.replace("'2026-01-01T01:30:00Z'", f"'{end}'")
    view = read_status({PATH: ("entries:\n" + entry).encode()})
    assert view.ledger == ()
    (problem,) = view.problems
    assert problem.startswith(f"{PATH}:1:1: entry 1: ")
    assert "out of range" in problem


def test_usage_is_bounded_by_the_windows_it_shows() -> None:
    # the longest span an entry may hold, split per day: never walked whole
    long = LedgerEntry(
        operation="p/a",
        generation=1,
        workload="a-g1",
        queue="q",
        cluster="local",
        phase="Succeeded",
        requests={GPU: Decimal(1)},
        start=datetime(1970, 1, 1, tzinfo=UTC),
        end=datetime(9998, 12, 31, 23, tzinfo=UTC),
        cost=Decimal(1),
    )
    shown = usage_shown([long], BudgetPeriod.DAY)
    assert len(shown.rows) == MAX_USAGE_WINDOWS and shown.earlier
    assert shown.rows[-1].window.start == datetime(9998, 12, 31, tzinfo=UTC)
    assert shown.rows[-1].hours[GPU] == 23
    assert shown.rows[0].hours[GPU] == 24
    for per in BudgetPeriod:  # every period, in a zone west and east of UTC
        for zone in ("America/Los_Angeles", "Pacific/Kiritimati"):
            assert usage_shown([long], per, zone).rows


def test_the_live_views_say_why_too() -> None:
    """``status --live`` and ``queues --live`` decide from the status branch's ledger as
    well: a ledger file that could not be read at all (never written back) is still named."""
    from reconciler.cli.queues_cmd import live_queues_view
    from reconciler.cli.status_cmd import live_status_view

    memory = memory_from_status(read_status({PATH: b"entries: [\n"}))
    w = world()
    decision = decide(w.repo(), {"local": ClusterListing(())}, memory, NOW)
    view = live_status_view(w.repo(), decision)
    assert [p for p in view.problems if p.startswith(f"{PATH}:")]
    assert memory.ledger.problems.warnings()[0].startswith(f"warning: ledger: {PATH}:")
    assert live_queues_view(w.repo(), decision) is not None


def test_a_budget_waiting_on_its_ledger_is_not_estimated() -> None:
    from reconciler.core.plan.estimate import EtaState, estimate_decision

    text = "entries:\n" + good(1) + good(3).replace("start: '2026-01-01T03:00:00Z'", "start: x")
    w = world()
    decision = decided({PATH: text.encode()}, w)
    est = estimate_decision(w.repo(), decision).of("p/next")
    assert est is not None and est.p50.state is EtaState.BLOCKED
    assert est.why.startswith("LedgerUnreadable")


def test_a_run_entered_with_no_queue_reads_back_and_holds_no_budget() -> None:
    # the cycle enters a run whose queue nobody knows (no label, its file gone) with
    # queue '': it counts against no budget, and reading it back holds none either
    entry = _entry("2026-01-01T09:00:00Z").model_copy(update={"queue": ""})
    files = {PATH: dump_yaml({"entries": [entry.to_dict()]})}
    view = read_status(files)
    assert (view.problems, view.ledger_problems.unread) == ((), {})
    assert not reasons(decided(files))
