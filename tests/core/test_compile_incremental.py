"""Incremental compile (issue 17, item 4): a ``CompileCache`` recompiles only the operations
whose inputs changed, and the result is always exactly a full compile's."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import TEMPLATE

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.compile import api as api_module
from reconciler.core.compile import cache as cache_module
from reconciler.core.compile.index import RepoIndex
from reconciler.core.types import (
    CompiledRepo,
    InternalError,
    RepoFile,
    RepoSnapshot,
    SnapshotChanges,
)

BASE = snapshot_worktree(TEMPLATE)
PATHS = sorted(p for p in BASE.files if p.endswith(".yaml") and not p.startswith("schemas/"))
EDITS = (
    "comment",
    "break",
    "digit",
    "delete",
    "restore",
    "copy-op",
    "link-op",
    "time",
    "shadow",
    "odd-op",
    "stop",
    "move-op",
)
# without its scheduled operation: unique names are then checked over what changed alone
PLAIN = RepoSnapshot(
    {p: f for p, f in BASE.files.items() if "nightly-embed" not in p}, version="plain"
)


def _edit(files: dict[str, RepoFile], kind: str, path: str, n: int) -> None:
    file = files.get(path)
    if kind == "restore":
        if path in BASE.files:
            files[path] = BASE.files[path]
        return
    if kind == "delete":
        files.pop(path, None)
        return
    if kind == "odd-op":  # a second file of a name, or a name that is not one
        ops = sorted(p for p in files if p.endswith("/operations/dpo.yaml"))
        new = (
            ops[0][:-4] + "yml" if n % 2 and ops else f"projects/vision/operations/Bad_{n % 3}.yaml"
        )
        files[new] = RepoFile(new, files[ops[0]].content if ops else b"kind: Operation\n")
        return
    if kind == "shadow":  # an operation named as a matrix child is (from 3 on: not)
        name = f"sweep-lr-{n % 5}"
        new = f"projects/vision/operations/{name}.yaml"
        body = b"kind: Operation\nname: %s\nrun:\n  container: {image: busybox}\n"
        files[new] = RepoFile(new, body % name.encode())
        return
    if kind == "move-op":  # an operation file moved into the other project
        ops = sorted(p for p in files if "/operations/" in p)
        if ops:
            source = ops[n % len(ops)]
            other = "vision" if source.split("/")[1] == "language" else "language"
            new = f"projects/{other}/operations/{source.rsplit('/', 1)[1]}"
            files[new] = replace(files.pop(source), path=new)
        return
    if kind in ("copy-op", "link-op"):
        ops = sorted(p for p in files if "/operations/" in p)
        if not ops:
            return
        source = ops[n % len(ops)]
        project, name = source.split("/")[1], f"new-{n % 3}"
        new = f"projects/{project}/operations/{name}.yaml"
        if kind == "link-op":
            files[new] = RepoFile(new, b"", symlink_target=f"{Path(source).name}")
            return
        body = files[source].content
        body = re.sub(rb"(?m)^name: .*$", f"name: {name}".encode(), body)
        files[new] = RepoFile(new, body)
        return
    if file is None or file.symlink_target is not None:
        return
    content = file.content
    if kind == "comment":
        content += f"\n# edit {n}\n".encode()
    elif kind == "stop":  # (on an operation: its runs stopped, or a duplicate key)
        content += b"\nstopped: true\n"
    elif kind == "break":
        content += b"\nkind: [unclosed\n"
    elif kind == "digit":
        digits = [m.start() for m in re.finditer(rb"[0-9]", content)]
        if digits:
            at = digits[n % len(digits)]
            content = content[:at] + str((n % 9) + 1).encode() + content[at + 1 :]
    elif kind == "time":
        when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n)
        files[path] = replace(file, first_commit_time=when)
        return
    files[path] = replace(file, content=content)


def _same(cached: CompiledRepo, full: CompiledRepo, commit: object = None) -> None:
    """The compile with a cache is the full compile, and so are the operations by id, the
    stopped ones and each workflow's queues it gives beside them."""
    assert cached == full, commit
    assert dict(cached.by_id) == dict(full.by_id), commit
    assert cached.stopped_ids == full.stopped_ids, commit
    assert dict(cached.generations) == dict(full.generations), commit
    assert cached.workflow_queues == full.workflow_queues, commit


edits = st.lists(
    st.tuples(st.sampled_from(EDITS), st.sampled_from(PATHS), st.integers(0, 50)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([BASE, PLAIN]), st.lists(edits, min_size=1, max_size=5))
@pytest.mark.slow
def test_an_incremental_compile_is_a_full_compile(
    base: RepoSnapshot, commits: list[list[tuple[str, str, int]]]
) -> None:
    """Random edits of random files, commit after commit: the index derived from the last
    one, the problems and the unique names from what changed, equal a full compile's."""
    cache = CompileCache()
    files = dict(base.files)
    # blocks of 1 or 2 operations (the kept order): split and emptied by a few commits
    with mock.patch.object(cache_module, "_BLOCK", 1):
        _same(compile_repo(base, cache=cache), compile_repo(base))
        last = base
        for i, commit in enumerate(commits):
            for kind, path, n in commit:
                _edit(files, kind, path, n)
            # every other commit says what changed, as a Git reader does (diff-tree)
            hint = _changes(last, files) if i % 2 else None
            snapshot = RepoSnapshot(dict(files), version=f"c{i}", changes=hint)
            _same(compile_repo(snapshot, cache=cache), compile_repo(snapshot), commit)
            last = snapshot


def _changes(last: RepoSnapshot, files: dict[str, RepoFile]) -> SnapshotChanges:
    """The paths whose file differs from ``last``'s, and one that does not."""
    paths = {p for p in files.keys() | last.files.keys() if files.get(p) != last.files.get(p)}
    return SnapshotChanges(last.version, frozenset({*paths, "reconciler.yaml"}))


def test_a_snapshot_that_says_what_changed_since_another_than_the_last_is_diffed_in_full() -> None:
    """What changed since an older snapshot says nothing of what changed since the last:
    a preset edited, then put back as it was, is a change since the last snapshot only."""
    cache = CompileCache()
    files = dict(PLAIN.files)
    compile_repo(PLAIN, cache=cache)
    path = "projects/vision/presets/base.yaml"
    files[path] = replace(files[path], content=files[path].content.replace(b"12h", b"11h"))
    compile_repo(RepoSnapshot(dict(files), version="c1"), cache=cache)
    files[path] = PLAIN.files[path]
    new = "projects/vision/operations/new-0.yaml"
    body = files["projects/vision/operations/dedupe.yaml"].content
    files[new] = RepoFile(new, body.replace(b"name: dedupe", b"name: new-0"))
    since_first = SnapshotChanges(PLAIN.version, frozenset({new}))  # true of PLAIN to c2
    snapshot = RepoSnapshot(dict(files), version="c2", changes=since_first)
    _same(compile_repo(snapshot, cache=cache), compile_repo(snapshot))


def test_a_commit_of_operation_files_derives_the_index_from_the_last_one() -> None:
    """Added, removed and edited operation files, and an edited preset, leave the layout
    as it was: the index is the last one's with them registered; a new preset is a new
    layout, indexed in full."""
    cache = CompileCache()
    compile_repo(PLAIN, cache=cache)
    files = dict(PLAIN.files)
    _edit(files, "copy-op", "", 0)
    _edit(files, "delete", "projects/language/operations/dpo.yaml", 0)
    _edit(files, "comment", "projects/vision/presets/base.yaml", 0)
    snapshot = RepoSnapshot(dict(files), version="c1")
    derived = RepoIndex(snapshot, base=cache.index_base)
    assert derived.changed is not None and len(derived.changed) == 3
    full = RepoIndex(snapshot)
    assert derived.files == full.files
    assert derived.projects == full.projects and derived.named == full.named
    _same(compile_repo(snapshot, cache=cache), compile_repo(snapshot))
    files["presets/extra.yaml"] = RepoFile("presets/extra.yaml", b"kind: Preset\nname: extra\n")
    assert RepoIndex(RepoSnapshot(files), base=cache.index_base).changed is None


def test_a_new_operation_that_takes_a_kept_id_is_reported_as_in_a_full_compile() -> None:
    """Unique names are checked over the claims that changed: a new operation named as a
    kept matrix child collides with it, and removing it clears the error."""
    cache = CompileCache()
    assert compile_repo(PLAIN, cache=cache).valid
    files = dict(PLAIN.files)
    _edit(files, "shadow", "", 1)
    snapshot = RepoSnapshot(dict(files), version="c1")
    compiled = compile_repo(snapshot, cache=cache)
    assert compiled == compile_repo(snapshot)
    assert any("names two operations" in e.message for e in compiled.errors)
    del files["projects/vision/operations/sweep-lr-1.yaml"]
    snapshot = RepoSnapshot(dict(files), version="c2")
    _same(compile_repo(snapshot, cache=cache), compile_repo(snapshot))
    assert compile_repo(snapshot, cache=cache).valid


def test_a_preset_change_recompiles_only_the_operations_that_use_it() -> None:
    cache = CompileCache()
    compile_repo(BASE, cache=cache)
    total = cache.compiled
    files = dict(BASE.files)
    path = "projects/vision/presets/base.yaml"
    files[path] = replace(files[path], content=files[path].content.replace(b"12h", b"11h"))
    compiled = compile_repo(RepoSnapshot(files, version="c1"), cache=cache)
    assert compiled.valid, compiled.errors
    # only the vision operations (their files) read that preset
    vision_files = [p for p in files if p.startswith("projects/vision/operations/")]
    assert cache.compiled - total == len(vision_files) == 7
    assert cache.reused == sum(1 for p in files if "/operations/" in p) - len(vision_files)
    timeouts = {op.spec["run"]["timeout"] for op in compiled.operations if op.project == "vision"}
    assert "11h" in timeouts and "12h" not in timeouts  # isnull: an op's own timeout stays


def test_a_new_operation_compiles_alone_and_the_layout_change_of_a_preset_recompiles_all() -> None:
    cache = CompileCache()
    compile_repo(PLAIN, cache=cache)
    files = dict(PLAIN.files)
    _edit(files, "copy-op", "", 0)
    before, reused = cache.compiled, cache.reused
    compile_repo(RepoSnapshot(dict(files), version="c1"), cache=cache)
    assert cache.compiled - before == 1
    assert cache.reused - reused == sum(1 for p in PLAIN.files if "/operations/" in p)
    files["presets/extra.yaml"] = RepoFile(
        "presets/extra.yaml", b"kind: Preset\nname: extra\npatchStrategy: isnull\n"
    )
    before = cache.compiled
    snapshot = RepoSnapshot(dict(files), version="c2")
    _same(compile_repo(snapshot, cache=cache), compile_repo(snapshot))
    assert cache.compiled - before == sum(1 for p in files if "/operations/" in p)


def test_a_compile_that_fails_half_way_leaves_the_cache_exact() -> None:
    """``begin`` forgets the operations whose reads changed before any compiles: one that
    raises (a bug) leaves every kept entry valid, and the next compile is exact."""
    cache = CompileCache()
    compile_repo(BASE, cache=cache)
    files = dict(BASE.files)
    path = "projects/vision/presets/base.yaml"
    files[path] = replace(files[path], content=files[path].content.replace(b"12h", b"11h"))
    broken = RepoSnapshot(dict(files), version="c1")
    calls = {"n": 0}
    real = api_module._compile_guarded

    def flaky(repo: object, project: str, name: str) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("a bug in the compiler")
        return real(repo, project, name)  # type: ignore[arg-type]

    with mock.patch.object(api_module, "_compile_guarded", flaky), pytest.raises(InternalError):
        compile_repo(broken, cache=cache)
    assert calls["n"] == 2  # one vision operation compiled, the next one raised
    again = RepoSnapshot(dict(files), version="c2")
    compiled = compile_repo(again, cache=cache)
    assert compiled == compile_repo(again)
    timeouts = {op.spec["run"]["timeout"] for op in compiled.operations if op.project == "vision"}
    assert "11h" in timeouts and "12h" not in timeouts  # none kept from before the change


def test_an_unchanged_commit_reuses_every_operation_and_its_problems() -> None:
    """Nothing read changed: every operation is reused, claims and file errors too (a
    broken operation file is still reported, a name collision still found)."""
    cache = CompileCache()
    files = dict(BASE.files)
    _edit(files, "break", "projects/language/operations/agent-sandbox.yaml", 0)
    _edit(files, "copy-op", "", 1)
    ops = sorted(p for p in files if "/operations/" in p)
    twin = ops[0].rsplit("/", 1)[0] + "/twin.yaml"
    files[twin] = RepoFile(twin, files[ops[1]].content)  # the same name inside: a collision
    first = compile_repo(RepoSnapshot(dict(files), version="c1"), cache=cache)
    assert not first.valid
    before = cache.compiled
    files["README.md"] = RepoFile("README.md", b"changed")
    again = RepoSnapshot(dict(files), version="c2")
    _same(compile_repo(again, cache=cache), compile_repo(again))
    assert cache.compiled == before  # a non-config file: nothing recompiled


@pytest.mark.parametrize(
    ("path", "old", "new", "uses"),
    [
        # the queue is built once per compile; every operation on it depends on its file
        ("queues/team-b.yaml", b"priority: 90", b"priority: 91", lambda op: op.queue == "team-b"),
        # so is a connection
        (
            "connections/hf-token.yaml",
            b"kind: Connection",
            b"# edited\nkind: Connection",
            lambda op: "hf-token" in op.connections,
        ),
        # and the cluster a queue is on, read while building the queue
        ("clusters/local.yaml", b"kind: Cluster", b"# edited\nkind: Cluster", lambda op: True),
    ],
)
def test_a_file_built_once_per_compile_is_a_read_of_every_operation_that_uses_it(
    path: str, old: bytes, new: bytes, uses: object
) -> None:
    """Queues and connections are built once per compile (``RepoIndex.memoized``): the
    operations compiled after the first that used one still depend on its files, so a
    change to them recompiles exactly those operations."""
    cache = CompileCache()
    first = compile_repo(BASE, cache=cache)
    assert first.valid, first.errors
    compiled = (*first.operations, *first.schedules)  # a schedule's templates too
    users = {op.path for op in compiled if uses(op)}  # type: ignore[operator]
    assert len(users) >= 2  # the second one took the built spec
    files = dict(BASE.files)
    assert old in files[path].content
    files[path] = replace(files[path], content=files[path].content.replace(old, new, 1))
    before = cache.compiled
    snapshot = RepoSnapshot(files, version="c1")
    _same(compile_repo(snapshot, cache=cache), compile_repo(snapshot))
    assert cache.compiled - before == len(users)
