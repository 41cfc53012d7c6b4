"""The example on an existing cluster (``reconciler demo --kubeconfig``): only namespaced
objects, in namespaces the demo creates and labels as its own, removed at the end.

The example config repo's project namespaces (``team-a``, ``team-b``) are renamed with a
prefix, so nothing of a real team is touched; a namespace of that name the demo did not
label is refused, never reused. The ``datasets`` volume needs a PersistentVolume, which is
not namespaced: the demo's copy leaves that connection out."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.devcluster.prerequisites import EXAMPLE_PREREQUISITES

PREFIX = "reconciler-demo-"
OWNER_LABEL = "app.kubernetes.io/managed-by"
OWNER = "reconciler-demo"


class ExistingClusterError(Exception):
    """One line: what the demo refused to do on the cluster, and why."""


def demo_namespace(name: str) -> str:
    return f"{PREFIX}{name}"


def adapt_repo(repo: Path, kubeconfig: Path, context: str) -> list[str]:
    """Point the demo's copy of the example at ``kubeconfig``/``context``, its projects at
    the demo's namespaces, and leave out the ``datasets`` volume; what was changed."""
    cluster = repo / "clusters" / "local.yaml"
    text = cluster.read_text()
    text = re.sub(r"(?m)^(  path:).*$", rf"\1 {kubeconfig}", text)
    text = re.sub(r"(?m)^context:.*$", f"context: {context}", text)
    cluster.write_text(text)
    notes = [f"cluster local: {kubeconfig}, context {context}"]
    for project in sorted(repo.glob("projects/*/project.yaml")):
        text = project.read_text()
        m = re.search(r"(?m)^namespace:\s*(\S+)", text)
        if m:
            new = demo_namespace(m.group(1))
            project.write_text(text[: m.start(1)] + new + text[m.end(1) :])
            notes.append(f"project {project.parent.name}: namespace {new}")
    data = repo / "presets" / "data.yaml"
    if data.exists():
        data.write_text(data.read_text().replace("[datasets, checkpoints]", "[checkpoints]"))
        notes.append("the datasets volume is left out (its PersistentVolume is not namespaced)")
    return notes


def namespaced_prerequisites(path: Path = EXAMPLE_PREREQUISITES) -> list[dict[str, Any]]:
    """The example's prerequisites the demo creates on an existing cluster: its
    namespaces (renamed) and the Secrets in them; no PersistentVolume or claim."""
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = demo_namespace(doc["metadata"]["name"])
            out.append(doc)
        elif doc["kind"] == "Secret":
            doc["metadata"]["namespace"] = demo_namespace(doc["metadata"]["namespace"])
            out.append(doc)
    return out


def create_prerequisites(api: client.ApiClient, run_id: str) -> list[str]:
    """Create the demo's namespaces, labelled as the demo's, and their Secrets; the
    namespaces. A namespace of that name without the label is refused."""
    core = client.CoreV1Api(api)
    made: list[str] = []
    for doc in namespaced_prerequisites():
        meta = doc["metadata"]
        body: Any = doc
        if doc["kind"] == "Namespace":
            name = meta["name"]
            meta["labels"] = {OWNER_LABEL: OWNER, "reconciler.dev/demo": run_id}
            try:
                core.create_namespace(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                found: Any = core.read_namespace(name)
                if (found.metadata.labels or {}).get(OWNER_LABEL) != OWNER:
                    raise ExistingClusterError(
                        f"namespace {name} exists and is not the demo's "
                        f"(no label {OWNER_LABEL}={OWNER}): not touching it"
                    ) from None
                if (found.status.phase or "") == "Terminating":
                    raise ExistingClusterError(
                        f"namespace {name} is still being deleted (a previous demo): try again"
                    ) from None
            made.append(name)
        else:
            try:
                core.create_namespaced_secret(meta["namespace"], body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
    return made


def clean_up(api: client.ApiClient, namespaces: Iterable[str]) -> list[str]:
    """Delete the demo's namespaces (and so everything in them), only those that carry
    the demo's label; the ones deleted."""
    core = client.CoreV1Api(api)
    gone = []
    for name in namespaces:
        try:
            found: Any = core.read_namespace(name)
            if (found.metadata.labels or {}).get(OWNER_LABEL) != OWNER:
                continue
            core.delete_namespace(name)
            gone.append(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return gone
