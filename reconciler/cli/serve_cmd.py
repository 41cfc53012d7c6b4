"""``reconciler serve``: the queue pages and /api/v1, read-only.

Each interval it runs the reconciler's own cycle as a follower that never holds the lease:
the same ``decide``, carrying out nothing. It never creates, deletes or annotates anything
in a cluster and never writes to Git; Git stays the only write path. It starts from what
the leader recorded on the status branch, so a cluster that cannot be read keeps its last
known phases (not "everything dispatched").
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import click

from reconciler.adapters.git import CacheError
from reconciler.adapters.repo import is_git_repo
from reconciler.cli.options import (
    auth_options,
    branch_option,
    cache_dir_option,
    check_auth,
    cluster_kubeconfig_option,
    log_options,
    parse_overrides,
    status_branch_option,
    status_repo_option,
)
from reconciler.cli.run_cmd import debounce_option, parse_interval
from reconciler.runtime.auth import make_kubernetes_auth
from reconciler.runtime.http import HttpError, HttpServer, parse_address
from reconciler.runtime.logging import configure_logging
from reconciler.runtime.loop import Loop, Wakeup, exit_process
from reconciler.runtime.service import make_runtime
from reconciler.runtime.web import make_web_app

log = logging.getLogger("reconciler.serve")


@click.command("serve")
@click.option(
    "--repo",
    required=True,
    help="The config repo: a Git URL or a local path (a plain directory is read as saved).",
)
@branch_option("The config branch to show.")
@status_branch_option
@status_repo_option
@cache_dir_option
@click.option(
    "--http",
    "http_address",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve the pages (also /healthz, /readyz, /metrics).",
)
@auth_options
@cluster_kubeconfig_option
@click.option(
    "--interval",
    default="10s",
    show_default=True,
    help="Longest time between refreshes (a finished Job refreshes sooner: --debounce).",
)
@debounce_option
@log_options
def serve(
    repo: str,
    branch: str,
    status_branch: str,
    status_repo: str | None,
    cache_dir: Path | None,
    http_address: str,
    auth: str,
    auth_cluster: str | None,
    cluster_kubeconfigs: tuple[str, ...],
    interval: str,
    debounce: str,
    log_format: str,
    log_level: str,
) -> None:
    """Serve the queue management pages and the JSON API, read-only: compile, observe and
    plan every interval, and when a Job ends; never dispatch, stop or write anything."""
    configure_logging(log_format, log_level)
    seconds = parse_interval(interval)
    min_gap = min(parse_interval(debounce), seconds)
    overrides = parse_overrides(cluster_kubeconfigs)
    check_auth(auth, auth_cluster)
    try:  # before the config is fetched
        parse_address(http_address)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    local = Path(repo).expanduser()
    wake = Wakeup()
    worktree = "://" not in repo and local.is_dir() and not is_git_repo(local)
    try:
        runtime = make_runtime(
            str(local) if worktree else repo,
            branch,
            overrides,
            worktree=worktree,
            status_branch=status_branch,  # read, never written: a follower does not publish
            status_repo=status_repo,
            cache_dir=cache_dir,
            is_leader=lambda: False,  # never converge: a follower that only plans
            wakeup=wake,  # a Job that ends refreshes the pages at once, as it dispatches in run
            fetch_interval=seconds,
        )
    except CacheError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    web = make_web_app(runtime, overrides, worktree=local if worktree else None)
    authorize = (
        make_kubernetes_auth(runtime, overrides, auth_cluster) if auth == "kubernetes" else None
    )
    try:
        server = HttpServer(
            http_address, runtime.metrics.registry, runtime.readiness, web=web, authorize=authorize
        )
    except (HttpError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    loop = Loop(threading.Event(), wake)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, loop.request_stop)
    server.start()
    log.info("serving the queue pages (read-only) on %s", server.url)
    click.echo(f"serving {server.url}/ (read-only)", err=True)
    loop.start(runtime.reconciler, seconds, runtime.on_cycle, min_gap=min_gap)
    try:
        loop.wait()
    finally:
        # Read-only: nothing to finish. A cycle blocked on an unreachable cluster is left
        # to end with the process; only a metrics update in progress is waited for.
        loop.finish()
        runtime.reconciler.close()
        server.stop()
    exit_process(0)  # shutdown is done; daemon threads must not see finalization
