"""How the compiler reports a problem in the config: every part of this package reports
through one :class:`Errors` collector (``errors.add(location, message)``) and nothing else.

What must live here: the collector, the translation of pydantic validation errors into it,
and ``at`` (where a problem in a merged spec is reported: the provenance of the field).
A bug is not a problem in the config: it is raised as
:class:`~reconciler.core.types.InternalError`, never collected.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from reconciler.core.compile.merge import Path, dotted, lookup
from reconciler.core.compile.model import PARAM_VALUE_TAGS, Strict, field_names, suggest
from reconciler.core.types import ConfigError, Location, Provenance

# ``locate(path, key=...)``: where the value (or with ``key=True`` its key) at ``path`` is.
LocateError = Callable[..., Location]


class Errors:
    """The config errors of one scope (the repo's files, one operation, a workflow's
    children), in the order reported. :meth:`finish` gives them as callers see them: each
    once, sorted by location."""

    __slots__ = ("_items",)

    def __init__(self, errors: Iterable[ConfigError] = ()) -> None:
        self._items: list[ConfigError] = list(errors)

    def add(self, location: Location, message: str) -> None:
        self._items.append(ConfigError(location, message))

    def add_once(self, location: Location, message: str) -> None:
        """``add``, unless the same error was reported already."""
        error = ConfigError(location, message)
        if error not in self._items:
            self._items.append(error)

    def extend(self, errors: Iterable[ConfigError]) -> None:
        self._items.extend(errors)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[ConfigError]:
        return iter(self._items)

    def finish(self, *more: Iterable[ConfigError]) -> tuple[ConfigError, ...]:
        """These errors and ``more``, each once, sorted: what a compile reports."""
        return tuple(sorted(set(itertools.chain(self._items, *more))))


def at(prov: Mapping[Path, Provenance], path: Path, fallback: Location) -> Location:
    """Where to report a problem with the field at ``path`` of a merged spec: the place
    that set it, else ``fallback``."""
    found = lookup(prov, path)
    return found.location if found else fallback


def short(value: Any) -> str:
    """A value in a message, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _data_path(data: Any, loc: tuple[Any, ...], missing: bool) -> tuple[Path, bool, bool]:
    """Map a pydantic ``loc`` onto the data: (path, points at a key, skipped union labels)."""
    out: list[str | int] = []
    cur, is_key, skipped = data, False, False
    for i, part in enumerate(loc):
        if part == "[key]":
            is_key = True
        elif part in PARAM_VALUE_TAGS and not (isinstance(cur, dict) and part in cur):
            continue  # the tag of a union chosen by shape: the value itself, not a label
        elif (isinstance(cur, dict) and part in cur) or (
            isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        ):
            out.append(part)
            cur = cur[part]
        elif missing and i == len(loc) - 1:
            out.append(part)
        else:
            skipped = True
    return tuple(out), is_key, skipped


# pydantic's type errors, as the type they wanted
_TYPE_WORDS = {
    "int_type": "number",
    "int_parsing": "number",
    "float_type": "number",
    "decimal_type": "number",
    "string_type": "string",
    "bool_type": "boolean",
    "dict_type": "map",
    "list_type": "list",
}


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "map" if isinstance(value, dict) else "list" if isinstance(value, list) else "value"


def _wrong_type(wanted: list[str], value: Any) -> str:
    """``has the wrong type: expected a number, not a string``: what the field's union
    accepts (every member's type), and what it got."""
    if not wanted:
        return "has the wrong type"
    alts = wanted[0] if len(wanted) == 1 else f"{', '.join(wanted[:-1])} or {wanted[-1]}"
    got = _kind_of(value)
    return f"has the wrong type: expected a {alts}, not a {got}"


def _close_literal(error: Any, value: Any) -> str | None:
    """The allowed value of a ``Literal`` field a mistyped string most likely meant."""
    if error["type"] != "literal_error" or not isinstance(value, str):
        return None
    expected = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
    return suggest(value, expected) if expected else None


def add_validation_errors(
    errors: Errors,
    exc: ValidationError,
    data: Any,
    model: type[Strict],
    locate: LocateError,
    prefix: str = "",
) -> None:
    """Report pydantic's errors on ``data`` (validated as ``model``), one per field, each
    message after ``prefix``."""
    out: dict[tuple[Path, bool], tuple[Location, str]] = {}
    # what each field's union accepts, from its members' type errors: a union's error is
    # one per member, and names the types it wanted only together
    wanted: dict[tuple[Path, bool], list[str]] = {}
    for error in exc.errors():
        path, is_key, skipped = _data_path(data, tuple(error["loc"]), False)
        word = _TYPE_WORDS.get(error["type"])
        if skipped and word is not None and word not in wanted.setdefault((path, is_key), []):
            wanted[(path, is_key)].append(word)
    for error in exc.errors():
        kind = error["type"]
        path, is_key, skipped = _data_path(data, tuple(error["loc"]), kind == "missing")
        if kind == "extra_forbidden":
            name = str(path[-1]) if path else "?"
            message = f"unknown field {name!r}"
            allowed = field_names(model, path[:-1])
            if allowed:
                close = suggest(name, allowed)
                message += (
                    f" (did you mean {close!r}?)" if close else f" (allowed: {', '.join(allowed)})"
                )
            if len(path) > 1:
                message = f"{dotted(path[:-1])}: {message}"
            location, is_key = locate(path, key=True), True
        elif kind == "missing":
            message = f"missing required field {dotted(path)!r}"
            location = locate(path[:-1], key=False)
        else:
            msg = str(error["msg"])
            for drop in ("Value error, ", "Assertion failed, "):
                msg = msg.removeprefix(drop)
            if skipped and kind.endswith("_type"):
                msg = _wrong_type(wanted.get((path, is_key), []), error.get("input"))
            if kind.endswith("_type") or kind in ("literal_error", "enum"):
                value = error.get("input")
                if not isinstance(value, dict | list):
                    msg += f" (got {short(value)})"
                    close = _close_literal(error, value)
                    if close is not None:
                        msg += f" (did you mean {close!r}?)"
                else:
                    msg += f" (got a {'map' if isinstance(value, dict) else 'list'})"
            message = f"{dotted(path)}: {msg}" if path else msg
            location = locate(path, key=is_key)
        out.setdefault((path, is_key), (location, message))
    for location, message in out.values():
        errors.add(location, prefix + message)
