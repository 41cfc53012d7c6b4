"""Parse an observed-state file (``reconciler plan --observed FILE``): a YAML or JSON list

    - {operation: vision/train-1, phase: Running}
    - {operation: vision/train-2, phase: Dispatched, queue: team-a, cluster: local,
       requests: {nvidia.com/gpu: 2}}
    - {operation: vision/ddp, phase: Running, requests: {nvidia.com/gpu: 8}, pods: 4}

Unlisted operations are Queued. The file is read by the config's strict loader
(``core/load.py``), with the same limits: at most 1 MiB, YAML 1.2, no custom tags, aliases
and nesting bounded. Every problem is reported as ``file:line:col: message``.

What must live here: the reader of that one file and its errors; the phases it yields are
those of ``observe.py``.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from reconciler.core.load import Document, parse_yaml
from reconciler.core.quantity import QuantityError, parse_quantity
from reconciler.core.types import ConfigError, Location, ObservedOperation, Phase

_KEYS = ("operation", "phase", "queue", "cluster", "requests", "pods")
_ID = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
)
_PHASES = {p.value.lower(): p for p in Phase}
_SHOWN = 80  # characters of a bad value quoted in a message


class ObservedFileError(ValueError):
    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = tuple(sorted(errors))
        super().__init__("\n".join(str(e) for e in self.errors))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _json_error(content: bytes, filename: str) -> ConfigError | None:
    """JSON's own message for a ``.json`` file that is not JSON (e.g. a trailing comma)."""
    try:
        json.loads(content)
    except json.JSONDecodeError as exc:
        return ConfigError(Location(filename, exc.lineno, exc.colno), f"invalid JSON: {exc.msg}")
    except (ValueError, RecursionError):
        return None  # not UTF-8, a 5000-digit number, deep nesting: the loader says which
    return None


def parse_observed(content: str | bytes, filename: str) -> tuple[ObservedOperation, ...]:
    """Parse the file's content; raises :class:`ObservedFileError` listing every problem."""
    data = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
    if filename.endswith(".json") and data.strip():
        error = _json_error(data, filename)
        if error is not None:
            raise ObservedFileError([error])
    if not data.strip():
        return ()
    doc, errors = parse_yaml(filename, data)
    if doc is None and [e.message for e in errors] == ["file is empty"]:
        return ()  # only comments: nothing is observed
    if doc is None:
        raise ObservedFileError(
            [e if e.message.startswith("file ") else _invalid(e) for e in errors]
        )
    return _operations(doc)


def _invalid(error: ConfigError) -> ConfigError:
    return ConfigError(error.location, f"invalid YAML: {error.message}")


def _operations(doc: Document) -> tuple[ObservedOperation, ...]:
    errors: list[ConfigError] = []

    def fail(path: tuple[str | int, ...], message: str, *, key: bool = False) -> None:
        errors.append(ConfigError(doc.loc(path, key=key), message))

    if not isinstance(doc.data, list):
        fail((), "expected a list of {operation, phase} entries")
        raise ObservedFileError(errors)

    out: list[ObservedOperation] = []
    first_seen: dict[str, int] = {}
    for i, item in enumerate(doc.data):
        if not isinstance(item, dict):
            fail((i,), "expected a mapping with operation and phase")
            continue
        ok = True
        for key in item:
            if key not in _KEYS:
                fail(
                    (i, key),
                    f"unknown key {_show(key)} (expected one of: {', '.join(_KEYS)})",
                    key=True,
                )
        op_id = ""
        value = item.get("operation")
        if "operation" not in item:
            fail((i,), "missing key 'operation' (\"project/name\")")
            ok = False
        elif not isinstance(value, str) or not _ID.fullmatch(value):
            fail((i, "operation"), f'operation must be "project/name", got {_show(value)}')
            ok = False
        else:
            op_id = value
        phase: Phase | None = None
        raw = item.get("phase")
        if "phase" not in item:
            fail((i,), f"missing key 'phase' (one of: {', '.join(p.value for p in Phase)})")
            ok = False
        else:
            phase = _PHASES.get(raw.lower()) if isinstance(raw, str) else None
            if phase is None:
                fail(
                    (i, "phase"),
                    f"unknown phase {_show(raw)} (one of: {', '.join(p.value for p in Phase)})",
                )
                ok = False
        names: dict[str, str | None] = {"queue": None, "cluster": None}
        for key in names:
            if key not in item:
                continue
            name = item[key]
            if not isinstance(name, str) or not name:
                fail((i, key), f"{key} must be a name")
                ok = False
            else:
                names[key] = name
        requests: dict[str, Decimal] | None = None
        if "requests" in item:
            given = item["requests"]
            if not isinstance(given, dict):
                fail((i, "requests"), "requests must map resource names to quantities")
                ok = False
            else:
                requests = {}
                for resource, amount in given.items():
                    where = (i, "requests", resource)
                    if isinstance(amount, dict | list) or amount is None:
                        fail(where, f"requests.{resource}: expected a quantity")
                        ok = False
                        continue
                    try:
                        requests[resource] = parse_quantity(amount)
                    except QuantityError as exc:
                        fail(where, f"requests.{resource}: {exc}")
                        ok = False
        pods: int | None = None
        if "pods" in item:
            given = item["pods"]
            if isinstance(given, bool) or not isinstance(given, int) or given < 1:
                fail((i, "pods"), f"pods must be a whole number of at least 1, got {_show(given)}")
                ok = False
            else:
                pods = given
        if op_id:
            line = doc.loc((i, "operation")).line
            if op_id in first_seen:
                first = first_seen[op_id]
                fail((i, "operation"), f"operation {op_id} is already listed on line {first}")
                ok = False
            else:
                first_seen[op_id] = line
        if ok and phase is not None:
            out.append(
                ObservedOperation(
                    op_id, phase, requests, names["queue"], names["cluster"], pods=pods
                )
            )
    if errors:
        raise ObservedFileError(errors)
    return tuple(out)
