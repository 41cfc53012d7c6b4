"""The what-if replay measured against what happened: a history made by the real cycle
over the fake cluster (tests/support/histories.py), replayed under its own config, starts
each run within two minutes of when it started, and uses each queue's GPU quota as it was
used (docs/estimates.md, "The what-if replay's accuracy")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.histories import arrivals, make_history
from support.paths import TEMPLATE

from reconciler.adapters.repo import snapshot_checkout
from reconciler.core.compile import compile_repo
from reconciler.core.plan.history import as_recorded, figures_of, recorded_runs, replay_runs

SINCE = datetime(2026, 1, 5, tzinfo=UTC)
TEMPLATES = ["language/distill", "vision/train-resnet", "language/tokenize", "vision/train-vit"]


@pytest.mark.slow
def test_a_history_replayed_under_its_own_config_is_what_happened() -> None:
    repo = compile_repo(snapshot_checkout(TEMPLATE))
    until = SINCE + timedelta(hours=12)
    made = make_history(repo, arrivals(repo, TEMPLATES, SINCE, 12, 8, seed=3), until)
    runs = recorded_runs(made.ledger, made.arrivals, SINCE, until)
    assert len(runs) > 50
    replayed = replay_runs(made.repo, runs, SINCE, until, prior=made.ledger)
    waits = [(p.waited, p.run.waited) for p in replayed.played if not p.carried]
    assert any(recorded > 600 for _, recorded in waits)  # queues did build up
    for got, recorded in waits:
        # within a step of the history's cycles and one of the replay's grid (a minute each)
        assert got is not None and abs(got - recorded) <= 120
    before = figures_of(as_recorded(runs, SINCE, until, made.ledger), made.repo)
    after = figures_of(replayed, made.repo)
    for name, figures in after.items():
        a, b = before[name].utilisation, figures.utilisation
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert abs(a - b) <= 0.02, name
