"""Polyaxon v1.1 polyaxonfiles to operations, presets, queues and a project (pure).

The table of what each polyaxonfile field becomes is docs/from-polyaxon.md; this module is
held to it by tests/cli/test_import_polyaxon.py (``FIELDS`` below names every field the
importer knows, each either converted or reported).

Templates: ``{{ NAME }}`` of a component input or an operation param is written out with its
value; inside a ``grid`` matrix, a matrix param becomes ``{{ params.NAME }}``. Any other
template (``{{ globals.* }}``, expressions) is kept as written and reported.

What must live here: the conversion of each polyaxonfile section, and the reports of what
has no equivalent, each at its ``file:line:col``. The files are read and written by
``cli/import_cmd.py``.
"""

from __future__ import annotations

import itertools
import math
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml

from reconciler.core.authoring.importers import (
    ImportResult,
    Report,
    Resolver,
    Source,
    Target,
    dns_label,
    parse,
    render,
    value_kind,
)
from reconciler.core.decision.schedule import parse_cron, parse_instant
from reconciler.core.load import Document, PathKey
from reconciler.core.quantity import short_repr as short

MAX_GRID = 1000  # the compiler's cap on a matrix's children

# Top-level fields with no equivalent, and what to do instead.
NO_EQUIVALENT: dict[str, str] = {
    "tags": "tags are not kept; say it in `description`, or as run.environment.labels",
    "owner": "the project is --project; ownership is Git's (code owners)",
    "project": "the project is --project",
    "cache": "there is no result cache: every operation runs once per generation; bump "
    "`generation` to run it again",
    "plugins": "no Polyaxon sidecar or auth plugins: logs are read from the pod (`reconciler "
    "logs`), artifacts go through connections",
    "build": "there is no image build step: build the image in CI and set run.container.image",
    "hooks": "there are no hooks: run a follow-up operation as a DAG child that depends on it",
    "events": "there are no event triggers: add the operation to the repo when it should run",
    "joins": "there are no joins: pass values as params of a DAG child",
    "outputs": "outputs are not tracked: write them through a connection (bucket or volume)",
    "cost": "set prices and budgets on the queue (docs/budgets.md)",
    "template": "templates are Git's: keep a preset for what is shared",
    "trigger": "a DAG child runs once every dependency has succeeded; there is no other trigger",
    "conditions": "a DAG child has no conditions: split the workflow",
    "skipOnUpstreamSkip": "a DAG child has no conditions, so nothing is skipped",
    "dependencies": "dependencies exist between children of one DAG only",
    "contact": "no equivalent: say it in `description`",
    "isExternal": "a service is reached through its Service inside the cluster",
    "rewritePath": "no ingress is rendered: reach the Service with kubectl port-forward",
    "earlyStopping": "there is no early stopping: a matrix runs every child",
}

# Fields of run.environment and what they become.
_ENV_COPY = (
    "nodeSelector",
    "labels",
    "annotations",
    "tolerations",
    "affinity",
    "serviceAccountName",
    "imagePullSecrets",
    "hostNetwork",
    "hostPID",
    "schedulerName",
    "priorityClassName",
)
_ENV_NO = {
    "priority": "set run.environment.priorityClassName; queue order is the queue's `priority`",
    "securityContext": "the pod-level securityContext is not expressible: set "
    "run.container.securityContext",
    "restartPolicy": "a Job's pods never restart in place: use run.maxRetries",
    "dnsPolicy": "no equivalent: the cluster's default DNS policy applies",
    "dnsConfig": "no equivalent: the cluster's default DNS config applies",
    "hostAliases": "no equivalent: use DNS",
    "nodeName": "placement is the scheduler's: use nodeSelector or affinity",
}
_CONTAINER_COPY = (
    "image",
    "command",
    "args",
    "workingDir",
    "resources",
    "securityContext",
    "volumeMounts",
)
_VOLUME_KINDS = ("persistentVolumeClaim", "configMap", "secret", "emptyDir")
_SERVICE_PORTS = {8888: "notebook", 8080: "sandbox"}
_STRATEGIES = ("replace", "isnull", "post_merge", "pre_merge")
_MATRIX_UNSUPPORTED = ("hyperband", "bayes", "hyperopt", "iterative")
_DAG_CHILD = (
    "{key} of a DAG operation: a child has only its name, dependencies, params and run "
    "(queue, presets and approval are the workflow's); not converted"
)
_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.S)
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")

# Every field the importer knows, by where it is (the docs table is checked against this).
FIELDS: dict[str, tuple[str, ...]] = {
    "operation": (
        "version",
        "kind",
        "name",
        "description",
        "presets",
        "queue",
        "termination",
        "params",
        "runPatch",
        "patchStrategy",
        "isPreset",
        "isApproved",
        "pathRef",
        "hubRef",
        "urlRef",
        "component",
        "matrix",
        "schedule",
        *NO_EQUIVALENT,
    ),
    "component": ("inputs", "run"),
    "termination": ("maxRetries", "timeout", "ttl"),
    "run": (
        "kind",
        "environment",
        "connections",
        "volumes",
        "init",
        "sidecars",
        "container",
        "ports",
        "replicas",
        "operations",
        "components",
        "concurrency",
        "master",
        "worker",
    ),
    "environment": (*_ENV_COPY, *_ENV_NO),
    "container": ("name", *_CONTAINER_COPY, "env"),
    "matrix": ("kind", "concurrency", "params", "numRuns", "values", "seed", "earlyStopping"),
    "schedule": ("kind", "cron", "frequency", "startAt", "endAt", "maxRuns", "dependsOnPast"),
}


@dataclass(slots=True)
class _At:
    """A value in a document: where findings about it are reported."""

    doc: Document
    path: PathKey

    def get(self, *rel: str | int) -> Any:
        value: Any = self.doc.data
        for part in (*self.path, *rel):
            if isinstance(value, dict) and isinstance(part, str):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and part < len(value):
                value = value[part]
            else:
                return None
        return value

    def at(self, *rel: str | int) -> _At:
        return _At(self.doc, (*self.path, *rel))


@dataclass(slots=True)
class _Scope:
    """Template values for one converted run: literal values, and names kept as params."""

    values: dict[str, Any] = field(default_factory=dict)
    params: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Op:
    root: _At
    name: str
    body: dict[str, Any]
    notes: list[str]


class _Importer:
    def __init__(self, project: str, target: Target, resolve: Resolver) -> None:
        self.project = project
        self.target = target
        self.resolve = resolve
        self.report = Report()
        self.ops: list[_Op] = []
        self.presets: dict[str, tuple[str, dict[str, Any]]] = {}
        self.queues: dict[str, str] = {}  # name -> where it was first referenced
        self.preset_names: set[str] = set()

    # --- reporting -----------------------------------------------------------------------

    def note(self, at: _At, message: str, *, key: bool = True) -> None:
        self.report.note(at.doc, at.path, message, key=key)

    def error(self, at: _At, message: str, *, key: bool = True) -> None:
        self.report.error(at.doc, at.path, message, key=key)

    def mapping(self, at: _At) -> dict[str, Any]:
        """The mapping at ``at`` ({} when unset); another type is an error there."""
        value = at.get()
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
        self.error(at, f"expected a mapping, got {value_kind(value)}", key=False)
        return {}

    def sequence(self, at: _At) -> list[Any]:
        """The list at ``at`` ([] when unset); another type is an error there."""
        value = at.get()
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.error(at, f"expected a list, got {value_kind(value)}", key=False)
        return []

    # --- files ---------------------------------------------------------------------------

    def load(self, source: Source) -> Document | None:
        doc = parse(source, self.report)
        if doc is None:
            return None
        root = _At(doc, ())
        if not isinstance(doc.data, dict):
            self.error(root, "a polyaxonfile is a mapping (version, kind, ...)", key=False)
            return None
        version = doc.data.get("version")
        if version is not None:
            text = str(version)
            if isinstance(version, bool) or not isinstance(version, int | float | str):
                self.error(root.at("version"), f"version {text!r} is not a Polyaxon version")
                return None
            if text.startswith("0"):
                self.error(
                    root.at("version"),
                    f"Polyaxon v0 polyaxonfile (version: {text}): only the v1.1 "
                    "specification is imported; rewrite it as v1.1 (kind: component or "
                    "operation, run: ...) first",
                    key=False,
                )
                return None
            if not text.startswith("1"):
                self.error(
                    root.at("version"),
                    f"version {text} is not the v1.1 specification this importer reads",
                    key=False,
                )
                return None
        return doc

    def import_file(self, source: Source) -> None:
        doc = self.load(source)
        if doc is None:
            return
        root = _At(doc, ())
        stem = posixpath.splitext(posixpath.basename(source.path))[0]
        if doc.data.get("isPreset") is True:
            self.import_preset(root, stem)
            return
        kind = doc.data.get("kind")
        if kind not in ("operation", "component"):
            self.error(
                root.at("kind") if "kind" in doc.data else root,
                f"kind {kind!r}: a polyaxonfile is `kind: operation` or `kind: component` "
                "(or a preset with `isPreset: true`)",
            )
            return
        self.import_operation(root, stem)

    # --- presets -------------------------------------------------------------------------

    def import_preset(self, root: _At, stem: str) -> None:
        data = root.get()
        name = dns_label(str(data.get("name") or stem))
        name = self._unique(name, self.preset_names)
        body: dict[str, Any] = {"kind": "Preset", "name": name}
        strategy = data.get("patchStrategy")
        if strategy is not None:
            if strategy in _STRATEGIES:
                body["patchStrategy"] = strategy
            else:
                self.error(root.at("patchStrategy"), f"unknown patchStrategy {strategy!r}")
        scope = _Scope()
        run: dict[str, Any] = {}
        for key in data:
            at = root.at(key)
            if key in ("isPreset", "patchStrategy", "version", "kind", "name"):
                continue
            if key == "description":
                body["description"] = str(data[key])
            elif key == "queue":
                queue = self.queue(at)
                if queue:
                    body["queue"] = queue
            elif key == "runPatch":
                patch = self.run(at, scope, partial=True)
                if patch is not None:
                    run = _merge(run, patch, "post_merge")
            elif key == "termination":
                run = _merge(run, self.termination(at), "post_merge")
            elif key in NO_EQUIVALENT:
                self.note(at, f"{key}: {NO_EQUIVALENT[key]}")
            else:
                self.note(at, f"{key}: not a preset field this importer knows; not converted")
        if run:
            body["run"] = run
        if name in self.target.presets:
            self.note(
                root.at("name") if "name" in data else root,
                f"preset {name!r}: the repo has presets/{name}.yaml: written as project "
                f"{self.project}'s preset (projects/{self.project}/presets/{name}.yaml), "
                "which shadows it for this project's operations only",
                key=False,
            )
        self.presets[name] = (root.doc.path, body)

    # --- operations ----------------------------------------------------------------------

    def import_operation(self, root: _At, stem: str) -> None:
        data = root.get()
        notes: list[str] = []
        component = self.component_of(root)
        if component is None:
            return
        comp = component.get() or {}
        name = dns_label(str(data.get("name") or stem))
        body: dict[str, Any] = {"kind": "Operation", "name": name}
        description = data.get("description") or comp.get("description")
        if description:
            body["description"] = str(description)
        held: list[str] = []  # the sections not converted that hold the operation
        # Values of inputs (component defaults, then the operation's params).
        scope = _Scope(values=self.inputs(component))
        if root.get("kind") == "operation":
            scope.values.update(self.params(root.at("params")))
        matrix = root.get("matrix")
        matrix_out: dict[str, Any] | None = None
        dag_children: list[dict[str, Any]] | None = None
        if isinstance(matrix, dict):
            matrix_out, dag_children, hold = self.matrix(root.at("matrix"))
            if hold:
                held.append("matrix")
            if matrix_out is not None:  # the names its children's params take
                if "values" in matrix_out:
                    scope.params = frozenset(k for v in matrix_out["values"] for k in v)
                else:
                    scope.params = frozenset(matrix_out["params"])
            elif dag_children is not None:
                scope.params = frozenset(dag_children[0]["params"]) if dag_children else frozenset()
        # Fields of the operation (and of its component, the same list).
        separate = component.doc is not root.doc or component.path != root.path
        for where in (component, root) if separate else (root,):
            for key in self.mapping(where):
                at = where.at(key)
                if key in NO_EQUIVALENT:
                    self.note(at, f"{key}: {NO_EQUIVALENT[key]}")
                elif key == "schedule":
                    schedule = self.schedule(at)
                    if schedule is None:
                        held.append(key)
                    else:
                        body["schedule"] = schedule
                elif key in ("queue", "presets") and where is component and key in root.get():
                    continue  # the operation's own wins, as in Polyaxon
                elif key == "queue":
                    queue = self.queue(at)
                    if queue:
                        body["queue"] = queue
                elif key == "presets":
                    presets = self.preset_refs(at)
                    if presets:
                        body["presets"] = presets
                elif key == "isApproved":
                    if isinstance(where.get(key), bool):
                        body["isApproved"] = where.get(key)
                elif key in FIELDS["operation"] or key in FIELDS["component"]:
                    continue
                else:
                    self.note(
                        at, f"{key}: not a polyaxonfile field this importer knows; not converted"
                    )
        run_at = component.at("run")
        if not isinstance(run_at.get(), dict):
            self.error(component, "the component has no `run`")
            return
        kind = run_at.get("kind")
        if kind == "dag":
            if matrix_out is not None or dag_children is not None:
                self.note(
                    root.at("matrix"),
                    "matrix: a matrix over a DAG has no equivalent "
                    "(a workflow's children are plain operations); not converted",
                )
                matrix_out, dag_children = None, None
                scope.params = frozenset()
            dag = self.dag(run_at, scope)
            if dag is None:
                return
            first = dag["operations"][0]["run"]
            body["run"] = {
                "kind": first["kind"],
                "container": {"image": first["container"]["image"]},
            }
            body["dag"] = dag
        else:
            run = self.run(run_at, scope)
            if run is None:
                return
            if root.get("kind") == "operation":
                run = self.run_patch(root, run, scope)
                run = _merge(run, self.termination(root.at("termination")), "post_merge")
            run = _merge(run, self.termination(component.at("termination")), "pre_merge")
            body["run"] = run
        if matrix_out is not None:
            body["matrix"] = matrix_out
        if dag_children is not None:
            body["dag"] = {
                "operations": dag_children,
                **(
                    {"concurrency": root.get("matrix", "concurrency")}
                    if isinstance(root.get("matrix", "concurrency"), int)
                    else {}
                ),
            }
            notes.append(
                "the grid's first numRuns combinations, as a DAG of independent "
                "children <name>-0 .. <name>-N"
            )
        if held:
            body["isApproved"] = False
            notes.append(
                f"Held (isApproved: false): its {' and '.join(held)} could not be converted "
                "(see the import report). As written in Polyaxon:"
            )
            for section in held:
                text = yaml.safe_dump({section: root.get(section)}, sort_keys=False, width=88)
                notes.extend(f"  {line}" for line in text.splitlines())
        self.ops.append(_Op(root, name, body, notes))

    def component_of(self, root: _At) -> _At | None:
        data = root.get()
        if data.get("kind") == "component":
            return root
        refs = [k for k in ("component", "pathRef", "hubRef", "urlRef", "dagRef") if k in data]
        if len(refs) != 1:
            self.error(
                root,
                "an operation needs exactly one of component, pathRef, hubRef "
                f"(found {', '.join(refs) or 'none'})",
                key=False,
            )
            return None
        return self.reference(root, refs[0])

    def reference(
        self, holder: _At, ref: str, components: Mapping[str, _At] | None = None
    ) -> _At | None:
        at = holder.at(ref)
        value = at.get()
        if ref == "component":
            if not isinstance(value, dict):
                self.error(at, "component: an inline component is a mapping")
                return None
            return at
        if ref in ("hubRef", "urlRef"):
            self.error(
                at,
                f"{ref} {value!r} cannot be resolved offline: the import reads local files "
                "only; download the component and use pathRef, or inline it as `component:`",
                key=False,
            )
            return None
        if ref == "dagRef":
            found = (components or {}).get(str(value))
            if found is None:
                self.error(
                    at, f"dagRef {value!r}: no component of that name in the DAG's `components`"
                )
            return found
        # pathRef: relative to the file that names it.
        if not isinstance(value, str) or not value:
            self.error(at, "pathRef is a file path")
            return None
        path = posixpath.normpath(posixpath.join(posixpath.dirname(holder.doc.path), value))
        source = self.resolve(path)
        if source is None:
            self.error(at, f"pathRef {value!r}: no file {path}", key=False)
            return None
        doc = self.load(source)
        if doc is None:
            return None
        if doc.data.get("kind") != "component":
            self.error(at, f"pathRef {value!r}: {path} is not a `kind: component`", key=False)
            return None
        return _At(doc, ())

    # --- parts ---------------------------------------------------------------------------

    def inputs(self, component: _At) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for i, item in enumerate(self.sequence(component.at("inputs"))):
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                if "value" in item and item["value"] is not None:
                    values[item["name"]] = item["value"]
                for extra in ("options", "validation", "connection", "toInit", "toEnv"):
                    if extra in item:
                        self.note(
                            component.at("inputs", i, extra),
                            f"inputs[].{extra}: no equivalent; inputs are written out "
                            "as their values",
                        )
        return values

    def params(self, at: _At) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, spec in self.mapping(at).items():
            if isinstance(spec, dict) and "value" in spec:
                values[name] = spec["value"]
                for extra in spec:
                    if extra != "value":
                        self.note(
                            at.at(name, extra),
                            f"params.{name}.{extra}: no equivalent; "
                            "the param is written out as its value",
                        )
            else:
                self.note(
                    at.at(name),
                    f"params.{name}: only a `value` is converted (a `ref` "
                    "to another run's outputs has no equivalent: pass the value)",
                )
        return values

    def queue(self, at: _At) -> str | None:
        value = at.get()
        if not isinstance(value, str) or not value:
            self.note(at, "queue: not a queue name; not converted")
            return None
        agent, _, queue = value.rpartition("/")
        if agent:
            self.note(
                at,
                f"queue: agent {agent!r} has no equivalent: a queue dispatches to "
                f"its `cluster` (--cluster {self.target.cluster})",
                key=False,
            )
        name = dns_label(queue)
        if name not in self.target.queues and name not in self.queues:
            self.queues[name] = str(at.doc.loc(at.path, key=False))
        return name

    def preset_refs(self, at: _At) -> list[str]:
        out: list[str] = []
        for i, item in enumerate(self.sequence(at)):
            name = dns_label(str(item))
            if name in self.target.presets or name in self.preset_names:
                out.append(name)
            else:
                self.note(
                    at.at(i),
                    f"preset {item!r} is not in the repo nor among the imported "
                    "files: dropped; import its file (isPreset: true) or write "
                    f"presets/{name}.yaml, then list it again",
                    key=False,
                )
        return out

    def termination(self, at: _At) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.mapping(at).items():
            if key == "maxRetries":
                out["maxRetries"] = value
            elif key == "timeout":
                out["timeout"] = value
            elif key == "ttl":
                if isinstance(value, int) and value < self.target.min_ttl:
                    self.note(
                        at.at(key),
                        f"termination.ttl {value}: below the org's "
                        f"policy.minTtl ({self.target.min_ttl} s), which keeps a finished "
                        "Job until the reconciler has seen it: written as "
                        f"{self.target.min_ttl}",
                    )
                    value = self.target.min_ttl
                out["ttl"] = value
            else:
                self.note(at.at(key), f"termination.{key}: no equivalent; not converted")
        return out

    def run_patch(self, root: _At, run: dict[str, Any], scope: _Scope) -> dict[str, Any]:
        patch_at = root.at("runPatch")
        if not isinstance(patch_at.get(), dict):
            return run
        strategy = root.get("patchStrategy") or "post_merge"
        if strategy not in _STRATEGIES:
            self.error(root.at("patchStrategy"), f"unknown patchStrategy {strategy!r}")
            return run
        patch = self.run(patch_at, scope, partial=True) or {}
        return _merge(run, patch, str(strategy))

    def run(self, at: _At, scope: _Scope, *, partial: bool = False) -> dict[str, Any] | None:
        data = self.mapping(at)
        out: dict[str, Any] = {}
        kind = data.get("kind")
        replica: _At = at
        if not isinstance(kind, str | None):
            self.error(
                at.at("kind"), f"run.kind: expected a name, got {value_kind(kind)}", key=False
            )
            return None
        if kind == "job" or (partial and kind is None):
            if kind:
                out["kind"] = "job"
        elif kind == "service":
            ports = self.sequence(at.at("ports"))
            port = ports[0] if len(ports) == 1 else None
            known = _SERVICE_PORTS.get(port) if isinstance(port, int) else None
            out["kind"] = known or "sandbox"
            if not known:
                self.note(
                    at.at("ports"),
                    f"ports {ports}: a notebook serves 8888 and a sandbox "
                    "8080; written as a sandbox: make the service listen on 8080",
                )
            if "replicas" in data:
                self.note(at.at("replicas"), "replicas: a notebook or sandbox runs one pod")
        elif kind == "pytorchjob":
            master, worker = at.at("master"), at.at("worker")
            if not isinstance(master.get(), dict):
                self.error(at, "pytorchjob: no `master` replica spec")
                return None
            replicas = _count(master.get("replicas")) + (
                _count(worker.get("replicas")) if isinstance(worker.get(), dict) else 0
            )
            out["kind"] = "job"
            out["replicas"] = replicas
            out["distributed"] = {"framework": "torch"}
            if isinstance(worker.get(), dict) and _strip(worker.get()) != _strip(master.get()):
                self.note(
                    worker,
                    "worker: its pod spec differs from master's; every replica "
                    "runs one pod spec here, master's",
                )
            for key in data:
                if key not in ("kind", "master", "worker"):
                    self.note(at.at(key), f"pytorchjob.{key}: no equivalent; not converted")
            replica = master
        elif isinstance(kind, str) and kind != "dag":
            self.note(
                at.at("kind"),
                f"run.kind {kind!r} has no equivalent (jobs, services, "
                "PyTorchJob-style distributed jobs and DAGs are converted): the "
                "operation is not converted",
            )
            return None
        else:
            self.error(at, "run.kind is required (job, service, dag, pytorchjob, ...)")
            return None
        rdata = self.mapping(replica)
        for key in rdata:
            if replica is not at and key == "replicas":
                continue
            sub = replica.at(key)
            if key == "kind":
                continue
            if key == "environment":
                env = self.environment(sub)
                if env:
                    out["environment"] = env
            elif key == "connections":
                conns = self.connections(sub)
                if conns:
                    out["connections"] = conns
            elif key == "volumes":
                volumes = self.volumes(sub)
                if volumes:
                    out["volumes"] = volumes
            elif key == "init":
                inits = self.init(sub, scope)
                if inits:
                    out["initContainers"] = inits
            elif key == "sidecars":
                cars = [
                    c
                    for i, _ in enumerate(self.sequence(sub))
                    if (c := self.container(sub.at(i), scope, f"sidecar-{i}")) is not None
                ]
                if cars:
                    out["sidecars"] = cars
            elif key == "container":
                container = self.container(sub, scope, None)
                if container:
                    out["container"] = container
            elif key in ("ports", "replicas") and kind == "service":
                continue  # reported above
            elif key in NO_EQUIVALENT:
                self.note(sub, f"{key}: {NO_EQUIVALENT[key]}")
            else:
                self.note(sub, f"run.{key}: no equivalent; not converted")
        if not partial and not isinstance(out.get("container", {}).get("image"), str):
            self.error(replica, "the run has no container.image")
            return None
        return out

    def environment(self, at: _At) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.mapping(at).items():
            refused = self.refused(key, value)
            if refused:
                self.note(at.at(key), f"environment.{key} {value!r}: {refused}; dropped")
            elif key in _ENV_COPY:
                out[key] = value
            elif key == "restartPolicy" and value == "Never":
                continue  # what a Job's pod does: nothing is lost
            elif key in _ENV_NO:
                self.note(at.at(key), f"environment.{key}: {_ENV_NO[key]}")
            else:
                self.note(at.at(key), f"environment.{key}: no equivalent; not converted")
        return out

    def refused(self, key: str, value: Any) -> str | None:
        """Why org policy would reject this environment value, if it would."""
        target = self.target
        if not isinstance(value, str | bool):
            return None
        if (
            key == "serviceAccountName"
            and value != "default"
            and (value not in target.service_accounts)
        ):
            return "org policy.allowedServiceAccounts does not list it: list it there first"
        if key == "priorityClassName" and value not in target.priority_classes:
            return "org policy.allowedPriorityClasses does not list it: list it there first"
        if (
            key == "schedulerName"
            and target.scheduler_names is not None
            and (value not in target.scheduler_names)
        ):
            return "org policy.allowedSchedulerNames does not list it: list it there first"
        if key in ("hostNetwork", "hostPID") and value is True and not target.host_namespaces:
            return "org policy.podSecurity is not `privileged`"
        return None

    def connections(self, at: _At) -> list[str]:
        out: list[str] = []
        for i, item in enumerate(self.sequence(at)):
            name = str(item)
            if name in self.target.connections:
                out.append(name)
            else:
                self.note(
                    at.at(i),
                    f"connection {name!r} is not in the repo: dropped; write "
                    f"connections/{dns_label(name)}.yaml (volume, secret, configMap, "
                    "bucket or git) and list it again in run.connections",
                    key=False,
                )
        return out

    def volumes(self, at: _At) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, item in enumerate(self.sequence(at)):
            kinds = [k for k in item if k != "name"] if isinstance(item, dict) else []
            if len(kinds) == 1 and kinds[0] in _VOLUME_KINDS:
                out.append(item)
            else:
                self.note(
                    at.at(i),
                    f"volume of type {', '.join(kinds) or '?'}: only "
                    f"{', '.join(_VOLUME_KINDS)} are expressible (host paths through a "
                    "volume connection); dropped",
                    key=False,
                )
        return out

    def init(self, at: _At, scope: _Scope) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, item in enumerate(self.sequence(at)):
            if isinstance(item, dict) and set(item) == {"container"}:
                container = self.container(at.at(i, "container"), scope, f"init-{i}")
                if container:
                    out.append(container)
            elif isinstance(item, dict) and "git" in item:
                self.note(
                    at.at(i),
                    "init git: write a git connection (connections/<name>.yaml "
                    "with git: {url, revision, mountPath}) and list it in "
                    "run.connections; dropped",
                    key=False,
                )
            else:
                kinds = ", ".join(k for k in item) if isinstance(item, dict) else "?"
                self.note(
                    at.at(i),
                    f"init {kinds}: no equivalent (only `container` init steps "
                    "and git checkouts through a git connection); dropped",
                    key=False,
                )
        return out

    def container(self, at: _At, scope: _Scope, name: str | None) -> dict[str, Any] | None:
        data = at.get()
        if not isinstance(data, dict):
            return None
        out: dict[str, Any] = {}
        if name is not None:
            out["name"] = dns_label(str(data.get("name") or name))
        for key, value in data.items():
            sub = at.at(key)
            if key == "name":
                if name is None:
                    self.note(sub, "container.name: the operation's container is named `main`")
            elif key in ("command", "args") and isinstance(value, str):
                out[key] = [self.templated(sub, value, scope)]
            elif key == "workingDir":
                path = self.templated(sub, value, scope)
                if isinstance(path, str) and path.startswith("/") and "{{" not in path:
                    out[key] = path
                else:
                    self.note(
                        sub,
                        f"workingDir {value!r}: not an absolute path once its "
                        "templates are written out: dropped; set an absolute path",
                    )
            elif key in _CONTAINER_COPY:
                out[key] = self.templated(sub, value, scope)
            elif key == "env":
                env = self.env(sub, scope)
                if env:
                    out["env"] = env
            else:
                self.note(sub, f"container.{key}: no equivalent; not converted")
        return out

    def env(self, at: _At, scope: _Scope) -> dict[str, str]:
        out: dict[str, str] = {}
        for i, item in enumerate(self.sequence(at)):
            if (
                isinstance(item, dict)
                and isinstance(item.get("name"), str)
                and "value" in item
                and set(item) == {"name", "value"}
            ):
                value = self.templated(at.at(i, "value"), item["value"], scope)
                out[item["name"]] = _text(value)
            else:
                self.note(
                    at.at(i),
                    "env: only `{name, value}` is expressible (valueFrom: use a "
                    "secret or configMap connection with envFrom); dropped",
                    key=False,
                )
        return out

    def templated(self, at: _At, value: Any, scope: _Scope) -> Any:
        if isinstance(value, dict):
            return {k: self.templated(at.at(k), v, scope) for k, v in value.items()}
        if isinstance(value, list):
            return [self.templated(at.at(i), v, scope) for i, v in enumerate(value)]
        if not isinstance(value, str) or "{{" not in value:
            return value

        def sub(match: re.Match[str]) -> str:
            found = _NAME.match(match.group(1))
            if found is None:
                self.note(
                    at,
                    f"template {match.group(0).strip()!r}: only {{{{ NAME }}}} of an "
                    "input or param is written out; Polyaxon's globals and expressions "
                    "have no equivalent: write the value",
                    key=False,
                )
                return match.group(0)
            name = found.group(1)
            if name in scope.params:
                return f"{{{{ params.{name} }}}}"
            if name in scope.values:
                return _text(scope.values[name])
            self.note(
                at,
                f"template {{{{ {name} }}}}: input {name!r} has no value; give it "
                "one (params or the input's value)",
                key=False,
            )
            return match.group(0)

        return _TEMPLATE.sub(sub, value)

    # --- schedule ------------------------------------------------------------------------

    def schedule(self, at: _At) -> dict[str, Any] | None:
        """A ``schedule``: ``cron`` and ``interval`` field for field (a time without an
        offset read in UTC, as Polyaxon does); None (reported, the operation held) for a
        ``datetime`` one (a single run at a time) or one that does not convert."""
        data = self.mapping(at)
        kind = data.get("kind")
        if kind not in ("cron", "interval"):
            self.note(
                at.at("kind") if "kind" in data else at,
                f"schedule.kind {short(kind)}: only cron and interval schedules convert (a "
                "single run at a time: commit the operation then); not converted",
            )
            return None
        out: dict[str, Any] = {"kind": kind}
        ok = True
        for key, value in data.items():
            where = at.at(key)
            if key == "kind":
                continue
            if key == "cron" and kind == "cron":
                try:
                    parse_cron(str(value))
                    out["cron"] = str(value)
                except ValueError as err:
                    self.note(where, f"schedule.cron: {err}; not converted", key=False)
                    ok = False
            elif key == "frequency" and kind == "interval":
                seconds = value if isinstance(value, int) and not isinstance(value, bool) else 0
                if seconds < 60 or seconds % 60:
                    self.note(
                        where,
                        f"schedule.frequency {short(value)}: a tick's run is named by its "
                        "minute: whole minutes (seconds, at least 60) only; not converted",
                        key=False,
                    )
                    ok = False
                else:
                    out["frequency"] = seconds
            elif key in ("startAt", "endAt"):
                text = str(value)
                if parse_instant(text) is None:
                    utc = text.replace(" ", "T", 1) + "Z"
                    if parse_instant(utc) is None:
                        self.note(
                            where,
                            f"schedule.{key} {short(value)}: not a time; not converted",
                            key=False,
                        )
                        ok = False
                        continue
                    self.note(where, f"schedule.{key}: no offset: read in UTC, as {utc}")
                    text = utc
                out[key] = text
            elif key == "maxRuns" and isinstance(value, int) and value >= 1:
                out["maxRuns"] = value
            elif key == "dependsOnPast":
                self.note(
                    where,
                    "schedule.dependsOnPast: a tick does not wait for the previous run's "
                    "success; concurrencyPolicy: Forbid (the default) keeps two from running",
                )
            else:
                self.note(where, f"schedule.{key}: no equivalent; not converted")
        if not ok or ("cron" if kind == "cron" else "frequency") not in out:
            return None
        return out

    # --- matrix and dag ------------------------------------------------------------------

    def matrix(self, at: _At) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None, bool]:
        data = at.get()
        kind = data.get("kind")
        for key in data:
            if key not in FIELDS["matrix"]:
                self.note(at.at(key), f"matrix.{key}: no equivalent; not converted")
        if "earlyStopping" in data:
            self.note(at.at("earlyStopping"), f"earlyStopping: {NO_EQUIVALENT['earlyStopping']}")
        if kind == "mapping":
            return self.mapping_matrix(at, data)
        if kind == "random":
            return self.random_matrix(at, data)
        if kind != "grid":
            what = "adaptive" if kind in _MATRIX_UNSUPPORTED else "unknown"
            self.note(
                at.at("kind"),
                f"matrix kind {kind!r} ({what}) has no equivalent: only "
                "`grid` is; the operation is written without its matrix and held "
                "(isApproved: false)",
                key=False,
            )
            return None, None, True
        params: dict[str, list[Any]] = {}
        for name, spec in self.mapping(at.at("params")).items():
            values = self.grid_values(at.at("params", name), spec)
            if values is None:
                return None, None, True
            params[name] = values
        if not params:
            self.note(at, "matrix: a grid without params; not converted")
            return None, None, True
        count = math.prod(len(v) for v in params.values())
        num_runs = data.get("numRuns")
        concurrency = data.get("concurrency")
        if isinstance(num_runs, int) and 0 < num_runs < count:
            # Polyaxon runs the first numRuns combinations of the grid, in order.
            combos = itertools.islice(itertools.product(*params.values()), num_runs)
            children = [
                {"name": str(i), "params": dict(zip(params, combo, strict=True))}
                for i, combo in enumerate(combos)
            ]
            return None, children, False
        if count > MAX_GRID:
            self.note(
                at.at("params"),
                f"matrix: the grid has {count} combinations, above "
                f"the limit of {MAX_GRID} children; set numRuns or narrow params; "
                "written held (isApproved: false) without its matrix",
                key=False,
            )
            return None, None, True
        out: dict[str, Any] = {"kind": "grid"}
        if isinstance(concurrency, int):
            out["concurrency"] = concurrency
        out["params"] = params
        return out, None, False

    def mapping_matrix(
        self, at: _At, data: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None, bool]:
        """``kind: mapping``: its ``values`` (a list of parameter maps) as they are."""
        values = data.get("values")
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, dict) and v for v in values)
        ):
            self.note(
                at.at("values") if "values" in data else at,
                "matrix mapping: values is a non-empty list of parameter maps; the "
                "operation is written held (isApproved: false) without its matrix",
                key=False,
            )
            return None, None, True
        if len(values) > MAX_GRID:
            self.note(
                at.at("values"),
                f"matrix: {len(values)} maps, above the limit of {MAX_GRID} children; "
                "written held (isApproved: false) without its matrix",
                key=False,
            )
            return None, None, True
        out: dict[str, Any] = {"kind": "mapping"}
        if isinstance(data.get("concurrency"), int):
            out["concurrency"] = data["concurrency"]
        out["values"] = [dict(v) for v in values]
        return out, None, False

    def random_matrix(
        self, at: _At, data: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None, bool]:
        """``kind: random``: ``numRuns``, ``seed`` and each parameter's distribution, as
        Polyaxon writes them (the kinds this repo draws from: choice, range, uniform,
        loguniform, normal). Without a seed the children would differ from run to run
        here, so the operation is held until one is set."""
        held = False
        seed = data.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            self.note(
                at,
                "matrix random: no seed (Polyaxon draws anew each time; here the same seed "
                "gives the same children on every machine): set `seed`; the operation is "
                "written held (isApproved: false) without its matrix",
                key=False,
            )
            held = True
        num_runs = data.get("numRuns")
        if not isinstance(num_runs, int) or not 0 < num_runs <= MAX_GRID:
            self.note(
                at.at("numRuns") if "numRuns" in data else at,
                f"matrix random: numRuns must be 1 to {MAX_GRID}; the operation is written "
                "held (isApproved: false) without its matrix",
                key=False,
            )
            held = True
        params: dict[str, Any] = {}
        for name, spec in self.mapping(at.at("params")).items():
            kind = spec.get("kind") if isinstance(spec, dict) else None
            if kind not in ("choice", "range", "uniform", "loguniform", "normal"):
                self.note(
                    at.at("params", name),
                    f"matrix param {name}: distribution {kind!r} has no equivalent (choice, "
                    "range, uniform, loguniform, normal do); the operation is written held "
                    "without its matrix",
                    key=False,
                )
                held = True
                continue
            params[name] = {"kind": kind, "value": spec.get("value")}
        if held or not params:
            return None, None, True
        out: dict[str, Any] = {"kind": "random"}
        if isinstance(data.get("concurrency"), int):
            out["concurrency"] = data["concurrency"]
        out["numRuns"] = num_runs
        out["seed"] = seed
        out["params"] = params
        return out, None, False

    def grid_values(self, at: _At, spec: Any) -> list[Any] | None:
        if not isinstance(spec, dict) or "kind" not in spec:
            self.error(at, "a matrix param is {kind, value}")
            return None
        kind, value = spec.get("kind"), spec.get("value")
        try:
            if kind == "choice" and isinstance(value, list):
                return list(value)
            if kind in ("range", "linspace", "logspace", "geomspace"):
                return _space(str(kind), value)
        except (ValueError, TypeError, ArithmeticError):
            self.error(at.at("value"), f"matrix param of kind {kind}: cannot read {value!r}")
            return None
        self.note(
            at.at("kind"),
            f"matrix param kind {kind!r}: a grid takes discrete values "
            "(choice, range, linspace, logspace, geomspace); distributions have no "
            "equivalent; the operation is written held without its matrix",
            key=False,
        )
        return None

    def dag(self, at: _At, scope: _Scope) -> dict[str, Any] | None:
        data = at.get()
        components: dict[str, _At] = {}
        for i, comp in enumerate(self.sequence(at.at("components"))):
            if isinstance(comp, dict) and isinstance(comp.get("name"), str):
                components[comp["name"]] = at.at("components", i)
        for key in data:
            if key not in ("kind", "operations", "components", "concurrency"):
                self.note(
                    at.at(key),
                    f"dag {key}: no equivalent at the DAG level; set it on "
                    "each child (or in a preset); not converted",
                )
        children: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        operations = self.sequence(at.at("operations"))
        for child in operations:
            if isinstance(child, dict) and isinstance(child.get("name"), str):
                names[child["name"]] = dns_label(child["name"])
        for i, child in enumerate(operations):
            cat = at.at("operations", i)
            if not isinstance(child, dict) or not isinstance(child.get("name"), str):
                self.error(cat, "a DAG operation needs a name", key=False)
                return None
            refs = [k for k in ("component", "pathRef", "hubRef", "urlRef", "dagRef") if k in child]
            if len(refs) != 1:
                self.error(
                    cat,
                    "a DAG operation needs exactly one of component, dagRef, pathRef, hubRef",
                    key=False,
                )
                return None
            comp = self.reference(cat, refs[0], components)
            if comp is None:
                return None
            child_scope = _Scope(values=self.inputs(comp))
            for pname, pvalue in self.params(cat.at("params")).items():
                child_scope.values[pname] = self.templated(cat.at("params", pname), pvalue, scope)
            for key in child:
                if key in NO_EQUIVALENT and key != "dependencies":
                    self.note(cat.at(key), f"{key}: {NO_EQUIVALENT[key]}")
                elif key not in ("name", "dependencies", "params", "termination", *refs):
                    self.note(cat.at(key), _DAG_CHILD.format(key=key))
            for key in self.mapping(comp):
                if key in NO_EQUIVALENT:
                    self.note(comp.at(key), f"{key}: {NO_EQUIVALENT[key]}")
                elif key not in ("name", "inputs", "run", "termination", "version", "kind"):
                    self.note(comp.at(key), _DAG_CHILD.format(key=key))
            if comp.get("run", "kind") == "dag":
                self.note(
                    comp.at("run", "kind"),
                    "a DAG inside a DAG has no equivalent: the "
                    "workflow is not converted; flatten it",
                    key=False,
                )
                return None
            run = self.run(comp.at("run"), child_scope)
            if run is None:
                return None
            run = _merge(run, self.termination(comp.at("termination")), "pre_merge")
            run = _merge(run, self.termination(cat.at("termination")), "post_merge")
            out: dict[str, Any] = {"name": names[child["name"]]}
            deps = [
                names.get(str(d), dns_label(str(d))) for d in self.sequence(cat.at("dependencies"))
            ]
            if deps:
                out["dependencies"] = deps
            out["run"] = run
            children.append(out)
        if not children:
            self.error(at, "a DAG without operations")
            return None
        dag: dict[str, Any] = {}
        if isinstance(data.get("concurrency"), int):
            dag["concurrency"] = data["concurrency"]
        dag["operations"] = children
        return dag

    # --- output --------------------------------------------------------------------------

    def allowed(self, queue: str) -> bool:
        target = self.target
        org, project = target.org_allowed_queues, target.project_allowed_queues
        return (org is None or queue in org) and (project is None or queue in project)

    def accepts(self, queue: str, kind: Any) -> bool:
        kinds = dict(self.target.queue_kinds).get(queue)
        return kinds is None or kind in kinds

    def place(self, op: _Op) -> bool:
        """Keep the operation off a queue that policy would refuse it: its project's
        allowedQueues (and the org's), and the queue's `kinds`. Another queue the project may
        use is written instead, and the report says why; with none, the operation is not
        written (reported), so that the repo still validates."""
        body = op.body
        kind = body.get("run", {}).get("kind")
        queue = body.get("queue")
        for preset in body.get("presets", []):
            queue = queue or self.presets.get(preset, ("", {}))[1].get("queue")
        if queue is None:
            queue = self.target.default_queue if self.project in self.target.projects else None
            queue = queue or self.project
        why = (
            None
            if self.allowed(queue) and self.accepts(queue, kind)
            else f"project {self.project!r} may not use queue {queue!r}"
            if not self.allowed(queue)
            else f"queue {queue!r} does not accept kind {kind!r} (its `kinds`)"
        )
        if why is None:
            return True
        at = op.root.at("queue") if "queue" in (op.root.get() or {}) else op.root
        order = [self.target.default_queue or "", *sorted(self.target.project_allowed_queues or ())]
        order += sorted({*self.target.queues, *self.queues})
        for candidate in order:
            if candidate and self.allowed(candidate) and self.accepts(candidate, kind):
                body["queue"] = candidate
                self.note(
                    at,
                    f"{why}: written with queue {candidate!r}; to keep {queue!r}, "
                    + (
                        "add it to the project's allowedQueues"
                        if not self.allowed(queue)
                        else f"add {kind} to its `kinds`"
                    ),
                    key=False,
                )
                return True
        self.note(
            at,
            f"{why}, nor any other queue it may use, so policy would reject it: not written; "
            f"add a queue that accepts it to projects/{self.project}/project.yaml "
            "allowedQueues and import it again",
            key=False,
        )
        return False

    @staticmethod
    def _unique(name: str, taken: set[str]) -> str:
        out, n = name, 2
        while out in taken:
            out = f"{name[:60]}-{n}"
            n += 1
        taken.add(out)
        return out

    def files(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        project = self.project
        if project not in self.target.projects:
            # A queue of the project's own, for operations that name none: a notebook or a
            # sandbox must not land on an org default that accepts only jobs.
            if project not in self.target.queues and project not in self.queues:
                self.queues[project] = f"project {project}'s default queue"
            body: dict[str, Any] = {
                "kind": "Project",
                "name": project,
                "defaults": {"queue": project},
            }
            header = [
                "Imported from Polyaxon (reconciler import polyaxon).",
                "Operations that name no queue (Polyaxon's default queue) use the project's own.",
            ]
            out.append((f"projects/{project}/project.yaml", render(header, body)))
        for name, (source, body) in self.presets.items():
            header = [f"Imported from Polyaxon preset {source} (reconciler import polyaxon)."]
            where = f"presets/{name}.yaml"
            if name in self.target.presets:
                # the repo has an org preset of that name: the imported one is the
                # project's, which shadows it for the project's operations only
                where = f"projects/{project}/presets/{name}.yaml"
                header.append(
                    f"The repo has an org preset {name!r}: this one is project {project}'s, "
                    "and shadows it for this project's operations."
                )
            out.append((where, render(header, body)))
        taken: set[str] = set()
        for op in self.ops:
            name = self._unique(op.name, taken)
            op.body["name"] = name
            if not self.place(op):
                continue
            header = [
                f"Imported from Polyaxon {op.root.doc.path} (reconciler import polyaxon).",
                *op.notes,
            ]
            out.append((f"projects/{project}/operations/{name}.yaml", render(header, op.body)))
        for name, where in self.queues.items():
            out.append(
                (
                    f"queues/{name}.yaml",
                    render(
                        [
                            f"Created by reconciler import polyaxon for {where}.",
                            "Set its quota (quota: {nvidia.com/gpu: N}, or flavors:), concurrency "
                            "and priority: Polyaxon keeps a queue's settings in its UI, not in "
                            "polyaxonfiles.",
                            "Then remove `paused`: until its limits are set it dispatches "
                            "nothing (without them it would dispatch without limit).",
                        ],
                        {
                            "kind": "Queue",
                            "name": name,
                            "cluster": self.target.cluster,
                            "paused": True,
                        },
                    ),
                )
            )
        return out


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _strip(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != "replicas"}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _num(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise TypeError(value)
    return Decimal(str(value))


def _parts(value: Any) -> list[Decimal]:
    if isinstance(value, str):
        return [_num(p.strip()) for p in value.split(":")]
    if isinstance(value, list):
        return [_num(p) for p in value]
    if isinstance(value, dict):
        keys = ("start", "stop", "step") if "step" in value else ("start", "stop", "num")
        return [_num(value[k]) for k in keys if k in value]
    raise TypeError(value)


def _plain(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def _space(kind: str, value: Any) -> list[Any]:
    parts = _parts(value)
    if kind == "range":
        if len(parts) != 3 or parts[2] == 0:
            raise ValueError(value)
        start, stop, step = parts
        out: list[Any] = []
        x = start
        while (x < stop) if step > 0 else (x > stop):
            out.append(_plain(x))
            x += step
            if len(out) > 100_000:
                raise ValueError(value)
        return out
    if len(parts) not in (3, 4):
        raise ValueError(value)
    low, high, num = float(parts[0]), float(parts[1]), int(parts[2])
    if num < 1 or num > 100_000:
        raise ValueError(value)
    gap = (high - low) / (num - 1) if num > 1 else 0.0
    lin = [low + gap * i for i in range(num)]
    if kind == "linspace":
        return [round(v, 12) for v in lin]
    if kind == "logspace":
        base = float(parts[3]) if len(parts) == 4 else 10.0
        return [float(f"{base**v:.12g}") for v in lin]
    # geomspace: the two ends are the values themselves.
    if low <= 0 or high <= 0:
        raise ValueError(value)
    ratio: float = (high / low) ** (1 / (num - 1)) if num > 1 else 1.0
    return [float(f"{low * ratio**i:.12g}") for i in range(num)]


def _merge(base: dict[str, Any], patch: Mapping[str, Any], strategy: str) -> dict[str, Any]:
    """Polyaxon's (and our presets') patch strategies, on plain data; lists are values."""
    out = dict(base)
    for key, value in patch.items():
        if key not in out or out[key] is None or strategy == "replace":
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merge(out[key], value, strategy)
        elif strategy == "post_merge":
            out[key] = value
        # isnull and pre_merge keep what is set.
    return out


def import_polyaxon(
    sources: Sequence[Source], *, project: str, target: Target, resolve: Resolver
) -> ImportResult:
    """Convert polyaxonfiles into files of the repo, with what has no equivalent reported.

    Presets are imported first, so that operations may name them whatever the order of the
    files on the command line."""
    importer = _Importer(project, target, resolve)
    for source in sorted(sources, key=lambda s: b"isPreset" not in s.content):
        importer.import_file(source)
    report = importer.report
    if report.errors:
        findings = tuple(dict.fromkeys(report.findings))  # a file read twice reports once
        return ImportResult((), findings, tuple(dict.fromkeys(report.errors)))
    files = importer.files()
    return ImportResult(tuple(files), tuple(dict.fromkeys(report.findings)), ())
