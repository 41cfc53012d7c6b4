"""libyaml composes plain files; the result is the same Document the pure composer gives,
and anything odd (errors, deep flow nesting, control characters) takes the pure path."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.core import load

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    p
    for base in (ROOT / "config-repo-template", ROOT / "presets", ROOT / "tests" / "data")
    for p in base.rglob("*.y*ml")
)


@pytest.fixture
def pure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "_CLoader", None)


def parse_both(monkeypatch: pytest.MonkeyPatch, content: bytes) -> tuple[object, object]:
    fast = load.parse_yaml("f.yaml", content)
    with monkeypatch.context() as m:
        m.setattr(load, "_CLoader", None)
        slow = load.parse_yaml("f.yaml", content)
    return fast, slow


def test_libyaml_is_used_here() -> None:
    assert load._CLoader is not None
    assert load._compose_fast("a: [1, {b: c}]\n") is not None


def test_every_repo_and_corpus_file_parses_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(FILES) > 50
    for path in FILES:
        fast, slow = parse_both(monkeypatch, path.read_bytes())
        assert fast == slow, path


@pytest.mark.parametrize(
    "content",
    [
        b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",  # deep flow nesting: pure path, no crash
        b"a: b\x07\n",  # a control character
        b"a: 1\na: 2\n",  # a duplicate key
        b"a: yes\nb: 0o17\nc: .inf\nd: ~\ne: 2026-01-01\n",  # YAML 1.2 core schema
        b"a: &x [1]\nb: *x\nc: *y\n",  # an unknown alias
        b"--- a\n--- b\n",  # two documents
        b"",
    ],
)
def test_odd_files_give_the_same_result(monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    fast, slow = parse_both(monkeypatch, content)
    assert fast == slow


@pytest.mark.parametrize("resolvers", [None, load.WRITTEN_RESOLVERS])
@pytest.mark.parametrize(
    "value",
    [
        "",
        "~",
        "null",
        "Null",
        "true",
        "FALSE",
        "yes",
        "0",
        "-12",
        "+3",
        "0o17",
        "0x1F",
        "09",
        "1.5",
        "-.5",
        ".inf",
        ".NaN",
        "1e3",
        "1e+3",
        "2h",
        "64Gi",
        "a b",
        "--seed",
        "[x]",
    ],
)
def test_the_fast_resolver_tags_as_pyyaml_does(resolvers: object, value: str) -> None:
    """libyaml asks ``_LibYamlLoader.resolve`` for every node's tag: the same answer as
    PyYAML's ``BaseResolver.resolve`` with the same implicit resolvers, plain or quoted."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode
    from yaml.resolver import BaseResolver

    assert load._CLoader is not None
    loader = load._CLoader("a: 1\n", resolvers)
    try:
        for kind in (ScalarNode, SequenceNode, MappingNode):
            for implicit in ((True, False), (False, True), (False, False)):
                want = BaseResolver.resolve(loader, kind, value, implicit)
                assert loader.resolve(kind, value, implicit) == want
    finally:
        loader.dispose()
