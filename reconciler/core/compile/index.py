"""The repo index: which file of a snapshot is which kind and name, and each file loaded
(parsed, validated against its kind's schema, its name checked against its file name) at
most once, lazily.

What must live here: the layout rules (``reconciler.yaml``, ``clusters/``, ``queues/``,
``cohorts/``, ``flavors/``, ``connections/``, ``presets/``, ``projects/<p>/...``), loading
and caching files, typed access to the org, project and named files, the org's settings, and small
helpers to read loaded documents. Following a name from one file to another is ``references.py``'s.
Also the index derived from the last one (``IndexBase``): when a commit of a plain repo
edits files, or adds or removes operation files, the layout is the last one's with those
files registered, O(changed) after an identity diff of the snapshot, not O(files); with
no diff at all when the snapshot says what changed since the base's (``changes``: a Git
reader's ``diff-tree``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress
from operator import is_, is_not
from typing import Any, Generic, TypeVar, cast

from pydantic import ValidationError

from reconciler.core.compile.errors import Errors, add_validation_errors, short
from reconciler.core.compile.merge import TYPED_SECTIONS, Locate, Path, Sections, dotted
from reconciler.core.compile.model import (
    KINDS,
    ConnectionFile,
    OrgFile,
    Policy,
    ProjectFile,
    Strict,
)
from reconciler.core.compile.notifications import commit_status, notify_rules
from reconciler.core.load import Document, ParseCache, check_path, parse_yaml, resolve_files
from reconciler.core.plan.ledger import RESERVED_PROJECT_NAMES
from reconciler.core.quantity import duration_seconds, parse_quantity
from reconciler.core.types import (
    PROFILE_CAPABILITIES,
    ConfigError,
    InternalError,
    Location,
    OrgPolicy,
    OrgSettings,
    PodSecurityLevel,
    Provenance,
    ProvenanceKeys,
    ProvenanceMap,
    RepoFile,
    RepoSnapshot,
    printable_path,
)

YAML_EXT = (".yaml", ".yml")
DIR_KINDS = {
    "clusters": "Cluster",
    "connections": "Connection",
    "queues": "Queue",
    "cohorts": "Cohort",
    "flavors": "Flavor",
    "presets": "Preset",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

M = TypeVar("M", bound=Strict)
T = TypeVar("T")


@dataclass(frozen=True)
class Loaded(Generic[M]):
    doc: Document
    model: M
    name: str

    @property
    def path(self) -> str:
        return self.doc.path


@dataclass
class ProjectEntry:
    name: str
    path: str | None = None
    presets: dict[str, str] = field(default_factory=dict)
    operations: dict[str, str] = field(default_factory=dict)
    first_file: str = ""


@functools.lru_cache(maxsize=8192)  # every compile asks of the same paths, many times
def is_operation(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 4 and parts[0] == "projects" and parts[2] == "operations"


def stem(filename: str) -> str:
    return filename.rsplit(".", 1)[0]


def name_of(path: str) -> str:
    """``presets/a100.yaml`` -> ``a100``."""
    return stem(path.rsplit("/", 1)[-1])


@dataclass(frozen=True, slots=True)
class IndexBase:
    """What an index of a plain snapshot (no symlink, no submodule, no problem in its
    layout) keeps for the next one: the snapshot's files, the resolved contents and the
    layout. Never changed once built: a derived index shares what did not change."""

    files: Mapping[str, RepoFile]
    contents: dict[str, bytes]
    org_path: str | None
    named: dict[str, dict[str, str]]
    projects: dict[str, ProjectEntry]
    version: str = ""  # the snapshot's


def derive_index(
    base: IndexBase, snapshot: RepoSnapshot
) -> tuple[dict[str, bytes], dict[str, ProjectEntry], frozenset[str]] | None:
    """The resolved contents and projects of ``snapshot``, from ``base`` and the files that
    changed, with the paths that did (content, first-commit time, added or removed); or
    None when it takes a full index: a change other than a plain file edited (the layout
    is its paths: the same) or a plain operation file of an existing project added (under a
    valid name no file of it has) or removed (not its project's first file). Those rules
    keep the layout's problems none, as ``base``'s were, so the result is exactly what
    indexing ``snapshot`` gives."""
    old, new = base.files, snapshot.files
    hint = snapshot.changes
    if hint is not None and hint.since == base.version and base.version:
        # the reader says which paths may have changed since the base's snapshot
        changed = [p for p in sorted(hint.paths) if old.get(p) != new.get(p)]
    else:
        # unchanged files are mostly the same objects: those that are not, found in C,
        # then compared
        differ = compress(new, map(is_not, new.values(), map(old.get, new)))
        changed = [p for p in differ if old.get(p) != new[p]]
        added = sum(1 for p in changed if p not in old)
        if len(new) - added != len(old):  # some were removed
            changed += [p for p in old if p not in new]
    if not changed:
        return base.contents, base.projects, frozenset()
    projects = dict(base.projects)
    touched: dict[str, tuple[dict[str, str], str]] = {}  # its operations, its first file
    contents = dict(base.contents)
    for path in changed:
        file = new.get(path)
        if file is not None and (file.symlink_target is not None or file.submodule):
            return None
        if file is not None and path in old:  # edited: the layout is the same
            if path in contents:
                contents[path] = file.content
            continue
        # added or removed: an operation file of an existing project only
        parts = path.split("/")
        if not is_operation(path) or not path.endswith(YAML_EXT) or check_path(path):
            return None
        entry = base.projects.get(parts[1])
        if entry is None:
            return None
        name = stem(parts[3])
        ops, first = touched.get(entry.name) or (dict(entry.operations), entry.first_file)
        if file is None:  # removed
            if ops.get(name) != path or path == first:
                return None
            del ops[name]
            del contents[path]
        else:  # added
            if name in ops or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
                return None
            ops[name] = path
            first = min(first, path)
            contents[path] = file.content
        touched[entry.name] = (ops, first)
    # added ones last: no reader depends on the order of files or operations (they sort)
    for name, (ops, first) in touched.items():
        entry = base.projects[name]
        projects[name] = ProjectEntry(name, entry.path, entry.presets, ops, first)
    return contents, projects, frozenset(changed)


@dataclass(frozen=True, slots=True)
class _Memo:
    content: bytes
    kind: str
    name: str
    result: Loaded[Any] | None
    errors: tuple[ConfigError, ...]


class LoadMemo:
    """Files loaded (parsed and validated) by earlier compiles, by path: a file whose
    content, kind and name are the same loads to the same result and the same errors.
    Owned by the caller, like :class:`ParseCache`."""

    def __init__(self) -> None:
        self._entries: dict[str, _Memo] = {}
        self.hits = 0

    def get(self, path: str, content: bytes, kind: str, name: str) -> _Memo | None:
        memo = self._entries.get(path)
        if memo is None or memo.kind != kind or memo.name != name:
            return None
        if memo.content is not content and memo.content != content:
            return None
        self.hits += 1
        return memo

    def put(self, path: str, memo: _Memo) -> None:
        self._entries[path] = memo

    def retain(self, paths: Iterable[str]) -> None:
        keep = set(paths)
        for path in [p for p in self._entries if p not in keep]:
            del self._entries[path]


# The typed sections of the operation schema below the top (``merge.TYPED_SECTIONS``):
# models whose fields are all optional and that have no validator of the model as a
# whole, so a field left out validates the rest as before (``tests/test_validated.py``).
VALIDATED_SECTIONS: frozenset[Path] = frozenset(TYPED_SECTIONS - {()})
# Top-level fields never left out: required (``kind``), or read by the model's validator.
_ALWAYS: frozenset[str] = frozenset({"kind", "matrix", "dag"})


_Part = tuple[Path, str, Any]  # (a typed section's path, a key in it, its value)


class ValidatedParts:
    """The parts of merged specs that passed the operation schema, by path and identity:
    the values presets put in every operation (shared objects). Validating a field is the
    same wherever its spec: the schema at a path is fixed, and no validator of the top
    model or of a typed section reads a field it may leave out (``_ALWAYS``). So a spec
    is checked without the parts that passed already (:meth:`unchecked`); should that
    fail, the whole spec is checked again, for exactly the errors it always gave. One
    per compile; only objects the compile keeps alive anyway are noted (``alive``), so
    an id stays its own."""

    __slots__ = ("_alive", "_parts")

    def __init__(self, alive: Callable[[Any], bool]) -> None:
        self._alive = alive
        # section path -> key -> id -> the part (kept: its id stays its own)
        self._parts: dict[Path, dict[str, dict[int, Any]]] = {}

    def unchecked(
        self,
        spec: Mapping[str, Any],
        path: Path = (),
        new: list[tuple[Path, str, Any]] | None = None,
    ) -> tuple[dict[str, Any], list[tuple[Path, str, Any]]]:
        """``spec`` without the parts that passed at their paths before (a typed section
        that did not pass as a whole: without those of its own that did), and the parts
        it keeps (``(section path, key, value)``: to :meth:`note` once it passed)."""
        if new is None:
            new = []
        known = self._parts.get(path)
        out: dict[str, Any] = {}
        for key, value in spec.items():
            if known is not None:
                seen = known.get(key)
                if (
                    seen is not None
                    and seen.get(id(value)) is value
                    and (path or key not in _ALWAYS)
                ):
                    continue
            new.append((path, key, value))
            if type(value) is dict:
                sub = (*path, key)
                if sub in VALIDATED_SECTIONS:
                    value = self.unchecked(value, sub, new)[0]
            out[key] = value
        return out, new

    def note(self, new: list[_Part]) -> None:
        """The parts :meth:`unchecked` kept passed: those the compile keeps alive are
        known from now on."""
        alive, parts = self._alive, self._parts
        for path, key, value in new:
            if alive(value):
                parts.setdefault(path, {}).setdefault(key, {})[id(value)] = value


class _Recording:
    """``RepoIndex.recording``: a plain context manager (one per operation compiled)."""

    __slots__ = ("_repo",)

    def __init__(self, repo: RepoIndex) -> None:
        self._repo = repo

    def __enter__(self) -> set[str]:
        reads: set[str] = set()
        self._repo._reads = reads
        return reads

    def __exit__(self, *exc: object) -> None:
        self._repo._reads = None


class RepoIndex:
    """Lazily parsed, cached view of a snapshot; every problem lands in ``errors`` once.

    While :meth:`recording`, every file an access reads (its content, or its first-commit
    time) is noted: what an operation's compile depends on besides the layout."""

    def __init__(
        self,
        snapshot: RepoSnapshot,
        parse_cache: ParseCache | None = None,
        memo: LoadMemo | None = None,
        *,
        keep_operations: bool = True,
        base: IndexBase | None = None,
    ) -> None:
        """``keep_operations=False`` (a ``CompileCache`` keeps each operation's result
        instead): operation files are parsed without ``parse_cache`` and not memoised, and
        :meth:`release` lets go of one once it is compiled, so neither its parse nor its
        position map outlives its compile. With ``base`` (the last index's), the layout is
        derived from it when :func:`derive_index` can; ``changed`` then holds the paths
        that changed since (None: indexed in full)."""
        self.snapshot = snapshot
        self._parse_cache = parse_cache
        self._parse = parse_cache.parse if parse_cache is not None else parse_yaml
        self._memo = memo
        self._keep_operations = keep_operations
        self._file_errors: dict[str, tuple[ConfigError, ...]] = {}
        self._reads: set[str] | None = None
        derived = derive_index(base, snapshot) if base is not None else None
        self.changed: frozenset[str] | None = None
        self.org_path: str | None = None
        self.named: dict[str, dict[str, str]] = {k: {} for k in DIR_KINDS.values()}
        self.projects: dict[str, ProjectEntry] = {}
        self.other: list[tuple[str, str]] = []  # (path, kind) of files with invalid names
        if derived is not None and base is not None:
            self.files, self.projects, self.changed = derived
            self.errors = Errors()
            self.org_path, self.named = base.org_path, base.named
        else:
            self.files, errors = resolve_files(snapshot)
            self.errors = Errors(errors)
        self._cache: dict[str, Loaded[Any] | None] = {}
        self._checked: set[str] = set()
        self._org_settings: OrgSettings | None = None
        self._provenance: dict[Provenance, Provenance] = {}
        self._provenance_ids: set[int] = set()  # ids of the table's values
        self._provenance_keys: dict[tuple[str, ...], ProvenanceKeys] = {}
        # provenance_of: a merge's paths, as ordered -> (their sorted order, the keys)
        self._layouts: dict[tuple[Path, ...], tuple[tuple[int, ...], ProvenanceKeys]] = {}
        # shared_value's tables. A map or list is found by a hash of its children's ids
        # and checked child by child (identity): the table holds no key objects of its
        # own, which a compile would free all at once at its end (holes in the heap that
        # kept the process's RSS at the compile's peak)
        self._subtrees: dict[int, dict[Any, Any] | list[Any]] = {}
        self._canonical: set[int] = set()  # ids of the table's maps and lists
        self._strings: dict[str, str] = {}
        self._ints: dict[int, int] = {}
        self._amounts: dict[tuple[tuple[str, str], ...], Mapping[str, Decimal]] = {}
        self._memos: dict[tuple[str, str], tuple[Any, frozenset[str]]] = {}
        # resolve._pod_security: the parts of a spec Pod Security reads, by kind and ids ->
        # (those parts, kept alive: their ids stay their own; whether it found anything)
        self.pod_findings: dict[tuple[Any, ...], tuple[tuple[Any, ...], bool]] = {}
        # resolve.total_requests: id of kept resources -> (them, their totals)
        self.totals: dict[int, tuple[Any, dict[str, Decimal]]] = {}
        self.sections = Sections()  # typed sections the presets' layers built (merge.py)
        # the parts of merged specs that passed the schema (resolve.ValidatedParts)
        self.validated = ValidatedParts(self.kept)
        if derived is None:
            self._index()
        # what the next index derives from: a plain layout only (a symlink or a problem
        # anywhere, and the next index is a full one)
        self.base: IndexBase | None = None
        if derived is not None or (
            not self.errors
            and not self.other
            and all(f.symlink_target is None and not f.submodule for f in snapshot.files.values())
        ):
            self.base = IndexBase(  # its own copy: a caller may reuse its mapping
                dict(snapshot.files),
                self.files,
                self.org_path,
                self.named,
                self.projects,
                snapshot.version,
            )

    def recording(self) -> _Recording:
        """Note the paths of the files read until the block ends (``with``: the set)."""
        return _Recording(self)

    def memoized(self, key: tuple[str, str], compute: Callable[[], T]) -> T:
        """``compute()`` once per compile for ``key`` (a spec built from files, e.g. a
        queue's): later calls return the same object and note, while :meth:`recording`,
        the files the first call read, so an operation that uses it depends on them as if
        it had read them itself. ``compute`` must depend on the snapshot alone and report
        problems once (``Errors.add_once``, or through :meth:`load`)."""
        hit = self._memos.get(key)
        if hit is not None:
            if self._reads is not None:
                self._reads.update(hit[1])
            return cast(T, hit[0])
        outer = self._reads
        reads: set[str] = set()
        self._reads = reads
        try:
            value = compute()
        finally:
            self._reads = outer
        if outer is not None:
            outer.update(reads)
        self._memos[key] = (value, frozenset(reads))
        return value

    def layout(self) -> tuple[str, ...]:
        """Every path but the operations': what names exist where (presets, queues,
        clusters, connections, projects). An operation's compile reads it, not tracked."""
        return tuple(p for p in sorted(self.files) if not is_operation(p))

    def kept(self, value: Any) -> bool:
        """Whether the compile keeps ``value`` alive for its whole length: one of
        :meth:`shared_value`'s maps, lists or strings, or a typed section a layer built."""
        if type(value) is str:
            return self._strings.get(value) is value
        return id(value) in self._canonical or self.sections.built(value)

    def shared(self, prov: Provenance) -> Provenance:
        """One object per distinct provenance: a preset's leaves are the same in every
        operation that applies it."""
        if id(prov) in self._provenance_ids:
            return prov  # the shared one itself (alive in the table: its id is its own)
        shared = self._provenance.setdefault(prov, prov)
        if shared is prov:
            self._provenance_ids.add(id(prov))
        return shared

    def shared_value(self, value: Any) -> Any:
        """``value`` (plain data: maps, lists, scalars) with every subtree equal to one
        seen before in this compile replaced by that one: a preset's resources, a node
        selector, the same command are one object in every operation that has them. Specs
        are never changed once built, so sharing is safe (``merge.py`` shares untouched
        subtrees the same way). Maps must have the same keys in the same order."""
        kind = type(value)
        if kind is str:
            return self._strings.setdefault(value, value)
        if (kind is dict or kind is list) and id(value) in self._canonical:
            return value  # a subtree shared already (a preset's, untouched): O(1)
        if isinstance(value, dict):
            strings = self._strings
            keys = [
                strings.setdefault(k, k) if type(k) is str else self.shared_value(k) for k in value
            ]
            values = self._shared_each(value.values())
            mark = hash((len(keys), *keys, *map(id, values)))
            found = self._subtrees.get(mark)
            if isinstance(found, dict) and _same(found, keys) and _same(found.values(), values):
                return found
            same = _same(value, keys) and _same(value.values(), values)
            return self._keep(mark, found, value if same else dict(zip(keys, values, strict=True)))
        if isinstance(value, list):
            elements = self._shared_each(value)
            mark = hash((-1, *map(id, elements)))
            found = self._subtrees.get(mark)
            if isinstance(found, list) and _same(found, elements):
                return found
            return self._keep(mark, found, value if _same(value, elements) else elements)
        if type(value) is str:
            return self._strings.setdefault(value, value)
        if type(value) is int:  # not bool: True and 1 stay apart
            return self._ints.setdefault(value, value)
        return value

    def _shared_each(self, items: Iterable[Any]) -> list[Any]:
        """:meth:`shared_value` of each of ``items``, a string or a subtree shared already
        inline (most values are one or the other)."""
        strings, canonical, share = self._strings, self._canonical, self.shared_value
        return [
            strings.setdefault(v, v) if type(v) is str else v if id(v) in canonical else share(v)
            for v in items
        ]

    def _keep(self, mark: int, found: Any, value: Any) -> Any:
        """``value`` kept as the subtree of hash ``mark`` unless another holds it (a hash
        collision: rare, and that value is then simply not shared)."""
        if found is None:
            self._subtrees[mark] = value
            self._canonical.add(id(value))  # alive in the table: its id is its own
        return value

    def shared_amounts(self, amounts: Mapping[str, Decimal]) -> Mapping[str, Decimal]:
        """One object per distinct map of amounts (an operation's requests), compared
        exactly (``4`` and ``4.0`` are not the same amount as written)."""
        key = tuple((k, str(v)) for k, v in amounts.items())
        return self._amounts.setdefault(key, amounts)

    def provenance_of(self, prov: Mapping[Path, Provenance], own_file: str) -> ProvenanceMap:
        """A compiled operation's provenance, compact, from its merge's map (path ->
        provenance): the leaves in path order (indices before names), named dotted, those
        names shared with every operation of the same layering; the values from its own
        file ``own_file`` packed, the others shared where equal (``shared``). Operations
        compiled alike have the same paths in the same order in their merge's map, so the
        sorted order and the names are worked out once per such layout."""
        paths = tuple(prov)
        layout = self._layouts.get(paths)
        if layout is None:
            order = tuple(sorted(range(len(paths)), key=lambda i: _sort_key(paths[i])))
            names = tuple(dotted(paths[i]) for i in order)
            keys = self._provenance_keys.get(names)
            if keys is None:
                keys = self._provenance_keys[names] = ProvenanceKeys.of(names)
            layout = self._layouts[paths] = (order, keys)
        order, keys = layout
        values = list(prov.values())
        return ProvenanceMap.of(keys, [values[i] for i in order], own_file, self.shared)

    # 1. layout
    def _index(self) -> None:
        for path in sorted(self.files):
            parts = path.split("/")
            if not parts[-1].endswith(YAML_EXT):
                continue
            name = stem(parts[-1])
            top = parts[0]
            if len(parts) == 1:
                if name == "reconciler":
                    self._register_org(path)
                continue
            if top in DIR_KINDS:
                if len(parts) != 2:
                    self._fail(path, f"unexpected file: {top}/ holds <name>.yaml files directly")
                    continue
                self._register(path, DIR_KINDS[top], name, self.named[DIR_KINDS[top]])
            elif top == "projects":
                self._index_project(path, parts)

    def _index_project(self, path: str, parts: list[str]) -> None:
        if len(parts) < 3:
            self._fail(path, "unexpected file: projects/ holds one directory per project")
            return
        name = parts[1]
        if not self._valid_name(path, name, "project directory"):
            return
        if name in RESERVED_PROJECT_NAMES:
            self._fail(
                path,
                f"project directory {name!r} is reserved: the status branch keeps the "
                f"{name} in status/{name}/, where this project's records would go; rename it",
            )
            return
        project = self.projects.setdefault(name, ProjectEntry(name, first_file=path))
        if len(parts) == 3 and stem(parts[2]) == "project":
            if project.path is not None:
                self._fail(path, f"duplicate project file (also {printable_path(project.path)})")
            else:
                project.path = path
        elif len(parts) == 4 and parts[2] == "presets":
            self._register(path, "Preset", stem(parts[3]), project.presets)
        elif len(parts) == 4 and parts[2] == "operations":
            self._register(path, "Operation", stem(parts[3]), project.operations)
        else:
            self._fail(
                path,
                "unexpected file: a project holds project.yaml, presets/<name>.yaml "
                "and operations/<name>.yaml",
            )

    def _register_org(self, path: str) -> None:
        if self.org_path is not None:
            self._fail(path, f"duplicate org file (also {self.org_path})")
        else:
            self.org_path = path

    def _register(self, path: str, kind: str, name: str, into: dict[str, str]) -> None:
        if not self._valid_name(path, name, "file name"):
            self.other.append((path, kind))
        elif name in into:
            self._fail(path, f"duplicate {kind} {name!r} (also defined in {into[name]})")
        else:
            into[name] = path

    def _valid_name(self, path: str, name: str, what: str) -> bool:
        # ``fullmatch``: ``match`` lets ``$`` pass a final newline ('batch\n' of 'batch\n.yaml')
        if len(name) <= 63 and _DNS_LABEL.fullmatch(name):
            return True
        self._fail(
            path,
            f"{what} {name!r} is not a valid name: use lowercase letters, digits and '-' "
            "(DNS-1123 label, at most 63 characters)",
        )
        return False

    def _fail(self, path: str, message: str, line: int = 1, col: int = 1) -> None:
        self.errors.add(Location(path, line, col), message)

    # 2. files
    def load(self, path: str, kind: str, name: str) -> Loaded[Any] | None:
        if self._reads is not None:
            self._reads.add(path)
        if path in self._cache:
            return self._cache[path]
        content = self.files[path]
        transient = not self._keep_operations and is_operation(path)
        memo = None
        if self._memo is not None and not transient:
            memo = self._memo.get(path, content, kind, name)
        if memo is not None:
            self.errors.extend(memo.errors)
            result = memo.result
        else:
            errors = Errors()
            try:
                result = self._load(path, kind, name, errors, transient)
            except Exception as exc:  # a bug, not a problem in the file
                raise InternalError(f"loading {kind} {name!r}", exc, path) from exc
            self.errors.extend(errors)
            if transient:
                self._file_errors[path] = tuple(errors)
            elif self._memo is not None:
                self._memo.put(path, _Memo(content, kind, name, result, tuple(errors)))
        self._cache[path] = result
        return result

    def file_errors(self, path: str) -> tuple[ConfigError, ...]:
        """The problems loading the operation file ``path`` reported (with
        ``keep_operations=False``, once it was loaded): what a kept result reports again."""
        return self._file_errors.get(path, ())

    def release(self, path: str) -> None:
        """Let go of the loaded operation file ``path`` (with ``keep_operations=False``):
        its compile is done. A later load parses it again."""
        if not self._keep_operations:
            self._cache.pop(path, None)
            self._file_errors.pop(path, None)

    def _load(
        self, path: str, kind: str, name: str, errors: Errors, transient: bool = False
    ) -> Loaded[Any] | None:
        parse = parse_yaml if transient else self._parse
        doc, problems = parse(path, self.files[path])
        if doc is None:
            errors.extend(problems)
            return None
        data = doc.data
        if not isinstance(data, dict):
            errors.add(doc.loc(), f"expected a mapping with 'kind: {kind}'")
            return None
        written = data.get("kind")
        if written is None:
            errors.add(doc.loc(), f"missing required field 'kind' (expected {kind})")
            return None
        if written != kind:
            where = path.rsplit("/", 1)[0] + "/" if "/" in path else "the repo root"
            if isinstance(written, str) and written in KINDS:
                message = (
                    f"kind is {written!r}, but {where}{path.rsplit('/', 1)[-1]} must be {kind}"
                )
            else:
                message = f"unknown kind {short(written)} (expected {kind})"
            errors.add(doc.loc(("kind",)), message)
            return None
        model_type = KINDS[kind]
        try:
            model = model_type.model_validate(data)
        except ValidationError as exc:
            add_validation_errors(errors, exc, data, model_type, lambda p, key: doc.loc(p, key=key))
            return None
        if kind != "Org" and data.get("name") is not None and data["name"] != name:
            errors.add(
                doc.loc(("name",)),
                f"name {data['name']!r} does not match the file name {name!r}",
            )
            return None
        return Loaded(doc, model, name)

    def first_commit_time(self, path: str) -> Any:
        if self._reads is not None:
            self._reads.add(path)
        file = self.snapshot.files.get(path)
        return file.first_commit_time if file else None

    # 3. typed access
    def org(self) -> Loaded[OrgFile] | None:
        return self.load(self.org_path, "Org", "reconciler") if self.org_path else None

    def get(self, kind: str, name: str) -> Loaded[Any] | None:
        path = self.named[kind].get(name)
        return self.load(path, kind, name) if path else None

    def project(self, name: str) -> Loaded[ProjectFile] | None:
        project = self.projects.get(name)
        if project is None:
            return None
        if project.path is None:
            if name not in self._checked:
                self._checked.add(name)
                self._fail(
                    project.first_file, f"project {name!r} has no projects/{name}/project.yaml"
                )
            return None
        return self.load(project.path, "Project", name)

    def org_settings(self) -> OrgSettings:
        if self._reads is not None and self.org_path is not None:
            self._reads.add(self.org_path)
        if self._org_settings is None:
            self._org_settings = self._make_org_settings()
        return self._org_settings

    def _make_org_settings(self) -> OrgSettings:
        org = self.org()
        if org is None:
            return OrgSettings()
        m = org.model
        policy = m.policy
        prune = m.prune
        level = PodSecurityLevel(policy.pod_security if policy else "baseline")

        def connection(name: str) -> ConnectionFile | None:
            loaded = self.get("Connection", name)
            return loaded.model if loaded is not None else None

        def unknown(name: str) -> str:  # reported by ``check_notifications``, not here
            return f"unknown connection {name!r}"

        return OrgSettings(
            notifications=notify_rules(org.doc, m.notifications, connection, unknown),
            commit_status=commit_status(
                org.doc,
                m.commit_status,
                sorted(self.named["Cluster"]),
                connection,
                unknown,
                unknown,
            ),
            web_url=(m.web_url or "").rstrip("/"),
            prices=prices(m.prices),
            flavor_prices={
                f: prices(listed) for f, listed in sorted((m.flavor_prices or {}).items())
            },
            currency=m.currency or "",
            timezone=m.timezone or "UTC",
            default_queue=m.defaults.queue if m.defaults else None,
            default_outputs=m.defaults.outputs if m.defaults else None,
            prune=prune.enabled if prune else False,
            max_prune_fraction=prune.max_fraction if prune else 0.5,
            allow_mass_prune=prune.allow_mass_prune if prune else False,
            status_branch=m.status.branch if m.status else "reconciler/status",
            status_repo=m.status.repo if m.status else None,
            status_keep_days=m.status.retention.keep_days
            if m.status and m.status.retention
            else None,
            status_max_commits=m.status.retention.max_commits
            if m.status and m.status.retention
            else None,
            policy=OrgPolicy(
                allowed_queues=frozenset(policy.allowed_queues)
                if policy and policy.allowed_queues is not None
                else None,
                max_resources={
                    k: parse_quantity(v) for k, v in (policy.max_resources or {}).items()
                }
                if policy
                else {},
                allowed_scheduler_names=frozenset(policy.allowed_scheduler_names)
                if policy and policy.allowed_scheduler_names is not None
                else None,
                allow_privileged=policy.allow_privileged if policy else False,
                allow_host_path=policy.allow_host_path if policy else False,
                allowed_capabilities=frozenset(_capability(c) for c in policy.allowed_capabilities)
                if policy and policy.allowed_capabilities is not None
                else PROFILE_CAPABILITIES[level],
                allow_run_as_root=policy.allow_run_as_root if policy else True,
                allow_shared_namespaces=policy.allow_shared_namespaces if policy else False,
                allowed_priority_classes=frozenset(policy.allowed_priority_classes or ())
                if policy
                else frozenset(),
                pod_security=level,
                **_pod_policy(policy),
            ),
        )


def prices(listed: Mapping[str, float | int] | None) -> dict[str, Decimal]:
    """A price list as exact decimals (a float price as it is written: ``2.5``, not its
    binary approximation)."""
    return {k: Decimal(str(v)) for k, v in sorted((listed or {}).items())}


def _pod_policy(policy: Policy | None) -> dict[str, Any]:
    """The ``OrgPolicy`` fields for the pod parts presets may set (service account, pull
    secrets, volumes, retries, TTL); unset ones keep ``OrgPolicy``'s defaults."""
    if policy is None:
        return {}
    out: dict[str, Any] = {
        "max_retries": policy.max_retries,
        "max_operation_priority": policy.max_operation_priority,
        "min_ttl": duration_seconds(policy.min_ttl),
        "max_replicas": policy.max_replicas,
    }
    if policy.require_signed_commits is not None:
        out["allowed_signers"] = policy.require_signed_commits.allowed_signers
    if policy.allowed_service_accounts is not None:
        out["allowed_service_accounts"] = frozenset(policy.allowed_service_accounts)
    if policy.allowed_image_pull_secrets is not None:
        out["allowed_image_pull_secrets"] = frozenset(policy.allowed_image_pull_secrets)
    if policy.allowed_volume_types is not None:
        out["allowed_volume_types"] = frozenset(policy.allowed_volume_types)
    return out


def _capability(name: str) -> str:
    return name.upper().removeprefix("CAP_")


# --- reading loaded documents -------------------------------------------------------------


def locator(doc: Document, prefix: Path = ()) -> Locate:
    """``(line, col)`` of a path under ``prefix`` of ``doc``, for merge provenance."""

    if not prefix:
        return doc.pos

    def locate(path: Path) -> tuple[int, int]:
        return doc.pos((*prefix, *path))

    return locate


def get_in(spec: Mapping[str, Any], *path: str) -> Any:
    """The value at ``path`` of nested mappings, or None."""
    value: Any = spec
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _same(found: Collection[Any], items: list[Any]) -> bool:
    """``found`` holds ``items``, in order, as the same objects (a map: its keys)."""
    return len(found) == len(items) and all(map(is_, found, items))


@functools.lru_cache(maxsize=16384)  # the same paths recur in every operation
def _sort_key(path: Path) -> tuple[tuple[int, str | int], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)
