"""Random YAML never produces a traceback: only located errors."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.load import parse_yaml
from reconciler.core.types import RepoFile, RepoSnapshot

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
KINDS = ["Org", "Cluster", "Connection", "Queue", "Preset", "Project", "Operation"]
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
def test_random_structured_repos(files: dict[str, object]) -> None:
    snapshot = RepoSnapshot(
        {p: RepoFile(p, yaml.safe_dump(doc).encode()) for p, doc in files.items()}
    )
    _check(snapshot)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_random_bytes(content: bytes) -> None:
    doc, errors = parse_yaml("f.yaml", content)
    assert (doc is None) == bool(errors)
    _check(RepoSnapshot({p: RepoFile(p, content) for p in PATHS}))
