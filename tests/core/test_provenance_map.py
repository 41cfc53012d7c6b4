"""A compiled operation's provenance is a compact ``ProvenanceMap``: it reads as the ordered
mapping it replaces, and operations compiled the same way share its keys and values."""

from __future__ import annotations

import pytest
from support.snapshots import overlay

from reconciler.core.compile import compile_repo
from reconciler.core.types import Provenance, ProvenanceKeys, ProvenanceMap, RepoSnapshot


def _op(i: int) -> str:
    return (
        f"kind: Operation\nname: gen-{i}\npresets: [a100, data]\nrun:\n  container:\n"
        f"    command: [python, train.py]\n    args: [--seed, '{i}']\n"
    )


def test_reads_as_an_ordered_mapping_and_equals_a_dict() -> None:
    a, b = Provenance("x.yaml", 1, "operation", 3), Provenance("p.yaml", 4, "preset p", 1)
    prov = ProvenanceMap(ProvenanceKeys.of(("run.kind", "run.image")), (a, b))
    assert list(prov) == ["run.kind", "run.image"]
    assert prov["run.image"] is b and "run.kind" in prov and "run.x" not in prov
    assert prov.get("run.x") is None and len(prov) == 2
    assert prov == {"run.image": b, "run.kind": a}  # as a dict compares: order aside
    assert prov != {"run.kind": a}
    with pytest.raises(KeyError):
        prov["run.x"]
    with pytest.raises(ValueError):
        ProvenanceMap(ProvenanceKeys.of(("run.kind",)), (a, b))


def test_operations_of_the_same_layering_share_keys_and_preset_values(
    template: RepoSnapshot,
) -> None:
    snap = overlay(template, {f"projects/vision/operations/gen-{i}.yaml": _op(i) for i in range(3)})
    compiled = compile_repo(snap)
    assert compiled.valid, compiled.errors
    ops = {op.name: op for op in compiled.operations}
    first, second = ops["gen-0"].provenance, ops["gen-1"].provenance
    assert isinstance(first, ProvenanceMap) and isinstance(second, ProvenanceMap)
    assert first._keys is second._keys  # one key layout for the whole layering
    image = "run.container.image"
    assert first[image] is second[image]  # set by the same preset line: one object
    assert first["run.container.args[1]"].file.endswith("gen-0.yaml")
    assert second["run.container.args[1]"].file.endswith("gen-1.yaml")
    other = ops["dedupe"].provenance  # another layering: its own keys
    assert isinstance(other, ProvenanceMap) and other._keys is not first._keys


def test_the_operations_own_leaves_are_packed_and_read_back_as_written() -> None:
    own = "projects/p/operations/x.yaml"
    mine, other = Provenance(own, 7, "operation", 5), Provenance(own, 9, "operation", 3)
    preset = Provenance("projects/p/presets/a.yaml", 2, "preset a (replace)", 1)
    shared: list[Provenance] = []
    keys = ProvenanceKeys.of(("run.image", "run.kind", "name"))
    prov = ProvenanceMap.of(keys, [preset, mine, other], own, lambda p: shared.append(p) or p)
    assert shared == [preset]  # only the preset's value goes through the shared table
    assert isinstance(prov._values[1], int) and isinstance(prov._values[2], int)
    assert prov["run.kind"] == mine and prov["name"] == other and prov["run.image"] is preset
    assert prov == {"run.image": preset, "run.kind": mine, "name": other}
    unpacked = ProvenanceMap(keys, (preset, mine, other))
    assert prov == unpacked and unpacked == prov  # the same items, however kept
    with pytest.raises(ValueError):
        ProvenanceMap(keys, (preset, 1, 2))  # a packed position without its file
