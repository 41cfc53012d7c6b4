"""Issue 13 section 3: every expanded workflow child is validated as if written by hand.

A DAG child's ``run`` (merged with ``replace``) or a matrix / DAG parameter can clear or
empty a field every operation needs. Each such child is a config error at the line that did
it (the ``null``, or the parameter's value), never an internal error and never a child
planned with ``image=None`` or ``image=''``.
"""

from __future__ import annotations

import pytest
from support.snapshots import repo

from reconciler.core.compile import compile_operation, compile_repo

BASE = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "projects/p/project.yaml": "kind: Project\n",
}
HEAD = "kind: Operation\nrun:\n  kind: job\n  container:\n    image: img:1\n"  # lines 1-5


def _errors(op: str) -> list[str]:
    files = {**BASE, "projects/p/operations/w.yaml": op}
    compiled = compile_repo(repo(files))  # raises InternalError on a bug
    one = compile_operation(repo(files), "p/w")
    assert [str(e) for e in one.errors] == [str(e) for e in compiled.errors]
    assert compiled.operations == () and one.operations == ()
    return [str(e) for e in compiled.errors]


@pytest.mark.parametrize(
    ("override", "expect"),
    [
        (
            "      run:\n        kind: null\n",
            "w.yaml:10:15: dag operation 'b': run.kind: null clears a field every operation needs",
        ),
        (
            "      run: {kind: null}\n",
            "w.yaml:9:19: dag operation 'b': run.kind: null clears a field every operation needs",
        ),
        (
            "      run:\n        container:\n          image: null\n",
            "w.yaml:11:18: dag operation 'b': run.container.image: null clears a field every "
            "operation needs",
        ),
        (
            "      run:\n        container: null\n",
            "w.yaml:10:20: dag operation 'b': run.container: null clears run.container.image, "
            "a field every operation needs",
        ),
    ],
    ids=["kind-null", "kind-null-flow", "image-null", "container-null"],
)
def test_a_dag_child_that_clears_a_required_field_is_an_error_at_its_null(
    override: str, expect: str
) -> None:
    op = HEAD + "dag:\n  operations:\n    - name: b\n" + override  # "- name: b": line 8
    errors = _errors(op)
    assert any(e.startswith("projects/p/operations/") and e.endswith(expect) for e in errors), (
        errors
    )


def test_a_matrix_parameter_that_empties_the_image_is_an_error_at_its_value() -> None:
    op = (
        "kind: Operation\nrun:\n  kind: job\n  container:\n    image: '{{ params.img }}'\n"
        "matrix:\n  params:\n    img: [ok:1, '']\n"
    )
    assert _errors(op) == [
        "projects/p/operations/w.yaml:8:17: matrix child w-1 (img=''): "
        "run.container.image: String should have at least 1 character"
    ]


def test_a_dag_parameter_that_empties_the_image_is_an_error_at_its_value() -> None:
    op = (
        "kind: Operation\nrun:\n  kind: job\n  container:\n    image: '{{ params.img }}'\n"
        "dag:\n  operations:\n    - name: a\n      params: {img: ok}\n"
        "    - name: b\n      params:\n        img: ''\n"
    )
    assert _errors(op) == [
        "projects/p/operations/w.yaml:12:14: dag operation 'b': "
        "run.container.image: String should have at least 1 character"
    ]


def test_children_that_keep_their_fields_still_compile() -> None:
    op = HEAD + (
        "dag:\n  operations:\n    - name: a\n"
        "    - name: b\n      dependencies: [a]\n      run:\n        container:\n"
        "          image: other:2\n"
    )
    compiled = compile_repo(repo({**BASE, "projects/p/operations/w.yaml": op}))
    assert compiled.errors == ()
    images = {o.name: o.spec["run"]["container"]["image"] for o in compiled.operations}
    assert images == {"w-a": "img:1", "w-b": "other:2"}


# --- property: no expanded child ever escapes validation ------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_TEXT = st.sampled_from(["", " ", "img:2", " img:3", "img:4 ", "job", "{{ params.v }}", "x"])
_OVERRIDE = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from([None, "job", "batch"]),
        "container": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {}, optional={"image": st.one_of(st.none(), _TEXT), "command": st.none()}
            ),
        ),
        "timeout": st.sampled_from([None, 60, "1h"]),
    },
)


def _yaml(value: object) -> str:
    import json

    return json.dumps(value)  # JSON is YAML 1.2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(st.none(), _OVERRIDE), min_size=1, max_size=3),
    st.lists(_TEXT, min_size=1, max_size=3),
    st.booleans(),
)
def test_expanded_children_are_complete_or_located_errors(
    overrides: list[dict[str, object] | None], values: list[str], matrix: bool
) -> None:
    run = {"kind": "job", "container": {"image": "img:{{ params.v }}"}}
    if matrix:
        doc = {"kind": "Operation", "run": run, "matrix": {"params": {"v": values}}}
    else:
        ops: list[dict[str, object]] = []
        for i, override in enumerate(overrides):
            child: dict[str, object] = {"name": f"c{i}", "params": {"v": values[i % len(values)]}}
            if override is not None:
                child["run"] = override
            ops.append(child)
        doc = {"kind": "Operation", "run": run, "dag": {"operations": ops}}
    compiled = compile_repo(repo({**BASE, "projects/p/operations/w.yaml": _yaml(doc)}))
    for error in compiled.errors:
        assert error.location.file and error.location.line >= 1, error
    for op in compiled.operations:
        image = op.spec["run"]["container"]["image"]
        assert image and image == image.strip(), op
        assert op.spec["run"]["kind"] in ("job", "batch")
