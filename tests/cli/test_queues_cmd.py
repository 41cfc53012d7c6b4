"""``reconciler queues`` from a real status branch (through Git), via click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from support.status_branch import run, write_cycle

from reconciler.adapters.git import ConfigRepo, StatusBranch


def _published(remote: Path, tmp_path: Path) -> Path:
    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    assert write_cycle(repo, StatusBranch(repo)) is not None
    return tmp_path / "cli-cache"


def test_table_rows_in_priority_order_with_quota_and_fleet(remote: Path, tmp_path: Path) -> None:
    cache = _published(remote, tmp_path)
    code, out, err = run("queues", "--repo", str(remote), "--cache-dir", str(cache))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["QUEUE", "CLUSTER", "PRIORITY"]
    names = [ln.split()[0] for ln in lines[1:7]]
    assert names == ["notebooks", "sandboxes", "team-a", "team-b", "gpu-fleet", "batch"]
    rows = {ln.split()[0]: ln for ln in lines[1:7]}
    # a cell per flavor: team-a's 1 H100 + 1 A100 and 1 H100 borrowed from team-b, whose
    # ops pin A100 (2 of its 2), its H100s idle
    team_a, team_b = rows["team-a"], rows["team-b"]
    assert "h100: nvidia.com/gpu 2/1 (+1 borrowed); a100: nvidia.com/gpu 1/1" in team_a
    assert "QuotaExceeded" in team_a  # the next cycle's head (see the JSON test)
    assert "h100: nvidia.com/gpu 0/2 (1 lent); a100: nvidia.com/gpu 2/2" in team_b
    assert rows["batch"].split()[3] == "3/3"
    fleet = [ln for ln in lines if ln.startswith(("local ", "(all) "))]
    assert len(fleet) == 2 and "nvidia.com/gpu 6/13" in fleet[1]
    # the template's fleet queue, over its one cluster
    (share,) = [ln.split() for ln in lines if ln.startswith("gpu-fleet    local")]
    assert share[:5] == ["gpu-fleet", "local", "0", "nvidia.com/gpu", "0/4"]
    assert "KINDS" not in out


def test_wide_adds_kinds_strategy_and_paused(remote: Path, tmp_path: Path) -> None:
    cache = _published(remote, tmp_path)
    code, out, err = run("queues", "--repo", str(remote), "--cache-dir", str(cache), "-o", "wide")
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header[-3:] == ["KINDS", "STRATEGY", "PAUSED"]
    batch = next(ln.split() for ln in out.splitlines() if ln.startswith("batch "))
    assert batch[-3:] == ["batch,job", "StrictFIFO", "false"]


def test_json_has_rows_and_fleet_totals(remote: Path, tmp_path: Path) -> None:
    cache = _published(remote, tmp_path)
    code, out, err = run("queues", "--repo", str(remote), "--cache-dir", str(cache), "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["source"] == "status-branch"
    queues = {q["name"]: q for q in data["queues"]}
    assert queues["team-a"]["quota"] == [
        {"resource": "nvidia.com/gpu", "used": "3", "limit": "2", "borrowed": "1", "lent": "0"}
    ]
    assert (queues["batch"]["active"], queues["batch"]["concurrency"]) == (3, 3)
    # the next cycle's decision over the branch: with the recorded dispatches running,
    # no H100 is idle in the cohort, so the head waits for quota before its timeout matters
    assert queues["team-a"]["headReason"] == "QuotaExceeded"
    assert "admitted when" in queues["team-a"]["headMessage"]
    total = data["fleet"]["total"]
    assert total["cluster"] is None and total["active"] == sum(q["active"] for q in queues.values())
    assert [c["cluster"] for c in data["fleet"]["clusters"]] == ["local"]


def test_a_queue_with_flavors_from_a_real_status_branch(remote: Path, tmp_path: Path) -> None:
    """``queues`` (table and json) and ``status`` read each flavor's use back from the
    status branch (the template's team-a and team-b give their quota per flavor); the
    other queues' rows are as they were."""
    cache = str(_published(remote, tmp_path))
    code, out, err = run("queues", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0, err
    rows = {ln.split()[0]: ln for ln in out.splitlines()[1:7]}
    assert "h100: nvidia.com/gpu 2/1 (+1 borrowed); a100: nvidia.com/gpu 1/1" in rows["team-a"]
    assert "nvidia.com/gpu 1/2" in rows["sandboxes"] and "h100" not in rows["sandboxes"]
    code, out, err = run("queues", "--repo", str(remote), "--cache-dir", cache, "-o", "json")
    assert code == 0, err
    queues = {q["name"]: q for q in json.loads(out)["queues"]}
    assert [(f["name"], f["quota"][0]["used"]) for f in queues["team-a"]["flavors"]] == [
        ("h100", "2"),
        ("a100", "1"),
    ]
    assert queues["team-a"]["quota"][0]["limit"] == "2"  # the sum over its flavors
    assert "flavors" not in queues["sandboxes"]
    code, out, err = run("status", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0, err
    row = next(ln for ln in out.splitlines() if ln.startswith("team-a "))
    assert "h100: nvidia.com/gpu 2/1; a100: nvidia.com/gpu 1/1" in row  # status: no borrowing
    code, out, err = run("status", "vision/sweep-lr-1", "--repo", str(remote), "--cache-dir", cache)
    assert code == 0, err
    assert "flavor: a100" in out


def test_no_status_branch_yet_is_a_clear_error(remote: Path, tmp_path: Path) -> None:
    code, _, err = run("queues", "--repo", str(remote), "--cache-dir", str(tmp_path / "c"))
    assert code == 1
    assert err.startswith("error: no status yet: branch reconciler/status does not exist")
    assert "Traceback" not in err


def test_status_file_history_gives_the_recorded_transitions(remote: Path, tmp_path: Path) -> None:
    from support.builders import NOW

    from reconciler.core.compile import compile_repo
    from reconciler.core.plan import plan_repo
    from reconciler.core.reporting.status import (
        operation_path,
        order_path,
        parse_status_file,
        render_status,
        status_changes,
    )
    from reconciler.core.types import ObservedOperation, Phase
    from reconciler.core.views.queue_view import recorded_history

    repo = ConfigRepo(str(remote), cache_dir=tmp_path / "cache")
    status = StatusBranch(repo)
    path = operation_path("vision/train-ddp")
    assert status.file_history(path) == []  # no branch yet
    write_cycle(repo, status)  # train-ddp is Queued (QuotaExceeded, position 2)
    compiled = compile_repo(repo.sync())
    running = [
        ObservedOperation(d, Phase.RUNNING, queue="team-a")
        for d in ("vision/sweep-lr-0", "vision/sweep-lr-1")
    ]
    gone = [ObservedOperation(o.operation, Phase.SUCCEEDED) for o in running]
    # both finished: sweep-lr-2 (h100) and train-resnet (a100) go; train-ddp (2 x A100,
    # waiting for both at once: its own and one team-b lends) moves up to the head
    plan = plan_repo(compiled, gone, NOW)
    before = status.read()
    after = render_status(compiled, plan, {})
    status.write(status_changes(before, after), "second cycle")
    versions = status.file_history(path)
    assert len(versions) == 2 and versions[0][1] <= versions[1][1]
    records = [(sha, when, parse_status_file(path, data)) for sha, when, data in versions]
    # the record holds no position (its queue's order file does): it changed for its
    # message (what admits it), and the order file's history says where it stood
    assert [r.position for _, _, r in records] == [None, None]  # type: ignore[union-attr]
    order = [
        parse_status_file(order_path("team-a"), data)
        for _, _, data in status.file_history(order_path("team-a"))
    ]
    assert [o.pending.index("vision/train-ddp") + 1 for o in order] == [2, 1]  # type: ignore[union-attr]
    events = recorded_history(records)  # type: ignore[arg-type]
    assert [e.phase for e in events] == ["Queued"]  # same phase and reason: one event
    assert "QuotaExceeded" in events[0].note and versions[0][0][:12] in events[0].note


def test_serve_binds_localhost_by_default_and_says_it_is_read_only() -> None:
    code, out, _ = run("serve", "--help")
    assert code == 0
    out = " ".join(out.split())  # click wraps to the terminal's width
    assert "[default: 127.0.0.1:8080]" in out
    assert "read-only" in out and "never dispatch" in out
