"""``reconciler run``: the long-running reconciler."""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.git import CacheError, Retention
from reconciler.adapters.kube import KubeError, connect
from reconciler.cli.errors import EX_SOFTWARE
from reconciler.cli.options import (
    FiniteFloatRange,
    auth_options,
    branch_option,
    cache_dir_option,
    check_auth,
    cluster_kubeconfig_option,
    log_options,
    parse_overrides,
    status_repo_option,
)
from reconciler.core.decision.trigger import Trigger
from reconciler.core.types import BUG_NOTE
from reconciler.runtime.auth import make_kubernetes_auth
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.http import HttpError, HttpServer, parse_address
from reconciler.runtime.leader import LeaderElector, default_identity
from reconciler.runtime.logging import configure_logging
from reconciler.runtime.loop import Loop, Wakeup, exit_process, watch_files
from reconciler.runtime.service import make_runtime
from reconciler.runtime.shards import ShardManager
from reconciler.runtime.web import make_web_app
from reconciler.runtime.webhook import SECRET_ENV, Receiver, WebhookConfigError, load_secret

log = logging.getLogger("reconciler.run")

# At shutdown, how long a status commit in progress may take before the process exits
# without it (git itself has no timeout on a push).
STATUS_WRITE_GRACE = 10.0
WATCHER_GRACE = 1.0  # seconds: the file watcher ends within one of its 50 ms steps

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$")


def parse_interval(text: str) -> float:
    """``10s``, ``1m30s``, ``2h``, ``200ms`` or plain seconds."""
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION.match(text)
        if not text or not match:
            raise click.BadParameter(
                f"{text!r} is not a duration (e.g. 10s, 1m30s, 200ms)"
            ) from None
        h, m, s, ms = match.groups()
        seconds = int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0) + float(ms or 0) / 1000
    if seconds < 0 or seconds != seconds:  # negative, NaN
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 10s, 1m30s, 200ms)")
    return seconds


DEFAULT_STATUS_INTERVAL = 10.0  # seconds: at most one status commit per this by default


def debounce_option(fn: Any) -> Any:
    return click.option(
        "--debounce",
        default="200ms",
        show_default=True,
        help="Least time between two cycles: a Job that finishes, fails or is deleted "
        "starts a cycle at once (so does a save, for run --watch), and further events "
        "within this time share the next one. --interval stays the longest time between "
        "cycles.",
    )(fn)


def cycle_summary(result: CycleResult) -> dict[str, Any]:
    plan = result.plan
    return {
        "version": result.version,
        "ok": result.ok,
        "leading": result.leading,
        "dispatched": list(result.dispatched),
        "adopted": list(result.adopted),
        "stopped": list(result.stopped),
        "failed": dict(result.failed),
        "pending": len(plan.pending) if plan else 0,
        "configErrors": [str(e) for e in result.config_errors],
        "internalError": result.internal_error,
        "syncError": result.sync_error,
        "clusters": {h.name: (h.error or "ok") for h in result.clusters},
        "phases": {op: s.phase.value for op, s in sorted(result.states.items())},
    }


@click.command("run")
@click.option(
    "--repo",
    "repo",
    required=True,
    help="The config repo: a Git URL or a local path (a plain directory with --watch).",
)
@branch_option("The config branch to reconcile.")
@click.option(
    "--status-branch",
    default="reconciler/status",
    show_default=True,
    help="Branch of the config repo that receives status ('' to disable).",
)
@status_repo_option
@click.option(
    "--status-keep-days",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="Status retention: squash the status branch's commits older than this many days "
    "into one root commit (status.retention.keepDays).",
)
@click.option(
    "--status-max-commits",
    type=click.IntRange(min=2),
    default=None,
    help="Status retention: keep at most this many commits on the status branch, the "
    "oldest squashed into one root commit (status.retention.maxCommits).",
)
@cache_dir_option
@click.option(
    "--interval",
    default="10s",
    show_default=True,
    help="Longest time between cycles (a finished Job starts one sooner: --debounce).",
)
@debounce_option
@click.option(
    "--status-interval",
    default=None,
    help="Least time between two status commits; a cycle's status is written only when it "
    "changed, and a later cycle writes what one within this time left. "
    "[default: --interval, at most 10s]",
)
@click.option("--once", is_flag=True, help="Run one cycle, print its summary as JSON, exit.")
@click.option(
    "--watch",
    is_flag=True,
    help="Dev mode: read the files as saved (not commits) and re-plan on every save.",
)
@cluster_kubeconfig_option
@click.option(
    "--http",
    "http_address",
    default=None,
    metavar="HOST:PORT",
    help="Serve /healthz, /readyz, /metrics and the read-only queue pages and /api/v1 "
    "(e.g. 127.0.0.1:8080).",
)
@auth_options
@click.option(
    "--webhook-secret-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Serve POST /api/webhook on --http: a GitHub, GitLab or generic (HMAC) push "
    "webhook signed with the secret in this file starts a fetch and a cycle at once. "
    f"[default: the secret in ${SECRET_ENV}; neither: no receiver]",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Dispatch only while holding a Lease (run several replicas safely).",
)
@click.option(
    "--shards",
    "sharded",
    is_flag=True,
    help="Share the config's partitions with the other replicas: each dispatches to those "
    "whose Lease it holds, up to its fair share (docs/operations.md, 'Shards'). Not with "
    "--leader-elect, --once or --watch.",
)
@click.option(
    "--lease-kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The home cluster for the Lease (default: in-cluster).",
)
@click.option(
    "--lease-namespace", default="default", show_default=True, help="Namespace of the Lease."
)
@click.option(
    "--lease-name", default="dispatch-reconciler", show_default=True, help="Name of the Lease."
)
@click.option(
    "--lease-duration",
    type=FiniteFloatRange(min=0, min_open=True),
    default=15.0,
    show_default=True,
    help="Seconds a follower waits after the Lease last changed before taking it over.",
)
@click.option(
    "--renew-deadline",
    type=FiniteFloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds the leader may fail to renew before it stops dispatching.",
)
@click.option(
    "--retry-period",
    type=FiniteFloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds between Lease attempts.",
)
@click.option(
    "--identity",
    default=None,
    help="This replica's Lease identity (default: host name plus a random suffix).",
)
@log_options
def run(
    repo: str,
    branch: str,
    status_branch: str,
    status_repo: str | None,
    status_keep_days: float | None,
    status_max_commits: int | None,
    cache_dir: Path | None,
    interval: str,
    debounce: str,
    status_interval: str | None,
    once: bool,
    watch: bool,
    cluster_kubeconfigs: tuple[str, ...],
    http_address: str | None,
    auth: str,
    auth_cluster: str | None,
    webhook_secret_file: Path | None,
    log_format: str,
    leader_elect: bool,
    sharded: bool,
    lease_kubeconfig: Path | None,
    lease_namespace: str,
    lease_name: str,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    identity: str | None,
    log_level: str,
) -> None:
    """Pull the config repo and converge every connected cluster to its plan."""
    configure_logging(log_format, log_level)
    seconds = parse_interval(interval)
    min_gap = min(parse_interval(debounce), seconds)
    status_every = (
        parse_interval(status_interval)
        if status_interval is not None
        else min(seconds, DEFAULT_STATUS_INTERVAL)
    )
    if http_address:  # a usage error before anything starts, not parse_address's ValueError
        try:
            parse_address(http_address)
        except ValueError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
    check_auth(auth, auth_cluster)
    if auth != "none" and not http_address:
        click.echo("error: --auth protects the pages of --http: give --http too", err=True)
        sys.exit(2)
    if sharded:
        clash = [
            f
            for f, on in (("--leader-elect", leader_elect), ("--once", once), ("--watch", watch))
            if on
        ]
        if clash:
            click.echo(f"error: --shards is not for {clash[0]}", err=True)
            sys.exit(2)
    elector: LeaderElector | None = None
    if leader_elect:
        try:
            elector = LeaderElector(
                connect(lease_kubeconfig),
                lease_namespace,
                lease_name,
                identity or default_identity(),
                lease_duration,
                renew_deadline,
                retry_period,
            )
        except (ValueError, KubeError, OSError) as exc:
            click.echo(f"error: leader election: {exc}", err=True)
            sys.exit(2)
    shards: ShardManager | None = None
    if sharded:
        try:
            shards = ShardManager(
                connect(lease_kubeconfig),
                lease_namespace,
                lease_name,
                identity or default_identity(),
                lease_duration,
                renew_deadline,
                retry_period,
            )
        except (ValueError, KubeError, OSError) as exc:
            click.echo(f"error: shards: {exc}", err=True)
            sys.exit(2)
    try:
        webhook_secret = load_secret(webhook_secret_file)
    except WebhookConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if webhook_secret is not None and not http_address and not once:
        click.echo("error: the webhook receiver (--webhook-secret-file) needs --http", err=True)
        sys.exit(2)
    if webhook_secret is not None and watch:
        click.echo("error: --webhook-secret-file reads pushes: not with --watch", err=True)
        sys.exit(2)
    if watch and not Path(repo).is_dir():
        click.echo(f"error: {repo}: --watch needs a local directory", err=True)
        sys.exit(1)
    overrides = parse_overrides(cluster_kubeconfigs)
    stop = threading.Event()
    wake = Wakeup()
    loop = Loop(stop, wake)
    is_leader = elector.is_leader if elector else None

    def may_write() -> bool:
        """Leading, and not shutting down: once SIGTERM came, no create starts."""
        return not loop.stopping and (is_leader is None or is_leader())

    try:
        runtime = make_runtime(
            repo,
            branch,
            overrides,
            worktree=watch,
            status_branch=status_branch or None,
            status_repo=status_repo,
            retention=Retention(status_keep_days, status_max_commits),
            cache_dir=cache_dir,
            is_leader=may_write,
            wakeup=wake,
            status_interval=status_every,
            fetch_interval=seconds,  # a cycle started by an event plans with the config in hand
            # the loop's next cycle never waits for the last one's status write
            status_background=not once,
            status_leader=elector.is_leader if elector else None,
            freeze_heap=not once,  # a long-lived process
            shards=shards,
        )
    except CacheError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    reconciler = runtime.reconciler
    if once:
        result = reconciler.run_once()
        runtime.on_cycle(result)
        runtime.close(timeout=STATUS_WRITE_GRACE)
        reconciler.close()
        unwritten = runtime.unwritten
        click.echo(json.dumps(cycle_summary(result), indent=2, sort_keys=True))
        for error in result.config_errors:
            click.echo(str(error), err=True)
        if result.internal_error:  # the traceback is in the log
            click.echo(f"internal error: {result.internal_error} ({BUG_NOTE})", err=True)
            sys.exit(EX_SOFTWARE)
        if unwritten:
            click.echo(
                f"error: the status of this cycle is not on the branch: {unwritten}", err=True
            )
            sys.exit(1)
        sys.exit(0 if result.ok and not result.config_errors else 1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, loop.request_stop)
    server: HttpServer | None = None
    if http_address:
        try:
            web = make_web_app(runtime, overrides, worktree=Path(repo) if watch else None)
            authorize = (
                make_kubernetes_auth(runtime, overrides, auth_cluster)
                if auth == "kubernetes"
                else None
            )
            receiver = None
            if webhook_secret is not None:
                counts = runtime.metrics.webhook_requests
                receiver = Receiver(
                    webhook_secret,
                    branch,
                    runtime.webhook_push,
                    on_reply=lambda r: counts.labels(r.provider, r.result).inc(),
                )
            server = HttpServer(
                http_address,
                runtime.metrics.registry,
                runtime.readiness,
                web=web,
                webhook=receiver,
                authorize=authorize,
            )
        except HttpError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        server.start()
        log.info("serving /healthz /readyz /metrics and the queue pages on %s", server.url)
        if webhook_secret is not None:
            log.info("webhook receiver on %s/api/webhook (branch %s)", server.url, branch)
    if elector is not None:

        def on_change(leading: bool) -> None:
            if leading:  # dispatch now, not at the next interval
                runtime.trigger(Trigger.LEADING)

        elector.on_change = on_change
        elector.start()
    if shards is not None:
        shards.on_change = lambda _held: runtime.trigger(Trigger.LEADING)
        shards.start()
    watcher: threading.Thread | None = None
    if watch:
        watcher = threading.Thread(
            target=watch_files, args=(Path(repo), runtime.config_changed, stop), daemon=True
        )
        watcher.start()
    loop.start(reconciler, seconds, runtime.on_cycle, min_gap=min_gap)
    try:
        loop.wait()
    finally:
        # The order matters (docs/operations.md, "Shutdown"): may_write() is False from
        # the signal on, so no create starts; the last cycle's status is written, still
        # leading (a commit in progress is finished); close() waits for the creates
        # already sent (each bounded by the client's timeouts); only then is the Lease
        # released. A cycle blocked reading a cluster is not waited for: it ends with the
        # process.
        # When no cycle is left running, what the watch caches hold now (a Job that ended
        # since the last cycle) is decided over once more, nothing carried out, and written
        # with the rest: the branch never lags what this process saw.
        ended = loop.finish(timeout=STATUS_WRITE_GRACE)
        leads = elector is None or elector.is_leader()
        final = reconciler.run_final() if ended and leads else None
        runtime.close(STATUS_WRITE_GRACE, final)  # the last status, still leading
        if runtime.unwritten:
            log.error("shutdown: the last status is not on the branch: %s", runtime.unwritten)
            click.echo(
                f"warning: the last status is not on the branch: {runtime.unwritten}", err=True
            )
        reconciler.close()
        if elector is not None:
            elector.stop(release=True)
        if shards is not None:  # the other replicas take its partitions at once
            shards.stop(release=True)
        if server is not None:
            server.stop()
        if watcher is not None:
            # watchfiles sees ``stop`` within a step (50 ms); a daemon thread still inside
            # its Rust loop (which calls back into Python) when the interpreter finalizes
            # aborts the process (SIGABRT)
            watcher.join(timeout=WATCHER_GRACE)
    exit_process(0)  # shutdown is done; daemon threads must not see finalization
