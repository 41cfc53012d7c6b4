"""Build a ``RepoSnapshot`` from a directory or from a committed Git tree.

Every path is listed, but only the files the loader reads (``load.needed_paths``: config
files, and what their symlinks lead to) are read; the others (README.md, docs/, images)
are listed with empty content. Symlinks are recorded (``symlink_target``), never followed
here: the pure loader decides whether they stay inside the repo. A file larger than the
loader's limit is read up to limit+1 bytes, never whole, so the loader reports it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import git

from reconciler.core.load import MAX_FILE_BYTES, MAX_LINK_TARGET_BYTES, needed_paths
from reconciler.core.types import RepoFile, RepoSnapshot

_SKIP_DIRS = {".git"}
_GITLINK_MODE = 0o160000  # a submodule's tree entry


class RevisionError(ValueError):
    """A revision that cannot be read: a ref that names no commit, no Git repository to
    look in, or an object the clone lacks. ``str()`` is one line."""


def read_capped(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` (one more than allowed tells it is too large):
    ``/dev/zero`` or a 10 GB file costs no more than a file at the limit."""
    with path.open("rb") as fh:
        return fh.read(limit + 1)


def snapshot_worktree(root: Path) -> RepoSnapshot:
    """Every file under ``root`` (except ``.git``), as it is on disk now; only the files
    the loader reads have their content."""
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
            elif (full / ".git").exists():  # a submodule (or a repo Git would add as one)
                rel = full.relative_to(root).as_posix()
                files[rel] = RepoFile(rel, b"", submodule=True)
            else:
                kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = here / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                files[rel] = RepoFile(rel, b"", symlink_target=os.readlink(full))
            elif full.is_file():  # never a FIFO or a device: reading one could hang
                files[rel] = RepoFile(rel, b"")
    for path in needed_paths(RepoSnapshot(files)):
        files[path] = RepoFile(path, read_capped(root / path))
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


def has_ref(path: Path, ref: str) -> bool:
    """Whether the Git repository at ``path`` has ``ref`` (e.g. ``refs/heads/main``), read
    in place: no cache, no fetch."""
    try:
        repo = git.Repo(path, search_parent_directories=False)
        repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError):
        return False
    return True


def first_commit_times(
    repo: git.Repo, ref: str, paths: Iterable[str] | None = None
) -> dict[str, datetime]:
    """When each path was first added on the history of ``ref``: one ``git log`` pass.

    With ``paths``, only those (literal) paths are looked up, in chunks that keep the
    command line short; the answer for each is the same as without ``paths`` (every
    side of a merge walked: git's history simplification would follow one side only)."""
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
            *(["--full-history"] if paths else ()),
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
            when = commit_time(int(line[len(marker) :]))
        elif line and when is not None:
            # Newest first: the last time we see a path is when it was first added.
            out[line] = when
    return out


# Git takes any committer date; a datetime holds years 1 to 9999 (in seconds since 1970).
_FIRST_SECOND = -62_135_596_800  # 0001-01-01T00:00:00Z
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


def commit_time(seconds: int) -> datetime:
    """A commit's time, held within what a datetime can be: a commit dated year 33658
    made every read of its repo fail."""
    if seconds > _LAST_SECOND:
        return datetime.max.replace(tzinfo=UTC)
    return datetime.fromtimestamp(max(seconds, _FIRST_SECOND), UTC)


def read_blob(repo: git.Repo, binsha: bytes, limit: int = MAX_FILE_BYTES) -> bytes:
    """A blob's bytes, at most ``limit + 1``. A larger blob is never read whole: its size
    comes from the object header, and its first bytes from a ``git cat-file`` cut short
    (GitPython's own stream would drain the rest in one read)."""
    try:
        size = repo.odb.info(binsha).size
    except ValueError:  # GitPython's word for a missing object
        raise RevisionError(
            f"object {binsha.hex()} is not in the repository (a shallow or partial clone?)"
        ) from None
    if size <= limit:
        return bytes(repo.odb.stream(binsha).read())
    proc = subprocess.Popen(
        ["git", "--git-dir", str(repo.git_dir), "cat-file", "blob", binsha.hex()],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )
    try:
        assert proc.stdout is not None
        return proc.stdout.read(limit + 1)
    finally:
        proc.kill()
        proc.wait()


def read_blob_file(
    repo: git.Repo,
    path: str,
    mode: int,
    binsha: bytes,
    first_commit_time: datetime | None,
    *,
    content: bool = True,
) -> RepoFile:
    """One committed blob as a ``RepoFile``: symlinks recorded (``symlink_target``), not
    followed, and submodules (``submodule``), never read; content read up to the loader's
    limit + 1 byte so it can report the size, or not at all without ``content`` (a file
    the loader does not read)."""
    if mode == _GITLINK_MODE:  # ``binsha`` is a commit of another repo
        return RepoFile(path, b"", first_commit_time=first_commit_time, submodule=True)
    if mode == git.Blob.link_mode:
        raw = read_blob(repo, binsha, MAX_LINK_TARGET_BYTES)
        target = raw.decode("utf-8", "surrogateescape")
        return RepoFile(path, b"", symlink_target=target, first_commit_time=first_commit_time)
    data = read_blob(repo, binsha) if content else b""
    return RepoFile(path, data, first_commit_time=first_commit_time)


def read_needed(
    repo: git.Repo,
    files: dict[str, RepoFile],
    shas: Mapping[str, bytes],
    have: Iterable[str] = (),
) -> tuple[set[str], int]:
    """Read, into ``files``, the content of every file the loader needs that is not in
    ``have`` (already read): the paths whose content ``files`` now holds, and the number
    of blobs read."""
    done = set(have)
    needed = needed_paths(RepoSnapshot(files))
    count = 0
    for path in sorted(needed - done):
        files[path] = replace(files[path], content=read_blob(repo, shas[path]))
        count += 1
    return needed, count


def resolve_commit(repo: git.Repo, ref: str) -> str:
    """The SHA of the commit ``ref`` names, resolved by git itself: GitPython's own
    resolution ignores a shallow clone's boundary (it reads the parents of the boundary
    commit, which the clone does not have). Raises :class:`RevisionError`."""

    def rev_parse(*args: str) -> str | None:
        try:
            return str(repo.git.execute(["git", "rev-parse", *args])).strip() or None
        except git.GitCommandError:
            return None

    def verify(spec: str) -> str | None:
        return rev_parse("--verify", "--quiet", "--end-of-options", spec)

    if verify(ref) is None:
        hint = ""
        if rev_parse("--is-shallow-repository") == "true":
            hint = " (the clone is shallow: fetch its history, e.g. actions/checkout with "
            hint += "fetch-depth: 0)"
        raise RevisionError(f"unknown revision {ref!r}{hint}")
    sha = verify(f"{ref}^{{commit}}")
    if sha is None:
        raise RevisionError(f"{ref!r} is not a commit")
    return sha


def snapshot_git(repo_dir: Path, ref: str = "HEAD") -> RepoSnapshot:
    """The tree committed at ``ref`` (never the working tree); version is the commit SHA.
    Raises :class:`RevisionError` when there is no such commit."""
    try:
        repo = git.Repo(repo_dir)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise RevisionError(f"{repo_dir} is not a Git repository") from None
    commit = repo.commit(resolve_commit(repo, ref))
    times = first_commit_times(repo, commit.hexsha)
    files: dict[str, RepoFile] = {}
    shas: dict[str, bytes] = {}
    for item in commit.tree.traverse():
        if isinstance(item, git.Submodule):
            path = str(item.path)
            files[path] = RepoFile(path, b"", first_commit_time=times.get(path), submodule=True)
            continue
        if not isinstance(item, git.Blob):
            continue
        path = str(item.path)
        shas[path] = item.binsha
        files[path] = read_blob_file(
            repo, path, item.mode, item.binsha, times.get(path), content=False
        )
    read_needed(repo, files, shas)
    return RepoSnapshot(files=files, version=commit.hexsha)
