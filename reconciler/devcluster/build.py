"""Build the control-plane binaries from Go modules, once, into a cache keyed by version.

Kubernetes cannot be ``go install``-ed because its go.mod replaces every staging module
with a local path, so ``go/k8s`` is a wrapper module that requires ``k8s.io/kubernetes``
and pins each staging module to the matching ``v0.X.Y`` release. etcd's server module
has the same problem and gets its own wrapper ``go/etcd``. kwok and helm (used by the
chart tests) are built in the wrappers ``go/kwok`` and ``go/helm``, which pin every module
they share with ``go/k8s`` (the ``k8s.io/*`` libraries, grpc, golang.org/x/*...) to
go/k8s's version: the Go build cache then holds one compiled copy of them, and kwok or helm
built after Kubernetes compiles little more than its own packages.

The four Kubernetes commands build in one ``go build`` (their links overlap the compiles),
and independent modules build side by side when memory allows (:func:`_parallel_builds`).
Go is the one :mod:`reconciler.devcluster.toolchain` finds, or fetches before the first
build starts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reconciler.devcluster.toolchain import ToolchainError, ensure_go, go_env
from reconciler.devcluster.toolchain import cache_root as cache_root

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


def _go(progress: Progress) -> Path:
    """Go >= 1.26 from PATH or the cache, fetched from the module proxy when missing
    (:func:`reconciler.devcluster.toolchain.ensure_go`)."""
    try:
        return ensure_go(progress)
    except ToolchainError as exc:
        raise BuildError(
            f"the dev cluster is built from Go modules: {exc}; or point "
            "RECONCILER_TEST_KUBECONFIG at an existing cluster"
        ) from None


def _run_go(go: Path, args: list[str], cwd: Path, what: str, log: Path) -> float:
    """Run ``go args`` and return the CPU seconds it and its children used."""
    env = go_env(go)
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOFLAGS", "-mod=mod")
    with log.open("ab") as out:
        out.write(f"\n$ go {' '.join(args)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            [str(go), *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        # wait4 gives this child's rusage, its reaped children (compile, link) included
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(f"building {what} failed (see {log}):\n" + "\n".join(tail))
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Built:
    """One build step that ran: which binaries, its wall time and CPU time in seconds."""

    name: str
    binaries: tuple[str, ...]
    wall: float
    cpu: float


@dataclass(frozen=True)
class BuildStatus:
    """Where a build stands, for a progress line: what is building now, what is left after
    it, what is done, and the time since the build began."""

    building: tuple[str, ...]
    left: tuple[str, ...]
    done: tuple[str, ...]
    elapsed: float

    def line(self) -> str:
        from_start = _short_duration(self.elapsed)
        now = ", ".join(self.building) or "nothing"
        left = ", ".join(self.left) if self.left else "nothing after these"
        return f"[{from_start}] building {now}; left: {left}"


StatusSink = Callable[[BuildStatus], None]


def _short_duration(seconds: float) -> str:
    minutes, secs = divmod(max(0, int(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _module_target(name: str, version: str, module: Path) -> Path:
    return cache_root() / "bin" / f"{name}-{version}-{_module_key(module)}"


def _build_module(
    name: str,
    version: str,
    module: Path,
    commands: dict[str, str],
    ldflags: str,
    progress: Progress,
    timings: list[Built] | None = None,
) -> dict[str, Path]:
    """Build each ``binary -> package`` of a wrapper module into the cache, if missing. All
    the packages build in one ``go build`` (``-o dir/``): one action graph, so one
    binary's link overlaps the next one's compiles."""
    target = _module_target(name, version, module)
    wanted = {binary: target / binary for binary in commands}
    if all(path.is_file() for path in wanted.values()):
        progress(f"{name} {version}: cached in {target}")
        return wanted
    target.parent.mkdir(parents=True, exist_ok=True)
    log = cache_root() / f"build-{name}.log"
    with tempfile.TemporaryDirectory(prefix=f"build-{name}-", dir=target.parent) as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(module, work)
        out = Path(tmp) / "out"
        out.mkdir()
        go = _go(progress)
        started = time.monotonic()
        progress(f"{name} {version}: building {', '.join(commands)}")
        cpu = _run_go(
            go,
            [
                "build",
                "-p",
                "2",
                "-trimpath",
                "-ldflags",
                ldflags,
                "-o",
                f"{out}{os.sep}",
                *commands.values(),
            ],
            work,
            ", ".join(commands),
            log,
        )
        built = _rename_outputs(out, commands)
        wall = time.monotonic() - started
        progress(
            f"{name} {version}: built {', '.join(commands)} in {_short_duration(wall)} "
            f"(CPU {_short_duration(cpu)})"
        )
        if timings is not None:
            timings.append(Built(name, tuple(commands), wall, cpu))
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return {binary: target / path.name for binary, path in built.items()}


def _rename_outputs(out: Path, commands: dict[str, str]) -> dict[str, Path]:
    """``go build -o dir/`` names each binary after its package's last element (``.`` is
    the module's own name): give each the name it is asked for."""
    produced = {p for p in out.iterdir() if p.is_file()}
    result: dict[str, Path] = {}
    for binary, package in commands.items():
        wanted = out / binary
        if not wanted.is_file():
            candidates = [p for p in produced if p.name == Path(package).name]
            if len(candidates) != 1 and len(produced) == 1:
                candidates = list(produced)
            if len(candidates) != 1:
                raise BuildError(f"go build made {sorted(p.name for p in produced)}, not {binary}")
            candidates[0].rename(wanted)
        result[binary] = wanted
    return result


def _parallel_builds() -> int:
    """How many ``go build`` run side by side: 2 with 8 GiB available (kube-apiserver's
    link alone peaks near 2 GiB, a compile of its biggest packages near 1 GiB), else 1.
    ``$RECONCILER_BUILD_JOBS`` overrides."""
    override = os.environ.get("RECONCILER_BUILD_JOBS")
    if override:
        return max(1, int(override))
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return 2 if int(line.split()[1]) >= 8 * 1024 * 1024 else 1
    except (OSError, ValueError, IndexError):
        pass
    return 1


@dataclass(frozen=True)
class _Step:
    """One ``go`` invocation of the build plan; ``after`` names the steps it waits for
    (kwok after Kubernetes, so its ``k8s.io/*`` packages come from the build cache)."""

    name: str
    binaries: tuple[str, ...]
    cached: bool
    run: Callable[[Progress, list[Built]], dict[str, Path]]
    after: tuple[str, ...] = ()


def _run_plan(
    steps: list[_Step],
    progress: Progress,
    status: StatusSink | None,
    timings: list[Built] | None,
    tick: float,
) -> dict[str, Path]:
    """Run the steps, up to :func:`_parallel_builds` at once in dependency order, calling
    ``status`` every ``tick`` seconds while any runs. The first failure stops the plan
    (steps already running finish) and is raised."""
    results: dict[str, Path] = {}
    for step in steps:
        if step.cached:
            results |= step.run(progress, [])
    todo = [s for s in steps if not s.cached]
    if not todo:
        return results
    names = [b for s in todo for b in s.binaries]
    try:  # here, once: inside the steps' threads it would surface as one failure per step
        cache_root().mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryDirectory(prefix=".writable-", dir=cache_root()).cleanup()
    except OSError as exc:
        raise BuildError(
            f"cannot use the build cache {cache_root()}: {exc.strerror or exc} "
            "(choose another with RECONCILER_CACHE_DIR or XDG_CACHE_HOME)"
        ) from None
    _go(progress)  # before any build starts (a fetch is said here), not inside a step
    progress(
        f"to build: {', '.join(names)} (a cold build of all takes 10-20 minutes on 2 cores; "
        f"{_parallel_builds()} at a time; log in {cache_root()}/build-*.log)"
    )
    changed = threading.Condition()
    running: set[str] = set()
    finished: set[str] = set()
    errors: list[BaseException] = []
    collected: list[Built] = []
    limit = _parallel_builds()
    pending = {s.name for s in todo}
    started = time.monotonic()

    def work(step: _Step) -> None:
        try:
            out = step.run(progress, collected)
            with changed:
                results.update(out)
        except BaseException as exc:
            with changed:
                errors.append(exc)
        finally:
            with changed:
                running.discard(step.name)
                finished.add(step.name)
                changed.notify_all()

    threads: list[threading.Thread] = []
    while True:
        with changed:
            for step in todo:
                ready = all(a in finished or a not in pending for a in step.after)
                fresh = step.name not in running and step.name not in finished
                if not errors and fresh and ready and len(running) < limit:
                    running.add(step.name)
                    thread = threading.Thread(target=work, args=(step,), daemon=True)
                    threads.append(thread)
                    thread.start()
            if not running:
                break
            changed.wait(timeout=tick)
            now = BuildStatus(
                building=tuple(b for s in todo if s.name in running for b in s.binaries),
                left=tuple(
                    b
                    for s in todo
                    if s.name not in running and s.name not in finished
                    for b in s.binaries
                ),
                done=tuple(b for s in todo if s.name in finished for b in s.binaries),
                elapsed=time.monotonic() - started,
            )
        if status is not None and now.building:
            status(now)
    for thread in threads:
        thread.join()
    if timings is not None:
        timings.extend(collected)
    if errors:
        raise errors[0]
    progress(f"built {', '.join(names)} in {_short_duration(time.monotonic() - started)}")
    return results


def ensure_binaries(
    progress: Progress = print,
    *,
    helm: bool = True,
    status: StatusSink | None = None,
    timings: list[Built] | None = None,
    tick: float = 5.0,
) -> Binaries:
    """Return the control-plane binaries, building whichever is not cached yet. With
    ``helm=False`` (the cluster itself does not need it) helm's path is returned as is,
    built or not. While building, ``status`` gets a :class:`BuildStatus` every ``tick``
    seconds (by default its line goes to ``progress`` once a minute); ``timings`` collects
    each step's wall and CPU time."""
    where = cached_binaries()
    k8s_commands = {cmd: f"k8s.io/kubernetes/cmd/{cmd}" for cmd in K8S_COMMANDS}
    steps = [
        _Step(
            "kubernetes",
            K8S_COMMANDS,
            all(
                p.is_file()
                for p in (
                    where.kube_apiserver,
                    where.kube_controller_manager,
                    where.kube_scheduler,
                    where.kubectl,
                )
            ),
            lambda say, t: _build_module(
                "kubernetes",
                KUBERNETES_VERSION,
                GO_DIR / "k8s",
                k8s_commands,
                _k8s_ldflags(),
                say,
                t,
            ),
        ),
        _Step(
            "etcd",
            ("etcd",),
            where.etcd.is_file(),
            lambda say, t: _build_module(
                "etcd", ETCD_VERSION, GO_DIR / "etcd", {"etcd": "."}, "-s -w", say, t
            ),
        ),
        _Step(
            "kwok",
            ("kwok",),
            where.kwok.is_file(),
            lambda say, t: _build_module(
                "kwok",
                KWOK_VERSION,
                GO_DIR / "kwok",
                {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
                "-s -w",
                say,
                t,
            ),
            after=("kubernetes",),
        ),
    ]
    if helm:
        steps.append(
            _Step(
                "helm",
                ("helm",),
                where.helm.is_file(),
                lambda say, t: _build_module(
                    "helm",
                    HELM_VERSION,
                    GO_DIR / "helm",
                    {"helm": "helm.sh/helm/v4/cmd/helm"},
                    f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
                    say,
                    t,
                ),
                after=("kubernetes",),
            )
        )
    if status is None:
        last = [float("-inf")]

        def every_minute(now: BuildStatus) -> None:
            if now.elapsed - last[0] >= 60:
                last[0] = now.elapsed
                progress(now.line())

        status = every_minute
    built = _run_plan(steps, progress, status, timings, tick)
    return Binaries(
        etcd=built["etcd"],
        kube_apiserver=built["kube-apiserver"],
        kube_controller_manager=built["kube-controller-manager"],
        kube_scheduler=built["kube-scheduler"],
        kubectl=built["kubectl"],
        kwok=built["kwok"],
        helm=built["helm"] if helm else where.helm,
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
        kwok=_module_target("kwok", KWOK_VERSION, GO_DIR / "kwok") / "kwok",
        helm=_module_target("helm", HELM_VERSION, GO_DIR / "helm") / "helm",
    )
