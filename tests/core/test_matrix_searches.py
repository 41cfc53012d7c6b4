"""Searches beyond the grid: a ``mapping`` matrix (one child per map of ``values``) and a
``random`` matrix (``numRuns`` children drawn with ``seed``), as Polyaxon writes them."""

from __future__ import annotations

import hashlib
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support.snapshots import repo

from reconciler.core.compile import compile_repo
from reconciler.core.compile.model import Distribution
from reconciler.core.compile.workflows import MAX_WORKFLOW_CHILDREN, draw, uniforms

BASE = {
    "reconciler.yaml": "kind: Org\ndefaults:\n  queue: q\n",
    "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
    "queues/q.yaml": "kind: Queue\ncluster: local\n",
    "projects/p/project.yaml": "kind: Project\n",
}
RUN = 'run:\n  kind: job\n  container:\n    image: img:1\n    args: ["{{ params.lr }}"]\n'


def _children(matrix: str) -> list[tuple[str, dict[str, object], tuple[str, ...]]]:
    files = {**BASE, "projects/p/operations/w.yaml": f"kind: Operation\n{matrix}{RUN}"}
    compiled = compile_repo(repo(files))
    assert not compiled.errors, [str(e) for e in compiled.errors]
    return [
        (op.id, dict(op.params), tuple(op.spec["run"]["container"]["args"]))
        for op in compiled.operations
        if op.workflow is not None
    ]


def _errors(matrix: str) -> list[str]:
    files = {**BASE, "projects/p/operations/w.yaml": f"kind: Operation\n{matrix}{RUN}"}
    compiled = compile_repo(repo(files))
    assert not compiled.operations
    return [str(e) for e in compiled.errors]


def test_a_mapping_matrix_has_one_child_per_map_in_order() -> None:
    children = _children(
        "matrix:\n  kind: mapping\n  values:\n    - {lr: 0.1, bs: 32}\n    - {lr: 0.01}\n"
    )
    assert children == [
        ("p/w-0", {"lr": 0.1, "bs": 32}, ("0.1",)),
        ("p/w-1", {"lr": 0.01}, ("0.01",)),
    ]


RANDOM = (
    "matrix:\n  kind: random\n  numRuns: 3\n  seed: 42\n  params:\n"
    "    lr: {kind: loguniform, value: [-7, -2]}\n"
    "    bs: {kind: choice, value: [16, 32, 64]}\n"
    "    m: {kind: normal, value: [0.9, 0.05]}\n"
    "    d: {kind: range, value: [0, 1, 0.1]}\n"
    "    n: {kind: range, value: [10, 0, -3]}\n"
    "    w: {kind: uniform, value: [0, 1]}\n"
)


def test_a_random_matrix_draws_the_same_children_on_every_machine() -> None:
    # Pinned: the draws are defined by SHA-256 of "{seed}/{index}/{name}/{k}", so these
    # values hold on any machine and Python build.
    children = _children(RANDOM)
    assert [c[1] for c in children] == [
        {"lr": 0.00852996491, "bs": 16, "m": 0.8251063582, "d": 0.1, "n": 10, "w": 0.4590823841},
        {"lr": 0.1329840922, "bs": 64, "m": 0.9543023845, "d": 0.2, "n": 1, "w": 0.1318357825},
        {"lr": 0.08019093031, "bs": 16, "m": 0.9281806498, "d": 0.5, "n": 7, "w": 0.3520347235},
    ]
    # The derivation, written out for child 0's uniform w on [0, 1):
    digest = hashlib.sha256(b"42/0/w/0").digest()
    assert children[0][1]["w"] == float(f"{(int.from_bytes(digest[:8], 'big') >> 11) / 2**53:.10g}")
    assert [c[0] for c in children] == ["p/w-0", "p/w-1", "p/w-2"]
    assert children[0][2] == (str(children[0][1]["lr"]),)


def test_reordering_or_adding_a_parameter_leaves_the_others_draws_alone() -> None:
    lines = RANDOM.splitlines(keepends=True)
    head, params = lines[:5], lines[5:]
    reordered = "".join(head + params[::-1])
    added = "".join([*head, "    extra: {kind: uniform, value: [5, 6]}\n", *params])
    base = [c[1] for c in _children(RANDOM)]
    assert [c[1] for c in _children(reordered)] == base
    assert [{k: v for k, v in c[1].items() if k != "extra"} for c in _children(added)] == base


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    index=st.integers(0, MAX_WORKFLOW_CHILDREN - 1),
    name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
    low=st.floats(-50, 50),
    width=st.floats(0.001, 50),
)
def test_draws_are_a_function_of_seed_index_and_name_within_bounds(
    seed: int, index: int, name: str, low: float, width: float
) -> None:
    high = low + width
    u = next(uniforms(seed, index, name))
    assert 0 <= u < 1 and u == next(uniforms(seed, index, name))
    for dist in (
        {"kind": "uniform", "value": [low, high]},
        {"kind": "loguniform", "value": [low, high]},
        {"kind": "normal", "value": [low, width]},
        {"kind": "choice", "value": ["a", 1, True]},
        {"kind": "range", "value": [low, high, width / 7]},
    ):
        first = draw(dist, seed, index, name)
        assert first == draw(dist, seed, index, name)
        if dist["kind"] == "uniform":
            assert low - 1e-9 * abs(low) - 1e-12 <= first <= high + 1e-9 * abs(high)
        elif dist["kind"] == "loguniform":
            assert math.exp(low) * (1 - 1e-9) <= first <= math.exp(high) * (1 + 1e-9)
        elif dist["kind"] == "choice":
            assert first in ("a", 1, True)
        elif dist["kind"] == "range":
            assert low - 1e-6 <= first < high + 1e-6


_EDGES = (1.7976931348623157e308, 1e308, 1e300, 1.0, 1e-300, 5e-324, 0.0)
_FINITE = (
    st.sampled_from([*_EDGES, *(-x for x in _EDGES)])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(10**99), 10**99)
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["range", "uniform", "loguniform", "normal"]),
    value=st.lists(_FINITE, min_size=2, max_size=3),
    index=st.integers(0, MAX_WORKFLOW_CHILDREN - 1),
)
def test_a_distribution_that_validates_draws_finite_numbers(
    kind: str, value: list[float], index: int
) -> None:
    """Any numbers at all: a distribution is refused at validation, or every draw is a
    finite number (never infinity, never an OverflowError in the compiler)."""
    try:
        dist = Distribution.model_validate({"kind": kind, "value": value})
    except ValidationError:
        return
    drawn = draw(dist.model_dump(), 7, index, "lr")
    assert math.isfinite(drawn), (kind, value, drawn)


def test_the_child_cap_holds_for_every_kind() -> None:
    values = "".join(f"    - {{lr: {i}}}\n" for i in range(MAX_WORKFLOW_CHILDREN + 1))
    (mapping,) = _errors(f"matrix:\n  kind: mapping\n  values:\n{values}")
    assert mapping.endswith(": the matrix expands to 1001 operations; the limit is 1000")
    (drawn,) = _errors(
        "matrix:\n  kind: random\n  numRuns: 1001\n  seed: 1\n  params:\n"
        "    lr: {kind: uniform, value: [0, 1]}\n"
    )
    assert drawn == (
        "projects/p/operations/w.yaml:4:12: the matrix expands to 1001 operations; "
        "the limit is 1000"
    )


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    runs=st.integers(1, 12),
    order=st.permutations(["lr", "bs", "m"]),
)
def test_a_random_matrix_is_a_function_of_its_file(seed: int, runs: int, order: list[str]) -> None:
    """The same seed gives the same children, whatever order the file writes its params in
    and however often it is compiled (each compile starts from nothing)."""
    dists = {
        "lr": "{kind: loguniform, value: [-7, -2]}",
        "bs": "{kind: choice, value: [16, 32, 64]}",
        "m": "{kind: normal, value: [0.9, 0.05]}",
    }

    def matrix(names: list[str]) -> str:
        params = "".join(f"    {n}: {dists[n]}\n" for n in names)
        return f"matrix:\n  kind: random\n  numRuns: {runs}\n  seed: {seed}\n  params:\n{params}"

    written = _children(matrix(["lr", "bs", "m"]))
    assert [c[0] for c in written] == [f"p/w-{i}" for i in range(runs)]
    assert _children(matrix(order)) == written
    assert [c[1]["lr"] for c in written] == [
        draw({"kind": "loguniform", "value": [-7, -2]}, seed, i, "lr") for i in range(runs)
    ]


def _rejected(matrix: str) -> str:
    run = (
        "run:\n  kind: job\n  container:\n    image: img:1\n  environment:\n    annotations:\n"
        '      container.apparmor.security.beta.kubernetes.io/main: "{{ params.a }}"\n'
    )
    files = {**BASE, "projects/p/operations/w.yaml": f"kind: Operation\n{matrix}{run}"}
    compiled = compile_repo(repo(files))
    assert not compiled.errors and not compiled.operations, compiled.errors
    (rejected,) = compiled.rejected
    return rejected.message


def test_policy_holds_after_substitution_for_every_kind() -> None:
    mapping = _rejected(
        "matrix:\n  kind: mapping\n  values:\n    - {a: runtime/default}\n    - {a: unconfined}\n"
    )
    assert mapping.startswith("w-1: run.environment.annotations"), mapping
    assert "w-0" not in mapping
    drawn = _rejected(
        "matrix:\n  kind: random\n  numRuns: 2\n  seed: 3\n  params:\n"
        "    a: {kind: choice, value: [unconfined]}\n"
    )
    assert drawn.startswith("w-0: run.environment.annotations"), drawn
