"""The Kubeflow Training Operator's PyTorchJob CRD, for tests only (an optional peer, never
a dependency of the product): fetched once through the Go module proxy
(``go mod download -json github.com/kubeflow/training-operator@v1.8.1`` in a throwaway
module) and cached under ``~/.cache/reconciler/crds/``. ``pytorchjob_crd()`` returns the
parsed CRD, or raises :class:`CrdUnavailable` with the reason (tests skip with it)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from reconciler.devcluster.toolchain import find_go, go_env
from support.cluster import KubeCluster
from support.helpers import wait_until

MODULE = "github.com/kubeflow/training-operator"
VERSION = "v1.8.1"
CRD_PATH = "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"


class CrdUnavailable(RuntimeError):
    """The CRD could not be fetched (no Go, no network, no such file)."""


def cache_file() -> Path:
    root = Path(os.environ.get("RECONCILER_CACHE_DIR") or Path.home() / ".cache" / "reconciler")
    return root / "crds" / f"training-operator-{VERSION}" / Path(CRD_PATH).name


def _download() -> bytes:
    go = find_go()
    if go is None:
        raise CrdUnavailable("no Go >= 1.26 (it fetches the CRD's module): run scripts/bootstrap")
    with tempfile.TemporaryDirectory(prefix="kubeflow-crd-") as tmp:
        init = subprocess.run(
            [go, "mod", "init", "example.invalid/crdfetch"],
            cwd=tmp,
            env=go_env(go),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if init.returncode != 0:
            raise CrdUnavailable(f"go mod init failed: {init.stderr.strip()}")
        try:
            got = subprocess.run(
                [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
                cwd=tmp,
                env=go_env(go),
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            raise CrdUnavailable("go mod download timed out after 300 s") from None
    try:
        info = json.loads(got.stdout or "{}")
    except ValueError:
        info = {}
    if got.returncode != 0 or not info.get("Zip"):
        why = info.get("Error") or got.stderr.strip() or f"exit {got.returncode}"
        raise CrdUnavailable(f"go mod download {MODULE}@{VERSION}: {why}")
    member = f"{MODULE}@{VERSION}/{CRD_PATH}"
    try:
        with zipfile.ZipFile(info["Zip"]) as archive:
            return archive.read(member)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise CrdUnavailable(f"{member} not in {info['Zip']}: {exc}") from None


def pytorchjob_crd() -> dict[str, Any]:
    path = cache_file()
    if not path.is_file():
        data = _download()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(path)
    crd = yaml.safe_load(path.read_text())
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise CrdUnavailable(f"{path} is not a CustomResourceDefinition")
    return crd


def pytorchjob_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The v1 version's openAPIV3Schema."""
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


CRD_NAME = "pytorchjobs.kubeflow.org"


@contextlib.contextmanager
def crd_installed(kube_cluster: KubeCluster) -> Iterator[client.ApiClient]:
    """The PyTorchJob CRD installed and Established on the cluster, deleted after; the
    test is skipped when the CRD cannot be had offline."""
    try:
        crd = pytorchjob_crd()
    except CrdUnavailable as exc:
        pytest.skip(f"the PyTorchJob CRD (training-operator v1.8.1) is not available: {exc}")
    api = kube_cluster.api_client()
    ext = client.ApiextensionsV1Api(api)
    body = copy.deepcopy(crd)
    body["metadata"].pop("annotations", None)
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        got = ext.read_custom_resource_definition(CRD_NAME)
        return any(
            c.type == "Established" and c.status == "True" for c in got.status.conditions or []
        )

    wait_until(established, timeout=60, what="the PyTorchJob CRD to be Established")
    try:
        yield api
    finally:
        ext.delete_custom_resource_definition(CRD_NAME)

        def gone() -> bool:
            try:
                ext.read_custom_resource_definition(CRD_NAME)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_until(gone, timeout=60, what="the PyTorchJob CRD to be deleted")
