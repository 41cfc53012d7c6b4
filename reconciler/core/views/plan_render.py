"""Pure renderers for a :class:`~reconciler.core.plan.Plan`: JSON (the CLI contract),
Markdown (PR comments, docs) and a plain-text table (terminals). Same plan, same bytes.

What must live here: the renderings of one plan and their shared Markdown and table helpers.
What a plan is lives in ``core/plan/model.py``; PR plans (two plans compared) in
``diff.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from reconciler.core.plan import (
    BlockedBy,
    Dispatch,
    FlavorUsage,
    Plan,
    QueueSummary,
    numbered,
)
from reconciler.core.plan.estimate import NO_ESTIMATES, Estimates
from reconciler.core.quantity import format_quantity
from reconciler.core.types import printable_text


def plan_to_dict(plan: Plan, estimates: Estimates = NO_ESTIMATES) -> dict[str, Any]:
    """The JSON contract of ``reconciler plan -o json``; each pending entry has its start
    estimate (``estimate``: p50 and p90, see docs/estimates.md) when ``estimates`` has one."""
    estimate = estimates.json_of
    # Pending entries of one queue share blockers: render each blocker once.
    rendered: dict[int, tuple[str, dict[str, Any], dict[str, Any]]] = {}

    def explain(block: BlockedBy) -> tuple[str, dict[str, Any], dict[str, Any]]:
        got = rendered.get(id(block))
        if got is None:
            got = rendered[id(block)] = (block.message(), block.to_json(), block.admit().to_json())
        return got

    return {
        "dispatch": [
            {"operation": d.operation, "queue": d.queue, "cluster": d.cluster, "flavor": d.flavor}
            for d in plan.dispatch
        ],
        "pending": [
            {
                "operation": p.operation,
                "queue": p.queue,
                "reason": str(p.reason),
                "position": position,
                "message": message,
                "blockedBy": blocked_by,
                "admitWhen": admit["when"],
                "admit": admit,
                "estimate": estimate(p.operation),
            }
            for position, p in numbered(plan.pending)
            for message, blocked_by, admit in (explain(p.blocked_by),)
        ],
        "stop": [{"operation": s.operation, "reason": str(s.reason)} for s in plan.stop],
        "queues": [_queue_dict(q) for q in plan.queues],
    }


def _queue_dict(q: QueueSummary) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": q.name,
        "cluster": q.cluster,
        "priority": q.priority,
        "concurrency": q.concurrency,
        "quota": {r: format_quantity(v) for r, v in sorted(q.quota.items())},
        "active": q.active,
        "used": {r: format_quantity(v) for r, v in sorted(q.used.items())},
        "dispatching": q.dispatching,
        "pending": q.pending,
    }
    if q.cohort is not None:  # observed, like ``used``
        out["cohort"] = q.cohort
        out["borrowed"] = {r: format_quantity(v) for r, v in sorted(q.borrowed.items())}
        out["lent"] = {r: format_quantity(v) for r, v in sorted(q.lent.items())}
    if q.flavors:  # a queue with flavors: each one's share of the above, in its order
        out["flavors"] = [_flavor_dict(f, cohort=q.cohort is not None) for f in q.flavors]
    return out


def _quantities(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {r: format_quantity(v) for r, v in sorted(values.items())}


def _flavor_dict(f: FlavorUsage, *, cohort: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": f.name,
        "quota": _quantities(f.quota),
        "used": _quantities(f.used),
    }
    if cohort:
        out["borrowed"] = _quantities(f.borrowed)
        out["lent"] = _quantities(f.lent)
    return out


def plan_to_json(plan: Plan, estimates: Estimates = NO_ESTIMATES) -> str:
    return json.dumps(plan_to_dict(plan, estimates), indent=2, ensure_ascii=False) + "\n"


# --- tables -----------------------------------------------------------------------------


def _plus(before: str, added: str) -> str:
    return before if added in ("0", "") else f"{before}+{added}"


def _concurrency_cell(q: QueueSummary) -> str:
    limit = "-" if q.concurrency is None else str(q.concurrency)
    return f"{_plus(str(q.active), str(q.dispatching))}/{limit}"


def _quota_cell(q: QueueSummary) -> str:
    """Per resource; a queue with flavors per flavor: ``h100: nvidia.com/gpu 0+1/2; ...``."""
    if q.flavors:
        return "; ".join(
            f"{f.name}: "
            + (_uses(f.quota, f.used, f.used_after, f.borrowed_after, f.lent_after) or "-")
            for f in q.flavors
        )
    return _uses(q.quota, q.used, q.used_after, q.borrowed_after, q.lent_after) or "-"


def _uses(
    quota: Mapping[str, Decimal],
    used: Mapping[str, Decimal],
    used_after: Mapping[str, Decimal],
    borrowed_after: Mapping[str, Decimal],
    lent_after: Mapping[str, Decimal],
) -> str:
    cells = []
    for r, limit in sorted(quota.items()):
        before = used.get(r, Decimal(0))
        added = used_after.get(r, before) - before
        cell = (
            f"{r} {_plus(format_quantity(before), format_quantity(added))}/{format_quantity(limit)}"
        )
        if borrowed := borrowed_after.get(r):
            cell += f" (+{format_quantity(borrowed)} borrowed)"
        elif lent := lent_after.get(r):
            cell += f" ({format_quantity(lent)} lent)"
        cells.append(cell)
    return ", ".join(cells)


def dispatch_target(d: Dispatch) -> str:
    """Where a dispatch goes: its cluster, and the flavor assigned (``local (h100)``)."""
    return d.cluster if d.flavor is None else f"{d.cluster} ({d.flavor})"


def _head_cell(q: QueueSummary) -> str:
    if not q.pending:
        return "0"
    return f"{q.pending} ({q.head_reason})"


def queue_rows(plan: Plan) -> list[list[str]]:
    """The queue view: one row per queue, in consideration order. ``2+1/3`` reads: 2 active,
    1 dispatched by this plan, limit 3."""
    rows = []
    for q in plan.queues:
        name = q.name + (" (paused)" if q.paused else "")
        rows.append(
            [
                name,
                q.cluster,
                str(q.priority),
                _concurrency_cell(q),
                _quota_cell(q),
                str(q.dispatching),
                _head_cell(q),
            ]
        )
    return rows


QUEUE_HEADERS = [
    "QUEUE",
    "CLUSTER",
    "PRIORITY",
    "ACTIVE/LIMIT",
    "QUOTA USED/LIMIT",
    "DISPATCH",
    "PENDING",
]
PENDING_HEADERS = ["POS", "QUEUE", "OPERATION", "REASON", "STARTS", "MESSAGE"]


def pending_rows(plan: Plan, estimates: Estimates = NO_ESTIMATES) -> list[list[str]]:
    """One row per pending entry; STARTS is its start estimate (``~40 min (p90 ~1 h)``)."""
    text = estimates.text
    return [
        [str(position), p.queue, p.operation, str(p.reason), text(p.operation) or "-", p.message]
        for position, p in numbered(plan.pending)
    ]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Aligned columns; a cell never spans lines (control characters are escaped: names and
    messages can come from a status branch anyone may push to)."""
    rows = [[printable_text(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
    return "\n".join(lines)


def plan_to_table(plan: Plan, estimates: Estimates = NO_ESTIMATES) -> str:
    out = [text_table(QUEUE_HEADERS, queue_rows(plan))]
    if plan.dispatch:
        out.append("")
        out.append(
            text_table(
                ["DISPATCH", "QUEUE", "CLUSTER"],
                [[d.operation, d.queue, dispatch_target(d)] for d in plan.dispatch],
            )
        )
    if plan.pending:
        out.append("")
        out.append(text_table(PENDING_HEADERS, pending_rows(plan, estimates)))
    if plan.stop:
        out.append("")
        out.append(
            text_table(["STOP", "REASON"], [[s.operation, str(s.reason)] for s in plan.stop])
        )
    if plan.prune_refused is not None:
        out.append("")
        out.append(f"warning: {plan.prune_refused.message()}")
    return "\n".join(out) + "\n"


# --- markdown ---------------------------------------------------------------------------


def md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


class MdCode(str):
    """A Markdown code span made by :func:`md_code`: a table puts it in a cell as it is."""

    __slots__ = ()


def md_code(text: str) -> MdCode:
    """``text`` as one code span, for a table cell: fenced by more backticks than any run
    of them in it (a single backtick would close the span and let the rest be Markdown
    and HTML), padded when it begins or ends with one; only ``|`` is escaped (no other
    escape works in a code span, so a backslash is shown as it is)."""
    text = text.replace("\n", " ").replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return MdCode(f"{fence}{pad}{text}{pad}{fence}")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend(
        "| " + " | ".join(c if isinstance(c, MdCode) else md_escape(c) for c in row) + " |"
        for row in rows
    )
    return "\n".join(lines)


def plan_to_markdown(plan: Plan, estimates: Estimates = NO_ESTIMATES) -> str:
    out = [
        "## Dispatch plan",
        "",
        f"{len(plan.dispatch)} to dispatch, {len(plan.pending)} pending, {len(plan.stop)} to stop.",
        "",
        md_table(QUEUE_HEADERS, queue_rows(plan)),
    ]
    if plan.dispatch:
        out += ["", "### Dispatch", ""]
        out.append(
            md_table(
                ["#", "Operation", "Queue", "Cluster"],
                [
                    [str(i), d.operation, d.queue, dispatch_target(d)]
                    for i, d in enumerate(plan.dispatch, 1)
                ],
            )
        )
    if plan.pending:
        out += ["", "### Pending", ""]
        out.append(md_table(PENDING_HEADERS, pending_rows(plan, estimates)))
    if plan.stop:
        out += ["", "### Stop", ""]
        out.append(
            md_table(["Operation", "Reason"], [[s.operation, str(s.reason)] for s in plan.stop])
        )
    if plan.prune_refused is not None:
        out += ["", f"> **Warning:** {plan.prune_refused.message()}"]
    return "\n".join(out) + "\n"
