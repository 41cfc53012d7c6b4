"""The kind recipe in docs/dev-cluster.md cannot run here (no Docker); what it points to
is held instead: the files it names are the repo's, its nodes are the dev cluster's
default fleet, the template's presets select its GPU nodes, and its kwok release is the
one the dev cluster builds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from reconciler.devcluster.build import KWOK_VERSION
from reconciler.devcluster.shape import default_shape

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "dev-cluster.md"
KIND = ROOT / "reconciler" / "devcluster" / "kind"


def _recipe() -> str:
    text = DOC.read_text()
    section = text[text.index("\n## kind\n") :]
    return section[
        section.index("```bash\n") + 8 : section.index("\n```", section.index("```bash"))
    ]


def test_the_doc_says_it_was_not_run_here() -> None:
    section = DOC.read_text().split("\n## kind\n", 1)[1]
    assert "kind needs Docker, and it has none" in section
    assert "tests/meta/test_kind_recipe.py" in section


def test_every_file_it_names_is_in_the_repo() -> None:
    recipe = _recipe()
    named = re.findall(r"(?<![\w/.])((?:reconciler|tests)/[\w./-]+\.(?:yaml|py))", recipe)
    assert "reconciler/devcluster/kind/kind-config.yaml" in named
    assert "reconciler/devcluster/kind/kwok-nodes.yaml" in named
    assert "reconciler/devcluster/kwok-stages.yaml" in named
    for path in named:
        assert (ROOT / path).is_file(), path


def test_the_kwok_release_is_the_one_the_dev_cluster_builds() -> None:
    versions = set(re.findall(r"kwok/releases/download/(v[\d.]+)/", _recipe()))
    assert versions == {KWOK_VERSION}


def test_the_kind_config_names_the_cluster_the_commands_use() -> None:
    config = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    recipe = _recipe()
    assert f"kind get kubeconfig --name {config['name']} " in recipe
    assert f"--context kind-{config['name']}" in recipe


def test_the_nodes_are_the_dev_clusters_default_fleet() -> None:
    nodes = list(yaml.safe_load_all((KIND / "kwok-nodes.yaml").read_text()))
    assert nodes == [p.manifest(n) for p in default_shape() for n in p.node_names()]
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)


def _selectors(doc: Any) -> list[dict[str, str]]:
    env = ((doc or {}).get("run") or {}).get("environment") or {}
    return [env["nodeSelector"]] if env.get("nodeSelector") else []


def test_the_templates_presets_select_its_gpu_nodes() -> None:
    nodes = list(yaml.safe_load_all((KIND / "kwok-nodes.yaml").read_text()))
    gpu = [n for n in nodes if "nvidia.com/gpu" in n["status"]["allocatable"]]
    files = sorted((ROOT / "config-repo-template").glob("**/presets/*.yaml"))
    files += sorted((ROOT / "config-repo-template").glob("projects/*/operations/*.yaml"))
    selectors = [s for f in files for s in _selectors(yaml.safe_load(f.read_text()))]
    assert selectors  # the template does select GPU nodes
    for selector in selectors:
        assert any(
            all(n["metadata"]["labels"].get(k) == v for k, v in selector.items()) for n in gpu
        ), selector
    recipe = _recipe()
    for key, value in {k: v for s in selectors for k, v in s.items()}.items():
        assert f"{key}={value}" in recipe


def test_the_stages_are_stage_objects() -> None:
    stages = list(yaml.safe_load_all((ROOT / "reconciler/devcluster/kwok-stages.yaml").read_text()))
    assert {s["kind"] for s in stages} == {"Stage"}
    assert {s["apiVersion"] for s in stages} == {"kwok.x-k8s.io/v1alpha1"}
    text = (ROOT / "reconciler/devcluster/kwok-stages.yaml").read_text()
    assert "reconciler.dev/simulated-duration" in text
