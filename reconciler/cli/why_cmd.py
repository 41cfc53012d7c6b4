"""``reconciler why PROJECT/OP [--at STATUS_COMMIT | --at TIME]``: an operation's outcome
in a recorded cycle, decided again from Git alone (``core/reporting/replay.py``).

Each status commit records its cycle's decision (``status/_decision.yaml``); the config
commit it names is compiled and the cycle replayed, and the replay is held to what the
commit records. Reading goes through the Git adapter; the renderers below are pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch, redact
from reconciler.cli.options import (
    branch_option,
    cache_dir_option,
    status_branch_option,
    status_repo_option,
)
from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import Decision
from reconciler.core.plan import PlanInputError
from reconciler.core.reporting.replay import (
    Outcome,
    ReplayError,
    deciding_check,
    differences,
    outcome_of,
    queue_figures,
    recorded_clock,
    replay,
)
from reconciler.core.reporting.status import DECISION_FILE, QueueStatus, StatusView, read_status
from reconciler.core.types import CompiledRepo, printable_text


class WhyError(Exception):
    """Printed as ``error: <message>``; exit 1."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """One recorded cycle and its replay."""

    commit: str
    at: datetime
    view: StatusView
    compiled: CompiledRepo
    decision: Decision

    def differences(self) -> list[str]:
        return differences(self.compiled, self.decision, self.view)


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


def _headline(got: Outcome) -> str:
    if got.pending is not None:
        p = got.pending
        return f"pending {p.reason}, position {p.position} in {p.queue}"
    return got.summary()


def history_lines(op_id: str, cycles: Iterator[Replayed]) -> tuple[list[str], list[str]]:
    """One line per change of the operation's outcome, oldest first, and the cycles whose
    replay differs from their record."""
    lines: list[str] = []
    wrong: list[str] = []
    last: str | None = None
    for cycle in cycles:
        found = cycle.differences()
        if found:
            wrong.append(f"status commit {cycle.commit[:12]}: {found[0]}")
        got = outcome_of(cycle.decision, op_id)
        if got.dispatch is None and got.pending is None and not got.phase:
            continue  # not in this cycle
        summary = got.summary()
        if summary != last:
            lines.append(f"{cycle.at.isoformat()}  {cycle.commit[:12]}  {summary}")
            last = summary
    return lines, wrong


# --- I/O --------------------------------------------------------------------------------


class History:
    """The recorded cycles of a status branch, read and replayed on demand."""

    def __init__(
        self,
        repo: str,
        status_branch: str,
        status_repo: str | None,
        cache_dir: Path | None,
        branch: str,
    ) -> None:
        self.config = ConfigRepo(repo, branch, cache_dir)
        self.status = StatusBranch(self.config, remote=status_repo, branch=status_branch)
        self.name = status_branch
        tip = self.status.fetch()
        if tip is None:
            where = redact(status_repo) if status_repo else self.config.source
            raise WhyError(f"no status yet: branch {status_branch} does not exist in {where}")
        self.commits = self.status.commits_changing(DECISION_FILE)
        self._compiled: dict[str, CompiledRepo] = {}
        self._fetched = False

    def compiled_at(self, sha: str) -> CompiledRepo:
        if sha not in self._compiled:
            if not self._fetched:
                self.config.fetch()
                self._fetched = True
            compiled = compile_repo(self.config.snapshot(sha))
            if compiled.errors:
                raise WhyError(f"config {sha[:12]} does not compile: {compiled.errors[0]}")
            self._compiled[sha] = compiled
        return self._compiled[sha]

    def replayed(self, commit: str, view: StatusView) -> Replayed:
        problems = [p for p in view.problems if not p.startswith("status/ledger/")]
        if problems:
            raise WhyError(
                f"status commit {commit[:12]} cannot be replayed: "
                f"unreadable status file {printable_text(problems[0])}"
            )
        if view.decision is None:
            raise WhyError(f"status commit {commit[:12]} records no decision")
        try:
            at = recorded_clock(view.decision)
            compiled = self.compiled_at(view.decision.config)
            decision = replay(view, compiled)
        except (ReplayError, PlanInputError) as exc:
            raise WhyError(f"status commit {commit[:12]}: {exc}") from None
        return Replayed(commit, at, view, compiled, decision)

    def at_commit(self, name: str) -> Replayed:
        sha = self.status.commit_on_branch(name)
        if sha is None:
            raise WhyError(f"{name} is not a commit on the status branch {self.name}")
        if sha not in self.commits:
            raise WhyError(
                f"status commit {sha[:12]} records no decision (it was written before "
                "decisions were recorded, or by hand)"
            )
        return self.replayed(sha, read_status(self.status.files_at(sha)))

    def at_time(self, when: datetime) -> Replayed:
        """The cycle in force at ``when``: the last recorded at or before it."""
        chosen: tuple[str, StatusView] | None = None
        for sha, view in self._views():
            if view.decision is None:
                break
            try:
                at = recorded_clock(view.decision)
            except ReplayError as exc:
                raise WhyError(f"status commit {sha[:12]}: {exc}") from None
            if at > when:
                break
            chosen = (sha, view)
        if chosen is None:
            raise WhyError(f"{when.isoformat()} is before the first recorded decision")
        return self.replayed(*chosen)

    def every(self) -> Iterator[Replayed]:
        for sha, view in self._views():
            yield self.replayed(sha, view)

    def _views(self) -> Iterator[tuple[str, StatusView]]:
        """Each recorded commit's files read back, oldest first; each read as a diff of
        the one before."""
        known: tuple[str, dict[str, bytes]] | None = None
        for sha in self.commits:
            files = self.status.files_at(sha, known)
            known = (sha, files)
            yield sha, read_status(files)


def _time(text: str) -> datetime | None:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


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
        history = History(repo, status_branch, status_repo, cache_dir, branch)
        if not history.commits:
            raise WhyError(f"no recorded decisions on {status_branch}: nothing to replay")
        if at is None:
            lines, wrong = history_lines(target, history.every())
            if not lines:
                raise WhyError(f"{target} is in none of the {len(history.commits)} recorded cycles")
            for line in lines:
                click.echo(line)
            for line in wrong:
                click.echo(f"error: replay differs from the record: {line}", err=True)
            raise SystemExit(1 if wrong else 0)
        when = _time(at)
        cycle = history.at_time(when) if when is not None else history.at_commit(at)
        got = outcome_of(cycle.decision, target)
        if got.dispatch is None and got.pending is None and not got.phase:
            raise WhyError(f"{target} is not in the cycle of status commit {cycle.commit[:12]}")
        for line in explain(target, cycle):
            click.echo(line)
        raise SystemExit(1 if cycle.differences() else 0)
    except (GitSyncError, WhyError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
