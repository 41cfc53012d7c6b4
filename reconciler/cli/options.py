"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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
