"""Random YAML never produces a traceback: only located errors."""

from __future__ import annotations

import json
import os

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support.builders import NOW
from support.helpers import BUDGET_KIB, run_measured
from support.paths import ROOT, TEMPLATE
from support.snapshots import overlay

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.decision.render import render_operation
from reconciler.core.load import (
    MAX_DEPTH,
    MAX_EXPANDED_CHARS,
    MAX_FILE_BYTES,
    MAX_NODES,
    parse_yaml,
)
from reconciler.core.observation.observed import ObservedFileError, parse_observed
from reconciler.core.reporting.status import read_status
from reconciler.core.types import RepoFile, RepoSnapshot, printable_path

PATHS = [
    "reconciler.yaml",
    "clusters/c.yaml",
    "connections/x.yaml",
    "queues/q.yaml",
    "presets/p.yaml",
    "projects/a/project.yaml",
    "projects/a/presets/p.yaml",
    "projects/a/operations/o.yaml",
]
KINDS = ["Org", "Cluster", "Connection", "Queue", "Cohort", "Preset", "Project", "Operation"]
FIELDS = [
    "kind",
    "name",
    "run",
    "container",
    "image",
    "queue",
    "presets",
    "patchStrategy",
    "resources",
    "limits",
    "nvidia.com/gpu",
    "matrix",
    "params",
    "dag",
    "operations",
    "dependencies",
    "connections",
    "cluster",
    "quota",
    "kubeconfig",
    "inCluster",
    "policy",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**20),
    st.floats(allow_nan=True),
    st.sampled_from(KINDS + FIELDS + ["a", "q", "c", "x", "p", "job", "2Gi", "yes"]),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=5)
    ),
    max_leaves=25,
)
documents = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6).map(
    lambda d: {"kind": d.pop("kind", "Queue"), **d} if isinstance(d, dict) else d
)


def _check(snapshot: RepoSnapshot) -> None:
    compiled = compile_repo(snapshot)
    for error in compiled.errors:
        assert "internal error" not in error.message, error
        assert error.location.file
    result = compile_operation(snapshot, "a/o")
    assert all("internal error" not in e.message for e in result.errors)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(PATHS), documents, max_size=8))
@pytest.mark.slow
def test_random_structured_repos(files: dict[str, object]) -> None:
    snapshot = RepoSnapshot(
        {p: RepoFile(p, yaml.safe_dump(doc).encode()) for p, doc in files.items()}
    )
    _check(snapshot)


# Text with what a double-quoted YAML string can spell by escape: any code point, surrogates
# included (``json.dumps`` writes them as ``\\udXXX``, which YAML reads the same way).
any_text = st.text(alphabet=st.characters(min_codepoint=0), max_size=12)
huge_ints = st.integers(-(2**70), 2**70)
_WORLD = snapshot_worktree(TEMPLATE)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=any_text, number=huge_ints)
@pytest.mark.slow
def test_a_workload_validate_accepts_can_be_sent_to_kubernetes(text: str, number: int) -> None:
    """Every string and integer an operation may carry into its Job, as a value validate
    accepts, serialises to the Job's body (orjson, as ``Kube._create`` sends it): a
    surrogate escape or an integer past 64 bits raised there, on every cycle, for every
    operation."""
    body = "\n".join(
        [
            "kind: Operation",
            "queue: team-a",
            "run:",
            "  kind: job",
            "  container:",
            "    image: busybox",
            f"    args: [{json.dumps(text)}]",
            f"    env: {{A: {json.dumps(text)}}}",
            "  environment:",
            f"    annotations: {{example.com/a: {json.dumps(text)}}}",
            "    tolerations:",
            f"      - {{key: a, operator: Exists, effect: NoExecute, tolerationSeconds: {number}}}",
            "",
        ]
    )
    snapshot = overlay(_WORLD, {"projects/vision/operations/fuzzed.yaml": body})
    compiled = compile_repo(snapshot)
    for op in compiled.operations:
        if op.id == "vision/fuzzed":
            rendered = render_operation(
                op, compiled.connections, config_version="v", dispatched_at=NOW
            )
            for manifest in rendered.manifests:
                orjson.dumps(manifest)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_random_bytes(content: bytes) -> None:
    doc, errors = parse_yaml("f.yaml", content)
    assert (doc is None) == bool(errors)
    _check(RepoSnapshot({p: RepoFile(p, content) for p in PATHS}))


# --- the loader alone: YAML-ish text, alias bombs, deep nesting -----------------------------

TOKENS = [
    "kind", "name", "a", "b", "x1", ":", ": ", "- ", "-", "  ", "    ", "\n", "\n  ", "\t",
    "[", "]", "{", "}", ",", "'", '"', "\\", "&a", "&b", "*a", "*b", "!!str ", "!!binary ",
    "!local ", "---", "...", "%YAML 1.1", "? ", "#", "|", ">", "<<", "~", "null", "true",
    "yes", "on", "1e400", "-1e400", "0x", "0o7", ".inf", ".nan", "9" * 120, "1_000",
    "2Gi", "\ufeff", "\x00", "\x85", "\u2028", "\ud7ff", "é", "\r\n",
]  # fmt: skip
yamlish = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)


def _check_parse(path: str, content: bytes) -> None:
    doc, errors = parse_yaml(path, content)
    assert (doc is None) == bool(errors)
    lines = len(content.decode("utf-8", "replace").splitlines()) + 2
    for error in errors:
        assert error.location.file == path
        assert 1 <= error.location.line <= lines and error.location.col >= 1, error
        assert error.message and "\n" not in error.message
        assert "internal error" not in error.message and "Traceback" not in error.message
        assert len(error.message) < 400, error.message  # never echoes a huge input


@pytest.mark.timeout(120)
@settings(max_examples=400, deadline=None)
@given(yamlish)
def test_yamlish_text_gives_a_document_or_located_errors(text: str) -> None:
    _check_parse("f.yaml", text.encode("utf-8", "surrogatepass"))


@pytest.mark.timeout(120)
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_give_a_document_or_located_errors(content: bytes) -> None:
    _check_parse("f.yaml", content)


@pytest.mark.timeout(120)
@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(1, 10), st.booleans())
def test_alias_fan_out_is_bounded(fan_out: int, depth: int, flow: bool) -> None:
    """Billion-laughs shapes of any fan-out and depth: parsed when small, refused when the
    expansion passes MAX_NODES, and never expanded past it."""
    lines = ["kind: Queue", "l0: &l0 [" + ", ".join(["x"] * fan_out) + "]"]
    for level in range(1, depth + 1):
        refs = [f"*l{level - 1}"] * fan_out
        body = "[" + ", ".join(refs) + "]" if flow else "\n" + "\n".join(f"  - {r}" for r in refs)
        lines.append(f"l{level}: &l{level} {body}")
    content = ("\n".join(lines) + "\n").encode()
    doc, errors = parse_yaml("bomb.yaml", content)
    expanded = sum(fan_out ** (k + 1) + 1 for k in range(depth + 1)) + 1
    if expanded <= MAX_NODES // 2:
        assert doc is not None and errors == [], errors
    elif expanded > MAX_NODES:
        assert doc is None
        (error,) = errors
        assert "alias bomb" in error.message and error.location.line >= 2


@pytest.mark.timeout(60)
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 2000), st.sampled_from(["[", "{a: ", "- "]))
def test_nesting_is_bounded(depth: int, opener: str) -> None:
    closer = {"[": "]", "{a: ": "}", "- ": ""}[opener]
    if opener == "- ":
        body = "".join("  " * i + "- \n" for i in range(min(depth, 400))) + "  " * depth + "x\n"
    else:
        body = "k: " + opener * depth + "x" + closer * depth + "\n"
    doc, errors = parse_yaml("deep.yaml", body.encode())
    if depth > MAX_DEPTH + 1:
        assert doc is None and errors
        assert all(e.location.line >= 1 for e in errors)


# --- issue 13, section 5: every YAML reader, bounded ------------------------------------------


@pytest.mark.timeout(120)
@settings(max_examples=200, deadline=None)
@given(yamlish | st.binary(max_size=500).map(lambda b: b.decode("latin-1")))
def test_observed_and_status_readers_give_located_errors_only(text: str) -> None:
    """The ``--observed`` and status-branch readers share the config loader: on any input
    they give a result or located one-line errors, never an exception."""
    content = text.encode("utf-8", "surrogatepass")
    try:
        parse_observed(content, "o.yaml")
    except ObservedFileError as exc:
        for error in exc.errors:
            assert error.location.file == "o.yaml" and error.location.line >= 1, error
            assert "\n" not in str(error) and len(error.message) < 400, error
    view = read_status({"status/p/o.yaml": content, "status/queues.yaml": content})
    for problem in view.problems:
        assert problem.startswith("status/") and "\n" not in problem, problem


@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300_000), st.integers(1, 3000))
def test_aliases_of_long_strings_are_bounded_by_their_text(length: int, refs: int) -> None:
    """Few values, long strings: refused once the text passes MAX_EXPANDED_CHARS, whatever
    the count of values (a billion laughs of one long string)."""
    content = f'kind: Queue\nx: &s "{"A" * length}"\ny: [{", ".join(["*s"] * refs)}]\n'
    doc, errors = parse_yaml("q.yaml", content.encode())
    expanded = length * (refs + 1)
    if expanded > MAX_EXPANDED_CHARS or refs + 4 > MAX_NODES:
        assert doc is None and "alias bomb" in errors[0].message, errors
    elif len(content) <= MAX_FILE_BYTES:
        assert doc is not None, errors


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_hostile_classes_stay_within_the_memory_budget() -> None:
    """The fuzz of ``fuzz_hostile_child.py`` (alias bombs of long strings and of structures,
    matrix substitution, deep nesting, custom tags, 6000-digit numbers; through the compiler,
    ``--observed`` and the status reader) in a child process: under 256 MiB at its peak."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    m = run_measured(["-m", "support.fuzz_hostile_child"], env=env, timeout=550)
    assert m.returncode == 0 and "ok" in m.stdout, m
    assert 0 < m.peak_kib < BUDGET_KIB, m


# --- issue 13, section 6: file names never forge a line -----------------------------------------

names = st.text(
    st.characters(blacklist_categories=("Cs",)) | st.sampled_from("\n\r\t\x1b\x85\u2028\u202e"),
    min_size=1,
    max_size=20,
).filter(lambda n: "/" not in n and "\x00" not in n and n not in (".", ".."))


@settings(max_examples=300, deadline=None)
@given(st.lists(names, min_size=1, max_size=3))
def test_printed_paths_are_one_line_and_unambiguous(parts: list[str]) -> None:
    path = "/".join(parts)
    shown = printable_path(path)
    assert shown.isprintable(), shown
    if shown != path:
        assert shown.startswith('"') and shown.endswith('"') and len(shown) > 2
        assert _unquote(shown[1:-1]) == path  # nothing lost: the quoting is unambiguous


def _unquote(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        if body[i] != "\\":
            assert body[i] != '"', body
            out.append(body[i])
            i += 1
            continue
        kind = body[i + 1]
        width = {"x": 2, "u": 4, "U": 8}.get(kind)
        if width:
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(kind, kind))
            i += 2
    return "".join(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names.map(lambda n: n + ".yaml"), st.sampled_from(["queues", "presets", "projects/a/x"]))
def test_a_file_name_never_forges_a_line_of_validate(name: str, where: str) -> None:
    path = f"{where}/{name}"
    snapshot = RepoSnapshot({path: RepoFile(path, b"kind: Nope\n")})
    for error in compile_repo(snapshot).errors:
        line = str(error)
        assert line.isprintable(), line
        assert line.startswith(printable_path(error.location.file) + ":"), line


# --- the merge contract on random free-form maps (issue 13, section 7) ----------------------

KEYS = ["a", "b", "c", "terms", "add"]
leaf_values = st.one_of(st.sampled_from(["x", "y", "z"]), st.integers(0, 3), st.booleans())
lists = st.lists(
    st.one_of(leaf_values, st.dictionaries(st.sampled_from(KEYS), leaf_values, max_size=2)),
    max_size=3,
)
free_maps = st.recursive(
    st.dictionaries(st.sampled_from(KEYS), st.one_of(leaf_values, lists, st.none()), max_size=4),
    lambda inner: st.dictionaries(
        st.sampled_from(KEYS), st.one_of(leaf_values, lists, st.none(), inner), max_size=4
    ),
    max_leaves=12,
)


def _walk_lists(value: object, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every list inside the map ``value`` (lists are not entered), by its key path."""
    out: dict[tuple[str, ...], object] = {}
    if isinstance(value, dict):
        for key, sub in value.items():
            if isinstance(sub, list):
                out[(*path, key)] = sub
            else:
                out.update(_walk_lists(sub, (*path, key)))
    return out


def _no_null_in_maps(value: object) -> bool:
    if isinstance(value, dict):
        return all(v is not None and _no_null_in_maps(v) for v in value.values())
    return True


def _get(value: object, path: tuple[str, ...]) -> object:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


@settings(max_examples=300, deadline=None)
@given(free_maps, free_maps, st.sampled_from(["replace", "isnull", "post_merge", "pre_merge"]))
def test_a_list_inside_a_map_is_one_layers_value_and_no_null_stays(
    cur: dict[str, object], new: dict[str, object], strategy: str
) -> None:
    from reconciler.core.compile.merge import apply_patch, fine_leaves, start

    loc = lambda path: (1, 1)  # noqa: E731
    spec, prov = start({"run": {"environment": {"affinity": cur}}}, loc, "op.yaml", "operation")
    patch = {"run": {"environment": {"affinity": new}}}
    out, out_prov = apply_patch(spec, prov, patch, strategy, loc, "p.yaml", "preset")
    merged = out["run"]["environment"].get("affinity")
    clean_cur = spec["run"]["environment"].get("affinity")
    assert _no_null_in_maps(out)
    # Every list in the result is one layer's list, never a union of the two.
    for path, value in _walk_lists(merged).items():
        assert value in (_get(clean_cur, path), _get(new, path)), (path, value)
        if strategy == "post_merge" and isinstance(_get(new, path), list):
            assert value == _get(new, path)
        if strategy == "pre_merge" and isinstance(_get(clean_cur, path), list):
            assert value == _get(clean_cur, path)
    # Provenance: one entry per leaf of the result, and none for what is gone.
    base = ("run", "environment", "affinity")
    leaves = {(*base, *p) for p in fine_leaves(merged)} if merged is not None else set()
    assert {k for k in out_prov if k[:3] == base} == leaves


# --- one spelling per field (issue 13, section 4) --------------------------------------------


def _respell(alias: str, style: str) -> str:
    from reconciler.core.compile.model import to_snake

    snake = to_snake(alias)
    return {
        "snake": snake,
        "kebab": snake.replace("_", "-"),
        "pascal": alias[0].upper() + alias[1:],
        "lower": alias.lower(),
        "upper": alias.upper(),
    }[style]


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from(["snake", "kebab", "pascal", "lower", "upper"]))
def test_any_other_spelling_of_a_field_is_an_unknown_field_naming_it(
    data: st.DataObject, style: str
) -> None:
    from support.strategies import CAMEL_FIELDS
    from support.strategies import nest as _nest

    from reconciler.core.compile.errors import Errors, add_validation_errors
    from reconciler.core.compile.model import KINDS
    from reconciler.core.types import Location

    kind, path, alias = data.draw(st.sampled_from(CAMEL_FIELDS))
    written = _respell(alias, style)
    value = data.draw(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3)))
    doc = {"kind": kind, **_nest(path, {written: value})}
    errors = Errors()
    try:
        KINDS[kind].model_validate(doc)
    except ValidationError as exc:
        add_validation_errors(
            errors, exc, doc, KINDS[kind], lambda p, key=False: Location("f", 1, 1)
        )
    expected = f"unknown field {written!r} (did you mean {alias!r}?)"
    assert any(e.message.endswith(expected) for e in errors), [e.message for e in errors]
