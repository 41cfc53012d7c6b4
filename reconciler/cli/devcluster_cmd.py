"""``reconciler dev-cluster``: a real local control plane with kwok GPU nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from reconciler.cli.options import FiniteFloatRange
from reconciler.cli.output import ProgressPrinter
from reconciler.devcluster.build import BuildError, StatusSink, ensure_binaries
from reconciler.devcluster.cluster import DevCluster, DevClusterError
from reconciler.devcluster.shape import (
    DEFAULT_GPU_PRODUCTS,
    NAMED_SHAPES,
    ShapeError,
    default_shape,
    load_shape,
    named_shape,
)

_state_dir = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where pids, certs, logs and the kubeconfig live "
    "(default $RECONCILER_DEV_CLUSTER_DIR or ~/.local/state/reconciler/dev-cluster).",
)


def _printer() -> ProgressPrinter:
    """Progress on stderr: a spinner line with the build's elapsed time on a terminal,
    plain lines (one a minute while a build runs) when stderr is piped."""
    return ProgressPrinter(Console(stderr=True))


def _build_status(printer: ProgressPrinter) -> StatusSink:
    return lambda now: printer.status(now.line())


@click.group("dev-cluster")
def dev_cluster() -> None:
    """Build and run a local Kubernetes control plane with fake GPU nodes."""


@dev_cluster.command()
@_state_dir
@click.option(
    "--gpu-nodes",
    default=2,
    show_default=True,
    type=click.IntRange(0, 5000),
    help="Fake GPU nodes (kwok) to create, per GPU product (--gpu-type).",
)
@click.option(
    "--gpus-per-node",
    default=4,
    show_default=True,
    type=click.IntRange(1, 64),
    help="nvidia.com/gpu capacity of each GPU node.",
)
@click.option(
    "--gpu-type",
    "gpu_types",
    multiple=True,
    default=DEFAULT_GPU_PRODUCTS,
    show_default=", ".join(DEFAULT_GPU_PRODUCTS),
    help="A GPU product: one pool of --gpu-nodes nodes per product (repeat the option), "
    "labelled gpu.type=<product> and, for a known product (h100, h200, a100, l4, t4), with "
    "NVIDIA's nvidia.com/gpu.product label.",
)
@click.option(
    "--cpu-nodes",
    default=2,
    show_default=True,
    type=click.IntRange(0, 5000),
    help="Fake CPU-only nodes (kwok) to create.",
)
@click.option(
    "--shape",
    "shape_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML file with node pools; overrides the --*-nodes options.",
)
@click.option(
    "--named-shape",
    "named_shape_name",
    type=click.Choice(sorted(NAMED_SHAPES)),
    default=None,
    help="A built-in fleet; overrides the --*-nodes options. "
    + "; ".join(f"{k}: {v}" for k, v in sorted(NAMED_SHAPES.items()))
    + ".",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds to wait per step.",
)
def up(
    state_dir: Path | None,
    gpu_nodes: int,
    gpus_per_node: int,
    gpu_types: tuple[str, ...],
    cpu_nodes: int,
    shape_file: Path | None,
    named_shape_name: str | None,
    timeout: float,
) -> None:
    """Build the binaries (once) and start the control plane and kwok nodes. On a running
    cluster, only creates the nodes of the shape that are missing."""
    if shape_file and named_shape_name:
        click.echo("error: --shape and --named-shape exclude each other", err=True)
        sys.exit(2)
    try:
        if shape_file:
            pools = load_shape(shape_file)
        elif named_shape_name:
            pools = named_shape(named_shape_name)
        else:
            pools = default_shape(gpu_nodes, gpus_per_node, gpu_types, cpu_nodes)
        with _printer() as printer:
            DevCluster(state_dir).up(
                pools,
                progress=printer.line,
                timeout=timeout,
                build_status=_build_status(printer),
            )
    except (ShapeError, BuildError, DevClusterError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


@dev_cluster.command()
def build() -> None:
    """Build (or find in the cache) etcd, kube-*, kubectl and kwok, and print their paths."""
    try:
        with _printer() as printer:
            binaries = ensure_binaries(progress=printer.line, status=_build_status(printer))
    except BuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    for name, path in binaries.all().items():
        click.echo(f"{name}\t{path}")


@dev_cluster.command()
@_state_dir
def down(state_dir: Path | None) -> None:
    """Stop every process that ``up`` started."""
    try:
        survivors = DevCluster(state_dir).down(progress=lambda m: click.echo(m, err=True))
    except DevClusterError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if survivors:
        click.echo(f"error: still running: {', '.join(survivors)}", err=True)
        sys.exit(1)


@dev_cluster.command()
@_state_dir
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    help="text for people, json for scripts.",
)
def status(state_dir: Path | None, output: str) -> None:
    """Show whether the cluster is ready, its kubeconfig and its nodes. Exit 1 if not ready."""
    try:
        info = DevCluster(state_dir).status()
    except DevClusterError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if output == "json":
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    else:
        click.echo(f"ready:      {info['ready']}")
        click.echo(f"kubeconfig: {info['kubeconfig']}")
        for proc in info["processes"]:
            state = "running" if proc["alive"] else "stopped"
            click.echo(f"  {proc['name']:<24} pid {proc['pid']:<8} {state}")
        for node in info["nodes"]:
            ready = "Ready" if node["ready"] else "NotReady"
            click.echo(f"  node {node['name']:<20} {ready:<9} gpu={node['gpus']} cpu={node['cpu']}")
    sys.exit(0 if info["ready"] else 1)


@dev_cluster.command()
@_state_dir
def env(state_dir: Path | None) -> None:
    """Print ``export KUBECONFIG=...`` for ``eval $(reconciler dev-cluster env)``."""
    click.echo(f"export KUBECONFIG={DevCluster(state_dir).kubeconfig}")
