"""The status files' YAML text, written directly for the values status records hold (pure).

``core/reporting/status.py`` writes every status file with PyYAML's libyaml dumper (sorted
keys, block style, no line wrapping, unicode as is). Most of that call's cost is PyYAML's
representer in Python: a node object and a resolver pass per scalar, then libyaml's emitter. For the
shapes a status record has (mappings with text keys, lists, text, integers, booleans, null
and floats, no line breaks in any text) this module writes the same bytes itself, by the
rules libyaml's emitter follows (``yaml_emitter_analyze_scalar`` and
``yaml_emitter_select_scalar_style`` in libyaml 0.2.5):

- a scalar is written plain when the dumper's implicit resolvers read its text back as its
  own type (a string that reads as a number, a boolean or null is quoted), and its text
  has no indicator that forbids a plain scalar in block context: a leading ``#``, ``,``,
  ``[``, ``]``, ``{``, ``}``, ``&``, ``*``, ``!``, ``|``, ``>``, ``'``, ``"``, ``%``, ``@``
  or backquote; a leading ``?``, ``:`` or ``-`` followed by a space or the end; ``:``
  followed by a space or the end; `` #``; a leading ``---`` or ``...``; a leading or
  trailing space;
- otherwise single-quoted, with ``'`` doubled;
- a mapping in block style, ``key: value`` a line, its nested mappings indented by two; a
  list in a mapping not indented (``- item`` at the mapping's own indent); a mapping or a
  list in a list begins on its item's line (``- a: 1``, ``- - 1``); an empty mapping or list
  ``{}`` / ``[]``.

A str subclass (a ``StrEnum``) is written as its text, as ``json.dumps`` writes it.
Anything else (a text with a line break, a tab or a character outside printable ASCII, a
key longer than 128 characters, a mapping or list met twice, a float that is not finite,
another type) returns None: the caller
then asks PyYAML for the whole document. ``tests/core/test_block_yaml.py`` holds this to
byte equality with PyYAML over generated documents, and the status golden files do too.

What must live here: the direct emitter and its fallback rule, nothing else: which records
are written is ``status.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# What forbids a plain scalar in block context (printable ASCII text without breaks).
_NOT_PLAIN = re.compile(
    r"^(?:---|\.\.\.)"
    r"|^[#,\[\]{}&*!|>'\"%@`]"
    r"|^[?:\-](?: |\Z)"
    r"|.:(?: |\Z)"
    r"| #"
    r"|^ | \Z"
)
# libyaml writes a longer key as a complex key (``? key``): not written here.
_MAX_SIMPLE_KEY = 128
_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"

_MAX_TEXTS = 1 << 18
Resolvers = Mapping[Any, list[tuple[str, re.Pattern[str]]]]


class BlockYaml:
    """A writer for one dumper's implicit resolvers (``yaml_implicit_resolvers`` of the
    dumper class whose output it reproduces)."""

    __slots__ = ("_resolvers", "_texts")

    def __init__(self, resolvers: Resolvers) -> None:
        wildcard = tuple(resolvers.get(None, ()))
        self._resolvers = {k: (*v, *wildcard) for k, v in resolvers.items() if k is not None}
        self._resolvers[None] = wildcard
        # each text's scalar as last written (most repeat from record to record: a phase,
        # a cluster, a commit); forgotten all at once past _MAX_TEXTS
        self._texts: dict[str, str | None] = {}

    def _tag(self, text: str) -> str:
        """The tag PyYAML's resolver gives a plain scalar of ``text``."""
        resolvers = self._resolvers.get(text[0] if text else "")
        for tag, regexp in self._resolvers[None] if resolvers is None else resolvers:
            if regexp.match(text):
                return tag
        return _STR

    def _text(self, value: str, *, key: bool) -> str | None:
        if key and len(value) > _MAX_SIMPLE_KEY:
            return None
        try:  # one lookup: another thread may clear the memo between two
            return self._texts[value]
        except KeyError:
            pass
        if len(self._texts) >= _MAX_TEXTS:
            self._texts.clear()
        text = self._texts[value] = self._written(value)
        return text

    def _written(self, value: str) -> str | None:
        if not (value.isascii() and value.isprintable()):
            return None  # a break, a tab, a control or non-ASCII character
        if value and self._tag(value) == _STR and _NOT_PLAIN.search(value) is None:
            return value
        return "'" + value.replace("'", "''") + "'"

    def _scalar(self, value: Any, *, key: bool = False) -> str | None:
        kind = type(value)
        if kind is str:
            return self._text(value, key=key)
        if isinstance(value, str):  # a StrEnum (a record's phase): written as its text,
            return self._text(str.__str__(value), key=key)  # as its JSON is
        if key:
            return None  # a mapping key other than text: left to PyYAML
        if kind is bool:
            return "true" if value else "false"
        if value is None:
            return "null"
        if kind is int:
            text = str(value)
            return text if self._tag(text) == _INT else None
        if kind is float:
            if value != value or value in (float("inf"), float("-inf")):
                return None
            text = repr(value).lower()
            if "." not in text and "e" in text:
                text = text.replace("e", ".0e", 1)
            return text if self._tag(text) == _FLOAT else None
        return None

    def _known_texts(self, items: list[Any]) -> list[str] | None:
        """Each item's scalar when every one is a text written before (a queue's order
        file: the same ids, cycle after cycle), looked up at C speed; None otherwise. Only
        a text (or a ``StrEnum``, written as its text) equals a memo's key."""
        try:
            texts = list(map(self._texts.__getitem__, items))
        except (KeyError, TypeError):  # not known, unhashable, or the memo was cleared
            return None
        return None if None in texts else texts  # type: ignore[return-value]

    def document(self, data: Mapping[str, Any]) -> str | None:
        """``data`` (a non-empty mapping) as PyYAML's dump writes it, or None when a value
        is not one this writer handles."""
        if type(data) is not dict or not data:
            return None
        out: list[str] = []
        try:
            if not self._mapping(data, 0, out, inline=False, seen=set()):
                return None
        except TypeError:  # keys that do not sort together
            return None
        return "".join(out)

    def _mapping(
        self, data: dict[Any, Any], indent: int, out: list[str], *, inline: bool, seen: set[int]
    ) -> bool:
        if not _once(data, seen):
            return False
        pad = " " * indent
        for i, (k, v) in enumerate(sorted(data.items(), key=_first)):
            key = self._scalar(k, key=True)
            if key is None:
                return False
            lead = "" if inline and i == 0 else pad
            kind = type(v)
            if kind is dict:
                if not v:
                    out.append(f"{lead}{key}: {{}}\n")
                    continue
                out.append(f"{lead}{key}:\n")
                if not self._mapping(v, indent + 2, out, inline=False, seen=seen):
                    return False
            elif kind is list:
                if not v:
                    out.append(f"{lead}{key}: []\n")
                    continue
                out.append(f"{lead}{key}:\n")
                if not self._sequence(v, indent, out, seen, inline=False):
                    return False
            else:
                text = self._scalar(v)
                if text is None:
                    return False
                out.append(f"{lead}{key}: {text}\n")
        return True

    def _sequence(
        self, items: list[Any], indent: int, out: list[str], seen: set[int], *, inline: bool
    ) -> bool:
        if not _once(items, seen):
            return False
        pad = " " * indent
        texts = self._known_texts(items)
        if texts:
            lines = ("\n" + pad + "- ").join(texts)
            out.append(f"{'' if inline else pad}- {lines}\n")
            return True
        for i, item in enumerate(items):
            lead = "" if inline and i == 0 else pad
            kind = type(item)
            if kind is dict:
                if not item:
                    out.append(f"{lead}- {{}}\n")
                    continue
                out.append(f"{lead}- ")
                if not self._mapping(item, indent + 2, out, inline=True, seen=seen):
                    return False
            elif kind is list:
                if not item:
                    out.append(f"{lead}- []\n")
                    continue
                out.append(f"{lead}- ")
                if not self._sequence(item, indent + 2, out, seen, inline=True):
                    return False
            else:
                text = self._scalar(item)
                if text is None:
                    return False
                out.append(f"{lead}- {text}\n")
        return True


def _first(item: tuple[Any, Any]) -> Any:
    return item[0]


def _once(container: object, seen: set[int]) -> bool:
    """False for a mapping or list met before in the same document: PyYAML would write an
    anchor and an alias for it (JSON data never has one)."""
    if id(container) in seen:
        return False
    seen.add(id(container))
    return True
