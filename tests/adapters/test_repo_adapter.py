"""snapshot_worktree and snapshot_git against real directories and a temp Git repo."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from git import Repo
from support.git_commands import git

from reconciler.adapters.repo import (
    RevisionError,
    first_commit_times,
    snapshot_git,
    snapshot_worktree,
)


@pytest.fixture
def gitrepo(tmp_path: Path) -> Path:
    repo = tmp_path / "cfg"
    (repo / "queues").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "queues" / "a.yaml").write_text("kind: Queue\ncluster: x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one", when=1_700_000_000)
    (repo / "queues" / "b.yaml").write_text("kind: Queue\ncluster: y\n")
    (repo / "queues" / "a.yaml").write_text("kind: Queue\ncluster: changed\n")
    os.symlink("a.yaml", repo / "queues" / "link.yaml")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "two", when=1_700_000_100)
    return repo


def test_snapshot_git_reads_the_committed_tree(gitrepo: Path) -> None:
    (gitrepo / "queues" / "a.yaml").write_text("uncommitted\n")
    (gitrepo / "queues" / "new.yaml").write_text("uncommitted\n")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=gitrepo, capture_output=True, text=True, check=True
    ).stdout.strip()
    snap = snapshot_git(gitrepo, "HEAD")
    assert snap.version == head
    assert set(snap.files) == {"queues/a.yaml", "queues/b.yaml", "queues/link.yaml"}
    assert snap.files["queues/a.yaml"].content == b"kind: Queue\ncluster: changed\n"
    assert snap.files["queues/link.yaml"].symlink_target == "a.yaml"
    # first_commit_time is when the path was first added, not last changed
    assert snap.files["queues/a.yaml"].first_commit_time is not None
    assert snap.files["queues/a.yaml"].first_commit_time.timestamp() == 1_700_000_000
    assert snap.files["queues/b.yaml"].first_commit_time.timestamp() == 1_700_000_100  # type: ignore[union-attr]
    older = snapshot_git(gitrepo, "HEAD~1")
    assert set(older.files) == {"queues/a.yaml"}


def test_first_commit_times_survive_delete_and_readd(gitrepo: Path) -> None:
    (gitrepo / "queues" / "b.yaml").unlink()
    git(gitrepo, "commit", "-qam", "rm", when=1_700_000_200)
    (gitrepo / "queues" / "b.yaml").write_text("kind: Queue\n")
    git(gitrepo, "add", "-A")
    git(gitrepo, "commit", "-qm", "readd", when=1_700_000_300)
    times = first_commit_times(Repo(gitrepo), "HEAD")
    # the earliest add on the history wins
    assert times["queues/b.yaml"].timestamp() == 1_700_000_100


def test_snapshot_worktree_records_symlinks_and_skips_git(gitrepo: Path) -> None:
    (gitrepo / "queues" / "new.yaml").write_text("uncommitted\n")
    os.symlink("/etc", gitrepo / "escape")
    snap = snapshot_worktree(gitrepo)
    assert not any(p.startswith(".git/") for p in snap.files)
    assert snap.files["queues/new.yaml"].content == b"uncommitted\n"
    assert snap.files["queues/link.yaml"].symlink_target == "a.yaml"
    assert snap.files["escape"].symlink_target == "/etc"
    assert snap.files["escape"].content == b""


@pytest.mark.parametrize(
    ("ref", "expect"),
    [
        ("nosuch", "unknown revision 'nosuch'"),
        ("HEAD~5", "unknown revision 'HEAD~5'"),
        ("HEAD:queues", "'HEAD:queues' is not a commit"),
        ("HEAD^{tree}", "'HEAD^{tree}' is not a commit"),
        ("--output=x", "unknown revision '--output=x'"),
    ],
)
def test_snapshot_git_refuses_a_ref_that_names_no_commit_in_one_line(
    gitrepo: Path, ref: str, expect: str
) -> None:
    with pytest.raises(RevisionError) as caught:
        snapshot_git(gitrepo, ref)
    assert str(caught.value) == expect


def test_a_shallow_clone_has_no_commit_past_its_boundary(gitrepo: Path, tmp_path: Path) -> None:
    """Git reads a shallow clone's boundary commit as having no parent; GitPython read its
    parent's id from the commit and gave ``plan --base HEAD~2`` a many-line ``bad object``
    failure of ``git log`` (or 'SHA ... could not be resolved'), not 'unknown revision'."""
    git(gitrepo, "commit", "-q", "--allow-empty", "-m", "three")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{gitrepo}", str(clone))
    assert set(snapshot_git(clone, "HEAD~1").files) == {
        "queues/a.yaml",
        "queues/b.yaml",
        "queues/link.yaml",
    }
    for ref in ("HEAD~2", "HEAD~3"):
        with pytest.raises(RevisionError) as caught:
            snapshot_git(clone, ref)
        assert str(caught.value) == (
            f"unknown revision {ref!r} (the clone is shallow: fetch its history, e.g. "
            "actions/checkout with fetch-depth: 0)"
        )


def test_snapshot_git_outside_a_repository_says_so(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(RevisionError) as caught:
        snapshot_git(tmp_path / "plain", "HEAD")
    assert str(caught.value) == f"{tmp_path / 'plain'} is not a Git repository"


def test_a_blob_missing_from_the_clone_is_a_revision_error(gitrepo: Path) -> None:
    """GitPython says ``ValueError`` for an object the repository lacks (a broken or
    partial clone): a revision that cannot be read, in one line, not a bug."""
    blob = subprocess.run(
        ["git", "rev-parse", "HEAD:queues/b.yaml"],
        cwd=gitrepo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (gitrepo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(RevisionError) as caught:
        snapshot_git(gitrepo, "HEAD")
    assert str(caught.value) == (
        f"object {blob} is not in the repository (a shallow or partial clone?)"
    )


def test_a_commit_dated_past_year_9999_is_read(gitrepo: Path) -> None:
    """Git takes any committer date; Python's datetime ends with year 9999. A commit dated
    year 33658 (pushed by anyone, merged from any fork) made every read of the repo fail:
    ``plan`` exited 70 and ``run`` could never load a config. The time is held at the
    last one a datetime has: the file sorts after every other."""
    (gitrepo / "queues" / "c.yaml").write_text("kind: Queue\ncluster: z\n")
    git(gitrepo, "add", "-A")
    future = "@1000000000000 +0000"  # "@": seconds since the epoch, however many
    env = dict(os.environ, GIT_AUTHOR_DATE=future, GIT_COMMITTER_DATE=future)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "future"],
        cwd=gitrepo,
        env=env,
        check=True,
    )
    snap = snapshot_git(gitrepo, "HEAD")
    assert snap.files["queues/c.yaml"].first_commit_time == datetime.max.replace(tzinfo=UTC)
    assert snap.files["queues/a.yaml"].first_commit_time == datetime.fromtimestamp(
        1_700_000_000, UTC
    )
