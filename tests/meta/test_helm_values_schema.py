"""The chart's values.schema.json against its values.yaml (pure; helm itself is exercised in
tests/cluster/test_helm_chart.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")

CHART = Path(__file__).resolve().parents[2] / "charts" / "dispatch-reconciler"


def values() -> dict[str, Any]:
    data = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(data, dict)
    return data


def errors(data: dict[str, Any]) -> list[str]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    return sorted("/".join(map(str, e.absolute_path)) for e in validator.iter_errors(data))


def test_the_default_values_are_valid() -> None:
    assert errors(values()) == []


def with_(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(values())
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("replicaCount", "2", "replicaCount"),
        ("replicaCount", -1, "replicaCount"),
        ("repo.interval", "ten seconds", "repo/interval"),
        ("repo.credentials.type", "password", "repo/credentials/type"),
        ("leaderElection.enabled", "yes", "leaderElection/enabled"),
        ("rbac.createNamespaces", "true", "rbac/createNamespaces"),
        ("rbac.readSecrets", "yes", "rbac/readSecrets"),
        ("clusters", [{"name": "GPU_East"}], "clusters/0/name"),
        ("clusters", [{"kubeconfig": "x"}], "clusters/0"),
        ("http.port", 0, "http/port"),
        ("auth.mode", "oidc", "auth/mode"),
        ("logLevel", "verbose", "logLevel"),
        ("service.type", "ExternalName", "service/type"),
        ("replicas", 2, ""),  # a misspelt key is not silently ignored
    ],
)
def test_bad_values_are_rejected_where_they_are(path: str, value: Any, where: str) -> None:
    assert where in errors(with_(path, value))


def test_good_variations_are_accepted() -> None:
    data = with_("clusters", [{"name": "gpu-east", "existingSecret": "east", "key": "config"}])
    data["repo"]["interval"] = "1m30s"
    data["repo"]["credentials"] = {"type": "token", "token": {"username": "oauth2", "token": "t"}}
    data["serviceMonitor"]["enabled"] = True
    data["auth"] = {"mode": "kubernetes", "cluster": "home"}
    assert errors(data) == []


def test_the_image_runs_as_the_user_the_chart_asks_for() -> None:
    dockerfile = (CHART.parents[1] / "Dockerfile").read_text()
    security = values()["podSecurityContext"]
    uid, gid = security["runAsUser"], security["runAsGroup"]
    assert f"USER {uid}:{gid}" in dockerfile
    assert f"--uid {uid}" in dockerfile  # a passwd entry: ssh needs one
    assert 'ENTRYPOINT ["reconciler"]' in dockerfile
    assert "FROM python:3.11-slim" in dockerfile
