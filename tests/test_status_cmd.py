"""End to end through real Git: the template repo is synced and compiled, its status written
to the status branch of a bare remote, and ``reconciler status`` reads it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from builders import NOW
from click.testing import CliRunner
from test_git_adapter import git

from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.plan import plan_repo
from reconciler.core.schedule import with_ticks
from reconciler.core.status import (
    ClusterStatus,
    ConfigStatus,
    dump_yaml,
    render_status,
    status_changes,
    summarize_cycle,
)

TEMPLATE = Path(__file__).resolve().parent.parent / "config-repo-template"


@pytest.fixture
def remote(template_remote: Path) -> Path:
    return template_remote


def write_cycle(repo: ConfigRepo, status: StatusBranch) -> str | None:
    compiled = compile_repo(repo.sync())
    assert compiled.valid, compiled.errors
    compiled = with_ticks(compiled, {}, NOW)  # as a cycle at NOW decides over it
    plan = plan_repo(compiled, [], NOW)
    before = status.read()
    after = render_status(compiled, plan, {})
    return status.write(status_changes(before, after), summarize_cycle(before, after))


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_status_of_the_template_from_a_real_status_branch(remote: Path, tmp_path: Path) -> None:
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    status = StatusBranch(repo)
    first = write_cycle(repo, status)
    assert first is not None
    # the same world again: byte-identical files, so no commit
    assert write_cycle(repo, status) is None
    assert git(remote, "rev-list", "--count", "refs/heads/reconciler/status") == "1"
    subject = git(remote, "log", "-1", "--format=%s", "refs/heads/reconciler/status")
    assert subject.startswith("config ") and "dispatched" in subject and "pending" in subject

    compiled = compile_repo(repo.sync())
    cache = str(tmp_path / "cli-cache")
    code, out, _ = run("status", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0
    lines = out.splitlines()
    headers = ["OPERATION", "PHASE", "REASON", "QUEUE", "POS", "CLUSTER", "STARTS", "MESSAGE"]
    assert lines[0].split() == headers
    listed = {line.split()[0] for line in lines[1:] if line and "/" in line.split()[0]}
    assert {op.id for op in compiled.operations} <= listed
    assert any(line.startswith("QUEUE ") for line in lines)

    op = compiled.operations[0]
    code, out, _ = run("status", op.id, "--repo", str(remote), "--cache-dir", cache)
    assert code == 0
    record = yaml.safe_load(out)
    assert record["operation"] == op.id
    assert record["queue"] == op.queue
    assert record["logs"] == f"reconciler logs {op.id}"
    assert record["configCommit"] == compiled.version

    code, out, _ = run("status", "-o", "json", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0
    data = json.loads(out)
    version = compiled.version
    assert data["config"] == {"version": version, "applied": version, "valid": True}
    assert {q["name"] for q in data["queues"]} == set(compiled.queues)
    phases = {o["operation"]: o["phase"] for o in data["operations"]}
    assert set(phases.values()) <= {"Queued", "Dispatched", "Rejected"}
    # every pending operation has its start estimate (computed when read, the same as
    # ``plan`` says), and the table shows the same text
    waiting = [o for o in data["operations"] if o["phase"] == "Queued" and o.get("position")]
    assert waiting and all(o["estimate"]["text"] for o in waiting)
    assert all(set(o["estimate"]) >= {"p50", "p90", "text"} for o in waiting)
    for o in waiting:
        row = next(line for line in lines if line.startswith(o["operation"] + " "))
        assert o["estimate"]["text"] in row

    project = op.project
    code, out, _ = run("status", project, "-o", "json", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0
    assert {o["operation"].split("/")[0] for o in json.loads(out)["operations"]} == {project}


def test_status_errors_are_one_line_and_exit_1(remote: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    code, _, err = run("status", "--repo", str(remote), "--cache-dir", cache)
    assert code == 1
    assert err.startswith("error: no status yet: branch reconciler/status does not exist")
    code, _, err = run("status", "--repo", str(tmp_path / "nowhere"), "--cache-dir", cache)
    assert code == 1 and "no such file or directory" in err and "Traceback" not in err
    StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "w")).write(
        {
            "status/config.yaml": dump_yaml(
                ConfigStatus(
                    version="x", applied="y", valid=False, errors=("a.yaml:1:2: bad",)
                ).to_dict()
            )
        },
        "broken",
    )
    code, _, err = run("status", "team-x/none", "--repo", str(remote), "--cache-dir", cache)
    assert code == 1 and err.strip() == "error: no status for team-x/none"
    code, _, err = run("status", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0
    assert "config x is invalid; y stays in force" in err and "a.yaml:1:2: bad" in err


def test_plan_reads_a_clones_origin_copy_of_the_status_branch(remote: Path, tmp_path: Path) -> None:
    from reconciler.cli.plan_cmd import memory_on_status_branch

    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    assert write_cycle(repo, StatusBranch(repo)) is not None
    checkout = tmp_path / "pr-checkout"
    git(tmp_path, "clone", "-q", str(remote), str(checkout))  # only origin/reconciler/status
    assert not git(checkout, "branch", "--list", "reconciler/status")
    seen = memory_on_status_branch(checkout).seen
    assert seen and {s.phase for s in seen.values()} == {"Dispatched"}
    # A local branch, once there, wins over origin's copy.
    git(checkout, "branch", "reconciler/status", "origin/reconciler/status~0")
    assert memory_on_status_branch(checkout).seen == seen
    # A status branch read from another ref is read-only.
    other = StatusBranch(
        ConfigRepo(str(checkout), cache_dir=tmp_path / "c2"),
        source_ref="refs/remotes/origin/reconciler/status",
    )
    assert other.read()
    with pytest.raises(GitSyncError, match="read-only"):
        other.write({"status/x.yaml": b"x: 1\n"}, "no")


def test_status_reports_an_unreachable_cluster(remote: Path, tmp_path: Path) -> None:
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    status = StatusBranch(repo)
    compiled = compile_repo(repo.sync())
    files = render_status(
        compiled,
        plan_repo(compiled, [], NOW),
        {},
        clusters=(
            ClusterStatus(name="local", reachable=False, error="connection refused"),
            ClusterStatus(name="b", reachable=True),
        ),
    )
    assert status.write(status_changes(status.read(), files), "outage") is not None
    cache = str(tmp_path / "cli-cache")
    code, _, err = run("status", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0
    assert "warning: cluster local was unreachable at the last cycle: connection refused" in err
    assert "cluster b" not in err
    code, out, _ = run("status", "-o", "json", "--repo", str(remote), "--cache-dir", cache)
    assert json.loads(out)["clusters"] == [  # sorted by name in clusters.yaml
        {"name": "b", "reachable": True},
        {"name": "local", "reachable": False, "error": "connection refused"},
    ]


def test_usage_reads_the_ledger_from_the_status_branch(remote: Path, tmp_path: Path) -> None:
    """``reconciler usage``: the ledger per window and queue; a run across midnight counts
    in each day for the time it ran there."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from reconciler.core.ledger import Ledger, LedgerEntry

    def run_entry(op: str, queue: str, start: datetime, end: datetime, cost: str) -> LedgerEntry:
        return LedgerEntry(
            operation=op,
            generation=1,
            workload=f"{op.replace('/', '-')}-g1",
            queue=queue,
            cluster="local",
            phase="Succeeded",
            requests={"nvidia.com/gpu": Decimal(2), "memory": Decimal(16 * 2**30)},
            start=start,
            end=end,
            cost=Decimal(cost),
            currency="USD",
        )

    ledger = Ledger.of(
        [
            run_entry(
                "a/x",
                "gpu",
                datetime(2026, 1, 1, 23, tzinfo=UTC),
                datetime(2026, 1, 2, 1, tzinfo=UTC),
                "10",
            ),
            run_entry(
                "a/y",
                "cpu",
                datetime(2026, 1, 2, 8, tzinfo=UTC),
                datetime(2026, 1, 2, 9, tzinfo=UTC),
                "1",
            ),
        ]
    )
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    compiled = compile_repo(repo.sync())
    files = render_status(compiled, plan_repo(compiled, [], NOW), {}, ledger=ledger)
    StatusBranch(repo).write(status_changes({}, files), "a cycle")
    cache = str(tmp_path / "cli-cache")
    code, out, err = run("usage", "--repo", str(remote), "--cache-dir", cache, "-o", "json")
    assert code == 0, err
    rows = [
        (r["windowStart"], r["queue"], r["runs"], r["hours"], r["cost"])
        for r in json.loads(out)["usage"]
    ]
    assert rows == [
        ("2026-01-01T00:00:00Z", "gpu", 0, {"memory": "16", "nvidia.com/gpu": "2"}, "5"),
        ("2026-01-02T00:00:00Z", "cpu", 1, {"memory": "16", "nvidia.com/gpu": "2"}, "1"),
        ("2026-01-02T00:00:00Z", "gpu", 1, {"memory": "16", "nvidia.com/gpu": "2"}, "5"),
    ]
    code, out, _ = run(
        "usage",
        "--repo",
        str(remote),
        "--cache-dir",
        cache,
        "--queue",
        "gpu",
        "--per",
        "month",
        "-o",
        "csv",
    )
    assert code == 0
    assert out.splitlines() == [
        "window_start,window_end,queue,runs,memory-hours,nvidia.com/gpu-hours,cost,currency",
        "2026-01-01T00:00:00Z,2026-02-01T00:00:00Z,gpu,1,32,4,10,USD",
    ]
    code, out, _ = run("usage", "--repo", str(remote), "--cache-dir", cache, "--per", "week")
    assert code == 0
    assert out.splitlines()[0].split() == [
        "WINDOW",
        "QUEUE",
        "RUNS",
        "GPU-HOURS",
        "CPU-HOURS",
        "MEMORY-GIB-HOURS",
        "COST",
    ]
    assert out.splitlines()[2].split() == ["2025-12-29", "gpu", "1", "4", "0", "32", "10", "USD"]
    code, _, err = run("usage", "--repo", str(remote), "--cache-dir", cache, "--timezone", "X/Y")
    assert code == 2 and err.startswith("error: 'X/Y' is not a time zone")


def test_usage_windows_are_in_the_orgs_timezone_unless_told(remote: Path, tmp_path: Path) -> None:
    """``reconciler usage`` reads the org's ``timezone`` from reconciler.yaml (the budgets'
    windows); ``--timezone`` overrides it."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from test_git_adapter import git

    from reconciler.core.ledger import Ledger, LedgerEntry

    work = tmp_path / "work"  # the template_remote fixture's checkout
    org = work / "reconciler.yaml"
    org.write_text(org.read_text().replace("timezone: UTC", "timezone: America/New_York"))
    git(work, "commit", "-qam", "budgets in New York time")
    git(work, "push", "-q", str(remote), "main")
    entry = LedgerEntry(
        operation="a/x",
        generation=1,
        workload="a-x-g1",
        queue="gpu",
        cluster="local",
        phase="Succeeded",
        requests={"nvidia.com/gpu": Decimal(1)},
        start=datetime(2026, 1, 1, 23, tzinfo=UTC),  # 18:00 to 20:00 in New York
        end=datetime(2026, 1, 2, 1, tzinfo=UTC),
        cost=Decimal(4),
    )
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    compiled = compile_repo(repo.sync())
    assert compiled.org.timezone == "America/New_York"
    files = render_status(compiled, plan_repo(compiled, [], NOW), {}, ledger=Ledger.of([entry]))
    StatusBranch(repo).write(status_changes({}, files), "a cycle")
    cache = str(tmp_path / "cli-cache")
    code, out, err = run("usage", "--repo", str(remote), "--cache-dir", cache, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["timezone"] == "America/New_York"
    assert [(r["windowStart"], r["cost"]) for r in data["usage"]] == [
        ("2026-01-01T05:00:00Z", "4")  # one New York day holds the whole run
    ]
    code, out, err = run(
        "usage", "--repo", str(remote), "--cache-dir", cache, "-o", "json", "--timezone", "UTC"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["timezone"] == "UTC"
    assert [(r["windowStart"], r["cost"]) for r in data["usage"]] == [
        ("2026-01-01T00:00:00Z", "2"),  # across UTC midnight: half in each day
        ("2026-01-02T00:00:00Z", "2"),
    ]


def test_usage_over_entries_that_span_centuries_or_leave_the_calendar(
    remote: Path, tmp_path: Path
) -> None:
    """An entry from 1970 to 9998 is split into the latest 1000 day windows only (it used
    to walk every day of it: 3.6 GB and killed); one ending 9999-12-31T23:00Z is refused at
    read with its file and entry (it used to end in an OverflowError traceback)."""
    import time

    entry = (
        "- operation: p/a\n  generation: 1\n  workload: a-g1\n  queue: gpu\n  cluster: local\n"
        "  phase: Succeeded\n  requests: {{nvidia.com/gpu: '1'}}\n  start: '{start}'\n"
        "  end: '{end}'\n  cost: '1'\n"
    )
    files = {
        "status/ledger/9998-12.yaml": (
            "entries:\n" + entry.format(start="1970-01-01T00:00:00Z", end="9998-12-31T23:00:00Z")
        ).encode(),
        "status/ledger/9999-12.yaml": (
            "entries:\n" + entry.format(start="9998-12-31T00:00:00Z", end="9999-12-31T23:00:00Z")
        ).encode(),
    }
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    StatusBranch(repo).write(status_changes({}, files), "two long entries")
    started = time.monotonic()
    code, out, err = run(
        "usage", "--repo", str(remote), "--cache-dir", str(tmp_path / "c"), "-o", "json"
    )
    assert time.monotonic() - started < 30
    assert code == 0, err
    rows = json.loads(out)["usage"]
    assert len(rows) == 1000
    assert rows[-1]["windowStart"] == "9998-12-31T00:00:00Z"
    assert "note: only the latest 1000 windows are shown" in err
    assert (
        "status/ledger/9999-12.yaml:1:1: entry 1: end 9999-12-31T23:00:00Z is out of range" in err
    )
    assert "Traceback" not in err
