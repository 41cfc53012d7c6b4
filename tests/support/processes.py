"""``reconciler run`` as a real process against a cluster, and what the tests read back
(Jobs per operation, the Lease's holder)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

from kubernetes import client

from reconciler.adapters.kube import Kube
from support.reconciler_env import start_run


def start(repo: Path, kubeconfig: Path, tmp: Path, name: str, *extra: str) -> subprocess.Popen[str]:
    return start_run(
        repo,
        kubeconfig,
        tmp / f"{name}.log",
        "--log-format",
        "json",
        *extra,
        cache_dir=tmp / f"cache-{name}",
    )


def jobs_per_op(kube: Kube) -> Counter[str]:
    return Counter(
        j["metadata"]["annotations"]["reconciler.dev/operation-id"]
        for j in kube.list_managed("Job").items
    )


def lease_holder(kube: Kube, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(
            "dispatch-reconciler", namespace
        )
    except client.exceptions.ApiException:
        return None
    return lease.spec.holder_identity  # type: ignore[no-any-return]
