"""Options shared by several commands."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` without NaN and infinity: NaN passes every range check (each
    comparison is false), so ``--status-keep-days nan`` squashed the whole history."""

    name = "float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def parse_overrides(values: tuple[str, ...]) -> dict[str, Path]:
    """``NAME=PATH`` pairs: the kubeconfig to use for cluster NAME."""
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{value!r}: expected NAME=PATH")
        out[name] = Path(path).expanduser()
    return out


def cluster_kubeconfig_option(fn: F) -> F:
    return click.option(
        "--cluster-kubeconfig",
        "cluster_kubeconfigs",
        multiple=True,
        metavar="NAME=PATH",
        help="Use this kubeconfig for cluster NAME (overrides its Cluster file).",
    )(fn)


def auth_options(fn: F) -> F:
    """``--auth`` and ``--auth-cluster`` of the commands that serve the pages."""
    fn = click.option(
        "--auth-cluster",
        default=None,
        metavar="NAME",
        help="With --auth kubernetes: the cluster whose API server reviews tokens and "
        "access.  [default: the first with kubeconfig inCluster, else the first by name]",
    )(fn)
    return click.option(
        "--auth",
        type=click.Choice(["none", "kubernetes"]),
        default="none",
        show_default=True,
        help="kubernetes: every page, /api/v1 and log needs a bearer token that a "
        "TokenReview accepts and a SubjectAccessReview allows (get on "
        "queues.dispatch.reconciler.dev; an operation's: get on "
        "operations.dispatch.reconciler.dev in its namespace). /healthz, /readyz and "
        "/metrics stay open.",
    )(fn)


def check_auth(auth: str, auth_cluster: str | None) -> None:
    """``--auth-cluster`` only with ``--auth kubernetes``: a usage error otherwise."""
    if auth_cluster is not None and auth != "kubernetes":
        click.echo("error: --auth-cluster needs --auth kubernetes", err=True)
        raise SystemExit(2)


def repo_dir_option(fn: F) -> F:
    """``--repo``: a local config repo directory (default: the current one)."""
    return click.option(
        "--repo",
        "repo_dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=".",
        show_default=True,
        help="The config repo.",
    )(fn)


def branch_option(help: str = "The config branch.") -> Callable[[F], F]:
    return click.option("--branch", default="main", show_default=True, help=help)


def status_branch_option(fn: F) -> F:
    return click.option(
        "--status-branch",
        default="reconciler/status",
        show_default=True,
        help="The branch of the config repo that holds the reconciler's status.",
    )(fn)


def status_repo_option(fn: F) -> F:
    """``--status-repo``: the repo that holds the status branch when it is not the config
    repo (``status.repo``); every reader and the writer take the same value."""
    return click.option(
        "--status-repo",
        envvar="RECONCILER_STATUS_REPO",
        default=None,
        help="The repo (a URL or a path) whose status branch holds the reconciler's status, "
        "when it is not the config repo's.  [default: $RECONCILER_STATUS_REPO, else --repo]",
    )(fn)


def cache_dir_option(fn: F) -> F:
    """``--cache-dir``: where bare clones of config repos are kept (shared by every command)."""
    return click.option(
        "--cache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="RECONCILER_REPO_CACHE",
        default=None,
        help="Where config repos are cloned (bare)."
        "  [default: $RECONCILER_REPO_CACHE, else $XDG_CACHE_HOME/dispatch-reconciler/repos]",
    )(fn)


def log_options(fn: F) -> F:
    """``--log-format`` and ``--log-level`` of the long-running commands."""
    fn = click.option(
        "--log-level",
        default="info",
        show_default=True,
        type=click.Choice(["debug", "info", "warning", "error"]),
        help="The least severe log level printed.",
    )(fn)
    return click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Logs on stderr: text lines, or one JSON object per line.",
    )(fn)


def status_source_options(fn: F) -> F:
    """Where ``status`` and ``queues`` read from: the status branch of ``--repo``, or with
    ``--live`` the branch tip compiled and the clusters read now."""
    for decorator in reversed(
        (
            click.option(
                "--repo",
                default=".",
                show_default=True,
                help="The config repo: a URL or a local path.",
            ),
            status_branch_option,
            status_repo_option,
            cache_dir_option,
            click.option(
                "--live",
                is_flag=True,
                help="Compile the branch tip and read the clusters now, not the status branch.",
            ),
            branch_option("With --live (and status --watch): the config branch."),
            cluster_kubeconfig_option,
        )
    ):
        fn = decorator(fn)
    return fn
