"""The kwok and helm wrapper modules share the Kubernetes wrapper's dependency versions, so the Go
build cache compiles ``k8s.io/*`` and their dependencies once for both (docs/dev-cluster.md,
"What is built"). Reads the module graphs with ``go list`` (no build); needs Go >= 1.26 on PATH
or in the cache (scripts/bootstrap fetches it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from reconciler.devcluster import build
from reconciler.devcluster.toolchain import find_go, go_env

GO = find_go()
pytestmark = pytest.mark.skipif(
    GO is None, reason="needs Go >= 1.26 on PATH or in the cache: run scripts/bootstrap"
)

# kwok's otelrestful v0.69.0 imports otel/semconv/v1.41.0, which go/k8s's otel v1.41.0
# does not have: kwok keeps its own otel (go/kwok/go.mod says so)
KWOK_OWN = ("go.opentelemetry.io/otel",)


def _modules(module: Path, *packages: str) -> dict[str, str]:
    """module path -> version (after replace) of every package the packages build from."""
    assert GO is not None
    env = go_env(GO) | {"GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    out = subprocess.run(
        [str(GO), "list", "-deps", "-json=Module,Standard", *packages],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    found: dict[str, str] = {}
    decoder, at = json.JSONDecoder(), 0
    while at < len(out):
        if out[at].isspace():
            at += 1
            continue
        pkg, at = decoder.raw_decode(out, at)
        module_info = pkg.get("Module")
        if pkg.get("Standard") or not module_info:
            continue
        used = module_info.get("Replace") or module_info
        found[module_info["Path"]] = used.get("Version", "")
    return found


def test_kwok_builds_from_the_same_k8s_io_and_shared_modules_as_kubernetes() -> None:
    k8s = _modules(
        build.GO_DIR / "k8s", *(f"k8s.io/kubernetes/cmd/{c}" for c in build.K8S_COMMANDS)
    )
    kwok = _modules(build.GO_DIR / "kwok", "sigs.k8s.io/kwok/cmd/kwok")
    assert kwok["sigs.k8s.io/kwok"] == build.KWOK_VERSION
    assert kwok["k8s.io/client-go"] == "v0.36.3" == k8s["k8s.io/client-go"]
    shared = sorted(set(k8s) & set(kwok))
    assert len(shared) > 60
    differ = {
        path: (k8s[path], kwok[path])
        for path in shared
        if k8s[path] != kwok[path] and not path.startswith(KWOK_OWN)
    }
    assert differ == {}, "pin these in go/kwok/go.mod to go/k8s's version"


def test_helm_builds_from_the_same_k8s_io_and_shared_modules_as_kubernetes() -> None:
    k8s = _modules(
        build.GO_DIR / "k8s", *(f"k8s.io/kubernetes/cmd/{c}" for c in build.K8S_COMMANDS)
    )
    helm = _modules(build.GO_DIR / "helm", "helm.sh/helm/v4/cmd/helm")
    assert helm["helm.sh/helm/v4"] == build.HELM_VERSION
    assert helm["k8s.io/client-go"] == "v0.36.3" == k8s["k8s.io/client-go"]
    shared = sorted(set(k8s) & set(helm))
    assert len(shared) > 60
    differ = {path: (k8s[path], helm[path]) for path in shared if k8s[path] != helm[path]}
    assert differ == {}, "pin these in go/helm/go.mod to go/k8s's version"
