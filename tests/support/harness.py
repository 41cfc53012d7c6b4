"""One Reconciler over fake clusters (``Harness``), and the small worlds and manifests the
cycle tests share."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from unittest import mock

from reconciler.core.decision.render import render_operation
from reconciler.core.quantity import format_quantity
from reconciler.core.types import ClusterSpec, CompiledRepo, RepoSnapshot
from reconciler.runtime.cycle import CycleResult, Reconciler
from support.builders import NOW, World
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeKube

GPU = "nvidia.com/gpu"


class Harness:
    """One Reconciler over fake clusters; ``repo`` can be swapped between cycles."""

    def __init__(self, repo: CompiledRepo, *clusters: str, leading: bool = True) -> None:
        self.repo = repo
        self.clusters = {name: FakeCluster(name) for name in clusters or ("local",)}
        self.clock = SteppedClock()
        self.reconciler = Reconciler(
            lambda: RepoSnapshot(files={}, version=self.repo.version),
            self._connect,  # type: ignore[arg-type]
            self.clock,
            is_leader=lambda: leading,
            watch=False,
        )

    def _connect(self, spec: ClusterSpec) -> Any:
        return FakeKube(self.clusters[spec.name])

    def cycle(self) -> CycleResult:
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: self.repo):
            result = self.reconciler.run_once()
        # the phase annotations are written off the cycle's path
        assert self.reconciler.wait_writes(10.0)
        return result

    def job(self, op_id: str, generation: int = 1) -> tuple[str, str]:
        project, name = op_id.split("/")
        return project, f"{project}-{name}-g{generation}"

    def move(self, op_id: str, phase: str, cluster: str = "local") -> None:
        self.clusters[cluster].set_phase(*self.job(op_id), phase)


def team_a(*ops: str, gpu: int = 1) -> World:
    world = World().queue("team-a", quota={"nvidia.com/gpu": 2})
    for op in ops:
        world.op(op, gpu=gpu)
    return world


def manifest(compiled: CompiledRepo, op_id: str, generation: int) -> dict[str, Any]:
    op = next(o for o in compiled.operations if o.id == op_id)
    op = replace(op, generation=generation)
    rendered = render_operation(op, {}, config_version="c0", dispatched_at=NOW)
    manifest = json.loads(json.dumps(rendered.manifests[0]))
    # the builder's ops carry their requests outside the spec: put one pod's on the pod
    limits = {r: format_quantity(v) for r, v in op.per_pod.items()}
    if manifest["kind"] == "PyTorchJob":
        for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["spec"]["containers"][0]["resources"] = {"limits": limits}
        return dict(manifest)
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": limits}
    return dict(manifest)
