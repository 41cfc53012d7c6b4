"""Build a ``RepoSnapshot`` from a directory or from a committed Git tree.

Symlinks are recorded (``symlink_target``), never followed here: the pure loader decides
whether they stay inside the repo. Files larger than the loader's limit are still read
up to limit+1 bytes so the loader reports them.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import git

from reconciler.core.load import MAX_FILE_BYTES
from reconciler.core.types import RepoFile, RepoSnapshot

_SKIP_DIRS = {".git"}


def snapshot_worktree(root: Path) -> RepoSnapshot:
    """Every file under ``root`` (except ``.git``), as it is on disk now."""
    root = Path(root)
    files: dict[str, RepoFile] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        kept = []
        for d in sorted(dirnames):
            if d in _SKIP_DIRS:
                continue
            full = here / d
            if full.is_symlink():  # a symlinked directory: record it, do not descend
                rel = full.relative_to(root).as_posix()
                files[rel] = RepoFile(rel, b"", symlink_target=os.readlink(full))
            else:
                kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = here / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                files[rel] = RepoFile(rel, b"", symlink_target=os.readlink(full))
            elif full.is_file():
                with full.open("rb") as fh:
                    files[rel] = RepoFile(rel, fh.read(MAX_FILE_BYTES + 1))
    return RepoSnapshot(files=files, version="worktree")


def is_git_repo(path: Path) -> bool:
    try:
        git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    return True


def first_commit_times(repo: git.Repo, ref: str) -> dict[str, datetime]:
    """When each path was first added on the history of ``ref``: one ``git log`` pass."""
    out: dict[str, datetime] = {}
    marker = "\x1ecommit "
    log = repo.git.execute(
        [
            "git",
            "-c",
            "core.quotePath=false",
            "log",
            ref,
            "--diff-filter=A",
            "--name-only",
            "--no-renames",
            f"--format={marker}%ct",
            "--",
        ]
    )
    when: datetime | None = None
    for line in log.split("\n"):
        if line.startswith(marker):
            when = datetime.fromtimestamp(int(line[len(marker) :]), UTC)
        elif line and when is not None:
            # Newest first: the last time we see a path is when it was first added.
            out[line] = when
    return out


def snapshot_git(repo_dir: Path, ref: str = "HEAD") -> RepoSnapshot:
    """The tree committed at ``ref`` (never the working tree); version is the commit SHA."""
    repo = git.Repo(repo_dir)
    commit = repo.commit(ref)
    times = first_commit_times(repo, commit.hexsha)
    files: dict[str, RepoFile] = {}
    for item in commit.tree.traverse():
        if not isinstance(item, git.Blob):
            continue
        path = str(item.path)
        first = times.get(path)
        if item.mode == git.Blob.link_mode:
            target = item.data_stream.read().decode("utf-8", "surrogateescape")
            files[path] = RepoFile(path, b"", symlink_target=target, first_commit_time=first)
        else:
            stream = item.data_stream
            content = (
                stream.read(MAX_FILE_BYTES + 1) if item.size > MAX_FILE_BYTES else stream.read()
            )
            files[path] = RepoFile(path, content, first_commit_time=first)
    return RepoSnapshot(files=files, version=commit.hexsha)
