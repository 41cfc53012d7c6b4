"""``reconciler dev-cluster``: a real local control plane with kwok GPU nodes."""

from __future__ import annotations

import click


@click.group("dev-cluster")
def dev_cluster() -> None:
    """Build and run a local Kubernetes control plane with fake GPU nodes."""
