"""Workflows: a ``matrix`` or ``dag`` operation expanded into its children (step 7 of
docs/presets.md). Each child is then resolved and policed like any operation
(``resolve.py``).

What must live here: the expansion (the matrix product, the DAG's order, unknown
dependencies and cycles, child names and the limit on children) and the
``{{ params.NAME }}`` substitution in each child's ``run``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.core.compile.errors import Errors, at, short
from reconciler.core.compile.index import RepoIndex, locator
from reconciler.core.compile.merge import Path, ProvMap, apply_patch, dotted
from reconciler.core.compile.policy import Violation
from reconciler.core.compile.resolve import Context, build, resolve, validate_spec
from reconciler.core.load import Document
from reconciler.core.types import CompiledOperation, Location, MergeStrategy, WorkflowRef

MAX_WORKFLOW_CHILDREN = 1000
# Text that ``{{ params.NAME }}`` substitution may produce, over all the children of one
# workflow: the count of children is bounded, and so must be what each one grows to (a
# 1 KB parameter pasted 2000 times into 400 children is 800 MB of strings).
MAX_SUBSTITUTED_CHARS = 8 << 20
_PARAM_REF = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

Child = tuple[CompiledOperation, tuple[Violation, ...]]


def substitute(
    value: Any,
    params: Mapping[str, Any],
    path: Path,
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
    used: dict[Path, str] | None = None,
) -> Any:
    """Replace ``{{ params.NAME }}`` in every string under ``run``; ``used`` records, per
    path substituted, the first parameter it used."""
    if isinstance(value, dict):
        return {
            k: substitute(v, params, (*path, k), prov, fallback, errors, used)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            substitute(v, params, (*path, i), prov, fallback, errors, used)
            for i, v in enumerate(value)
        ]
    if not isinstance(value, str) or "{{" not in value:
        return value
    names = _PARAM_REF.findall(value)
    missing = [m for m in names if m not in params]
    if missing:
        errors.add(
            at(prov, path, fallback),
            f"unknown parameter {missing[0]!r} (params: {', '.join(params) or 'none'})",
        )
        return value
    if used is not None and names:
        used[path] = names[0]
    return _PARAM_REF.sub(lambda m: _param_text(params[m.group(1)]), value)


def _over_budget(layers: list[tuple[Any, Mapping[str, Any]]]) -> tuple[int, Path] | None:
    """Where (layer, path) substituting each (run, params) of ``layers`` would pass
    ``MAX_SUBSTITUTED_CHARS`` in all: counted before any string is built."""
    left = MAX_SUBSTITUTED_CHARS
    for index, (run, params) in enumerate(layers):
        stack: list[tuple[Any, Path]] = [(run, ("run",))]
        while stack:
            value, path = stack.pop()
            if isinstance(value, dict):
                stack.extend((v, (*path, k)) for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((v, (*path, i)) for i, v in enumerate(value))
            elif isinstance(value, str) and "{{" in value:
                left -= len(value)
                for match in _PARAM_REF.finditer(value):
                    if match.group(1) in params:
                        left += len(match.group(0)) - len(_param_text(params[match.group(1)]))
                if left < 0:
                    return index, path
    return None


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_dag(doc: Document, dag: Mapping[str, Any], errors: Errors) -> bool:
    """Unique child names, known dependencies, no cycles. False when not (reported)."""
    reported = len(errors)
    ops = dag["operations"]
    names: dict[str, int] = {}
    for i, child in enumerate(ops):
        if child["name"] in names:
            errors.add(
                doc.loc(("dag", "operations", i, "name")),
                f"duplicate DAG operation {child['name']!r}",
            )
        names.setdefault(child["name"], i)
    for i, child in enumerate(ops):
        for j, dep in enumerate(child.get("dependencies") or []):
            loc = doc.loc(("dag", "operations", i, "dependencies", j))
            if dep == child["name"]:
                errors.add(loc, f"{dep!r} depends on itself")
            elif dep not in names:
                errors.add(loc, f"unknown DAG dependency {dep!r}")
    if len(errors) > reported:
        return False
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
                    errors.add(
                        doc.loc(("dag", "operations", i, "dependencies", k)),
                        f"dependency cycle: {node!r} -> {dep!r} -> ... -> {node!r}",
                    )
                    return False
                if not state.get(dep):
                    state[dep] = 1
                    stack.append((dep, 0))
            else:
                state[node] = 2
                stack.pop()
    return True


Combo = tuple[dict[str, Any], dict[str, Path]]  # a child's params, and where each is written


def _matrix_children(
    doc: Document, matrix: Mapping[str, Any], errors: Errors
) -> list[Combo] | None:
    """Each child's parameters, in child order, for a ``grid``, ``mapping`` or ``random``
    matrix; None (reported) when there would be more than ``MAX_WORKFLOW_CHILDREN``."""
    kind = matrix.get("kind", "grid")
    if kind == "grid":
        count, where = math.prod(len(v) for v in matrix["params"].values()), "params"
    elif kind == "mapping":
        count, where = len(matrix["values"]), "values"
    else:
        count, where = matrix["numRuns"], "numRuns"
    if count > MAX_WORKFLOW_CHILDREN:
        errors.add(
            doc.loc(("matrix", where)),
            f"the matrix expands to {count} operations; the limit is {MAX_WORKFLOW_CHILDREN}",
        )
        return None
    if kind == "mapping":
        out: list[Combo] = []
        for i, entry in enumerate(matrix["values"]):
            where_each: dict[str, Path] = {n: ("matrix", "values", i, n) for n in entry}
            out.append((dict(entry), where_each))
        return out
    if kind == "random":
        params, seed = matrix["params"], matrix["seed"]
        paths: dict[str, Path] = {n: ("matrix", "params", n) for n in params}
        return [
            ({n: draw(dist, seed, i, n) for n, dist in params.items()}, paths) for i in range(count)
        ]
    names = list(matrix["params"])
    ranges = [range(len(v)) for v in matrix["params"].values()]
    return [
        (
            {n: matrix["params"][n][j] for n, j in zip(names, combo, strict=True)},
            {n: ("matrix", "params", n, j) for n, j in zip(names, combo, strict=True)},
        )
        for combo in itertools.product(*ranges)
    ]


# Drawn floats keep this many significant digits: exp, log and cos may differ in their
# last bit between C libraries, and a child's parameters must read the same everywhere.
DRAW_DIGITS = 10


def uniforms(seed: int, index: int, name: str) -> Iterator[float]:
    """The uniform draws in [0, 1) for parameter ``name`` of child ``index`` of a random
    matrix with ``seed``: the k-th is the first 53 bits of SHA-256 of the text
    ``"{seed}/{index}/{name}/{k}"``, over 2**53. Defined by the text alone, so the same on
    every machine and Python build, whatever the order of the file's maps; each parameter
    draws from its own stream, so adding, removing or reordering one leaves the others'
    values alone. (``random`` is kept out of ``core``: nothing here may depend on a
    generator's state.)"""
    for k in itertools.count():
        digest = hashlib.sha256(f"{seed}/{index}/{name}/{k}".encode()).digest()
        yield (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53)


def draw(dist: Mapping[str, Any], seed: int, index: int, name: str) -> Any:
    """Parameter ``name`` of child ``index`` of a random matrix with ``seed``, from its
    ``{kind, value}`` as Polyaxon defines them: ``choice`` one of the values, ``range`` one
    of start, start + step, ... before stop, ``uniform`` in [low, high), ``loguniform``
    exp of a uniform in [low, high), ``normal`` mean + deviation times a standard normal
    (Box-Muller). Drawn floats keep ``DRAW_DIGITS`` significant digits."""
    draws = uniforms(seed, index, name)
    kind, value = dist["kind"], dist["value"]
    u = next(draws)
    if kind == "choice":
        return value[min(int(u * len(value)), len(value) - 1)]
    if kind == "range":
        start, stop, step = value
        count = math.ceil((stop - start) / step)
        k = min(int(u * count), count - 1)
        out = start + k * step
        return out if isinstance(out, int) else _rounded(out)
    low, high = float(value[0]), float(value[1])
    if kind == "uniform":
        return _rounded(low + u * (high - low))
    if kind == "loguniform":
        return _rounded(math.exp(low + u * (high - low)))
    z = math.sqrt(-2.0 * math.log(1.0 - u)) * math.cos(2.0 * math.pi * next(draws))
    return _rounded(low + high * z)


def _rounded(value: float) -> float:
    return float(f"{value:.{DRAW_DIGITS}g}")


@dataclass(frozen=True)
class _Layer:
    """One child before it is resolved: its spec, and where its own lines are."""

    name: str
    params: dict[str, Any]
    spec: dict[str, Any]
    prov: ProvMap
    dependencies: tuple[str, ...]
    label: str  # how messages name the child
    param_paths: Mapping[str, Path]  # param name -> path of its value in the operation file
    override: Path | None = None  # a DAG child's ``run`` in the operation file


def _cleared_at(doc: Document, override: Path | None, path: Path) -> Path | None:
    """The path in the operation file where a DAG child's ``run`` sets ``path`` (or a
    section above it) to null."""
    if override is None or path[:1] != ("run",):
        return None
    value: Any = doc.data
    for part in override:
        value = value[part]
    for i, part in enumerate(path[1:]):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
        if value is None:
            return (*override, *path[1 : i + 2])
    return None


def validate_child(
    doc: Document,
    layer: _Layer,
    final: Mapping[str, Any],
    used: Mapping[Path, str],
    fallback: Location,
    errors: Errors,
) -> bool:
    """A child checked as if it were written by hand (step 4 again, after expansion):
    problems point at the line that made the child invalid, a parameter's value or the
    DAG child's ``null``."""
    child_loc = doc.loc(layer.override[:-1]) if layer.override else fallback

    def locate(path: Path, key: bool = False) -> Location:
        for sub in (path, *(path[:n] for n in range(len(path) - 1, 0, -1))):
            if sub in used:
                return doc.loc(layer.param_paths[used[sub]])
        return at(layer.prov, path, child_loc)

    def unset(path: Path) -> tuple[Location, str]:
        cleared = _cleared_at(doc, layer.override, path)
        if cleared is not None:
            field = dotted(cleared[len(layer.override or ()) - 1 :])
            what = "a field" if field == dotted(path) else f"{dotted(path)}, a field"
            return doc.loc(
                cleared
            ), f"{layer.label}: {field}: null clears {what} every operation needs"
        return child_loc, f"{layer.label}: {dotted(path)} is not set"

    return validate_spec(final, locate, errors, prefix=f"{layer.label}: ", unset=unset)


def expand(
    repo: RepoIndex,
    ctx: Context,
    doc: Document,
    name: str,
    spec: dict[str, Any],
    prov: ProvMap,
    fallback: Location,
    errors: Errors,
) -> list[Child]:
    """The children of the workflow ``name``, each validated as if written by hand, then
    resolved, with its policy violations. Problems go to ``errors``; a child name that is
    too long is then the only one."""
    parent_id = f"{ctx.project}/{name}"
    base = {k: v for k, v in spec.items() if k not in ("matrix", "dag")}
    base_prov = {k: v for k, v in prov.items() if k[0] not in ("matrix", "dag")}
    layers: list[_Layer] = []
    if "matrix" in spec:
        matrix = spec["matrix"]
        kind, concurrency = "matrix", matrix.get("concurrency")
        combos = _matrix_children(doc, matrix, errors)
        if combos is None:
            return []
        for i, (values, paths) in enumerate(combos):
            shown = ", ".join(f"{n}={short(v)}" for n, v in values.items())
            layers.append(
                _Layer(
                    f"{name}-{i}",
                    values,
                    base,
                    base_prov,
                    (),
                    f"matrix child {name}-{i} ({shown})",
                    paths,
                )
            )
    else:
        dag = spec["dag"]
        kind, concurrency = "dag", dag.get("concurrency")
        if not check_dag(doc, dag, errors):
            return []
        for i, child in enumerate(dag["operations"]):
            child_spec, child_prov = base, base_prov
            override: Path | None = None
            if child.get("run") is not None:
                override = ("dag", "operations", i, "run")
                child_spec, child_prov = apply_patch(
                    base,
                    base_prov,
                    {"run": child["run"]},
                    MergeStrategy.REPLACE,
                    locator(doc, ("dag", "operations", i)),
                    doc.path,
                    f"dag operation {child['name']}",
                )
            deps = tuple(f"{ctx.project}/{name}-{d}" for d in child.get("dependencies") or [])
            child_params = dict(child.get("params") or {})
            layers.append(
                _Layer(
                    f"{name}-{child['name']}",
                    child_params,
                    child_spec,
                    child_prov,
                    deps,
                    f"dag operation {child['name']!r}",
                    {n: ("dag", "operations", i, "params", n) for n in child_params},
                    override,
                )
            )
    over = _over_budget([(layer.spec["run"], layer.params) for layer in layers])
    if over is not None:
        errors.add(
            at(layers[over[0]].prov, over[1], fallback),
            "parameter substitution expands the workflow's children to more than "
            f"{MAX_SUBSTITUTED_CHARS} characters of text",
        )
        return []
    children = Errors()  # what the children report, dropped for a child name too long
    out: list[Child] = []
    for index, layer in enumerate(layers):
        if len(layer.name) > 63:
            errors.add(
                doc.loc(("name",)),
                f"child name {layer.name!r} is longer than 63 characters; shorten {name!r}",
            )
            return []
        used: dict[Path, str] = {}
        run = substitute(
            layer.spec["run"], layer.params, ("run",), layer.prov, fallback, children, used
        )
        final = {**layer.spec, "name": layer.name, "run": run}
        if not validate_child(doc, layer, final, used, fallback, children):
            continue
        resolved = resolve(repo, ctx, final, layer.prov, fallback, children)
        if resolved is None:
            continue
        ref = WorkflowRef(parent=parent_id, kind=kind, index=index, concurrency=concurrency)
        compiled = build(
            ctx,
            repo,
            layer.name,
            final,
            layer.prov,
            resolved,
            workflow=ref,
            dependencies=layer.dependencies,
            params=layer.params,
        )
        out.append((compiled, resolved.violations))
    errors.extend(children)
    return out
