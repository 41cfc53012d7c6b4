"""Create the cluster-side objects the example config repo expects (idempotent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

EXAMPLE_PREREQUISITES = Path(__file__).parent / "example-prerequisites.yaml"


def apply_prerequisites(api: client.ApiClient, path: Path = EXAMPLE_PREREQUISITES) -> None:
    """Namespaces, PersistentVolumes and claims, and Secrets; existing ones are left alone."""
    core = client.CoreV1Api(api)
    for doc in yaml.safe_load_all(path.read_text()):
        kind, meta = doc["kind"], doc["metadata"]
        body: Any = doc
        try:
            if kind == "Namespace":
                core.create_namespace(body)
            elif kind == "PersistentVolume":
                core.create_persistent_volume(body)
            elif kind == "PersistentVolumeClaim":
                core.create_namespaced_persistent_volume_claim(meta["namespace"], body)
            elif kind == "Secret":
                core.create_namespaced_secret(meta["namespace"], body)
            else:
                raise ValueError(f"{path}: unsupported kind {kind}")
        except ApiException as exc:
            if exc.status != 409:
                raise
