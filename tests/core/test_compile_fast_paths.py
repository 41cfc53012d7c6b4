"""The cold compile's fast paths give exactly what the paths before them gave: the plain
reader (``load._Plain``, not libyaml) and the merged spec checked without the parts of
it that passed already (``index.ValidatedParts``). On generated repos, valid and
invalid (many operations applying the same presets, so the parts that passed are met
again), the compiled repo (operations with their specs and provenance, rejections,
errors with their locations and messages) is the same with them and without."""

from __future__ import annotations

import typing
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support.paths import TEMPLATE

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core import load
from reconciler.core.compile import CompileCache, compile_repo
from reconciler.core.compile import index as index_module
from reconciler.core.compile import operations as operations_module
from reconciler.core.compile import resolve as resolve_module
from reconciler.core.compile.index import VALIDATED_SECTIONS
from reconciler.core.compile.model import OperationFile
from reconciler.core.compile.policy import check_pod_security
from reconciler.core.decision.render import render_pod
from reconciler.core.types import CompiledRepo, RepoFile, RepoSnapshot, RunKind

BASE = snapshot_worktree(TEMPLATE)

# Pieces of ``run`` a preset or an operation may set: valid ones, and ones the schema,
# the merge or the checks after it refuse.
FRAGMENTS: list[dict[str, Any]] = [
    {"kind": "job"},
    {"kind": "notebook"},
    {"kind": "bogus"},
    {"container": {"image": "ghcr.io/x/y:1"}},
    {"container": {"image": "Bad Image"}},
    {"container": {"command": ["python", "t.py"], "args": ["--seed", "1"]}},
    {"container": {"command": "python"}},
    {"container": {"env": {"A": "1", "B": "x"}}},
    {"container": {"env": {"A": None}}},
    {"container": {"env": {"1BAD": "x"}}},
    {"container": {"resources": {"requests": {"cpu": 2, "memory": "1Gi"}}}},
    {"container": {"resources": {"limits": {"nvidia.com/gpu": 1}}}},
    {"container": {"resources": {"requests": {"cpu": "lots"}}}},
    {"container": {"resources": {"limits": {"nvidia.com/gpu": 0.5}}}},
    {"container": {"resources": {"requests": {"cpu": 8}, "limits": {"cpu": 4}}}},
    {"container": {"timeout": "2h"}},
    {"environment": {"labels": {"team": "a"}}},
    {"environment": {"labels": {"bad key!": "a"}}},
    {"environment": {"nodeSelector": {"x": "y"}, "tolerations": [{"operator": "Exists"}]}},
    {"environment": {"tolerations": [{"operator": "Equal"}]}},
    {"environment": {"hostNetwork": True}},
    {"timeout": "1h"},
    {"timeout": 5400},
    {"timeout": "soon"},
    {"replicas": 2},
    {"replicas": 0},
    {"connections": ["datasets"]},
    {"connections": ["nope"]},
    {"distributed": {"framework": "torch"}},
    {"distributed": {"framework": "mpi"}},
    {"mystery": 1},
    # what Pod Security reads (resolve._pod_security)
    {"container": {"securityContext": {"privileged": True}}},
    {"container": {"securityContext": {"runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}}}},
    {"container": {"shmSize": "1Gi"}},
    {"environment": {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "x"}}},
    {"environment": {"hostPID": True, "labels": {"team": "b"}}},
    {
        "initContainers": [
            {"name": "init", "image": "busybox:1", "securityContext": {"privileged": True}}
        ]
    },
    {"sidecars": [{"name": "side", "image": "busybox:1"}]},
    {"volumes": [{"name": "v", "emptyDir": {}}]},
    {"connections": ["hf-token", "checkpoints"]},
    # valid alone, refused once merged with one another: only the merged spec's check
    # finds these (what ValidatedParts must never hide)
    {"container": {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}},
    {
        "container": {
            "securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}
            }
        }
    },
    {"container": {"securityContext": {"seccompProfile": {"localhostProfile": "q.json"}}}},
]
STRATEGIES = ["replace", "isnull", "post_merge", "pre_merge"]


def _merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merged([out[key], value])
            else:
                out[key] = value
    return out


runs = st.lists(st.sampled_from(FRAGMENTS), max_size=3).map(_merged)


@st.composite
def repos(draw: st.DrawFn) -> RepoSnapshot:
    files = dict(BASE.files)
    presets = []
    for i in range(draw(st.integers(0, 3))):
        name = f"p{i}"
        presets.append(name)
        body: dict[str, Any] = {"kind": "Preset", "name": name}
        body["patchStrategy"] = draw(st.sampled_from(STRATEGIES))
        body["run"] = draw(runs)
        path = f"projects/vision/presets/{name}.yaml"
        files[path] = RepoFile(path, yaml.safe_dump(body, sort_keys=False).encode())
    shared = draw(runs)  # what many operations write alike
    for i in range(draw(st.integers(1, 8))):
        name = f"o{i}"
        body = {"kind": "Operation", "name": name}
        chosen = draw(st.lists(st.sampled_from([*presets, "a100", "data", "missing"])))
        if chosen:
            body["presets"] = list(dict.fromkeys(chosen))
        queue = draw(st.sampled_from([None, None, "team-a", "batch", "nope"]))
        if queue:
            body["queue"] = queue
        body["run"] = _merged([shared, draw(runs)]) if draw(st.booleans()) else draw(runs)
        text = yaml.safe_dump(body, sort_keys=False, default_flow_style=draw(st.booleans()))
        if draw(st.integers(0, 9)) == 0:
            text += draw(st.sampled_from(["x: [unclosed\n", "name: dup\n", "a: &x 1\n"]))
        path = f"projects/vision/operations/{name}.yaml"
        files[path] = RepoFile(path, text.encode())
    return RepoSnapshot(files)


def _compile_before(snapshot: RepoSnapshot, cached: bool) -> CompiledRepo:
    """The compile without the fast paths: libyaml reads every file, the merged spec is
    checked whole, every operation's pod is rendered for Pod Security, and every
    container's totals are worked out."""
    real_validate, real_totals = operations_module.validate_spec, resolve_module.total_requests

    def whole(*args: Any, **kwargs: Any) -> bool:
        kwargs.pop("validated", None)
        return real_validate(*args, **kwargs)

    def totals(*args: Any) -> Any:
        return real_totals(*args[:4])  # without the repo: no memo

    def pod_security(repo: Any, ctx: Any, spec: Any, prov: Any, conns: Any, queue: Any) -> Any:
        pod = render_pod(
            spec,
            RunKind(spec["run"]["kind"]),
            conns,
            operation=f"{ctx.project}/{spec['name']}",
            queue=queue.name,
        )
        return check_pod_security(spec, prov, pod, policy=ctx.org.policy)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(load, "_PLAIN_READER", False)
        m.setattr(operations_module, "validate_spec", whole)
        m.setattr(resolve_module, "total_requests", totals)
        m.setattr(resolve_module, "_pod_security", pod_security)
        return compile_repo(snapshot, cache=CompileCache() if cached else None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repos(), st.booleans())
@pytest.mark.slow
def test_the_fast_paths_compile_generated_repos_the_same(
    snapshot: RepoSnapshot, cached: bool
) -> None:
    fast = compile_repo(snapshot, cache=CompileCache() if cached else None)
    assert fast == _compile_before(snapshot, cached)


def test_the_generated_repos_reach_both_outcomes() -> None:
    """The generator gives valid operations and refused ones (checked, not assumed)."""
    files = dict(BASE.files)
    ok = "projects/vision/operations/ok.yaml"
    files[ok] = RepoFile(ok, b"kind: Operation\nname: ok\nrun:\n  container:\n    args: [x]\n")
    bad = "projects/vision/operations/bad.yaml"
    body = b"kind: Operation\nname: bad\nrun:\n  container:\n    env: {1BAD: x}\n"
    files[bad] = RepoFile(bad, body)
    compiled = compile_repo(RepoSnapshot(files))
    assert any(op.name == "ok" for op in compiled.operations)
    assert any(e.location.file == bad for e in compiled.errors)
    assert compiled == _compile_before(RepoSnapshot(files), cached=False)


def test_a_part_that_passed_is_not_checked_again_but_a_new_one_is() -> None:
    repo = index_module.RepoIndex(BASE)
    shared = {"tolerations": [{"operator": "Exists"}]}
    seen: set[int] = {id(shared)}
    parts = index_module.ValidatedParts(lambda value: id(value) in seen)
    spec = {"kind": "Operation", "run": {"environment": shared, "kind": "job"}}
    unchecked, new = parts.unchecked(spec)
    assert unchecked == spec
    parts.note(new)
    later = {"kind": "Operation", "run": {"environment": shared, "kind": "notebook"}}
    assert parts.unchecked(later)[0] == {"kind": "Operation", "run": {"kind": "notebook"}}
    assert repo.validated is not None


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel]:
    model: type[BaseModel] = OperationFile
    for part in path:
        field = next(f for f in model.model_fields.values() if f.alias == part)
        model = next(a for a in typing.get_args(field.annotation) if isinstance(a, type))
    return model


@pytest.mark.parametrize("path", sorted(VALIDATED_SECTIONS | {()}))
def test_a_part_left_out_changes_nothing_else(path: tuple[str | int, ...]) -> None:
    """What ``ValidatedParts`` relies on: every typed section's fields are optional and
    no validator reads the model as a whole; the top model's validator reads ``matrix``
    and ``dag`` and its ``kind`` is required, the three never left out."""
    model = _model_at(path)
    decorators = model.__pydantic_decorators__
    if path:
        assert not any(f.is_required() for f in model.model_fields.values()), model
        assert not decorators.model_validators, model
    else:
        required = {f.alias for f in model.model_fields.values() if f.is_required()}
        assert required == {"kind"}
        assert set(decorators.model_validators) == {"_one_workflow"}
    assert not decorators.field_validators, model


def test_an_error_only_the_merged_spec_has_is_found_with_the_fast_paths() -> None:
    """A preset's part that passed in one operation, merged over another's into a spec
    the schema refuses: the merged spec's check still reports it, where it always did."""
    files = dict(BASE.files)
    preset = "projects/vision/presets/seccomp.yaml"
    files[preset] = RepoFile(
        preset,
        b"kind: Preset\nname: seccomp\npatchStrategy: post_merge\nrun:\n  container:\n"
        b"    securityContext:\n      seccompProfile: {type: RuntimeDefault}\n",
    )
    for name, profile in (("plain", b""), ("local", b"localhostProfile: p.json, ")):
        path = f"projects/vision/operations/{name}.yaml"
        files[path] = RepoFile(
            path,
            b"kind: Operation\nname: " + name.encode() + b"\npresets: [seccomp]\nrun:\n"
            b"  container:\n    securityContext:\n      seccompProfile: {"
            + profile
            + b"type: Localhost}\n",
        )
    snapshot = RepoSnapshot(files)
    compiled = compile_repo(snapshot)
    local = "projects/vision/operations/local.yaml"
    found = [e for e in compiled.errors if e.location.file == local]
    assert any("localhostProfile" in e.message and "after merging" in e.message for e in found)
    assert compiled == _compile_before(snapshot, cached=False)


def test_an_operation_whose_own_environment_equals_one_seen_renders_no_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parts Pod Security reads are keyed by content: two operations, each writing the
    same environment in its own file, render one pod between them (the first's)."""
    files = dict(BASE.files)
    for name in ("same-1", "same-2"):
        path = f"projects/vision/operations/{name}.yaml"
        body = (
            f"kind: Operation\nname: {name}\nrun:\n  container:\n    args: [x]\n"
            "  environment:\n    annotations: {team: vision}\n"
        )
        files[path] = RepoFile(path, body.encode())
    rendered: list[str] = []
    real = resolve_module.render_pod

    def noted(*args: Any, **kwargs: Any) -> Any:
        rendered.append(kwargs["operation"])
        return real(*args, **kwargs)

    monkeypatch.setattr(resolve_module, "render_pod", noted)
    compiled = compile_repo(RepoSnapshot(files))
    assert {"vision/same-1", "vision/same-2"} <= {op.id for op in compiled.operations}
    assert [op for op in rendered if op.startswith("vision/same-")] == ["vision/same-1"]
