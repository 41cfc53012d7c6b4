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
nothing else to diff or retain. Such a commit then compiles the operations forgotten and
added, and puts the repo's operations together from what it keeps in compile order
(``_Order``: blocks of operations, each joined once, a commit joining again only those
it changed), with their ids indexed and the stopped ones (``index``): O(changed) again.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import cast

from reconciler.core.compile.errors import Errors
from reconciler.core.compile.index import (
    IndexBase,
    LoadMemo,
    ProjectEntry,
    RepoIndex,
    is_operation,
    stem,
)
from reconciler.core.compile.names import Claim, check_unique, index_claims
from reconciler.core.compile.operations import OperationResult
from reconciler.core.load import ParseCache
from reconciler.core.types import (
    CompiledOperation,
    ConfigError,
    OperationChanges,
    RejectedOperation,
    RepoFile,
)

_Key = tuple[str, str]  # (project, operation name)
_ID, _CLAIMS = attrgetter("id"), attrgetter("claims")
_OPERATIONS = attrgetter("result.operations")


@dataclass(frozen=True, slots=True)
class KeptOperation:
    """One operation's compile, kept: what it read, its result, claims and file problems."""

    key: _Key  # (project, name): the one tuple the cache's maps and its order share
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
        # the kept operations in compile order, once a compile put them together (else
        # None: the next compile looks every name up), and those forgotten since
        self._order: _Order | None = None
        self._dirty: set[_Key] = set()
        # of the kept operations: those refused, scheduled, stopped; the dispatched ones
        # by id when the last compile gave each id once (else None), and the operations
        # stored (True) and forgotten since
        self._rejected: dict[_Key, RejectedOperation] = {}
        self._scheduled: dict[_Key, tuple[CompiledOperation, ...]] = {}
        self._stopped: dict[_Key, tuple[str, ...]] = {}
        self._by_id: dict[str, CompiledOperation] | None = None
        self._op_changes: list[tuple[bool, tuple[CompiledOperation, ...]]] = []
        self._last_operations: tuple[CompiledOperation, ...] | None = None  # the last index's
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
            self._order = None
            self._dirty.clear()
            self._rejected.clear()
            self._scheduled.clear()
            self._stopped.clear()
            self._by_id = None
            self._op_changes.clear()
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

    def check_claims(self, claimed: Iterable[Sequence[Claim]], errors: Errors) -> set[str]:
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
        kept = KeptOperation(key, own, shared, result, tuple(claims), tuple(file_errors))
        self._by_project.setdefault(project, {})[name] = kept
        if self._order is not None:
            self._order.put(key, kept)
        if kept.file_errors:
            self._file_errors[key] = kept.file_errors
        if result.errors:
            self._result_errors[key] = tuple(result.errors)
        if result.rejected is not None:
            self._rejected[key] = result.rejected
        if result.scheduled:
            self._scheduled[key] = result.scheduled
        stopped = tuple(op.id for op in result.operations if op.stopped)
        if stopped:
            self._stopped[key] = stopped
        self._claim_changes.append((True, kept.claims))
        self._op_changes.append((True, result.operations))
        self.compiled += 1

    def ordered(self, repo: RepoIndex) -> bool:
        """Whether this compile of ``repo`` (``begin`` called) takes the O(changed) path:
        an index derived from the last one, whose compile put its operations in order."""
        return repo.changed is not None and self._order is not None

    def to_compile(self, repo: RepoIndex) -> list[_Key]:
        """(The O(changed) path) the operations to compile, in order: those forgotten or
        added since the last compile that ``repo`` holds; those it no longer holds leave
        the order."""
        order = self._order
        assert order is not None and repo.changed is not None
        keys = self._dirty
        forgotten = set(keys)  # in the order: those added are not
        self._dirty = set()
        for path in repo.changed:
            if is_operation(path):
                parts = path.split("/")
                keys.add((parts[1], stem(parts[3])))
        out: list[_Key] = []
        for key in sorted(keys):
            entry = repo.projects.get(key[0])
            if entry is not None and key[1] in entry.operations:
                if key[1] not in self._by_project.get(key[0], {}):
                    out.append(key)  # put in the order once stored
            else:
                self._forget(key)
                order.discard(key)
        self._dirty.clear()
        self.reused += len(order) - sum(key in forgotten for key in out)
        return out

    def unordered(self) -> None:
        """A compile failed half-way: the next one looks every name up."""
        self._order = None

    def put_in_order(self, keys: Iterable[_Key]) -> None:
        """(After a compile that looked every name up) the operations in compile order."""
        by_project = self._by_project
        self._order = _Order(by_project[key[0]][key[1]] for key in keys)
        self._dirty.clear()

    def joined(
        self,
    ) -> tuple[tuple[CompiledOperation, ...], list[RejectedOperation], list[CompiledOperation]]:
        """(The O(changed) path) every kept operation's dispatched operations, refusal and
        schedules, in compile order."""
        order = self._order
        assert order is not None
        operations = order.joined()
        rejected = [self._rejected[k] for k in sorted(self._rejected)]
        schedules = list(chain.from_iterable(self._scheduled[k] for k in sorted(self._scheduled)))
        return operations, rejected, schedules

    def claims_in_order(self) -> Iterator[tuple[Claim, ...]]:
        """(The O(changed) path) every kept operation's claims, in compile order."""
        assert self._order is not None
        return map(_CLAIMS, self._order.entries())

    def index(
        self, operations: tuple[CompiledOperation, ...], unique: bool = True
    ) -> tuple[dict[str, CompiledOperation], tuple[str, ...], OperationChanges | None] | None:
        """``operations`` (this compile's) by id, the ids of those stopped in order, and
        how they differ from the last compile's: the last compile's, changed by the
        operations stored and forgotten since (O(changed)), or counted over them all (no
        difference known). None when an id is claimed twice (not ``unique``: the compile
        kept the first of each) or given twice."""
        changes, self._op_changes = self._op_changes, []
        last, self._last_operations = self._last_operations, operations
        if not unique:
            self._by_id = None
            return None
        by_id = _patched(self._by_id, changes, len(operations))
        differ: OperationChanges | None = None
        if by_id is not None and last is not None:
            differ = OperationChanges(
                last,
                tuple(chain.from_iterable(ops for stored, ops in changes if not stored)),
                tuple(chain.from_iterable(ops for stored, ops in changes if stored)),
            )
        if by_id is None:
            by_id = dict(zip(map(_ID, operations), operations, strict=True))
            if len(by_id) != len(operations):
                self._by_id = None
                return None
        self._by_id = by_id
        stopped = self._stopped
        ids = tuple(chain.from_iterable(stopped[k] for k in sorted(stopped)))
        return by_id, ids, differ

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
        self._op_changes.append((False, entry.result.operations))
        self._dirty.add(key)
        self._file_errors.pop(key, None)
        self._result_errors.pop(key, None)
        self._rejected.pop(key, None)
        self._scheduled.pop(key, None)
        self._stopped.pop(key, None)
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


def _patched(
    by_id: dict[str, CompiledOperation] | None,
    changes: Sequence[tuple[bool, tuple[CompiledOperation, ...]]],
    count: int,
) -> dict[str, CompiledOperation] | None:
    """A copy of ``by_id`` with the operations stored (True) and forgotten since, when
    that is fewer than ``count`` and gives ``count`` ids each once; else None."""
    if by_id is None or len(changes) >= count:
        return None
    out = dict(by_id)  # the last compile's is its repo's: never changed
    for stored, ops in changes:
        for op in ops:
            if not stored:
                if out.get(op.id) is op:
                    del out[op.id]
            elif out.setdefault(op.id, op) is not op:
                return None
    return out if len(out) == count else None


class _Order:
    """The kept operations by key, in sorted order, in blocks of at most ``2 * _BLOCK``: a
    key added, removed or stored again changes one block, and each block's operations are
    joined again only when it changed."""

    __slots__ = ("_blocks", "_count", "_entries", "_firsts", "_joined")

    def __init__(self, kept: Iterable[KeptOperation]) -> None:
        every = list(kept)
        self._count = len(every)
        # the entries' own keys: a tuple per operation made again here costs ~6 MiB at 100k
        self._entries = [every[i : i + _BLOCK] for i in range(0, len(every), _BLOCK)]
        self._blocks = [[entry.key for entry in part] for part in self._entries]
        self._firsts = [block[0] for block in self._blocks]
        self._joined: list[tuple[CompiledOperation, ...] | None] = [None] * len(self._blocks)

    def entries(self) -> Iterator[KeptOperation]:
        return chain.from_iterable(self._entries)

    def __len__(self) -> int:
        return self._count

    def _at(self, key: _Key) -> int:
        return max(bisect_right(self._firsts, key) - 1, 0)

    def put(self, key: _Key, entry: KeptOperation) -> None:
        """``key``'s entry, added or stored again."""
        if not self._blocks:
            self._blocks, self._entries, self._firsts = [[key]], [[entry]], [key]
            self._joined, self._count = [None], 1
            return
        i = self._at(key)
        block, entries = self._blocks[i], self._entries[i]
        self._joined[i] = None
        at = bisect_left(block, key)
        if at < len(block) and block[at] == key:
            entries[at] = entry
            return
        block.insert(at, key)
        entries.insert(at, entry)
        self._count += 1
        self._firsts[i] = block[0]
        if len(block) > 2 * _BLOCK:  # split in two
            self._blocks[i : i + 1] = [block[:_BLOCK], block[_BLOCK:]]
            self._entries[i : i + 1] = [entries[:_BLOCK], entries[_BLOCK:]]
            self._firsts[i : i + 1] = [block[0], block[_BLOCK]]
            self._joined[i : i + 1] = [None, None]

    def discard(self, key: _Key) -> None:
        if not self._blocks:
            return
        i = self._at(key)
        block = self._blocks[i]
        at = bisect_left(block, key)
        if at == len(block) or block[at] != key:
            return
        del block[at], self._entries[i][at]
        self._count -= 1
        if block:
            self._firsts[i] = block[0]
            self._joined[i] = None
        else:
            del self._blocks[i], self._entries[i], self._firsts[i], self._joined[i]

    def joined(self) -> tuple[CompiledOperation, ...]:
        """Every entry's dispatched operations, in order: a block's joined once while it
        is the same."""
        joined = self._joined
        for i, part in enumerate(joined):
            if part is None:
                joined[i] = tuple(chain.from_iterable(map(_OPERATIONS, self._entries[i])))
        return tuple(chain.from_iterable(cast(list[tuple[CompiledOperation, ...]], joined)))


_BLOCK = 256


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
