"""``serve --auth kubernetes``, and ``run --http --auth kubernetes``, on the real control
plane: two service accounts' tokens (TokenRequest), one granted what docs/operations.md
says to grant and one granted nothing, over the pages, /api/v1 and an operation's log; the
reviews are the API server's own TokenReview and SubjectAccessReview, RBAC deciding."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import make_reconciler

from reconciler.adapters.kube import Kube
from reconciler.devcluster.cluster import SIMULATED_LOG_LINES, free_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

GROUP = "dispatch.reconciler.dev"


def _fetch(url: str, token: str | None = None) -> tuple[int, Any, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status), resp.headers, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()
    except OSError:
        return 0, {}, ""


@pytest.fixture
def accounts(kube: Kube, kube_cluster: KubeCluster, namespace: str) -> Iterator[dict[str, str]]:
    """Tokens of ``viewer`` (get on queues cluster-wide, on operations in team-a only) and
    ``outsider`` (nothing), service accounts of ``namespace``; the grants as the docs give
    them, deleted afterwards. (``kube`` first: it creates the example's namespaces.)"""
    from kubernetes import client

    api = kube_cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    queues_role, ops_role = f"{namespace}-queue-viewer", f"{namespace}-operation-viewer"
    viewer = [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}]
    created: list[tuple[Any, str]] = []
    try:
        for name in ("viewer", "outsider"):
            core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        for role, resource in ((queues_role, "queues"), (ops_role, "operations")):
            rbac.create_cluster_role(
                {
                    "metadata": {"name": role},
                    "rules": [{"apiGroups": [GROUP], "resources": [resource], "verbs": ["get"]}],
                }
            )
            created.append((rbac.delete_cluster_role, role))
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": queues_role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": queues_role,
                },
                "subjects": viewer,
            }
        )
        created.append((rbac.delete_cluster_role_binding, queues_role))
        rbac.create_namespaced_role_binding(
            "team-a",
            {
                "metadata": {"name": ops_role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": ops_role,
                },
                "subjects": viewer,
            },
        )
        created.append((lambda n: rbac.delete_namespaced_role_binding(n, "team-a"), ops_role))
        tokens = {}
        for name in ("viewer", "outsider"):
            answer = core.create_namespaced_service_account_token(
                name, namespace, {"spec": {"expirationSeconds": 600}}
            )
            tokens[name] = str(answer.status.token)
        yield tokens
    finally:
        for delete, name in reversed(created):
            delete(name)


@pytest.mark.parametrize("command", ["serve", "run"])
def test_pages_api_and_logs_by_rbac(
    command: str,
    kube: Kube,
    config_repo: Path,
    kube_cluster: KubeCluster,
    accounts: dict[str, str],
    tmp_path: Path,
) -> None:
    reconciler = make_reconciler(config_repo)
    try:
        result = reconciler.run_once()
    finally:
        reconciler.close()
    assert result.ok
    active = sorted(op for op, s in result.states.items() if s.phase.active)
    mine = next(op for op in active if op.startswith("vision/"))  # namespace team-a
    theirs = next(op for op in active if op.startswith("language/"))  # namespace team-b

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / f"{command}.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            command,
            "--repo",
            str(config_repo),
            "--http",
            f"127.0.0.1:{port}",
            "--auth",
            "kubernetes",
            "--interval",
            "1s",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--cluster-kubeconfig",
            f"local={kube_cluster.kubeconfig}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    viewer, outsider = accounts["viewer"], accounts["outsider"]
    try:
        # the probes and the metrics stay open
        wait_until(lambda: _fetch(base + "/readyz")[0] == 200, timeout=60, what="/readyz")
        assert _fetch(base + "/healthz")[0] == 200 and _fetch(base + "/metrics")[0] == 200

        # no token, or one the API server did not issue: 401 with the challenge
        for path in ("/", "/api/v1/queues", f"/operations/{mine}"):
            status, headers, _ = _fetch(base + path)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
        forged = viewer[:-8] + "AAAAAAAA"
        status, headers, body = _fetch(base + "/api/v1/queues", forged)
        assert status == 401 and json.loads(body) == {
            "error": "the bearer token is invalid or expired"
        }

        # granted: the queue pages, the API, its team's operation and its log
        status, _, page = _fetch(base + "/", viewer)
        assert status == 200 and 'data-queue="team-a"' in page
        status, _, body = _fetch(base + "/api/v1/queues", viewer)
        assert status == 200 and {q["name"] for q in json.loads(body)["queues"]} >= {"team-a"}
        assert _fetch(base + "/queues/team-b", viewer)[0] == 200
        status, _, body = _fetch(base + f"/api/v1/operations/{mine}", viewer)
        assert status == 200 and json.loads(body)["operation"] == mine
        if kube_cluster.dev is not None:  # the simulated log text is the dev cluster's kwok's
            wait_until(
                lambda: SIMULATED_LOG_LINES[-1] in _fetch(base + f"/operations/{mine}", viewer)[2],
                timeout=60,
                what="the operation's log on its page",
            )
        # another team's operation: 403, the same whether it exists or not, and no log
        denied = _fetch(base + f"/operations/{theirs}", viewer)
        assert denied[0] == 403 and SIMULATED_LOG_LINES[0] not in denied[2]
        assert "in the operation's namespace" in denied[2] and "team-b" not in denied[2]
        project = theirs.split("/")[0]
        assert _fetch(base + f"/operations/{project}/no-such-op", viewer)[0::2] == denied[0::2]
        status, headers, body = _fetch(base + f"/api/v1/operations/{theirs}", viewer)
        assert (status, headers["Content-Type"]) == (403, "application/json")

        # authenticated, granted nothing: 403 everywhere, found or not
        for path in ("/", "/queues/team-a", "/api/v1/queues", f"/operations/{mine}", "/nope"):
            status, headers, body = _fetch(base + path, outsider)
            assert status == 403, path
            assert "WWW-Authenticate" not in headers
            assert SIMULATED_LOG_LINES[0] not in body
        assert "forbidden: system:serviceaccount:" in _fetch(base + "/", outsider)[2]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    assert proc.returncode in (0, -signal.SIGTERM)
    assert "Traceback" not in (tmp_path / f"{command}.log").read_text()
