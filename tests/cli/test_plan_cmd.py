"""The plan command's logic: observed-file parsing, rendering, exit codes. The loaders are
injected, so this runs without the compiler or Git."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.builders import NOW, World
from support.paths import TEMPLATE
from support.worlds import seed_world

from reconciler.cli import plan_cmd
from reconciler.cli.main import cli
from reconciler.cli.plan_cmd import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    LoadError,
    Planned,
    Planner,
    observed_planner,
    parse_now,
    read_observed,
    run_plan,
    run_plan_diff,
)
from reconciler.core.observation.observed import ObservedFileError, parse_observed
from reconciler.core.plan import plan_repo
from reconciler.core.plan.estimate import RunRecord, estimate_starts
from reconciler.core.types import CompiledRepo, ConfigError, Location, ObservedOperation, Phase


def loader(repo: CompiledRepo):  # type: ignore[no-untyped-def]
    return lambda: repo


# --- --observed -------------------------------------------------------------------------


def test_parse_observed_yaml_and_json() -> None:
    text = """
- {operation: vision/train-1, phase: Running}
- operation: vision/train-2
  phase: dispatched
  queue: team-a
  cluster: local
  requests: {nvidia.com/gpu: 2, memory: 16Gi}
"""
    first, second = parse_observed(text, "obs.yaml")
    assert (first.operation, first.phase, first.requests) == ("vision/train-1", Phase.RUNNING, None)
    assert second.phase is Phase.DISPATCHED
    assert (second.queue, second.cluster) == ("team-a", "local")
    assert second.requests == {"nvidia.com/gpu": Decimal(2), "memory": Decimal(16 * 2**30)}

    as_json = json.dumps([{"operation": "a/b", "phase": "Succeeded"}])
    assert parse_observed(as_json, "obs.json")[0].phase is Phase.SUCCEEDED
    assert parse_observed("", "empty.yaml") == ()


def test_parse_observed_reports_every_problem_with_its_location() -> None:
    text = """- {operation: vision/train-1, phase: Running}
- operation: vision/train-2
  phase: Runing
- operation: bad id
  phase: Queued
  extra: 1
- {operation: vision/train-1, phase: Failed, requests: {nvidia.com/gpu: "2x"}}
- phase: Running
"""
    with pytest.raises(ObservedFileError) as err:
        parse_observed(text, "obs.yaml")
    lines = [str(e) for e in err.value.errors]
    assert lines == [
        "obs.yaml:3:10: unknown phase 'Runing' (one of: Queued, Dispatched, Running, "
        "Succeeded, Failed, Stopped)",
        "obs.yaml:4:14: operation must be \"project/name\", got 'bad id'",
        "obs.yaml:6:3: unknown key 'extra' (expected one of: operation, phase, queue, "
        "cluster, requests, pods)",
        "obs.yaml:7:15: operation vision/train-1 is already listed on line 1",
        "obs.yaml:7:73: requests.nvidia.com/gpu: '2x' is not a valid quantity "
        "(e.g. 2, 500m, 256Gi)",
        "obs.yaml:8:3: missing key 'operation' (\"project/name\")",
    ]


def test_parse_observed_ids_end_where_they_end() -> None:
    """``$`` passes a final newline: ``"vision/x\\n"`` was taken for an id."""
    with pytest.raises(ObservedFileError) as err:
        parse_observed('- {operation: "vision/x\\n", phase: Running}\n', "obs.yaml")
    assert [str(e) for e in err.value.errors] == [
        "obs.yaml:1:15: operation must be \"project/name\", got 'vision/x\\n'"
    ]


def test_parse_observed_pods_of_a_distributed_run() -> None:
    (gang,) = parse_observed(
        "- {operation: vision/ddp, phase: Running, requests: {nvidia.com/gpu: 8}, pods: 4}\n",
        "obs.yaml",
    )
    assert gang.pods == 4 and gang.requests == {"nvidia.com/gpu": Decimal(8)}
    for bad in ("0", "true", "'4'", "1.5"):
        with pytest.raises(ObservedFileError) as err:
            parse_observed(f"- {{operation: a/b, phase: Running, pods: {bad}}}\n", "o.yaml")
        (error,) = err.value.errors
        assert str(error).startswith("o.yaml:1:42: pods must be a whole number of at least 1")


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        ("- [unclosed", "o.yaml", ConfigError(Location("o.yaml", 1, 12), "invalid YAML: ")),
        (
            '[{"operation": "a/b",}',
            "o.json",
            ConfigError(Location("o.json", 1, 22), "invalid JSON: Expecting property name"),
        ),
        ("operation: a/b", "o.yaml", ConfigError(Location("o.yaml", 1, 1), "expected a list")),
    ],
)
def test_parse_observed_syntax_errors(text: str, name: str, expected: ConfigError) -> None:
    with pytest.raises(ObservedFileError) as err:
        parse_observed(text, name)
    (got,) = err.value.errors
    assert got.location == expected.location
    assert got.message.startswith(expected.message)


def test_cli_reports_observed_errors_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "observed.yaml"
    bad.write_text("- {operation: a/b, phase: Sleeping}\n")
    result = CliRunner().invoke(cli, ["plan", "--observed", str(bad)])
    assert result.exit_code == EXIT_ERROR
    assert f"{bad}:1:27: unknown phase 'Sleeping'" in result.output
    assert "Traceback" not in result.output

    missing = tmp_path / "nope.yaml"
    with pytest.raises(LoadError, match="cannot read"):
        read_observed(missing)


def test_cli_head_needs_base() -> None:
    result = CliRunner().invoke(cli, ["plan", "--head", "HEAD"])
    assert result.exit_code == 2
    assert "--head needs --base" in result.output


# --- run_plan ---------------------------------------------------------------------------


def test_run_plan_json_contract() -> None:
    w = seed_world()
    w.observe("vision/train-1", Phase.RUNNING)
    out = run_plan(loader(w.repo()), observed_planner(list(w.observed.values()), NOW), "json")
    assert out.exit_code == EXIT_OK
    data = json.loads(out.stdout)
    assert list(data) == ["dispatch", "pending", "stop", "queues"]
    assert data["dispatch"][0] == {
        "operation": "etl/job-1",
        "queue": "batch",
        "cluster": "local",
        "flavor": None,
    }
    p = next(p for p in data["pending"] if p["queue"] == "team-a")
    assert list(p) == [
        "operation",
        "queue",
        "reason",
        "position",
        "message",
        "blockedBy",
        "admitWhen",
        "admit",
        "estimate",
    ]
    assert p["admit"]["when"] == p["admitWhen"] == "ResourcesReleased"
    assert p["admit"]["operations"] == ["vision/train-1"] and p["admit"]["amount"] == "1"
    assert (p["operation"], p["reason"], p["position"]) == ("vision/train-3", "QuotaExceeded", 1)
    # no history and no timeout: what it waits for (train-1's GPU) cannot be dated
    assert p["estimate"]["p50"] == {"state": "Unknown", "at": None}
    assert "vision/train-1" in p["estimate"]["why"]
    assert p["blockedBy"]["releasedBy"] == ["vision/train-1"]
    team_a = next(q for q in data["queues"] if q["name"] == "team-a")
    assert team_a == {
        "name": "team-a",
        "cluster": "local",
        "priority": 0,
        "concurrency": None,
        "quota": {"nvidia.com/gpu": "2"},
        "active": 1,
        "used": {"nvidia.com/gpu": "1"},
        "dispatching": 1,
        "pending": 3,
    }


def test_run_plan_table_and_markdown() -> None:
    w = seed_world()
    table = run_plan(loader(w.repo()), observed_planner([], NOW), "table").stdout
    assert table.splitlines()[0].split() == [
        "QUEUE",
        "CLUSTER",
        "PRIORITY",
        "ACTIVE/LIMIT",
        "QUOTA",
        "USED/LIMIT",
        "DISPATCH",
        "PENDING",
    ]
    assert "team-a  local    0         0+2/-         nvidia.com/gpu 0+2/2" in table
    assert "3 (QuotaExceeded)" in table
    md = run_plan(loader(w.repo()), observed_planner([], NOW), "markdown").stdout
    assert md.startswith("## Dispatch plan\n\n9 to dispatch, 7 pending, 0 to stop.")


def flavored_world() -> World:
    """team-a: 2 h100 then 4 a100, with three 1-GPU operations and one running on h100."""
    w = World().cluster("local").queue("team-a", priority=10)
    w.flavored("team-a", ("h100", {"gpu": 2}), ("a100", {"gpu": 4}))
    w.op("vision/running", queue="team-a", gpu=1)
    w.observe("vision/running", Phase.RUNNING, flavor="h100")
    w.ops("vision/train-{}", 2, queue="team-a", gpu=1)
    return w


def test_the_plan_names_each_dispatchs_flavor() -> None:
    w = flavored_world()
    planner = observed_planner(list(w.observed.values()), NOW)
    data = json.loads(run_plan(loader(w.repo()), planner, "json").stdout)
    assert [(d["operation"], d["flavor"]) for d in data["dispatch"]] == [
        ("vision/train-1", "h100"),
        ("vision/train-2", "a100"),
    ]
    (team_a,) = data["queues"]
    assert team_a["quota"] == {"nvidia.com/gpu": "6"} and team_a["used"] == {"nvidia.com/gpu": "1"}
    assert team_a["flavors"] == [
        {"name": "h100", "quota": {"nvidia.com/gpu": "2"}, "used": {"nvidia.com/gpu": "1"}},
        {"name": "a100", "quota": {"nvidia.com/gpu": "4"}, "used": {"nvidia.com/gpu": "0"}},
    ]
    table = run_plan(loader(w.repo()), planner, "table").stdout
    assert "h100: nvidia.com/gpu 1+1/2; a100: nvidia.com/gpu 0+1/4" in table
    lines = table.splitlines()
    assert lines[lines.index("DISPATCH        QUEUE   CLUSTER") + 1 :][:2] == [
        "vision/train-1  team-a  local (h100)",
        "vision/train-2  team-a  local (a100)",
    ]
    md = run_plan(loader(w.repo()), planner, "markdown").stdout
    assert "| 1 | vision/train-1 | team-a | local (h100) |" in md


def test_run_plan_errors() -> None:
    broken = CompiledRepo(
        "worktree",
        World().org,
        {},
        {},
        (),
        errors=(ConfigError(Location("queues/a.yaml", 3, 5), "priority must be an integer"),),
    )
    out = run_plan(loader(broken), observed_planner([], NOW), "table")
    assert out.exit_code == EXIT_ERROR
    assert "queues/a.yaml:3:5: priority must be an integer" in out.stderr

    w = World().queue("q")
    w.op("p/a", queue="missing")
    out = run_plan(loader(w.repo()), observed_planner([], NOW), "json")
    assert (out.exit_code, out.stdout) == (EXIT_ERROR, "")
    assert "queue 'missing'" in out.stderr

    def fails() -> CompiledRepo:
        raise LoadError(["error: cannot read origin/main in .: bad ref"])

    out = run_plan(fails, observed_planner([], NOW), "table")
    assert out.exit_code == EXIT_ERROR and "bad ref" in out.stderr


def test_run_plan_warns_when_the_prune_guard_holds() -> None:
    w = World().queue("q").with_org(prune=True)
    w.observe("p/gone", Phase.RUNNING, queue="q")
    out = run_plan(loader(w.repo()), observed_planner(list(w.observed.values()), NOW), "json")
    assert json.loads(out.stdout)["stop"] == []
    assert out.stderr.startswith("warning: refusing to prune 1 of 1 active operations")


# --- run_plan_diff ----------------------------------------------------------------------


def test_run_plan_diff_exit_codes() -> None:
    base = seed_world().repo("a" * 40)
    same = run_plan_diff(
        loader(base), loader(seed_world().repo("b" * 40)), observed_planner([], NOW), "markdown"
    )
    assert same.exit_code == EXIT_OK
    assert "No change" in same.stdout

    head = seed_world().set_queue("team-a", quota={"nvidia.com/gpu": Decimal(3)}).repo("b" * 40)
    changed = run_plan_diff(loader(base), loader(head), observed_planner([], NOW), "json")
    assert changed.exit_code == EXIT_CHANGES
    data = json.loads(changed.stdout)
    assert data["changed"] is True
    assert [t["operation"] for t in data["newlyDispatched"]] == ["vision/train-3"]

    broken = CompiledRepo(
        "b", World().org, {}, {}, (), errors=(ConfigError(Location("x.yaml", 1, 1), "bad"),)
    )
    failed = run_plan_diff(
        loader(base),
        loader(broken),
        observed_planner([], NOW),
        "markdown",
        labels=("base main", "head HEAD"),
    )
    assert failed.exit_code == EXIT_ERROR
    assert failed.stderr == "head HEAD does not compile (1 error(s)):\nx.yaml:1:1: bad\n"


# --- start estimates in the PR plan -----------------------------------------------------


def _history_planner(world: World, history: list[RunRecord]) -> Planner:
    """Plans over ``world``'s observed phases (runs started now) with a duration history."""
    observed = list(world.observed.values())

    def plan_of(repo: CompiledRepo) -> Planned:
        plan = plan_repo(repo, observed, NOW)
        starts = {o.operation: NOW for o in observed}
        return Planned(plan, estimate_starts(repo, plan, observed, starts, history, NOW), [])

    return plan_of


def _estimate_world(pretrain_queue: str) -> World:
    w = World().queue("slow", concurrency=1).queue("fast", concurrency=1)
    w.op("team-b/long", queue="slow")
    w.op("team-b/short", queue="fast")
    w.op("team-b/pretrain", queue=pretrain_queue)
    w.observe("team-b/long", Phase.RUNNING, queue="slow")
    w.observe("team-b/short", Phase.RUNNING, queue="fast")
    return w


def test_the_pr_plan_says_how_a_change_moves_a_start_estimate() -> None:
    history = [
        RunRecord("team-b/long", "slow", 3 * 3600),
        RunRecord("team-b/short", "fast", 40 * 60),
        RunRecord("team-b/pretrain", "slow", 3600),
    ]
    base = _estimate_world("slow")
    head = _estimate_world("fast")
    planner = _history_planner(base, history)
    out = run_plan(loader(base.repo()), planner, "table")
    row = next(line for line in out.stdout.splitlines() if "team-b/pretrain" in line)
    assert "~3 h (p90 ~3 h)" not in row and "~3 h" in row  # p50 == p90: said once
    md = run_plan_diff(
        loader(base.repo("a" * 40)), loader(head.repo("b" * 40)), planner, "markdown"
    )
    assert md.exit_code == EXIT_CHANGES
    assert "### Start estimates that move" in md.stdout
    assert "this change moves team-b/pretrain from ~3 h to ~40 min" in md.stdout
    data = json.loads(
        run_plan_diff(
            loader(base.repo("a" * 40)), loader(head.repo("b" * 40)), planner, "json"
        ).stdout
    )
    [move] = data["estimateMoves"]
    assert (move["operation"], move["before"], move["after"]) == (
        "team-b/pretrain",
        "~3 h",
        "~40 min",
    )
    assert move["afterEstimate"]["p50"]["at"] == "2026-01-01T12:40:00+00:00"


def test_cli_a_base_ref_that_names_no_commit_is_one_line(tmp_path: Path) -> None:
    """``plan --base`` with a ref git does not know: exit 1 and one line, naming the ref."""
    import subprocess

    repo = tmp_path / "cfg"
    repo.mkdir()
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "one")):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True
        )
    result = CliRunner().invoke(cli, ["plan", "--repo", str(repo), "--base", "HEAD~3"])
    assert result.exit_code == EXIT_ERROR
    assert result.output == f"error: cannot read HEAD~3 in {repo}: unknown revision 'HEAD~3'\n"


# --- plan --now -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01T12:00:00Z", datetime(2026, 1, 1, 12, tzinfo=UTC)),
        ("2026-01-01t13:30:00+01:00", datetime(2026, 1, 1, 12, 30, tzinfo=UTC)),
        ("2026-01-01 12:00:00.123456789-00:00", datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-01-01T12:00:00.5z", datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_now_reads_rfc3339(text: str, expected: datetime) -> None:
    assert parse_now(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "now",
        "2026-01-01",
        "2026-01-01T12:00:00",
        "2026-01-01T12:00Z",
        "2026-02-30T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "1767268800",
        "2026-01-01T12:00:00+0100",
        " 2026-01-01T12:00:00Z",
    ],
)
def test_cli_now_not_rfc3339_is_one_line(text: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", "--repo", str(tmp_path), "--now", text])
    assert result.exit_code == EXIT_ERROR
    assert result.output.splitlines() == [
        f"error: --now: {text!r} is not an RFC 3339 time "
        "(e.g. 2026-01-01T12:00:00Z or 2026-01-01T13:00:00+01:00)"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59Z",  # budget windows and estimates after it are past year 9999
        "9999-12-31T23:59:59-23:59",  # past a datetime's range once in UTC
        "0001-01-01T00:00:00+23:59",  # before it
        "1969-12-31T23:59:59Z",
    ],
)
def test_cli_now_out_of_range_is_one_line(text: str) -> None:
    result = CliRunner().invoke(cli, ["plan", "--repo", str(TEMPLATE), "--now", text])
    assert result.exit_code == EXIT_ERROR, result.output
    assert result.output.splitlines() == [
        f"error: --now: {text!r} is out of range (1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z)"
    ]


@pytest.mark.parametrize("text", ["1970-01-01T00:00:00Z", "9998-12-31T23:59:59Z"])
def test_cli_plans_at_either_end_of_the_range(text: str, tmp_path: Path) -> None:
    observed = tmp_path / "observed.yaml"
    observed.write_text("[]\n")
    args = ["plan", "--repo", str(TEMPLATE), "--observed", str(observed), "--now", text]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output


def test_cli_plans_at_the_given_instant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[datetime] = []
    real = plan_cmd.observed_planner

    def spy(observed: Sequence[ObservedOperation], now: datetime) -> Any:
        seen.append(now)
        return real(observed, now)

    monkeypatch.setattr(plan_cmd, "observed_planner", spy)
    observed = tmp_path / "observed.yaml"
    observed.write_text("[]\n")
    args = ["plan", "--repo", str(TEMPLATE), "--observed", str(observed), "-o", "json"]
    first = CliRunner().invoke(cli, [*args, "--now", "2026-03-01T09:00:00+01:00"])
    second = CliRunner().invoke(cli, [*args, "--now", "2026-03-01T08:00:00Z"])
    assert first.exit_code == second.exit_code == 0, first.output
    assert seen == [datetime(2026, 3, 1, 8, tzinfo=UTC)] * 2
    assert first.output == second.output
