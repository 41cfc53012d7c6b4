"""A run's named outputs: the JSON object its main container leaves as its termination
message (``{"accuracy": 0.93, "loss": 0.1}``), read as the values ``status``, the pages,
notifications and a workflow's comparison table show.

A named output is a top-level key whose value is a number, a string or a boolean; nested
objects and lists stay in ``outputs`` only (shown as JSON). What observation kept of a
message that is not JSON is ``{"message": <text>}`` and is shown as the text it is. Every
bound is here, so a run cannot make a page or a notification large.

What must live here: the bounds, the reading of named outputs, their text, and the order
of a workflow's children by one of them. Where a run's outputs go (the per-run path) is
the compiler's and the renderer's."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

OutputValue = bool | int | float | str

MAX_NAMED = 32  # named outputs per run; the rest stay in ``outputs``
MAX_NAME_CHARS = 64
MAX_TEXT_CHARS = 200  # a string value is cut to this many characters, with "…"
MAX_COLUMNS = MAX_NAMED  # names in a workflow's comparison table

SORT_ORDERS = ("asc", "desc")


def named_outputs(outputs: Mapping[str, Any] | None) -> dict[str, OutputValue]:
    """The named outputs of ``outputs``, in name order: at most ``MAX_NAMED``, names of at
    most ``MAX_NAME_CHARS``, strings cut to ``MAX_TEXT_CHARS``."""
    out: dict[str, OutputValue] = {}
    if not isinstance(outputs, Mapping):
        return out
    for name in sorted(k for k in outputs if isinstance(k, str)):
        value = outputs[name]
        if not name or len(name) > MAX_NAME_CHARS:
            continue
        if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
            value = value[: MAX_TEXT_CHARS - 1] + "…"
        if isinstance(value, bool | int | float | str):
            out[name] = value
            if len(out) == MAX_NAMED:
                break
    return out


def output_text(value: OutputValue) -> str:
    """One value as the pages and ``status`` show it: JSON's spelling for booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def outputs_line(named: Mapping[str, OutputValue]) -> str:
    """``accuracy=0.93 loss=0.1``: a run's named outputs on one line."""
    return " ".join(
        f"{name}={output_text(value)}".replace("\n", " ") for name, value in named.items()
    )


class HasOutputs(Protocol):
    @property
    def operation(self) -> str: ...

    @property
    def outputs(self) -> Mapping[str, OutputValue]: ...


def output_names(rows: Iterable[HasOutputs]) -> list[str]:
    """The comparison table's columns, in name order: the ``MAX_COLUMNS`` names the most
    rows have. Each run may name its outputs differently (1,000 children, 32 names each):
    the table stays as wide as one run's."""
    counts = Counter(name for row in rows for name in row.outputs)
    return sorted(sorted(counts, key=lambda name: (-counts[name], name))[:MAX_COLUMNS])


def sort_problem(rows: Sequence[HasOutputs], key: str | None, order: str | None) -> str | None:
    """Why ``?sort=key&order=order`` cannot sort ``rows``, or None."""
    if order is not None and order not in SORT_ORDERS:
        return f"order={order!r}: use asc or desc"
    if key is None:
        return None if order is None else "order needs sort=<an output's name>"
    if any(key in row.outputs for row in rows):  # a name past the table's columns too
        return None
    names = output_names(rows)
    if not names:
        return f"sort={key!r}: no run of this workflow has named outputs yet"
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"outputs: {', '.join(names)}"
    return f"sort={key!r}: no run has an output of that name ({hint})"


def _rank(value: OutputValue) -> tuple[int, float, str]:
    """Numbers compare as numbers, then booleans, then strings."""
    if isinstance(value, bool):
        return (1, float(value), "")
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (2, 0.0, value)


R = TypeVar("R", bound=HasOutputs)


def sort_rows(rows: Sequence[R], key: str | None, order: str | None) -> list[R]:
    """``rows`` ordered by their output ``key`` (ascending unless ``order`` is desc); rows
    without it come last, in their own order. No key: ``rows`` as they are."""
    if key is None:
        return list(rows)
    having = [r for r in rows if key in r.outputs]
    missing = [r for r in rows if key not in r.outputs]
    having.sort(key=lambda r: _rank(r.outputs[key]), reverse=order == "desc")
    return having + missing
