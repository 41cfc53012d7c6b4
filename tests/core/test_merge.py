"""The merge contract: every strategy on every leaf type, nulls, unset, no aliasing."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.compile.merge import (
    Layer,
    Sections,
    apply_layer,
    apply_patch,
    merge_leaf,
    start,
)
from reconciler.core.types import MergeStrategy, Provenance

REPLACE, ISNULL = MergeStrategy.REPLACE, MergeStrategy.ISNULL
POST_MERGE, PRE_MERGE = MergeStrategy.POST_MERGE, MergeStrategy.PRE_MERGE

CUR_MAP = {"a": "1", "b": {"x": "cur", "y": "cur"}}
NEW_MAP = {"b": {"x": "new", "z": "new"}, "c": "3"}
CUR_LIST = ["a", "b"]
NEW_LIST = ["b", "c"]

# (strategy, cur, new, expected); cur None = unset.
CASES: list[tuple[MergeStrategy, Any, Any, Any]] = [
    # maps
    (REPLACE, CUR_MAP, NEW_MAP, NEW_MAP),
    (ISNULL, CUR_MAP, NEW_MAP, CUR_MAP),
    (POST_MERGE, CUR_MAP, NEW_MAP, {"a": "1", "b": {"x": "new", "y": "cur", "z": "new"}, "c": "3"}),
    (PRE_MERGE, CUR_MAP, NEW_MAP, {"a": "1", "b": {"x": "cur", "y": "cur", "z": "new"}, "c": "3"}),
    # lists
    (REPLACE, CUR_LIST, NEW_LIST, ["b", "c"]),
    (ISNULL, CUR_LIST, NEW_LIST, ["a", "b"]),
    (POST_MERGE, CUR_LIST, NEW_LIST, ["a", "b", "c"]),
    (PRE_MERGE, CUR_LIST, NEW_LIST, ["b", "c", "a"]),
    # lists of maps (tolerations) compare items by value
    (POST_MERGE, [{"k": 1}], [{"k": 1}, {"k": 2}], [{"k": 1}, {"k": 2}]),
    (PRE_MERGE, [{"k": 1}, {"k": 3}], [{"k": 2}, {"k": 1}], [{"k": 2}, {"k": 1}, {"k": 3}]),
    # scalars
    (REPLACE, "cur", "new", "new"),
    (ISNULL, "cur", "new", "cur"),
    (POST_MERGE, "cur", "new", "new"),
    (PRE_MERGE, "cur", "new", "cur"),
    (POST_MERGE, 1, 2, 2),
    (PRE_MERGE, True, False, True),
]


@pytest.mark.parametrize(("strategy", "cur", "new", "expected"), CASES)
def test_leaf_rules(strategy: MergeStrategy, cur: Any, new: Any, expected: Any) -> None:
    assert merge_leaf(strategy, cur, new) == expected


@pytest.mark.parametrize("strategy", [REPLACE, ISNULL, POST_MERGE, PRE_MERGE])
@pytest.mark.parametrize("new", [NEW_MAP, NEW_LIST, "new"])
def test_unset_takes_new(strategy: MergeStrategy, new: Any) -> None:
    assert merge_leaf(strategy, None, new) == new


@pytest.mark.parametrize(
    ("strategy", "cleared"),
    [(REPLACE, True), (POST_MERGE, True), (ISNULL, False), (PRE_MERGE, False)],
)
@pytest.mark.parametrize("cur", [CUR_MAP, CUR_LIST, "cur"])
def test_null_clears_only_under_replace_and_post_merge(
    strategy: MergeStrategy, cleared: bool, cur: Any
) -> None:
    assert merge_leaf(strategy, cur, None) == (None if cleared else cur)


@pytest.mark.parametrize("strategy", [REPLACE, ISNULL, POST_MERGE, PRE_MERGE])
@pytest.mark.parametrize(("cur", "new"), [(CUR_MAP, NEW_MAP), (CUR_LIST, NEW_LIST)])
def test_inputs_never_mutated_or_aliased(strategy: MergeStrategy, cur: Any, new: Any) -> None:
    cur_copy, new_copy = copy.deepcopy(cur), copy.deepcopy(new)
    out = merge_leaf(strategy, cur, new)
    assert cur == cur_copy and new == new_copy

    def ids(value: Any) -> set[int]:
        if isinstance(value, dict):
            return {id(value)} | {i for v in value.values() for i in ids(v)}
        if isinstance(value, list):
            return {id(value)} | {i for v in value for i in ids(v)}
        return set()

    assert not ids(out) & (ids(cur) | ids(new))
    # Mutating the result leaves the inputs alone.
    if isinstance(out, dict):
        out.setdefault("b", {})["x"] = "mutated"
    else:
        out.append("mutated")
    assert cur == cur_copy and new == new_copy


def _loc(line: int) -> Any:
    return lambda path: (line, 1)


def test_typed_sections_recurse_and_untouched_fields_stay() -> None:
    spec, prov = start(
        {"run": {"kind": "job", "container": {"image": "op", "args": ["x"]}}},
        _loc(1),
        "op.yaml",
        "operation",
    )
    patch = {"run": {"container": {"image": "preset", "resources": {"limits": {"cpu": 2}}}}}
    out, out_prov = apply_patch(spec, prov, patch, REPLACE, _loc(5), "p.yaml", "preset p (replace)")
    # replace works per leaf inside typed sections: args and kind survive.
    assert out["run"] == {
        "kind": "job",
        "container": {"image": "preset", "args": ["x"], "resources": {"limits": {"cpu": 2}}},
    }
    assert out_prov[("run", "kind")].step == "operation"
    assert out_prov[("run", "container", "image")] == Provenance(
        "p.yaml", 5, "preset p (replace)", 1
    )
    assert out_prov[("run", "container", "resources", "limits", "cpu")].file == "p.yaml"
    # the input spec is unchanged
    assert spec["run"]["container"]["image"] == "op"


def test_null_in_preset_clears_field_and_its_provenance() -> None:
    spec, prov = start({"run": {"timeout": "1h", "kind": "job"}}, _loc(1), "op.yaml", "operation")
    for strategy, gone in [
        (REPLACE, True),
        (POST_MERGE, True),
        (ISNULL, False),
        (PRE_MERGE, False),
    ]:
        out, out_prov = apply_patch(
            spec, prov, {"run": {"timeout": None}}, strategy, _loc(2), "p.yaml", "p"
        )
        assert ("timeout" not in out["run"]) is gone
        assert (("run", "timeout") not in out_prov) is gone


def test_list_provenance_follows_items() -> None:
    spec, prov = start({"run": {"connections": ["a", "b"]}}, _loc(1), "op.yaml", "operation")
    out, p = apply_patch(
        spec, prov, {"run": {"connections": ["c", "a"]}}, PRE_MERGE, _loc(9), "p.yaml", "pre"
    )
    assert out["run"]["connections"] == ["c", "a", "b"]
    assert [p[("run", "connections", i)].file for i in range(3)] == ["p.yaml", "p.yaml", "op.yaml"]
    out, p = apply_patch(
        spec, prov, {"run": {"connections": ["c", "a"]}}, POST_MERGE, _loc(9), "p.yaml", "post"
    )
    assert out["run"]["connections"] == ["a", "b", "c"]
    assert [p[("run", "connections", i)].file for i in range(3)] == ["op.yaml", "op.yaml", "p.yaml"]


def test_map_provenance_per_key() -> None:
    spec, prov = start(
        {"run": {"environment": {"labels": {"a": "op", "b": "op"}}}},
        _loc(1),
        "op.yaml",
        "operation",
    )
    patch = {"run": {"environment": {"labels": {"b": "preset", "c": "preset"}}}}
    base = ("run", "environment", "labels")
    out, p = apply_patch(spec, prov, patch, POST_MERGE, _loc(3), "p.yaml", "post")
    assert out["run"]["environment"]["labels"] == {"a": "op", "b": "preset", "c": "preset"}
    assert {k: p[(*base, k)].file for k in "abc"} == {"a": "op.yaml", "b": "p.yaml", "c": "p.yaml"}
    out, p = apply_patch(spec, prov, patch, PRE_MERGE, _loc(3), "p.yaml", "pre")
    assert out["run"]["environment"]["labels"] == {"a": "op", "b": "op", "c": "preset"}
    assert {k: p[(*base, k)].file for k in "abc"} == {"a": "op.yaml", "b": "op.yaml", "c": "p.yaml"}


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError):
        apply_patch({}, {}, {"queue": "x"}, "merge", _loc(1), "p.yaml", "p")  # type: ignore[arg-type]


def test_strategies_are_the_documented_values() -> None:
    assert [s.value for s in MergeStrategy] == ["replace", "isnull", "post_merge", "pre_merge"]


# --- lists inside free-form maps are values of their key (issue 13, section 7) ----------


def _pin(product: str) -> dict[str, Any]:
    """``affinity`` that pins a GPU product with a required node selector term."""
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": [product]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _terms(affinity: dict[str, Any]) -> list[Any]:
    terms: list[Any] = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return terms


@pytest.mark.parametrize(
    ("strategy", "kept"),
    [(REPLACE, "a100"), (ISNULL, "h100"), (POST_MERGE, "a100"), (PRE_MERGE, "h100")],
)
def test_a_node_pin_is_one_value_under_every_strategy(strategy: MergeStrategy, kept: str) -> None:
    # Kubernetes ORs node selector terms: a union of two pins pins nothing.
    out = merge_leaf(strategy, _pin("h100"), _pin("a100"))
    assert out == _pin(kept)
    assert len(_terms(out)) == 1


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (REPLACE, ["NET_ADMIN"]),
        (ISNULL, ["SYS_PTRACE"]),
        (POST_MERGE, ["NET_ADMIN"]),
        (PRE_MERGE, ["SYS_PTRACE"]),
    ],
)
def test_a_list_in_a_map_is_replaced_or_kept_not_unioned(
    strategy: MergeStrategy, expected: list[str]
) -> None:
    cur = {"runAsUser": 1000, "capabilities": {"add": ["SYS_PTRACE"], "drop": ["ALL"]}}
    new = {"capabilities": {"add": ["NET_ADMIN"]}, "privileged": False}
    out = merge_leaf(strategy, cur, new)
    assert out["capabilities"]["add"] == expected
    if strategy in (POST_MERGE, PRE_MERGE):  # the maps around the list are still unioned
        assert out["capabilities"]["drop"] == ["ALL"]
        assert out["runAsUser"] == 1000 and out["privileged"] is False


def test_a_list_in_a_map_that_only_one_side_sets_is_taken_whole() -> None:
    cur = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}
    out = merge_leaf(POST_MERGE, cur, _pin("a100"))
    assert out["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1}]
    assert len(_terms(out)) == 1
    out = merge_leaf(PRE_MERGE, _pin("h100"), cur)
    assert _terms(out)[0]["matchExpressions"][0]["values"] == ["h100"]


@pytest.mark.parametrize("strategy", [POST_MERGE, PRE_MERGE])
def test_top_level_list_leaves_keep_the_list_rule(strategy: MergeStrategy) -> None:
    spec, prov = start(
        {"run": {"container": {"args": ["a"]}, "environment": {"tolerations": [{"key": "spot"}]}}},
        _loc(1),
        "op.yaml",
        "operation",
    )
    patch = {"run": {"container": {"args": ["b"]}, "environment": {"tolerations": [{"key": "g"}]}}}
    out, _ = apply_patch(spec, prov, patch, strategy, _loc(2), "p.yaml", "p")
    both = ["a", "b"] if strategy == POST_MERGE else ["b", "a"]
    assert out["run"]["container"]["args"] == both
    assert len(out["run"]["environment"]["tolerations"]) == 2


@pytest.mark.parametrize(("strategy", "winner"), [(POST_MERGE, "p.yaml"), (PRE_MERGE, "op.yaml")])
def test_a_list_in_a_map_has_the_provenance_of_the_layer_it_came_from(
    strategy: MergeStrategy, winner: str
) -> None:
    spec, prov = start(
        {"run": {"environment": {"affinity": _pin("h100")}}}, _loc(1), "op.yaml", "operation"
    )
    patch = {"run": {"environment": {"affinity": _pin("a100")}}}
    out, p = apply_patch(spec, prov, patch, strategy, _loc(7), "p.yaml", "p")
    assert len(_terms(out["run"]["environment"]["affinity"])) == 1
    base = (
        "run",
        "environment",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    under = [k for k in p if k[: len(base)] == base]
    assert under == [(*base, 0)]  # one item, with no stale index left behind
    assert p[(*base, 0)].file == winner


# --- nulls inside free-form maps -----------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (REPLACE, {"B": "new"}),
        (ISNULL, {"A": "cur", "C": "cur"}),
        (POST_MERGE, {"C": "cur", "B": "new"}),
        (PRE_MERGE, {"A": "cur", "C": "cur", "B": "new"}),
    ],
)
def test_null_in_a_map_deletes_the_key_under_post_merge_and_never_stays(
    strategy: MergeStrategy, expected: dict[str, str]
) -> None:
    out = merge_leaf(strategy, {"A": "cur", "C": "cur"}, {"A": None, "B": "new"})
    assert out == expected


@pytest.mark.parametrize("strategy", [REPLACE, ISNULL, POST_MERGE, PRE_MERGE])
def test_a_map_set_on_an_unset_field_has_its_nulls_dropped(strategy: MergeStrategy) -> None:
    assert merge_leaf(strategy, None, {"A": None, "B": {"x": None, "y": "1"}}) == {"B": {"y": "1"}}
    spec, prov = start({"run": {"kind": "job"}}, _loc(1), "op.yaml", "operation")
    patch = {"run": {"container": {"env": {"A": None, "B": "1"}}}}
    out, p = apply_patch(spec, prov, patch, strategy, _loc(3), "p.yaml", "p")
    assert out["run"]["container"]["env"] == {"B": "1"}
    assert ("run", "container", "env", "A") not in p


def test_null_in_a_nested_map_deletes_that_key_and_its_provenance() -> None:
    spec, prov = start(
        {"run": {"container": {"resources": {"limits": {"cpu": 2, "nvidia.com/gpu": 1}}}}},
        _loc(1),
        "op.yaml",
        "operation",
    )
    patch = {"run": {"container": {"resources": {"limits": {"nvidia.com/gpu": None}}}}}
    limits = ("run", "container", "resources", "limits")
    out, p = apply_patch(spec, prov, patch, POST_MERGE, _loc(4), "p.yaml", "p")
    assert out["run"]["container"]["resources"]["limits"] == {"cpu": 2}
    assert (*limits, "nvidia.com/gpu") not in p and p[(*limits, "cpu")].file == "op.yaml"
    out, p = apply_patch(spec, prov, patch, PRE_MERGE, _loc(4), "p.yaml", "p")
    assert out["run"]["container"]["resources"]["limits"] == {"cpu": 2, "nvidia.com/gpu": 1}


# --- a layer applied to many specs (``Layer``: what it sets on unset paths, computed once) ---

_LEAF = st.one_of(
    st.none(),
    st.sampled_from(["a", "b"]),
    st.integers(0, 2),
    st.lists(st.sampled_from(["x", "y", "z"]), max_size=3),
    st.lists(st.fixed_dictionaries({"k": st.sampled_from(["1", "2"])}), max_size=2),
    st.dictionaries(
        st.sampled_from(["k", "m", "n"]),
        st.one_of(
            st.none(),
            st.sampled_from(["v", "w"]),
            st.lists(st.sampled_from(["x", "y"]), max_size=2),
            st.dictionaries(st.sampled_from(["p", "q"]), st.sampled_from(["1", "2"]), max_size=2),
        ),
        max_size=3,
    ),
)


def _section(**fields: Any) -> Any:
    return st.one_of(st.none(), st.just("s"), st.fixed_dictionaries({}, optional=fields))


_SPEC = st.fixed_dictionaries(
    {},
    optional={
        "queue": _LEAF,
        "run": _section(
            kind=_LEAF,
            timeout=_LEAF,
            connections=_LEAF,
            container=_section(
                image=_LEAF,
                command=_LEAF,
                env=_LEAF,
                resources=_section(limits=_LEAF, requests=_LEAF),
            ),
            environment=_section(nodeSelector=_LEAF, labels=_LEAF, tolerations=_LEAF),
        ),
    },
)


def _ordered(value: Any) -> Any:
    """``value`` with every map as its list of items: equal only in the same key order
    (tagged, so that a map is never equal to a list: ``{}`` is not ``[]``)."""
    if isinstance(value, dict):
        return ("map", [(k, _ordered(v)) for k, v in value.items()])
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def _layer_locate(path: tuple[Any, ...]) -> tuple[int, int]:
    return 10 + len(path), 1 + sum(len(str(p)) for p in path)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_SPEC, min_size=1, max_size=4),
    st.lists(st.tuples(_SPEC, st.sampled_from(list(MergeStrategy))), min_size=1, max_size=3),
)
def test_a_layer_patches_every_spec_as_its_patch_would(
    specs: list[dict[str, Any]], patches: list[tuple[dict[str, Any], MergeStrategy]]
) -> None:
    """The same layers applied in turn to several specs (their once-computed parts reused
    from one spec to the next) give each spec exactly what ``apply_patch`` gives: the same
    values in the same key order, the same provenance."""
    sections = Sections()  # what one layer built, the next knows (a chain of presets)
    share = _canonical()
    layers = [
        Layer(
            patch,
            strategy,
            _layer_locate,
            f"p{i}.yaml",
            f"preset p{i} ({strategy})",
            share_value=share,
            sections=sections,
        )
        for i, (patch, strategy) in enumerate(patches)
    ]
    patches_before = copy.deepcopy(patches)
    for data in specs:
        spec, prov = start(data, _loc(1), "op.yaml", "operation")
        want_spec, want_prov = spec, prov
        got_spec, got_prov = spec, prov
        for i, ((patch, strategy), layer) in enumerate(zip(patches, layers, strict=True)):
            want_spec, want_prov = apply_patch(
                want_spec, want_prov, patch, strategy, _layer_locate, f"p{i}.yaml", layer.step
            )
            got_spec, got_prov = apply_layer(got_spec, got_prov, layer)
            assert _ordered(got_spec) == _ordered(want_spec)
            assert got_prov == want_prov
    assert patches == patches_before  # the layers' patches are never changed


def _canonical() -> Any:
    """A stand-in for ``RepoIndex.shared_value``: the first value seen of each content."""
    table: dict[str, Any] = {}

    def share(value: Any) -> Any:
        if isinstance(value, dict | list):
            return table.setdefault(repr(_ordered(value)), value)
        return value

    return share


@pytest.mark.parametrize("strategy", list(MergeStrategy))
def test_equal_sections_from_two_chains_keep_their_own_provenance(
    strategy: MergeStrategy,
) -> None:
    """Two presets in two files set the same section; a third patches it. Each spec's
    leaves name the file they came from, though the sections are equal."""
    sections, share = Sections(), _canonical()
    same = {"run": {"environment": {"labels": {"team": "a"}, "nodeSelector": {"z": "1"}}}}
    first = Layer(same, ISNULL, _loc(3), "a.yaml", "preset a", share_value=share, sections=sections)
    second = Layer(
        same, ISNULL, _loc(5), "b.yaml", "preset b", share_value=share, sections=sections
    )
    patch = {"run": {"environment": {"labels": {"x": "y"}, "nodeSelector": None}}}
    third = Layer(
        patch, strategy, _loc(9), "c.yaml", "preset c", share_value=share, sections=sections
    )
    labels = ("run", "environment", "labels")
    for layer, file in ((first, "a.yaml"), (second, "b.yaml"), (first, "a.yaml")):
        spec, prov = start({"run": {"kind": "job"}}, _loc(1), "op.yaml", "operation")
        want = apply_patch(
            spec, prov, same, ISNULL, _loc(3 if file == "a.yaml" else 5), file, layer.step
        )
        want = apply_patch(*want, patch, strategy, _loc(9), "c.yaml", "preset c")
        got = apply_layer(*apply_layer(spec, prov, layer), third)
        assert _ordered(got[0]) == _ordered(want[0])
        assert got[1] == want[1]
        if strategy != REPLACE:
            assert got[1][(*labels, "team")].file == file


def test_what_a_layer_sets_on_unset_paths_is_one_object_in_every_spec() -> None:
    patch = {"run": {"environment": {"labels": {"team": "a", "gone": None}}, "timeout": "1h"}}
    shared: list[Any] = []
    layer = Layer(
        patch, POST_MERGE, _loc(7), "p.yaml", "preset p", share_value=shared_value(shared)
    )
    outs = []
    for image in ("one", "two"):
        spec, prov = start(
            {"run": {"container": {"image": image}}}, _loc(1), "op.yaml", "operation"
        )
        outs.append(apply_layer(spec, prov, layer))
    (a, pa), (b, pb) = outs
    labels = ("run", "environment", "labels")
    assert a["run"]["environment"]["labels"] == {"team": "a"}  # the null dropped
    assert a["run"]["environment"]["labels"] is b["run"]["environment"]["labels"]
    assert a["run"]["environment"]["labels"] is not patch["run"]["environment"]["labels"]
    assert pa[(*labels, "team")] is pb[(*labels, "team")]
    assert pa[(*labels, "team")] == Provenance("p.yaml", 7, "preset p", 1)
    assert shared == [{"team": "a"}, "1h"]  # each computed (and made shared) once
    assert a["run"]["container"]["image"] == "one" and b["run"]["container"]["image"] == "two"


def shared_value(seen: list[Any]) -> Any:
    def share(value: Any) -> Any:
        seen.append(value)
        return value

    return share


def test_a_layer_refuses_an_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown patch strategy"):
        Layer({}, "merge", _loc(1), "p.yaml", "p")  # type: ignore[arg-type]
