"""Status branch retention and ``status.repo`` against Git remotes served by ``git daemon``
on 127.0.0.1: the history stays bounded, the tip's tree never changes, a follower keeps
reading, a concurrent writer is never lost and a human commit stops the rewrite."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.git_commands import git
from support.git_daemon import git_daemon
from support.paths import TEMPLATE
from support.status_branch import results as _results

from reconciler.adapters.git import (
    ConfigRepo,
    Retained,
    Retention,
    RetentionRefused,
    StatusBranch,
)
from reconciler.cli.main import cli
from reconciler.cli.plan_cmd import status_on_branch
from reconciler.runtime.status import StatusPublisher

BRANCH = "reconciler/status"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A config repo (one commit on main) and an empty status repo, both bare, served by
    ``git daemon``; yields the served root and its URL."""
    root = tmp_path / "served"
    root.mkdir()
    git(root, "init", "-q", "--bare", "-b", "main", "config.git")
    git(root, "init", "-q", "--bare", "-b", "main", "status.git")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(root / "config.git"), str(work))
    (work / "reconciler.yaml").write_text("kind: Org\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(work, "push", "-q", "origin", "HEAD:main")
    with git_daemon(root) as url:
        yield root, url


def writer(url: str, cache: Path) -> StatusBranch:
    """The reconciler's status branch: config from ``config.git``, status pushed to
    ``status.git`` (``status.repo``)."""
    config = ConfigRepo(f"{url}/config.git", cache_dir=cache)
    return StatusBranch(config, remote=f"{url}/status.git", branch=BRANCH)


def status_file(i: int) -> bytes:
    return f"operation: team-a/op-{i}\nphase: Queued\n".encode()


def log(bare: Path) -> list[str]:
    return git(bare, "log", "--format=%H", BRANCH).split()


def tip_tree(bare: Path) -> str:
    return git(bare, "rev-parse", f"{BRANCH}^{{tree}}")


@pytest.mark.slow
def test_retention_bounds_the_history_and_keeps_the_tip_tree(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = served
    status = writer(url, tmp_path / "cache")
    for cycle in range(12):
        status.write({f"status/team-a/op-{cycle}.yaml": status_file(cycle)}, f"cycle {cycle}")
        before = tip_tree(root / "status.git")
        shown = "--format=%an <%ae> %ad %cn <%ce> %cd%n%B"
        kept_messages = git(root / "status.git", "log", "-3", "--date=raw", shown, BRANCH)
        done = status.retain(Retention(max_commits=4))
        assert len(log(root / "status.git")) <= 4
        assert tip_tree(root / "status.git") == before  # byte-identical tree at the tip
        if done.squashed:
            # the kept commits are replayed with their messages, authors and dates
            replayed = git(root / "status.git", "log", "-3", "--date=raw", shown, BRANCH)
            assert replayed == kept_messages
    assert len(log(root / "status.git")) == 4
    root_commit = log(root / "status.git")[-1]
    assert "squashed" in git(root / "status.git", "log", "-1", "--format=%s", root_commit)
    # every commit is still the reconciler's own, so a later pass may run again
    committers = set(git(root / "status.git", "log", "--format=%cn <%ce>", BRANCH).split("\n"))
    assert committers == {"dispatch-reconciler <reconciler@dispatch.invalid>"}
    # status.repo: the config repo never got a status branch
    assert git(root / "config.git", "branch", "--list", BRANCH) == ""
    # the files read back are all twelve
    assert sorted(status.read()) == sorted(f"status/team-a/op-{i}.yaml" for i in range(12))


def test_keep_days_squashes_what_is_older(served: tuple[Path, str], tmp_path: Path) -> None:
    root, url = served
    status = writer(url, tmp_path / "cache")
    for cycle in range(5):
        status.write({f"status/team-a/op-{cycle}.yaml": status_file(cycle)}, f"cycle {cycle}")
    before = tip_tree(root / "status.git")
    assert not status.retain(Retention(keep_days=7)).squashed  # all are recent
    assert len(log(root / "status.git")) == 5
    done = status.retain(Retention(keep_days=7), now=time.time() + 8 * 86400)
    assert (done.squashed, done.kept) == (5, 0)
    assert len(log(root / "status.git")) == 1
    assert tip_tree(root / "status.git") == before
    # once squashed, the next pass has nothing to do
    assert not status.retain(Retention(keep_days=7), now=time.time() + 8 * 86400).squashed


def test_a_follower_keeps_reading_across_a_rewrite(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    _root, url = served
    status = writer(url, tmp_path / "leader")
    follower = writer(url, tmp_path / "follower")
    for cycle in range(6):
        status.write({f"status/team-a/op-{cycle}.yaml": status_file(cycle)}, f"cycle {cycle}")
    old = follower.fetch()
    assert old is not None
    known = follower.files_at(old)
    assert status.retain(Retention(max_commits=2)).squashed == 5
    status.write({"status/team-a/op-0.yaml": None}, "removed")
    new = follower.fetch()
    assert new is not None and new != old
    assert follower.files_at(new, since=(old, known)) == follower.files_at(new)
    assert "status/team-a/op-0.yaml" not in follower.files_at(new)


def test_a_concurrent_push_during_retention_is_not_lost(
    served: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = served
    status = writer(url, tmp_path / "leader")
    replica = writer(url, tmp_path / "replica")
    for cycle in range(6):
        status.write({f"status/team-a/op-{cycle}.yaml": status_file(cycle)}, f"cycle {cycle}")
    lease_push = StatusBranch._lease_push

    def racing(self: StatusBranch, commit: str, expected: str) -> bool:
        # another replica pushes between the fetch and the rewrite's push
        replica.write({"status/team-a/late.yaml": status_file(99)}, "the other replica")
        return lease_push(self, commit, expected)

    monkeypatch.setattr(StatusBranch, "_lease_push", racing)
    done = status.retain(Retention(max_commits=2))
    assert done.lost_lease and not done.squashed
    assert len(log(root / "status.git")) == 7  # nothing rewritten, the late commit on top
    assert git(root / "status.git", "log", "-1", "--format=%s", BRANCH) == "the other replica"
    monkeypatch.setattr(StatusBranch, "_lease_push", lease_push)
    before = tip_tree(root / "status.git")
    assert status.retain(Retention(max_commits=2)).squashed == 6
    assert tip_tree(root / "status.git") == before
    assert "status/team-a/late.yaml" in status.read()
    # a writer that built on the old tip rebuilds on the rewritten one: nothing lost
    replica.write({"status/team-a/later.yaml": status_file(100)}, "after the rewrite")
    files = status.read()
    assert {"status/team-a/late.yaml", "status/team-a/later.yaml"} <= set(files)
    assert len(log(root / "status.git")) == 3


def test_a_human_commit_stops_retention(served: tuple[Path, str], tmp_path: Path) -> None:
    root, url = served
    status = writer(url, tmp_path / "cache")
    for cycle in range(4):
        status.write({f"status/team-a/op-{cycle}.yaml": status_file(cycle)}, f"cycle {cycle}")
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", BRANCH, f"{url}/status.git", str(human))
    (human / "NOTES.md").write_text("a human's note\n")
    git(human, "add", "-A")
    git(human, "commit", "-qm", "a note")
    git(human, "push", "-q", "origin", f"HEAD:{BRANCH}")
    status.write({"status/team-a/op-9.yaml": status_file(9)}, "cycle 9")
    before = log(root / "status.git")
    with pytest.raises(RetentionRefused) as err:
        status.retain(Retention(max_commits=2))
    message = str(err.value)
    assert "\n" not in message
    assert "committed by human <human@example.com>" in message
    assert log(root / "status.git") == before  # nothing rewritten


# --- the writer's passes, the readers of a status repo, the shallow fetch -----------------


def served_template(root: Path, tmp_path: Path) -> None:
    """The example config repo on ``config.git``'s main."""
    work = tmp_path / "template"
    shutil.copytree(TEMPLATE, work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "template")
    git(work, "push", "-q", "--force", str(root / "config.git"), "HEAD:main")


@pytest.mark.slow
def test_the_writer_bounds_the_history_over_cycles_and_a_follower_keeps_reading(
    served: tuple[Path, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, url = served
    results = _results(8)
    leader = StatusPublisher(
        writer(url, tmp_path / "leader"), retention=Retention(max_commits=3), retention_interval=0
    )
    follower = StatusPublisher(writer(url, tmp_path / "follower"))
    reader = writer(url, tmp_path / "reader")
    for result in results[:5]:
        assert leader.publish(result) is not None
        assert len(log(root / "status.git")) <= 3
        assert reader.read() == leader._current()  # the tip holds what was written
        record = follower.leader_record()  # a follower reads on across each rewrite
        assert record is not None
        assert follower._current() == leader._current()
    assert leader.squashed > 0
    # a human's commit on the branch: retention stops, said in one line; writes go on
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", BRANCH, f"{url}/status.git", str(human))
    (human / "NOTES.md").write_text("a human's note\n")
    git(human, "add", "-A")
    git(human, "commit", "-qm", "a note")
    git(human, "push", "-q", "origin", f"HEAD:{BRANCH}")
    caplog.set_level(logging.INFO, logger="reconciler.status")
    for result in results[5:]:
        assert leader.publish(result) is not None
    refusals = [r.getMessage() for r in caplog.records if "retention refused" in r.getMessage()]
    assert len(refusals) == 1 and "\n" not in refusals[0]
    assert "human <human@example.com>" in leader.retention_refused
    assert len(log(root / "status.git")) == 3 + 1 + 3  # nothing rewritten since
    assert "NOTES.md" in git(root / "status.git", "ls-tree", "--name-only", BRANCH)


def test_the_readers_use_the_status_repo_and_pr_ci_fetches_one_commit(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = served
    served_template(root, tmp_path)
    config, status_repo = f"{url}/config.git", f"{url}/status.git"
    cache = tmp_path / "cache"
    publisher = StatusPublisher(writer(url, tmp_path / "leader"))
    for result in _results(3):
        publisher.publish(result)
    runner = CliRunner()
    found = runner.invoke(
        cli,
        ["status", "--repo", config, "--status-repo", status_repo, "--cache-dir", str(cache)],
    )
    assert found.exit_code == 0, found.output
    assert "vision/" in found.output
    for command in (["queues"], ["usage"]):
        shown = runner.invoke(
            cli,
            [*command, "--repo", config, "--cache-dir", str(cache)],
            env={"RECONCILER_STATUS_REPO": status_repo},
        )
        assert shown.exit_code == 0, shown.output
    missing = runner.invoke(cli, ["status", "--repo", config, "--cache-dir", str(cache)])
    assert missing.exit_code == 1
    assert f"branch {BRANCH} does not exist in {config}" in missing.output
    # PR-plan CI: a clone of the config repo and a shallow fetch of the status tip
    clone = tmp_path / "pr"
    git(tmp_path, "clone", "-q", "--depth=1", config, str(clone))
    git(clone, "fetch", "-q", "--depth=1", status_repo, f"{BRANCH}:refs/remotes/origin/{BRANCH}")
    assert git(clone, "rev-list", "--count", f"refs/remotes/origin/{BRANCH}") == "1"
    view = status_on_branch(clone)
    assert view is not None and view.operations
    assert status_on_branch(clone, status_repo) is not None  # plan --status-repo, fetched
    planned = runner.invoke(cli, ["plan", "--repo", str(clone), "--status-repo", status_repo])
    assert planned.exit_code == 0, planned.output


def test_reconciler_yaml_validates_status_repo_and_retention(tmp_path: Path) -> None:
    repo = tmp_path / "cfg"
    repo.mkdir()
    org = repo / "reconciler.yaml"
    org.write_text(
        "kind: Org\nstatus:\n  repo: https://git.example.com/org/status.git\n"
        "  retention: {keepDays: 7, maxCommits: 500}\n"
    )
    runner = CliRunner()
    assert runner.invoke(cli, ["validate", "--repo", str(repo)]).exit_code == 0
    org.write_text("kind: Org\nstatus:\n  retention: {keepDays: 0, maxCommit: 5}\n")
    bad = runner.invoke(cli, ["validate", "--repo", str(repo)])
    assert bad.exit_code == 1
    assert "reconciler.yaml:3:" in bad.output and "keepDays" in bad.output
    assert "maxCommit" in bad.output


def test_the_documented_shallow_fetch_of_the_status_tip_feeds_plan(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = served
    served_template(root, tmp_path)
    config = f"{url}/config.git"
    in_config = StatusBranch(ConfigRepo(config, cache_dir=tmp_path / "leader"), branch=BRANCH)
    publisher = StatusPublisher(in_config)
    for result in _results(4):
        publisher.publish(result)
    assert int(git(root / "config.git", "rev-list", "--count", BRANCH)) == 4
    clone = tmp_path / "pr"
    git(tmp_path, "clone", "-q", config, str(clone))  # fetch-depth: 0
    git(
        clone,
        "fetch",
        "--no-tags",
        "-q",
        "--depth=1",
        "origin",
        f"{BRANCH}:refs/remotes/origin/{BRANCH}",
    )
    assert git(clone, "rev-list", "--count", f"refs/remotes/origin/{BRANCH}") == "1"
    assert git(clone, "rev-list", "--count", "origin/main") == "1"  # main's history whole
    view = status_on_branch(clone)
    assert view is not None and view.operations
    planned = CliRunner().invoke(cli, ["plan", "--repo", str(clone), "-o", "json"])
    assert planned.exit_code == 0, planned.output


def test_the_org_files_status_settings_that_differ_from_the_flags_are_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Branch:
        last_tip: str | None = None

        def read(self) -> dict[str, bytes]:
            return {}

        def write(self, changes: object, message: str) -> str:
            return "sha"

        def retain(self, retention: Retention) -> Retained:
            return Retained()

    caplog.set_level(logging.WARNING, logger="reconciler.status")
    publisher = StatusPublisher(
        Branch(),  # type: ignore[arg-type]
        retention=Retention(keep_days=7.0),
        status_repo="https://git.example.com/org/status.git",
    )
    for result in _results(3):
        publisher.publish(result)
    said = [r.getMessage() for r in caplog.records if "differ from the flags" in r.getMessage()]
    assert said == [
        "reconciler.yaml's status settings (repo -, keepDays -, maxCommits -) differ from the "
        "flags this process runs with (--status-repo https://git.example.com/org/status.git, "
        "--status-keep-days 7, --status-max-commits -): the flags are used"
    ]


def test_run_once_writes_to_the_status_repo_and_bounds_its_history(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = served
    served_template(root, tmp_path)
    config, status_repo = f"{url}/config.git", f"{url}/status.git"
    earlier = StatusPublisher(writer(url, tmp_path / "earlier"))
    for result in _results(5):  # an earlier process's history
        earlier.publish(result)
    assert len(log(root / "status.git")) == 5
    nowhere = tmp_path / "missing.kubeconfig"  # the cluster cannot be read: nothing runs
    args = ["run", "--once", "--repo", config, "--cache-dir", str(tmp_path / "c")]
    args += ["--cluster-kubeconfig", f"local={nowhere}"]
    args += ["--status-repo", status_repo, "--status-max-commits", "2"]
    ran = CliRunner().invoke(cli, args)
    assert ran.exit_code == 0, ran.output
    assert len(log(root / "status.git")) == 2
    assert git(root / "config.git", "branch", "--list", BRANCH) == ""
    shown = CliRunner().invoke(
        cli,
        [
            "status",
            "--repo",
            config,
            "--status-repo",
            status_repo,
            "--cache-dir",
            str(tmp_path / "c"),
        ],
    )
    assert shown.exit_code == 0, shown.output
