"""The status files' direct YAML writer (``core/reporting/block_yaml.py``) writes byte for byte what
PyYAML's dumper writes, or declines (None) and leaves the document to PyYAML."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.reporting import status as status_module
from reconciler.core.reporting.status import OperationStatus, SupersededRun, dump_yaml
from reconciler.core.types import Phase

BLOCK = status_module._BLOCK
pytestmark = pytest.mark.skipif(BLOCK is None, reason="PyYAML without libyaml: not used")


def pyyaml(data: dict[str, Any]) -> bytes:
    return status_module._pyyaml_dump(data)


def same(data: dict[str, Any]) -> str | None:
    """The direct text of ``data`` (None when it declines), checked against PyYAML's."""
    assert BLOCK is not None
    text = BLOCK.document(data)
    if text is not None:
        assert text.encode() == pyyaml(data), data
    return text


# Text that stresses the plain/quoted choice: indicators, spaces, quotes, what YAML 1.1 or
# 1.2 reads as a number, a boolean, null or a timestamp; and some it must decline.
TRICKY = [
    *("", " ", "a", "-", "- a", "-a", "?", "? a", "?a", ":", ": a", ":a", "a:", "a: b", "a:b"),
    *("#", "#a", "a #b", "a#b", "a # b", ",a", "a,b", "[a]", "{a}", "a[b]", "&a", "*a", "!a"),
    *("|a", ">a", "'a", '"a', "a'b", "a''", "%a", "@a", "`a", "a@b", "a%b", "---", "---a"),
    *("...", "...a", "a...", "--", "..", " a", "a ", "a  b", "=", "<<", "~", "null", "Null"),
    *("NULL", "true", "True", "yes", "No", "on", "OFF", "y", "n", "1", "01", "0o17", "0x1F"),
    *("1_000", "1e3", "1E3", "123e45", "1.5", ".5", "-.5", "+1", "-1", "1.", ".inf", ".NaN"),
    *("2026-12-04", "2026-12-04T12:00:00Z", "2026-12-04T14:59:47.207672Z", "12:30", "1:2:3"),
    *("0b101", "09", "cd916f62294c881b", "50d6a62d316e6785ac0a6e19415734c05df1fabb"),
    *("dispatched to cluster local", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    *("reconciler logs team-a/train", "a\nb", "a\tb", "caf\u00e9", "\u2603", "a\x7fb", "x" * 129),
]

# printable ASCII without breaks (what the writer takes), and anything
PRINTABLE = [t for t in TRICKY if t.isascii() and t.isprintable() and len(t) <= 128]
ascii_texts = st.one_of(
    st.sampled_from(PRINTABLE),
    st.text(alphabet=st.sampled_from("ab 0159eE.-+:#'\"?,[]{}!&*|>%@`~=_/\\"), max_size=8),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
)
any_texts = st.one_of(st.sampled_from(TRICKY), ascii_texts, st.text(max_size=6))


def values_of(texts: st.SearchStrategy[str], *, every_float: bool) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        texts,
        st.integers(),
        st.booleans(),
        st.none(),
        st.floats(allow_nan=every_float, allow_infinity=every_float),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)
        ),
        max_leaves=12,
    )


def documents_of(texts: st.SearchStrategy[str], *, every_float: bool) -> st.SearchStrategy[Any]:
    return st.dictionaries(texts, values_of(texts, every_float=every_float), min_size=1)


@settings(max_examples=500, deadline=None)
@given(documents_of(any_texts, every_float=True))
@pytest.mark.slow
def test_any_document_is_written_as_pyyaml_writes_it_or_declined(data: dict[str, Any]) -> None:
    same(data)


@settings(max_examples=500, deadline=None)
@given(documents_of(ascii_texts, every_float=False))
@pytest.mark.slow
def test_a_document_of_printable_text_is_written_directly(data: dict[str, Any]) -> None:
    """Without a list in a list or a mapping in a list in a list, the writer takes it."""
    text = same(data)
    assert text is not None or "[[" in json.dumps(data, separators=(",", ":")).replace("[{", "[[")


@pytest.mark.parametrize("text", TRICKY)
def test_each_tricky_text_as_a_key_a_value_and_a_list_item(text: str) -> None:
    same({text: 1})
    same({"k": text})
    same({"k": [text, {text: text}]})
    same({"k": {"n": {text: [text]}}})
    same({"k": [[text, [text]], [{text: [[text]]}], [], [{}]]})


def test_a_list_of_texts_written_before_is_written_the_same_from_the_memo() -> None:
    """A list whose every item was written before (a queue's order file, cycle after cycle)
    is joined from the memo at C speed: the same bytes as item by item, at any indent."""
    assert BLOCK is not None
    texts: list[Any] = [*PRINTABLE, "order-1"]
    documents = [
        {"k": texts},
        {"k": {"n": {"m": texts}}},
        {"k": [list(texts), [list(texts)], {"n": list(texts)}]},
    ]
    for data in documents:
        first = same(data)
        assert BLOCK._known_texts(texts) is not None
        assert first is not None and same(data) == first
    assert BLOCK._known_texts([*texts, 1]) is None  # not only texts: item by item
    assert same({"k": [*texts, "a\nb"]}) is None  # a text it declines declines the list


def test_what_it_declines() -> None:
    assert BLOCK is not None
    for data in (
        {"k": "a\nb"},  # a line break: a quoted scalar over lines
        {"k": "a\tb"},
        {"k": "caf\u00e9"},
        {"x" * 129: 1},  # a complex key
        {"k": float("nan")},
        {1: "a"},
    ):
        assert BLOCK.document(data) is None, data
    shared: dict[str, Any] = {"a": 1}
    assert BLOCK.document({"x": shared, "y": shared}) is None  # PyYAML: an anchor, an alias
    assert BLOCK.document({}) is None


def test_a_record_as_its_model_dumps_it_takes_the_direct_path() -> None:
    """``to_dict`` holds the phase as a ``Phase`` (a StrEnum): written as its text, with no
    detour through JSON."""
    record = OperationStatus(operation="a/b", phase=Phase.RUNNING, requests={"cpu": "1"})
    data = record.to_dict()
    assert type(data["phase"]) is Phase
    assert BLOCK is not None and BLOCK.document(data) == (
        "operation: a/b\nphase: Running\nrequests:\n  cpu: '1'\nsync: Synced\n"
    )
    assert dump_yaml(data) == pyyaml(json.loads(json.dumps(data)))
    enums: dict[str, Any] = {Phase.QUEUED: Phase.FAILED, "k": [Phase.STOPPED]}
    text = BLOCK.document(enums)
    assert text is not None and text.encode() == pyyaml(json.loads(json.dumps(enums)))


def test_common_records_take_the_direct_path() -> None:
    """The records of a dispatch are written without PyYAML (the point of the writer)."""
    assert same({"k": "dispatched to cluster local", "n": 3, "q": {"cpu": "10m"}}) is not None
    assert same({"at": "2026-12-04T14:59:47.207672Z", "ids": ["a/b", "c"]}) is not None
    assert same({"m": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}) == (
        "m: '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.'\n"
    )
    assert same({"v": "1e3", "w": "yes", "x": "", "y": None, "z": 0.5}) == (
        "v: '1e3'\nw: 'yes'\nx: ''\ny: null\nz: 0.5\n"
    )


def records_of(texts: st.SearchStrategy[str]) -> st.SearchStrategy[OperationStatus]:
    phases = st.sampled_from([*Phase])
    objects = st.none() | st.dictionaries(texts, values_of(texts, every_float=False), max_size=3)
    return st.builds(
        OperationStatus,
        operation=texts,
        phase=phases,
        reason=st.none() | texts,
        message=texts,
        kind=st.none() | texts,
        path=st.none() | texts,
        queue=st.none() | texts,
        cluster=st.none() | texts,
        namespace=st.none() | texts,
        workload=st.none() | texts,
        workload_kind=texts,
        position=st.none() | st.integers(min_value=1),
        generation=st.none() | st.integers(min_value=1),
        config_commit=st.none() | texts,
        dispatched_at=st.none() | texts,
        started_at=st.none() | texts,
        finished_at=st.none() | texts,
        outputs=objects,
        spec_hash=st.none() | texts,
        sync=st.sampled_from(["Synced", "OutOfSync"]),
        blocked_by=objects,
        workflow=st.none()
        | st.fixed_dictionaries({"parent": texts, "kind": texts, "index": st.integers(0, 9)}),
        children=st.lists(texts, max_size=3).map(tuple),
        logs=texts,
        requests=st.dictionaries(texts, texts, max_size=3),
        pods=st.none() | st.integers(min_value=2),
        superseded=st.lists(
            st.builds(
                SupersededRun,
                generation=st.integers(min_value=1),
                cluster=texts,
                namespace=texts,
                workload=texts,
                phase=phases,
                requests=st.dictionaries(texts, texts, max_size=2),
                pods=st.none() | st.integers(min_value=2),
            ),
            max_size=2,
        ).map(tuple),
    )


def check_record(record: OperationStatus) -> str | None:
    """``dump_yaml`` (the one serializer of the status files) gives PyYAML's bytes for the
    record, by the direct writer or by PyYAML when the writer declines."""
    data = record.to_dict()
    canonical = json.loads(json.dumps(data, sort_keys=True, ensure_ascii=False))
    assert dump_yaml(data) == pyyaml(canonical)
    return same(canonical)


@settings(max_examples=300, deadline=None)
@given(records_of(any_texts))
@pytest.mark.slow
def test_status_records_are_written_as_pyyaml_writes_them(record: OperationStatus) -> None:
    check_record(record)


@settings(max_examples=300, deadline=None)
@given(records_of(ascii_texts))
@pytest.mark.slow
def test_status_records_of_printable_text_are_written_directly(record: OperationStatus) -> None:
    assert check_record(record) is not None


def test_data_of_other_types_goes_through_its_canonical_json() -> None:
    """``dump_yaml`` writes JSON-typed data directly (a StrEnum as its text) and anything
    else (a Decimal, a tuple, a mapping that is not a dict) as its canonical JSON's YAML:
    the same text either way."""
    from decimal import Decimal
    from types import MappingProxyType

    odd: dict[str, Any] = {
        "a": Decimal("0.5"),
        "b": ("x", "y"),
        "c": MappingProxyType({"k": 1}),
        "d": Phase.RUNNING,
        "e": {2: "int key"},
    }
    assert BLOCK is not None and BLOCK.document(odd) is None
    canonical = json.loads(json.dumps(odd, sort_keys=True, default=status_module._json_default))
    assert dump_yaml(odd) == pyyaml(canonical)
    assert b"a: 500m\n" in dump_yaml(odd) and b"d: Running\n" in dump_yaml(odd)
