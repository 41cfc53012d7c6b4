"""A parse cache makes a new commit reparse only the files it changed, with the same result."""

from __future__ import annotations

from support.snapshots import overlay

from reconciler.core.compile import compile_repo
from reconciler.core.load import ParseCache
from reconciler.core.types import RepoSnapshot


def test_cached_compile_equals_a_fresh_one_and_reparses_only_changes(
    template: RepoSnapshot,
) -> None:
    cache = ParseCache()
    first = compile_repo(template, cache)
    assert first == compile_repo(template)
    parsed = cache.misses
    assert parsed > 10 and cache.hits == 0

    again = compile_repo(template, cache)
    assert again == first
    assert cache.misses == parsed  # nothing changed: nothing reparsed

    path = "queues/team-a.yaml"
    changed = overlay(
        template,
        {path: template.files[path].content.replace(b"priority: 100", b"priority: 500")},
    )
    edited = compile_repo(changed, cache)
    assert cache.misses == parsed + 1  # only the edited file
    assert edited == compile_repo(changed)
    assert edited.queues["team-a"].priority == 500


def test_cache_forgets_deleted_files_and_keeps_errors(template: RepoSnapshot) -> None:
    cache = ParseCache()
    broken = overlay(template, {"queues/team-a.yaml": "kind: Queue\nname: [\n"})
    bad = compile_repo(broken, cache)
    assert bad.errors
    assert compile_repo(broken, cache).errors == bad.errors  # from the cache, same errors
    added = overlay(template, {"queues/extra.yaml": "kind: Queue\nname: extra\ncluster: local\n"})
    assert compile_repo(added, cache).queues["extra"].cluster == "local"
    assert "queues/extra.yaml" in cache._entries
    compile_repo(template, cache)
    assert "queues/extra.yaml" not in cache._entries
