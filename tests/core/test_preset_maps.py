"""Presets on free-form maps through the whole compiler (issue 13, section 7): a list inside
a map is the value of its key, and a ``null`` value deletes a key (docs/presets.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import render_operation
from reconciler.core.types import CompiledOperation

BASE = {
    "reconciler.yaml": "kind: Org\npolicy:\n"
    "  allowedCapabilities: [NET_BIND_SERVICE, SYS_PTRACE]\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "projects/p/project.yaml": "kind: Project\ndefaults:\n  queue: q\n",
}
OP = """kind: Operation
presets: [x]
run:
  kind: job
  container:
    image: img
    env: {LR: "0.1", DEBUG: "1"}
    resources:
      limits: {cpu: 2, nvidia.com/gpu: 1}
    securityContext:
      readOnlyRootFilesystem: true
      capabilities: {add: [SYS_PTRACE], drop: [ALL]}
  environment:
    nodeSelector: {zone: a, pool: gpu}
    labels: {team: p}
"""


def _compile(preset: str, op: str = OP) -> CompiledOperation:
    compiled = compile_repo(
        repo({**BASE, "presets/x.yaml": preset, "projects/p/operations/o.yaml": op})
    )
    assert compiled.valid, compiled.errors
    (result,) = compiled.operations
    return result


def _container(op: CompiledOperation) -> Any:
    (job, *_) = render_operation(
        op, {}, config_version="c", dispatched_at=datetime(2026, 1, 1, tzinfo=UTC)
    ).manifests
    return job["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("strategy", "env", "gpu", "zone"),
    [
        ("post_merge", {"LR": "0.1", "X": "1"}, None, None),
        ("pre_merge", {"LR": "0.1", "DEBUG": "1", "X": "1"}, 1, "a"),
        ("replace", {"X": "1"}, None, None),
        ("isnull", {"LR": "0.1", "DEBUG": "1"}, 1, "a"),
    ],
)
def test_a_null_in_a_preset_map_deletes_the_key_under_post_merge(
    strategy: str, env: dict[str, str], gpu: int | None, zone: str | None
) -> None:
    preset = f"""kind: Preset
patchStrategy: {strategy}
run:
  container:
    env: {{DEBUG: null, X: "1"}}
    resources:
      limits: {{nvidia.com/gpu: null}}
  environment:
    nodeSelector: {{zone: null}}
"""
    op = _compile(preset)
    container = op.spec["run"]["container"]
    assert container["env"] == env
    assert container["resources"]["limits"].get("nvidia.com/gpu") == gpu
    assert op.spec["run"]["environment"]["nodeSelector"].get("zone") == zone
    # A deleted key has no provenance and never reaches the Job.
    assert ("run.container.env.DEBUG" in op.provenance) is ("DEBUG" in env)
    rendered = {e["name"]: e.get("value") for e in _container(op)["env"]}
    assert None not in rendered.values()
    assert ("DEBUG" in rendered) is ("DEBUG" in env)
    assert ("nvidia.com/gpu" in op.requests) is (gpu is not None)


def test_a_null_in_an_operation_map_means_unset() -> None:
    op_file = OP.replace('env: {LR: "0.1", DEBUG: "1"}', 'env: {LR: "0.1", DEBUG: null}')
    op = _compile("kind: Preset\n", op_file)
    assert op.spec["run"]["container"]["env"] == {"LR": "0.1"}


@pytest.mark.parametrize(
    ("strategy", "add", "run_as_user"),
    [
        ("post_merge", ["NET_BIND_SERVICE"], 1000),
        ("pre_merge", ["SYS_PTRACE"], 1000),
        ("replace", ["NET_BIND_SERVICE"], 1000),
        ("isnull", ["SYS_PTRACE"], None),
    ],
)
def test_capabilities_add_is_one_layers_list(
    strategy: str, add: list[str], run_as_user: int | None
) -> None:
    preset = f"""kind: Preset
patchStrategy: {strategy}
run:
  container:
    securityContext:
      runAsUser: 1000
      capabilities: {{add: [NET_BIND_SERVICE]}}
"""
    op = _compile(preset)
    context = _container(op)["securityContext"]
    assert context["capabilities"]["add"] == add
    assert context.get("runAsUser") == run_as_user
    if strategy in ("post_merge", "pre_merge"):  # the rest of the map is still unioned
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["readOnlyRootFilesystem"] is True
    source = op.provenance["run.container.securityContext.capabilities.add[0]"].file
    from_preset = add == ["NET_BIND_SERVICE"]
    assert source == ("presets/x.yaml" if from_preset else "projects/p/operations/o.yaml")
    assert "run.container.securityContext.capabilities.add[1]" not in op.provenance


def test_tolerations_and_connections_are_still_added_by_post_merge() -> None:
    files = {
        **BASE,
        "connections/a.yaml": "kind: Connection\nsecret: {name: a, envFrom: true}\n",
        "connections/b.yaml": "kind: Connection\nsecret: {name: b, envFrom: true}\n",
        "presets/x.yaml": "kind: Preset\nconnections: [b]\nrun:\n  environment:\n"
        "    tolerations: [{key: gpu, operator: Exists}]\n",
        "projects/p/operations/o.yaml": OP
        + "    tolerations: [{key: spot, operator: Exists}]\n  connections: [a]\n",
    }
    compiled = compile_repo(repo(files))
    assert compiled.valid, compiled.errors
    (op,) = compiled.operations
    assert [t["key"] for t in op.spec["run"]["environment"]["tolerations"]] == ["spot", "gpu"]
    assert op.spec["run"]["connections"] == ["a", "b"]


# --- every map where docs/presets.md allows a null, in every layer (issue 13, section 7) ----

ROOT_OP = """kind: Operation
presets: [x]
run:
  kind: job
  container:
    image: img
    env: {A: "1", B: "2"}
    resources:
      requests: {cpu: 1, memory: 1Gi}
      limits: {cpu: 2, memory: 2Gi}
    securityContext: {readOnlyRootFilesystem: true, runAsUser: 1000}
  environment:
    nodeSelector: {zone: a, pool: gpu}
    labels: {team: p, tier: x}
    annotations: {a: b, c: d}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions: [{key: k, operator: Exists}]
      podAntiAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 1
            podAffinityTerm: {topologyKey: zone}
"""
NODE_AFFINITY = """      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions: [{key: k, operator: Exists}]
"""


@dataclass(frozen=True)
class NullPlace:
    path: tuple[str, ...]  # the map in the compiled spec
    key: str  # the key set to null
    other: str  # another key of the same map
    written: str  # in ROOT_OP, the text that sets ``key``
    nulled: str  # the same with ``key: null``


# what docs/presets.md names -> where that is in ROOT_OP
NULL_PLACES = {
    "`run.container.env`": NullPlace(("run", "container", "env"), "B", "A", 'B: "2"', "B: null"),
    "`run.container.resources.requests`": NullPlace(
        ("run", "container", "resources", "requests"),
        "memory",
        "cpu",
        "{cpu: 1, memory: 1Gi}",
        "{cpu: 1, memory: null}",
    ),
    "`.limits`": NullPlace(
        ("run", "container", "resources", "limits"),
        "memory",
        "cpu",
        "{cpu: 2, memory: 2Gi}",
        "{cpu: 2, memory: null}",
    ),
    "`run.environment.nodeSelector`": NullPlace(
        ("run", "environment", "nodeSelector"), "pool", "zone", "pool: gpu}", "pool: null}"
    ),
    "`labels`": NullPlace(
        ("run", "environment", "labels"), "tier", "team", "tier: x}", "tier: null}"
    ),
    "`annotations`": NullPlace(
        ("run", "environment", "annotations"), "c", "a", "c: d}", "c: null}"
    ),
    "`securityContext`": NullPlace(
        ("run", "container", "securityContext"),
        "runAsUser",
        "readOnlyRootFilesystem",
        "runAsUser: 1000}",
        "runAsUser: null}",
    ),
    "`affinity`": NullPlace(
        ("run", "environment", "affinity"),
        "nodeAffinity",
        "podAntiAffinity",
        NODE_AFFINITY,
        "      nodeAffinity: null\n",
    ),
}


def _null_at(path: tuple[str, ...], key: str, indent: int = 0) -> str:
    """YAML that sets ``key: null`` in the map at ``path`` (``run`` first)."""
    lines = [f"{'  ' * i}{part}:" for i, part in enumerate(path)]
    lines.append(f"{'  ' * len(path)}{key}: null")
    return "".join(" " * indent + line + "\n" for line in lines)


def _no_null_in_maps(value: object) -> bool:
    if isinstance(value, dict):
        return all(v is not None and _no_null_in_maps(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_null_in_maps(v) for v in value)
    return True


def test_the_docs_name_every_place_a_null_may_delete_a_key() -> None:
    from support.paths import ROOT

    doc = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    paragraph = doc.split("Where `null` is allowed in a map:", 1)[1].split("\n\n", 1)[0]
    assert all(place in paragraph for place in NULL_PLACES), paragraph


# layer -> (the nulled key is kept, the map's other key is kept)
NULL_RULES = {
    "post_merge": (False, True),  # deleted
    "pre_merge": (True, True),  # ignored
    "isnull": (True, True),  # the operation's map is set: kept whole
    "replace": (False, False),  # the preset's map whole, its null dropped
    "operation": (False, True),  # unset
    "dag-child": (False, False),  # the child's map replaces the parent's, its null dropped
}


@pytest.mark.parametrize("place", sorted(NULL_PLACES), ids=lambda p: p.strip("`."))
@pytest.mark.parametrize("layer", sorted(NULL_RULES))
def test_a_null_in_each_documented_map_does_what_presets_md_says(place: str, layer: str) -> None:
    """docs/presets.md, *Nulls*, in presets (each strategy), operations and DAG children:
    never an error, never a ``null`` left in the compiled spec, and no provenance for a
    deleted key."""
    where = NULL_PLACES[place]
    op_file, preset = ROOT_OP, "kind: Preset\n"
    if layer == "operation":
        assert where.written in ROOT_OP
        op_file = ROOT_OP.replace(where.written, where.nulled, 1)
    elif layer == "dag-child":
        op_file += "dag:\n  operations:\n    - name: c\n" + _null_at(where.path, where.key, 6)
    else:
        preset += f"patchStrategy: {layer}\n" + _null_at(where.path, where.key)
    compiled = compile_repo(
        repo({**BASE, "presets/x.yaml": preset, "projects/p/operations/o.yaml": op_file})
    )
    assert compiled.valid and not compiled.rejected, (compiled.errors, compiled.rejected)
    (op,) = compiled.operations
    value: Any = op.spec
    for part in where.path:
        value = value.get(part) or {}
    kept, other_kept = NULL_RULES[layer]
    assert (where.key in value) is kept, value
    assert (where.other in value) is other_kept, value
    assert _no_null_in_maps(op.spec), op.spec
    dotted = ".".join([*where.path, where.key])
    assert (
        any(p == dotted or p.startswith((f"{dotted}.", f"{dotted}[")) for p in op.provenance)
        is kept
    )
