"""Fleet queues on two real control planes with different node shapes (docs/dispatch.md,
"Fleet queues"): the session's dev cluster (``local``: H100 and A100 nodes) and a second one
(``remote``: one 8-GPU H200 node, partly used by a pod that is not ours)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helpers import wait_until
from support.reconciler_env import (
    bound_node,
    commit_all,
    job_names,
    make_long_running,
    make_reconciler,
)

from reconciler.adapters.kube import Kube
from reconciler.core.observation.capacity import placement_of
from reconciler.core.plan import FleetBlock, MemberState, PendingReason
from reconciler.core.reporting.status import read_status, render_status

pytestmark = pytest.mark.cluster

H200 = "NVIDIA-H200-141GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
GPU = "nvidia.com/gpu"


def _op(name: str, gpus: int, product: str, replicas: int = 1) -> str:
    return f"""kind: Operation
name: {name}
queue: fleet
run:
  kind: job
  replicas: {replicas}
  container:
    command: [train]
    resources:
      limits: {{{GPU}: {gpus}}}
  environment:
    nodeSelector:
      nvidia.com/gpu.product: {product}
"""


def _hog(remote: Kube) -> None:
    """Someone else's pod on the remote H200 node: 2 of its 8 GPUs."""
    from kubernetes import client

    core = client.CoreV1Api(remote.api)
    core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hog"},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": H200},
                "containers": [
                    {
                        "name": "hog",
                        "image": "busybox",
                        "resources": {"limits": {GPU: "2"}},
                    }
                ],
            },
        },
    )

    def bound() -> bool:
        pod = core.read_namespaced_pod("hog", "default")
        return bool(pod.spec.node_name) and pod.status.phase == "Running"

    wait_until(bound, timeout=60, what="the hog pod running on the remote H200 node")


def test_a_fleet_queue_sends_each_operation_to_the_first_cluster_with_room(
    kube: Kube, config_repo: Path, h200_remote: Kube
) -> None:
    remote = h200_remote
    _hog(remote)
    (config_repo / "queues" / "fleet.yaml").write_text(
        "kind: Queue\nname: fleet\nclusters: [local, remote]\nrequireCapacity: true\n"
        f"quota: {{{GPU}: 32}}\nkinds: [job]\n"
    )
    project = config_repo / "projects" / "vision" / "project.yaml"
    project.write_text(project.read_text().replace("allowedQueues: [", "allowedQueues: [fleet, "))
    ops = config_repo / "projects" / "vision" / "operations"
    (ops / "a-h200.yaml").write_text(_op("a-h200", 4, H200))  # only remote has H200s
    (ops / "b-h200.yaml").write_text(_op("b-h200", 4, H200))  # 8 - 2 (hog) - 4: no room
    (ops / "c-a100.yaml").write_text(_op("c-a100", 1, A100))  # local, listed first
    (ops / "d-l4.yaml").write_text(_op("d-l4", 1, "NVIDIA-L4"))  # no cluster has L4s
    # a gang of 2 x 2 H200s: remote has room for one pod (2 GPUs), not for all of them
    (ops / "e-ddp.yaml").write_text(_op("e-ddp", 2, H200, replicas=2))
    commit_all(config_repo, "a fleet queue over local and remote")
    make_long_running(config_repo, "vision")  # nothing finishes during the test

    reconciler = make_reconciler(config_repo)
    result = reconciler.run_once()
    assert result.ok, result
    assert result.plan is not None and result.decision is not None
    assert [(d.operation, d.cluster) for d in result.plan.dispatch] == [
        ("vision/a-h200", "remote"),
        ("vision/c-a100", "local"),
    ]
    assert job_names(remote) == ["vision-a-h200-g1"]
    assert "vision-a-h200-g1" not in job_names(kube) and "vision-c-a100-g1" in job_names(kube)
    # the hog, not ours, is counted: 6 of the H200 node's 8 GPUs were free
    assert result.compiled is not None
    first = next(o for o in result.compiled.operations if o.name == "a-h200")
    h200 = placement_of(first.spec)
    assert result.decision.capacity["remote"].free(h200)[GPU] == 6
    assert result.decision.capacity["local"].free(h200).get(GPU, 0) == 0

    pending = {p.operation: p for p in result.plan.pending}
    assert set(pending) == {"vision/b-h200", "vision/d-l4", "vision/e-ddp"}
    for entry in pending.values():
        assert entry.reason is PendingReason.NO_CLUSTER_HAS_CAPACITY
        assert isinstance(entry.blocked_by, FleetBlock)
        assert [m.state for m in entry.blocked_by.members] == [MemberState.NO_CAPACITY] * 2
    held = pending["vision/b-h200"]
    assert isinstance(held.blocked_by, FleetBlock)
    # with a-h200 counted: 8 - 2 (hog) - 4 = 2 left on remote, no H200 on local
    assert [m.free[GPU] for m in held.blocked_by.members] == [0, 2]
    assert f"{GPU} 2 free; admitted when one of its clusters has" in held.message
    # the gang is held whole: never one replica on remote and one elsewhere
    gang = pending["vision/e-ddp"]
    assert isinstance(gang.blocked_by, FleetBlock)
    assert gang.blocked_by.request[GPU] == 4  # 2 replicas x 2
    assert [m.free[GPU] for m in gang.blocked_by.members] == [0, 2]

    # kube-scheduler placed the chosen one on the remote H200 node
    node = wait_until(
        lambda: bound_node(remote, "vision-a-h200-g1"), timeout=60, what="the pod bound on remote"
    )
    assert node.startswith("kwok-")

    # the status branch records the capacity it chose by
    files = render_status(
        result.compiled,
        result.plan,
        result.states,
        clusters=result.decision.cluster_records(),
    )
    recorded = {c.name: c.capacity for c in read_status(files).clusters}
    assert recorded["remote"] is not None and recorded["local"] is not None
    assert [n.name for n in recorded["remote"].nodes] == ["kwok-h200-0"]

    # the next cycle: a-h200 stays on remote, the others still wait
    again = reconciler.run_once()
    assert again.states["vision/a-h200"].cluster == "remote"
    assert again.dispatched == ()
    assert again.plan is not None
    assert {p.operation for p in again.plan.pending} == {
        "vision/b-h200",
        "vision/d-l4",
        "vision/e-ddp",
    }
    reconciler.close()
