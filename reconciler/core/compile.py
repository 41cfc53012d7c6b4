"""Compile a repo snapshot into dispatchable operations (pure: snapshot in, values out).

``compile_repo`` validates every file and compiles every operation; ``compile_operation``
parses only what one operation needs. Neither raises on bad input: problems become
``ConfigError`` (the commit is invalid) or ``RejectedOperation`` (that operation may not run).

Per operation (docs/presets.md):

1. start from the operation as written;
2. patch with the project's ``defaults.presets`` then the operation's ``presets``, each with
   its own strategy (project presets shadow org presets of the same name);
3. fill ``queue`` from the project default, then the org default;
4. validate the merged spec; resolve the queue, its cluster and the connections;
5. total the resource requests;
6. check org policy (violations reject the operation, naming field and provenance);
7. expand matrix / DAG workflows into children.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from reconciler.core.load import Document, ParseCache, parse_yaml, resolve_files
from reconciler.core.merge import (
    Locate,
    Path,
    ProvMap,
    apply_patch,
    dotted,
    lookup,
    start,
)
from reconciler.core.model import (
    KINDS,
    ClusterFile,
    ConnectionFile,
    OperationFile,
    OrgFile,
    PresetFile,
    ProjectFile,
    QueueFile,
    Strict,
    field_names,
    to_snake,
)
from reconciler.core.policy import Violation, check_policy
from reconciler.core.quantity import QuantityError, format_quantity, parse_quantity
from reconciler.core.types import (
    BASELINE_CAPABILITIES,
    ClusterSpec,
    CompiledOperation,
    CompiledRepo,
    ConfigError,
    ConnectionSpec,
    Location,
    MergeStrategy,
    OrgPolicy,
    OrgSettings,
    Provenance,
    QueueSpec,
    QueueStrategy,
    RejectedOperation,
    RejectReason,
    RepoSnapshot,
    RunKind,
    WorkflowRef,
)

MAX_WORKFLOW_CHILDREN = 1000
_YAML_EXT = (".yaml", ".yml")
_DIR_KINDS = {
    "clusters": "Cluster",
    "connections": "Connection",
    "queues": "Queue",
    "presets": "Preset",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PARAM_REF = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_PRESET_FIELDS = ("namespace", "queue", "run")

M = TypeVar("M", bound=Strict)


@dataclass(frozen=True)
class Loaded(Generic[M]):
    doc: Document
    model: M
    name: str

    @property
    def path(self) -> str:
        return self.doc.path


@dataclass(frozen=True)
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


# --- errors -------------------------------------------------------------------------------


def _err(location: Location, message: str) -> ConfigError:
    return ConfigError(location, message)


def _data_path(data: Any, loc: tuple[Any, ...], missing: bool) -> tuple[Path, bool, bool]:
    """Map a pydantic ``loc`` onto the data: (path, points at a key, skipped union labels)."""
    out: list[str | int] = []
    cur, is_key, skipped = data, False, False
    for i, part in enumerate(loc):
        if part == "[key]":
            is_key = True
        elif (isinstance(cur, dict) and part in cur) or (
            isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        ):
            out.append(part)
            cur = cur[part]
        elif missing and i == len(loc) - 1:
            out.append(part)
        else:
            skipped = True
    return tuple(out), is_key, skipped


def _capability(name: str) -> str:
    return name.upper().removeprefix("CAP_")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validation_errors(
    exc: ValidationError,
    data: Any,
    model: type[Strict],
    locate: Any,
) -> list[ConfigError]:
    """Pydantic errors as ``ConfigError``; ``locate(path, key=bool) -> Location``."""
    out: dict[tuple[Path, bool], ConfigError] = {}
    for error in exc.errors():
        kind = error["type"]
        path, is_key, skipped = _data_path(data, tuple(error["loc"]), kind == "missing")
        if kind == "extra_forbidden":
            name = str(path[-1]) if path else "?"
            message = f"unknown field {name!r}"
            allowed = field_names(model, path[:-1])
            if allowed:
                close = difflib.get_close_matches(name, allowed, n=1)
                message += (
                    f" (did you mean {close[0]!r}?)"
                    if close
                    else f" (allowed: {', '.join(allowed)})"
                )
            if len(path) > 1:
                message = f"{dotted(path[:-1])}: {message}"
            location, is_key = locate(path, key=True), True
        elif kind == "missing":
            message = f"missing required field {dotted(path)!r}"
            location = locate(path[:-1], key=False)
        else:
            msg = str(error["msg"])
            for prefix in ("Value error, ", "Assertion failed, "):
                msg = msg.removeprefix(prefix)
            if skipped and kind.endswith("_type"):
                msg = "has the wrong type (expected a string, number or boolean)"
            if kind.endswith("_type") or kind in ("literal_error", "enum"):
                value = error.get("input")
                if not isinstance(value, dict | list):
                    msg += f" (got {_short(value)})"
                else:
                    msg += f" (got a {'map' if isinstance(value, dict) else 'list'})"
            message = f"{dotted(path)}: {msg}" if path else msg
            location = locate(path, key=is_key)
        out.setdefault((path, is_key), _err(location, message))
    return list(out.values())


# --- the repo index -----------------------------------------------------------------------


@dataclass
class _Project:
    name: str
    path: str | None = None
    presets: dict[str, str] = field(default_factory=dict)
    operations: dict[str, str] = field(default_factory=dict)
    first_file: str = ""


def _stem(filename: str) -> str:
    return filename.rsplit(".", 1)[0]


class _Repo:
    """Lazily parsed, cached view of a snapshot; every problem lands in ``errors`` once."""

    def __init__(self, snapshot: RepoSnapshot, parse_cache: ParseCache | None = None) -> None:
        self.snapshot = snapshot
        self._parse = parse_cache.parse if parse_cache is not None else parse_yaml
        self.files, errors = resolve_files(snapshot)
        self.errors: list[ConfigError] = list(errors)
        self.org_path: str | None = None
        self.named: dict[str, dict[str, str]] = {k: {} for k in _DIR_KINDS.values()}
        self.projects: dict[str, _Project] = {}
        self.other: list[tuple[str, str]] = []  # (path, kind) of files with invalid names
        self._cache: dict[str, Loaded[Any] | None] = {}
        self._checked: set[str] = set()
        self._org_settings: OrgSettings | None = None
        self._provenance: dict[Provenance, Provenance] = {}
        self._index()

    def shared(self, prov: Provenance) -> Provenance:
        """One object per distinct provenance: a preset's leaves are the same in every
        operation that applies it."""
        return self._provenance.setdefault(prov, prov)

    # 1. layout
    def _index(self) -> None:
        for path in sorted(self.files):
            parts = path.split("/")
            if not parts[-1].endswith(_YAML_EXT):
                continue
            stem = _stem(parts[-1])
            top = parts[0]
            if len(parts) == 1:
                if stem == "reconciler":
                    self._register_org(path)
                continue
            if top in _DIR_KINDS:
                if len(parts) != 2:
                    self._fail(path, f"unexpected file: {top}/ holds <name>.yaml files directly")
                    continue
                self._register(path, _DIR_KINDS[top], stem, self.named[_DIR_KINDS[top]])
            elif top == "projects":
                self._index_project(path, parts)

    def _index_project(self, path: str, parts: list[str]) -> None:
        if len(parts) < 3:
            self._fail(path, "unexpected file: projects/ holds one directory per project")
            return
        name = parts[1]
        if not self._valid_name(path, name, "project directory"):
            return
        project = self.projects.setdefault(name, _Project(name, first_file=path))
        if len(parts) == 3 and _stem(parts[2]) == "project":
            if project.path is not None:
                self._fail(path, f"duplicate project file (also {project.path})")
            else:
                project.path = path
        elif len(parts) == 4 and parts[2] == "presets":
            self._register(path, "Preset", _stem(parts[3]), project.presets)
        elif len(parts) == 4 and parts[2] == "operations":
            self._register(path, "Operation", _stem(parts[3]), project.operations)
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
        if len(name) <= 63 and _DNS_LABEL.match(name):
            return True
        self._fail(
            path,
            f"{what} {name!r} is not a valid name: use lowercase letters, digits and '-' "
            "(DNS-1123 label, at most 63 characters)",
        )
        return False

    def _fail(self, path: str, message: str, line: int = 1, col: int = 1) -> None:
        self.errors.append(_err(Location(path, line, col), message))

    # 2. files
    def load(self, path: str, kind: str, name: str) -> Loaded[Any] | None:
        if path in self._cache:
            return self._cache[path]
        self._cache[path] = result = self._load(path, kind, name)
        return result

    def _load(self, path: str, kind: str, name: str) -> Loaded[Any] | None:
        doc, errors = self._parse(path, self.files[path])
        if doc is None:
            self.errors.extend(errors)
            return None
        data = doc.data
        if not isinstance(data, dict):
            self.errors.append(_err(doc.loc(), f"expected a mapping with 'kind: {kind}'"))
            return None
        written = data.get("kind")
        if written is None:
            self.errors.append(_err(doc.loc(), f"missing required field 'kind' (expected {kind})"))
            return None
        if written != kind:
            where = path.rsplit("/", 1)[0] + "/" if "/" in path else "the repo root"
            if isinstance(written, str) and written in KINDS:
                message = (
                    f"kind is {written!r}, but {where}{path.rsplit('/', 1)[-1]} must be {kind}"
                )
            else:
                message = f"unknown kind {_short(written)} (expected {kind})"
            self.errors.append(_err(doc.loc(("kind",)), message))
            return None
        model_type = KINDS[kind]
        try:
            model = model_type.model_validate(data)
        except ValidationError as exc:
            self.errors.extend(
                validation_errors(exc, data, model_type, lambda p, key: doc.loc(p, key=key))
            )
            return None
        if kind != "Org" and data.get("name") is not None and data["name"] != name:
            self.errors.append(
                _err(
                    doc.loc(("name",)),
                    f"name {data['name']!r} does not match the file name {name!r}",
                )
            )
            return None
        return Loaded(doc, model, name)

    def first_commit_time(self, path: str) -> Any:
        file = self.snapshot.files.get(path)
        return file.first_commit_time if file else None

    # 3. typed accessors
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

    def preset(self, project: str, name: str) -> Loaded[PresetFile] | None:
        path = self.projects[project].presets.get(name) if project in self.projects else None
        if path is not None:
            return self.load(path, "Preset", name)
        return self.get("Preset", name)

    def org_settings(self) -> OrgSettings:
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
        return OrgSettings(
            default_queue=m.defaults.queue if m.defaults else None,
            prune=prune.enabled if prune else False,
            max_prune_fraction=prune.max_fraction if prune else 0.5,
            allow_mass_prune=prune.allow_mass_prune if prune else False,
            status_branch=m.status.branch if m.status else "reconciler/status",
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
                else BASELINE_CAPABILITIES,
                allow_run_as_root=policy.allow_run_as_root if policy else True,
            ),
        )

    def cluster(self, name: str) -> ClusterSpec | None:
        loaded = self.get("Cluster", name)
        if loaded is None:
            return None
        m: ClusterFile = loaded.model
        return ClusterSpec(
            name=name,
            concurrency=m.concurrency,
            kubeconfig=dict(loaded.doc.data["kubeconfig"]),
            context=m.context,
        )

    def queue(self, name: str) -> QueueSpec | None:
        loaded = self.get("Queue", name)
        if loaded is None:
            return None
        m: QueueFile = loaded.model
        if self.cluster(m.cluster) is None:
            self._unknown_once(loaded.doc.loc(("cluster",)), "cluster", m.cluster, "Cluster")
            return None
        return QueueSpec(
            name=name,
            cluster=m.cluster,
            priority=m.priority,
            concurrency=m.concurrency,
            quota={k: parse_quantity(v) for k, v in (m.quota or {}).items()},
            kinds=frozenset(RunKind(k) for k in m.kinds) if m.kinds else frozenset(RunKind),
            strategy=QueueStrategy(m.strategy),
            paused=m.paused,
            source=loaded.path,
        )

    def connection(self, name: str) -> ConnectionSpec | None:
        loaded = self.get("Connection", name)
        if loaded is None:
            return None
        m: ConnectionFile = loaded.model
        kind = m.type
        source = getattr(m, to_snake(kind))
        return ConnectionSpec(
            name=name,
            type=kind,
            spec=source.model_dump(by_alias=True, exclude_none=True),
            source=loaded.path,
        )

    def unknown(self, location: Location, what: str, name: str, kind: str) -> ConfigError:
        known = sorted(self.named[kind])
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        folder = {"Cluster": "clusters", "Queue": "queues", "Connection": "connections"}[kind]
        return _err(location, f"unknown {what} {name!r}: no {folder}/{name}.yaml{hint}")

    def _unknown_once(self, location: Location, what: str, name: str, kind: str) -> None:
        error = self.unknown(location, what, name, kind)
        if error not in self.errors:
            self.errors.append(error)


# --- one operation ------------------------------------------------------------------------


def _locator(doc: Document, prefix: Path = ()) -> Locate:
    def locate(path: Path) -> tuple[int, int]:
        loc = doc.loc((*prefix, *path))
        return loc.line, loc.col

    return locate


def _preset_patch(loaded: Loaded[PresetFile]) -> tuple[dict[str, Any], Locate]:
    data = loaded.doc.data
    patch = {k: data[k] for k in _PRESET_FIELDS if k in data}
    shorthand = "connections" in data
    if shorthand:
        run = dict(patch.get("run") or {})
        run["connections"] = data["connections"]
        patch["run"] = run
    doc = loaded.doc

    def locate(path: Path) -> tuple[int, int]:
        if shorthand and path[:2] == ("run", "connections"):
            path = ("connections", *path[2:])
        loc = doc.loc(path)
        return loc.line, loc.col

    return patch, locate


def _get(spec: Mapping[str, Any], *path: str) -> Any:
    value: Any = spec
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _at(prov: Mapping[Path, Provenance], path: Path, fallback: Location) -> Location:
    found = lookup(prov, path)
    return found.location if found else fallback


def _is_extended(resource: str) -> bool:
    prefix, _, _ = resource.rpartition("/")
    return bool(prefix) and not prefix.endswith("kubernetes.io")


def total_requests(
    spec: Mapping[str, Any], prov: Mapping[Path, Provenance], fallback: Location
) -> tuple[dict[str, Decimal], list[ConfigError]]:
    """Total request per resource: the request, or the limit where only a limit is set."""
    resources = _get(spec, "run", "container", "resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    base: Path = ("run", "container", "resources")
    totals: dict[str, Decimal] = {}
    errors: list[ConfigError] = []
    for resource in sorted({*requests, *limits}):
        try:
            req = parse_quantity(requests[resource]) if resource in requests else None
            lim = parse_quantity(limits[resource]) if resource in limits else None
        except QuantityError as exc:  # pragma: no cover - the schema validated these
            errors.append(_err(fallback, str(exc)))
            continue
        where: Path = (*base, "requests" if req is not None else "limits", resource)
        location = _at(prov, where, fallback)
        if req is not None and lim is not None and req > lim:
            errors.append(
                _err(
                    location,
                    f"request for {resource} ({format_quantity(req)}) exceeds its limit "
                    f"({format_quantity(lim)})",
                )
            )
        if _is_extended(resource):
            for amount in (req, lim):
                if amount is not None and amount != amount.to_integral_value():
                    errors.append(
                        _err(location, f"{resource} must be a whole number, not {amount}")
                    )
                    break
            if req is not None and lim is not None and req != lim:
                errors.append(_err(location, f"requests and limits of {resource} must be equal"))
        total = req if req is not None else lim
        assert total is not None
        totals[resource] = total
    return totals, errors


@dataclass(frozen=True)
class _Context:
    project: str
    namespace: str
    allowed_queues: frozenset[str] | None
    org: OrgSettings
    op_path: str
    presets: tuple[str, ...]


@dataclass(frozen=True)
class _Resolved:
    queue: QueueSpec
    requests: dict[str, Decimal]
    connections: tuple[str, ...]
    violations: tuple[Violation, ...]


def _resolve(
    repo: _Repo, ctx: _Context, spec: Mapping[str, Any], prov: ProvMap, fallback: Location
) -> tuple[_Resolved | None, list[ConfigError]]:
    """Steps 4-6 for one (possibly child) spec: queue, connections, requests, policy."""
    errors: list[ConfigError] = []
    queue_name = spec.get("queue")
    queue: QueueSpec | None = None
    if queue_name is None:
        errors.append(
            _err(
                fallback,
                "no queue: set 'queue' in the operation or a preset, or defaults.queue in "
                "project.yaml or reconciler.yaml",
            )
        )
    else:
        queue = repo.queue(queue_name)
        if queue is None and repo.named["Queue"].get(queue_name) is None:
            errors.append(
                repo.unknown(_at(prov, ("queue",), fallback), "queue", queue_name, "Queue")
            )
    connections: list[str] = []
    specs: dict[str, ConnectionSpec] = {}
    for i, name in enumerate(_get(spec, "run", "connections") or []):
        conn = repo.connection(name)
        if conn is None:
            if repo.named["Connection"].get(name) is None:
                location = _at(prov, ("run", "connections", i), fallback)
                errors.append(repo.unknown(location, "connection", name, "Connection"))
            continue
        specs[name] = conn
        if name not in connections:
            connections.append(name)
    requests, request_errors = total_requests(spec, prov, fallback)
    errors.extend(request_errors)
    if errors or queue is None:
        return None, errors
    violations = check_policy(
        spec,
        prov,
        policy=ctx.org.policy,
        queue=queue,
        project=ctx.project,
        allowed_queues=ctx.allowed_queues,
        requests=requests,
        connections=specs,
    )
    return _Resolved(queue, requests, tuple(connections), violations), []


def _substitute(
    value: Any, params: Mapping[str, Any], path: Path, prov: ProvMap, fallback: Location
) -> tuple[Any, list[ConfigError]]:
    """Replace ``{{ params.NAME }}`` in every string under ``run``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        errors: list[ConfigError] = []
        for k, v in value.items():
            out[k], errs = _substitute(v, params, (*path, k), prov, fallback)
            errors += errs
        return out, errors
    if isinstance(value, list):
        items, errors = [], []
        for i, v in enumerate(value):
            item, errs = _substitute(v, params, (*path, i), prov, fallback)
            items.append(item)
            errors += errs
        return items, errors
    if not isinstance(value, str) or "{{" not in value:
        return value, []
    missing = [m for m in _PARAM_REF.findall(value) if m not in params]
    if missing:
        return value, [
            _err(
                _at(prov, path, fallback),
                f"unknown parameter {missing[0]!r} (params: {', '.join(params) or 'none'})",
            )
        ]
    return _PARAM_REF.sub(lambda m: _param_text(params[m.group(1)]), value), []


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _dag_order_errors(doc: Document, dag: Mapping[str, Any]) -> list[ConfigError]:
    """Unique child names, known dependencies, no cycles."""
    errors: list[ConfigError] = []
    ops = dag["operations"]
    names: dict[str, int] = {}
    for i, child in enumerate(ops):
        if child["name"] in names:
            errors.append(
                _err(
                    doc.loc(("dag", "operations", i, "name")),
                    f"duplicate DAG operation {child['name']!r}",
                )
            )
        names.setdefault(child["name"], i)
    for i, child in enumerate(ops):
        for j, dep in enumerate(child.get("dependencies") or []):
            loc = doc.loc(("dag", "operations", i, "dependencies", j))
            if dep == child["name"]:
                errors.append(_err(loc, f"{dep!r} depends on itself"))
            elif dep not in names:
                errors.append(_err(loc, f"unknown DAG dependency {dep!r}"))
    if errors:
        return errors
    # Depth-first search for a cycle; report the edge that closes it.
    graph = {c["name"]: list(c.get("dependencies") or []) for c in ops}
    state: dict[str, int] = {}
    for root in graph:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, k = stack[-1]
            if k < len(graph[node]):
                stack[-1] = (node, k + 1)
                dep = graph[node][k]
                if state.get(dep) == 1:
                    i = names[node]
                    return [
                        _err(
                            doc.loc(("dag", "operations", i, "dependencies", k)),
                            f"dependency cycle: {node!r} -> {dep!r} -> ... -> {node!r}",
                        )
                    ]
                if not state.get(dep):
                    state[dep] = 1
                    stack.append((dep, 0))
            else:
                state[node] = 2
                stack.pop()
    return []


def _child_name_error(doc: Document, parent: str, child: str) -> ConfigError | None:
    if len(child) > 63:
        return _err(
            doc.loc(("name",)),
            f"child name {child!r} is longer than 63 characters; shorten {parent!r}",
        )
    return None


def _compile(repo: _Repo, project_name: str, op_name: str) -> OperationResult:
    op_id = f"{project_name}/{op_name}"
    project = repo.projects.get(project_name)
    op_path = project.operations.get(op_name) if project else None
    if project is None or op_path is None:
        return OperationResult(op_id, found=False)
    proj = repo.project(project_name)
    loaded = repo.load(op_path, "Operation", op_name)
    if proj is None or loaded is None:
        return OperationResult(op_id, found=True)
    doc, model = loaded.doc, loaded.model
    org = repo.org_settings()
    errors: list[ConfigError] = []
    fallback = doc.loc(("name",)) if "name" in doc.data else doc.loc()

    # 1. The operation as written.
    spec, prov = start(doc.data, _locator(doc), doc.path, "operation")
    spec["name"] = op_name

    # 2. Presets: project defaults first, then the operation's own, each once.
    refs: list[tuple[str, Location]] = []
    defaults = proj.model.defaults
    for i, name in enumerate((defaults.presets if defaults else None) or []):
        refs.append((name, proj.doc.loc(("defaults", "presets", i))))
    for i, name in enumerate(model.presets or []):
        refs.append((name, doc.loc(("presets", i))))
    applied: list[str] = []
    for name, ref in refs:
        if name in applied:
            continue
        preset = repo.preset(project_name, name)
        if preset is None:
            known = repo.projects[project_name].presets.get(name) or repo.named["Preset"].get(name)
            if known is None:
                errors.append(
                    _err(
                        ref,
                        f"unknown preset {name!r}: no projects/{project_name}/presets/{name}.yaml "
                        f"or presets/{name}.yaml",
                    )
                )
            continue
        patch, locate = _preset_patch(preset)
        strategy = preset.model.patch_strategy
        spec, prov = apply_patch(
            spec, prov, patch, strategy, locate, preset.path, f"preset {name} ({strategy})"
        )
        applied.append(name)
    if errors:
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

    # 4. The merged spec must itself be a valid, complete operation.
    def locate_merged(path: Path, key: bool = False) -> Location:
        return _at(prov, path, fallback)

    try:
        OperationFile.model_validate(spec)
    except ValidationError as exc:
        for error in validation_errors(exc, spec, OperationFile, locate_merged):
            errors.append(_err(error.location, f"after merging presets: {error.message}"))
    if _get(spec, "run", "kind") is None:
        errors.append(
            _err(doc.loc(("run",)), "run.kind is not set by the operation or its presets")
        )
    if not _get(spec, "run", "container", "image"):
        errors.append(
            _err(
                doc.loc(("run",)), "run.container.image is not set by the operation or its presets"
            )
        )
    if errors:
        return OperationResult(op_id, found=True, errors=tuple(errors))

    ctx = _Context(
        project=project_name,
        namespace=proj.model.namespace or project_name,
        allowed_queues=frozenset(proj.model.allowed_queues)
        if proj.model.allowed_queues is not None
        else None,
        org=org,
        op_path=op_path,
        presets=tuple(applied),
    )
    resolved, errs = _resolve(repo, ctx, spec, prov, fallback)
    if resolved is None:
        return OperationResult(op_id, found=True, errors=tuple(errs))
    compiled = _build(ctx, repo, op_name, spec, prov, resolved)

    # 7. Workflows expand into children, each resolved and policed on its own.
    children: list[tuple[CompiledOperation, tuple[Violation, ...]]] = []
    if "matrix" in spec or "dag" in spec:
        children, errs = _expand(repo, ctx, doc, op_name, spec, prov, fallback)
        if errs:
            return OperationResult(op_id, found=True, compiled=compiled, errors=tuple(errs))
    violations = (
        [(None, v) for v in resolved.violations]
        if not children
        else [(child.name, v) for child, vs in children for v in vs]
    )
    if violations:
        seen: list[str] = []
        for child, v in violations:
            text = f"{child}: {v}" if child else str(v)
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
        )
        return OperationResult(op_id, found=True, compiled=compiled, rejected=rejected)
    operations = tuple(c for c, _ in children) if children else (compiled,)
    return OperationResult(op_id, found=True, compiled=compiled, operations=operations)


def _build(
    ctx: _Context,
    repo: _Repo,
    name: str,
    spec: Mapping[str, Any],
    prov: ProvMap,
    resolved: _Resolved,
    *,
    workflow: WorkflowRef | None = None,
    dependencies: tuple[str, ...] = (),
    params: Mapping[str, Any] | None = None,
) -> CompiledOperation:
    return CompiledOperation(
        project=ctx.project,
        name=name,
        path=ctx.op_path,
        queue=resolved.queue.name,
        cluster=resolved.queue.cluster,
        namespace=ctx.namespace,
        kind=RunKind(spec["run"]["kind"]),
        spec=spec,
        requests=resolved.requests,
        presets=ctx.presets,
        provenance={
            dotted(k): repo.shared(v)
            for k, v in sorted(prov.items(), key=lambda kv: _sort_key(kv[0]))
        },
        connections=resolved.connections,
        generation=int(spec.get("generation", 1)),
        is_approved=bool(spec.get("isApproved", True)),
        workflow=workflow,
        dependencies=dependencies,
        submitted_at=repo.first_commit_time(ctx.op_path),
        params=dict(params or {}),
    )


def _sort_key(path: Path) -> list[tuple[int, str | int]]:
    return [(0, p) if isinstance(p, int) else (1, p) for p in path]


def _expand(
    repo: _Repo,
    ctx: _Context,
    doc: Document,
    name: str,
    spec: dict[str, Any],
    prov: ProvMap,
    fallback: Location,
) -> tuple[list[tuple[CompiledOperation, tuple[Violation, ...]]], list[ConfigError]]:
    parent_id = f"{ctx.project}/{name}"
    base = {k: v for k, v in spec.items() if k not in ("matrix", "dag")}
    base_prov = {k: v for k, v in prov.items() if k[0] not in ("matrix", "dag")}
    layers: list[tuple[str, dict[str, Any], dict[str, Any], ProvMap, tuple[str, ...]]] = []
    errors: list[ConfigError] = []
    if "matrix" in spec:
        matrix = spec["matrix"]
        kind, concurrency = "matrix", matrix.get("concurrency")
        names = list(matrix["params"])
        count = math.prod(len(v) for v in matrix["params"].values())
        if count > MAX_WORKFLOW_CHILDREN:
            return [], [
                _err(
                    doc.loc(("matrix", "params")),
                    f"the matrix expands to {count} operations; the limit is "
                    f"{MAX_WORKFLOW_CHILDREN}",
                )
            ]
        for i, combo in enumerate(itertools.product(*matrix["params"].values())):
            layers.append(
                (f"{name}-{i}", dict(zip(names, combo, strict=True)), base, base_prov, ())
            )
    else:
        dag = spec["dag"]
        kind, concurrency = "dag", dag.get("concurrency")
        errors = _dag_order_errors(doc, dag)
        if errors:
            return [], errors
        for i, child in enumerate(dag["operations"]):
            child_spec, child_prov = base, base_prov
            if child.get("run") is not None:
                child_spec, child_prov = apply_patch(
                    base,
                    base_prov,
                    {"run": child["run"]},
                    MergeStrategy.REPLACE,
                    _locator(doc, ("dag", "operations", i)),
                    doc.path,
                    f"dag operation {child['name']}",
                )
            deps = tuple(f"{ctx.project}/{name}-{d}" for d in child.get("dependencies") or [])
            layers.append(
                (
                    f"{name}-{child['name']}",
                    dict(child.get("params") or {}),
                    child_spec,
                    child_prov,
                    deps,
                )
            )
    out: list[tuple[CompiledOperation, tuple[Violation, ...]]] = []
    for index, (child_name, params, child_spec, child_prov, deps) in enumerate(layers):
        problem = _child_name_error(doc, name, child_name)
        if problem:
            return [], [problem]
        run, errs = _substitute(child_spec["run"], params, ("run",), child_prov, fallback)
        errors += errs
        final = {**child_spec, "name": child_name, "run": run}
        resolved, errs = _resolve(repo, ctx, final, child_prov, fallback)
        errors += errs
        if resolved is None:
            continue
        ref = WorkflowRef(parent=parent_id, kind=kind, index=index, concurrency=concurrency)
        compiled = _build(
            ctx,
            repo,
            child_name,
            final,
            child_prov,
            resolved,
            workflow=ref,
            dependencies=deps,
            params=params,
        )
        out.append((compiled, resolved.violations))
    return out, sorted(set(errors))


# --- the whole repo -----------------------------------------------------------------------


def _check_references(repo: _Repo) -> None:
    """Names that must exist even when nothing uses them yet."""
    org = repo.org()
    if org is not None:
        m = org.model
        if m.defaults and m.defaults.queue and repo.named["Queue"].get(m.defaults.queue) is None:
            repo._unknown_once(
                org.doc.loc(("defaults", "queue")), "queue", m.defaults.queue, "Queue"
            )
        for i, q in enumerate((m.policy.allowed_queues if m.policy else None) or []):
            if repo.named["Queue"].get(q) is None:
                repo._unknown_once(org.doc.loc(("policy", "allowedQueues", i)), "queue", q, "Queue")
    for name in sorted(repo.projects):
        proj = repo.project(name)
        if proj is None:
            continue
        pm = proj.model
        if pm.defaults and pm.defaults.queue and repo.named["Queue"].get(pm.defaults.queue) is None:
            repo._unknown_once(
                proj.doc.loc(("defaults", "queue")), "queue", pm.defaults.queue, "Queue"
            )
        for i, q in enumerate(pm.allowed_queues or []):
            if repo.named["Queue"].get(q) is None:
                repo._unknown_once(proj.doc.loc(("allowedQueues", i)), "queue", q, "Queue")
        for i, p in enumerate((pm.defaults.presets if pm.defaults else None) or []):
            if p not in repo.projects[name].presets and p not in repo.named["Preset"]:
                repo.errors.append(
                    _err(
                        proj.doc.loc(("defaults", "presets", i)),
                        f"unknown preset {p!r}: no projects/{name}/presets/{p}.yaml "
                        f"or presets/{p}.yaml",
                    )
                )
    presets = [(p, "") for p in repo.named["Preset"].values()] + [
        (p, n) for n, proj in repo.projects.items() for p in proj.presets.values()
    ]
    for path, _ in presets:
        loaded = repo.load(path, "Preset", _stem(path.rsplit("/", 1)[-1]))
        if loaded is None:
            continue
        patch, locate = _preset_patch(loaded)
        queue = patch.get("queue")
        if queue is not None and repo.named["Queue"].get(queue) is None:
            repo._unknown_once(Location(path, *locate(("queue",))), "queue", queue, "Queue")
        for i, conn in enumerate(_get(patch, "run", "connections") or []):
            if repo.named["Connection"].get(conn) is None:
                location = Location(path, *locate(("run", "connections", i)))
                repo._unknown_once(location, "connection", conn, "Connection")


def _load_all(repo: _Repo) -> None:
    repo.org()
    for kind, names in repo.named.items():
        for name, path in names.items():
            repo.load(path, kind, name)
    for path, kind in repo.other:
        repo.load(path, kind, _stem(path.rsplit("/", 1)[-1]))
    for name in repo.named["Queue"]:
        repo.queue(name)
    _check_references(repo)


def _finish_errors(errors: Iterable[ConfigError]) -> tuple[ConfigError, ...]:
    return tuple(sorted(set(errors)))


def _internal(snapshot: RepoSnapshot, exc: BaseException) -> ConfigError:
    return _err(Location("<repo>", 0, 0), f"internal error while compiling: {exc!r}")


def compile_repo(snapshot: RepoSnapshot, parse_cache: ParseCache | None = None) -> CompiledRepo:
    """Validate every file and compile every operation of ``snapshot``. Never raises.

    With ``parse_cache``, files whose content did not change since the last call are not
    parsed again."""
    try:
        if parse_cache is not None:
            parse_cache.retain(snapshot.files)
        return _compile_repo(snapshot, parse_cache)
    except Exception as exc:  # a bug must not take the reconciler down; report it instead
        return CompiledRepo(
            version=snapshot.version,
            org=OrgSettings(),
            clusters={},
            queues={},
            operations=(),
            errors=(_internal(snapshot, exc),),
        )


def _compile_repo(snapshot: RepoSnapshot, parse_cache: ParseCache | None) -> CompiledRepo:
    repo = _Repo(snapshot, parse_cache)
    _load_all(repo)
    errors: list[ConfigError] = []
    operations: list[CompiledOperation] = []
    rejected: list[RejectedOperation] = []
    seen: dict[str, str] = {}
    for project in sorted(repo.projects):
        for name in sorted(repo.projects[project].operations):
            result = _compile(repo, project, name)
            errors.extend(result.errors)
            if result.rejected:
                rejected.append(result.rejected)
            for op in result.operations:
                if op.id in seen:
                    errors.append(
                        _err(
                            Location(op.path, 1, 1),
                            f"operation {op.id!r} is defined twice ({seen[op.id]} and {op.path})",
                        )
                    )
                    continue
                seen[op.id] = op.path
                operations.append(op)
    clusters = {n: c for n in sorted(repo.named["Cluster"]) if (c := repo.cluster(n))}
    queues = {n: q for n in sorted(repo.named["Queue"]) if (q := repo.queue(n))}
    connections = {n: cn for n in sorted(repo.named["Connection"]) if (cn := repo.connection(n))}
    return CompiledRepo(
        version=snapshot.version,
        org=repo.org_settings(),
        clusters=clusters,
        queues=queues,
        operations=tuple(operations),
        rejected=tuple(rejected),
        errors=_finish_errors([*repo.errors, *errors]),
        connections=connections,
    )


def compile_operation(snapshot: RepoSnapshot, operation: str) -> OperationResult:
    """Compile one ``project/name``, parsing only the files it needs. Never raises.

    ``errors`` holds problems in those files; a missing operation gives ``found=False``.
    """
    try:
        project, _, name = operation.partition("/")
        repo = _Repo(snapshot)
        result = _compile(repo, project, name)
        errors = _finish_errors([*repo.errors, *result.errors])
        return OperationResult(
            operation,
            found=result.found,
            compiled=result.compiled,
            operations=result.operations,
            rejected=result.rejected,
            errors=errors,
        )
    except Exception as exc:
        return OperationResult(operation, found=False, errors=(_internal(snapshot, exc),))
