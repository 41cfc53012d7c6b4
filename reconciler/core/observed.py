"""Parse an observed-state file (``reconciler plan --observed FILE``): a YAML or JSON list

    - {operation: vision/train-1, phase: Running}
    - {operation: vision/train-2, phase: Dispatched, queue: team-a, cluster: local,
       requests: {nvidia.com/gpu: 2}}

Unlisted operations are Queued. Every problem is reported as ``file:line:col: message``.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import yaml

from reconciler.core.quantity import QuantityError, parse_quantity
from reconciler.core.types import ConfigError, Location, ObservedOperation, Phase

_KEYS = ("operation", "phase", "queue", "cluster", "requests")
_ID = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
)
_PHASES = {p.value.lower(): p for p in Phase}


class ObservedFileError(ValueError):
    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = tuple(sorted(errors))
        super().__init__("\n".join(str(e) for e in self.errors))


def _at(filename: str, node: yaml.Node | None) -> Location:
    if node is None:
        return Location(filename)
    mark = node.start_mark
    return Location(filename, mark.line + 1, mark.column + 1)


def _scalar(node: yaml.Node) -> Any:
    """The plain value of a scalar node (ints stay ints, strings strings)."""
    return yaml.safe_load(yaml.serialize(node))


def parse_observed(text: str, filename: str) -> tuple[ObservedOperation, ...]:
    """Parse the file's text; raises :class:`ObservedFileError` listing every problem."""
    if filename.endswith(".json"):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise ObservedFileError(
                [ConfigError(Location(filename, exc.lineno, exc.colno), f"invalid JSON: {exc.msg}")]
            ) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(filename, mark.line + 1, mark.column + 1) if mark else Location(filename)
        raise ObservedFileError(
            [ConfigError(where, f"invalid YAML: {exc.problem or exc.context}")]
        ) from None
    except yaml.YAMLError as exc:
        raise ObservedFileError([ConfigError(Location(filename), f"invalid YAML: {exc}")]) from None
    if root is None:
        return ()
    errors: list[ConfigError] = []

    def fail(node: yaml.Node | None, message: str) -> None:
        errors.append(ConfigError(_at(filename, node), message))

    if not isinstance(root, yaml.SequenceNode):
        fail(root, "expected a list of {operation, phase} entries")
        raise ObservedFileError(errors)

    out: list[ObservedOperation] = []
    first_seen: dict[str, int] = {}
    for item in root.value:
        if not isinstance(item, yaml.MappingNode):
            fail(item, "expected a mapping with operation and phase")
            continue
        fields: dict[str, yaml.Node] = {}
        for key_node, value_node in item.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in _KEYS:
                fail(key_node, f"unknown key {key!r} (expected one of: {', '.join(_KEYS)})")
            elif key in fields:
                fail(key_node, f"duplicate key {key!r}")
            else:
                fields[key] = value_node
        ok = True
        op_node, phase_node = fields.get("operation"), fields.get("phase")
        op_id = ""
        if op_node is None:
            fail(item, "missing key 'operation' (\"project/name\")")
            ok = False
        else:
            value = _scalar(op_node) if isinstance(op_node, yaml.ScalarNode) else None
            if not isinstance(value, str) or not _ID.match(value):
                fail(op_node, f'operation must be "project/name", got {value!r}')
                ok = False
            else:
                op_id = value
        phase: Phase | None = None
        if phase_node is None:
            fail(item, f"missing key 'phase' (one of: {', '.join(p.value for p in Phase)})")
            ok = False
        else:
            raw = phase_node.value if isinstance(phase_node, yaml.ScalarNode) else None
            phase = _PHASES.get(str(raw).lower()) if raw is not None else None
            if phase is None:
                fail(
                    phase_node,
                    f"unknown phase {raw!r} (one of: {', '.join(p.value for p in Phase)})",
                )
                ok = False
        names: dict[str, str | None] = {"queue": None, "cluster": None}
        for key in names:
            node = fields.get(key)
            if node is None:
                continue
            value = _scalar(node) if isinstance(node, yaml.ScalarNode) else None
            if not isinstance(value, str) or not value:
                fail(node, f"{key} must be a name")
                ok = False
            else:
                names[key] = value
        requests: dict[str, Decimal] | None = None
        req_node = fields.get("requests")
        if req_node is not None:
            if not isinstance(req_node, yaml.MappingNode):
                fail(req_node, "requests must map resource names to quantities")
                ok = False
            else:
                requests = {}
                for k, v in req_node.value:
                    if not isinstance(v, yaml.ScalarNode):
                        fail(v, f"requests.{k.value}: expected a quantity")
                        ok = False
                        continue
                    try:
                        requests[str(k.value)] = parse_quantity(_scalar(v))
                    except QuantityError as exc:
                        fail(v, f"requests.{k.value}: {exc}")
                        ok = False
        if op_id and op_node is not None:
            line = op_node.start_mark.line + 1
            if op_id in first_seen:
                fail(op_node, f"operation {op_id} is already listed on line {first_seen[op_id]}")
                ok = False
            else:
                first_seen[op_id] = line
        if ok and phase is not None:
            out.append(ObservedOperation(op_id, phase, requests, names["queue"], names["cluster"]))
    if errors:
        raise ObservedFileError(errors)
    return tuple(out)
