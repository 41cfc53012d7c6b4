"""What one compile keeps for the next (``CompileCache``), so that a commit recompiles only
the operations whose inputs changed.

What must live here: the cache and its one rule of reuse. An operation's compile reads the
repo's layout (which names exist where) and some files (its own, its project's, the org's,
its presets', queue's, cluster's and connections'); the index notes each file read. Its
result is reused when the layout is the same and every file it read has the same content
and first-commit time. Anything else compiles again: invalidation is exact by
construction, and ``tests/test_compile_incremental.py`` checks it against a full compile.
Whole-repo checks (references, unique names, namespaces) always run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from reconciler.core.compile.index import LoadMemo, RepoIndex
from reconciler.core.compile.operations import OperationResult
from reconciler.core.load import ParseCache

# A file as an operation's compile read it: path, content, first-commit time.
Read = tuple[str, bytes | None, datetime | None]


@dataclass(frozen=True, slots=True)
class _Compiled:
    reads: tuple[Read, ...]
    result: OperationResult


class CompileCache:
    """Parsed files, loaded files and compiled operations kept between compiles. Owned by
    the caller (the long-running reconciler); pure."""

    def __init__(self, parse_cache: ParseCache | None = None) -> None:
        self.parse_cache = parse_cache if parse_cache is not None else ParseCache()
        self.loads = LoadMemo()
        self._layout: tuple[str, ...] | None = None
        self._operations: dict[tuple[str, str], _Compiled] = {}
        self.reused = 0
        self.compiled = 0

    def begin(self, repo: RepoIndex) -> None:
        """Start a compile of ``repo``: a changed layout forgets every operation."""
        layout = repo.layout()
        if layout != self._layout:
            self._operations.clear()
            self._layout = layout

    def reusable(self, repo: RepoIndex, project: str, name: str) -> OperationResult | None:
        entry = self._operations.get((project, name))
        if entry is None or not all(_same(repo, read) for read in entry.reads):
            return None
        self.reused += 1
        return entry.result

    def store(
        self,
        repo: RepoIndex,
        project: str,
        name: str,
        reads: Iterable[str],
        result: OperationResult,
    ) -> None:
        """Keep ``result`` of compiling ``project/name``, which read the files ``reads``."""
        kept = tuple(_read(repo, p) for p in sorted(reads))
        self._operations[(project, name)] = _Compiled(kept, result)
        self.compiled += 1

    def retain(self, files: Mapping[str, object], operations: Iterable[tuple[str, str]]) -> None:
        """Forget what is no longer in the repo."""
        self.parse_cache.retain(files)
        self.loads.retain(files)
        keep = set(operations)
        for key in [k for k in self._operations if k not in keep]:
            del self._operations[key]


def _read(repo: RepoIndex, path: str) -> Read:
    file = repo.snapshot.files.get(path)
    return path, repo.files.get(path), file.first_commit_time if file else None


def _same(repo: RepoIndex, read: Read) -> bool:
    path, content, when = read
    now = repo.files.get(path)
    if now is not content and now != content:
        return False
    file = repo.snapshot.files.get(path)
    return (file.first_commit_time if file else None) == when
