"""``status OP --watch`` (and ``submit --watch``): a line each time the operation's record
changes, the record of an earlier generation not taken for this run's end, then the log's
tail; read from a status branch given in turn, without sleeping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.cli import status_cmd
from reconciler.core.reporting.status import OperationStatus, StatusView


def _view(phase: str | None, generation: int = 1, **kw: object) -> StatusView:
    if phase is None:
        return StatusView(operations={})
    record = OperationStatus.model_validate(
        {"operation": "vision/a", "phase": phase, "queue": "team-a", "generation": generation, **kw}
    )
    return StatusView(operations={"vision/a": record})


def _watch(
    monkeypatch: pytest.MonkeyPatch, views: list[StatusView | None], **kw: object
) -> list[str]:
    feed: Iterator[StatusView | None] = iter(views)

    def read_branch(
        repo: str, branch: str, cache_dir: Path | None, *, status_repo: str | None = None
    ) -> StatusView:
        assert status_repo is None  # no --status-repo: the config repo's branch
        view = next(feed)
        if view is None:
            raise status_cmd.StatusError("no status yet")
        return view

    tails: list[str] = []
    monkeypatch.setattr(status_cmd, "read_branch", read_branch)
    monkeypatch.setattr(
        status_cmd, "_log_tail", lambda repo, branch, op, cache, tail, echo: tails.append(op)
    )
    lines: list[str] = []
    phase = status_cmd.watch_operation(
        "repo",
        "vision/a",
        "reconciler/status",
        None,
        echo=lines.append,
        sleep=lambda _s: None,
        **kw,  # type: ignore[arg-type]
    )
    assert tails == ["vision/a"]
    return [line.split(" ", 1)[1] for line in lines] + [f"ended {phase}"]


def test_one_line_per_change_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    views = [
        None,
        _view(None),
        _view("Queued", reason="QuotaExceeded", position=2),
        _view("Queued", reason="QuotaExceeded", position=2),
        _view("Queued", reason="QuotaExceeded", position=1),
        _view("Running", cluster="local"),
        _view("Failed", reason="BackoffLimitExceeded", cluster="local"),
    ]
    assert _watch(monkeypatch, views) == [
        "vision/a: not on the status branch yet",
        "vision/a: Queued, reason QuotaExceeded (queue team-a, position 2, generation 1)",
        "vision/a: Queued, reason QuotaExceeded (queue team-a, position 1, generation 1)",
        "vision/a: Running (queue team-a, cluster local, generation 1)",
        "vision/a: Failed, reason BackoffLimitExceeded (queue team-a, cluster local, generation 1)",
        "ended Failed",
    ]


def test_an_earlier_generations_end_is_not_this_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    views = [
        _view("Succeeded", generation=1),
        _view("Running", generation=2),
        _view("Succeeded", generation=2),
    ]
    assert _watch(monkeypatch, views, generation=2) == [
        "vision/a: waiting for the reconciler",
        "vision/a: Running (queue team-a, generation 2)",
        "vision/a: Succeeded (queue team-a, generation 2)",
        "ended Succeeded",
    ]


def test_the_end_shows_the_runs_named_outputs_and_their_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    views = [
        _view("Running", cluster="local"),
        _view(
            "Succeeded",
            cluster="local",
            outputs={"accuracy": 0.93, "curve": [1, 2], "note": "a\nb"},
            outputsPath="s3://r/vision/a/vision-a-g1/",
        ),
    ]
    assert _watch(monkeypatch, views) == [
        "vision/a: Running (queue team-a, cluster local, generation 1)",
        "vision/a: Succeeded (queue team-a, cluster local, generation 1)",
        "vision/a: outputs accuracy=0.93 note=a b",
        "vision/a: outputs at s3://r/vision/a/vision-a-g1/",
        "ended Succeeded",
    ]
