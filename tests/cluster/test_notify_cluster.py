"""Notifications and commit statuses on the real control plane: ``reconciler run``
dispatches an operation, and a local receiver on 127.0.0.1 gets its ``Dispatched``
notification, signed with the key of a real Secret (read through the cluster's client),
and the commit status of the config commit, with the token of another Secret. The fast
versions (fake cluster, the same receiver): tests/core/test_notify.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from kubernetes import client
from support.cluster import KubeCluster
from support.helpers import Receiver, wait_until
from support.reconciler_env import client_context, commit_all, git, start_run

from reconciler.adapters.kube import Kube

pytestmark = pytest.mark.cluster

SECRET = b"notify-test-secret"
TOKEN = "notify-test-token"
OP = (
    "kind: Operation\nname: first\nrun:\n  kind: job\n"
    "  container:\n    image: busybox\n    resources: {requests: {cpu: 10m}}\n"
    "  environment:\n    annotations: {reconciler.dev/simulated-duration: 1h}\n"
)


def make_repo(root: Path, kubeconfig: Path, namespace: str, url: str) -> tuple[Path, str]:
    for folder in ("clusters", "queues", "connections", "projects/hook/operations"):
        (root / folder).mkdir(parents=True)
    (root / "reconciler.yaml").write_text(
        "kind: Org\nname: notify\nwebUrl: http://127.0.0.1:8080\n"
        "notifications:\n  - on: [Dispatched]\n"
        f"    webhook: {{url: '{url}/hook', secret: {{connection: hooks, key: hmac}}}}\n"
        f"commitStatus:\n  provider: github\n  url: '{url}/api'\n  repository: example/config\n"
        f"  token: {{connection: git-token}}\n  namespace: {namespace}\n"
    )
    (root / "clusters" / "local.yaml").write_text(
        f"kind: Cluster\nname: local\nkubeconfig:\n  path: {kubeconfig}\n"
        f"context: {client_context(kubeconfig)}\n"
    )
    (root / "queues" / "bulk.yaml").write_text("kind: Queue\nname: bulk\ncluster: local\n")
    (root / "connections" / "hooks.yaml").write_text(
        "kind: Connection\nsecret: {name: hooks, envFrom: true}\n"
    )
    (root / "connections" / "git-token.yaml").write_text(
        "kind: Connection\nsecret: {name: git-token, envFrom: true}\n"
    )
    (root / "projects" / "hook" / "project.yaml").write_text(
        f"kind: Project\nname: hook\nnamespace: {namespace}\ndefaults:\n  queue: bulk\n"
    )
    (root / "projects" / "hook" / "operations" / "first.yaml").write_text(OP)
    git(root, "init", "-q", "-b", "main")
    return root, commit_all(root, "one op, notified")


def test_a_dispatch_notification_and_the_commit_status_reach_a_local_receiver(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path, namespace: str
) -> None:
    core = client.CoreV1Api(kube_cluster.api_client())
    for name, data in (("hooks", {"hmac": SECRET}), ("git-token", {"token": TOKEN.encode()})):
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=name),
                data={k: base64.b64encode(v).decode() for k, v in data.items()},
            ),
        )
    with Receiver.running() as receiver:
        repo, commit = make_repo(
            tmp_path / "config", kube_cluster.kubeconfig, namespace, receiver.url
        )
        proc = start_run(
            repo, kube_cluster.kubeconfig, tmp_path / "run.log", cache_dir=tmp_path / "cache"
        )
        try:
            wait_until(
                lambda: (
                    "/hook" in {r.path for r in receiver.got}
                    and any(b'"success"' in r.body for r in receiver.got)
                ),
                timeout=90,
                what="the notification and the commit status",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    hook = next(r for r in receiver.got if r.path == "/hook")
    signature = "sha256=" + hmac.new(SECRET, hook.body, hashlib.sha256).hexdigest()
    assert hook.headers["x-reconciler-signature"] == signature
    body = json.loads(hook.body)
    assert (body["operation"], body["phase"], body["commit"]) == (
        "hook/first",
        "Dispatched",
        commit,
    )
    assert body["namespace"] == namespace and body["queue"] == "bulk"
    assert hook.headers["idempotency-key"] == f"hook/first:{body['runUid']}:Dispatched"
    job = kube.batch.read_namespaced_job("hook-first-g1", namespace)
    assert body["runUid"] == job.metadata.uid
    statuses = [r for r in receiver.got if r.path.startswith("/api/repos/")]
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in statuses)
    # once per commit and state: "pending" first only if the cluster was not read at once
    assert json.loads(statuses[-1].body) == {
        "state": "success",
        "context": "reconciler",
        "description": "valid, 1 dispatched, 0 pending",
        "target_url": "http://127.0.0.1:8080/",
    }
    assert len(statuses) <= 2
    assert statuses[-1].path == f"/api/repos/example/config/statuses/{commit}"
    log = (tmp_path / "run.log").read_text()
    assert "dropped" not in log, log
