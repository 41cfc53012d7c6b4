"""``reconciler demo``: the example config repo, dispatched to the dev cluster, live."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

import click
from kubernetes.client.exceptions import ApiException
from rich.console import Console
from rich.live import Live
from rich.table import Table

from reconciler.adapters.git import CacheError, ConfigRepo
from reconciler.adapters.kube import KubeError, connect
from reconciler.cli.options import FiniteFloatRange
from reconciler.cli.output import ProgressPrinter, counts_line, plain_table
from reconciler.core.observation.capacity import placement_of
from reconciler.core.plan.flavors import contradiction
from reconciler.core.plan.model import FlavorUsage, QueueSummary
from reconciler.core.quantity import format_quantity
from reconciler.core.types import Phase
from reconciler.devcluster.build import BuildError
from reconciler.devcluster.cluster import DevCluster, DevClusterError
from reconciler.devcluster.existing import (
    OWNER,
    OWNER_LABEL,
    ExistingClusterError,
    adapt_repo,
    clean_up,
    create_prerequisites,
)
from reconciler.devcluster.prerequisites import apply_prerequisites
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.loop import Wakeup, run_forever

TEMPLATE = Path(__file__).resolve().parents[2] / "config-repo-template"


QUEUE_COLUMNS = (
    "queue",
    "cluster",
    "priority",
    "active/limit",
    "quota used/limit",
    "running",
    "waiting",
    "pending",
    "head reason",
)


def queue_title(result: CycleResult) -> str:
    return f"config {str(result.version)[:12]}  ·  {result.at:%H:%M:%S}"


def queue_rows(result: CycleResult) -> list[tuple[str, ...]]:
    """One row per queue, in :data:`QUEUE_COLUMNS` order: priority, concurrency, quota
    used/limit, running, waiting for capacity, pending, why its head waits."""
    shown = result.report
    if shown is None:
        return []
    running: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for state in result.states.values():
        if state.queue is None:
            continue
        if state.phase is Phase.RUNNING:
            running[state.queue] = running.get(state.queue, 0) + 1
        elif state.phase is Phase.DISPATCHED:
            waiting[state.queue] = waiting.get(state.queue, 0) + 1
    rows: list[tuple[str, ...]] = []
    for q in shown.queues:  # what the cycle's states hold (a failed create holds nothing)
        if q.flavors:  # one cell per flavor, in the queue's fallback order
            quota = "; ".join(
                f"{f.name}: " + _quota_cell(f.quota, f.used_after, f.borrowed_after, f.lent_after)
                for f in q.flavors
            )
        else:
            quota = _quota_cell(q.quota, q.used_after, q.borrowed_after, q.lent_after)
        rows.append(
            (
                q.name,
                q.cluster,
                str(q.priority),
                f"{q.active + q.dispatching}/{q.concurrency if q.concurrency is not None else '-'}",
                quota or "-",
                str(running.get(q.name, 0)),
                str(waiting.get(q.name, 0)),
                str(q.pending),
                q.head_reason.value if q.head_reason else "",
            )
        )
    return rows


def queue_table(result: CycleResult) -> Table:
    """The queue rows as a rich table, for a terminal."""
    table = Table(title=queue_title(result))
    for column in QUEUE_COLUMNS:
        table.add_column(column)
    for row in queue_rows(result):
        table.add_row(*row)
    return table


def queue_lines(result: CycleResult) -> list[str]:
    """The queue rows as plain aligned lines, for a pipe or a log: never cut to a width."""
    return [queue_title(result), *plain_table(QUEUE_COLUMNS, queue_rows(result), indent="  ")]


def phase_counts(result: CycleResult | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in result.states.values() if result else ():
        counts[state.phase.value] = counts.get(state.phase.value, 0) + 1
    return counts


def cycle_line(result: CycleResult) -> str:
    """One plain line for a cycle, piped: what it did and where the operations stand."""
    did = []
    for verb, ops in (
        ("dispatched", result.dispatched),
        ("adopted", result.adopted),
        ("stopped", result.stopped),
        ("failed", tuple(result.failed)),
    ):
        if ops:
            shown = ", ".join(ops[:4]) + (f" and {len(ops) - 4} more" if len(ops) > 4 else "")
            did.append(f"{verb} {len(ops)} ({shown})")
    pending = len(result.plan.pending) if result.plan is not None else 0
    return (
        f"{result.at:%H:%M:%S} config {str(result.version)[:12]}: "
        + ("; ".join(did) + "; " if did else "")
        + f"operations {counts_line(phase_counts(result))}, {pending} pending"
    )


def _quota_cell(
    quota: Mapping[str, Decimal],
    used: Mapping[str, Decimal],
    borrowed: Mapping[str, Decimal],
    lent: Mapping[str, Decimal],
) -> str:
    """``nvidia.com/gpu 1/2 (+1 borrowed), memory 8Gi/64Gi``: used/limit per resource."""
    return ", ".join(
        f"{r} {format_quantity(used.get(r, Decimal(0)))}/{format_quantity(limit)}"
        + _cohort_note(borrowed.get(r), lent.get(r))
        for r, limit in sorted(quota.items())
    )


def _cohort_note(borrowed: Decimal | None, lent: Decimal | None) -> str:
    if borrowed:
        return f" (+{format_quantity(borrowed)} borrowed)"
    if lent:
        return f" ({format_quantity(lent)} lent)"
    return ""


def borrowing_lines(result: CycleResult) -> list[str]:
    """One line per operation this cycle dispatches by borrowing from its cohort (of a
    flavor, in a queue with flavors: a cohort lends each flavor on its own)."""
    shown = result.report
    if shown is None or result.plan is None:
        return []
    # before this cycle: the plan's observed count (a report's queues hold one count, what
    # its states hold, recounted when only some creates succeeded)
    before = {
        (q.name, flavor): share.borrowed
        for q in result.plan.queues
        for flavor, share in _cohort_shares(q)
    }
    lines = []
    queues = shown.queues
    for q in queues:
        for flavor, mine in _cohort_shares(q):
            for r, amount in sorted(mine.borrowed_after.items()):
                if amount <= before.get((q.name, flavor), {}).get(r, Decimal(0)):
                    continue
                lenders = [
                    f"{other.name} lends {format_quantity(theirs.lent_after[r])}"
                    for other in queues
                    if other.cohort == q.cohort
                    for f, theirs in _cohort_shares(other)
                    if f == flavor and theirs.lent_after.get(r)
                ]
                of = f"{r} ({flavor})" if flavor else r
                lines.append(
                    f"{q.name} borrows {of} from cohort {q.cohort}: "
                    f"{format_quantity(amount)} above its quota ({', '.join(lenders)})"
                )
    return lines


def _cohort_shares(q: QueueSummary) -> list[tuple[str | None, QueueSummary | FlavorUsage]]:
    """What a queue borrows and lends: per flavor in a queue with flavors, else the queue's."""
    if q.flavors:
        return [(f.name, f) for f in q.flavors]
    return [(None, q)]


def flavor_lines(result: CycleResult) -> list[str]:
    """One line per operation this cycle dispatches to a flavor after the first of its queue
    that it could have used: the earlier ones were full (the fallback order at work). An
    operation whose nodeSelector rules the earlier flavors out (presets/a100.yaml) gets no
    line: it never had a choice."""
    if result.plan is None or result.compiled is None:
        return []
    compiled = result.compiled
    by_id = {op.id: op for op in compiled.operations}
    summaries = {q.name: q for q in result.plan.queues}
    lines = []
    for d in result.plan.dispatch:
        q = summaries.get(d.queue)
        op = by_id.get(d.operation)
        if d.flavor is None or q is None or op is None:
            continue
        names = [f.name for f in q.flavors]
        if d.flavor not in names:
            continue
        placement = placement_of(op.spec)
        skipped = [
            f
            for f in q.flavors[: names.index(d.flavor)]
            if f.name in compiled.flavors
            and contradiction(compiled.flavors[f.name].node_labels, placement) is None
        ]
        if skipped:
            full = " and ".join(f.name for f in skipped)
            lines.append(
                f"{d.operation} falls back to flavor {d.flavor} of {d.queue}: {full} has no room"
            )
    return lines


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=reconciler demo", "-c", "user.email=demo@reconciler.dev", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@click.command("demo")
@click.option("--keep", is_flag=True, help="Keep reconciling after all work is done (Ctrl-C).")
@click.option(
    "--interval",
    type=FiniteFloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds between cycles.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to create the demo config repo (default: a new temp dir).",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Give up after this many seconds.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The dev cluster's state dir (default: the usual one).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Run on this existing cluster instead of the dev cluster: only namespaced "
    "objects, in namespaces the demo labels as its own, deleted at the end unless --keep.",
)
@click.option("--context", help="With --kubeconfig: its context (default: its current one).")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="RECONCILER_REPO_CACHE",
    default=None,
    help="Where the demo's config repo is cloned (bare)."
    "  [default: $RECONCILER_REPO_CACHE, else WORKDIR/cache]",
)
def demo(
    keep: bool,
    interval: float,
    workdir: Path | None,
    timeout: float,
    state_dir: Path | None,
    kubeconfig: Path | None,
    context: str | None,
    cache_dir: Path | None,
) -> None:
    """Copy the example config into a Git repo, start the dev cluster (or use an existing
    one) and reconcile it live."""
    from reconciler.runtime.service import make_runtime

    console = Console()
    errors = Console(stderr=True)
    if context is not None and kubeconfig is None:
        raise click.UsageError("--context needs --kubeconfig")
    if kubeconfig is not None and state_dir is not None:
        raise click.UsageError("--state-dir is the dev cluster's: drop it with --kubeconfig")
    root = workdir or Path(tempfile.mkdtemp(prefix="reconciler-demo-"))
    repo = root / "config"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(TEMPLATE, repo)
    say = ProgressPrinter(console)
    ours: list[str] = []
    if kubeconfig is not None:
        kubeconfig = kubeconfig.resolve()
        try:
            context = context or current_context(kubeconfig)
            api = connect(kubeconfig, context)
            notes = adapt_repo(repo, kubeconfig, context)
            ours = create_prerequisites(api, root.name)
        except (ExistingClusterError, KubeError, ApiException, ValueError) as exc:
            why = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else exc
            errors.print(f"[red]error:[/red] {why}", highlight=False, soft_wrap=True)
            sys.exit(1)
        for note in notes:
            say.line(note)
        say.line(f"namespaces (labelled {OWNER_LABEL}={OWNER}): {', '.join(ours)}")
        logs = f"{kubeconfig} (an existing cluster)"
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "example config")
    say.line(f"config repo: {repo}")
    cache_dir = cache_dir or root / "cache"
    try:  # before a cluster is started for nothing
        ConfigRepo(str(repo), "main", cache_dir).open()
    except CacheError as exc:
        errors.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(1)

    if kubeconfig is None:
        cluster = DevCluster(state_dir)
        try:
            with say:
                cluster.up(progress=say.line, build_status=lambda now: say.status(now.line()))
            apply_prerequisites(connect(cluster.kubeconfig))
        except (BuildError, DevClusterError, KubeError, ApiException) as exc:
            errors.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            sys.exit(1)
        kubeconfig = cluster.kubeconfig
        logs = f"{cluster.logs}; stop it with `reconciler dev-cluster down`"

    wake = Wakeup()  # a Job that ends dispatches the next at once
    runtime = make_runtime(
        str(repo),
        "main",
        {"local": kubeconfig},
        cache_dir=cache_dir,
        wakeup=wake,
        status_interval=interval,
        fetch_interval=interval,
    )
    stop = threading.Event()

    def time_out() -> None:
        stop.set()
        wake.interrupt()

    timer = threading.Timer(timeout, time_out)
    timer.daemon = True
    timer.start()
    outcome: dict[str, CycleResult] = {}
    # a terminal gets the table redrawn in place; a pipe one line per cycle that changed
    # something (a live display piped comes out as frames cut to 80 columns)
    live = Live(console=console, refresh_per_second=2) if console.is_terminal else None
    last_line = [""]

    def on_cycle(result: CycleResult) -> None:
        runtime.on_cycle(result)
        outcome["last"] = result
        for line in (*flavor_lines(result), *borrowing_lines(result)):
            say.line(line)
        if live is not None:
            live.update(queue_table(result))
        else:
            line = cycle_line(result)
            if line.partition(": ")[2] != last_line[0]:
                last_line[0] = line.partition(": ")[2]
                say.line(line)
        finished = (
            result.plan is not None
            and all(s.phase.finished for s in result.states.values())
            and not result.plan.pending
            and not result.plan.dispatch
        )
        if finished and not keep:
            stop.set()

    with (
        live if live is not None else contextlib.nullcontext(),
        contextlib.suppress(KeyboardInterrupt),
    ):
        run_forever(runtime.reconciler, interval, stop, on_cycle, wake)
    timer.cancel()
    runtime.close()  # the last cycle's status, even if --status-interval put it off
    runtime.reconciler.close()
    last = outcome.get("last")
    done = last is not None and all(s.phase.finished for s in last.states.values())
    summary = summary_lines(last, repo, logs)
    if last is not None and console.is_terminal:
        console.print(queue_table(last))
    elif last is not None:
        for line in queue_lines(last):
            say.line(line)
    for line in summary:
        say.line(line)
    if ours and not keep:
        try:
            gone = clean_up(connect(kubeconfig, context), ours)
            say.line(f"deleted namespaces {', '.join(gone)} (and everything in them)")
        except (KubeError, ApiException) as exc:
            errors.print(f"[red]error:[/red] cleaning up: {exc}", highlight=False, soft_wrap=True)
            sys.exit(1)
    elif ours:
        say.line(f"kept namespaces {', '.join(ours)} (--keep)")
    if runtime.unwritten:
        errors.print(f"error: the status branch lags this summary: {runtime.unwritten}")
        sys.exit(1)
    sys.exit(0 if done or keep else 1)


def current_context(kubeconfig: Path) -> str:
    """The kubeconfig's current context; ValueError when it has none."""
    import yaml

    doc = yaml.safe_load(kubeconfig.read_text())
    name = doc.get("current-context") if isinstance(doc, dict) else None
    if not name:
        raise ValueError(f"{kubeconfig} has no current-context: pass --context")
    return str(name)


def summary_lines(last: CycleResult | None, repo: Path, logs: Path | str) -> list[str]:
    """What the demo prints at the end, after the last queue table: the operations by
    phase, where the status branch and the cluster logs are."""
    return [
        f"operations: {counts_line(phase_counts(last))}",
        f"status branch: reconciler/status in {repo} "
        f"(`reconciler status --repo {repo}`, `git -C {repo} log reconciler/status`)",
        f"cluster logs: {logs}",
    ]
