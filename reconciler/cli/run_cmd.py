"""``reconciler run``: the long-running reconciler."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, connect_cluster
from reconciler.adapters.repo import snapshot_git, snapshot_worktree
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.faults import FaultPoints
from reconciler.runtime.loop import run_forever, watch_files

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_interval(text: str) -> float:
    """``10s``, ``1m30s``, ``2h`` or plain seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    match = _DURATION.match(text)
    if not text or not match:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 10s, 1m30s)")
    h, m, s = match.groups()
    return int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)


def parse_overrides(values: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{value!r}: expected NAME=PATH")
        out[name] = Path(path).expanduser()
    return out


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
        "syncError": result.sync_error,
        "clusters": {h.name: (h.error or "ok") for h in result.clusters},
        "phases": {op: s.phase.value for op, s in sorted(result.states.items())},
    }


def worktree_source(repo: Path) -> RepoSnapshot:
    """The files as saved (``--watch``), versioned by a hash of their content."""
    snapshot = snapshot_worktree(repo)
    digest = hashlib.sha256()
    for path in sorted(snapshot.files):
        digest.update(path.encode() + b"\0" + snapshot.files[path].content)
    return replace(snapshot, version=f"worktree-{digest.hexdigest()[:12]}")


def make_reconciler(
    repo: Path, branch: str, overrides: dict[str, Path], *, worktree: bool = False
) -> Reconciler:
    def source() -> RepoSnapshot:
        return worktree_source(repo) if worktree else snapshot_git(repo, branch)

    def connect(spec: ClusterSpec) -> Kube:
        api = connect_cluster(spec.kubeconfig, spec.context, overrides.get(spec.name))
        return Kube(api)

    return Reconciler(source, connect, SystemClock(), faults=FaultPoints.from_env())


@click.command("run")
@click.option(
    "--repo",
    "repo",
    required=True,
    type=click.Path(path_type=Path),
    help="The config repo (a local Git repository).",
)
@click.option("--branch", default="main", show_default=True)
@click.option("--interval", default="10s", show_default=True, help="Time between cycles.")
@click.option("--once", is_flag=True, help="Run one cycle, print its summary as JSON, exit.")
@click.option(
    "--watch",
    is_flag=True,
    help="Dev mode: read the files as saved (not commits) and re-plan on every save.",
)
@click.option(
    "--cluster-kubeconfig",
    "cluster_kubeconfigs",
    multiple=True,
    metavar="NAME=PATH",
    help="Use this kubeconfig for cluster NAME.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def run(
    repo: Path,
    branch: str,
    interval: str,
    once: bool,
    watch: bool,
    cluster_kubeconfigs: tuple[str, ...],
    log_level: str,
) -> None:
    """Pull the config repo and converge every connected cluster to its plan."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    seconds = parse_interval(interval)
    if not repo.is_dir():
        click.echo(f"error: {repo}: no such directory", err=True)
        sys.exit(1)
    if not watch and not (repo / ".git").exists() and not (repo / "HEAD").exists():
        click.echo(f"error: {repo}: not a Git repository (use --watch for plain files)", err=True)
        sys.exit(1)
    reconciler = make_reconciler(repo, branch, parse_overrides(cluster_kubeconfigs), worktree=watch)
    if once:
        result = reconciler.run_once()
        click.echo(json.dumps(cycle_summary(result), indent=2, sort_keys=True))
        for error in result.config_errors:
            click.echo(str(error), err=True)
        sys.exit(0 if result.ok and not result.config_errors else 1)
    stop = threading.Event()
    wake = threading.Event() if watch else None

    def shutdown(*_: object) -> None:
        stop.set()
        if wake is not None:
            wake.set()  # end the wait for the next cycle at once

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, shutdown)
    if wake is not None:
        threading.Thread(target=watch_files, args=(repo, wake, stop), daemon=True).start()
    run_forever(reconciler, seconds, stop, wake=wake)
