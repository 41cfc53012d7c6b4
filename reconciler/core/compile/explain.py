"""Per-field provenance of a compiled operation, for ``compile --explain`` and the web page:
which file, line and merge step (``preset <name> (<strategy>)``, ``operation``, ...) set
each leaf of the compiled spec. Pure.

What must live here: the provenance rows of one compiled operation and the text of each
value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reconciler.core.reporting.wire import ApiModel
from reconciler.core.types import CompiledOperation, printable_path


class ProvenanceRow(ApiModel):
    field: str  # dotted path into the compiled spec, e.g. ``resources.limits.nvidia.com/gpu``
    value: str  # the compiled value, as text
    step: str  # ``operation``, ``preset a100 (post_merge)``, ``project default``, ...
    file: str
    line: int

    @property
    def source(self) -> str:
        return f"{printable_path(self.file)}:{self.line}"


def value_text(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def spec_leaf(spec: Mapping[str, Any], dotted: str) -> Any:
    """The value at a provenance path; map keys may themselves contain dots."""

    def walk(value: Any, rest: str) -> Any:
        if not rest:
            return value
        if rest.startswith("["):
            end = rest.index("]")
            index = int(rest[1:end])
            if not isinstance(value, list) or index >= len(value):
                return None
            return walk(value[index], rest[end + 1 :].removeprefix("."))
        if not isinstance(value, dict):
            return None
        for key in sorted(value, key=len, reverse=True):
            if rest == key or rest.startswith(key + ".") or rest.startswith(key + "["):
                return walk(value[key], rest[len(key) :].removeprefix("."))
        return None

    return walk(spec, dotted)


def provenance_rows(op: CompiledOperation) -> tuple[ProvenanceRow, ...]:
    """One row per compiled leaf, in the compiler's order."""
    return tuple(
        ProvenanceRow(
            field=path,
            value=value_text(spec_leaf(op.spec, path)),
            step=prov.step,
            file=prov.file,
            line=prov.line,
        )
        for path, prov in op.provenance.items()
    )
