"""What one compile keeps for the next (``CompileCache``), so that a commit recompiles only
the operations whose inputs changed.

What must live here: the cache and its one rule of reuse. An operation's compile reads the
repo's layout (which names exist where) and some files (its own, its project's, the org's,
its presets', queue's, cluster's and connections'); the index notes each file read. Its
result is reused when the layout is the same and every file it read has the same content
and first-commit time. Anything else compiles again: invalidation is exact by
construction, and ``tests/test_compile_incremental.py`` checks it against a full compile.
Whole-repo checks (references, unique names, namespaces) always run.

The check costs O(changed), not O(operations x files read): ``begin`` diffs the repo
against the last compile's (content and first-commit time of every path, unchanged files
mostly the same objects, so an identity check) and forgets the operations that read a
changed path (an index from each path to its readers); every other kept operation is
reused as is, with its name claims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.core.compile.index import LoadMemo, RepoIndex
from reconciler.core.compile.names import Claim
from reconciler.core.compile.operations import OperationResult
from reconciler.core.load import ParseCache
from reconciler.core.types import ConfigError, RepoFile

_Key = tuple[str, str]  # (project, operation name)


@dataclass(frozen=True, slots=True)
class _Compiled:
    reads: tuple[str, ...]  # the paths its compile read
    result: OperationResult
    claims: tuple[Claim, ...]
    file_errors: tuple[ConfigError, ...]  # the problems loading its own file reported


class CompileCache:
    """Parsed files, loaded files and compiled operations kept between compiles. Owned by
    the caller (the long-running reconciler); pure.

    Of an operation file it keeps only what reuse needs: the result, its name claims and
    the problems its file reported (its content is the snapshot's, compared in ``begin``).
    Its parse (plain data and the position of every node) and its validated model are
    needed only while it compiles, so the parse cache and the load memo hold the files
    operations share (org, projects, presets, queues, clusters, connections), not one entry
    per operation."""

    def __init__(self, parse_cache: ParseCache | None = None) -> None:
        self.parse_cache = parse_cache if parse_cache is not None else ParseCache()
        self.loads = LoadMemo()
        self._layout: tuple[str, ...] | None = None
        self._operations: dict[_Key, _Compiled] = {}
        self._readers: dict[str, set[_Key]] = {}  # path -> the kept operations that read it
        # what the last compile saw: resolved contents and the snapshot's files
        self._contents: Mapping[str, bytes] = {}
        self._files: Mapping[str, RepoFile] = {}
        self.reused = 0
        self.compiled = 0

    def begin(self, repo: RepoIndex) -> None:
        """Start a compile of ``repo``: a changed layout forgets every operation, a changed
        path the operations that read it."""
        layout = repo.layout()
        if layout != self._layout:
            self._operations.clear()
            self._readers.clear()
            self._layout = layout
        else:
            for path in _changed(self._contents, repo.files, self._files, repo.snapshot.files):
                for key in self._readers.pop(path, ()):
                    self._forget(key)
        # before any operation compiles: a compile that fails half-way leaves every kept
        # entry valid against this repo, the next diff's base (copied: the caller may
        # reuse its mapping for the next snapshot)
        self._contents = dict(repo.files)
        self._files = dict(repo.snapshot.files)

    def reusable(self, repo: RepoIndex, project: str, name: str) -> _Compiled | None:
        """The kept result and claims of ``project/name`` (none of its reads changed since
        it was compiled), or None: compile it."""
        entry = self._operations.get((project, name))
        if entry is not None:
            self.reused += 1
        return entry

    def store(
        self,
        project: str,
        name: str,
        reads: Iterable[str],
        result: OperationResult,
        claims: Iterable[Claim],
        file_errors: Iterable[ConfigError] = (),
    ) -> None:
        """Keep ``result`` of compiling ``project/name``, which read the files ``reads``
        (of the repo given to ``begin``), its name claims and the problems loading its own
        file reported."""
        key = (project, name)
        self._forget(key)
        kept = tuple(sorted(reads))
        self._operations[key] = _Compiled(kept, result, tuple(claims), tuple(file_errors))
        for path in kept:
            self._readers.setdefault(path, set()).add(key)
        self.compiled += 1

    def retain(self, files: Mapping[str, object], operations: Iterable[_Key]) -> None:
        """Forget what is no longer in the repo."""
        self.parse_cache.retain(files)
        self.loads.retain(files)
        keep = set(operations)
        for key in [k for k in self._operations if k not in keep]:
            self._forget(key)

    def _forget(self, key: _Key) -> None:
        entry = self._operations.pop(key, None)
        if entry is None:
            return
        for path in entry.reads:
            readers = self._readers.get(path)
            if readers is not None:
                readers.discard(key)
                if not readers:
                    del self._readers[path]


def _changed(
    contents: Mapping[str, bytes],
    new_contents: Mapping[str, bytes],
    files: Mapping[str, RepoFile],
    new_files: Mapping[str, RepoFile],
) -> set[str]:
    """The paths whose resolved content or first-commit time differ (added and removed
    ones included). Unchanged files are mostly the same objects: an identity check."""
    out: set[str] = set()
    for path, content in new_contents.items():
        old = contents.get(path)
        if old is not content and (old is None or old != content):
            out.add(path)
    out.update(path for path in contents if path not in new_contents)
    for path, file in new_files.items():
        before = files.get(path)
        if before is not file and (
            before is None or before.first_commit_time != file.first_commit_time
        ):
            out.add(path)
    out.update(path for path in files if path not in new_files)
    return out
