"""The planner package: one concern a module, each saying what must live in it; one table of
checks that ``PendingReason``, the admission loop and docs/dispatch.md all follow."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

from support.paths import ROOT

import reconciler.core.plan as package
from reconciler.core.plan import REASON_TRAITS, PendingReason, planner
from reconciler.core.plan.checks import CHECKS


def test_every_module_says_what_must_live_in_it() -> None:
    names = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert {"model", "checks", "planner", "explain"} <= names
    for name in sorted(names):
        module = importlib.import_module(f"{package.__name__}.{name}")
        doc = module.__doc__ or ""
        assert "What must live here" in doc, f"{module.__name__} has no header saying so"


def test_the_interface_is_the_package() -> None:
    """Every public name of the model, and the two entry points, import from the package
    (callers and tests import them from ``reconciler.core.plan``, never a module)."""
    model = importlib.import_module(f"{package.__name__}.model")
    defined = {
        name
        for name, value in vars(model).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == model.__name__
    }
    assert {"Plan", "Pending", "QuotaBlock", "AdmitWhen", "PlanInputError"} <= defined
    expected = defined | {"BlockedBy", "MAX_LISTED", "BACKEND_APIS", "plan_dispatch", "plan_repo"}
    expected |= {"REASON_TRAITS"}  # the reasons' traits, read by the estimate and the views
    # steps 1-4 alone, for the what-if replay of a history
    expected |= {"admit_dispatch", "Admission", "QueueAdmission"}
    # the rule for the flavor an active run holds, shared with the estimate
    expected |= {"held_flavor"}
    assert set(package.__all__) == expected
    for name in package.__all__:
        assert hasattr(package, name), name


def test_checks_are_numbered_in_order_and_give_every_reason_once() -> None:
    assert [c.number for c in CHECKS] == list(range(len(CHECKS)))
    # PendingReason is declared in check order.
    assert [r for c in CHECKS for r in c.reasons] == list(PendingReason)


def test_one_table_gives_every_reason_its_traits() -> None:
    """Each reason has one row (static, holds the head, never runs); a check holds a
    StrictFIFO queue for all its reasons or for none; what never runs is never dated."""
    assert set(REASON_TRAITS) == set(PendingReason)
    for check in CHECKS:
        assert len({REASON_TRAITS[r].holds_head for r in check.reasons}) == 1, check
    for reason, traits in REASON_TRAITS.items():
        assert reason.never_runs is traits.never_runs
        assert traits.static or not traits.never_runs, reason


def test_the_waits_the_estimate_does_not_date_are_the_documented_ones() -> None:
    text = (ROOT / "docs" / "estimates.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `Blocked` |"))
    named = set(re.findall(r"`([A-Za-z]+)`", row.split("|")[3])) & set(PendingReason)
    assert named == {str(r) for r, traits in REASON_TRAITS.items() if traits.static}


def _docs_checks_table() -> list[tuple[int, str, str]]:
    text = (ROOT / "docs" / "dispatch.md").read_text(encoding="utf-8")
    section = text.split("\n## Checks\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.fullmatch(r"\| (\d+) \| (.+?) \| (.+?) \|", line)
        if m:
            rows.append((int(m[1]), m[2], m[3]))
    return rows


def test_checks_table_is_the_docs_checks_table() -> None:
    assert _docs_checks_table() == [(c.number, c.holds, c.fails) for c in CHECKS]
    for check in CHECKS:
        named = tuple(re.findall(r"`([A-Za-z]+)`", check.fails))
        assert named == tuple(r.value for r in check.reasons), check


def test_the_checks_that_hold_a_strict_fifo_queue_are_the_documented_ones() -> None:
    numbers = [str(c.number) for c in CHECKS if c.holds_head]
    phrase = f"held back by {', '.join(numbers[:-1])} or {numbers[-1]}"
    text = (ROOT / "docs" / "dispatch.md").read_text(encoding="utf-8")
    assert phrase in text
    assert phrase in CHECKS[5].holds  # check 5 is the one that waits behind them


def test_the_admission_loop_applies_the_checks_in_table_order() -> None:
    numbers = [int(n) for n in re.findall(r"^\s+# (\d+): ", inspect.getsource(planner.admit), re.M)]
    assert numbers == [c.number for c in CHECKS]


def test_the_steps_are_the_documented_ones_in_order() -> None:
    text = (ROOT / "docs" / "dispatch.md").read_text(encoding="utf-8")
    section = text.split("\n## Steps\n", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^(\d)\. `(\w+)`", section, re.M)
    assert [int(n) for n, _ in steps] == list(range(1, 7))
    # steps 1-4 are one function (their calls are shared with the what-if state), 5-6 follow
    source = inspect.getsource(planner._admit_steps) + inspect.getsource(planner._plan)
    calls = [source.index(f"= {name}(") for _, name in steps]
    assert calls == sorted(calls), "the planner calls its steps out of the documented order"
    for n, name in steps:
        assert f"{n}. ``{name}``" in (planner.__doc__ or ""), name
