"""The plain reader (``load._Plain``) reads a file of the common shape to the same data,
value positions and key positions as libyaml and the composer, and leaves every other
file (and every problem) to them: ``parse_yaml`` gives the same document and the same
errors with it on and off."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core import load

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    p
    for base in (ROOT / "config-repo-template", ROOT / "presets", ROOT / "tests" / "data")
    for p in base.rglob("*.y*ml")
)


def typed(value: Any) -> Any:
    """``value`` with every scalar's type and every map's key order made part of it:
    ``==`` alone takes ``1 == 1.0 == True`` and ``{"a": 1, "b": 2} == {"b": 2, "a": 1}``."""
    if isinstance(value, dict):
        return ("map", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def canonical(parsed: tuple[load.Document | None, list[Any]]) -> object:
    doc, errors = parsed
    if doc is None:
        return None, errors
    return (doc.path, typed(doc.data), list(doc.values.items()), list(doc.keys.items())), errors


def parse_both(
    monkeypatch: pytest.MonkeyPatch, content: bytes, *, written: bool = False
) -> tuple[object, object]:
    """The plain reader's and libyaml's reading of ``content``, in a form where types,
    key order and the order positions were recorded in count."""
    with monkeypatch.context() as m:
        m.setattr(load, "_PLAIN_READER", True)
        plain = load.parse_yaml("f.yaml", content, written=written)
        m.setattr(load, "_PLAIN_READER", False)
        other = load.parse_yaml("f.yaml", content, written=written)
    return canonical(plain), canonical(other)


def test_the_comparison_sees_types_and_order() -> None:
    one = load.Document("f", {"a": 1, "b": True})
    assert canonical((one, [])) != canonical((load.Document("f", {"a": 1.0, "b": True}), []))
    assert canonical((one, [])) != canonical((load.Document("f", {"a": 1, "b": 1}), []))
    assert canonical((one, [])) != canonical((load.Document("f", {"b": True, "a": 1}), []))
    assert canonical((one, [])) == canonical((load.Document("f", {"a": 1, "b": True}), []))


def reads_plain(content: bytes) -> bool:
    return load._read_plain(content.decode("utf-8"), None) is not None


@pytest.mark.slow
def test_every_repo_and_corpus_file_parses_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = 0
    for path in FILES:
        content = path.read_bytes()
        got, want = parse_both(monkeypatch, content)
        assert got == want, path
        with contextlib.suppress(UnicodeDecodeError):
            plain += reads_plain(content.removeprefix(b"\xef\xbb\xbf"))
    assert plain > len(FILES) // 2  # most config files take the plain reader


def test_an_operation_file_is_read_plain() -> None:
    content = (
        b"# a comment\nkind: Operation\nname: train  # trailing\npresets: [a100, 'data']\n"
        b"run:\n  container:\n    command: [python, train.py]\n    args: [--seed, '7']\n"
        b'    env: {A: "1", B: x}\n  environment:\n    tolerations:\n'
        b"    - key: nvidia.com/gpu\n      operator: Exists\n    labels:\n      a: b\n"
    )
    assert reads_plain(content)
    doc, errors = load.parse_yaml("f.yaml", content)
    assert not errors and doc is not None
    assert doc.data["run"]["environment"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"}
    ]
    assert doc.pos(("run", "environment", "tolerations", 0, "operator")) == (13, 17)
    assert doc.keys[("name",)] == (3, 1)


@pytest.mark.parametrize(
    "content",
    [
        b"a: &x 1\nb: *x\n",  # anchors and aliases
        b"a: !!str 1\n",  # a tag
        b"a: |\n  text\n",  # a block scalar
        b"a:\nb: 1\n",  # an empty value
        b"a: b\n  c\n",  # a multi-line plain scalar
        b"a: 1\na: 2\n",  # a duplicate key
        b"1: a\n",  # a key that is not a string
        b"a:\tb\n",  # a tab
        b"a: \xc3\xa9\n",  # non-ASCII text
        b"---\na: 1\n",  # a document marker
        b"a: [b, [c,]]\n",  # a trailing comma, nested
        b"a: {b: {c}}\n",  # a key without a value, nested
        b"a: {b: [c]\n",  # an unclosed map
        b"a: [[b]: c]\n",  # a collection as a key
        b"a: {[b]: c}\n",
        b"a: [b, [c]\n  ]\n",  # a multi-line flow collection
        b"a: [b, [c]]x\n",  # text after the collection
        b"a: 'it''s'\n",  # an escaped quote
        b"a: b: c\n",  # a map value where none may be
        b"a: 1e400\n",  # a number out of range
        b"- a\n-\n",  # an empty item
        b"a: [b,]\n",  # a trailing comma
        b"k" * 1001 + b": v\n",  # a key longer than libyaml looks ahead for its ':'
        b"k" * 1100 + b": v\n",
    ],
)
def test_other_shapes_are_left_to_libyaml(monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:  # pragma: no cover - every case above is UTF-8
        text = ""
    assert load._read_plain(text, None) is None
    got, want = parse_both(monkeypatch, content)
    assert got == want


def test_an_operation_file_with_nested_flow_maps_is_read_plain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    content = (
        b"kind: Operation\nname: x\nrun:\n  kind: job\n  container:\n    image: busybox\n"
        b"    resources: {requests: {cpu: 10m}}\n  environment:\n"
        b"    annotations: {reconciler.dev/simulated-duration: 1h}\n"
    )
    assert reads_plain(content)
    got, want = parse_both(monkeypatch, content)
    assert got == want
    doc, errors = load.parse_yaml("f.yaml", content)
    assert not errors and doc is not None
    assert doc.data["run"]["container"]["resources"] == {"requests": {"cpu": "10m"}}
    requests = ("run", "container", "resources", "requests")
    assert doc.pos(requests[:-1]) == (7, 16)
    assert doc.keys[requests] == (7, 17)
    assert doc.pos(requests) == (7, 27)  # the opening bracket, as libyaml's
    assert doc.keys[(*requests, "cpu")] == (7, 28)
    assert doc.pos((*requests, "cpu")) == (7, 33)


NESTED_FLOWS = [
    "[b, [c]]",
    "{a: {b: c}}",
    "{a: [b, c]}",
    "[a, {b: c}]",
    "[[a], [b, [c]]]",
    "{a: {}}",
    "{a: []}",
    "[{}, []]",
    "[[[]]]",
    "[ [ a ] , { b: [ c ] } ]",
    "{ a: { b: c } , d: [ ] }",
    "[[a],b,{c: d,e: [f]}]",
    "{a: {b: [1, 1.5, ~, true, 'q', \"d\", 0x1F]}, c: x}",
]


@pytest.mark.parametrize("value", NESTED_FLOWS)
@pytest.mark.parametrize(
    "shape", ["a: {v}\n", "a: {v}  # c\n", "- {v}\n", "x:\n  - b: c\n    d: {v} # c\n"]
)
def test_nested_flow_collections_are_read_plain(
    monkeypatch: pytest.MonkeyPatch, shape: str, value: str
) -> None:
    content = shape.format(v=value).encode()
    assert reads_plain(content)
    got, want = parse_both(monkeypatch, content)
    assert got == want
    assert want[1] == []  # no errors


@pytest.mark.parametrize("depth", range(load.MAX_DEPTH - 2, load.MAX_DEPTH + 2))
@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{b: ", "}")])
def test_nested_flow_collections_past_the_depth_limit_are_left_to_libyaml(
    monkeypatch: pytest.MonkeyPatch, depth: int, opening: str, closing: str
) -> None:
    # ``depth`` collections nested in ``a``: the innermost one's path is ``depth`` long
    content = f"a: {opening * depth}x{closing * depth}\n".encode()
    assert reads_plain(content) == (depth < load.MAX_DEPTH)
    got, want = parse_both(monkeypatch, content)
    assert got == want


# --- generated files: valid and broken, plain and not ----------------------------------------

KEYS = ["a", "b", "kind", "name", "run", "env", "nvidia.com/gpu", "x_1", "1", "true", "~", "<<"]
SCALARS = [
    "x", "train.py", "--seed", "-1", "-.5", "1", "0o17", "0x1F", "09", "1.5", "1e3", "1e400",
    "9" * 120, ".inf", ".nan", "~", "null", "Null", "true", "False", "yes", "on", "a b",
    "a  b", "a:b", "a: b", "a :b", "a#b", "a #b", "#c", "-", "- x", "?x", "&x", "*x", "!x",
    "'q'", "'q''r'", "'q", '"d"', '"d\\n"', "[]", "{}", "[a, b]", "[a,b]", "[ a , 'b' ]",
    "[a, [b]]", "[a,]", "[a: b]", "{A: '1', B: x}", "{A:1}", "{A: [x]}", "{a: 1, a: 2}",
    "{1: x}", "{}x", "[] # c", "x # c", "x  ", "ghcr.io/a/b:1.4", "a,b", "(x)", "=x", "|",
    ">", "%x", "@x", "`x",
]  # fmt: skip
INDENTS = [0, 0, 0, 1, 2, 2, 2, 3, 4, 4, 6]
# Flow collections, nested: well-formed ones of the plain shape and, at times, odd ones.
FLOW_KEYS = ["a", "b", "kind", "nvidia.com/gpu", "x_1"]
FLOW_SCALARS = ["x", "train.py", "--seed", "-1", "1.5", "0x1F", "09", "~", "null", "true",
                "yes", "a b", "'q'", '"d"']  # fmt: skip
FLOW_COMMAS = [", ", ", ", ",", " , "]
ODD_KEYS = ["a", "1", "true", "~", "<<", "'a'", "a b", "[a]", "{a: b}", "", "?a", "-a"]
ODD_SCALARS = ["1e400", "-", "- x", "a:b", "a: b", "a#b", "a #b", "#c", "'q", "'q''r'",
               '"d\\n"', "&x", "*x", "!x", "?x", "", "x: y", "x:"]  # fmt: skip
ODD_PAIRS = ["{k}:{v}", "{k} : {v}", "{k}", "{k}: ", ": {v}", "{k}:\n  {v}", "? {k}: {v}"]
ODD_COMMAS = [",", " ", ", ,", ",\n  ", ",\n", ",,"]
ODD_ENDS = [",", ", ", " # c", "\n", ": x", "x"]


@st.composite
def flows(draw: st.DrawFn, odd: bool, depth: int = 0) -> str:
    """A flow list or map, its items scalars and flow collections nested up to 4 deep; when
    ``odd``, with now and then an odd item, key, comma or end (``[a, [b,]]``, ``{a: {b}}``,
    ``{a: [b]``, ``[[a]: b]``, a line break), each odd choice alone in most values."""

    def pick(good: list[str], bad: list[str]) -> str:
        return draw(st.sampled_from(bad if odd and draw(st.integers(0, 15)) == 0 else good))

    size = draw(st.integers(0, 3))
    items = [
        draw(flows(odd, depth + 1))
        if depth < 4 and draw(st.integers(0, 2)) == 0
        else pick(FLOW_SCALARS, ODD_SCALARS)
        for _ in range(size)
    ]
    if draw(st.booleans()):
        opening, closing = "{", "}"
        keys = draw(st.lists(st.sampled_from(FLOW_KEYS), min_size=size, max_size=size,
                             unique=True))  # fmt: skip
        items = [
            pick(["{k}: {v}"], ODD_PAIRS).format(k=pick([k], [*ODD_KEYS, keys[0]]), v=v)
            for k, v in zip(keys, items, strict=True)
        ]
    else:
        opening, closing = "[", "]"
    pad = draw(st.sampled_from(["", "", " "]))
    comma = pick(FLOW_COMMAS, ODD_COMMAS)
    return opening + pad + comma.join(items) + pick([""], ODD_ENDS) + pad + pick([closing], [""])


@st.composite
def lines(draw: st.DrawFn) -> str:
    indent = " " * draw(st.sampled_from(INDENTS))
    key = draw(st.sampled_from(KEYS))
    value = draw(st.sampled_from(SCALARS) | flows(odd=True))
    shape = draw(
        st.sampled_from(
            [
                "{k}: {v}",
                "{k}: {v}",
                "{k}: {v}",
                "{k}:",
                "{k}:",
                "- {v}",
                "- {k}: {v}",
                "- {k}:",
                "-   {k}: {v}",
                "# {v}",
                "",
                "  ",
                "{k}: {v} # c",
                "{k} : {v}",
                "{k}:{v}",
                "---",
                "...",
                "{v}",
            ]
        )
    )
    return indent + shape.format(k=key, v=value)


documents = st.lists(lines(), min_size=0, max_size=14).map("\n".join)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.booleans(), st.booleans())
@pytest.mark.slow
def test_generated_files_parse_the_same(text: str, newline: bool, written: bool) -> None:
    content = (text + ("\n" if newline else "")).encode()
    with pytest.MonkeyPatch.context() as m:
        got, want = parse_both(m, content, written=written)
    assert got == want


@st.composite
def nested(draw: st.DrawFn, depth: int = 0) -> str:
    """A well-formed file of the plain shape (mostly), nested maps and lists."""
    pad = "  " * depth
    out = []
    used: set[str] = set()
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(KEYS[:7]))
        if key in used:
            continue
        used.add(key)
        kind = draw(st.sampled_from(["scalar", "scalar", "map", "list", "items"]))
        if kind == "scalar" or depth >= 3:
            value = draw(st.sampled_from(SCALARS[:12] + SCALARS[39:52]) | flows(odd=False))
            out.append(f"{pad}{key}: {value}")
        elif kind == "map":
            out.append(f"{pad}{key}:")
            out.append(draw(nested(depth + 1)))
        elif kind == "list":
            out.append(f"{pad}{key}:")
            lead = pad if draw(st.booleans()) else pad + "  "
            for item in draw(
                st.lists(st.sampled_from(SCALARS[:12]) | flows(odd=False), min_size=1, max_size=3)
            ):
                out.append(f"{lead}- {item}")
        else:
            out.append(f"{pad}{key}:")
            lead = pad + "  "
            for k, v in draw(
                st.lists(
                    st.tuples(st.sampled_from(KEYS[:4]), st.sampled_from(SCALARS[:10])),
                    min_size=1,
                    max_size=3,
                )
            ):
                out.append(f"{lead}- {k}: {v}")
                if draw(st.booleans()):
                    out.append(f"{lead}  name: x")
        if draw(st.booleans()):
            out.append(f"{pad}# a comment")
    return "\n".join(out)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested())
@pytest.mark.slow
def test_generated_nested_files_parse_the_same(text: str) -> None:
    content = (text + "\n").encode()
    with pytest.MonkeyPatch.context() as m:
        got, want = parse_both(m, content)
    assert got == want


FLOW_SHAPES = ["a: {v}", "a: {v}  # c", "- {v}", "a:\n  - b: c\n    d: {v}", "a:\n- {v}"]


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flows(odd=False), st.sampled_from(FLOW_SHAPES))
@pytest.mark.slow
def test_generated_nested_flow_collections_read_plain(value: str, shape: str) -> None:
    content = (shape.format(v=value) + "\n").encode()
    assert reads_plain(content)
    with pytest.MonkeyPatch.context() as m:
        got, want = parse_both(m, content)
    assert got == want


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flows(odd=True), st.sampled_from(FLOW_SHAPES), st.booleans())
@pytest.mark.slow
def test_generated_odd_flow_collections_parse_the_same(
    value: str, shape: str, written: bool
) -> None:
    content = (shape.format(v=value) + "\n").encode()
    with pytest.MonkeyPatch.context() as m:
        got, want = parse_both(m, content, written=written)
    assert got == want


MUTATIONS = [" ", "  ", "\n", "-", "- ", ":", ": ", "#", " #", "'", '"', "[", "]", "{", "}", ",",
             "&a", "*a", "!", "|", ">", "?", "%", "@", "\t", "\\", "~", "é", "\r"]  # fmt: skip


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested(), st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(MUTATIONS),
                                    st.booleans()), min_size=1, max_size=3))  # fmt: skip
@pytest.mark.slow
def test_broken_nested_files_parse_the_same(text: str, edits: list[tuple[int, str, bool]]) -> None:
    """A plain file with a character or two replaced or inserted: whatever it becomes
    (another valid shape, or an error), both ways read it alike."""
    for at, token, replace in edits:
        at %= len(text) + 1
        text = text[:at] + token + text[at + (1 if replace else 0) :]
    content = (text + "\n").encode()
    with pytest.MonkeyPatch.context() as m:
        got, want = parse_both(m, content)
    assert got == want
