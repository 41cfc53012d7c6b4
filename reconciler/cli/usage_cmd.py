"""``reconciler usage``: what each queue's finished runs used and cost, per calendar window,
from the ledger on the status branch (``status/ledger/<YYYY-MM>.yaml``, docs/budgets.md).

Reading goes through the Git adapter like ``status``; the aggregation is the core's
(``ledger.usage``), the renderers below are pure.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.git import ConfigRepo, GitSyncError
from reconciler.cli.options import (
    branch_option,
    cache_dir_option,
    status_branch_option,
    status_repo_option,
)
from reconciler.cli.status_cmd import StatusError, read_branch, warnings
from reconciler.core.compile import org_settings
from reconciler.core.plan.ledger import MAX_USAGE_WINDOWS, UsageRow, usage_shown, utc_text, zone
from reconciler.core.types import BudgetPeriod
from reconciler.core.views.plan_render import text_table

OUTPUTS = ("table", "json", "csv")
GPU = "nvidia.com/gpu"
CENTS = Decimal("0.01")


def _number(value: Any) -> str:
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _local(row: UsageRow, timezone: str) -> str:
    start = row.window.start.astimezone(zone(timezone))
    return start.strftime("%Y-%m-%d")


def _flavored(rows: Sequence[UsageRow]) -> bool:
    """Whether any run ran in a flavor: then the table and CSV have a flavor column."""
    return any(r.flavor for r in rows)


def usage_to_table(rows: Sequence[UsageRow], timezone: str) -> str:
    if not rows:
        return "no finished runs in the ledger\n"
    flavored = _flavored(rows)
    headers = ["WINDOW", "QUEUE", *(["FLAVOR"] if flavored else [])]
    headers += ["RUNS", "GPU-HOURS", "CPU-HOURS", "MEMORY-GIB-HOURS", "COST"]
    body = [
        [
            _local(r, timezone),
            r.queue,
            *([r.flavor or "-"] if flavored else []),
            str(r.runs),
            _number(r.hours.get(GPU, 0)),
            _number(r.hours.get("cpu", 0)),
            _number(r.hours.get("memory", 0)),
            f"{_number(r.cost.quantize(CENTS))} {r.currency}".rstrip(),
        ]
        for r in rows
    ]
    return text_table(headers, body) + "\n"


def usage_records(rows: Sequence[UsageRow]) -> list[dict[str, Any]]:
    return [
        {
            "windowStart": utc_text(r.window.start),
            "windowEnd": utc_text(r.window.end),
            "queue": r.queue,
            "runs": r.runs,
            "hours": {k: _number(v) for k, v in r.hours.items()},
            "cost": _number(r.cost),
            "currency": r.currency,
            **({"flavor": r.flavor} if r.flavor else {}),
        }
        for r in rows
    ]


def usage_to_json(rows: Sequence[UsageRow], per: str, timezone: str) -> str:
    data = {"per": per, "timezone": timezone, "usage": usage_records(rows)}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def usage_to_csv(rows: Sequence[UsageRow]) -> str:
    resources = sorted({r for row in rows for r in row.hours})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    hours_columns = [f"{r}-hours" for r in resources]
    flavor = ["flavor"] if _flavored(rows) else []
    writer.writerow(
        ["window_start", "window_end", "queue", *flavor, "runs", *hours_columns, "cost", "currency"]
    )
    for row in rows:
        writer.writerow(
            [utc_text(row.window.start), utc_text(row.window.end), row.queue]
            + ([row.flavor] if flavor else [])
            + [row.runs]
            + [_number(row.hours.get(r, 0)) for r in resources]
            + [_number(row.cost), row.currency]
        )
    return out.getvalue()


def render_usage(rows: Sequence[UsageRow], per: str, timezone: str, output: str) -> str:
    if output == "json":
        return usage_to_json(rows, per, timezone)
    if output == "csv":
        return usage_to_csv(rows)
    return usage_to_table(rows, timezone)


def org_timezone(repo: str, branch: str, cache_dir: Path | None) -> tuple[str, list[str]]:
    """The org's ``timezone`` (``reconciler.yaml`` at the tip of ``branch``), which its
    budgets' windows are in; UTC, with a warning, when it cannot be read."""
    try:
        settings, problems = org_settings(ConfigRepo(repo, branch, cache_dir).sync())
    except GitSyncError as exc:
        return "UTC", [f"warning: windows in UTC: could not read reconciler.yaml: {exc}"]
    warn = [f"warning: windows in {settings.timezone}: {p}" for p in problems]
    return settings.timezone, warn


@click.command("usage")
@click.option("--repo", default=".", show_default=True, help="The config repo: a URL or a path.")
@branch_option("The config branch (its reconciler.yaml gives the timezone).")
@status_branch_option
@status_repo_option
@cache_dir_option
@click.option("--queue", default=None, help="Only this queue.")
@click.option(
    "--per",
    type=click.Choice([p.value for p in BudgetPeriod]),
    default="day",
    show_default=True,
    help="Calendar window: day, ISO week (from Monday) or month.",
)
@click.option(
    "--timezone",
    default=None,
    help="IANA zone of the windows [default: reconciler.yaml's timezone, as budgets use, "
    "else UTC].",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table for people; json or csv for tools.",
)
def usage_command(
    repo: str,
    branch: str,
    status_branch: str,
    status_repo: str | None,
    cache_dir: Path | None,
    queue: str | None,
    per: str,
    timezone: str | None,
    output: str,
) -> None:
    """Show what each queue's finished runs used (GPU, CPU and memory hours) and cost, per
    calendar window (in the org's timezone, as budgets count them) and per flavor (a queue
    with flavors), from the ledger on the status branch."""
    notes: list[str] = []
    if timezone is None:
        timezone, notes = org_timezone(repo, branch, cache_dir)
    try:
        zone(timezone)
    except (ValueError, KeyError, OSError):
        click.echo(f"error: {timezone!r} is not a time zone (e.g. UTC, Europe/Berlin)", err=True)
        raise SystemExit(2) from None
    try:
        view = read_branch(repo, status_branch, cache_dir, status_repo=status_repo)
    except (GitSyncError, StatusError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    shown = usage_shown(view.ledger, BudgetPeriod(per), timezone, queue)
    click.echo(render_usage(shown.rows, per, timezone, output), nl=False)
    if shown.earlier and shown.since is not None:
        notes.append(
            f"note: only the latest {MAX_USAGE_WINDOWS} windows are shown; usage before "
            f"{utc_text(shown.since)} is left out"
        )
    for line in [*notes, *warnings(view)]:
        click.echo(line, err=True)
