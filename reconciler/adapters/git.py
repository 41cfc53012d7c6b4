"""Git in and out, with plumbing only (never a working-tree checkout).

``ConfigRepo`` keeps a bare cache of the config repo and reads the committed tree at the tip
of a branch; each sync diffs the new tree against the last one and reads only the blobs that
changed. ``StatusBranch`` writes status files as one commit on top of the remote tip of the
status branch, through a temporary index, and pushes without force: when the push is
rejected (someone else pushed first) it fetches, rebuilds the commit on the new tip and
tries again, a bounded number of times.

Every Git failure surfaces as :class:`GitSyncError`, one line, with credentials redacted.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import struct
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import cast

import git

from reconciler.adapters.repo import (
    RevisionError,
    commit_time,
    first_commit_times,
    read_blob,
    read_blob_file,
    read_needed,
)
from reconciler.core.load import check_path, is_config_path
from reconciler.core.types import RepoFile, RepoSnapshot, SnapshotChanges
from reconciler.core.views.queue_view import BlameLine

_ZERO = "0" * 40
_LINK_MODE = 0o120000
_GITLINK_MODE = 0o160000
_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}  # never prompt; English messages to parse


# A push that lost a race: someone else moved the branch (or held its lock) first.
_LOST_RACE = re.compile(
    r"non-fast-forward|fetch first|\[rejected\]|stale info|cannot lock ref|but expected"
)
# A full commit name (SHA-1 or SHA-256): what ``snapshot`` hands to git, never an option
# such as ``--output=FILE`` from a hand-edited status record.
_COMMIT_NAME = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class GitSyncError(Exception):
    """Git could not be read or written: unreachable remote, missing branch, auth, rejected
    push. ``str()`` is one line meant for the log and the status branch."""


class CacheError(GitSyncError):
    """The repo cache (``--cache-dir``, ``$RECONCILER_REPO_CACHE``, else under
    ``$XDG_CACHE_HOME``) cannot be created or written; ``str()`` is one line saying where
    and how to choose another."""

    def __init__(self, base: Path, exc: OSError | git.GitCommandError) -> None:
        why = _reason(exc) if isinstance(exc, git.GitCommandError) else exc.strerror or exc
        super().__init__(
            f"cannot use the repo cache {base}: {why} "
            "(choose another with --cache-dir or RECONCILER_REPO_CACHE)"
        )


# --- helpers ----------------------------------------------------------------------------


def redact(text: str) -> str:
    """Hide credentials in URLs (``https://user:token@host`` -> ``https://***@host``)."""
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@", r"\1***@", text)


def _reason(err: git.GitCommandError) -> str:
    """The most telling line of git's stderr (``fatal: ...``/``error: ...``), without prefix."""
    stderr = err.stderr if isinstance(err.stderr, str) else str(err.stderr or "")
    stderr = re.sub(r"^\s*stderr: '", "", stderr).rstrip().removesuffix("'")
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for prefix in ("fatal: ", "error: ", "remote: "):
        for ln in lines:
            if ln.startswith(prefix):
                return redact(ln[len(prefix) :].strip())
    if lines:
        return redact(lines[-1])
    return f"git exited with status {err.status}"


def _is_local(source: str) -> bool:
    return "://" not in source and not re.match(r"^[\w.-]+@[\w.-]+:", source)


def _normal_source(source: str) -> str:
    """Local paths are made absolute, so the cache key and the fetch do not depend on cwd."""
    if source.startswith("file://"):
        return source
    if _is_local(source):
        return str(Path(source).expanduser().resolve())
    return source


def _cache_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _run(
    repo: git.Repo,
    args: list[str],
    *,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run one git command in ``repo``; raises ``git.GitCommandError``."""
    env = {**_ENV, **(env or {})}
    if stdin is None:
        out = repo.git.execute(["git", *args], env=env, strip_newline_in_stdout=False)
        return str(out)
    with tempfile.TemporaryFile() as fh:
        fh.write(stdin)
        fh.seek(0)
        out = repo.git.execute(["git", *args], istream=fh, env=env, strip_newline_in_stdout=False)
    return str(out)


def _fetch(
    repo: git.Repo,
    remote: str,
    branch: str,
    tracking: str,
    timeout: float | None,
    *,
    from_shallow: bool = False,
) -> str | None:
    """Fetch ``branch`` of ``remote`` (a branch name, or a full ``refs/...`` name) into
    ``tracking``; its SHA, or None if it does not exist. Raises GitSyncError for anything
    else (unreachable, auth, not a repository). ``from_shallow``: a tip fetched with
    ``--depth=1`` into a shallow clone is taken too (Git drops it otherwise)."""
    ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
    try:
        repo.git.execute(
            [
                "git",
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                *(["--update-shallow"] if from_shallow else []),
                "--",  # a repository that starts with '-' is a repository, never an option
                remote,
                f"+{ref}:{tracking}",
            ],
            env=_ENV,
            kill_after_timeout=timeout,
        )
    except git.GitCommandError as err:
        reason = _reason(err)
        if "couldn't find remote ref" in reason:
            _run(repo, ["update-ref", "-d", tracking])  # it may have been deleted
            return None
        if err.status == -9 or "killed" in str(err).lower():
            reason = f"timed out after {timeout}s"
        raise GitSyncError(f"cannot fetch {redact(remote)}: {reason}") from None
    return _run(repo, ["rev-parse", "--verify", "--quiet", tracking]).strip()


def _open_bare(path: Path) -> git.Repo:
    try:
        return git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitSyncError(f"{path} is not a Git repository") from None


@dataclass(frozen=True)
class _Entry:
    mode: int
    sha: str  # hex


def _ls_tree(repo: git.Repo, ref: str, prefix: str | None = None) -> dict[str, _Entry]:
    """Every blob, symlink and submodule in the tree of ``ref``, by path."""
    args = ["ls-tree", "-r", "-z", "--full-tree", ref]
    if prefix is not None:
        args += ["--", prefix]
    out: dict[str, _Entry] = {}
    for record in _run(repo, args).split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, kind, sha = meta.split(" ")
        if kind in ("blob", "commit"):  # a commit: a submodule (recorded, never read)
            out[path] = _Entry(int(mode, 8), sha)
    return out


def _diff_tree(
    repo: git.Repo, old: str, new: str, entries: Mapping[str, _Entry]
) -> tuple[dict[str, _Entry], list[str], list[str], list[str]]:
    """The blobs of ``new``'s tree from ``old``'s (``entries``) and ``git diff-tree`` between
    the two commits: git skips every subtree whose id did not change, so the cost is that
    of the change, not of the tree. Also the paths added, modified and deleted."""
    out = dict(entries)
    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    args = ["diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", "--raw", old, new]
    fields = _run(repo, args).split("\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(":"):
            continue
        _old_mode, new_mode, _old_sha, new_sha, _status = meta[1:].split(" ")
        mode = int(new_mode, 8)
        was = path in out
        if mode == 0:  # gone
            if was:
                del out[path]
                deleted.append(path)
            continue
        out[path] = _Entry(mode, new_sha)
        (modified if was else added).append(path)
    return out, added, modified, deleted


def _range(repo: git.Repo, old: str, new: str) -> tuple[bool, bool]:
    """Whether ``old`` is an ancestor of ``new`` (a parent of a commit ``new`` reaches and
    ``old`` does not), and whether one of those commits is a merge: one ``git rev-list``,
    O(those commits). (False, False) when git cannot tell (``old`` pruned)."""
    try:
        out = _run(repo, ["rev-list", "--boundary", "--parents", new, f"^{old}", "--"])
    except git.GitCommandError:
        return False, False
    ancestor = merged = False
    for line in out.splitlines():
        if line.startswith("-"):  # a boundary commit: reached from ``old``
            ancestor = ancestor or line[1:].split(" ", 1)[0] == old
        else:
            merged = merged or line.count(" ") > 1
    return ancestor, merged


def _paths_added(repo: git.Repo, old: str, new: str) -> set[str]:
    """The paths the commits ``new`` reaches and ``old`` does not added (merges aside):
    ``git log``, O(those commits)."""
    args = ["log", "-z", "--diff-filter=A", "--name-only", "--no-renames", "--format="]
    return {path for path in _run(repo, [*args, new, f"^{old}", "--"]).split("\0") if path}


# --- the config repo --------------------------------------------------------------------


@dataclass(frozen=True)
class SyncStats:
    """What the last ``sync()`` did: ``blobs_read`` is the cost of an incremental sync."""

    version: str
    previous: str | None
    full: bool  # no previous snapshot: the whole tree was read
    blobs_read: int
    added: int
    modified: int
    deleted: int


class ConfigRepo:
    """A config repo read from ``source`` (a URL or a local path) at the tip of ``branch``.

    The first use makes a bare cache under ``cache_dir`` keyed by a hash of the source;
    each :meth:`sync` fetches the branch and returns the committed tree at its tip."""

    def __init__(
        self,
        source: str,
        branch: str = "main",
        cache_dir: Path | None = None,
        *,
        fetch_timeout: float | None = 120.0,
    ) -> None:
        self.source = _normal_source(str(source))
        self.branch = branch
        base = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
        self.git_dir = base / f"{_cache_key(self.source)}.git"
        self.fetch_timeout = fetch_timeout
        self.tracking = f"refs/remotes/origin/{branch}"
        self._repo: git.Repo | None = None
        self._version: str | None = None
        self._files: dict[str, RepoFile] = {}
        self._entries: dict[str, _Entry] = {}
        self._read: set[str] = set()  # paths of ``_files`` whose content was read
        self._link_count = 0  # the symlinks in the last tree
        self.last_sync_stats: SyncStats | None = None

    def open(self) -> git.Repo:
        """The bare cache, created on first use (no network)."""
        if self._repo is not None:
            return self._repo
        if _is_local(self.source) and not Path(self.source).exists():
            raise GitSyncError(f"cannot read {self.source}: no such file or directory")
        if (self.git_dir / "HEAD").exists():
            repo = _open_bare(self.git_dir)
        else:
            base = self.git_dir.parent
            try:
                base.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix=".init-", dir=base))
                repo = git.Repo.init(tmp, bare=True)
                _run(repo, ["config", "--", "remote.origin.url", self.source])
                _run(repo, ["config", "gc.autoDetach", "false"])
            except (OSError, git.GitCommandError) as exc:
                raise CacheError(base, exc) from None
            repo.close()
            try:
                tmp.rename(self.git_dir)  # atomic: a crash never leaves a half-made cache
            except OSError:  # another process made it first
                _remove_tree(tmp)
            repo = _open_bare(self.git_dir)
        self._repo = repo
        return repo

    def fetch(self) -> str:
        """Fetch the branch; the SHA of its tip."""
        repo = self.open()
        sha = _fetch(repo, self.source, self.branch, self.tracking, self.fetch_timeout)
        if sha is None:
            raise GitSyncError(f"branch {self.branch!r} not found in {redact(self.source)}")
        return sha

    def sync(self) -> RepoSnapshot:
        """Fetch and read the committed tree at the branch tip; ``version`` is the commit SHA.

        Incremental: an unchanged tip reads nothing; a new one reads only the blobs whose
        path was added or changed since the previous sync (see ``last_sync_stats``)."""
        sha = self.fetch()
        return self.snapshot(sha)

    def snapshot(self, sha: str) -> RepoSnapshot:
        """The tree at commit ``sha`` (already fetched), diffed against the previous one."""
        if not _COMMIT_NAME.fullmatch(sha):
            raise GitSyncError(f"{sha[:80]!r} is not a commit name")
        repo = self.open()
        previous = self._version
        if previous == sha:
            self.last_sync_stats = SyncStats(sha, previous, False, 0, 0, 0, 0)
            return RepoSnapshot(
                files=dict(self._files), version=sha, changes=SnapshotChanges(sha, frozenset())
            )
        old = self._entries if previous is not None else {}
        changes = self._diff(repo, previous, sha, old) if previous is not None else None
        if changes is not None:  # the change only (O(changed))
            entries, added, modified, deleted = changes
            links = self._link_count
            links -= sum(old[p].mode == _LINK_MODE for p in (*modified, *deleted))
            links += sum(entries[p].mode == _LINK_MODE for p in (*added, *modified))
        else:
            try:
                entries = _ls_tree(repo, sha)
            except git.GitCommandError as err:
                raise GitSyncError(f"cannot read commit {sha[:12]}: {_reason(err)}") from None
            added = [p for p in entries if p not in old]
            modified = [p for p in entries if p in old and old[p] != entries[p]]
            deleted = [p for p in old if p not in entries]
            links = sum(e.mode == _LINK_MODE for e in entries.values())
        # First-commit times: incremental (added paths only) along a fast-forward; the
        # whole history again when the branch was rewritten or on the first sync.
        times: Mapping[str, datetime]
        ancestor, merged = _range(repo, previous, sha) if previous is not None else (False, False)
        full = not ancestor
        retimed: list[str] = []  # unchanged paths with an earlier first-commit time
        if full or previous is None:
            times = first_commit_times(repo, sha)
            keep: dict[str, RepoFile] = {}
            for path, f in self._files.items():
                if path in entries and path not in modified:
                    keep[path] = _with_time(f, times.get(path))
            have = self._read.intersection(keep)  # unchanged, content read
        else:
            # the paths a new commit added: those added since the last tree, and any a
            # merged branch added (its commit may be older than the main line's add; along
            # one line, a path added again keeps its first time)
            lookup = set(added)
            if merged:
                lookup.update(p for p in _paths_added(repo, previous, sha) if p in entries)
            times = first_commit_times(repo, sha, lookup) if lookup else {}
            # the last files in their order, those modified replaced in place below
            keep = dict(self._files)
            for path in deleted:
                keep.pop(path, None)
            for path in lookup.difference(added, modified):
                if (f := _with_time(keep[path], times.get(path))) is not keep[path]:
                    keep[path] = f
                    retimed.append(path)
            have = self._read.difference(modified, deleted)
        files = keep
        blobs = 0
        for path in (*added, *modified):
            entry = entries[path]
            first = times.get(path) if (full or path in times) else self._first(path)
            files[path] = read_blob_file(
                repo, path, entry.mode, bytes.fromhex(entry.sha), first, content=False
            )
            blobs += entry.mode == git.Blob.link_mode
        hint: SnapshotChanges | None = None
        if not full and not links and not self._link_count:
            # no symlink before or now: the loader reads every config file, so those added
            # or changed are the blobs to read (read_needed would resolve the whole tree),
            # and every file not added, modified or deleted is the last snapshot's
            fresh = [
                p
                for p in (*added, *modified)
                if is_config_path(p) and not check_path(p) and entries[p].mode != _GITLINK_MODE
            ]
            for path in fresh:
                files[path] = _with_content(files[path], read_blob(repo, _binsha(entries, path)))
            self._read = have.union(fresh)
            blobs += len(fresh)
            if previous is not None:
                hint = SnapshotChanges(previous, frozenset((*added, *modified, *deleted, *retimed)))
        else:
            shas = {path: bytes.fromhex(e.sha) for path, e in entries.items()}
            self._read, read = read_needed(repo, files, shas, have)
            blobs += read
        self._link_count = links
        # sorted on a full read; after a diff, the last order with the paths added after
        # it (no reader depends on the order: they sort)
        self._files = dict(sorted(files.items())) if full or changes is None else files
        self._entries = entries
        self._version = sha
        self.last_sync_stats = SyncStats(
            sha, previous, previous is None, blobs, len(added), len(modified), len(deleted)
        )
        return RepoSnapshot(files=dict(self._files), version=sha, changes=hint)

    @staticmethod
    def _diff(
        repo: git.Repo, previous: str, sha: str, old: Mapping[str, _Entry]
    ) -> tuple[dict[str, _Entry], list[str], list[str], list[str]] | None:
        """``_diff_tree`` from the last commit read, or None when git cannot diff them (the
        last commit pruned from the cache): the whole tree is listed then."""
        try:
            return _diff_tree(repo, previous, sha, old)
        except git.GitCommandError:
            return None

    def _first(self, path: str) -> datetime | None:
        f = self._files.get(path)
        return f.first_commit_time if f is not None else None

    def verify_signatures(self, good: str | None, tip: str, signers: str) -> str:
        """:func:`verify_signatures` in the cache (both commits already fetched)."""
        return verify_signatures(self.open(), good, tip, signers)

    def blame(self, rev: str, path: str) -> list[BlameLine]:
        """``git blame`` of ``path`` at ``rev`` in the cache (already fetched)."""
        return blame(self.open(), rev, path)


# How git reads a commit's signature here: SSH signatures only, checked against the
# allowed-signers file given; an OpenPGP or X.509 signature can never verify (the host's
# keyrings are not a trust source), so it reads as "cannot be checked".
_SSH_ONLY = ["-c", "gpg.program=false", "-c", "gpg.x509.program=false"]
_SIGNED_BY = "%G?%x1f%GK"


def verify_signatures(repo: git.Repo, good: str | None, tip: str, signers: str) -> str:
    """Whether the commits from ``good`` (the last good config) to ``tip`` are all signed
    by allowed keys: "" when they are, else the first refusal, one line.

    The commits checked are those ``tip`` reaches and ``good`` does not, parents first.
    Each must carry an SSH signature that verifies (``git verify-commit``) against the
    allowed-signers file ``signers`` (a path in the repo) as it is in the tree of its
    first parent when that parent is one of these commits itself, else as it is at
    ``good``. So a change to the file takes effect for the commits after it, and is itself
    checked against the keys allowed before it: a rotation (a commit signed by the old key
    adds the new one) and the commits signed by the new key can arrive in one push.

    With no ``good`` (no config in force yet: a first start), ``tip`` alone is checked,
    against the file as of its first parent (its own, for a first commit)."""
    if good == tip:
        return ""
    if good is None:
        try:
            parents = _run(repo, ["rev-list", "--parents", "-n1", tip]).split()[1:]
        except git.GitCommandError as err:
            return f"cannot read commit {tip[:12]}: {_reason(err)}"
        base = parents[0] if parents else tip
        with tempfile.TemporaryDirectory(prefix="reconciler-signers-") as tmp:
            path = _signers_file(repo, base, signers, Path(tmp) / "allowed")
            if path is None:
                return _no_signers(signers, base, tip)
            return _refusal(repo, tip, path, signers, base)
    try:
        listed = _run(repo, ["rev-list", "--topo-order", "--reverse", "--parents", tip, f"^{good}"])
    except git.GitCommandError as err:
        return f"cannot list the commits from {good[:12]} to {tip[:12]}: {_reason(err)}"
    new: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="reconciler-signers-") as tmp:
        files: dict[str, Path | None] = {}  # per base commit: its allowed-signers file
        for line in listed.split("\n"):
            if not line.strip():
                continue
            commit, *parents = line.split()
            base = parents[0] if parents and parents[0] in new else good
            if base not in files:
                files[base] = _signers_file(repo, base, signers, Path(tmp) / base)
            path = files[base]
            if path is None:
                return _no_signers(signers, base, commit)
            refusal = _refusal(repo, commit, path, signers, base)
            if refusal:
                return refusal
            new.add(commit)
    return ""


def head_signature(path: Path, signers: str) -> str | None:
    """Whether the commit checked out in the repository at ``path`` (its top) is signed
    by a key of ``signers`` as of its first parent (its own, for a first commit): "" when
    it is, else why not, one line; None when ``path`` holds no commit to check (not the
    top of a repository, or no commit yet). For ``validate``: the files it judges are
    the working tree's, so this says what ``run`` would make of ``HEAD``."""
    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    try:
        with repo:
            try:
                head = _run(repo, ["rev-parse", "--verify", "--quiet", "HEAD"]).strip()
            except git.GitCommandError:
                return None
            return verify_signatures(repo, None, head, signers) if head else None
    except GitSyncError as err:
        return str(err)


def _no_signers(signers: str, base: str, commit: str) -> str:
    return f"{signers} does not exist at commit {base[:12]}: no key may sign {commit[:12]}"


def _signers_file(repo: git.Repo, commit: str, signers: str, out: Path) -> Path | None:
    """A temporary copy of the allowed-signers file of ``commit``, or None without one."""
    try:
        sha = _run(repo, ["rev-parse", "--verify", "--quiet", f"{commit}:{signers}"]).strip()
    except git.GitCommandError:
        return None
    if not sha:
        return None
    try:
        out.write_bytes(read_blob(repo, bytes.fromhex(sha)))
    except (RevisionError, ValueError, git.GitCommandError):
        return None
    return out


def _refusal(repo: git.Repo, commit: str, signers: Path, path: str, base: str) -> str:
    try:
        shown = _run(
            repo,
            [
                *_SSH_ONLY,
                "-c",
                f"gpg.ssh.allowedSignersFile={signers}",
                "show",
                "-s",
                f"--format={_SIGNED_BY}",
                commit,
            ],
        ).strip()
    except git.GitCommandError as err:
        return f"cannot check the signature of commit {commit[:12]}: {_reason(err)}"
    status, key = [*shown.split("\x1f"), ""][:2]
    short = commit[:12]
    if status == "G":
        return ""
    if status == "N":
        return f"commit {short} is not signed"
    if status == "B":
        return f"commit {short} has a bad signature"
    if status == "U" and key:
        return f"commit {short} is signed by key {key}, not in {path} as of {base[:12]}"
    if status in ("X", "Y", "R"):
        return f"commit {short} is signed by an expired or revoked key {key}".rstrip()
    return f"the signature of commit {short} cannot be checked (only SSH signatures are)"


# Lines blamed per file (a page view): a queue file has a few dozen. GitPython holds the
# whole porcelain output and one object per line: 420 000 empty lines took 400 MB and 20 s.
MAX_BLAME_LINES = 1000


def blame(repo: git.Repo, rev: str, path: str) -> list[BlameLine]:
    """Each of the first ``MAX_BLAME_LINES`` lines of ``path`` at ``rev`` with the commit
    that last changed it. Raises GitSyncError when the file or the revision does not
    exist."""
    try:
        entries = repo.blame(rev, path, L=f"1,{MAX_BLAME_LINES}") or []
    except (git.GitCommandError, ValueError) as err:
        reason = _reason(err) if isinstance(err, git.GitCommandError) else str(err)
        raise GitSyncError(f"cannot blame {path} at {rev[:12]}: {reason}") from None
    out: list[BlameLine] = []
    for entry in entries:
        commit = cast(git.Commit, entry[0])
        lines = cast(list[str | bytes], entry[1])
        summary = commit.summary if isinstance(commit.summary, str) else commit.summary.decode()
        for text in lines:
            line = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
            out.append(
                BlameLine(
                    len(out) + 1,
                    commit.hexsha,
                    str(commit.author.name or ""),
                    _committed(commit),
                    summary,
                    line,
                )
            )
    return out


def _when(seconds: int, iso: str) -> datetime:
    """A commit's time in its committer's zone, or in UTC held within what a datetime can
    be when the commit is dated past year 9999 (git takes any date)."""
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return commit_time(seconds)


def _committed(commit: git.Commit) -> datetime:
    try:
        return commit.committed_datetime
    except (ValueError, OverflowError):
        return commit_time(commit.committed_date)


def _with_content(f: RepoFile, content: bytes) -> RepoFile:
    return replace(f, content=content)


def _binsha(entries: Mapping[str, _Entry], path: str) -> bytes:
    return bytes.fromhex(entries[path].sha)


def _with_time(f: RepoFile, when: datetime | None) -> RepoFile:
    if f.first_commit_time == when:
        return f
    return replace(f, first_commit_time=when)  # every other field kept (``submodule``)


def _default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "dispatch-reconciler" / "repos"


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --- the status branch ------------------------------------------------------------------


_PACK_AT = 100  # blobs: from here one pack, below loose objects (git's unpackLimit)


def _blob_pack(blobs: Iterable[bytes]) -> bytes:
    """A version 2 pack of whole (undeltified) blob objects."""
    parts = [b""]
    count = 0
    for data in blobs:
        size = len(data)
        byte = (3 << 4) | (size & 0x0F)  # type 3 = blob, low four bits of the size
        size >>= 4
        header = bytearray()
        while size:
            header.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        header.append(byte)
        parts.append(bytes(header) + zlib.compress(data, 1))
        count += 1
    parts[0] = b"PACK" + struct.pack(">II", 2, count)
    body = b"".join(parts)
    return body + hashlib.sha1(body).digest()


@dataclass(frozen=True)
class Author:
    name: str = "dispatch-reconciler"
    email: str = "reconciler@dispatch.invalid"


def _fast_import_path(path: str) -> bytes:
    """``path`` as ``git fast-import`` reads it: C-quoted when it starts with a quote or
    holds a quote, a backslash or a line break."""
    if not any(c in path for c in '"\\\n'):
        return path.encode()
    quoted = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{quoted}"'.encode()


class StatusBranch:
    """Status files on a branch of the config repo, written by plumbing and pushed without
    force. ``repo`` is a :class:`ConfigRepo` (pushes to its source) or the path of a bare
    clone (pushes to ``remote``, ``origin`` by default)."""

    def __init__(
        self,
        repo: ConfigRepo | Path | str,
        remote: str | None = None,
        branch: str = "reconciler/status",
        author: Author | None = None,
        *,
        max_attempts: int = 8,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        fetch_timeout: float | None = 120.0,
        source_ref: str | None = None,
    ) -> None:
        if isinstance(repo, ConfigRepo):
            self._git = repo.open()
            # ``status.repo``: another repo (a URL or a path) than the config repo's
            self.remote = _normal_source(remote) if remote else repo.source
        else:
            self._git = _open_bare(Path(repo))
            self.remote = remote or "origin"
        self.branch = branch
        self.author = author or Author()
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.fetch_timeout = fetch_timeout
        # Read from another ref of the remote, e.g. a clone's refs/remotes/origin/<branch>.
        self.source_ref = source_ref or branch
        self.tracking = f"refs/reconciler/status-tip/{branch}"
        self.attempts = 0  # pushes tried by the last write (1 when nobody raced us)
        self.last_tip: str | None = None  # the remote tip seen by the last fetch
        self._object_format: str | None = None

    def fetch(self) -> str | None:
        """The SHA of the remote tip of the status branch, or None if it does not exist."""
        self.last_tip = _fetch(
            self._git,
            self.remote,
            self.source_ref,
            self.tracking,
            self.fetch_timeout,
            from_shallow=True,  # PR-plan CI's shallow fetch of the status tip
        )
        return self.last_tip

    def read(self) -> dict[str, bytes]:
        """The files under ``status/`` at the remote tip (empty when there is no branch)."""
        return self.files_at(self.fetch())

    def files_at(
        self, tip: str | None, since: tuple[str, Mapping[str, bytes]] | None = None
    ) -> dict[str, bytes]:
        """The files under ``status/`` at ``tip``, a commit fetched (None: no branch). With
        ``since``, an earlier commit and its files, only the blobs that changed between the
        two are read (``git diff-tree``), so a follower reads a leader's write at its cost."""
        if tip is None:
            return {}
        if since is not None:
            old, known = since
            now = dict(known)
            entries = {path: _Entry(0, "") for path in known}
            try:
                moved, added, modified, deleted = _diff_tree(self._git, old, tip, entries)
            except git.GitCommandError:  # the earlier commit is gone (pruned): read it all
                return self.files_at(tip)
            for path in deleted:
                now.pop(path, None)
            for path in (*added, *modified):
                if not path.startswith("status/"):
                    continue
                entry = moved[path]
                if entry.mode == _LINK_MODE:
                    now.pop(path, None)  # never read, as below
                else:
                    now[path] = read_blob(self._git, bytes.fromhex(entry.sha))
            return now
        out: dict[str, bytes] = {}
        for path, entry in _ls_tree(self._git, tip, "status/").items():
            if entry.mode not in (_LINK_MODE, _GITLINK_MODE):
                # At most the loader's limit + 1 byte: a huge file is refused, not read.
                out[path] = read_blob(self._git, bytes.fromhex(entry.sha))
        return out

    def file_history(
        self, path: str, *older: str, limit: int = 50
    ) -> list[tuple[str, datetime, bytes]]:
        """Versions of one status file, oldest first: (commit, commit time, content), from
        the last fetched or written tip (no network); at most the newest ``limit``.
        ``older``: the paths the file had in older layouts (``record_paths``): a commit's
        version is at the first of ``path, *older`` it holds."""
        try:
            if not _run(self._git, ["rev-parse", "--verify", "--quiet", self.tracking]).strip():
                return []
        except git.GitCommandError:
            return []  # never fetched nor written: no history here
        try:
            log = _run(
                self._git,
                ["log", f"-n{limit}", "--format=%H %ct %cI", self.tracking, "--", path, *older],
            )
        except git.GitCommandError as err:
            raise GitSyncError(f"cannot read the history of {path}: {_reason(err)}") from None
        out: list[tuple[str, datetime, bytes]] = []
        for line in reversed(log.split("\n")):
            if not line.strip():
                continue
            sha, _, when = line.partition(" ")
            seconds, _, iso = when.partition(" ")
            blob = next(filter(None, (self._blob_at(sha, p) for p in (path, *older))), "")
            if not blob:
                continue  # deleted in that commit
            content = read_blob(self._git, bytes.fromhex(blob))  # capped
            out.append((sha, _when(int(seconds), iso), content))
        return out

    def _blob_at(self, commit: str, path: str) -> str:
        """The blob SHA of ``path`` at ``commit``; "" when the commit has no such file."""
        try:
            return _run(self._git, ["rev-parse", "--verify", "--quiet", f"{commit}:{path}"]).strip()
        except git.GitCommandError:
            return ""

    def commits_changing(self, path: str) -> list[str]:
        """The commits of the last fetched tip that changed ``path``, oldest first (no
        network; none when nothing was fetched)."""
        try:
            if not _run(self._git, ["rev-parse", "--verify", "--quiet", self.tracking]).strip():
                return []
            out = _run(self._git, ["rev-list", "--reverse", self.tracking, "--", path])
        except git.GitCommandError:
            return []
        return out.split()

    def commit_on_branch(self, name: str) -> str | None:
        """The full SHA of the commit ``name`` (a SHA or an abbreviation of one) when it is
        on the last fetched tip's history; None when it is not, or is no commit."""
        try:
            sha = _run(self._git, ["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"])
            sha = sha.strip()
            if not sha:
                return None
            _run(self._git, ["merge-base", "--is-ancestor", sha, self.tracking])
        except git.GitCommandError:
            return None
        return sha

    def write(self, changes: Mapping[str, bytes | None], message: str) -> str | None:
        """Commit ``changes`` (``None`` deletes) on the remote tip and push; the new commit's
        SHA, or None when the tree would not change (no commit is made)."""
        if self.source_ref != self.branch:
            raise GitSyncError(f"status read from {self.source_ref} is read-only")
        blobs = self._store({p: data for p, data in changes.items() if data is not None})
        self.attempts = 0
        last = ""
        for attempt in range(self.max_attempts):
            tip = self.fetch()
            commit = self._build(tip, changes, blobs, message)
            if commit is None:
                return None
            self.attempts = attempt + 1
            rejected = self._push(commit)
            if rejected is None:
                _run(self._git, ["update-ref", self.tracking, commit])
                self.last_tip = commit
                return commit
            last = rejected
            delay = min(self.max_backoff, self.backoff * 2**attempt)
            self.sleep(delay * (0.5 + random.random() / 2))
        raise GitSyncError(
            f"cannot push {self.branch} to {redact(self.remote)} after "
            f"{self.max_attempts} attempts: {last}"
        )

    def write_joined(
        self,
        join: Callable[[Mapping[str, bytes]], Mapping[str, bytes | None]],
        message: str,
    ) -> tuple[str | None, dict[str, bytes]]:
        """As ``write``, with the changes made by ``join`` from the files at the remote tip,
        again at each attempt: a push that lost a race is joined with the new tip, never
        forced (a shard's write beside the others'). The new commit's SHA (None when
        nothing changed) and the files it holds."""
        if self.source_ref != self.branch:
            raise GitSyncError(f"status read from {self.source_ref} is read-only")
        self.attempts = 0
        last = ""
        known: tuple[str, dict[str, bytes]] | None = None
        for attempt in range(self.max_attempts):
            tip = self.fetch()
            files = self.files_at(tip, known)
            if tip is not None:
                known = (tip, files)
            changes = join(files)
            merged = dict(files)
            for path, data in changes.items():
                if data is None:
                    merged.pop(path, None)
                else:
                    merged[path] = data
            blobs = self._store({p: data for p, data in changes.items() if data is not None})
            commit = self._build(tip, changes, blobs, message) if changes else None
            if commit is None:
                return None, merged
            self.attempts = attempt + 1
            rejected = self._push(commit)
            if rejected is None:
                _run(self._git, ["update-ref", self.tracking, commit])
                self.last_tip = commit
                return commit, merged
            last = rejected
            delay = min(self.max_backoff, self.backoff * 2**attempt)
            self.sleep(delay * (0.5 + random.random() / 2))
        raise GitSyncError(
            f"cannot push {self.branch} to {redact(self.remote)} after "
            f"{self.max_attempts} attempts: {last}"
        )

    def retain(self, retention: Retention, now: float | None = None) -> Retained:
        """Bound the branch's history: the commits older than ``retention`` allows are
        squashed into one root commit holding the tree of the newest of them, and the kept
        commits are replayed on it (same trees, messages, authors and dates), so the tip's
        tree is unchanged. Pushed with a lease on this one ref: when the remote moved
        meanwhile (another replica wrote), nothing is pushed and ``lost_lease`` says so,
        for a later pass. Refused (``RetentionRefused``) when any commit on the branch was
        not committed by the reconciler's identity, or the history is not linear."""
        if self.source_ref != self.branch:
            raise GitSyncError(f"status read from {self.source_ref} is read-only")
        if not retention:
            return Retained()
        tip = self.fetch()
        if tip is None:
            return Retained()
        commits = []  # newest first: (sha, committer time)
        for line in _run(self._git, ["log", f"--format={_COMMIT_LOG}", tip]).splitlines():
            if not line:
                continue
            sha, parents, name, email, when = line.split("\0")
            if (name, email) != (self.author.name, self.author.email):
                raise RetentionRefused(
                    f"status retention refused: commit {sha[:12]} on {self.branch} was "
                    f"committed by {name} <{email}>, not {self.author.name} "
                    f"<{self.author.email}>: only the reconciler's own history is rewritten"
                )
            if len(parents.split()) > 1:
                raise RetentionRefused(
                    f"status retention refused: commit {sha[:12]} on {self.branch} is a "
                    "merge: only a linear history of the reconciler's commits is rewritten"
                )
            commits.append((sha, int(when)))
        keep = len(commits)
        if retention.max_commits is not None:
            keep = min(keep, max(retention.max_commits - 1, 0))
        if retention.keep_days is not None:
            cutoff = (time.time() if now is None else now) - retention.keep_days * 86400
            recent = 0
            while recent < len(commits) and commits[recent][1] >= cutoff:
                recent += 1
            keep = min(keep, recent)
        squashed = commits[keep:]
        if len(squashed) <= 1:
            return Retained()  # at most a root commit is older: nothing to squash
        newest_old = squashed[0][0]
        message = (
            f"status history squashed: {len(squashed)} commits up to "
            f"{newest_old[:12]} ({self.branch} retention)\n"
        ).encode()
        base = self._replay(newest_old, message, [sha for sha, _ in reversed(commits[:keep])])
        if not self._lease_push(base, tip):
            return Retained(lost_lease=True)
        _run(self._git, ["update-ref", self.tracking, base])
        self.last_tip = base
        return Retained(squashed=len(squashed), kept=keep, tip=base)

    def _replay(self, root: str, message: bytes, kept: list[str]) -> str:
        """One ``git fast-import`` (not a process per commit: a week of a busy fleet's
        status is thousands of commits): a root commit with ``root``'s tree, author,
        committer and dates and ``message``, then each of ``kept`` (oldest first) on it
        with its own tree, message, author, committer and dates. The last commit's SHA."""
        raw = self._objects([root, *kept])
        trees = {sha: _commit_tree(raw[sha]) for sha in (root, *kept)}
        listed = self._objects(sorted(set(trees.values())))
        width = 20 if self._sha1() else 32
        stream = bytearray()
        ref = f"refs/reconciler/retain/{self.branch}"
        for mark, sha in enumerate([root, *kept], 1):
            head, _, body = raw[sha].partition(b"\n\n")
            who = [
                line for line in head.split(b"\n") if line.startswith((b"author ", b"committer "))
            ]
            text = message if mark == 1 else body
            stream += b"commit %s\nmark :%d\n" % (ref.encode(), mark)
            stream += b"\n".join(who) + b"\n"
            stream += b"data %d\n" % len(text) + text + b"\n"
            if mark > 1:
                stream += b"from :%d\n" % (mark - 1)
            stream += b"deleteall\n"
            for mode, name, entry in _tree_entries(listed[trees[sha]], width):
                stream += b"M %06d %s %s\n" % (int(mode), entry.hex().encode(), _quoted(name))
            stream += b"\n"
        with tempfile.TemporaryDirectory(prefix="reconciler-marks-") as tmp:
            marks = Path(tmp) / "marks"
            # the root commit must not take the ref's old value as its parent
            _run(self._git, ["update-ref", "-d", ref])
            _run(
                self._git,
                ["fast-import", "--quiet", "--done", f"--export-marks={marks}"],
                stdin=bytes(stream) + b"done\n",
            )
            last = dict(line.split(" ", 1) for line in marks.read_text().split("\n") if line)
        _run(self._git, ["update-ref", "-d", ref])
        return last[f":{len(kept) + 1}"]

    def _objects(self, shas: list[str]) -> dict[str, bytes]:
        """The raw content of each object, read by one ``git cat-file --batch``."""
        with tempfile.TemporaryFile() as fh:
            fh.write("".join(f"{sha}\n" for sha in shas).encode())
            fh.seek(0)
            out: bytes = self._git.git.execute(
                ["git", "cat-file", "--batch"],
                env=_ENV,
                istream=fh,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
            )
        found: dict[str, bytes] = {}
        at = 0
        for sha in shas:
            eol = out.index(b"\n", at)
            header = out[at:eol].split(b" ")
            if len(header) != 3:
                raise GitSyncError(f"cannot read object {sha[:12]}: {out[at:eol]!r}")
            size = int(header[2])
            found[sha] = out[eol + 1 : eol + 1 + size]
            at = eol + 1 + size + 1
        return found

    def _lease_push(self, commit: str, expected: str) -> bool:
        """Replace the branch with ``commit`` only if the remote tip is still ``expected``;
        False when it moved. Any other failure raises GitSyncError."""
        ref = f"refs/heads/{self.branch}"
        try:
            push = ["-c", "pack.window=0", "push", "--porcelain", "--quiet"]
            lease = f"--force-with-lease={ref}:{expected}"
            _run(self._git, [*push, lease, "--", self.remote, f"{commit}:{ref}"])
        except git.GitCommandError as err:
            text = str(err)
            if "stale info" in text or _LOST_RACE.search(text):
                return False
            raise GitSyncError(f"cannot push to {redact(self.remote)}: {_reason(err)}") from None
        return True

    def _store(self, blobs: Mapping[str, bytes]) -> dict[str, str]:
        """Write the blobs; the SHA of each, by path. Many blobs go in one pack built here
        and indexed by ``git index-pack`` (no delta search: status files are small), a few
        through ``git fast-import`` (loose objects)."""
        if not blobs:
            return {}
        unique = list(dict.fromkeys(blobs.values()))
        if len(unique) >= _PACK_AT and self._sha1():
            shas = {d: hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest() for d in unique}
            _run(self._git, ["index-pack", "--stdin"], stdin=_blob_pack(unique))
        else:
            shas = self._fast_import(unique)
        return {p: shas[data] for p, data in blobs.items()}

    def _sha1(self) -> bool:
        if self._object_format is None:
            self._object_format = _run(self._git, ["rev-parse", "--show-object-format"]).strip()
        return self._object_format == "sha1"

    def _fast_import(self, unique: list[bytes]) -> dict[bytes, str]:
        stream = bytearray()
        for mark, data in enumerate(unique, 1):
            stream += b"blob\nmark :%d\ndata %d\n" % (mark, len(data)) + data + b"\n"
        with tempfile.TemporaryDirectory(prefix="reconciler-marks-") as tmp:
            path = Path(tmp) / "marks"
            _run(
                self._git,
                ["fast-import", "--quiet", "--done", f"--export-marks={path}"],
                stdin=bytes(stream) + b"done\n",
            )
            marks = dict(line.split(" ", 1) for line in path.read_text().split("\n") if line)
        return {data: marks[f":{mark}"] for mark, data in enumerate(unique, 1)}

    def _build(
        self,
        tip: str | None,
        changes: Mapping[str, bytes | None],
        blobs: Mapping[str, str],
        message: str,
    ) -> str | None:
        """One commit on ``tip`` (an orphan when None) with ``changes`` applied; None when
        its tree is the tip's.

        Built by ``git fast-import`` from the tip's tree: it reads and writes only the
        trees on the changed paths, where an index (``read-tree``, ``update-index``,
        ``write-tree``) passes over every file of the branch at each write, ~0.15 s of
        git's CPU at 100,000 status files against ~0.04 s."""
        if tip is None and not blobs:
            return None  # only deletions, on a branch that does not exist yet
        name, email = self.author.name, self.author.email
        text = message.encode()
        # fast-import commits on a ref: one of this thread's own, so that two builds never
        # contend for its lock, and reset again at the end, so that none is left (the
        # commit is kept: the push and then the tracking ref name it)
        ref = f"refs/reconciler/status-build/{os.getpid()}-{threading.get_ident()}".encode()
        stream = bytearray(
            b"reset %s\ncommit %s\nmark :1\n" % (ref, ref)
            + f"author {name} <{email}> now\ncommitter {name} <{email}> now\n".encode()
            + b"data %d\n" % len(text)
            + text
            + b"\n"
        )
        if tip is not None:
            stream += b"from %s\n" % tip.encode()
        for path, data in sorted(changes.items()):
            where = _fast_import_path(path)
            if data is None:
                stream += b"D %s\n" % where
            else:
                stream += b"M 100644 %s %s\n" % (blobs[path].encode(), where)
        stream += b"\nreset %s\n\ndone\n" % ref
        with tempfile.TemporaryDirectory(prefix="reconciler-marks-") as tmp:
            marks = Path(tmp) / "marks"
            _run(
                self._git,
                [
                    "fast-import",
                    "--quiet",
                    "--done",
                    "--force",
                    "--date-format=now",
                    f"--export-marks={marks}",
                ],
                stdin=bytes(stream),
            )
            commit = marks.read_text().split()[1]
        if tip is not None:
            trees = _run(self._git, ["rev-parse", f"{commit}^{{tree}}", f"{tip}^{{tree}}"])
            new_tree, tip_tree = trees.split()
            if new_tree == tip_tree:
                return None
        return commit

    def _push(self, commit: str) -> str | None:
        """Push without force; None on success, the rejection reason on a lost race.
        Any other failure (auth, unreachable, hook refused) raises GitSyncError."""
        try:
            refspec = f"{commit}:refs/heads/{self.branch}"
            # no delta search: it costs seconds on thousands of small status files
            push = ["-c", "pack.window=0", "push", "--porcelain", "--quiet"]
            _run(self._git, [*push, "--", self.remote, refspec])
        except git.GitCommandError as err:
            text = str(err)
            if _LOST_RACE.search(text):
                return "rejected as non-fast-forward (someone pushed first)"
            raise GitSyncError(f"cannot push to {redact(self.remote)}: {_reason(err)}") from None
        return None


@dataclass(frozen=True)
class Retention:
    """How much of the status branch's history to keep: the commits of the last
    ``keep_days`` days and at most ``max_commits`` commits (either may be None); the
    older ones are squashed into one root commit."""

    keep_days: float | None = None
    max_commits: int | None = None

    def __bool__(self) -> bool:
        return self.keep_days is not None or self.max_commits is not None


@dataclass(frozen=True)
class Retained:
    """What one retention pass did: ``squashed`` commits made one (0: nothing to do),
    ``kept`` replayed on it, ``tip`` the new tip; ``lost_lease`` when the remote moved
    during the pass (nothing was pushed: try again later)."""

    squashed: int = 0
    kept: int = 0
    tip: str | None = None
    lost_lease: bool = False


class RetentionRefused(GitSyncError):
    """The status branch holds a commit the reconciler did not make: it is not rewritten."""


_COMMIT_LOG = "%H%x00%P%x00%cn%x00%ce%x00%ct"


def _commit_tree(raw: bytes) -> str:
    """The tree of a raw commit object."""
    first = raw.split(b"\n", 1)[0]
    if not first.startswith(b"tree "):
        raise GitSyncError("cannot read a status commit: it names no tree")
    return first[5:].decode()


def _tree_entries(raw: bytes, width: int) -> list[tuple[bytes, bytes, bytes]]:
    """The entries of a raw tree object: (mode, name, object id)."""
    out = []
    at = 0
    while at < len(raw):
        space = raw.index(b" ", at)
        nul = raw.index(b"\0", space)
        out.append((raw[at:space], raw[space + 1 : nul], raw[nul + 1 : nul + 1 + width]))
        at = nul + 1 + width
    return out


def _quoted(name: bytes) -> bytes:
    """A path as ``git fast-import`` reads it: C-quoted when it must be."""
    if not any(c in name for c in (b'"', b"\\", b"\n")) and not name.startswith(b" "):
        return name
    body = name.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
    return b'"' + body + b'"'


# --- a change, committed from a working clone (submit, rerun) ---------------------------


class PushRefused(GitSyncError):
    """The remote refused the push (a protected branch, a hook, someone pushed first)."""


_REFUSED = re.compile(
    r"\[rejected\]|\[remote rejected\]|protected branch|non-fast-forward|fetch first"
    r"|denied|pre-receive hook declined|hook declined|refusing to update"
)


def _tracking_spec(branch: str) -> str:
    return f"+refs/heads/{branch}:refs/remotes/origin/{branch}"


class WorkClone:
    """A working clone of the config repo: a user's own clone, or one kept in the cache
    for ``--repo URL``. Unlike :class:`ConfigRepo` it has a working tree: a change is
    written there, committed as the local Git identity and pushed."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._git = git.Repo(self.path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise GitSyncError(f"{self.path} is not a Git repository") from None
        if self._git.bare:
            raise GitSyncError(f"{self.path} is a bare repository: submit needs a working clone")
        self.path = Path(self._git.working_tree_dir or self.path)

    @classmethod
    def cached(cls, source: str, branch: str, cache_dir: Path | None = None) -> WorkClone:
        """``source`` cloned into the cache (once), reset to the tip of ``branch``."""
        source = _normal_source(source)
        base = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
        path = base / f"{_cache_key(source)}.work"
        cmd = git.Git(str(base))
        try:
            if not (path / ".git").exists():
                try:
                    base.mkdir(parents=True, exist_ok=True)
                    tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=base))
                except OSError as exc:
                    raise CacheError(base, exc) from None
                cmd.execute(
                    ["git", "clone", "-q", "--no-tags", "-b", branch, "--", source, str(tmp / "w")],
                    env=_ENV,
                )
                (tmp / "w").rename(path)
                _remove_tree(tmp)
            work = git.Git(str(path))
            for args in (
                [
                    "fetch",
                    "-q",
                    "--no-tags",
                    "origin",
                    f"+refs/heads/{branch}:refs/remotes/origin/{branch}",
                ],
                ["checkout", "-q", "-B", branch, f"refs/remotes/origin/{branch}"],
                ["reset", "-q", "--hard", f"refs/remotes/origin/{branch}"],
                ["clean", "-qfdx"],
            ):
                work.execute(["git", *args], env=_ENV)
        except git.GitCommandError as err:
            raise GitSyncError(f"cannot clone {redact(source)}: {_reason(err)}") from None
        return cls(path)

    def _do(self, *args: str) -> str:
        try:
            return _run(self._git, list(args))
        except git.GitCommandError as err:
            raise GitSyncError(f"git {args[0]} in {self.path}: {_reason(err)}") from None

    def head(self) -> str:
        return self._do("rev-parse", "--verify", "HEAD").strip()

    def current_branch(self) -> str | None:
        try:
            name = _run(self._git, ["symbolic-ref", "--quiet", "--short", "HEAD"]).strip()
        except git.GitCommandError:
            return None  # detached
        return name or None

    def uncommitted(self) -> list[str]:
        """Paths with uncommitted changes (untracked files included)."""
        out = self._do("status", "--porcelain=v1", "-z", "--untracked-files=all")
        return [entry[3:] for entry in out.split("\0") if len(entry) > 3]

    def tracked(self, path: str) -> bool:
        return bool(self._do("ls-files", "--", path).strip())

    def fetch_status(self, branch: str) -> None:
        """Bring the remote's status branch, if there is one (its plan's memory)."""
        if self.remote_url() is None:
            return
        try:
            _run(self._git, ["fetch", "-q", "--no-tags", "origin", _tracking_spec(branch)])
        except git.GitCommandError:
            return  # no status branch yet: every operation counts as Queued

    def remote_tip(self, branch: str) -> str | None:
        """Fetch ``branch`` of origin; its tip, or None when origin has no such branch."""
        try:
            _run(self._git, ["fetch", "-q", "--no-tags", "origin", _tracking_spec(branch)])
        except git.GitCommandError as err:
            if "couldn't find remote ref" in _reason(err):
                return None
            raise GitSyncError(f"cannot fetch origin {branch}: {_reason(err)}") from None
        return self._do("rev-parse", "--verify", f"refs/remotes/origin/{branch}").strip()

    def remote_url(self) -> str | None:
        try:
            return _run(self._git, ["remote", "get-url", "origin"]).strip() or None
        except git.GitCommandError:
            return None

    def commit(self, changes: Mapping[str, bytes], message: str) -> str:
        """Write ``changes`` into the working tree and commit them (and only them) as the
        local Git identity; on any failure the working tree is put back as it was."""
        written: list[str] = []
        try:
            for rel, content in changes.items():
                target = self.path / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                written.append(rel)
            self._do("add", "--", *written)
            self._do("commit", "-q", "-m", message, "--", *written)
        except (OSError, GitSyncError):
            self._restore(written)
            raise
        return self.head()

    def _restore(self, paths: list[str]) -> None:
        for rel in paths:
            if self.tracked(rel):
                _run(self._git, ["checkout", "-q", "HEAD", "--", rel])
            else:
                with_index = self.path / rel
                _run(self._git, ["rm", "-q", "--cached", "--ignore-unmatch", "--", rel])
                with_index.unlink(missing_ok=True)

    def undo(self, before: str) -> None:
        """Move the current branch (and the working tree) back to ``before``."""
        self._do("reset", "-q", "--keep", before)

    def branch_at(self, name: str, sha: str) -> None:
        self._do("branch", "-f", name, sha)

    def push(self, sha: str, branch: str) -> str:
        """Push ``sha`` to ``branch`` of origin, without force; git's ``remote:`` lines.
        A refusal raises :class:`PushRefused`, any other failure GitSyncError."""
        remote = self.remote_url()
        if remote is None:
            raise GitSyncError(f"{self.path} has no remote 'origin' to push to")
        try:
            self._git.git.execute(
                ["git", "push", "--porcelain", "origin", f"{sha}:refs/heads/{branch}"],
                env=_ENV,
                with_extended_output=True,
            )
        except git.GitCommandError as err:
            text = f"{err.stdout or ''}\n{err.stderr or ''}"
            reason = _reason(err)
            for line in text.splitlines():
                m = re.search(r"\t\[([^\]]+)\](?: \((.*)\))?\s*$", line)
                if m:
                    reason = m.group(1) + (f": {m.group(2)}" if m.group(2) else "")
            said = [
                m.group(1).strip()
                for ln in text.splitlines()
                if (m := re.match(r"^\s*(?:stderr: ')?remote: (.*?)'?$", ln)) and m.group(1).strip()
            ]
            if said:
                reason += f" ({'; '.join(redact(x) for x in said[:3])})"
            if _REFUSED.search(text):
                raise PushRefused(f"push to {redact(remote)} {branch} refused: {reason}") from None
            raise GitSyncError(f"cannot push to {redact(remote)}: {reason}") from None
        return ""
