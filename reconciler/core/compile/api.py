"""The entry points: ``compile_repo`` (every file validated, every operation compiled) and
``compile_operation`` (one operation, parsing only the files it needs).

What must live here: the whole-repo passes (load every file, check every reference, compile
every operation, gather the repo's clusters, queues and connections) and the boundary where
an unexpected exception becomes an ``InternalError``: a bug is never a config error.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from operator import attrgetter
from typing import cast

from reconciler.core import gcpause
from reconciler.core.compile.cache import CompileCache, KeptOperation
from reconciler.core.compile.errors import Errors
from reconciler.core.compile.index import RepoIndex, name_of
from reconciler.core.compile.names import (
    Claim,
    check_namespaces,
    check_unique,
    claims,
)
from reconciler.core.compile.operations import OperationResult, compile_one
from reconciler.core.compile.references import (
    check_cohorts,
    check_flavors,
    check_notifications,
    check_references,
    find_cluster,
    find_cohort,
    find_connection,
    find_flavor,
    find_queue,
)
from reconciler.core.load import ParseCache
from reconciler.core.types import (
    CompiledOperation,
    CompiledRepo,
    InternalError,
    OrgSettings,
    RejectedOperation,
    RepoSnapshot,
)

# the parts of kept entries and results taken whole, in C (per operation, 100,000 of them)
_RESULT, _CLAIMS = attrgetter("result"), attrgetter("claims")
_REJECTED, _SCHEDULED, _OPERATIONS = (
    attrgetter("rejected"),
    attrgetter("scheduled"),
    attrgetter("operations"),
)


def compile_repo(
    snapshot: RepoSnapshot,
    parse_cache: ParseCache | None = None,
    *,
    cache: CompileCache | None = None,
) -> CompiledRepo:
    """Validate every file and compile every operation of ``snapshot``. Problems in the
    config are ``errors``; a bug in the compiler raises ``InternalError``.

    With ``parse_cache``, files whose content did not change since the last call are not
    parsed again; with ``cache`` (which has its own parse cache), operations whose inputs
    did not change are not compiled again either (``cache.py``)."""
    try:
        with gcpause.paused():  # a cold compile: millions of long-lived objects (gcpause.py)
            if cache is not None:
                return _compile_repo(snapshot, cache.parse_cache, cache)
            if parse_cache is not None:
                parse_cache.retain(snapshot.files)
            return _compile_repo(snapshot, parse_cache, None)
    except InternalError:
        raise
    except Exception as exc:  # a bug: never reported as a config error
        raise InternalError("compiling the config repo", exc) from exc


def compile_operation(snapshot: RepoSnapshot, operation: str) -> OperationResult:
    """Compile one ``project/name``, parsing only the files it needs.

    ``errors`` holds problems in those files; a missing operation gives ``found=False``; a
    bug in the compiler raises ``InternalError``.
    """
    project, _, name = operation.partition("/")
    try:
        repo = RepoIndex(snapshot)
    except InternalError:
        raise
    except Exception as exc:  # a bug: never reported as a config error
        raise InternalError("indexing the config repo", exc) from exc
    result = _compile_guarded(repo, project, name)
    return OperationResult(
        operation,
        found=result.found,
        compiled=result.compiled,
        operations=result.operations,
        rejected=result.rejected,
        errors=repo.errors.finish(result.errors),
        scheduled=result.scheduled,
    )


def _compile_guarded(repo: RepoIndex, project: str, name: str) -> OperationResult:
    """``compile_one``, with an unexpected exception raised as the ``InternalError`` it is."""
    try:
        return compile_one(repo, project, name)
    except InternalError:
        raise
    except Exception as exc:  # a bug, not a problem in the operation
        path = repo.projects[project].operations.get(name) if project in repo.projects else None
        raise InternalError(f"compiling operation {project}/{name}", exc, path) from exc


def _compile_cached(
    repo: RepoIndex, project: str, name: str, cache: CompileCache | None
) -> tuple[OperationResult, Sequence[Claim]]:
    """The operation's result and its name claims, compiled (and kept, with a cache: the
    caller takes a kept one itself)."""
    path = repo.projects[project].operations[name]
    if cache is None:
        result = _compile_guarded(repo, project, name)
        return result, claims(repo, result)
    with repo.recording() as reads:
        result = _compile_guarded(repo, project, name)
    claimed = claims(repo, result)  # from the operation's own file: one of ``reads``
    cache.store(project, name, reads, result, claimed, repo.file_errors(path))
    repo.release(path)  # its parse is needed no more
    return result, claimed


def _load_all(repo: RepoIndex) -> None:
    repo.org()
    for kind, names in repo.named.items():
        for name, path in names.items():
            repo.load(path, kind, name)
    for path, kind in repo.other:
        repo.load(path, kind, name_of(path))
    for name in repo.named["Queue"]:
        find_queue(repo, name)
    check_cohorts(repo)
    check_flavors(repo)
    check_references(repo)
    check_notifications(repo)


def _compile_repo(
    snapshot: RepoSnapshot, parse_cache: ParseCache | None, cache: CompileCache | None
) -> CompiledRepo:
    repo = RepoIndex(
        snapshot,
        parse_cache,
        cache.loads if cache is not None else None,
        keep_operations=cache is None,
        base=cache.index_base if cache is not None else None,
    )
    if cache is not None:
        # indexed in full: forget what left the repo (a derived index names the files
        # removed, and ``begin`` forgets their operations)
        if repo.changed is None:
            cache.retain(
                snapshot.files,
                ((p, n) for p, entry in repo.projects.items() for n in entry.operations),
            )
        cache.begin(repo)
    _load_all(repo)
    errors = Errors()
    if cache is not None and cache.ordered(repo):
        return _compile_changed(snapshot, repo, cache, errors)
    # per operation, in order: its result and claims (the kept ones looked up in one pass)
    results: list[OperationResult] = []
    claimed: list[Sequence[Claim]] = []
    keys: list[tuple[str, str]] = []
    for project in sorted(repo.projects):
        entry = repo.projects[project]
        if cache is None:
            for name in sorted(entry.operations):
                result, its_claims = _compile_cached(repo, project, name, None)
                results.append(result)
                claimed.append(its_claims)
            continue
        names = cache.names(entry)
        kept, missing = cache.reusable_all(project, names)
        for i in missing:
            _compile_cached(repo, project, names[i], cache)
            kept[i] = cache.kept(project, names[i])
        done = cast(list[KeptOperation], kept)
        results.extend(map(_RESULT, done))
        claimed.extend(map(_CLAIMS, done))
        keys.extend(zip(repeat(project), names))
    if cache is None:
        errors.extend(chain.from_iterable(r.errors for r in results))
    else:
        # the kept operations' problems, from the entries that have any: a kept file's
        # are the repo's, reported again (the file is not loaded: unchanged, or the entry
        # would be forgotten); those of one compiled now are reported already, and
        # ``finish`` lists each problem once
        file_errors, result_errors = cache.problems()
        repo.errors.extend(file_errors)
        errors.extend(result_errors)
    rejected = [r for r in map(_REJECTED, results) if r]
    schedules = list(chain.from_iterable(map(_SCHEDULED, results)))
    operations = list(chain.from_iterable(map(_OPERATIONS, results)))
    if cache is not None:
        twice = cache.check_claims(claimed, errors)
    else:
        twice = check_unique(chain.from_iterable(claimed), errors)
    if twice:  # the commit is invalid, but each id is listed once (as the planner needs)
        unique: dict[str, CompiledOperation] = {}
        for op in operations:
            unique.setdefault(op.id, op)
        operations = list(unique.values())
    if cache is not None:
        cache.put_in_order(keys)
    return _compiled(snapshot, repo, errors, tuple(operations), rejected, schedules, cache, twice)


def _compile_changed(
    snapshot: RepoSnapshot, repo: RepoIndex, cache: CompileCache, errors: Errors
) -> CompiledRepo:
    """``_compile_repo`` of a commit whose index is derived from the last one: the
    operations forgotten or added compiled, the repo's put together from the cache's order
    (``cache.py``)."""
    try:
        for project, name in cache.to_compile(repo):
            _compile_cached(repo, project, name, cache)
    except BaseException:
        cache.unordered()
        raise
    file_errors, result_errors = cache.problems()  # as in ``_compile_repo``
    repo.errors.extend(file_errors)
    errors.extend(result_errors)
    operations, rejected, schedules = cache.joined()
    twice = cache.check_claims(cache.claims_in_order(), errors)
    if twice:
        unique: dict[str, CompiledOperation] = {}
        for op in operations:
            unique.setdefault(op.id, op)
        operations = tuple(unique.values())
    return _compiled(snapshot, repo, errors, operations, rejected, schedules, cache, twice)


def _compiled(
    snapshot: RepoSnapshot,
    repo: RepoIndex,
    errors: Errors,
    operations: tuple[CompiledOperation, ...],
    rejected: Sequence[RejectedOperation],
    schedules: Sequence[CompiledOperation],
    cache: CompileCache | None,
    twice: set[str],
) -> CompiledRepo:
    """The compiled repo: the operations given, and the repo's clusters, queues,
    connections, cohorts and flavors; with a cache, its operations indexed by it."""
    check_namespaces(repo, errors)
    clusters = {n: c for n in sorted(repo.named["Cluster"]) if (c := find_cluster(repo, n))}
    queues = {n: q for n in sorted(repo.named["Queue"]) if (q := find_queue(repo, n))}
    connections = {
        n: cn for n in sorted(repo.named["Connection"]) if (cn := find_connection(repo, n))
    }
    cohorts = {n: co for n in sorted(repo.named["Cohort"]) if (co := find_cohort(repo, n))}
    flavors = {n: f for n in sorted(repo.named["Flavor"]) if (f := find_flavor(repo, n))}
    compiled = CompiledRepo(
        version=snapshot.version,
        org=repo.org_settings(),
        clusters=clusters,
        queues=queues,
        operations=operations,
        rejected=tuple(rejected),
        errors=repo.errors.finish(errors),
        connections=connections,
        cohorts=cohorts,
        flavors=flavors,
        schedules=tuple(schedules),
    )
    index = cache.index(operations, not twice) if cache is not None else None
    return compiled if index is None else compiled.indexed(*index)


def org_settings(snapshot: RepoSnapshot) -> tuple[OrgSettings, tuple[str, ...]]:
    """The org's settings (``reconciler.yaml``) alone, without compiling the operations (for
    ``reconciler usage``: its windows are in the org's timezone), and the problems found in
    that file (the defaults are used then)."""
    repo = RepoIndex(snapshot)
    settings = repo.org_settings()
    path = repo.org_path
    return settings, tuple(
        str(e) for e in repo.errors.finish([]) if path is not None and e.location.file == path
    )
