"""Names that must be unique across the whole repo, so that no two operations can ever be
taken for one another: by the planner (an operation id), or by the cluster (a Job name).

- Every operation id is claimed once: a plain operation, a workflow (the parent) and each of
  its children, whether dispatchable or rejected by policy. A rejected workflow's children
  are never pruned while they run, so a child id that is also another operation's would
  shield that operation from being stopped.
- Every rendered workload name (``<project>-<operation>-g<generation>``, shortened with a
  hash) is unique within its namespace, rejected operations included: two operations that
  render the same Job would adopt each other's.
- No id is one a scheduled operation's runs take (``<op>-<YYYYMMDDHHMM>``, a scheduled
  workflow's ``<op>-<YYYYMMDDHHMM>-<child>``): the runs are added each cycle, and one that
  is also another operation would count as a tick already run, or be listed twice.
- Two projects share a namespace only when the org allows it
  (``policy.allowSharedNamespaces``); names still may not collide there.

A collision is a config error reported at both files.

What must live here: these repo-wide uniqueness rules and their messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.core.compile.errors import Errors
from reconciler.core.compile.index import RepoIndex
from reconciler.core.compile.operations import OperationResult
from reconciler.core.decision.render import workload_name
from reconciler.core.decision.schedule import TICK_PATTERN, tick_time
from reconciler.core.types import Location, printable_path


@dataclass(frozen=True, slots=True)
class Claim:
    """One operation id (and, when it renders a workload, its namespace and name)."""

    id: str
    what: str  # how a message names it: "operation p/x", "child 1 of matrix p/sweep"
    location: Location
    workload: tuple[str, str] | None = None  # (namespace, name)
    scheduled: bool = False  # a scheduled operation's: its runs' ids are taken


def claims(repo: RepoIndex, result: OperationResult) -> list[Claim]:
    """What one compiled operation claims: its own id, and its children's."""
    project, _, name = result.operation.partition("/")
    entry = repo.projects.get(project)
    path = entry.operations.get(name) if entry else None
    if path is None:
        return []
    loaded = repo.load(path, "Operation", name)
    doc = loaded.doc if loaded is not None else None

    def loc(*keys: str | int) -> Location:
        return doc.loc(keys, key=keys[-1] != "name") if doc is not None else Location(path, 1, 1)

    parent = result.compiled
    spec = parent.spec if parent is not None else {}
    workflow = "matrix" if "matrix" in spec else "dag" if "dag" in spec else None
    if parent is None or workflow is None:
        workload = (
            (parent.namespace, workload_name(project, name, parent.generation)) if parent else None
        )
        return [
            Claim(
                result.operation,
                f"operation {result.operation}",
                loc("name"),
                workload,
                scheduled=bool(result.scheduled),
            )
        ]
    out = [
        Claim(
            result.operation,
            f"{workflow} {result.operation}",
            loc(workflow),
            scheduled=bool(result.scheduled),
        )
    ]
    children = [op.id for op in result.operations or result.scheduled]
    if result.rejected is not None:
        children = list(result.rejected.children)
    dag = spec.get("dag") or {}
    for index, child in enumerate(children):
        child_name = child.partition("/")[2]
        if workflow == "matrix":
            what, where = f"child {index} of matrix {result.operation}", loc("matrix")
        else:
            short = child_name.removeprefix(f"{name}-")
            i = next(
                (i for i, c in enumerate(dag.get("operations") or []) if c.get("name") == short), 0
            )
            what = f"child {short!r} of DAG {result.operation}"
            where = loc("dag", "operations", i, "name")
        workload = (parent.namespace, workload_name(project, child_name, parent.generation))
        out.append(Claim(child, what, where, workload))
    return out


def index_claims(
    all_claims: Iterable[Claim],
) -> tuple[dict[str, Claim], dict[tuple[str, str], Claim]] | None:
    """The claims by id and by workload when :func:`check_unique` has nothing to say of
    them (no id nor workload claimed twice, no scheduled operation); else None."""
    ids: dict[str, Claim] = {}
    workloads: dict[tuple[str, str], Claim] = {}
    for claim in all_claims:
        if claim.scheduled or claim.id in ids:
            return None
        ids[claim.id] = claim
        if claim.workload is not None:
            if claim.workload in workloads:
                return None
            workloads[claim.workload] = claim
    return ids, workloads


def check_unique(all_claims: Iterable[Claim], errors: Errors) -> set[str]:
    """Report ids and workload names claimed twice, at both places. Returns the ids claimed
    more than once (after the first)."""
    ids: dict[str, Claim] = {}
    workloads: dict[tuple[str, str], Claim] = {}
    twice: set[str] = set()
    for claim in all_claims:
        first = ids.get(claim.id)
        if first is not None:
            message = (
                f"operation id {claim.id!r} names two operations: {first.what} "
                f"({printable_path(first.location.file)}) and {claim.what} "
                f"({printable_path(claim.location.file)}); rename one"
            )
            errors.add_once(first.location, message)
            errors.add_once(claim.location, message)
            twice.add(claim.id)
            continue
        ids[claim.id] = claim
        if claim.workload is None:
            continue
        other = workloads.get(claim.workload)
        if other is not None:
            namespace, workload = claim.workload
            message = (
                f"workload name {workload!r} in namespace {namespace!r} is rendered by two "
                f"operations: {other.what} ({printable_path(other.location.file)}) and "
                f"{claim.what} ({printable_path(claim.location.file)}); rename one"
            )
            errors.add_once(other.location, message)
            errors.add_once(claim.location, message)
            continue
        workloads[claim.workload] = claim
    _check_ticks(ids, errors)
    return twice


def _check_ticks(ids: dict[str, Claim], errors: Errors) -> None:
    """Report ids that a scheduled operation's runs take, at both places."""
    scheduled = {i: c for i, c in ids.items() if c.scheduled}
    if not scheduled:
        return
    for claim in ids.values():
        for match in TICK_PATTERN.finditer(claim.id):
            owner = scheduled.get(claim.id[: match.start()])
            if owner is None or tick_time(owner.id, claim.id) is None:
                continue
            message = (
                f"operation id {claim.id!r} is the name of a run of the scheduled "
                f"{owner.what} ({printable_path(owner.location.file)}); {claim.what} "
                f"({printable_path(claim.location.file)}) would be taken for it: rename one"
            )
            errors.add_once(owner.location, message)
            errors.add_once(claim.location, message)


def check_namespaces(repo: RepoIndex, errors: Errors) -> None:
    """One project per namespace, unless ``policy.allowSharedNamespaces``."""
    if repo.org_settings().policy.allow_shared_namespaces:
        return
    owners: dict[str, list[tuple[str, Location]]] = {}
    for name in sorted(repo.projects):
        loaded = repo.project(name)
        if loaded is None:
            continue
        namespace = loaded.model.namespace or name
        owners.setdefault(namespace, []).append((name, loaded.doc.loc(("namespace",))))
    for namespace, projects in owners.items():
        if len(projects) < 2:
            continue
        for name, location in projects:
            others = ", ".join(repr(p) for p, _ in projects if p != name)
            errors.add(
                location,
                f"namespace {namespace!r} is also the namespace of project {others}: projects "
                "share a namespace only with policy.allowSharedNamespaces: true in "
                "reconciler.yaml",
            )
