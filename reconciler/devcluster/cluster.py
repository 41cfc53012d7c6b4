"""Run a real Kubernetes control plane on 127.0.0.1 with kwok fake nodes.

``up`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as
detached processes, records their pids in ``<state>/cluster.json``, and creates the
node fleet. ``down`` stops exactly those processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from reconciler.devcluster.build import Binaries, Progress, StatusSink, ensure_binaries
from reconciler.devcluster.pki import Pki, generate_pki
from reconciler.devcluster.shape import GPU_RESOURCE, NodePool, default_shape

STAGES_FILE = Path(__file__).parent / "kwok-stages.yaml"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.0.0.1/16"
STATE_FILE = "cluster.json"
API_QPS = 1000
API_BURST = 2000
SIMULATED_LOG_LINES = (
    "dev-cluster: simulated container log, served by kwok for every pod",
    "step 1/3: loading data",
    "step 2/3: training",
    "step 3/3: done",
)


class DevClusterError(RuntimeError):
    """The dev cluster could not be started, stopped or read."""


def default_state_dir() -> Path:
    override = os.environ.get("RECONCILER_DEV_CLUSTER_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "reconciler" / "dev-cluster"


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: guards against pid reuse

    def alive(self) -> bool:
        return _start_ticks(self.pid) == self.start_ticks


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; it is wrapped in parentheses.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie is as good as gone
        return None
    return int(fields[19])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(
    what: str, check: Callable[[], bool], timeout: float, procs: Iterable[ProcessRecord]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if not proc.alive():
                raise DevClusterError(f"{proc.name} exited while waiting for {what}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        time.sleep(0.25)
    raise DevClusterError(f"timed out after {timeout:.0f}s waiting for {what}")


class DevCluster:
    """One dev cluster, identified by its state directory."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        job_watch_cache: bool = True,
        profiling: bool = False,
    ) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        # On: etcd, the apiserver, the controller manager and the scheduler serve Go's
        # /debug/pprof (the benches' --pprof); off by default, as in production.
        self.profiling = profiling
        # Off: Job watches go straight to etcd (no watch cache), so an etcd compaction gives
        # the 410 Gone a long-lived cluster gives, and the informer's relist is testable.
        self.job_watch_cache = job_watch_cache
        self.pki = Pki(self.state_dir / "pki")
        self.kubeconfig = self.state_dir / "admin.kubeconfig"
        self.logs = self.state_dir / "logs"
        self.pod_logs = self.state_dir / "pod-logs" / "main.log"

    # --- state -------------------------------------------------------------------------

    def _read_state(self) -> dict[str, Any] | None:
        path = self.state_dir / STATE_FILE
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DevClusterError(f"{path}: unreadable state file: {exc}") from exc
        return data

    def _write_state(self, state: dict[str, Any]) -> None:
        path = self.state_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(path)

    def processes(self) -> list[ProcessRecord]:
        state = self._read_state() or {}
        return [ProcessRecord(**p) for p in state.get("processes", [])]

    def api_url(self) -> str | None:
        state = self._read_state()
        return f"https://127.0.0.1:{state['ports']['apiserver']}" if state else None

    # --- health ------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(self.pki.client_cert("admin"), self.pki.client_key("admin"))
        return ctx

    def _get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        url = self.api_url()
        if url is None:
            raise DevClusterError("no dev cluster state")
        try:
            with urllib.request.urlopen(
                url + path, context=self._ssl_context(), timeout=timeout
            ) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def _readyz(self) -> bool:
        return self._get("/readyz")[0] == 200

    def is_ready(self) -> bool:
        procs = self.processes()
        if not procs or not all(p.alive() for p in procs):
            return False
        try:
            return self._readyz()
        except (OSError, urllib.error.URLError, ssl.SSLError, DevClusterError):
            return False

    # --- up ----------------------------------------------------------------------------

    def up(
        self,
        pools: tuple[NodePool, ...] | None = None,
        progress: Progress = print,
        binaries: Binaries | None = None,
        timeout: float = 120.0,
        build_status: StatusSink | None = None,
    ) -> None:
        """Start the control plane and the node fleet. Idempotent when already running.
        ``build_status`` follows a build of the binaries (see :func:`ensure_binaries`)."""
        pools = pools if pools is not None else default_shape()
        if self.is_ready():
            progress(f"dev cluster already running ({self.kubeconfig})")
            self._ensure_nodes(pools, progress, timeout)
            return
        if any(p.alive() for p in self.processes()):
            progress("a previous dev cluster is half up: stopping it first")
            self.down(progress)

        progress("[1/7] binaries")
        bins = binaries or ensure_binaries(progress, helm=False, status=build_status)
        self._reset_state_dir()
        ports = {
            name: free_port()
            for name in ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok")
        }
        state: dict[str, Any] = {
            "ports": ports,
            "processes": [],
            "kubectl": str(bins.kubectl),
            "binaries": {name: str(path) for name, path in bins.all().items()},
        }
        self._write_state(state)

        progress("[2/7] certificates and service-account keys")
        generate_pki(
            self.pki.dir,
            {
                "admin": ("dev-admin", "system:masters"),
                "controller-manager": ("system:kube-controller-manager", None),
                "scheduler": ("system:kube-scheduler", None),
                "kwok": ("kwok-controller", "system:masters"),
            },
        )
        server = f"https://127.0.0.1:{ports['apiserver']}"
        self._write_kubeconfig(self.kubeconfig, server, "admin")
        for client in ("controller-manager", "scheduler", "kwok"):
            self._write_kubeconfig(self.state_dir / f"{client}.kubeconfig", server, client)

        started: list[ProcessRecord] = []

        def start(name: str, argv: list[str]) -> ProcessRecord:
            record = self._spawn(name, argv)
            started.append(record)
            state["processes"] = [r.__dict__ for r in started]
            state.setdefault("argv", {})[name] = argv  # for start_component
            self._write_state(state)
            return record

        try:
            progress(f"[3/7] etcd on 127.0.0.1:{ports['etcd']}")
            etcd_url = f"http://127.0.0.1:{ports['etcd']}"
            start("etcd", self._etcd_args(bins, ports))
            _wait("etcd /health", lambda: _http_ok(etcd_url + "/health"), timeout, started)

            progress(f"[4/7] kube-apiserver on {server}")
            start("kube-apiserver", self._apiserver_args(bins, ports, etcd_url))
            _wait("kube-apiserver /readyz", self._readyz, timeout, started)

            progress("[5/7] kube-controller-manager and kube-scheduler")
            start("kube-controller-manager", self._kcm_args(bins, ports))
            start("kube-scheduler", self._scheduler_args(bins, ports))
            for name in ("kcm", "scheduler"):
                url = f"https://127.0.0.1:{ports[name]}/healthz"
                _wait(f"{name} /healthz", partial(_http_ok, url, insecure=True), timeout, started)

            progress("[6/7] kwok")
            start("kwok", self._kwok_args(bins, ports))
            self._ensure_nodes(pools, progress, timeout)
            progress("[7/7] default service account")
            _wait("the default service account", self._default_sa_exists, timeout, started)
        except BaseException:
            progress("start failed: stopping what was started")
            self.down(progress=lambda _msg: None)
            raise
        progress(f"dev cluster ready: export KUBECONFIG={self.kubeconfig}")

    def _reset_state_dir(self) -> None:
        if self.state_dir.exists():
            for child in ("pki", "etcd-data", "logs", "pod-logs"):
                shutil.rmtree(self.state_dir / child, ignore_errors=True)
        self.logs.mkdir(parents=True, exist_ok=True)

    def _spawn(self, name: str, argv: list[str]) -> ProcessRecord:
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the CLI; down() signals the whole group
            cwd=self.state_dir,
        )
        log.close()
        ticks = None
        for _ in range(50):
            ticks = _start_ticks(proc.pid)
            if ticks is not None:
                break
            time.sleep(0.01)
        if ticks is None:
            raise DevClusterError(f"{name} exited at once; see {self.logs / (name + '.log')}")
        return ProcessRecord(name=name, pid=proc.pid, start_ticks=ticks)

    def _write_kubeconfig(self, path: Path, server: str, client: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "dev",
                    "cluster": {"server": server, "certificate-authority": str(self.pki.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": client,
                    "user": {
                        "client-certificate": str(self.pki.client_cert(client)),
                        "client-key": str(self.pki.client_key(client)),
                    },
                }
            ],
            "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": client}}],
            "current-context": "dev",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    def _etcd_args(self, bins: Binaries, ports: dict[str, int]) -> list[str]:
        client = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd_peer']}"
        return [
            str(bins.etcd),
            "--name=dev",
            f"--data-dir={self.state_dir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=dev={peer}",
            "--unsafe-no-fsync",  # a throwaway dev store: speed over durability
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
            *(["--enable-pprof"] if self.profiling else []),
        ]

    def _apiserver_args(self, bins: Binaries, ports: dict[str, int], etcd_url: str) -> list[str]:
        p = self.pki
        return [
            str(bins.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={p.serving_cert}",
            f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_cert}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            # pods/log and exec go to the node's InternalIP (kwok's server). kwok serves a
            # self-signed cert: without --kubelet-certificate-authority it is not verified.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={p.client_cert('admin')}",
            f"--kubelet-client-key={p.client_key('admin')}",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            f"--profiling={str(self.profiling).lower()}",
            "-v=1",
            *([] if self.job_watch_cache else ["--watch-cache-sizes=jobs.batch#0"]),
        ]

    def _kcm_args(self, bins: Binaries, ports: dict[str, int]) -> list[str]:
        kubeconfig = self.state_dir / "controller-manager.kubeconfig"
        return [
            str(bins.kube_controller_manager),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            "--leader-elect=false",
            f"--root-ca-file={self.pki.ca_cert}",
            f"--service-account-private-key-file={self.pki.sa_key}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={self.pki.ca_cert}",
            f"--cluster-signing-key-file={self.pki.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kube-api-qps={API_QPS}",
            f"--kube-api-burst={API_BURST}",
            "--concurrent-job-syncs=50",
            "--concurrent-gc-syncs=50",
            f"--profiling={str(self.profiling).lower()}",
            "-v=1",
        ]

    def _scheduler_args(self, bins: Binaries, ports: dict[str, int]) -> list[str]:
        kubeconfig = self.state_dir / "scheduler.kubeconfig"
        config = self.state_dir / "scheduler-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(kubeconfig),
                        "qps": API_QPS,
                        "burst": API_BURST,
                    },
                    "leaderElection": {"leaderElect": False},
                    "enableProfiling": self.profiling,
                }
            )
        )
        return [
            str(bins.kube_scheduler),
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "-v=1",
        ]

    def _write_pod_logs(self) -> Path:
        """The container log kwok serves for every pod (CRI log format), and the
        ClusterLogs config that points at it."""
        self.pod_logs.parent.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
        self.pod_logs.write_text(
            "".join(f"{stamp} stdout F {line}\n" for line in SIMULATED_LOG_LINES)
        )
        config = self.state_dir / "kwok-logs.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "ClusterLogs",
                    "metadata": {"name": "all-pods"},
                    # no selector: every pod; no containers: every container
                    "spec": {"logs": [{"logsFile": str(self.pod_logs), "follow": True}]},
                },
                sort_keys=False,
            )
        )
        return config

    def _kwok_args(self, bins: Binaries, ports: dict[str, int]) -> list[str]:
        return [
            str(bins.kwok),
            f"--kubeconfig={self.state_dir / 'kwok.kubeconfig'}",
            f"--config={STAGES_FILE}",
            f"--config={self._write_pod_logs()}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # kwok's kubelet-like server (pods/log); nodes advertise it as their
            # InternalIP and kubelet port, where the apiserver proxies pods/log to.
            f"--server-address=127.0.0.1:{ports['kwok']}",
            "--node-ip=127.0.0.1",
            f"--node-port={ports['kwok']}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ]

    # --- nodes -------------------------------------------------------------------------

    def kubectl(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        state = self._read_state() or {}
        binary = state.get("kubectl") or shutil.which("kubectl")
        if not binary:
            raise DevClusterError("kubectl not found")
        return subprocess.run(
            [binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            check=False,
            timeout=60,
        )

    def _api_json(self, path: str) -> dict[str, Any]:
        status, body = self._get(path, timeout=10)
        if status != 200:
            raise DevClusterError(f"GET {path}: HTTP {status}: {body[:200]!r}")
        data: dict[str, Any] = json.loads(body)
        return data

    def _ensure_nodes(
        self, pools: tuple[NodePool, ...], progress: Progress, timeout: float
    ) -> None:
        existing = {n["metadata"]["name"] for n in self._api_json("/api/v1/nodes")["items"]}
        manifests = [
            pool.manifest(name)
            for pool in pools
            for name in pool.node_names()
            if name not in existing
        ]
        if manifests:
            progress(f"creating {len(manifests)} kwok nodes")
            body = yaml.safe_dump_all(manifests).encode()
            result = self.kubectl("create", "-f", "-", input=body)
            if result.returncode != 0:
                raise DevClusterError(f"creating nodes failed: {result.stderr.decode()}")
        wanted = [name for pool in pools for name in pool.node_names()]
        _wait(
            f"{len(wanted)} nodes Ready",
            lambda: self._nodes_ready(wanted),
            timeout,
            self.processes(),
        )

    def _nodes_ready(self, names: list[str]) -> bool:
        ready = {n["name"] for n in self.nodes() if n["ready"]}
        return all(name in ready for name in names)

    def _default_sa_exists(self) -> bool:
        return self._get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

    def nodes(self) -> list[dict[str, Any]]:
        out = []
        for node in self._api_json("/api/v1/nodes")["items"]:
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            alloc = node["status"].get("allocatable", {})
            out.append(
                {
                    "name": node["metadata"]["name"],
                    "ready": conditions.get("Ready") == "True",
                    "gpus": alloc.get(GPU_RESOURCE, "0"),
                    "cpu": alloc.get("cpu"),
                    "memory": alloc.get("memory"),
                    "labels": node["metadata"].get("labels", {}),
                }
            )
        return sorted(out, key=lambda n: n["name"])

    # --- down / status -----------------------------------------------------------------

    def down(self, progress: Progress = print, grace: float = 10.0) -> list[str]:
        """Stop every process ``up`` started (by recorded pid). Returns the names still alive
        (empty on success)."""
        procs = [p for p in self.processes() if p.alive()]
        for proc in reversed(procs):
            progress(f"stopping {proc.name} (pid {proc.pid})")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.alive() for p in procs):
            time.sleep(0.1)
        for proc in procs:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p.alive() for p in procs):
            time.sleep(0.05)
        survivors = [p.name for p in procs if p.alive()]
        state = self._read_state()
        if state is not None and not survivors:
            state["processes"] = []
            self._write_state(state)
        if not procs:
            progress("dev cluster is not running")
        return survivors

    # --- one component ---------------------------------------------------------------

    def _component(self, name: str) -> tuple[dict[str, Any], int]:
        state = self._read_state()
        if state is None:
            raise DevClusterError("no dev cluster state")
        names = [p["name"] for p in state.get("processes", [])]
        if name not in names:
            raise DevClusterError(f"no component {name!r}; running: {', '.join(names)}")
        return state, names.index(name)

    def stop_component(self, name: str, grace: float = 10.0) -> None:
        """Stop one process ``up`` started (e.g. ``kube-apiserver``, to test an outage); the
        others keep running. :meth:`start_component` starts it again."""
        state, index = self._component(name)
        proc = ProcessRecord(**state["processes"][index])
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not proc.alive():
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and proc.alive():
                time.sleep(0.05)
        if proc.alive():
            raise DevClusterError(f"{name} (pid {proc.pid}) did not stop")

    def start_component(self, name: str, timeout: float = 120.0) -> None:
        """Start a stopped component again with the arguments ``up`` gave it, and wait until
        it is healthy (the API server: /readyz)."""
        state, index = self._component(name)
        if ProcessRecord(**state["processes"][index]).alive():
            return
        argv = (state.get("argv") or {}).get(name)
        if not argv:
            raise DevClusterError(f"{name}: its arguments were not recorded; run up again")
        record = self._spawn(name, list(argv))
        state["processes"][index] = record.__dict__
        self._write_state(state)
        if name == "kube-apiserver":
            _wait("kube-apiserver /readyz", self._readyz, timeout, [record])

    def status(self) -> dict[str, Any]:
        ready = self.is_ready()
        nodes: list[dict[str, Any]] = []
        if ready:
            with contextlib.suppress(OSError, urllib.error.URLError, DevClusterError):
                nodes = self.nodes()
        return {
            "ready": ready,
            "kubeconfig": str(self.kubeconfig),
            "apiserver": self.api_url(),
            "processes": [
                {"name": p.name, "pid": p.pid, "alive": p.alive()} for p in self.processes()
            ],
            "nodes": nodes,
        }


def _http_ok(url: str, insecure: bool = False) -> bool:
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context()
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return int(resp.status) == 200
    except urllib.error.HTTPError:
        return False
