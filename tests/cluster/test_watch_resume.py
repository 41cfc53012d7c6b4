"""Watches read straight off the socket (``Kube.watch_managed`` through ``http1.stream``)
against the real apiserver: a watch the apiserver ends at its ``timeoutSeconds`` is
resumed from the last event's resourceVersion, over and over while Jobs are created, and
no event is lost or seen twice; the watches share one kept-alive connection; a watch
with a bearer token (a ServiceAccount's) sees what its RBAC lets it, and a 403 where
it does not."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from support.cluster import KubeCluster
from support.kube_objects import op as _op

from reconciler.adapters.kube import Kube, KubeError, connect
from reconciler.core.decision.render import render_operation

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def _rendered(namespace: str, names: list[str]) -> list[dict[str, Any]]:
    """The Jobs of operations ``names``."""
    now = datetime.now(UTC)
    return [
        dict(render_operation(_op(namespace, name), {}, config_version="c", dispatched_at=now).job)
        for name in names
    ]


def _create_jobs(kube: Kube, jobs: list[dict[str, Any]], gap: float) -> None:
    for job in jobs:
        kube.create_or_adopt(job)
        time.sleep(gap)


def test_a_watch_ended_by_the_apiserver_resumes_without_losing_an_event(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    kube = Kube(kube_cluster.api_client())
    version = kube.list_managed("Job").resource_version
    jobs = _rendered(namespace, [f"resume-{i}" for i in range(40)])
    names = [job["metadata"]["name"] for job in jobs]
    # 40 creates over about 8 s: the watches of 2 s end four times or more meanwhile
    creator = threading.Thread(target=_create_jobs, args=(kube, jobs, 0.2))
    creator.start()
    added: list[str] = []
    watches = 0
    deadline = time.monotonic() + 120
    try:
        while len(added) < len(names) and time.monotonic() < deadline:
            watches += 1
            started = time.monotonic()
            for event in kube.watch_managed("Job", version, timeout_seconds=2, narrow=True):
                meta = event.object["metadata"]
                version = str(meta["resourceVersion"])  # where the next watch resumes
                if event.type == "ADDED" and meta["namespace"] == namespace:
                    added.append(str(meta["name"]))
            # the apiserver ended it (no error), after about its timeoutSeconds
            assert time.monotonic() - started < 2 + 10
    finally:
        creator.join()
    assert sorted(added) == sorted(names)  # every one, once
    assert watches >= 3
    # the ended watches handed their connection back: one connection carried them all
    pool = kube.api.rest_client.pool_manager.connection_from_url(kube.api.configuration.host)
    assert pool.num_connections <= 2  # the watches' one, and the creates' own


@pytest.fixture
def token_kubeconfig(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of a ServiceAccount's bearer token (no client certificate), allowed
    to list and watch Jobs in every namespace and nothing else."""
    api = kube_cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    sa = f"watcher-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
    rbac.create_cluster_role(
        {
            "metadata": {"name": sa},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": sa},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        }
    )
    token = core.create_namespaced_service_account_token(
        sa, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    admin = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if ca is None:  # a path, relative to the kubeconfig
        ca_path = Path(cluster["certificate-authority"])
        if not ca_path.is_absolute():
            ca_path = kube_cluster.kubeconfig.parent / ca_path
        import base64

        ca = base64.b64encode(ca_path.read_bytes()).decode()
    path = tmp_path / "token-kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": cluster["server"], "certificate-authority-data": ca},
                    }
                ],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield path
    finally:
        rbac.delete_cluster_role_binding(sa)
        rbac.delete_cluster_role(sa)


def test_a_watch_with_a_bearer_token(
    kube_cluster: KubeCluster, namespace: str, token_kubeconfig: Path
) -> None:
    admin = Kube(kube_cluster.api_client())
    watcher = Kube(connect(token_kubeconfig))
    version = watcher.list_managed("Job").resource_version
    jobs = _rendered(namespace, ["token-seen"])
    _create_jobs(admin, jobs, 0)
    seen = [
        event.object["metadata"]["name"]
        for event in watcher.watch_managed("Job", version, timeout_seconds=3)
        if event.object["metadata"]["namespace"] == namespace
    ]
    assert seen[:1] == [jobs[0]["metadata"]["name"]]
    with pytest.raises(KubeError, match="forbidden") as raised:  # no RBAC on pods
        list(watcher.watch_managed("Pod", version, timeout_seconds=3))
    assert raised.value.status == 403
