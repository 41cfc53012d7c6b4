"""The reconciler compiles a config version once: an unchanged snapshot reuses the compiled
repo (no reparse, no recompile); a new one recompiles, reparsing only the files it changed."""

from __future__ import annotations

from dataclasses import replace

from support.paths import TEMPLATE
from support.snapshots import overlay

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, KubeError
from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime.cycle import Reconciler

EDITED = "projects/vision/operations/dedupe.yaml"


def unreachable(spec: ClusterSpec) -> Kube:
    raise KubeError(f"cluster {spec.name} is not there in a unit test")


def reconciler_over(snapshots: list[RepoSnapshot]) -> Reconciler:
    feed = iter(snapshots)
    return Reconciler(lambda: next(feed), unreachable, SystemClock(), watch=False)


def test_an_unchanged_version_reuses_the_compiled_repo() -> None:
    base = replace(snapshot_worktree(TEMPLATE), version="c1")
    rec = reconciler_over([base, base, replace(base, files=dict(base.files))])
    first = rec.run_once()
    kept = rec._last_good  # the config as compiled (a result's has its schedules' runs)
    misses = rec._parse_cache.misses
    second = rec.run_once()
    assert rec._last_good is kept
    rec.run_once()  # equal files in a new mapping: still the same config
    assert first.compiled is not None and first.compiled.valid
    assert rec._last_good is kept
    assert rec._parse_cache.misses == misses  # nothing parsed again
    assert second.plan is not None and second.version == "c1"


def test_a_new_version_recompiles_only_the_changed_operation() -> None:
    base = replace(snapshot_worktree(TEMPLATE), version="c1")
    text = base.files[EDITED].content.decode()
    edited = overlay(replace(base, version="c2"), {EDITED: text + "\n# edited\n"})
    rec = reconciler_over([base, edited])
    first = rec.run_once()
    misses = rec._parse_cache.misses
    compiled = rec._compile_cache.compiled
    second = rec.run_once()
    assert second.compiled is not first.compiled
    assert second.version == "c2"
    # operation files are parsed outside the parse cache (their parse is not kept)
    assert rec._parse_cache.misses == misses
    assert rec._compile_cache.compiled == compiled + 1  # only the edited operation


def test_a_new_version_reparses_only_the_changed_shared_file() -> None:
    base = replace(snapshot_worktree(TEMPLATE), version="c1")
    path = "queues/team-a.yaml"
    text = base.files[path].content.decode()
    edited = overlay(replace(base, version="c2"), {path: text + "\n# edited\n"})
    rec = reconciler_over([base, edited])
    rec.run_once()
    misses = rec._parse_cache.misses
    second = rec.run_once()
    assert second.version == "c2" and second.compiled is not None
    assert rec._parse_cache.misses == misses + 1  # only the edited file


def test_same_version_label_with_different_files_recompiles() -> None:
    base = replace(snapshot_worktree(TEMPLATE), version="worktree")
    broken = overlay(base, {EDITED: "kind: Operation\nname: [\n"})
    rec = reconciler_over([base, broken, broken])
    first = rec.run_once()
    kept = rec._last_good
    second = rec.run_once()
    third = rec.run_once()
    assert first.config_errors == ()
    assert second.config_errors and str(second.config_errors[0]).startswith(EDITED + ":")
    # the invalid snapshot is compiled once and its errors reported again from the cache
    assert third.config_errors == second.config_errors
    assert rec._last_good is kept  # the last good config stays in force
