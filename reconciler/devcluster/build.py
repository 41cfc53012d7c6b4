"""Build the control-plane binaries from Go modules, once, into a cache keyed by version.

Kubernetes cannot be ``go install``-ed because its go.mod replaces every staging module
with a local path, so ``go/k8s`` is a wrapper module that requires ``k8s.io/kubernetes``
and pins each staging module to the matching ``v0.X.Y`` release. etcd's server module
has the same problem and gets its own wrapper ``go/etcd``. kwok and helm (used by the
chart tests) install directly.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v4.3.2"

GO_DIR = Path(__file__).parent / "go"
K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """A binary could not be built; the message says which and why."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    helm: Path

    def all(self) -> dict[str, Path]:
        return {
            "etcd": self.etcd,
            "kube-apiserver": self.kube_apiserver,
            "kube-controller-manager": self.kube_controller_manager,
            "kube-scheduler": self.kube_scheduler,
            "kubectl": self.kubectl,
            "kwok": self.kwok,
            "helm": self.helm,
        }


def cache_root() -> Path:
    override = os.environ.get("RECONCILER_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reconciler"


def _module_key(module: Path) -> str:
    digest = hashlib.sha256()
    for name in sorted(p.name for p in module.iterdir() if p.is_file()):
        digest.update(name.encode())
        digest.update((module / name).read_bytes())
    return digest.hexdigest()[:10]


def _k8s_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "the dev cluster is built from Go modules and needs Go >= 1.26 on PATH "
            "(https://go.dev/dl); or point RECONCILER_TEST_KUBECONFIG at an existing cluster"
        )
    return go


def _run_go(
    args: list[str], cwd: Path, what: str, log: Path, extra_env: dict[str, str] | None = None
) -> None:
    env = dict(os.environ) | (extra_env or {})
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOFLAGS", "-mod=mod")
    with log.open("ab") as out:
        out.write(f"\n$ go {' '.join(args)}\n".encode())
        out.flush()
        proc = subprocess.run(
            [_go(), *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(f"building {what} failed (see {log}):\n" + "\n".join(tail))


def _module_target(name: str, version: str, module: Path) -> Path:
    return cache_root() / "bin" / f"{name}-{version}-{_module_key(module)}"


def _build_module(
    name: str,
    version: str,
    module: Path,
    commands: dict[str, str],
    ldflags: str,
    progress: Progress,
) -> dict[str, Path]:
    """Build each ``binary -> package`` of a wrapper module into the cache, if missing."""
    target = _module_target(name, version, module)
    wanted = {binary: target / binary for binary in commands}
    if all(path.is_file() for path in wanted.values()):
        progress(f"{name} {version}: cached in {target}")
        return wanted
    target.parent.mkdir(parents=True, exist_ok=True)
    log = cache_root() / "build.log"
    with tempfile.TemporaryDirectory(prefix=f"build-{name}-", dir=target.parent) as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(module, work)
        out = Path(tmp) / "out"
        out.mkdir()
        for binary, package in commands.items():
            started = time.monotonic()
            progress(f"{name} {version}: building {binary} (cold builds take minutes)")
            _run_go(
                [
                    "build",
                    "-p",
                    "2",
                    "-trimpath",
                    "-ldflags",
                    ldflags,
                    "-o",
                    str(out / binary),
                    package,
                ],
                work,
                binary,
                log,
            )
            progress(f"{name} {version}: built {binary} in {time.monotonic() - started:.0f}s")
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return wanted


def _install_target(name: str, version: str) -> Path:
    return cache_root() / "bin" / f"{name}-{version}"


def _go_install(
    name: str, version: str, package: str, progress: Progress, ldflags: str = "-s -w"
) -> Path:
    """``go install package@version`` into the cache, if missing; return the binary."""
    target = _install_target(name, version)
    binary = target / name
    if binary.is_file():
        progress(f"{name} {version}: cached in {target}")
        return binary
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"build-{name}-", dir=target.parent) as tmp:
        started = time.monotonic()
        progress(f"{name} {version}: building {name}")
        env_bin = Path(tmp) / "bin"
        env_bin.mkdir()
        _run_go(
            ["install", "-trimpath", "-ldflags", ldflags, f"{package}@{version}"],
            Path(tmp),
            name,
            cache_root() / "build.log",
            {"GOBIN": str(env_bin), "GOFLAGS": ""},
        )
        progress(f"{name} {version}: built in {time.monotonic() - started:.0f}s")
        if target.exists():
            shutil.rmtree(target)
        env_bin.rename(target)
    return binary


def ensure_binaries(progress: Progress = print, *, helm: bool = True) -> Binaries:
    """Return the control-plane binaries, building whichever is not cached yet. With
    ``helm=False`` (the cluster itself does not need it) helm's path is returned as is,
    built or not."""
    etcd = _build_module("etcd", ETCD_VERSION, GO_DIR / "etcd", {"etcd": "."}, "-s -w", progress)
    k8s = _build_module(
        "kubernetes",
        KUBERNETES_VERSION,
        GO_DIR / "k8s",
        {cmd: f"k8s.io/kubernetes/cmd/{cmd}" for cmd in K8S_COMMANDS},
        _k8s_ldflags(),
        progress,
    )
    kwok = _go_install("kwok", KWOK_VERSION, "sigs.k8s.io/kwok/cmd/kwok", progress)
    helm_binary = (
        _go_install(
            "helm",
            HELM_VERSION,
            "helm.sh/helm/v4/cmd/helm",
            progress,
            f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
        )
        if helm
        else cached_binaries().helm
    )
    return Binaries(
        etcd=etcd["etcd"],
        kube_apiserver=k8s["kube-apiserver"],
        kube_controller_manager=k8s["kube-controller-manager"],
        kube_scheduler=k8s["kube-scheduler"],
        kubectl=k8s["kubectl"],
        kwok=kwok,
        helm=helm_binary,
    )


def cached_binaries() -> Binaries:
    """Where :func:`ensure_binaries` puts each binary, without building anything: a path
    that does not exist means that binary is not built yet."""
    k8s = _module_target("kubernetes", KUBERNETES_VERSION, GO_DIR / "k8s")
    return Binaries(
        etcd=_module_target("etcd", ETCD_VERSION, GO_DIR / "etcd") / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kubectl=k8s / "kubectl",
        kwok=_install_target("kwok", KWOK_VERSION) / "kwok",
        helm=_install_target("helm", HELM_VERSION) / "helm",
    )
