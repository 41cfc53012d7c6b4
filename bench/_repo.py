"""The synthetic config repos the benchmarks dispatch from: one writer, shared.

Every bench repo is an Org named ``bench``, one cluster ``local`` on the dev cluster's
kubeconfig, queues in ``queues/`` and projects under ``projects/``, committed on ``main``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

GPU = "nvidia.com/gpu"
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]


def write_org(root: Path, kubeconfig: Path) -> None:
    """``reconciler.yaml`` and the one cluster, ``local``."""
    (root / "clusters").mkdir(parents=True, exist_ok=True)
    (root / "queues").mkdir(exist_ok=True)
    (root / "reconciler.yaml").write_text("kind: Org\nname: bench\n")
    (root / "clusters" / "local.yaml").write_text(
        f"kind: Cluster\nname: local\nkubeconfig:\n  path: {kubeconfig}\ncontext: dev\n"
    )


def commit_all(root: Path, message: str = "bench") -> Path:
    """``git init`` (branch main) and commit everything under ``root``."""
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", message], cwd=root, check=True)
    return root


def write_repo(
    root: Path,
    kubeconfig: Path,
    count: int,
    namespace: str,
    *,
    duration: str = "1h",
    gpus: int = 0,
    quota_gpus: int = 0,
    concurrency: int | None = None,
    queue: str = "bulk",
) -> Path:
    """A committed repo: one queue (a GPU quota if ``quota_gpus``, a concurrency if given,
    else unlimited) and ``count`` Job operations of ``duration`` (kwok's simulated
    duration), each asking 10m CPU and ``gpus`` GPUs."""
    write_org(root, kubeconfig)
    ops = root / "projects" / namespace / "operations"
    ops.mkdir(parents=True)
    quota = f"quota:\n  {GPU}: {quota_gpus}\n" if quota_gpus else ""
    limit = f"concurrency: {concurrency}\n" if concurrency else ""
    (root / "queues" / f"{queue}.yaml").write_text(
        f"kind: Queue\nname: {queue}\ncluster: local\n{limit}{quota}"
    )
    (root / "projects" / namespace / "project.yaml").write_text(
        f"kind: Project\nname: {namespace}\nnamespace: {namespace}\ndefaults:\n  queue: {queue}\n"
    )
    resources = (
        f"{{requests: {{cpu: 10m, {GPU}: {gpus}}}, limits: {{{GPU}: {gpus}}}}}"
        if gpus
        else "{requests: {cpu: 10m}}"
    )
    for i in range(count):
        (ops / f"op-{i:05d}.yaml").write_text(
            f"kind: Operation\nname: op-{i:05d}\nrun:\n  kind: job\n"
            f"  container:\n    image: busybox\n    resources: {resources}\n"
            "  environment:\n"
            f"    annotations: {{reconciler.dev/simulated-duration: {duration}}}\n"
        )
    return commit_all(root)
