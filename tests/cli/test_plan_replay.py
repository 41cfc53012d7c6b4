"""``plan --base --replay SPAN`` through real Git: a history the real cycle made over the fake
cluster is written to the template remote's status branch, a change is committed on a
branch, and the recorded runs are replayed under both revisions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.git_commands import git
from support.histories import Arrival, Made, arrivals, commit_arrivals, make_history
from support.paths import TEMPLATE

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.adapters.repo import snapshot_checkout
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.reporting.status import status_changes, summarize_cycle
from reconciler.core.types import CompiledRepo

SINCE = datetime(2026, 1, 5, tzinfo=UTC)
HOURS = 6
NOW = "2026-01-05T06:00:00Z"
TEMPLATES = ["language/distill", "vision/train-resnet", "language/tokenize", "vision/train-vit"]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_status(remote: Path, files: dict[str, bytes], cache: Path) -> None:
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=cache))
    before = status.read()
    status.write(status_changes(before, files), summarize_cycle(before, files))


@pytest.fixture(scope="module")
def history() -> tuple[CompiledRepo, list[Arrival], Made]:
    """6 hours of runs the real cycle made over the template, once for the module."""
    repo = compile_repo(snapshot_checkout(TEMPLATE))
    stream = arrivals(repo, TEMPLATES, SINCE, HOURS, 6)
    made = make_history(repo, stream, SINCE + timedelta(hours=HOURS))
    assert len(made.ledger) > 10
    return repo, stream, made


@pytest.fixture
def changed(
    history: tuple[CompiledRepo, list[Arrival], Made], template_remote: Path, tmp_path: Path
) -> Path:
    """A clone of the template with its status branch holding the history's runs, each
    operation committed at its arrival, and a branch ``change`` that gives team-a the
    lowest priority and team-b a tenth of its budget."""
    repo, stream, made = history
    write_status(template_remote, made.status, tmp_path / "c")
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(template_remote), str(work))
    commit_arrivals(work, repo, stream)
    git(work, "push", "-q", "origin", "HEAD:main")
    git(work, "checkout", "-q", "-b", "change")
    for name, old, new in (
        ("team-a", "priority: 100", "priority: 1"),
        ("team-b", "limit: 500", "limit: 50"),
    ):
        path = work / "queues" / f"{name}.yaml"
        path.write_text(path.read_text().replace(old, new))
    git(work, "commit", "-qam", "change")
    return work


def plan(work: Path, *more: str) -> tuple[int, str, str]:
    return run("plan", "--repo", str(work), "--base", "main", "--head", "change", *more)


def test_replay_reports_each_queue_base_to_head_the_same_bytes_each_time(changed: Path) -> None:
    code, out, err = plan(changed, "--replay", "7d", "--now", NOW, "-o", "json")
    assert code == 3, err
    replay = json.loads(out)["replay"]
    assert replay["window"] == "7d" and replay["runs"] > 10
    queues = {q["queue"]: q for q in replay["queues"]}
    assert {"team-a", "team-b", "batch"} <= set(queues)
    for q in queues.values():
        for side in ("base", "head"):
            assert set(q[side]) >= {"waitP50Seconds", "waitP90Seconds", "gpuHours", "budgetBurn"}
        assert len(q["moves"]) <= 5
    assert queues["team-a"]["base"]["gpuQuotaUsed"] is not None
    assert queues["team-b"]["base"]["budgetBurn"] is not None
    forecast = {f["queue"]: f for f in replay["forecasts"]}["team-b"]
    assert forecast["base"]["limit"] == "500" and forecast["head"]["limit"] == "50"
    assert forecast["text"].startswith("at this rate team-b ")
    again = plan(changed, "--replay", "7d", "--now", NOW, "-o", "json")
    assert again[1] == out  # deterministic: the same inputs, the same bytes

    code, md, err = plan(changed, "--replay", "7d", "--now", NOW, "-o", "markdown")
    assert code == 3, err
    section = md[md.index("### What-if replay: the last 7d") :]
    assert "| queue | runs | wait p50 | wait p90 | GPU-hours |" in section
    assert "Budget burn forecast:" in section and "- at this rate team-b " in section


def test_a_window_with_no_history_says_so_and_shows_no_numbers(changed: Path) -> None:
    code, out, err = plan(changed, "--replay", "1d", "--now", "2026-03-01T00:00:00Z", "-o", "json")
    assert code == 3, err
    assert json.loads(out)["replay"]["runs"] == 0
    assert json.loads(out)["replay"]["queues"] == []
    code, md, _ = plan(changed, "--replay", "1d", "--now", "2026-03-01T00:00:00Z", "-o", "markdown")
    section = md[md.index("### What-if replay") :]
    assert "there is no history to replay" in section
    assert "|" not in section


@pytest.mark.parametrize(
    ("span", "message"),
    [
        ("7x", "error: --replay: '7x' is not a span such as 7d or 36h\n"),
        ("0d", "error: --replay: '0d' is not a span such as 7d or 36h\n"),
        ("", "error: --replay: '' is not a span such as 7d or 36h\n"),
        ("400d", "error: --replay: '400d' is longer than 92d\n"),
        ("\u0667d", "error: --replay: '\u0667d' is not a span such as 7d or 36h\n"),
        ("\uff11d", "error: --replay: '\uff11d' is not a span such as 7d or 36h\n"),
        ("1e3d", "error: --replay: '1e3d' is not a span such as 7d or 36h\n"),
    ],
)
def test_a_bad_replay_span_is_one_line(changed: Path, span: str, message: str) -> None:
    code, out, err = plan(changed, "--replay", span)
    assert (code, out, err) == (1, "", message)


def test_replay_needs_base(changed: Path) -> None:
    code, _, err = run("plan", "--repo", str(changed), "--replay", "7d")
    assert code == 2 and "--replay needs --base" in err


def test_a_hand_edited_ledger_is_refused_in_one_line(
    changed: Path, template_remote: Path, tmp_path: Path
) -> None:
    status = StatusBranch(ConfigRepo(str(template_remote), cache_dir=tmp_path / "c3"))
    files = status.read()
    path = sorted(p for p in files if p.startswith("status/ledger/"))[0]
    broken = files[path].replace(b"cost: ", b"cost: lots", 1)
    status.write({path: broken}, "hand edit")
    git(changed, "fetch", "-q", "origin")
    code, out, err = plan(changed, "--replay", "7d", "--now", NOW)
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(
        f"error: --replay: the status branch's ledger cannot be replayed: {path}:1:1: entry "
    )


ONE_RUN = b"""entries:
- operation: language/distill
  generation: 1
  workload: distill-g1
  queue: team-b
  cluster: local
  phase: Succeeded
  requests: {nvidia.com/gpu: '1'}
  start: '2026-01-05T01:00:00Z'
  end: '2026-01-05T02:00:00Z'
  cost: '0.01'
"""


def test_the_largest_budget_at_a_small_rate_is_forecast_without_a_date(
    template_remote: Path, tmp_path: Path
) -> None:
    """team-b's limit at the schema's most (10**15) and 0.01 spent: the date it is spent at
    that rate is millions of years on, past any date; said as no date this window."""
    write_status(template_remote, {"status/ledger/2026-01.yaml": ONE_RUN}, tmp_path / "c")
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(template_remote), str(work))
    git(work, "checkout", "-q", "-b", "change")
    path = work / "queues" / "team-b.yaml"
    path.write_text(path.read_text().replace("limit: 500", "limit: 1000000000000000"))
    git(work, "commit", "-qam", "change")
    code, out, err = plan(work, "--replay", "7d", "--now", NOW, "-o", "json")
    assert code == 3 and "Traceback" not in err, err
    forecast = {f["queue"]: f for f in json.loads(out)["replay"]["forecasts"]}["team-b"]
    assert forecast["head"]["spentBy"] is None
    assert forecast["text"] == (
        "at this rate team-b does not spend its daily budget this day; this change keeps that"
    )


def test_replay_without_a_status_branch_says_so(template_remote: Path, tmp_path: Path) -> None:
    """A checkout that did not fetch the status branch: the replay has no history, and
    stderr says why (a window with no run alone would read as a quiet week)."""
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(template_remote), str(work))
    git(work, "checkout", "-q", "-b", "change")
    code, out, err = run("plan", "--repo", str(work), "--base", "main", "--replay", "7d")
    assert code == 0 and "there is no history to replay" in out
    assert err == (
        "warning: --replay: no reconciler/status branch to read runs from (a CI checkout "
        "fetches it: git fetch --depth=1 origin "
        "reconciler/status:refs/remotes/origin/reconciler/status)\n"
    )


def test_a_run_arrived_within_a_millisecond_of_now_is_replayed(
    template_remote: Path, tmp_path: Path
) -> None:
    """distill's second run started (so arrived) 0.1 ms before ``--now``: the span the
    history covers rounds to no time, over which no rate or share of quota is taken."""
    rerun = ONE_RUN.replace(b"generation: 1", b"generation: 2").replace(b"-g1", b"-g2")
    first = ONE_RUN.replace(b"01:00:00Z", b"00:00:00Z").replace(b"02:00:00Z", b"00:30:00Z")
    ledger = first + rerun.removeprefix(b"entries:\n")
    write_status(template_remote, {"status/ledger/2026-01.yaml": ledger}, tmp_path / "c")
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(template_remote), str(work))
    git(work, "checkout", "-q", "-b", "change")
    code, out, err = run(
        "plan", "--repo", str(work), "--base", "main", "--replay", "1m",
        "--now", "2026-01-05T01:00:00.0001Z", "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    replay = json.loads(out)["replay"]
    assert replay["runs"] == 1
    assert [q["base"]["gpuQuotaUsed"] for q in replay["queues"]] == [None]
    assert [f["base"]["ratePerHour"] for f in replay["forecasts"]] == ["0.0000"]
