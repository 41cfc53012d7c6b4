"""``reconciler status [PROJECT[/OP]]``: what the reconciler last wrote to the status branch.

Reading goes through the Git adapter (a bare cache, never a checkout); the renderers below
are pure and take the parsed :class:`~reconciler.core.reporting.status.StatusView`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch, redact
from reconciler.cli.options import FiniteFloatRange, parse_overrides, status_source_options
from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import Decision, Memory, decide_recorded, memory_from_status
from reconciler.core.observation.outputs import outputs_line
from reconciler.core.plan import PlanInputError
from reconciler.core.plan.estimate import NO_ESTIMATES, Estimates, estimate_decision
from reconciler.core.reporting.report import Outcome, Report, expected, report, status_view
from reconciler.core.reporting.status import (
    OperationStatus,
    QueueStatus,
    StatusView,
    dump_yaml,
    queue_kinds,
    read_status,
)
from reconciler.core.types import BUG_NOTE, CompiledRepo, printable_text
from reconciler.core.views.plan_render import text_table
from reconciler.runtime.live import connector, decide_live

OUTPUTS = ("table", "json")
OP_HEADERS = ["OPERATION", "PHASE", "REASON", "QUEUE", "POS", "CLUSTER", "STARTS", "MESSAGE"]
QUEUE_HEADERS = ["QUEUE", "CLUSTER", "PRIORITY", "ACTIVE/LIMIT", "QUOTA USED/LIMIT", "PENDING"]


class StatusError(Exception):
    """Printed as ``error: <message>``; exit 1."""


# --- pure rendering ---------------------------------------------------------------------


def select(view: StatusView, target: str | None) -> list[OperationStatus]:
    """All operations, one project's (``PROJECT``) or one (``PROJECT/OP``)."""
    ops = [view.operations[k] for k in sorted(view.operations)]
    if target is None:
        return ops
    if "/" in target:
        return [o for o in ops if o.operation == target]
    return [o for o in ops if o.operation.split("/", 1)[0] == target]


MAX_OUTPUTS_CELL = 60  # characters of a run's named outputs in the table; all in `status P/O`


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return text_table(headers, rows)


def _used_of(quota: Mapping[str, str], used: Mapping[str, str]) -> str:
    return ", ".join(f"{r} {used.get(r, '0')}/{v}" for r, v in sorted(quota.items()))


def _queue_row(q: QueueStatus) -> list[str]:
    """A queue with flavors shows its use per flavor: ``h100: nvidia.com/gpu 1/2; ...``."""
    limit = "-" if q.concurrency is None else str(q.concurrency)
    quota = _used_of(q.quota, q.used)
    if q.flavors:
        quota = "; ".join(f"{f.name}: {_used_of(f.quota, f.used) or '-'}" for f in q.flavors)
    return [q.name, q.cluster, str(q.priority), f"{q.active}/{limit}", quota or "-", str(q.pending)]


def status_to_table(
    view: StatusView,
    ops: Sequence[OperationStatus],
    *,
    queues: bool,
    estimates: Estimates = NO_ESTIMATES,
) -> str:
    """STARTS: a pending operation's start estimate (docs/estimates.md). OUTPUTS, when
    some run left a result: its named outputs (``accuracy=0.93 loss=0.1``)."""
    rows = [
        [
            o.operation,
            o.phase,
            o.reason or "",
            o.queue or "",
            "" if o.position is None else str(o.position),
            o.cluster or "",
            estimates.text(o.operation),
            o.message.replace("\n", " "),
        ]
        for o in ops
    ]
    headers = OP_HEADERS
    if any(o.named_outputs for o in ops):  # a column only when some run left a result
        headers = [*OP_HEADERS, "OUTPUTS"]
        for row, o in zip(rows, ops, strict=True):
            row.append(_cut(outputs_line(o.named_outputs), MAX_OUTPUTS_CELL))
    out = [_table(headers, rows)]
    if queues and view.queues:
        out += ["", _table(QUEUE_HEADERS, [_queue_row(q) for q in view.queues])]
    return "\n".join(out) + "\n"


def _record(o: OperationStatus, estimates: Estimates) -> dict[str, Any]:
    """The record as its file holds it, with its start estimate when it is pending (the
    status branch holds none: it is the next cycle's, computed when read)."""
    record = o.to_dict()
    estimate = estimates.json_of(o.operation)
    if estimate is not None:
        record["estimate"] = estimate
    return record


def status_to_json(
    view: StatusView, ops: Sequence[OperationStatus], estimates: Estimates = NO_ESTIMATES
) -> str:
    data: dict[str, Any] = {
        "config": view.config.to_dict() if view.config else None,
        "queues": [q.to_dict() for q in view.queues],
        "clusters": [c.to_dict() for c in view.clusters],
        "operations": [_record(o, estimates) for o in ops],
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def render(
    view: StatusView, target: str | None, output: str, estimates: Estimates = NO_ESTIMATES
) -> str:
    """The command's stdout; raises StatusError when ``target`` names nothing."""
    ops = select(view, target)
    if target is not None and not ops:
        raise StatusError(f"no status for {target}")
    if target is not None and "/" in target:
        record = _record(ops[0], estimates)
        if output == "json":
            return json.dumps(record, indent=2, sort_keys=True) + "\n"
        return dump_yaml(record).decode()
    if output == "json":
        return status_to_json(view, ops, estimates)
    return status_to_table(view, ops, queues=target is None, estimates=estimates)


def warnings(view: StatusView) -> list[str]:
    out = [f"warning: unreadable status file {printable_text(p)}" for p in view.problems]
    if view.config is not None:
        if view.config.is_internal_error:
            out.append(
                f"error: config {view.config.version[:12]} was not compiled: internal error: "
                f"{view.config.internal_error} ({BUG_NOTE}); "
                f"{view.config.applied[:12]} stays in force"
            )
        elif not view.config.valid:
            out.append(
                f"warning: config {view.config.version[:12]} is invalid; "
                f"{view.config.applied[:12]} stays in force:"
            )
            out += [f"  {printable_text(e)}" for e in view.config.errors]
        out += [f"warning: {w}" for w in view.config.warnings]
    out += [
        f"warning: cluster {c.name} was unreachable at the last cycle: {c.error or 'no answer'}"
        " (its queues are held; its operations keep their last phase)"
        for c in view.clusters
        if not c.reachable
    ]
    return out


# --- I/O --------------------------------------------------------------------------------


def read_branch(
    repo: str,
    branch: str,
    cache_dir: Path | None,
    *,
    ref: str | None = None,
    status_repo: str | None = None,
) -> StatusView:
    """The status view at ``branch`` of ``repo`` (or at another ``ref`` of it), or of
    ``status_repo`` when the status is kept apart (``status.repo``)."""
    config = ConfigRepo(repo, cache_dir=cache_dir)
    status = StatusBranch(config, remote=status_repo, branch=branch, source_ref=ref)
    files = status.read()
    if status.last_tip is None:
        raise StatusError(
            f"no status yet: branch {branch} does not exist in "
            f"{redact(status_repo) if status_repo else config.source} "
            "(the reconciler writes it after its first cycle)"
        )
    return read_status(files)


def status_memory(
    repo: str, branch: str, cache_dir: Path | None, status_repo: str | None = None
) -> Memory:
    """The views' memory: what the leader last recorded on the status branch (nothing when
    there is no status branch yet)."""
    try:
        return memory_from_status(read_branch(repo, branch, cache_dir, status_repo=status_repo))
    except StatusError:
        return Memory()


def live_decision(
    repo: str,
    branch: str,
    status_branch: str,
    cache_dir: Path | None,
    overrides: dict[str, Path],
    status_repo: str | None = None,
) -> tuple[CompiledRepo, Decision]:
    """Compile the tip, read every cluster and decide as the next cycle would, with the
    status branch as memory; nothing is carried out."""
    config = ConfigRepo(repo, branch, cache_dir)
    compiled = compile_repo(config.sync())
    if not compiled.valid:
        raise StatusError("the config is invalid:\n" + "\n".join(str(e) for e in compiled.errors))
    memory = status_memory(repo, status_branch, cache_dir, status_repo)
    return compiled, decide_live(compiled, memory, SystemClock().now(), connector(overrides))


def read_live(
    repo: str,
    branch: str,
    status_branch: str,
    cache_dir: Path | None,
    overrides: dict[str, Path],
    status_repo: str | None = None,
) -> tuple[StatusView, Estimates]:
    """What the status branch would say after the next cycle, if its creates succeed
    (nothing is dispatched here), and that cycle's start estimates."""
    compiled, decision = live_decision(
        repo, branch, status_branch, cache_dir, overrides, status_repo
    )
    return live_status_view(compiled, decision), estimate_decision(compiled, decision)


def recorded_estimates(
    repo: str, branch: str, cache_dir: Path | None, view: StatusView
) -> tuple[Estimates, list[str]]:
    """The start estimates of the next cycle over what ``view`` (the status branch)
    records (``recorded_report``)."""
    _, estimates, notes = recorded_report(repo, branch, cache_dir, view)
    return estimates, notes


def recorded_report(
    repo: str, branch: str, cache_dir: Path | None, view: StatusView
) -> tuple[Report | None, Estimates, list[str]]:
    """The next cycle over what ``view`` (the status branch) records: the config at the
    branch tip, the branch as memory and as the clusters (as ``reconciler plan`` does),
    nothing carried out; its report and start estimates, one decision for both. None when
    the config cannot be read or compiled: a warning says why."""
    try:
        compiled = compile_repo(ConfigRepo(repo, branch, cache_dir).sync())
        if not compiled.valid:
            return None, NO_ESTIMATES, ["warning: no start estimates: the config does not compile"]
        decision = decide_recorded(compiled, view, SystemClock().now())
    except (GitSyncError, PlanInputError) as exc:
        return None, NO_ESTIMATES, [f"warning: no start estimates: {exc}"]
    shown = report(compiled, decision, Outcome.none())
    return shown, estimate_decision(compiled, decision), []


def with_rows_of(view: StatusView, shown: Report | None) -> StatusView:
    """``view`` with the queue rows of ``shown`` (the decision its estimates come from);
    as it is without one."""
    if shown is None:
        return view
    rows = tuple(
        QueueStatus.from_summary(q, queue_kinds(shown.compiled, q.name)) for q in shown.queues
    )
    return replace(view, queues=rows)


def live_status_view(compiled: CompiledRepo, decision: Decision) -> StatusView:
    """What the status branch says after the cycle of ``decision``, if its creates succeed
    (``status_view`` of its expected report: no files written and read back), with the
    problems of the ledger it decided from."""
    view = status_view(expected(compiled, decision))
    more = [m for m in decision.memory.ledger.problems.messages if m not in view.problems]
    return replace(view, problems=(*view.problems, *more)) if more else view


def _watch_line(o: OperationStatus | None) -> str:
    if o is None:
        return "not on the status branch yet"
    parts = [str(o.phase)]
    if o.reason:
        parts.append(f"reason {o.reason}")
    where = [f"queue {o.queue}"] if o.queue else []
    if o.position:
        where.append(f"position {o.position}")
    if o.cluster and str(o.phase) != "Queued":
        where.append(f"cluster {o.cluster}")
    if o.generation is not None:
        where.append(f"generation {o.generation}")
    text = ", ".join(parts) + (f" ({', '.join(where)})" if where else "")
    return text + (f": {o.message}" if o.message else "")


def _ended(o: OperationStatus | None, generation: int | None) -> bool:
    if o is None:
        return False
    if generation is not None and (o.generation is None or int(o.generation) < generation):
        return False  # the record of an earlier run
    return str(o.phase) in ("Succeeded", "Failed", "Stopped", "Rejected")


def watch_operation(
    repo: str,
    op_id: str,
    status_branch: str,
    cache_dir: Path | None,
    *,
    interval: float = 2.0,
    generation: int | None = None,
    branch: str = "main",
    tail: int = 20,
    echo: Callable[[str], None] = click.echo,
    sleep: Callable[[float], None] = time.sleep,
    status_repo: str | None = None,
) -> str:
    """Follow ``op_id`` on the status branch of ``repo``, a line each time its phase,
    reason or position changes, until it ends (of ``generation`` or later); then its log's
    last ``tail`` lines. The phase it ended in."""
    last = ""
    while True:
        try:
            view: StatusView | None = read_branch(
                repo, status_branch, cache_dir, status_repo=status_repo
            )
        except StatusError:
            view = None  # no cycle has run yet
        record = view.operations.get(op_id) if view is not None else None
        if generation is not None and record is not None and record.generation is not None:
            stale = int(record.generation) < generation
        else:
            stale = False
        line = "waiting for the reconciler" if stale else _watch_line(record)
        if line != last:
            echo(f"{datetime.now(UTC):%H:%M:%S} {op_id}: {line}")
            last = line
        if _ended(record, generation):
            break
        sleep(interval)
    assert record is not None
    stamp = f"{datetime.now(UTC):%H:%M:%S} {op_id}:"
    if record.named_outputs:  # its result, then where it wrote the rest
        echo(f"{stamp} outputs {printable_text(outputs_line(record.named_outputs))}")
    if record.outputs_path:
        echo(f"{stamp} outputs at {printable_text(record.outputs_path)}")
    _log_tail(repo, branch, op_id, cache_dir, tail, echo)
    return str(record.phase)


def _echo_lines(echo: Callable[[str], None], text: object) -> None:
    for line in str(text).splitlines():
        echo(line)


def _log_tail(
    repo: str,
    branch: str,
    op_id: str,
    cache_dir: Path | None,
    tail: int,
    echo: Callable[[str], None],
) -> None:
    from reconciler.cli.logs_cmd import LogsError, find_target, show_logs_of
    from reconciler.cli.logs_cmd import _connect as connect_logs

    echo(f"--- last {tail} lines of {op_id}'s log ---")
    try:
        compiled = compile_repo(ConfigRepo(repo, branch, cache_dir).sync())
        target = find_target(compiled, op_id, False)
        show_logs_of(
            target,
            lambda spec: connect_logs(spec, None, None),
            False,
            tail,
            echo=lambda text, nl=True: _echo_lines(echo, text),
        )
    except (LogsError, GitSyncError) as exc:
        echo(f"(no log: {exc})")


@click.command("status")
@click.argument("target", required=False, metavar="[PROJECT[/OP]]")
@status_source_options
@click.option(
    "--watch",
    is_flag=True,
    help="With PROJECT/OP: follow its phase until it ends, then print its log's tail.",
)
@click.option(
    "--interval",
    type=FiniteFloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="With --watch: seconds between reads of the status branch.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table for people; json: the records of the status files.",
)
def status(
    target: str | None,
    repo: str,
    status_branch: str,
    status_repo: str | None,
    cache_dir: Path | None,
    live: bool,
    branch: str,
    cluster_kubeconfigs: tuple[str, ...],
    output: str,
    watch: bool,
    interval: float,
) -> None:
    """Show each operation's phase, reason, queue and position from the status branch,
    and when a pending one is estimated to start (STARTS: p50, and p90 when it differs);
    with PROJECT/OP, that operation's full record; with --watch, follow it until it ends."""
    if watch:
        if target is None or "/" not in target:
            raise click.UsageError("--watch needs PROJECT/OP")
        if live:
            raise click.UsageError("--watch reads the status branch: drop --live")
        try:
            phase = watch_operation(
                repo,
                target,
                status_branch,
                cache_dir,
                interval=interval,
                branch=branch,
                status_repo=status_repo,
            )
        except GitSyncError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            raise SystemExit(130) from None
        raise SystemExit(0 if phase == "Succeeded" else 1)
    notes: list[str] = []
    try:
        if live:
            view, estimates = read_live(
                repo,
                branch,
                status_branch,
                cache_dir,
                parse_overrides(cluster_kubeconfigs),
                status_repo,
            )
        else:
            view = read_branch(repo, status_branch, cache_dir, status_repo=status_repo)
            shown, estimates, notes = recorded_report(repo, branch, cache_dir, view)
            view = with_rows_of(view, shown)
        text = render(view, target, output, estimates)
    except (GitSyncError, StatusError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(text, nl=False)
    for line in [*warnings(view), *notes]:
        click.echo(line, err=True)
