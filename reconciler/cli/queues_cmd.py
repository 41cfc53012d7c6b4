"""``reconciler queues``: the queue management view, one row per queue in priority order,
then the fleet totals per cluster and over all clusters.

Without ``--live`` it reads the status branch (what the reconciler last recorded); with
``--live`` it compiles the branch tip, reads every cluster and plans, changing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from reconciler.adapters.git import GitSyncError
from reconciler.cli.options import parse_overrides, status_source_options
from reconciler.cli.status_cmd import (
    StatusError,
    live_decision,
    read_branch,
    recorded_report,
)
from reconciler.core.decision.cycle import Decision
from reconciler.core.plan.estimate import estimate_decision
from reconciler.core.reporting.report import Outcome, report
from reconciler.core.types import CompiledRepo
from reconciler.core.views.queue_view import (
    QueuesView,
    queues_to_table,
    queues_view,
    queues_view_from_status,
)
from reconciler.runtime.live import unreachable_warnings

OUTPUTS = ("table", "wide", "json")


def read_live_view(
    repo: str,
    branch: str,
    status_branch: str,
    cache_dir: Path | None,
    overrides: dict[str, Path],
    status_repo: str | None = None,
) -> tuple[QueuesView, list[str]]:
    """The next cycle's decision over the clusters as they are now; nothing is dispatched.
    Also the warnings for clusters that could not be read, and for the ledger."""
    compiled, decision = live_decision(
        repo, branch, status_branch, cache_dir, overrides, status_repo
    )
    notes = [*decision.memory.ledger.problems.warnings(), *unreachable_warnings(decision)]
    return live_queues_view(compiled, decision), notes


def live_queues_view(compiled: CompiledRepo, decision: Decision) -> QueuesView:
    """The queue view of ``decision``, not carried out (its dispatches are ``next``), with
    its start estimates."""
    shown = report(compiled, decision, Outcome.none())
    return queues_view(shown, estimate_decision(compiled, decision), source="live")


def render_view(view: QueuesView, output: str) -> str:
    if output == "json":
        return json.dumps(view.to_json(), indent=2, sort_keys=True) + "\n"
    return queues_to_table(view, wide=output == "wide")


@click.command("queues")
@status_source_options
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table, wide (adds next, pods, cohort, kinds, strategy, paused) or json.",
)
def queues(
    repo: str,
    status_branch: str,
    status_repo: str | None,
    cache_dir: Path | None,
    live: bool,
    branch: str,
    cluster_kubeconfigs: tuple[str, ...],
    output: str,
) -> None:
    """Show each queue's priority, concurrency, quota use and pending work, in priority
    order, and the fleet totals. RUNNING and WAITING split the active operations: WAITING
    were dispatched but do not run yet (WaitingForCapacity: no node has room). HEAD STARTS
    estimates when the first pending operation starts (p50, and p90 when it differs). With
    --live, NEXT (wide) counts what the next cycle would dispatch."""
    notes: list[str] = []
    try:
        if live:
            view, notes = read_live_view(
                repo,
                branch,
                status_branch,
                cache_dir,
                parse_overrides(cluster_kubeconfigs),
                status_repo,
            )
        else:
            status = read_branch(repo, status_branch, cache_dir, status_repo=status_repo)
            for problem in status.problems:
                click.echo(f"warning: unreadable status file {problem}", err=True)
            shown, estimates, notes = recorded_report(repo, branch, cache_dir, status)
            view = (
                queues_view_from_status(status, estimates)
                if shown is None
                else queues_view(shown, estimates, source="status-branch")
            )
    except (GitSyncError, StatusError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(render_view(view, output), nl=False)
    for note in notes:
        click.echo(note, err=True)
