"""The watch cache: list, then watch from the list's resourceVersion; relist on 410."""

from __future__ import annotations

import base64
import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.kube_objects import op as _op

from reconciler.adapters.kube import Kube
from reconciler.core.decision.render import render_operation
from reconciler.runtime.informer import Informer

pytestmark = pytest.mark.cluster


def _names(informer: Informer, namespace: str) -> set[str]:
    return {
        o["metadata"]["name"] for o in informer.items() if o["metadata"]["namespace"] == namespace
    }


@pytest.mark.parametrize("narrow", [False, True])
def test_informer_follows_creates_and_deletes(
    kube_cluster: KubeCluster, namespace: str, narrow: bool
) -> None:
    kube = Kube(kube_cluster.api_client())
    informer = Informer(kube, "Job", watch_timeout=5, narrow=narrow)
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
        (cached,) = [o for o in informer.items() if o["metadata"]["name"] == rendered.name]
        if narrow:  # only what observation reads: no apiVersion, no managedFields
            assert "apiVersion" not in cached and "managedFields" not in cached["metadata"]
        else:
            assert cached["apiVersion"] == "batch/v1"
        kube.delete_workload(namespace, rendered.name)
        wait_until(
            lambda: rendered.name not in _names(informer, namespace),
            timeout=20,
            what="the watch to deliver the delete",
        )
    finally:
        informer.stop()


def _compact_etcd(state_dir: Path) -> None:
    """Compact the dev cluster's etcd to its current revision (etcd's JSON gateway), so
    every older resourceVersion is gone, as happens every few minutes on a live cluster."""
    port = json.loads((state_dir / "cluster.json").read_text())["ports"]["etcd"]

    def call(path: str, body: dict[str, object]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    revision = call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
    call("/v3/kv/compaction", {"revision": revision, "physical": True})


@pytest.mark.parametrize("narrow", [False, True])
def test_informer_relists_when_its_version_is_too_old(
    kube_cluster: KubeCluster, namespace: str, narrow: bool
) -> None:
    """The watch's ERROR event (a Status of code 410) read whole by the narrow decode too."""
    if kube_cluster.dev is None:
        pytest.skip("compacts the dev cluster's etcd")
    kube = Kube(kube_cluster.api_client())
    rendered = render_operation(
        _op(namespace, "before"), {}, config_version="c", dispatched_at=datetime.now(UTC)
    )
    kube.create_or_adopt(rendered.job)
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "newer"}})
    _compact_etcd(kube_cluster.dev.state_dir)  # type: ignore[attr-defined]
    informer = Informer(kube, "Job", watch_timeout=5, narrow=narrow)
    informer._version = "1"  # resume from a version compacted away
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
