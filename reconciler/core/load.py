"""The strict YAML loader: repo bytes in, plain data plus source positions out.

Rules (each violation is a ``ConfigError`` with ``file:line:col``, never an exception):

1. Paths are relative posix paths inside the repo; ``..``, absolute paths and symlinks that
   leave the repo are refused. Symlinks inside the repo are followed, to files and to
   directories (loops are refused).
2. Files are UTF-8 (a BOM is tolerated) and at most ``MAX_FILE_BYTES``.
3. YAML 1.2 core schema: only ``true``/``false`` are booleans (``yes``, ``no``, ``on``,
   ``off`` stay strings), no timestamps, no merge keys, no custom tags.
4. Duplicate mapping keys are errors; keys are strings.
5. One document per file; alias expansion is bounded by ``MAX_NODES`` values and
   ``MAX_EXPANDED_CHARS`` characters of text, nesting by ``MAX_DEPTH``, so a "billion
   laughs" file (of many small values or of a few long strings) costs nothing.
6. Only config paths are read (:func:`is_config_path`); symlinks are followed as a
   checkout would, only where the loader reads (:func:`resolve_paths`).

The same loader and limits read every YAML input: config files, ``plan --observed`` files
and the status branch.

What must live here: the loader's limits and parse (``parse_yaml``), which paths are config
files, and the ``ParseCache`` that keeps unchanged files parsed between commits.
"""

from __future__ import annotations

import bisect
import math
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
# Text of every key and value after alias expansion, per file: what the largest file could
# hold written out, so only aliases can pass it (20 000 aliases of a long string would
# otherwise be gigabytes once compiled and rendered).
MAX_EXPANDED_CHARS = 1 << 20
MAX_DEPTH = 48  # nesting of maps and lists
MAX_SYMLINK_HOPS = 8  # links followed to reach one file; directory links nested
MAX_LINKED_FILES = 10_000  # config files that directory symlinks may add, in all
MAX_LINK_TARGET_BYTES = 4096  # PATH_MAX: a longer symlink target names no file
MAX_NUMBER_CHARS = 100  # a number literal longer than this is a typo (or an attack)
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"  # how every LFS pointer begins

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
# The core schema's numbers: what an untagged scalar must look like to be read as one, and
# what a scalar tagged ``!!int`` or ``!!float`` must look like (Python's ``int`` and
# ``float`` also take ``1_0``, `` 7``, ``nan`` and any script's digits).
_CORE_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_CORE_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_Yaml12Resolver.add_implicit_resolver(_INT, _CORE_INT, list("-+0123456789"))
_Yaml12Resolver.add_implicit_resolver(_FLOAT, _CORE_FLOAT, list("-+.0123456789"))


Resolvers = dict[Any, list[tuple[str, re.Pattern[str]]]]  # first character -> [(tag, pattern)]
# To quote, when writing YAML, every string that YAML 1.2 reads as something else.
YAML12_RESOLVERS: Resolvers = _Yaml12Resolver.yaml_implicit_resolvers


class _WrittenResolver(yaml.resolver.BaseResolver):
    """For files PyYAML wrote (the status branch): a plain scalar is a number, a boolean or
    null only where YAML 1.1 (the writer's schema) and 1.2 agree on it. PyYAML quotes every
    string that 1.1 would read otherwise, but not ``1e3``, ``09`` or ``-.5``: to 1.2 those
    are numbers, yet they were written as strings (a hex hash can look like ``123e45``)."""


_WrittenResolver.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_WrittenResolver.add_implicit_resolver(
    _NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_WrittenResolver.add_implicit_resolver(
    _INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
)
_WrittenResolver.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|\.[0-9]+(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)
WRITTEN_RESOLVERS: Resolvers = _WrittenResolver.yaml_implicit_resolvers


class _Loader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    _Yaml12Resolver,
):
    def __init__(self, stream: str, resolvers: Resolvers | None = None) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Yaml12Resolver.__init__(self)
        if resolvers is not None:
            self.yaml_implicit_resolvers = resolvers
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
        def __init__(self, stream: str, resolvers: Resolvers | None = None) -> None:
            _CParser.__init__(self, stream)
            _Yaml12Resolver.__init__(self)
            if resolvers is not None:
                self.yaml_implicit_resolvers = resolvers

        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            """``BaseResolver.resolve`` for these resolvers (no path resolvers, none for
            any first character), called by libyaml for every node: without building
            a list of candidates each time."""
            if kind is ScalarNode:
                if implicit[0]:
                    for tag, regexp in self.yaml_implicit_resolvers.get(value[:1], ()):
                        if regexp.match(value):
                            return str(tag)
                return _STR
            return _SEQ if kind is SequenceNode else _MAP

    _CLoader = _LibYamlLoader


def _compose_fast(text: str, resolvers: Resolvers | None = None) -> Node | None:
    """The node tree from libyaml, several times faster than the pure-Python composer, for
    plain files. None sends the file to the pure composer, which gives every error (and
    every odd case) its usual message."""
    if _CLoader is None or _NON_PRINTABLE.search(text):
        return None
    if text.count("[") + text.count("{") > _MAX_FAST_BRACKETS:
        return None
    loader = _CLoader(text, resolvers)
    try:
        node: Node | None = loader.get_single_node()
        return node
    except (yaml.YAMLError, RecursionError):
        return None
    finally:
        loader.dispose()


# --- the plain reader: the common shape of a config file, without libyaml --------------
# A file of block maps and lists whose values are one-line scalars (plain, or quoted
# without escapes) or one-line flow lists and maps of such scalars and of such lists and
# maps, nested (``resources: {requests: {cpu: 10m}}``), with comments: what nearly every
# config file is. Anything else (anchors, tags, block scalars, multi-line values, empty
# values, documents markers, tabs, non-ASCII text, a problem of any kind) is left to
# libyaml and the composer (``_Plain`` -> None), so the result is the same.

_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_./-]{0,999}):(?: +|$)")
_FLOW_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_./-]{0,999}): +")
_SAFE = r"[^\s#:,\[\]{}'\"]"  # inside a plain scalar: never an indicator here
_FIRST = r"(?:[A-Za-z0-9_./~+$(=^]|-(?=[A-Za-z0-9_./~+$(=^-]))"
# In a block, ':' may sit inside a plain scalar when a safe character follows it; in a
# flow collection never (libyaml and YAML 1.2 disagree there).
_PLAIN_BLOCK = re.compile(_FIRST + r"(?:" + _SAFE + r"|:(?=" + _SAFE + r")| +(?=" + _SAFE + r"))*")
_PLAIN_FLOW = re.compile(_FIRST + r"(?:" + _SAFE + r"| +(?=" + _SAFE + r"))*")
_KEY_PLAIN = re.compile(
    r"([A-Za-z0-9_][A-Za-z0-9_./-]{0,999}): +(" + _PLAIN_BLOCK.pattern + r")(?: +#.*| *)$"
)
_FLOW_ITEM = re.compile(r"(" + _PLAIN_FLOW.pattern + r") *([,\]]) *")
_SINGLE = re.compile(r"'([^'\n]*)'(?!')")
_DOUBLE = re.compile(r'"([^"\\\n]*)"')
_TRAIL = re.compile(r"(?: +#.*| *)$")
_SPACES = re.compile(r" *")
_PLAIN_TEXT = re.compile(r"[\n\x20-\x7e]*")  # printable ASCII lines: no tab, no CR


_PLAIN_READER = True  # tests turn it off to compare with libyaml's reading


class _Slow(Exception):
    """Internal: the plain reader leaves this file to libyaml and the composer."""


class _Plain:
    """Reads a file of the plain shape (above) into the data and positions the composer
    and :class:`_Walker` give it; :func:`_read_plain` returns None for any other file.

    Without aliases, nothing is counted twice: the nodes are the positions recorded
    (checked once, at the end), and the text of every key and value is shorter than the
    file, itself at most ``MAX_FILE_BYTES`` = ``MAX_EXPANDED_CHARS``."""

    __slots__ = ("keys", "resolved", "rows", "values")

    def __init__(self, text: str, resolved: _Resolved) -> None:
        self.resolved = resolved  # plain scalar -> its value (a memo of the resolvers')
        self.values: dict[PathKey, tuple[int, int]] = {}
        self.keys: dict[PathKey, tuple[int, int]] = {}
        rows: list[tuple[int, int, str]] = []  # (line, indent, text) of each content line
        for number, line in enumerate(text.split("\n"), 1):
            content = line.lstrip(" ")
            if content and content[0] != "#":
                rows.append((number, len(line) - len(content), line))
        self.rows = rows

    def read(self) -> Any:
        rows = self.rows
        if not rows or rows[0][1] != 0:
            raise _Slow
        data, end = self._block(0, 0, ())
        if end != len(rows) or len(self.values) > MAX_NODES:
            raise _Slow
        return data

    def _key(self, key: str, line: int, col: int, out: dict[str, Any], path: PathKey) -> PathKey:
        if key in out or type(self.resolved[key]) is not str:
            raise _Slow  # a duplicate, or not a string
        sub = (*path, key)
        self.keys[sub] = (line, col + 1)
        return sub

    def _block(self, index: int, indent: int, path: PathKey) -> tuple[Any, int]:
        if len(path) >= MAX_DEPTH:
            raise _Slow
        if self.rows[index][2].startswith("- ", indent):
            return self._sequence(index, indent, path)
        return self._mapping(index, indent, path, False)

    def _mapping(
        self, index: int, indent: int, path: PathKey, inline: bool
    ) -> tuple[dict[str, Any], int]:
        """The block map whose first key is at column ``indent`` of row ``index`` (in a
        list item when ``inline``: the row itself starts with ``- ``)."""
        rows = self.rows
        self.values[path] = (rows[index][0], indent + 1)
        out: dict[str, Any] = {}
        count = len(rows)
        while index < count:
            number, at, line = rows[index]
            if inline:
                inline = False
            elif at != indent:
                if at < indent:
                    break
                raise _Slow
            match = _KEY_PLAIN.match(line, indent)
            if match is not None:  # ``key: plain scalar``, the most common line
                key, text = match.group(1, 2)
                sub = self._key(key, number, indent, out, path)
                self.values[sub] = (number, match.start(2) + 1)
                out[key] = self.resolved[text]
                index += 1
                continue
            match = _KEY.match(line, indent)
            if match is None:
                raise _Slow
            key = match.group(1)
            sub = self._key(key, number, indent, out, path)
            rest = match.end()
            index += 1
            if rest < len(line) and line[rest] != "#":
                out[key] = self._inline(line, rest, number, sub)
                continue
            # ``key:``: its value is the block below
            if index == count:
                raise _Slow  # an empty value
            below, line = rows[index][1], rows[index][2]
            if below > indent:
                out[key], index = self._block(index, below, sub)
            elif below == indent and line.startswith("- ", indent):
                out[key], index = self._sequence(index, indent, sub)
            else:
                raise _Slow  # an empty value
        return out, index

    def _sequence(self, index: int, indent: int, path: PathKey) -> tuple[list[Any], int]:
        if len(path) >= MAX_DEPTH:
            raise _Slow
        rows = self.rows
        self.values[path] = (rows[index][0], indent + 1)
        items: list[Any] = []
        count = len(rows)
        while index < count:
            number, at, line = rows[index]
            if at != indent:
                if at < indent:
                    break
                raise _Slow
            if not line.startswith("- ", indent):
                break  # the next key of the map this list is a value of, or an error there
            col = _SPACES.match(line, indent + 2).end()  # type: ignore[union-attr]
            if col == len(line) or line[col] == "#":
                raise _Slow  # an empty item, or one below
            sub = (*path, len(items))
            if _KEY.match(line, col) is not None:
                item, index = self._mapping(index, col, sub, True)
                items.append(item)
                continue
            items.append(self._inline(line, col, number, sub))
            index += 1
        return items, index

    def _inline(self, line: str, col: int, number: int, path: PathKey) -> Any:
        """The one-line value at ``col`` of ``line``, then only spaces or a comment."""
        first = line[col]
        if first == "[" or first == "{":
            value, end = self._flow(line, col, number, path)
        else:
            value, end = self._scalar(line, col, number, path, _PLAIN_BLOCK)
        if _TRAIL.match(line, end) is None:
            raise _Slow
        return value

    def _scalar(
        self, line: str, col: int, number: int, path: PathKey, plain: re.Pattern[str]
    ) -> tuple[Any, int]:
        self.values[path] = (number, col + 1)
        first = line[col]
        if first == "'" or first == '"':
            match = (_SINGLE if first == "'" else _DOUBLE).match(line, col)
            if match is None:
                raise _Slow
            return match.group(1), match.end()
        match = plain.match(line, col)
        if match is None:
            raise _Slow
        text = match.group()
        return self.resolved[text], match.end()

    def _flow(self, line: str, col: int, number: int, path: PathKey) -> tuple[Any, int]:
        """The flow list or map whose opening bracket is at ``col``, closed on the same line.
        Its position is that bracket's, as the composer's node's; at ``MAX_DEPTH`` it is
        left to libyaml (the walker refuses any item in it)."""
        if len(path) >= MAX_DEPTH:
            raise _Slow
        self.values[path] = (number, col + 1)
        if line[col] == "[":
            return self._flow_list(line, col + 1, number, path)
        return self._flow_map(line, col + 1, number, path)

    def _flow_list(self, line: str, col: int, number: int, path: PathKey) -> tuple[Any, int]:
        items: list[Any] = []
        col = _SPACES.match(line, col).end()  # type: ignore[union-attr]
        if line[col] == "]":
            return items, col + 1
        values, resolved = self.values, self.resolved
        while True:
            match = _FLOW_ITEM.match(line, col)
            if match is not None:  # a plain item, then ``,`` or ``]`` (spaces around)
                values[(*path, len(items))] = (number, col + 1)
                items.append(resolved[match.group(1)])
                if match.group(2) == "]":
                    return items, match.end(2)  # what follows is the line's (a comment)
                col = match.end()
                continue
            sub = (*path, len(items))
            if line[col] in "[{":
                item, col = self._flow(line, col, number, sub)
            else:
                item, col = self._scalar(line, col, number, sub, _PLAIN_FLOW)
            items.append(item)
            col = _SPACES.match(line, col).end()  # type: ignore[union-attr]
            if line[col] == "]":
                return items, col + 1
            if line[col] != ",":
                raise _Slow
            col = _SPACES.match(line, col + 1).end()  # type: ignore[union-attr]

    def _flow_map(self, line: str, col: int, number: int, path: PathKey) -> tuple[Any, int]:
        out: dict[str, Any] = {}
        col = _SPACES.match(line, col).end()  # type: ignore[union-attr]
        if line[col] == "}":
            return out, col + 1
        while True:
            match = _FLOW_KEY.match(line, col)
            if match is None:
                raise _Slow
            key = match.group(1)
            sub = self._key(key, number, col, out, path)
            col = match.end()
            if line[col] in "[{":
                out[key], col = self._flow(line, col, number, sub)
            else:
                out[key], col = self._scalar(line, col, number, sub, _PLAIN_FLOW)
            col = _SPACES.match(line, col).end()  # type: ignore[union-attr]
            if line[col] == "}":
                return out, col + 1
            if line[col] != ",":
                raise _Slow
            col = _SPACES.match(line, col + 1).end()  # type: ignore[union-attr]


class _Resolved(dict[str, Any]):
    """Plain scalars -> their values under one set of implicit resolvers, those that
    are not the string itself (a number, a boolean, null), computed on first use; one
    that must be refused raises ``_Slow``. Bounded: cleared past ``_RESOLVED_MAX``."""

    def __init__(self, resolvers: Resolvers) -> None:
        super().__init__()
        self.resolvers = resolvers

    def __missing__(self, text: str) -> Any:
        value: Any = text
        for tag, regexp in self.resolvers.get(text[:1], ()):
            if regexp.match(text):
                if tag != _STR:
                    try:
                        value = _scalar_value(tag, text, 1, 1)
                    except _Fail:
                        raise _Slow from None
                break
        if len(self) >= _RESOLVED_MAX:
            self.clear()
        self[text] = value
        return value


_RESOLVED_MAX = 4096
_RESOLVED: dict[int, _Resolved] = {}  # by id of the resolvers (module constants)


def _read_plain(
    text: str, resolvers: Resolvers | None
) -> tuple[Any, dict[PathKey, tuple[int, int]], dict[PathKey, tuple[int, int]]] | None:
    """The data, value positions and key positions of a file of the plain shape, or None
    (:class:`_Plain`)."""
    if len(text) > MAX_EXPANDED_CHARS or _PLAIN_TEXT.fullmatch(text) is None:
        return None
    resolvers = resolvers if resolvers is not None else YAML12_RESOLVERS
    resolved = _RESOLVED.get(id(resolvers))
    if resolved is None or resolved.resolvers is not resolvers:
        resolved = _RESOLVED[id(resolvers)] = _Resolved(resolvers)
    reader = _Plain(text, resolved)
    try:
        data = reader.read()
    except (_Slow, IndexError):
        return None
    return data, reader.values, reader.keys


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
        return Location(self.path, *self.pos(p))

    def pos(self, path: PathKey) -> tuple[int, int]:
        """``(line, col)`` of the value at ``path`` (a tuple), or of its nearest known
        ancestor: :meth:`loc`'s position without building a ``Location`` (provenance asks
        for one per leaf per operation)."""
        values = self.values
        found = values.get(path)
        if found is not None:
            return found
        while path:
            path = path[:-1]
            found = values.get(path)
            if found is not None:
                return found
        return (1, 1)

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
    return _scalar_value(node.tag, node.value, *_pos(node))


def _scalar_value(tag: str, value: str, line: int, col: int) -> Any:
    """The scalar ``value`` of ``tag`` as data; ``line`` and ``col`` locate a refusal."""
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
            line,
            col,
            f"number is {len(value)} characters long; the limit is {MAX_NUMBER_CHARS}",
        )
    elif tag == _INT:
        if _CORE_INT.fullmatch(value):  # not ``match``: its ``$`` passes a final newline
            v = value
            if v.startswith("0o"):
                return int(v[2:], 8)
            if v.startswith("0x"):
                return int(v[2:], 16)
            return int(v, 10)
    elif tag == _FLOAT:
        if _CORE_FLOAT.fullmatch(value):
            low = value.lower()
            if ".inf" in low or ".nan" in low:
                raise _Fail(line, col, f"{value!r}: infinity and NaN are not allowed here")
            number = float(value)
            if not math.isfinite(number):
                raise _Fail(line, col, f"number {value!r} is out of range")
            return number
    else:
        raise _Fail(line, col, f"unsupported YAML tag {tag!r}")
    raise _Fail(line, col, f"{value!r} is not a valid {tag.rsplit(':', 1)[-1]}")


class _Walker:
    """Turns a composed node graph into plain data, recording positions per path."""

    def __init__(self) -> None:
        self.count = 0
        self.chars = 0
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
        mark = node.start_mark
        self.values[path] = (mark.line + 1, mark.column + 1)
        if type(node) is ScalarNode:  # ``_text`` and ``_scalar``'s string case, inline
            value = node.value
            self.chars += len(value)
            if self.chars > MAX_EXPANDED_CHARS:
                self.chars -= len(value)
                self._text(node)  # raises, with its message
            if node.style == '"' and _SURROGATE.search(value):
                value = _paired(node)
            return value if node.tag == _STR else _scalar(node)
        if isinstance(node, ScalarNode):
            self._text(node)
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
                    sub = (*path, key)
                    if key in out:
                        first = self.keys[sub]
                        raise _Fail(
                            *_pos(key_node),
                            f"duplicate key {key!r} (first defined at line {first[0]})",
                        )
                    self.keys[sub] = _pos(key_node)
                    out[key] = self.walk(value_node, sub)
                return out
        finally:
            self.stack.discard(id(node))
        raise _Fail(*_pos(node), "unsupported YAML node")  # pragma: no cover

    def _text(self, node: ScalarNode) -> None:
        self.chars += len(node.value)
        if self.chars > MAX_EXPANDED_CHARS:
            raise _Fail(
                *_pos(node),
                f"the document expands to more than {MAX_EXPANDED_CHARS} characters of text "
                "(alias bomb?)",
            )

    def _key(self, node: Node) -> str:
        if not isinstance(node, ScalarNode):
            raise _Fail(*_pos(node), "mapping keys must be plain strings")
        self._text(node)
        if (
            node.tag == _STR and node.value == "<<" and not node.style
        ):  # plain: None, or "" from libyaml
            raise _Fail(*_pos(node), "merge keys ('<<') are not supported (YAML 1.2)")
        value = _scalar(node)
        if not isinstance(value, str):
            raise _Fail(*_pos(node), f"mapping key {node.value!r} must be a string (quote it)")
        if node.style == '"' and _SURROGATE.search(value):
            value = _paired(node)
        return value


# Line breaks to YAML 1.1 (PyYAML and libyaml), ordinary characters to YAML 1.2 and to
# editors: read as breaks, a key could hide inside what an editor shows as one line, and
# every line number after one would be off. Written escaped (``"\L"``) they are fine.
_UNSEEN_BREAKS = {"\x85": "NEL", "\u2028": "LS", "\u2029": "PS"}
_UNSEEN_BREAK = re.compile("[\x85\u2028\u2029]")


# Only a double-quoted scalar has escapes, and only an escape gives a surrogate (the text is
# UTF-8). A pair is one character, as JSON writes it (``"\ud83d\ude00"``); a lone one is no
# character, and no UTF-8 encoder takes it (the Job's body).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _paired(node: ScalarNode) -> str:
    """``node``'s string with each escaped surrogate pair made the character it encodes;
    a lone surrogate is refused."""
    value: str = node.value
    out: list[str] = []
    i = 0
    while i < len(value):
        char = value[i]
        if (
            "\ud800" <= char <= "\udbff"
            and i + 1 < len(value)
            and "\udc00" <= value[i + 1] <= "\udfff"
        ):
            pair = (ord(char) - 0xD800) * 0x400 + (ord(value[i + 1]) - 0xDC00) + 0x10000
            out.append(chr(pair))
            i += 2
            continue
        if "\ud800" <= char <= "\udfff":
            raise _Fail(
                *_pos(node),
                f"an escape of U+{ord(char):04X}, a UTF-16 surrogate without its pair, is not "
                "a character: write the character itself",
            )
        out.append(char)
        i += 1
    return "".join(out)


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
    path: str, content: bytes, *, fast: bool = True, written: bool = False
) -> tuple[Document | None, list[ConfigError]]:
    """Parse one file strictly. Returns the document, or ``None`` and its errors.

    ``fast`` reads a file of the common plain shape itself (:class:`_Plain`) and lets
    libyaml compose any other; any error is then found again by the pure composer, so a
    file gets the same message and position either way. ``written`` reads a
    file PyYAML wrote (the status branch) with :class:`_WrittenResolver`: same limits, same
    strictness, only fewer plain scalars taken for numbers."""
    resolvers = WRITTEN_RESOLVERS if written else None

    def fail(line: int, col: int, message: str) -> tuple[None, list[ConfigError]]:
        return None, [ConfigError(Location(path, line, col), message)]

    if len(content) > MAX_FILE_BYTES:
        return fail(1, 1, f"file is larger than the limit of {MAX_FILE_BYTES} bytes")
    if content.startswith((b"\xff\xfe", b"\xfe\xff")):
        return fail(1, 1, "file is UTF-16; save it as UTF-8")
    if content.startswith(_LFS_POINTER):
        return fail(
            1,
            1,
            "file is a Git LFS pointer: the commit holds a pointer, not the file, and the "
            "reconciler reads commits; keep config files out of LFS (.gitattributes)",
        )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return fail(*_offset_to_line_col(content, exc.start), "file is not valid UTF-8")
    text = text.removeprefix("\ufeff")
    if fast and _PLAIN_READER:
        plain = _read_plain(text, resolvers)
        if plain is not None:
            return Document(path, *plain), []
    # PyYAML writes them unescaped in single-quoted strings: a file it wrote keeps them.
    unseen = None if written else _UNSEEN_BREAK.search(text)
    if unseen is not None:
        char = unseen.group()
        return fail(
            *_offset_to_line_col(text, unseen.start()),
            f"character U+{ord(char):04X} ({_UNSEEN_BREAKS[char]}): YAML 1.1 readers break the "
            "line there and editors do not; write it escaped in a double-quoted string if you "
            "mean it",
        )
    loader: _Loader | None = None
    try:
        root = _compose_fast(text, resolvers) if fast else None
        fast = root is not None
        if root is None:
            loader = _Loader(text, resolvers)
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
            return parse_yaml(path, content, fast=False, written=written)
        return fail(exc.line, exc.col, exc.message)
    return Document(path, data, walker.values, walker.keys), []


# --- the snapshot as files -------------------------------------------------------------

YAML_EXT = (".yaml", ".yml")
CONFIG_DIRS = (
    "clusters",
    "cohorts",
    "connections",
    "flavors",
    "queues",
    "presets",
    "projects",
)
ORG_FILES = ("reconciler.yaml", "reconciler.yml")


def is_config_path(path: str) -> bool:
    """Whether the loader reads a file at ``path``: ``reconciler.yaml`` and every YAML file
    under ``clusters/``, ``cohorts/``, ``connections/``, ``flavors/``, ``queues/``,
    ``presets/`` and ``projects/``.
    Everything else (README.md, docs/, schemas/, a YAML file at the top or under .github/)
    is ignored: never read, and a symlink there is never followed."""
    if not path.endswith(YAML_EXT):
        return False
    top, slash, _ = path.partition("/")
    return top in CONFIG_DIRS if slash else path in ORG_FILES


def _followed(path: str) -> bool:
    """Whether a symlink at ``path`` is followed: it may be (or lead to) a config file."""
    return path.partition("/")[0] in CONFIG_DIRS or path in ORG_FILES


def check_path(path: str) -> str | None:
    """Why ``path`` is not an acceptable repo path, or ``None``."""
    if not path or "\x00" in path or "\\" in path:
        return "invalid path"
    if path.startswith("/"):
        return "absolute paths are not allowed"
    dotted = path.startswith(".") or "/." in path  # else no '.' nor '..' segment: fast
    if "//" in path or path.endswith("/") or (dotted and {".", ".."} & set(path.split("/"))):
        return "path must not contain '..', '.' or empty segments"
    return None


def _contains(directory: str, path: str) -> bool:
    """Whether ``path`` is ``directory`` or inside it (``""`` is the repo root)."""
    return not directory or path == directory or path.startswith(directory + "/")


class _Tree:
    """The snapshot as a directory tree, for following symlinks as a checkout would."""

    def __init__(self, snapshot: RepoSnapshot, paths: list[str]) -> None:
        self.files = snapshot.files
        self.paths = paths  # sorted, each a valid path
        self.dirs = {p.rsplit("/", 1)[0] for p in self.paths if "/" in p}
        for d in list(self.dirs):
            while "/" in d:
                d = d.rsplit("/", 1)[0]
                self.dirs.add(d)
        self.out: dict[str, str] = {}
        self.errors: list[ConfigError] = []
        self.linked = 0  # files added by directory links

    def under(self, directory: str) -> list[str]:
        """Every entry below ``directory`` (files and symlinks), in order."""
        if not directory:
            return self.paths
        prefix = directory + "/"
        start = bisect.bisect_left(self.paths, prefix)
        end = bisect.bisect_left(self.paths, directory + "0")  # '0' follows '/'
        return self.paths[start:end]

    def resolve(self, path: str) -> tuple[str, str] | str:
        """``("file", real path)`` or ``("dir", real directory)`` for ``path``, every
        symlink on the way followed; or why it cannot be (a message)."""
        pending = path.split("/")
        here = ""  # the real directory resolved so far
        hops = 0
        while pending:
            name = pending.pop(0)
            candidate = f"{here}/{name}" if here else name
            file = self.files.get(candidate)
            if file is not None and file.submodule:
                return f"symlink target {_short(candidate)} {SUBMODULE}"
            if file is not None and file.symlink_target is not None:
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    return "symlink loop"
                link = file.symlink_target
                joined = posixpath.normpath(posixpath.join(here, link))
                if link.startswith("/") or joined == ".." or joined.startswith("../"):
                    if candidate == path:
                        return f"symlink to {_short(link)} leaves the repo"
                    first = self.files[path].symlink_target
                    return (
                        f"symlink to {_short(first)} leaves the repo "
                        f"({_short(candidate)} links to {_short(link)})"
                    )
                pending = ([] if joined == "." else joined.split("/")) + pending
                here = ""
            elif file is not None:
                if pending:
                    return f"symlink target {_short(candidate)} is a file, not a directory"
                return "file", candidate
            elif candidate in self.dirs:
                here = candidate
            else:
                missing = "/".join([candidate, *pending])
                return f"symlink target {_short(missing)} does not exist"
        return "dir", here

    def add(self, path: str, real: str) -> None:
        if is_config_path(path):
            self.out[path] = real

    def follow(self, path: str, real_link: str, chain: tuple[str, ...] = ()) -> None:
        """Follow the symlink ``real_link``, seen at ``path``: a file is read there, a
        directory's files appear under ``path`` (as in a checkout)."""
        got = self.resolve(real_link)
        if isinstance(got, str):
            self.errors.append(ConfigError(Location(path, 1, 1), got))
            return
        kind, real = got
        if kind == "file":
            self.add(path, real)
            return
        if _contains(real, real_link) or any(_contains(real, c) for c in chain):
            self.errors.append(
                ConfigError(
                    Location(path, 1, 1),
                    f"symlink loop: {_short(self.files[real_link].symlink_target)} is a "
                    "directory that contains the link",
                )
            )
            return
        if len(chain) >= MAX_SYMLINK_HOPS:
            self.errors.append(
                ConfigError(Location(path, 1, 1), "symlink loop (directory links too deep)")
            )
            return
        for entry in self.under(real):
            inner = f"{path}/{entry[len(real) + 1 :]}" if real else f"{path}/{entry}"
            if self.files[entry].submodule:
                self.errors.append(ConfigError(Location(inner, 1, 1), SUBMODULE))
            elif self.files[entry].symlink_target is not None:
                self.follow(inner, entry, (*chain, real))
            elif is_config_path(inner):
                self.linked += 1
                if self.linked > MAX_LINKED_FILES:
                    self.errors.append(
                        ConfigError(
                            Location(path, 1, 1),
                            f"directory symlinks add more than {MAX_LINKED_FILES} files",
                        )
                    )
                    return
                self.add(inner, entry)


# A submodule is a commit of another repo: a checkout may show its files, the commit does
# not hold them. Skipping it would drop its files from the config without a word.
SUBMODULE = "is a Git submodule, which the reconciler does not read: commit its files instead"


def _short(text: str | None, limit: int = 80) -> str:
    text = text or ""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def resolve_paths(snapshot: RepoSnapshot) -> tuple[dict[str, str], list[ConfigError]]:
    """Each config file the loader reads (see :func:`is_config_path`) -> the real file it
    reads, symlinks followed as a checkout would: a link to a file reads that file, a link
    to a directory shows that directory's files under the link's path. Links that leave the
    repo, dangle or loop are errors at the link, and so are submodules (and links into
    them). Links, files and submodules elsewhere are ignored."""
    valid: list[str] = []
    errors: list[ConfigError] = []
    for path in sorted(snapshot.files):
        problem = check_path(path)
        if problem:
            errors.append(ConfigError(Location(path or "<repo>", 1, 1), problem))
        else:
            valid.append(path)
    tree = _Tree(snapshot, valid)
    tree.errors = errors
    for path in valid:
        file = snapshot.files[path]
        if file.submodule:
            if _followed(path):
                errors.append(ConfigError(Location(path, 1, 1), SUBMODULE))
        elif file.symlink_target is None:
            tree.add(path, path)
        elif _followed(path):
            tree.follow(path, path)
    return dict(sorted(tree.out.items())), tree.errors


def needed_paths(snapshot: RepoSnapshot) -> set[str]:
    """The real files whose content the loader reads: what an adapter must read (the rest
    of a snapshot may be listed with empty content)."""
    return set(resolve_paths(snapshot)[0].values())


def resolve_files(snapshot: RepoSnapshot) -> tuple[dict[str, bytes], list[ConfigError]]:
    """Contents by config path, with in-repo symlinks followed (:func:`resolve_paths`)."""
    paths, errors = resolve_paths(snapshot)
    return {path: snapshot.files[real].content for path, real in paths.items()}, errors


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
