"""One operation compiled, steps 1-7 of docs/presets.md: the operation as written, patched
by its presets, its queue defaulted, the merged spec validated, then resolved
(``resolve.py``), expanded when it is a workflow (``workflows.py``) and rejected on a
policy violation.

What must live here: that pipeline, the order of its steps, and its result,
``OperationResult``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from reconciler.core.compile.errors import Errors, at
from reconciler.core.compile.index import Loaded, RepoIndex, locator
from reconciler.core.compile.merge import Path, apply_layer, dotted, start
from reconciler.core.compile.model import ConnectionFile, OperationFile, ProjectFile
from reconciler.core.compile.notifications import notify_rules
from reconciler.core.compile.policy import Violation
from reconciler.core.compile.references import (
    connection_file,
    find_preset,
    org_default_presets,
    preset_is_defined,
    preset_layer,
    unknown_name,
    unknown_org_preset,
    unknown_preset,
)
from reconciler.core.compile.resolve import Context, build, resolve, validate_spec
from reconciler.core.compile.workflows import Child, expand
from reconciler.core.decision.schedule import parse_instant
from reconciler.core.quantity import duration_seconds
from reconciler.core.types import (
    CompiledOperation,
    ConcurrencyPolicy,
    ConfigError,
    Location,
    NotifyRule,
    Provenance,
    RejectedOperation,
    RejectReason,
    ScheduleSpec,
)


@dataclass(frozen=True, slots=True)
class OperationResult:
    """One operation compiled. ``compiled`` is the operation itself (for a workflow, the
    parent with its ``matrix``/``dag``); ``operations`` what gets dispatched (the children of a
    workflow, else just ``compiled``). ``rejected`` is set on a policy violation."""

    operation: str  # "project/name"
    found: bool
    compiled: CompiledOperation | None = None
    operations: tuple[CompiledOperation, ...] = ()
    rejected: RejectedOperation | None = None
    errors: tuple[ConfigError, ...] = ()
    # a scheduled operation's templates (``operations`` is empty): ``CompiledRepo.schedules``
    scheduled: tuple[CompiledOperation, ...] = ()


_TICK = "-YYYYMMDDHHMM"


def _schedule_spec(data: Mapping[str, Any]) -> ScheduleSpec:
    """A validated ``schedule`` (``model.Schedule``) as the compiler keeps it."""
    deadline = data.get("startingDeadline")
    frequency = data.get("frequency")
    start, end = data.get("startAt"), data.get("endAt")
    return ScheduleSpec(
        kind=data["kind"],
        cron=data.get("cron") or "",
        every=duration_seconds(frequency) if frequency is not None else 0,
        timezone=data.get("timezone") or "UTC",
        start_at=parse_instant(start) if start is not None else None,
        end_at=parse_instant(end) if end is not None else None,
        max_runs=data.get("maxRuns"),
        concurrency_policy=ConcurrencyPolicy(data.get("concurrencyPolicy") or "Forbid"),
        starting_deadline=duration_seconds(deadline) if deadline is not None else None,
    )


def _default_refs(repo: RepoIndex, proj: Loaded[ProjectFile]) -> tuple[tuple[str, Location], ...]:
    """The presets every operation of the project applies first, and where each is named:
    the org's ``defaults.presets``, then the project's (once per compile)."""
    refs: list[tuple[str, Location]] = org_default_presets(repo)
    defaults = proj.model.defaults
    for i, name in enumerate((defaults.presets if defaults else None) or []):
        refs.append((name, proj.doc.loc(("defaults", "presets", i))))
    return tuple(refs)


def _allowed(proj: Loaded[ProjectFile]) -> frozenset[str] | None:
    """The project's ``allowedQueues`` (once per compile)."""
    listed = proj.model.allowed_queues
    return frozenset(listed) if listed is not None else None


def _notify_rules(
    repo: RepoIndex, proj: Loaded[ProjectFile], op: Loaded[OperationFile], errors: Errors
) -> tuple[NotifyRule, ...]:
    """The project's ``notifications`` (checked with the repo's files) and the operation's
    own (checked here: a missing or wrong secret connection is this operation's error)."""

    def connection(name: str) -> ConnectionFile | None:
        return connection_file(repo, name)

    def unknown(name: str) -> str:
        return unknown_name(repo, "connection", name, "Connection")

    own = notify_rules(op.doc, op.model.notifications, connection, unknown, errors.add)
    return notify_rules(proj.doc, proj.model.notifications, connection, unknown) + own


def compile_one(repo: RepoIndex, project_name: str, op_name: str) -> OperationResult:
    """Compile ``project_name/op_name``; ``errors`` are those of this operation (problems in
    the files it loaded are in ``repo.errors``)."""
    op_id = f"{project_name}/{op_name}"
    project = repo.projects.get(project_name)
    op_path = project.operations.get(op_name) if project else None
    if project is None or op_path is None:
        return OperationResult(op_id, found=False)
    proj = repo.project(project_name)
    loaded = repo.load(op_path, "Operation", op_name)
    if proj is None or loaded is None:
        return OperationResult(op_id, found=True)
    if repo.org_path is not None and repo.org() is None:
        # every operation reads reconciler.yaml (its default queue and presets, policy):
        # compiled without it, each would report what that file's own error explains
        return OperationResult(op_id, found=True)
    doc, model = loaded.doc, loaded.model
    org = repo.org_settings()
    errors = Errors()
    fallback = doc.loc(("name",)) if "name" in doc.data else doc.loc()

    # 1. The operation as written.
    spec, prov = start(doc.data, locator(doc), doc.path, "operation")
    spec["name"] = op_name

    # 2. Presets: the org's defaults, the project's, then the operation's own, each once.
    defaults = proj.model.defaults
    refs = list(repo.memoized(("Defaults", project_name), lambda: _default_refs(repo, proj)))
    for i, name in enumerate(model.presets or []):
        refs.append((name, doc.loc(("presets", i))))
    applied: list[str] = []
    broken = False  # a preset whose file is invalid: its own error says why
    for name, ref in refs:
        if name in applied:
            continue
        preset = find_preset(repo, project_name, name)
        if preset is None:
            if not preset_is_defined(repo, project_name, name):
                org_ref = ref.file == repo.org_path
                errors.add(
                    ref, unknown_org_preset(name) if org_ref else unknown_preset(project_name, name)
                )
            else:
                broken = True
            continue
        spec, prov = apply_layer(spec, prov, preset_layer(repo, preset))
        applied.append(name)
    if errors or broken:  # without the preset, every field it sets would read as unset
        return OperationResult(op_id, found=True, errors=tuple(errors))

    # 3. Queue defaults: the project's, then the org's.
    if spec.get("queue") is None:
        if defaults and defaults.queue:
            loc = proj.doc.loc(("defaults", "queue"))
            spec["queue"] = defaults.queue
            prov[("queue",)] = Provenance(proj.path, loc.line, "project default", loc.col)
        elif org.default_queue:
            org_loaded = repo.org()
            assert org_loaded is not None
            loc = org_loaded.doc.loc(("defaults", "queue"))
            spec["queue"] = org.default_queue
            prov[("queue",)] = Provenance(org_loaded.path, loc.line, "org default", loc.col)

    # 3a. Outputs: the project's default connection, then the org's.
    run = spec.get("run")
    if isinstance(run, dict) and run.get("outputs") is None:
        if defaults and defaults.outputs:
            loc = proj.doc.loc(("defaults", "outputs"))
            spec["run"] = {**run, "outputs": defaults.outputs}
            prov[("run", "outputs")] = Provenance(proj.path, loc.line, "project default", loc.col)
        elif org.default_outputs:
            org_loaded = repo.org()
            assert org_loaded is not None
            loc = org_loaded.doc.loc(("defaults", "outputs"))
            spec["run"] = {**run, "outputs": org.default_outputs}
            prov[("run", "outputs")] = Provenance(org_loaded.path, loc.line, "org default", loc.col)

    # 3b. Priority: the project's default where the operation and its presets set none.
    if spec.get("priority") is None and defaults and defaults.priority is not None:
        loc = proj.doc.loc(("defaults", "priority"))
        spec["priority"] = defaults.priority
        prov[("priority",)] = Provenance(proj.path, loc.line, "project default", loc.col)

    # 4. The merged spec must itself be a valid, complete operation.
    def locate_merged(path: Path, key: bool = False) -> Location:
        return at(prov, path, fallback)

    def unset(path: Path) -> tuple[Location, str]:
        return doc.loc(("run",)), f"{dotted(path)} is not set by the operation or its presets"

    validate_spec(
        spec,
        locate_merged,
        errors,
        prefix="after merging presets: ",
        unset=unset,
        validated=repo.validated,
    )
    if errors:
        return OperationResult(op_id, found=True, errors=tuple(errors))

    rules = _notify_rules(repo, proj, loaded, errors)
    if errors:
        return OperationResult(op_id, found=True, errors=tuple(errors))
    ctx = Context(
        project=project_name,
        namespace=proj.model.namespace or project_name,
        allowed_queues=repo.memoized(("AllowedQueues", project_name), lambda: _allowed(proj)),
        org=org,
        op_path=op_path,
        presets=tuple(applied),
        notifications=rules,
    )
    # 5-6. Queue, connections, requests, policy.
    resolved = resolve(repo, ctx, spec, prov, fallback, errors)
    if resolved is None:
        return OperationResult(op_id, found=True, errors=tuple(errors))
    compiled = build(ctx, repo, op_name, spec, prov, resolved)
    # 7. Workflows expand into children, each resolved and policed on its own.
    children: list[Child] = []
    if "matrix" in spec or "dag" in spec:
        children = expand(repo, ctx, doc, op_name, spec, prov, fallback, errors)
        if errors:
            return OperationResult(op_id, found=True, compiled=compiled, errors=tuple(errors))
    violations: list[tuple[str | None, Violation]] = (
        [(None, v) for v in resolved.violations]
        if not children
        else [(child.name, v) for child, vs in children for v in vs]
    )
    if violations:
        seen: list[str] = []
        for child_name, v in violations:
            text = f"{child_name}: {v}" if child_name else str(v)
            if text not in seen:
                seen.append(text)
        first = violations[0][1].provenance
        rejected = RejectedOperation(
            operation=op_id,
            path=op_path,
            reason=RejectReason.POLICY_VIOLATION,
            message="; ".join(seen),
            location=first.location if first else fallback,
            children=tuple(c.id for c, _ in children),
            notifications=rules,
            cluster=compiled.cluster,
            namespace=compiled.namespace,
        )
        return OperationResult(op_id, found=True, compiled=compiled, rejected=rejected)
    operations = tuple(c for c, _ in children) if children else (compiled,)
    if "schedule" in spec:
        # templates, never dispatched: each fire time makes a run of them
        # (core/decision/schedule.py)
        longest = max(operations, key=lambda o: len(o.name))
        if len(longest.name) + len(_TICK) > 63:
            errors.add(
                fallback,
                f"{longest.name!r} is too long to be scheduled: its runs add {_TICK!r} and a "
                "name is at most 63 characters",
            )
            return OperationResult(op_id, found=True, compiled=compiled, errors=tuple(errors))
        schedule = _schedule_spec(spec["schedule"])
        return OperationResult(
            op_id,
            found=True,
            compiled=replace(compiled, schedule=schedule),
            scheduled=tuple(replace(o, schedule=schedule) for o in operations),
        )
    return OperationResult(op_id, found=True, compiled=compiled, operations=operations)
