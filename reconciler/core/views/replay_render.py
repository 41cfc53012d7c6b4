"""The what-if replay of a pull-request plan, as Markdown and JSON (pure).

What must live here: the ``What-if replay`` section of ``plan --base --replay`` (the
Markdown of a PR comment, ``replay_to_markdown``) and its ``replay`` object in ``-o json``
(``replay_to_dict``): per queue, base → head, the wait p50 and p90, GPU-hours and the
utilisation of the GPU quota, the budget burn, how many runs start later or earlier and
the five that move most; then each budgeted queue's burn forecast. Numbers are fixed-point
text, so the same replay gives the same bytes.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from reconciler.core.plan.estimate import duration_text
from reconciler.core.plan.history import (
    BurnForecast,
    QueueFigures,
    StartMove,
    WhatIf,
    forecast_move_text,
)
from reconciler.core.plan.ledger import utc_text
from reconciler.core.views.plan_render import md_code, md_table


def _wait(seconds: float | None) -> str:
    return "—" if seconds is None else duration_text(seconds)


def _share(value: Decimal | None) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"


def _amount(value: Decimal | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _arrow(before: str, after: str) -> str:
    return before if before == after else f"{before} → {after}"


def _when(moment: datetime | None) -> str:
    return "not started" if moment is None else utc_text(moment)


def _move_text(m: StartMove) -> str:
    if m.seconds is None:
        return f"{_when(m.before)} → {_when(m.after)}"
    sign = "later" if m.seconds > 0 else "earlier"
    return f"{duration_text(abs(m.seconds))} {sign}"


def replay_to_markdown(what: WhatIf, span: str) -> str:
    """The PR comment's section: ``span`` is the window as asked (``7d``)."""
    out = ["", f"### What-if replay: the last {span}", ""]
    if not what.runs:
        out.append(
            f"No run arrived in the last {span} ({utc_text(what.since)} to "
            f"{utc_text(what.until)}): there is no history to replay."
        )
        return "\n".join(out) + "\n"
    out += [
        f"{what.runs} run(s) that arrived from {utc_text(what.since)} to "
        f"{utc_text(what.until)}, replayed under base and under head: the same arrivals, "
        "durations and failures.",
        "",
    ]
    rows = []
    for q in what.queues:
        a, b = q.base, q.head
        rows.append(
            [
                md_code(q.queue),
                _arrow(str(a.runs), str(b.runs)),
                _arrow(_wait(a.wait_p50), _wait(b.wait_p50)),
                _arrow(_wait(a.wait_p90), _wait(b.wait_p90)),
                _arrow(_amount(a.gpu_hours), _amount(b.gpu_hours)),
                _arrow(_share(a.utilisation), _share(b.utilisation)),
                _arrow(_amount(a.burn), _amount(b.burn)),
                str(q.later),
                str(q.earlier),
            ]
        )
    headers = ["queue", "runs", "wait p50", "wait p90", "GPU-hours", "GPU quota used"]
    headers += ["budget burn", "start later", "start earlier"]
    out += [md_table(headers, rows), ""]
    moved = [(q.queue, m) for q in what.queues for m in q.moves]
    if moved:
        out += ["Starts that move most, per queue:", ""]
        out += [
            f"- {md_code(queue)}: {md_code(m.operation)} (generation {m.generation}) "
            f"{_move_text(m)}"
            for queue, m in moved
        ]
        out.append("")
    if what.forecasts:
        out += ["Budget burn forecast:", ""]
        out += [f"- {forecast_move_text(f)}" for f in what.forecasts]
        out.append("")
    return "\n".join(out)


def _figures(f: QueueFigures) -> dict[str, Any]:
    return {
        "runs": f.runs,
        "started": f.started,
        "waitP50Seconds": None if f.wait_p50 is None else round(f.wait_p50),
        "waitP90Seconds": None if f.wait_p90 is None else round(f.wait_p90),
        "gpuHours": f"{f.gpu_hours:.2f}",
        "gpuQuotaUsed": None if f.utilisation is None else f"{f.utilisation:.4f}",
        "budgetBurn": None if f.burn is None else f"{f.burn:.2f}",
    }


def _forecast(f: BurnForecast | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "limit": f"{f.budget.limit}",
        "per": str(f.budget.per),
        "unit": f.unit,
        "windowStart": utc_text(f.window.start),
        "windowEnd": utc_text(f.window.end),
        "spent": f"{f.spent:.2f}",
        "ratePerHour": f"{f.rate:.4f}",
        "spentBy": None if f.at is None else utc_text(f.at),
        "exhausted": f.exhausted,
    }


def _moment(m: datetime | None) -> str | None:
    return None if m is None else utc_text(m)


def replay_to_dict(what: WhatIf, span: str) -> dict[str, Any]:
    """``replay`` of ``plan --base --replay -o json``."""
    return {
        "window": span,
        "since": utc_text(what.since),
        "until": utc_text(what.until),
        "runs": what.runs,
        "queues": [
            {
                "queue": q.queue,
                "base": _figures(q.base),
                "head": _figures(q.head),
                "startLater": q.later,
                "startEarlier": q.earlier,
                "moves": [
                    {
                        "operation": m.operation,
                        "generation": m.generation,
                        "before": _moment(m.before),
                        "after": _moment(m.after),
                        "seconds": None if m.seconds is None else round(m.seconds),
                    }
                    for m in q.moves
                ],
            }
            for q in what.queues
        ],
        "forecasts": [
            {
                "queue": f.queue,
                "base": _forecast(f.base),
                "head": _forecast(f.head),
                "text": forecast_move_text(f),
            }
            for f in what.forecasts
        ],
    }
