"""The Git webhook receiver on the real control plane: ``reconciler run`` with a 120 s
interval creates a new operation's Job seconds after a signed push event is POSTed to
``/api/webhook``, while unsigned, wrongly signed and other-branch requests start nothing.
The fast version (fake cluster, virtual clock): tests/runtime/test_webhook.py."""

from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.reconciler_env import client_context, commit_all, git, start_run

from reconciler.adapters.kube import Kube
from reconciler.runtime.webhook import sign

pytestmark = pytest.mark.cluster

INTERVAL = 120  # seconds: the fallback poll, far longer than what is asserted
SECRET = b"webhook-test-secret"
OP = (
    "kind: Operation\nname: {name}\nrun:\n  kind: job\n"
    "  container:\n    image: busybox\n    resources: {{requests: {{cpu: 10m}}}}\n"
    "  environment:\n    annotations: {{reconciler.dev/simulated-duration: 1h}}\n"
)


def make_repo(root: Path, kubeconfig: Path, namespace: str) -> Path:
    (root / "clusters").mkdir(parents=True)
    (root / "queues").mkdir()
    ops = root / "projects" / "hook" / "operations"
    ops.mkdir(parents=True)
    (root / "reconciler.yaml").write_text("kind: Org\nname: hooks\n")
    (root / "clusters" / "local.yaml").write_text(
        f"kind: Cluster\nname: local\nkubeconfig:\n  path: {kubeconfig}\n"
        f"context: {client_context(kubeconfig)}\n"
    )
    (root / "queues" / "bulk.yaml").write_text("kind: Queue\nname: bulk\ncluster: local\n")
    (root / "projects" / "hook" / "project.yaml").write_text(
        f"kind: Project\nname: hook\nnamespace: {namespace}\ndefaults:\n  queue: bulk\n"
    )
    (ops / "first.yaml").write_text(OP.format(name="first"))
    git(root, "init", "-q", "-b", "main")
    commit_all(root, "one op")
    return root


def jobs(kube: Kube, namespace: str) -> set[str]:
    return {
        j["metadata"]["name"]
        for j in kube.list_managed("Job").items
        if j["metadata"]["namespace"] == namespace
    }


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", "/api/webhook", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def metric(url: str, name: str, labels: dict[str, Any]) -> float:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_signed_push_dispatches_at_once_and_bad_requests_do_nothing(
    kube: Kube, kube_cluster: KubeCluster, tmp_path: Path, namespace: str
) -> None:
    repo = make_repo(tmp_path / "config", kube_cluster.kubeconfig, namespace)
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET + b"\n")
    log = tmp_path / "run.log"
    proc = start_run(
        repo,
        kube_cluster.kubeconfig,
        log,
        "--http",
        "127.0.0.1:0",
        "--webhook-secret-file",
        str(secret_file),
        interval=f"{INTERVAL}s",
        cache_dir=tmp_path / "cache",
    )
    try:
        wait_until(lambda: "hook-first-g1" in jobs(kube, namespace), timeout=60, what="first")
        found = wait_until(
            lambda: re.search(r" on (http://127\.0\.0\.1:\d+)", log.read_text()),
            timeout=30,
            what="the HTTP address in the log",
        )
        url = found[1]
        (repo / "projects" / "hook" / "operations" / "second.yaml").write_text(
            OP.format(name="second")
        )
        commit_all(repo, "a second op")
        body = json.dumps({"ref": "refs/heads/main"}).encode()
        other = json.dumps({"ref": "refs/heads/feature"}).encode()
        refused = [
            (body, {"X-GitHub-Event": "push"}, 401),
            (body, {"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(b"x", body)}, 401),
            (body, {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "guess"}, 401),
            (b"{", {"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(SECRET, b"{")}, 400),
            (other, {"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(SECRET, other)}, 200),
        ]
        for payload, headers, expected in refused:
            status, text = post(url, payload, headers)
            assert status == expected, text
        time.sleep(3)  # what a trigger would have done by now: nothing
        assert "hook-second-g1" not in jobs(kube, namespace)
        sent = time.monotonic()
        status, text = post(
            url, body, {"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(SECRET, body)}
        )
        assert (status, text) == (202, "push to refs/heads/main: fetching refs/heads/main now\n")
        wait_until(lambda: "hook-second-g1" in jobs(kube, namespace), timeout=30, what="second")
        took = time.monotonic() - sent
        assert took < INTERVAL / 4, f"the Job came {took:.1f} s after the webhook"
        assert (
            metric(
                url,
                "reconciler_webhook_requests_total",
                {"provider": "github", "result": "triggered"},
            )
            == 1.0
        )
        assert (
            metric(
                url,
                "reconciler_webhook_requests_total",
                {"provider": "github", "result": "unauthorized"},
            )
            == 2.0
        )
        assert metric(url, "reconciler_cycle_triggers_total", {"trigger": "Webhook"}) == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
