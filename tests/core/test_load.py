"""The strict loader and the snapshot's path rules."""

from __future__ import annotations

import pytest

from reconciler.core.load import MAX_FILE_BYTES, parse_yaml, resolve_files
from reconciler.core.types import RepoFile, RepoSnapshot


def data(text: str) -> object:
    doc, errors = parse_yaml("f.yaml", text.encode())
    assert errors == [] and doc is not None
    return doc.data


def error(content: bytes) -> str:
    doc, errors = parse_yaml("f.yaml", content)
    assert doc is None and len(errors) == 1
    return str(errors[0])


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "OFF"])
def test_yaml_11_booleans_are_strings(word: str) -> None:
    assert data(f"a: {word}\n") == {"a": word}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("False", False),
        ("~", None),
        ("null", None),
        ("", None),
        ("12", 12),
        ("0o17", 15),
        ("0x1f", 31),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        ("2024-01-01", "2024-01-01"),
        ("1_000", "1_000"),
        ("'12'", "12"),
        ("500m", "500m"),
    ],
)
def test_yaml_12_core_schema(text: str, value: object) -> None:
    assert data(f"a: {text}\n") == {"a": value}


def test_positions_of_keys_and_values() -> None:
    doc, _ = parse_yaml("f.yaml", b"run:\n  container:\n    args: [a, b]\n")
    assert doc is not None
    assert doc.loc(("run", "container", "args", 1)).col == 15
    assert doc.loc(("run", "container"), key=True).line == 2
    assert doc.loc(("run", "missing", "deeper")).line == 2  # nearest known ancestor


def test_duplicate_keys_name_both_lines() -> None:
    assert error(b"a: 1\nb: 2\na: 3\n") == "f.yaml:3:1: duplicate key 'a' (first defined at line 1)"


def test_aliases_expand_but_are_bounded() -> None:
    assert data("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}
    bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
    for prev, name in zip("abcd", "bcde", strict=True):
        bomb += f"{name}: &{name} [{','.join(['*' + prev] * 10)}]\n"
    assert "alias bomb" in error(bomb.encode())


def test_size_and_encoding() -> None:
    assert "limit" in error(b"a: 1\n" + b"#" * MAX_FILE_BYTES)
    assert error(b"a: 1\nb: \xff\n") == "f.yaml:2:4: file is not valid UTF-8"
    assert data("\ufeffa: 1\n") == {"a": 1}


def test_aliased_expansion_does_not_share_objects() -> None:
    value = data("a: &x {k: [1]}\nb: *x\n")
    assert isinstance(value, dict) and value["a"] is not value["b"]


def _snapshot(**files: RepoFile) -> RepoSnapshot:
    return RepoSnapshot({f.path: f for f in files.values()})


def test_symlinks_inside_are_followed_and_escapes_refused() -> None:
    snap = _snapshot(
        real=RepoFile("queues/real.yaml", b"kind: Queue\n"),
        inside=RepoFile("queues/alias.yaml", b"", symlink_target="real.yaml"),
        up=RepoFile("queues/up.yaml", b"", symlink_target="../../etc/passwd"),
        absolute=RepoFile("queues/abs.yaml", b"", symlink_target="/etc/passwd"),
        dangling=RepoFile("queues/gone.yaml", b"", symlink_target="nothing.yaml"),
        loop=RepoFile("queues/loop.yaml", b"", symlink_target="loop.yaml"),
    )
    files, errors = resolve_files(snap)
    assert files["queues/alias.yaml"] == b"kind: Queue\n"
    messages = {e.location.file: e.message for e in errors}
    assert messages["queues/up.yaml"] == "symlink to '../../etc/passwd' leaves the repo"
    assert messages["queues/abs.yaml"] == "symlink to '/etc/passwd' leaves the repo"
    assert "does not exist" in messages["queues/gone.yaml"]
    assert messages["queues/loop.yaml"] == "symlink loop"


@pytest.mark.parametrize(
    "path", ["../x.yaml", "/etc/x.yaml", "a/../../x.yaml", "a//b.yaml", "a\\b"]
)
def test_path_traversal_refused(path: str) -> None:
    files, errors = resolve_files(RepoSnapshot({path: RepoFile(path, b"a: 1")}))
    assert files == {} and len(errors) == 1


@pytest.mark.parametrize(
    "text",
    ["!!float nan", "!!float NaN", "!!float '-nan'", "!!float infinity", "!!float ' .nan'"],
)
def test_an_explicit_float_tag_never_gives_nan_or_infinity(text: str) -> None:
    """``.nan`` is refused; so is NaN spelled through a tag (before, it passed the loader
    and a NaN quantity raised inside the compiler: an internal error for bad input)."""
    assert error(f"a: {text}\n".encode()).startswith("f.yaml:1:4: ")


@pytest.mark.parametrize(
    "text",
    [
        "!!int 1_0",
        "!!int '\u0663'",
        "!!int ' 7'",
        '!!int "7\\n"',
        "!!float 1_0.5",
        "!!float '\uff11'",
    ],
)
def test_an_explicit_number_tag_takes_only_yaml_12_numbers(text: str) -> None:
    """Python's ``int`` and ``float`` take underscores, spaces and any script's digits; a
    tagged scalar is held to the YAML 1.2 core schema like an untagged one."""
    assert "is not a valid" in error(f"a: {text}\n".encode())


def test_explicit_number_tags_read_core_schema_numbers() -> None:
    assert data("a: !!int '0x1f'\nb: !!float '1'\nc: !!int -3\n") == {"a": 31, "b": 1.0, "c": -3}


@pytest.mark.parametrize(("char", "name"), [("\x85", "NEL"), ("\u2028", "LS"), ("\u2029", "PS")])
def test_a_line_break_editors_do_not_show_is_refused(char: str, name: str) -> None:
    """YAML 1.1 (PyYAML and libyaml) breaks lines at NEL, LS and PS; YAML 1.2 and editors
    do not. Read as breaks, ``description: a<LS>queue: b`` held a second key that an editor
    and a reviewer see inside the description, and every line number after it was one more
    than the editor's."""
    text = f"kind: Queue\ndescription: nightly{char}priority: 5\n"
    assert error(text.encode()) == (
        f"f.yaml:2:21: character U+{ord(char):04X} ({name}): YAML 1.1 readers break the line "
        "there and editors do not; write it escaped in a double-quoted string if you mean it"
    )
    assert data(f'a: "x\\{"N" if name == "NEL" else name[0]}y"\n') == {"a": f"x{char}y"}


def test_a_written_file_keeps_the_line_breaks_pyyaml_writes_unescaped() -> None:
    """The status branch is read back as written: PyYAML puts LS and PS in single-quoted
    strings as they are, and a record must not become unreadable for it."""
    from reconciler.core.reporting.status import dump_yaml

    message = "pod failed:\u2028see events\u2029"
    written = dump_yaml({"message": message})
    text = written if isinstance(written, str) else written.decode()
    assert "\u2028" in text
    doc, errors = parse_yaml("status/p/op.yaml", text.encode(), written=True)
    assert errors == [] and doc is not None and doc.data == {"message": message}


def test_a_git_lfs_pointer_is_named_as_such() -> None:
    """A config file tracked by Git LFS: a checkout with LFS shows the file (``validate``
    passes) while the commit, which ``run`` and ``plan --base`` read, holds a pointer.
    Before, the pointer read as one plain string: "expected a mapping"."""
    pointer = (
        b"version https://git-lfs.github.com/spec/v1\n"
        b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        b"size 12345\n"
    )
    assert error(pointer) == (
        "f.yaml:1:1: file is a Git LFS pointer: the commit holds a pointer, not the file, "
        "and the reconciler reads commits; keep config files out of LFS (.gitattributes)"
    )


@pytest.mark.parametrize("escape", ["\\uD800", "\\udfff", "\\U0000DC00", "\\ude00\\ud83d"])
def test_an_escape_of_a_lone_surrogate_is_not_a_character(escape: str) -> None:
    """``"\\uD800"`` gave a string no UTF-8 encoder takes: it passed validate, and every
    cycle then failed when the Job's body was serialised (orjson: 'surrogates not
    allowed'), for every operation, not only that one."""
    code = int(escape[2:6] if escape[1] == "u" else escape[2:], 16)
    assert error(f'a:\n  - "x{escape}y"\n'.encode()) == (
        f"f.yaml:2:5: an escape of U+{code:04X}, a UTF-16 surrogate without its pair, is not "
        "a character: write the character itself"
    )
    assert error(f'"k{escape}": 1\n'.encode()).startswith("f.yaml:1:1: ")
    assert data("a: '\\uD800'\n") == {"a": "\\uD800"}  # single-quoted: no escapes


def test_an_escaped_surrogate_pair_is_the_character_as_in_json() -> None:
    """JSON writes a character past U+FFFF as a pair of escapes (``json.dumps``); YAML
    1.2 reads JSON, so the pair is that character, in values and in keys."""
    assert data('"k\\ud83d\\ude00": ["\\ud83d\\ude00!"]\n') == {"k\U0001f600": ["\U0001f600!"]}
