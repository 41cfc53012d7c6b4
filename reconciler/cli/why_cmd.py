"""``reconciler why PROJECT/OP [--at STATUS_COMMIT | --at TIME]``: an operation's outcome
in a recorded cycle, decided again from Git alone (``core/reporting/replay.py``).

Each status commit records its cycle's decision (``status/_decision.yaml``); the config
commit it names is compiled and the cycle replayed, and the replay is held to what the
commit records. Reading is ``runtime/why.py``'s; the renderers below are pure.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch
from reconciler.cli.options import (
    branch_option,
    cache_dir_option,
    status_branch_option,
    status_repo_option,
)
from reconciler.core.reporting.replay import (
    OperationOutcome,
    Replayed,
    deciding_check,
    outcome_history,
    outcome_of,
    queue_figures,
)
from reconciler.core.reporting.status import QueueStatus
from reconciler.core.types import printable_text
from reconciler.runtime.why import History, WhyError

# --- pure rendering ---------------------------------------------------------------------


def _admit_lines(admit: dict[str, Any], indent: str = "  ") -> list[str]:
    """What would admit it, each value on its own: the numbers as the planner has them."""
    keys = ("when", "resource", "amount", "count", "operations", "at", "flavor")
    shown = [
        f"{k} {', '.join(admit[k]) if isinstance(admit[k], list) else admit[k]}"
        for k in keys
        if admit.get(k) not in (None, "", [], 0) or (k == "count" and admit.get("operations"))
    ]
    out = [f"{indent}{'; '.join(shown)}", f"{indent}({admit['text']})"]
    for other in admit.get("or") or ():
        out += [f"{indent}or:", *_admit_lines(other, indent + "  ")]
    return out


def _queue_line(q: QueueStatus) -> str:
    limit = "-" if q.concurrency is None else str(q.concurrency)
    used = ", ".join(f"{r} {q.used.get(r, '0')} of {v}" for r, v in sorted(q.quota.items()))
    parts = [
        f"priority {q.priority}",
        f"active {q.active}/{limit}",
        f"quota used {used or '-'}",
        f"pending {q.pending}",
    ]
    if q.head_reason:
        parts.append(f"head {q.head_reason}")
    if q.budget:
        b = q.budget
        parts.append(f"budget spent {b.get('spent')} of {b.get('limit')} {b.get('unit', '')}")
    return ", ".join(p.rstrip() for p in parts)


def explain(op_id: str, cycle: Replayed) -> list[str]:
    """The operation's outcome in one replayed cycle: dispatched, or pending with its
    reason, position and what would admit it; the check that decided; its queue's figures
    then; whether the replay equals the record."""
    got = outcome_of(cycle.decision, op_id)
    lines = [
        f"{op_id} at {cycle.at.isoformat()} (status commit {cycle.commit[:12]}, "
        f"config {cycle.compiled.version[:12]})",
        f"outcome: {_headline(got)}",
    ]
    queue = None
    if got.dispatch is not None:
        queue = got.dispatch.queue
        lines.append("decided by: every check held (0 to 11)")
    elif got.pending is not None:
        p = got.pending
        queue = p.queue
        check = deciding_check(p.reason)
        lines.append(f"decided by: check {check.number}, {check.holds.replace('`', '')}")
        lines.append(f"message: {printable_text(p.message)}")
        lines.append("what would admit it:")
        lines += _admit_lines(p.admit.to_json())
    if queue is not None:
        figures = queue_figures(cycle.decision, cycle.compiled, queue)
        if figures is not None:
            lines.append(f"queue {queue} then: {_queue_line(figures)}")
    found = cycle.differences()
    if found:
        lines.append(f"replay: differs from the record in {len(found)} place(s): {found[0]}")
    else:
        lines.append("replay: equals the record")
    return lines


def _headline(got: OperationOutcome) -> str:
    if got.pending is not None:
        p = got.pending
        return f"pending {p.reason}, position {got.position} in {p.queue}"
    return got.summary()


def _time(text: str) -> datetime | None:
    """``--at`` as a time (None: a commit's name); a time without an offset is an error,
    not a guess at the zone."""
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        raise WhyError(f"--at {text}: a time needs its offset (Z, or e.g. +02:00)")
    return at


@click.command("why")
@click.argument("target", metavar="PROJECT/OP")
@click.option(
    "--at",
    "at",
    metavar="STATUS_COMMIT|TIME",
    help="One cycle: a commit of the status branch, or an RFC 3339 time (the cycle "
    "recorded last at or before it). Without it: the operation's whole history.",
)
@click.option(
    "--repo", default=".", show_default=True, help="The config repo: a URL or a local path."
)
@status_branch_option
@status_repo_option
@cache_dir_option
@branch_option("The config branch whose commits the records name.")
def why(
    target: str,
    at: str | None,
    repo: str,
    status_branch: str,
    status_repo: str | None,
    cache_dir: Path | None,
    branch: str,
) -> None:
    """Why an operation waited or ran: replay a recorded cycle's decision from Git alone
    and print its outcome (dispatched, or pending with its reason, position and what would
    admit it), the check that decided and its queue's figures then; without --at, one
    line per change of its outcome over the recorded history. Exits 1 when a replay
    differs from its record."""
    if "/" not in target:
        raise click.UsageError("PROJECT/OP: name one operation")
    try:
        config = ConfigRepo(repo, branch, cache_dir)
        history = History(config, StatusBranch(config, remote=status_repo, branch=status_branch))
        if not history.commits:
            raise WhyError(f"no recorded decisions on {status_branch}: nothing to replay")
        if at is None:
            changes, wrong = outcome_history(target, history.every())
            if not changes:
                raise WhyError(f"{target} is in none of the {len(history.commits)} recorded cycles")
            for change in changes:
                click.echo(change.line())
            for line in wrong:
                click.echo(f"error: replay differs from the record: {line}", err=True)
            raise SystemExit(1 if wrong else 0)
        when = _time(at)
        cycle = history.at_time(when, target) if when is not None else history.at_commit(at)
        got = outcome_of(cycle.decision, target)
        if got.dispatch is None and got.pending is None and not got.phase:
            raise WhyError(f"{target} is not in the cycle of status commit {cycle.commit[:12]}")
        for line in explain(target, cycle):
            click.echo(line)
        raise SystemExit(1 if cycle.differences() else 0)
    except (GitSyncError, WhyError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
