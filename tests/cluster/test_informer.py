"""The watch cache: list, then watch from the list's resourceVersion; relist on 410."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import KubeCluster
from helpers import wait_until
from test_kube_adapter import _op

from reconciler.adapters.kube import Kube
from reconciler.core.render import render_operation
from reconciler.runtime.informer import Informer

pytestmark = pytest.mark.cluster


def _names(informer: Informer, namespace: str) -> set[str]:
    return {
        o["metadata"]["name"] for o in informer.items() if o["metadata"]["namespace"] == namespace
    }


def test_informer_follows_creates_and_deletes(kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube(kube_cluster.api_client())
    informer = Informer(kube, "Job", watch_timeout=5)
    informer.start()
    try:
        assert informer.wait_synced(30)
        rendered = render_operation(
            _op(namespace, "cached"), {}, config_version="c", dispatched_at=datetime.now(UTC)
        )
        created = kube.create_or_adopt(rendered.job)
        wait_until(
            lambda: rendered.name in _names(informer, namespace),
            timeout=20,
            what="the watch to deliver the create",
        )
        assert int(informer.resource_version or 0) >= int(created.resource_version)
        kube.delete_workload(namespace, rendered.name)
        wait_until(
            lambda: rendered.name not in _names(informer, namespace),
            timeout=20,
            what="the watch to deliver the delete",
        )
    finally:
        informer.stop()


def test_informer_relists_when_its_version_is_too_old(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    kube = Kube(kube_cluster.api_client())
    rendered = render_operation(
        _op(namespace, "before"), {}, config_version="c", dispatched_at=datetime.now(UTC)
    )
    kube.create_or_adopt(rendered.job)
    # lots of writes, so resourceVersion 1 falls out of the apiserver's watch window
    for i in range(120):
        kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": f"churn-{i}"}})
    informer = Informer(kube, "Job", watch_timeout=5)
    informer._version = "1"  # resume from a version long compacted away
    informer._synced.set()
    informer.start()
    try:
        wait_until(lambda: informer.relists >= 1, timeout=30, what="a 410 and a relist")
        wait_until(
            lambda: rendered.name in _names(informer, namespace),
            timeout=30,
            what="the relist to fill the cache",
        )
    finally:
        informer.stop()
