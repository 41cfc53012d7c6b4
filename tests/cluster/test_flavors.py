"""Resource flavors on the dev cluster (docs/dispatch.md, "Flavors"): its default fleet has
two 4-GPU H100 nodes and two 4-GPU A100 nodes, labelled as NVIDIA GPU feature discovery
labels them. A queue with flavors h100 (4 GPUs) then a100 (6 GPUs):

- two 2-GPU ops take the h100 flavor; a third, finding it full, falls back to a100 while
  the H100 runs keep running; an op pinned to A100 by its own nodeSelector only ever gets
  a100;
- each Job carries ``reconciler.dev/flavor`` and the flavor's nodeLabels as nodeSelector
  entries, so kube-scheduler binds its pod to a node of that product;
- the next cycle reads each workload's flavor back from its Job and counts it there: an
  op of 4 GPUs then waits (a100 holds 4 of 6), where counting the unpinned fallback run in
  the queue's first flavor would have let it in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cluster import KubeCluster, Reconcilers
from support.helpers import wait_until
from support.reconciler_env import GPU, commit_all, cycle_until, small_repo

from reconciler.adapters.kube import Kube
from reconciler.core.decision.render import LABEL_FLAVOR
from reconciler.core.plan import PendingReason
from reconciler.core.types import Phase
from reconciler.runtime.cycle import CycleResult

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

PRODUCT = "nvidia.com/gpu.product"
PRODUCTS = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"}


def _flavor(name: str) -> str:
    return (
        f"kind: Flavor\nname: {name}\nnodeLabels:\n  {PRODUCT}: {PRODUCTS[name]}\n"
        f"tolerations:\n  - {{key: {GPU}, operator: Exists, effect: NoSchedule}}\n"
    )


QUEUE = (
    "kind: Queue\nname: gpus\ncluster: local\n"
    "flavors:\n"
    f"  - {{name: h100, quota: {{{GPU}: 4}}}}\n"
    f"  - {{name: a100, quota: {{{GPU}: 6}}}}\n"
)


def _op(gpus: int, product: str | None = None) -> str:
    """An op of ``gpus`` GPUs that keeps running (no simulated duration); ``product`` pins
    a GPU product with its own nodeSelector."""
    pin = f"  environment:\n    nodeSelector: {{{PRODUCT}: {product}}}\n" if product else ""
    return (
        "kind: Operation\nrun:\n  kind: job\n"
        f"  container:\n    image: busybox\n    resources:\n      limits: {{{GPU}: {gpus}}}\n" + pin
    )


def _repo(root: Path, kubeconfig: Path, namespace: str) -> Path:
    repo = small_repo(
        root,
        kubeconfig,
        namespace,
        {
            "a-one": _op(2),
            "b-two": _op(2),
            "c-three": _op(2),  # h100 is full after a-one and b-two: falls back to a100
            "d-pinned": _op(2, PRODUCTS["a100"]),  # only ever a100
        },
        queue="gpus",
    )
    (repo / "queues" / "gpus.yaml").write_text(QUEUE)
    for name in PRODUCTS:
        (repo / "flavors").mkdir(exist_ok=True)
        (repo / "flavors" / f"{name}.yaml").write_text(_flavor(name))
    commit_all(repo, "queue gpus with flavors h100 then a100")
    return repo


def _pods_by_op(kube: Kube, namespace: str) -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["labels"]["reconciler.dev/operation"]: p
        for p in kube.list_managed("Pod").items
        if p["metadata"]["namespace"] == namespace
    }


def _used(result: CycleResult) -> dict[str, str]:
    assert result.plan is not None
    (queue,) = [q for q in result.plan.queues if q.name == "gpus"]
    return {f.name: str(f.used.get(GPU, 0)) for f in queue.flavors}


def test_flavors_place_pods_on_their_product_fall_back_and_are_read_back(
    kube: Kube,
    kube_cluster: KubeCluster,
    namespace: str,
    tmp_path: Path,
    reconcilers: Reconcilers,
) -> None:
    repo = _repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace)
    reconciler = reconcilers.start(repo)

    first = reconciler.run_once()
    assert first.plan is not None and not first.failed, first.failed
    assigned = {d.operation.split("/")[1]: d.flavor for d in first.plan.dispatch}
    assert assigned == {"a-one": "h100", "b-two": "h100", "c-three": "a100", "d-pinned": "a100"}

    # the Job: the flavor label, its nodeLabels as nodeSelector, its toleration
    for job in kube.list_managed("Job").items:
        if job["metadata"]["namespace"] != namespace:
            continue
        op = job["metadata"]["labels"]["reconciler.dev/operation"]
        flavor = assigned[op]
        assert job["metadata"]["labels"][LABEL_FLAVOR] == flavor
        pod_spec = job["spec"]["template"]["spec"]
        assert pod_spec["nodeSelector"][PRODUCT] == PRODUCTS[flavor]
        assert {"key": GPU, "operator": "Exists", "effect": "NoSchedule"} in pod_spec["tolerations"]

    # kube-scheduler binds each pod to a node of its flavor's product
    def all_bound() -> dict[str, dict[str, Any]] | None:
        pods = _pods_by_op(kube, namespace)
        done = len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods.values())
        return pods if done else None

    pods = wait_until(all_bound, timeout=60, what="the four pods to be bound")
    for op, pod in pods.items():
        node = kube.core.read_node(pod["spec"]["nodeName"])
        assert node.metadata.labels[PRODUCT] == PRODUCTS[assigned[op]], (op, node.metadata.name)
        assert node.metadata.name.startswith(f"kwok-{assigned[op]}-")

    # the next cycle reads each workload's flavor back from its Job (the label) and counts
    # it there: c-three holds a100, though the queue's first flavor is h100
    def running(result: CycleResult) -> bool:
        return all(s.phase is Phase.RUNNING for s in result.states.values() if s.cluster == "local")

    second = cycle_until(reconciler, running, timeout=60, what="the four runs to be Running")
    flavors = {op.split("/")[1]: s.flavor for op, s in second.states.items()}
    assert flavors == assigned
    assert second.dispatched == ()
    assert _used(second) == {"h100": "4", "a100": "4"}

    # a 4-GPU op: h100 full (its runs still running), a100 holds 4 of 6: it waits
    (repo / "projects" / "d" / "operations" / "e-four.yaml").write_text(_op(4))
    commit_all(repo, "a 4-GPU op")
    third = reconciler.run_once()
    assert third.plan is not None and third.dispatched == ()
    (waiting,) = [p for p in third.plan.pending if p.operation == "d/e-four"]
    assert waiting.reason is PendingReason.QUOTA_EXCEEDED, waiting.message
    assert {op: s.phase for op, s in third.states.items()}["d/a-one"] is Phase.RUNNING
    assert _used(third) == {"h100": "4", "a100": "4"}


L4 = (
    "# yaml-language-server: $schema=../schemas/flavor.schema.json\n"
    f"kind: Flavor\nname: l4\nnodeLabels:\n  {PRODUCT}: NVIDIA-L4\n"
)


def test_validate_and_plan_live_warn_about_a_flavor_that_matches_no_node(
    kube: Kube, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """``validate --live`` and ``plan --live --base`` read the nodes of each cluster: a
    flavor whose nodeLabels no node carries (an L4, which the dev cluster lacks) is a
    warning at its nodeLabels, the exit code unchanged; h100 and a100 match nodes."""
    from click.testing import CliRunner

    from reconciler.cli.main import cli

    repo = _repo(tmp_path / "repo", kube_cluster.kubeconfig, namespace)
    runner = CliRunner()
    quiet = runner.invoke(cli, ["validate", "--live", "--repo", str(repo)])
    assert quiet.exit_code == 0, quiet.output
    assert "warning" not in quiet.stderr

    (repo / "flavors" / "l4.yaml").write_text(L4)
    queue = repo / "queues" / "gpus.yaml"
    queue.write_text(queue.read_text() + f"  - {{name: l4, quota: {{{GPU}: 2}}}}\n")
    commit_all(repo, "an l4 flavor, which no node of the cluster has")
    expected = (
        "flavors/l4.yaml:4:1: warning: flavor 'l4' matches no node: no node of cluster local "
        f"has all of its nodeLabels ({PRODUCT}=NVIDIA-L4); an operation assigned it will not "
        "be placed until such nodes exist"
    )
    warned = runner.invoke(cli, ["validate", "--live", "--repo", str(repo)])
    assert warned.exit_code == 0, warned.output
    assert warned.stderr.splitlines()[0] == expected
    as_json = runner.invoke(cli, ["validate", "--live", "--repo", str(repo), "-o", "json"])
    assert json.loads(as_json.stdout)["warnings"] == [expected]
    # without --live nothing reads the nodes
    offline = runner.invoke(cli, ["validate", "--repo", str(repo)])
    assert offline.exit_code == 0 and "warning" not in offline.stderr

    # the PR plan: on stderr, and in the markdown comment
    pr = runner.invoke(
        cli,
        ["plan", "--repo", str(repo), "--live", "--base", "HEAD~1", "-o", "markdown"],
    )
    assert pr.exit_code == 3, pr.output  # the change adds a flavor to the queue
    assert "flavors.l4.quota.nvidia.com/gpu" in pr.stdout
    assert expected in pr.stderr.splitlines()
    assert f"- {expected}" in pr.stdout.split("**Warnings**")[1]
    assert not kube.list_managed("Job").items  # planning dispatches nothing
