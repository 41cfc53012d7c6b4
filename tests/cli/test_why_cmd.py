"""``reconciler why`` through real Git: the template's cycles over a fake cluster are
written to the status branch of a bare remote, and ``why`` replays them from Git alone."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.fake_kube import FakeCycles
from support.git_commands import git

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.cli.main import cli
from reconciler.core.compile import compile_repo
from reconciler.core.reporting.status import (
    DECISION_FILE,
    status_changes,
    summarize_cycle,
)
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.service import make_runtime
from reconciler.runtime.web import WebApp, recorded_cycles


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


LAST: dict[Path, CycleResult] = {}


@pytest.fixture
def history(template_remote: Path, tmp_path: Path) -> tuple[Path, list[str], str, str]:
    """Three cycles written to the status branch: their commits, an operation pending in
    the first, and one dispatched in it (``LAST``: the last cycle's result, by remote)."""
    repo = ConfigRepo(str(template_remote), cache_dir=tmp_path / "cache")
    status = StatusBranch(repo)
    compiled = compile_repo(repo.sync())
    cycles = FakeCycles(compiled, backends={"pytorchjob"})
    commits: list[str] = []
    pending = dispatched = ""
    for after in (0, 30, 900):
        result = cycles.cycle(after=after)
        assert result.plan is not None
        if not commits:
            pending = result.plan.pending[-1].operation
            dispatched = result.plan.dispatch[0].operation
        files = cycles.status_of(result)
        before = status.read()
        sha = status.write(status_changes(before, files), summarize_cycle(before, files))
        if sha is not None:
            commits.append(sha)
        for key in sorted(cycles.cluster.jobs)[:2]:  # runs end, so others are dispatched
            cycles.cluster.set_phase(*key, "Succeeded")
        LAST[template_remote] = result
    return template_remote, commits, pending, dispatched


def test_why_at_a_status_commit_replays_its_cycle(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    remote, commits, pending, dispatched = history
    cache = str(tmp_path / "why-cache")
    code, out, err = run(
        "why", pending, "--at", commits[0][:10], "--repo", str(remote), "--cache-dir", cache
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(
        f"{pending} at 2026-01-01T12:00:00+00:00 (status commit {commits[0][:12]}"
    )
    assert lines[1].startswith("outcome: pending ")
    assert any(line.startswith("decided by: check ") for line in lines)
    assert any(line.startswith("what would admit it:") for line in lines)
    assert any(line.startswith("queue ") and " then: priority " in line for line in lines)
    assert lines[-1] == "replay: equals the record"

    code, out, err = run(
        "why",
        dispatched,
        "--at",
        "2026-01-01T12:00:10Z",
        "--repo",
        str(remote),
        "--cache-dir",
        cache,
    )
    assert code == 0, err
    assert "outcome: dispatched to local" in out
    assert "decided by: every check held" in out


def test_why_without_at_prints_each_change_of_the_outcome(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    remote, commits, _, dispatched = history
    code, out, err = run(
        "why", dispatched, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("dispatched to local from " + lines[0].rsplit(" ", 1)[-1])
    assert f"  {commits[0][:12]}  dispatched" in lines[0]
    assert len(lines) >= 2 and len(set(line.split("  ", 2)[2] for line in lines)) == len(lines)


@pytest.mark.parametrize(
    ("at", "message"),
    [
        (
            "2025-12-31T00:00:00Z",
            "error: 2025-12-31T00:00:00+00:00 is before the first recorded decision\n",
        ),
        (
            "0123456789abcdef",
            "error: 0123456789abcdef is not a commit on the status branch reconciler/status\n",
        ),
        ("main", "is not a commit on the status branch reconciler/status\n"),
        (
            "2026-01-01T12:00:00",
            "error: --at 2026-01-01T12:00:00: a time needs its offset (Z, or e.g. +02:00)\n",
        ),
    ],
)
def test_why_at_a_moment_with_no_record_is_a_one_line_error(
    history: tuple[Path, list[str], str, str], tmp_path: Path, at: str, message: str
) -> None:
    remote, _, pending, _ = history
    code, out, err = run(
        "why", pending, "--at", at, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 1 and out == ""
    assert err.endswith(message) and err.count("\n") == 1


def test_an_operation_in_no_recorded_cycle_prints_no_numbers(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    remote, commits, _, _ = history
    code, out, err = run(
        "why", "vision/never", "--repo", str(remote), "--cache-dir", str(tmp_path / "c")
    )
    assert (code, out) == (1, "")
    assert err == f"error: vision/never is in none of the {len(commits)} recorded cycles\n"
    code, out, err = run(
        "why",
        "vision/never",
        "--at",
        commits[0],
        "--repo",
        str(remote),
        "--cache-dir",
        str(tmp_path / "c"),
    )
    assert (code, out) == (1, "")
    assert err == f"error: vision/never is not in the cycle of status commit {commits[0][:12]}\n"


def test_a_hand_edited_record_is_a_one_line_error(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    remote, _, pending, _ = history
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "edit"))
    status.read()
    sha = status.write(
        {DECISION_FILE: b"clock: [tuesday\n", "status/notes.yaml": b"a: 1\n"}, "by hand"
    )
    assert sha is not None
    code, out, err = run(
        "why", pending, "--at", sha, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 1 and out == ""
    assert err.startswith(
        f"error: status commit {sha[:12]} cannot be replayed: "
        "unreadable status file status/_decision.yaml:"
    )
    assert err.count("\n") == 1
    code, _, err = run("why", pending, "--repo", str(remote), "--cache-dir", str(tmp_path / "c"))
    assert code == 1 and err.count("\n") == 1 and "status/_decision.yaml:" in err


def test_a_recorded_config_that_is_no_commit_name_reaches_no_git_command(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    # after a real record, git's next command would diff from its commit to this "commit"
    remote, _, pending, _ = history
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "edit"))
    files = status.read()
    written = tmp_path / "written"
    record = files[DECISION_FILE].decode()
    config = next(line for line in record.splitlines() if line.startswith("config: "))
    hostile = record.replace(config, f"config: --output={written}")
    sha = status.write({DECISION_FILE: hostile.encode()}, "by hand")
    assert sha is not None
    code, _, err = run("why", pending, "--repo", str(remote), "--cache-dir", str(tmp_path / "c"))
    assert not written.exists()
    assert code == 1 and err.count("\n") == 1
    assert f"status commit {sha[:12]}: " in err and "is not a commit name" in err


def test_a_huge_recorded_clock_is_a_short_error(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    remote, _, pending, _ = history
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "edit"))
    record = status.read()[DECISION_FILE].decode()
    clock = next(line for line in record.splitlines() if line.startswith("clock: "))
    sha = status.write(
        {DECISION_FILE: record.replace(clock, "clock: x" + "9" * 200_000).encode()}, "by hand"
    )
    assert sha is not None
    code, _, err = run(
        "why", pending, "--at", sha, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 1 and err.count("\n") == 1
    assert len(err) < 400, len(err)


@pytest.mark.parametrize("clock", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_recorded_clock_at_the_ends_of_time_is_a_one_line_error(
    history: tuple[Path, list[str], str, str], tmp_path: Path, clock: str
) -> None:
    remote, _, pending, _ = history
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "edit"))
    record = status.read()[DECISION_FILE].decode()
    line = next(x for x in record.splitlines() if x.startswith("clock: "))
    sha = status.write(
        {DECISION_FILE: record.replace(line, f"clock: '{clock}'").encode()}, "by hand"
    )
    assert sha is not None
    # the planner steps days around the clock: at the ends of time, date arithmetic overflows
    args = ["why", pending, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")]
    code, _, err = run(*args, "--at", sha)
    assert code == 1
    assert err == (
        f"error: status commit {sha[:12]}: status/_decision.yaml:1:1: clock {clock!r} is out "
        "of range (1970-01-01T00:00:00+00:00 to 9999-01-01T00:00:00+00:00)\n"
    )
    for at in ("2026-01-01T12:00:00Z", None):  # the time chosen by, or the whole history
        result = CliRunner().invoke(cli, [*args, *(("--at", at) if at else ())])
        assert isinstance(result.exception, SystemExit | None), (at, result.exception)
        assert result.exit_code in (0, 1) and result.stderr.count("\n") <= 1


def test_why_with_no_status_branch(template_remote: Path, tmp_path: Path) -> None:
    code, _, err = run(
        "why", "a/b", "--repo", str(template_remote), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 1
    assert err.startswith("error: no status yet: branch reconciler/status does not exist in ")
    assert git(template_remote, "branch", "--list", "reconciler/status") == ""


def test_the_pages_show_what_the_recorded_cycles_say(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    remote, commits, _, dispatched = history
    runtime = make_runtime(str(remote), "main", {}, cache_dir=tmp_path / "serve")
    recorded = recorded_cycles(runtime)
    assert recorded is not None
    app = WebApp(
        lambda: LAST[remote], outcome_history=recorded.outcomes, queue_history=recorded.days
    )
    # an operation's page: its outcome over time
    reply = app(f"/operations/{dispatched}")
    assert reply is not None and reply[0] == 200
    page = reply[1].decode()
    assert "<h2>Outcome over time</h2>" in page
    first = recorded.outcomes(dispatched)[0]
    assert first.commit == commits[0] and first.outcome.startswith("dispatched to local")
    assert f"<code>{commits[0][:12]}</code></td><td>dispatched to local" in page
    reply = app("/operations/vision/no-such-op")
    assert reply is None or "Outcome over time" not in reply[1].decode()
    # a queue's page: its dispatches by day, as many as the replayed plans made
    queue = LAST[remote].plan.queues[0].name  # type: ignore[union-attr]
    history_ = recorded._cycles()
    made = sum(1 for c in history_ for d in c.decision.plan.dispatch if d.queue == queue)
    days = recorded.days(queue)
    assert [d.day.isoformat() for d in days] == ["2026-01-01"]
    assert days[0].dispatched == made
    reply = app(f"/queues/{queue}")
    assert reply is not None and reply[0] == 200
    page = reply[1].decode()
    assert "<h2>Wait and utilisation by day</h2>" in page
    assert f"<tr><td>2026-01-01</td><td>{made}</td>" in page


def test_at_a_time_reads_a_few_commits_of_a_long_branch(
    history: tuple[Path, list[str], str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading every commit up to the time asked took 74 s on a branch of 10,000."""
    remote, commits, pending, _ = history
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "edit"))
    record = status.read()[DECISION_FILE].decode()
    clock = next(line for line in record.splitlines() if line.startswith("clock: "))
    script = [f"reset refs/heads/reconciler/status\nfrom {commits[-1]}\n"]
    for i in range(500):  # a record a minute, on the next day
        body = record.replace(clock, f"clock: '2026-01-02T{i // 60:02d}:{i % 60:02d}:00+00:00'")
        script += [
            "commit refs/heads/reconciler/status\n",
            f"committer r <r@example.com> {1767312000 + 60 * i} +0000\ndata 6\ncycle\n",
            f"M 100644 inline {DECISION_FILE}\ndata {len(body.encode())}\n{body}\n",
        ]
    subprocess.run(
        ["git", "fast-import", "--quiet"], cwd=remote, input="".join(script).encode(), check=True
    )
    reads: list[str] = []
    files_at = StatusBranch.files_at

    def counted(self: StatusBranch, tip: str | None, *rest: Any) -> dict[str, bytes]:
        reads.append(str(tip))
        return files_at(self, tip, *rest)

    monkeypatch.setattr(StatusBranch, "files_at", counted)
    args = ["why", pending, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")]
    _, out, err = run(*args, "--at", "2026-01-02T04:10:30Z")
    assert out.startswith(f"{pending} at 2026-01-02T04:10:00+00:00 (status commit "), err
    assert len(reads) <= 12
    _, _, err = run(*args, "--at", "2026-01-01T00:00:00Z")
    assert err == "error: 2026-01-01T00:00:00+00:00 is before the first recorded decision\n"


def test_at_a_time_takes_the_last_cycle_that_decided_the_operation(
    history: tuple[Path, list[str], str, str], tmp_path: Path
) -> None:
    """With shards, the commits after the operation's last cycle may be other shards':
    a record naming other queues is skipped, one naming the operation's queue is taken."""
    remote, commits, pending, _ = history
    status = StatusBranch(ConfigRepo(str(remote), cache_dir=tmp_path / "edit"))
    record = status.read()[DECISION_FILE].decode()
    clock = next(line for line in record.splitlines() if line.startswith("clock: "))
    body = record.replace(clock, "clock: '2026-01-02T00:00:00+00:00'")
    body += "clusters:\n- elsewhere\nqueues:\n- nobody\n"
    script = (
        f"reset refs/heads/reconciler/status\nfrom {commits[-1]}\n"
        "commit refs/heads/reconciler/status\n"
        "committer r <r@example.com> 1767312000 +0000\ndata 6\ncycle\n"
        f"M 100644 inline {DECISION_FILE}\ndata {len(body.encode())}\n{body}\n"
    )
    subprocess.run(["git", "fast-import", "--quiet"], cwd=remote, input=script.encode(), check=True)
    args = ["why", pending, "--repo", str(remote), "--cache-dir", str(tmp_path / "c")]
    code, out, err = run(*args, "--at", "2026-01-02T01:00:00Z")
    assert code == 0, err
    assert f"(status commit {commits[-1][:12]}" in out.splitlines()[0]
