"""One fresh look at every cluster, for ``plan --live`` and ``status --live``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from reconciler.adapters.kube import Kube, KubeError, connect_cluster
from reconciler.core.observe import WorkloadState, current_states, observe_workloads
from reconciler.core.types import CompiledRepo


def observe_live(
    compiled: CompiledRepo, overrides: Mapping[str, Path] | None = None
) -> tuple[dict[str, WorkloadState], list[str]]:
    """Per operation, the state of its current workload; plus one error per cluster that
    could not be read."""
    states: list[WorkloadState] = []
    errors: list[str] = []
    for name in sorted(compiled.clusters):
        spec = compiled.clusters[name]
        try:
            kube = Kube(connect_cluster(spec.kubeconfig, spec.context, (overrides or {}).get(name)))
            jobs = kube.list_managed("Job").items
            pods = kube.list_managed("Pod").items
        except KubeError as exc:
            errors.append(f"cluster {name}: {exc}")
            continue
        states.extend(observe_workloads(name, jobs, pods))
    generations = {op.id: op.generation for op in compiled.operations}
    return current_states(states, generations), errors
