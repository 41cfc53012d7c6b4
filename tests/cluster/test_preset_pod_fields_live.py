"""Issue 13, section 8, on the dev cluster: the pod fields a preset sets (a service
account, image pull secrets, emptyDir and ConfigMap volumes with their mounts, an init
container and a native sidecar, ``maxRetries`` and ``ttl``) compile, render and are
accepted by the real API server as the reconciler creates them (``Kube.create_or_adopt``),
and the real Job controller creates a pod with each of them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.paths import DATA
from support.snapshots import repo

from reconciler.adapters.kube import Kube
from reconciler.core.compile import compile_repo
from reconciler.core.decision.render import render_operation

pytestmark = pytest.mark.cluster

# every pod field a preset may set (also compiled in tests/cli/test_preset_pod_fields.py)
PLATFORM = (DATA / "presets" / "pod-fields.yaml").read_text()


def test_the_pod_fields_of_a_preset_reach_the_pod(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    files = {
        "reconciler.yaml": "kind: Org\ndefaults:\n  presets: [platform]\n"
        "policy:\n  allowedServiceAccounts: [trainer]\n",
        "clusters/local.yaml": "kind: Cluster\nkubeconfig:\n  inCluster: true\n",
        "queues/q.yaml": "kind: Queue\ncluster: local\n",
        "presets/platform.yaml": PLATFORM,
        "projects/p/project.yaml": f"kind: Project\nnamespace: {namespace}\n"
        "defaults:\n  queue: q\n",
        "projects/p/operations/train.yaml": "kind: Operation\nrun:\n  kind: job\n"
        "  container:\n    image: busybox\n    command: [sh, -c, 'sleep 1']\n",
    }
    compiled = compile_repo(repo(files))
    assert compiled.valid and not compiled.rejected, (compiled.errors, compiled.rejected)
    (op,) = compiled.operations
    assert op.provenance["run.sidecars[0]"].step == "preset platform (post_merge)"

    api = kube_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="trainer"))
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"a": "1"}),
    )
    rendered = render_operation(
        op, compiled.connections, config_version="c", dispatched_at=datetime.now(UTC)
    )
    name = rendered.job["metadata"]["name"]
    Kube(api).create_or_adopt(rendered.job)  # a 422 from the API server would raise here

    job = batch.read_namespaced_job(name, namespace)
    assert job.spec.backoff_limit == 2 and job.spec.ttl_seconds_after_finished == 7200

    def pod() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
        return pods[0] if pods else None

    created = wait_until(pod, timeout=60, what=f"a pod of Job {name}")
    spec = created.spec
    assert spec.service_account_name == "trainer"
    assert [s.name for s in spec.image_pull_secrets] == ["registry"]
    volumes = {v.name: v for v in spec.volumes}
    assert volumes["scratch"].empty_dir.medium == "Memory"
    assert volumes["cfg"].config_map.name == "settings"
    inits = {c.name: c for c in spec.init_containers}
    assert list(inits) == ["warm", "logs"]  # the native sidecar runs as an init container
    assert inits["logs"].restart_policy == "Always" and inits["warm"].restart_policy is None
    assert [m.mount_path for m in inits["warm"].volume_mounts if m.name == "cfg"] == ["/cfg"]
    (main,) = spec.containers
    assert "/scratch" in [m.mount_path for m in main.volume_mounts]
