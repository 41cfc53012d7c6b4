"""The strict YAML loader: repo bytes in, plain data plus source positions out.

Rules (each violation is a ``ConfigError`` with ``file:line:col``, never an exception):

1. Paths are relative posix paths inside the repo; ``..``, absolute paths and symlinks that
   leave the repo are refused. Symlinks inside the repo are followed (loops are refused).
2. Files are UTF-8 (a BOM is tolerated) and at most ``MAX_FILE_BYTES``.
3. YAML 1.2 core schema: only ``true``/``false`` are booleans (``yes``, ``no``, ``on``,
   ``off`` stay strings), no timestamps, no merge keys, no custom tags.
4. Duplicate mapping keys are errors; keys are strings.
5. One document per file; alias expansion is bounded by ``MAX_NODES`` and nesting by
   ``MAX_DEPTH``, so a "billion laughs" file costs nothing.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconciler.core.types import ConfigError, Location, RepoSnapshot

MAX_FILE_BYTES = 1 << 20  # 1 MiB: config files are small; anything bigger is a mistake
MAX_NODES = 20_000  # values after alias expansion, per file
MAX_DEPTH = 48  # nesting of maps and lists
MAX_SYMLINK_HOPS = 8
MAX_NUMBER_CHARS = 100  # a number literal longer than this is a typo (or an attack)

PathKey = tuple[str | int, ...]

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


class _Yaml12Resolver(yaml.resolver.BaseResolver):
    """Implicit tags of the YAML 1.2 core schema (PyYAML only ships YAML 1.1)."""


_Yaml12Resolver.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Yaml12Resolver.add_implicit_resolver(
    _NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_Yaml12Resolver.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_Yaml12Resolver.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


class _Loader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    _Yaml12Resolver,
):
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Yaml12Resolver.__init__(self)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # Refuse deep nesting while composing: the rest of a line of 100 000 '[' is never
        # scanned (PyYAML looks at most 1024 characters ahead) and nothing recurses deeply.
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH + 1:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Fail(
                    mark.line + 1, mark.column + 1, f"nesting deeper than {MAX_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_MAX_FAST_BRACKETS = 256  # flow nesting is recursion in C: deep files take the pure path
_CParser: Any = getattr(yaml, "cyaml", None) and getattr(yaml.cyaml, "CParser", None)
_CLoader: Any = None
if _CParser is not None:

    class _LibYamlLoader(_CParser, _Yaml12Resolver):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _Yaml12Resolver.__init__(self)

    _CLoader = _LibYamlLoader


def _compose_fast(text: str) -> Node | None:
    """The node tree from libyaml, several times faster than the pure-Python composer, for
    plain files. None sends the file to the pure composer, which gives every error (and
    every odd case) its usual message."""
    if _CLoader is None or _NON_PRINTABLE.search(text):
        return None
    if text.count("[") + text.count("{") > _MAX_FAST_BRACKETS:
        return None
    loader = _CLoader(text)
    try:
        node: Node | None = loader.get_single_node()
        return node
    except (yaml.YAMLError, RecursionError):
        return None
    finally:
        loader.dispose()


@dataclass(frozen=True)
class Document:
    """One parsed YAML file: plain data plus 1-based (line, col) of every key and value."""

    path: str
    data: Any
    values: Mapping[PathKey, tuple[int, int]] = field(default_factory=dict)
    keys: Mapping[PathKey, tuple[int, int]] = field(default_factory=dict)

    def loc(self, path: PathKey = (), *, key: bool = False) -> Location:
        """Location of the value (or its key) at ``path``, or of its nearest known ancestor."""
        p = tuple(path)
        if key and p in self.keys:
            return Location(self.path, *self.keys[p])
        while p:
            if p in self.values:
                return Location(self.path, *self.values[p])
            p = p[:-1]
        return Location(self.path, *self.values.get((), (1, 1)))

    def line(self, path: PathKey) -> int:
        return self.loc(path).line


class _Fail(Exception):
    """Internal: aborts the walk of one file with a located message."""

    def __init__(self, line: int, col: int, message: str) -> None:
        super().__init__(message)
        self.line, self.col, self.message = line, col, message


def _pos(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _scalar(node: ScalarNode) -> Any:
    tag, value = node.tag, node.value
    if tag == _STR:
        return value
    if tag == _NULL:
        if value in ("~", "null", "Null", "NULL", ""):
            return None
    elif tag == _BOOL:
        if value in ("true", "True", "TRUE"):
            return True
        if value in ("false", "False", "FALSE"):
            return False
    elif tag in (_INT, _FLOAT) and len(value) > MAX_NUMBER_CHARS:
        raise _Fail(
            *_pos(node),
            f"number is {len(value)} characters long; the limit is {MAX_NUMBER_CHARS}",
        )
    elif tag == _INT:
        v = value
        try:
            if v.startswith("0o"):
                return int(v[2:], 8)
            if v.startswith("0x"):
                return int(v[2:], 16)
            return int(v, 10)
        except ValueError:
            pass
    elif tag == _FLOAT:
        low = value.lower()
        if low.endswith(".inf") or low == ".nan":
            raise _Fail(*_pos(node), f"{value!r}: infinity and NaN are not allowed here")
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if number in (float("inf"), float("-inf")):
                raise _Fail(*_pos(node), f"number {value!r} is out of range")
            return number
    else:
        raise _Fail(*_pos(node), f"unsupported YAML tag {tag!r}")
    raise _Fail(*_pos(node), f"{value!r} is not a valid {tag.rsplit(':', 1)[-1]}")


class _Walker:
    """Turns a composed node graph into plain data, recording positions per path."""

    def __init__(self) -> None:
        self.count = 0
        self.values: dict[PathKey, tuple[int, int]] = {}
        self.keys: dict[PathKey, tuple[int, int]] = {}
        self.stack: set[int] = set()

    def walk(self, node: Node, path: PathKey) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _Fail(
                *_pos(node),
                f"the document expands to more than {MAX_NODES} values (alias bomb?)",
            )
        if len(path) > MAX_DEPTH:
            raise _Fail(*_pos(node), f"nesting deeper than {MAX_DEPTH} levels")
        self.values[path] = _pos(node)
        if isinstance(node, ScalarNode):
            return _scalar(node)
        if id(node) in self.stack:
            raise _Fail(*_pos(node), "recursive alias")
        self.stack.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                if node.tag != _SEQ:
                    raise _Fail(*_pos(node), f"unsupported YAML tag {node.tag!r}")
                return [self.walk(child, (*path, i)) for i, child in enumerate(node.value)]
            if isinstance(node, MappingNode):
                if node.tag != _MAP:
                    raise _Fail(*_pos(node), f"unsupported YAML tag {node.tag!r}")
                out: dict[str, Any] = {}
                for key_node, value_node in node.value:
                    key = self._key(key_node)
                    if key in out:
                        first = self.keys[(*path, key)]
                        raise _Fail(
                            *_pos(key_node),
                            f"duplicate key {key!r} (first defined at line {first[0]})",
                        )
                    self.keys[(*path, key)] = _pos(key_node)
                    out[key] = self.walk(value_node, (*path, key))
                return out
        finally:
            self.stack.discard(id(node))
        raise _Fail(*_pos(node), "unsupported YAML node")  # pragma: no cover

    def _key(self, node: Node) -> str:
        if not isinstance(node, ScalarNode):
            raise _Fail(*_pos(node), "mapping keys must be plain strings")
        if (
            node.tag == _STR and node.value == "<<" and not node.style
        ):  # plain: None, or "" from libyaml
            raise _Fail(*_pos(node), "merge keys ('<<') are not supported (YAML 1.2)")
        value = _scalar(node)
        if not isinstance(value, str):
            raise _Fail(*_pos(node), f"mapping key {node.value!r} must be a string (quote it)")
        return value


def _offset_to_line_col(text: str | bytes, offset: int) -> tuple[int, int]:
    nl: Any = b"\n" if isinstance(text, bytes) else "\n"
    line = text.count(nl, 0, offset) + 1
    col = offset - (text.rfind(nl, 0, offset) + 1) + 1
    return line, col


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's context/problem pair as one readable sentence."""
    problem, context, where = exc.problem or "invalid YAML", exc.context, exc.context_mark
    if problem == "second occurrence" and context and where is not None:
        return f"{context.split(';')[0]} (first at line {where.line + 1})"
    if problem.startswith("expected '<document start>'"):
        return "unexpected content after the end of the document (one YAML document per file)"
    if problem.startswith("but found another document"):
        return "only one YAML document per file (found a second '---')"
    if "'\\t'" in problem:
        return "tab character: indent with spaces, not tabs"
    if context and where is not None:
        return f"{problem} ({context} at line {where.line + 1})"
    return f"{problem} ({context})" if context else problem


def parse_yaml(
    path: str, content: bytes, *, fast: bool = True
) -> tuple[Document | None, list[ConfigError]]:
    """Parse one file strictly. Returns the document, or ``None`` and its errors.

    ``fast`` lets libyaml compose a plain file; any error is then found again by the pure
    composer, so a file gets the same message and position either way."""

    def fail(line: int, col: int, message: str) -> tuple[None, list[ConfigError]]:
        return None, [ConfigError(Location(path, line, col), message)]

    if len(content) > MAX_FILE_BYTES:
        return fail(1, 1, f"file is larger than the limit of {MAX_FILE_BYTES} bytes")
    if content.startswith((b"\xff\xfe", b"\xfe\xff")):
        return fail(1, 1, "file is UTF-16; save it as UTF-8")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return fail(*_offset_to_line_col(content, exc.start), "file is not valid UTF-8")
    text = text.removeprefix("\ufeff")
    loader: _Loader | None = None
    try:
        root = _compose_fast(text) if fast else None
        fast = root is not None
        if root is None:
            loader = _Loader(text)
            root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if mark is None:  # pragma: no cover - PyYAML always marks parse errors
            return fail(1, 1, str(exc))
        return fail(mark.line + 1, mark.column + 1, _yaml_message(exc))
    except yaml.reader.ReaderError as exc:
        line, col = _offset_to_line_col(text, exc.position)
        return fail(line, col, f"unacceptable character #x{exc.character:04x}")
    except _Fail as exc:
        return fail(exc.line, exc.col, exc.message)
    except RecursionError:
        return fail(1, 1, f"nesting deeper than {MAX_DEPTH} levels")
    except yaml.YAMLError as exc:  # pragma: no cover - defensive
        return fail(1, 1, f"invalid YAML: {exc}")
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        return fail(1, 1, "file is empty")
    walker = _Walker()
    try:
        data = walker.walk(root, ())
    except _Fail as exc:
        if fast:
            return parse_yaml(path, content, fast=False)
        return fail(exc.line, exc.col, exc.message)
    return Document(path, data, walker.values, walker.keys), []


# --- the snapshot as files -------------------------------------------------------------


def check_path(path: str) -> str | None:
    """Why ``path`` is not an acceptable repo path, or ``None``."""
    if not path or "\x00" in path or "\\" in path:
        return "invalid path"
    if path.startswith("/"):
        return "absolute paths are not allowed"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "path must not contain '..', '.' or empty segments"
    return None


def resolve_files(snapshot: RepoSnapshot) -> tuple[dict[str, bytes], list[ConfigError]]:
    """Contents by path, with in-repo symlinks followed. Escaping links are errors."""
    out: dict[str, bytes] = {}
    errors: list[ConfigError] = []
    for path in sorted(snapshot.files):
        problem = check_path(path)
        if problem:
            errors.append(ConfigError(Location(path or "<repo>", 1, 1), problem))
            continue
        target = path
        for _ in range(MAX_SYMLINK_HOPS + 1):
            file = snapshot.files.get(target)
            if file is None:
                errors.append(
                    ConfigError(Location(path, 1, 1), f"symlink target {target!r} does not exist")
                )
                break
            if file.symlink_target is None:
                out[path] = file.content
                break
            link = file.symlink_target
            if link.startswith("/"):
                errors.append(
                    ConfigError(Location(path, 1, 1), f"symlink to {link!r} leaves the repo")
                )
                break
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(target), link))
            if joined == ".." or joined.startswith("../") or joined == ".":
                errors.append(
                    ConfigError(Location(path, 1, 1), f"symlink to {link!r} leaves the repo")
                )
                break
            target = joined
        else:
            errors.append(ConfigError(Location(path, 1, 1), "symlink loop"))
    return out, errors


class ParseCache:
    """Parsed documents kept between compiles, so a new commit reparses only the files
    whose content changed. Owned by the caller (the long-running reconciler); pure."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[bytes, Document | None, tuple[ConfigError, ...]]] = {}
        self.hits = 0
        self.misses = 0

    def parse(self, path: str, content: bytes) -> tuple[Document | None, list[ConfigError]]:
        entry = self._entries.get(path)
        if entry is not None and entry[0] == content:
            self.hits += 1
            return entry[1], list(entry[2])
        self.misses += 1
        doc, errors = parse_yaml(path, content)
        self._entries[path] = (content, doc, tuple(errors))
        return doc, errors

    def retain(self, paths: Iterable[str]) -> None:
        """Forget files no longer in the repo."""
        keep = set(paths)
        for path in [p for p in self._entries if p not in keep]:
            del self._entries[path]
