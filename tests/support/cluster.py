"""The cluster a "cluster" test runs against, and the Reconcilers a test starts on it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KubeCluster:
    kubeconfig: Path
    dev: object | None  # the DevCluster when the session started one

    def api_client(self):  # type: ignore[no-untyped-def]
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


class Reconcilers(list[Any]):
    """The Reconcilers a test made, closed after it (watches stopped, Events sent)."""

    def start(self, repo: Path, **kw: Any) -> Any:
        """A Reconciler over the Git config repo ``repo`` (``reconciler_env.make_reconciler``)."""
        from support.reconciler_env import make_reconciler

        reconciler = make_reconciler(repo, **kw)
        self.append(reconciler)
        return reconciler


def binaries_to_build(items: list[Any]) -> set[str]:
    """The dev cluster's binaries that ``items`` need and the cache lacks: none unless a
    test runs on the dev cluster; helm only if a test uses the ``helm`` fixture."""
    if os.environ.get("RECONCILER_TEST_KUBECONFIG"):
        return set()
    cluster = [item for item in items if item.get_closest_marker("cluster")]
    if not cluster:
        return set()
    from reconciler.devcluster.build import cached_binaries

    wanted = cached_binaries().all()
    if not any("helm" in getattr(item, "fixturenames", ()) for item in cluster):
        del wanted["helm"]
    return {name for name, path in wanted.items() if not path.is_file()}
