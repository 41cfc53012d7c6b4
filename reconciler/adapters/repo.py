"""Build a ``RepoSnapshot`` from a directory or from a committed Git tree.

Symlinks are recorded (``symlink_target``), never followed here: the pure loader decides
whether they stay inside the repo. Files larger than the loader's limit are still read
up to limit+1 bytes so the loader reports them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
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


def snapshot_checkout(root: Path) -> RepoSnapshot:
    """The files as saved, as ``run`` would order them: a file committed on ``HEAD`` keeps
    the time of the commit that first added it (even if edited since); a file not
    committed yet has none, so it comes after the committed ones. Outside Git, or in a
    repo with no commit yet, the same as :func:`snapshot_worktree`."""
    snapshot = snapshot_worktree(root)
    try:
        repo = git.Repo(root, search_parent_directories=False)
        head = repo.head.commit.hexsha
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        return snapshot
    times = first_commit_times(repo, head)
    files = {
        path: replace(f, first_commit_time=times.get(path)) if path in times else f
        for path, f in snapshot.files.items()
    }
    return replace(snapshot, files=files)


def is_git_repo(path: Path) -> bool:
    try:
        git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    return True


def first_commit_times(
    repo: git.Repo, ref: str, paths: Iterable[str] | None = None
) -> dict[str, datetime]:
    """When each path was first added on the history of ``ref``: one ``git log`` pass.

    With ``paths``, only those (literal) paths are looked up, in chunks that keep the
    command line short; the answer for each is the same as without ``paths``."""
    if paths is None:
        return _first_commit_times(repo, ref, None)
    wanted = sorted(set(paths))
    out: dict[str, datetime] = {}
    for start in range(0, len(wanted), _PATHS_PER_LOG):
        out.update(_first_commit_times(repo, ref, wanted[start : start + _PATHS_PER_LOG]))
    return out


_PATHS_PER_LOG = 500


def _first_commit_times(repo: git.Repo, ref: str, paths: list[str] | None) -> dict[str, datetime]:
    out: dict[str, datetime] = {}
    marker = "\x1ecommit "
    log = repo.git.execute(
        [
            "git",
            "--literal-pathspecs",
            "-c",
            "core.quotePath=false",
            "log",
            ref,
            "--diff-filter=A",
            "--name-only",
            "--no-renames",
            f"--format={marker}%ct",
            "--",
            *(paths or ()),
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


def read_blob_file(
    repo: git.Repo, path: str, mode: int, binsha: bytes, first_commit_time: datetime | None
) -> RepoFile:
    """One committed blob as a ``RepoFile``: symlinks recorded (``symlink_target``), not
    followed; content read up to the loader's limit + 1 byte so it can report the size."""
    stream = repo.odb.stream(binsha)
    if mode == git.Blob.link_mode:
        target = stream.read().decode("utf-8", "surrogateescape")
        return RepoFile(path, b"", symlink_target=target, first_commit_time=first_commit_time)
    content = stream.read(MAX_FILE_BYTES + 1) if stream.size > MAX_FILE_BYTES else stream.read()
    return RepoFile(path, content, first_commit_time=first_commit_time)


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
        files[path] = read_blob_file(repo, path, item.mode, item.binsha, times.get(path))
    return RepoSnapshot(files=files, version=commit.hexsha)
