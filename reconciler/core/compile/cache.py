"""What one compile keeps for the next (``CompileCache``), so that a commit recompiles only
the operations whose inputs changed.

What must live here: the cache and its one rule of reuse. An operation's compile reads the
repo's layout (which names exist where) and some files (its own, its project's, the org's,
its presets', queue's, cluster's and connections'); the index notes each file read. Its
result is reused when the layout is the same and every file it read has the same content
and first-commit time. Anything else compiles again: invalidation is exact by
construction, and ``tests/core/test_compile_incremental.py`` checks it against a full compile.
Whole-repo checks (references, namespaces) always run; unique names are checked over the
claims that changed while none collide (``check_claims``), else over all of them.

The check costs O(changed), not O(operations x files read): ``begin`` diffs the repo
against the last compile's (content and first-commit time of every path, unchanged files
mostly the same objects, so an identity check) and forgets the operations that read a
changed path (an index from each operation file to its reader, and from each shared file
to the groups of operations that read the same shared files); every other kept operation
is reused as is, with its name claims and its file's problems. When a commit of a plain
repo edits files or adds or removes operation files, the index is derived from the last
one (``index.derive_index``) and names the changed paths itself: no layout to compare,
nothing else to diff or retain.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

from reconciler.core.compile.errors import Errors
from reconciler.core.compile.index import IndexBase, LoadMemo, ProjectEntry, RepoIndex, is_operation
from reconciler.core.compile.names import Claim, check_unique, index_claims
from reconciler.core.compile.operations import OperationResult
from reconciler.core.load import ParseCache
from reconciler.core.types import ConfigError, RepoFile

_Key = tuple[str, str]  # (project, operation name)


@dataclass(frozen=True, slots=True)
class KeptOperation:
    """One operation's compile, kept: what it read, its result, claims and file problems."""

    own: tuple[str, ...]  # the operation files its compile read (its own)
    shared: tuple[str, ...]  # the other files it read: one tuple per distinct set
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
        # the kept operations per project, by name: looked up in one C-level pass each
        self._by_project: dict[str, dict[str, KeptOperation]] = {}
        # who read what, compact: most operations read the same shared files (org,
        # project, presets, queue, cluster), so those are indexed once per distinct set
        # of them (a group), not once per operation
        # operation file -> the kept operations that read it (its own: a tuple of one)
        self._own: dict[str, tuple[_Key, ...]] = {}
        # shared reads -> (the one tuple of them, the operations that read them)
        self._groups: dict[tuple[str, ...], tuple[tuple[str, ...], set[_Key]]] = {}
        self._readers: dict[str, set[tuple[str, ...]]] = {}  # shared file -> its groups
        # what the last compile saw: resolved contents and the snapshot's files
        self._contents: Mapping[str, bytes] = {}
        self._files: Mapping[str, RepoFile] = {}
        self.index_base: IndexBase | None = None  # what the next index derives from
        # the kept operations with problems: their file's, and their compile's
        self._file_errors: dict[_Key, tuple[ConfigError, ...]] = {}
        self._result_errors: dict[_Key, tuple[ConfigError, ...]] = {}
        # the claims by id and by workload when the last check found no collision and no
        # scheduled claim (else None), and the claims stored (True) and forgotten since
        self._ids: dict[str, Claim] | None = None
        self._workloads: dict[tuple[str, str], Claim] = {}
        self._claim_changes: list[tuple[bool, tuple[Claim, ...]]] = []
        # per project: its index's operations (the same dict while they did not change)
        # and their names, sorted
        self._names: dict[str, tuple[dict[str, str], list[str]]] = {}
        self.reused = 0
        self.compiled = 0

    def begin(self, repo: RepoIndex) -> None:
        """Start a compile of ``repo``: a changed layout forgets every operation, a changed
        path the operations that read it."""
        if repo.changed is not None:  # derived from the last index: the same layout
            for path in repo.changed:
                self._forget_readers(path)
            self.index_base = repo.base
            self._contents = repo.files
            self._files = repo.base.files if repo.base is not None else dict(repo.snapshot.files)
            return
        self.index_base = repo.base
        layout = repo.layout()
        if layout != self._layout:
            self._by_project.clear()
            self._own.clear()
            self._groups.clear()
            self._readers.clear()
            self._file_errors.clear()
            self._result_errors.clear()
            self._ids = None
            self._claim_changes.clear()
            self._layout = layout
        else:
            for path in _changed(self._contents, repo.files, self._files, repo.snapshot.files):
                self._forget_readers(path)
        # before any operation compiles: a compile that fails half-way leaves every kept
        # entry valid against this repo, the next diff's base (the index's own: copied
        # from the caller's, who may reuse its mapping for the next snapshot)
        self._contents = repo.files
        self._files = repo.base.files if repo.base is not None else dict(repo.snapshot.files)

    def _forget_readers(self, path: str) -> None:
        for key in list(self._own.get(path, ())):
            self._forget(key)
        for group in list(self._readers.get(path, ())):
            for key in list(self._groups[group][1] if group in self._groups else ()):
                self._forget(key)

    def names(self, project: ProjectEntry) -> list[str]:
        """The project's operation names, sorted: kept while its index entry is the same."""
        ops = project.operations
        kept = self._names.get(project.name)
        if kept is not None and kept[0] is ops:
            return kept[1]
        if kept is None:
            names = sorted(ops)
        else:  # the last names, with those added and removed since (set differences in C)
            names = list(kept[1])
            for name in kept[0].keys() - ops.keys():
                del names[bisect_left(names, name)]
            for name in ops.keys() - kept[0].keys():
                insort(names, name)
        self._names[project.name] = (ops, names)
        return names

    def check_claims(self, claimed: Sequence[Sequence[Claim]], errors: Errors) -> set[str]:
        """``names.check_unique`` over ``claimed`` (each operation's claims, in compile
        order), from the claims stored and forgotten since the last check while none of
        them collide; else over them all. Returns the ids claimed twice."""
        changes, self._claim_changes = self._claim_changes, []
        ids, workloads = self._ids, self._workloads
        if ids is not None:
            clean = True
            for stored, claims in changes:
                for c in claims:
                    if not stored:
                        if ids.get(c.id) is c:
                            del ids[c.id]
                            if c.workload is not None:
                                del workloads[c.workload]
                        continue
                    if c.scheduled or c.id in ids or c.workload in workloads:
                        clean = False
                        break
                    ids[c.id] = c
                    if c.workload is not None:
                        workloads[c.workload] = c
                if not clean:
                    break
            if clean:
                return set()
        every = list(chain.from_iterable(claimed))
        indexed = index_claims(every)
        if indexed is not None:
            self._ids, self._workloads = indexed
            return set()
        self._ids = None
        return check_unique(every, errors)

    def reusable_all(
        self, project: str, names: Sequence[str]
    ) -> tuple[list[KeptOperation | None], list[int]]:
        """Per name of ``project``, its kept result, claims and file problems (none of its
        reads changed since it was compiled), or None; and where the Nones are: compile
        those."""
        kept = list(map(self._by_project.get(project, {}).get, names))
        missing = [i for i, k in enumerate(kept) if k is None]
        self.reused += len(kept) - len(missing)
        return kept, missing

    def kept(self, project: str, name: str) -> KeptOperation:
        """The entry :meth:`store` just kept of ``project/name``."""
        return self._by_project[project][name]

    def problems(self) -> tuple[Iterable[ConfigError], Iterable[ConfigError]]:
        """The problems of every kept operation: its file's, and its compile's."""
        return (
            chain.from_iterable(self._file_errors.values()),
            chain.from_iterable(self._result_errors.values()),
        )

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
        mine: list[str] = []
        theirs: list[str] = []
        for path in sorted(reads):
            (mine if is_operation(path) else theirs).append(path)
        own, shared = tuple(mine), tuple(theirs)
        group = self._groups.get(shared)
        if group is None:
            group = self._groups[shared] = (shared, set())
            for path in shared:
                self._readers.setdefault(path, set()).add(shared)
        shared = group[0]  # one tuple per distinct set of reads, kept by every member
        group[1].add(key)
        for path in own:
            self._own[path] = (*self._own.get(path, ()), key)
        kept = KeptOperation(own, shared, result, tuple(claims), tuple(file_errors))
        self._by_project.setdefault(project, {})[name] = kept
        if kept.file_errors:
            self._file_errors[key] = kept.file_errors
        if result.errors:
            self._result_errors[key] = tuple(result.errors)
        self._claim_changes.append((True, kept.claims))
        self.compiled += 1

    def retain(self, files: Mapping[str, object], operations: Iterable[_Key]) -> None:
        """Forget what is no longer in the repo."""
        self.parse_cache.retain(files)
        self.loads.retain(files)
        keep = set(operations)
        gone = [(p, n) for p, kept in self._by_project.items() for n in kept if (p, n) not in keep]
        for key in gone:
            self._forget(key)

    def _forget(self, key: _Key) -> None:
        entry = self._by_project.get(key[0], {}).pop(key[1], None)
        if entry is None:
            return
        self._claim_changes.append((False, entry.claims))
        self._file_errors.pop(key, None)
        self._result_errors.pop(key, None)
        for path in entry.own:
            readers = tuple(k for k in self._own.get(path, ()) if k != key)
            if readers:
                self._own[path] = readers
            else:
                self._own.pop(path, None)
        group = self._groups.get(entry.shared)
        if group is not None:
            group[1].discard(key)
            if not group[1]:
                del self._groups[entry.shared]
                for path in entry.shared:
                    groups = self._readers.get(path)
                    if groups is not None:
                        groups.discard(entry.shared)
                        if not groups:
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
