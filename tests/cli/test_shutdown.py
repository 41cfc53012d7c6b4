"""``reconciler serve`` and ``reconciler run`` as real processes exit within a second of
SIGTERM while a cycle is stuck on a cluster that cannot be read: a port that refuses
connections, or a blackhole that accepts them and never answers. A leader still releases
its Lease (on a fake Lease API). No control plane needed.

The bound is a correctness property (a Deployment's pod must stop well inside its grace
period; a follower takes over at once), not a benchmark: the processes take about 0.15 s."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.helpers import Blackhole, refused_port, wait_until, write_kubeconfig
from support.paths import ROOT, TEMPLATE

EXIT_WITHIN = 1.0  # seconds from SIGTERM to the process's exit
STARTUP = 60.0  # seconds a process may take to start serving (imports, first compile)


@contextlib.contextmanager
def unreachable(kind: str) -> Iterator[tuple[str, Callable[[Path], bool]]]:
    """The cluster's address, and a check that a process logging to the given file has
    tried it (so that its first cycle is stuck on the read)."""
    if kind == "refused":
        with refused_port() as port:
            yield f"https://127.0.0.1:{port}", lambda log: "unreachable" in log.read_text()
    else:
        with Blackhole() as hole:
            yield hole.url(), lambda _log: hole.accepted > 0


def start(tmp_path: Path, command: str, server: str, *extra: str) -> tuple[Any, Path]:
    """The process (serving on a port of its choosing) and its log file."""
    repo = tmp_path / "config"
    if not repo.exists():
        shutil.copytree(TEMPLATE, repo)
    kubeconfig = write_kubeconfig(tmp_path / "cluster.kubeconfig", server)
    log = tmp_path / f"{command}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    args = [sys.executable, "-m", "reconciler", command, "--repo", str(repo)]
    args += ["--http", "127.0.0.1:0", "--interval", "1s"]
    args += ["--cluster-kubeconfig", f"local={kubeconfig}", *extra]
    proc = subprocess.Popen(
        args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w")
    )
    return proc, log


def serving(log: Path) -> bool:
    """True once the process's pages answer (at the address it logged)."""
    found = re.search(r" on (http://127\.0\.0\.1:\d+)", log.read_text())
    if found is None:
        return False
    try:
        with urllib.request.urlopen(found[1] + "/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def exit_time(proc: Any, log: Path) -> float:
    """Seconds from SIGTERM to the process's exit; the exit status must be 0."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        tail = log.read_text()[-3000:]
        raise AssertionError(f"no exit 30 s after SIGTERM; log:\n{tail}") from None
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, log.read_text()[-3000:]
    return elapsed


def wait_stuck(proc: Any, log: Path, tried: Callable[[Path], bool]) -> None:
    """Until the process serves and its first cycle is reading the cluster."""
    try:
        wait_until(lambda: serving(log), timeout=STARTUP, what="/healthz")
        wait_until(lambda: tried(log), timeout=30, what="a call to the cluster")
    except AssertionError:
        proc.kill()
        proc.wait()
        raise AssertionError(log.read_text()[-3000:]) from None
    time.sleep(0.3)  # well inside the read (the blackhole's calls hang 5 s per try)


@pytest.mark.parametrize("kind", ["refused", "blackhole"])
@pytest.mark.slow
def test_serve_exits_within_a_second_while_a_cluster_read_hangs(kind: str, tmp_path: Path) -> None:
    with unreachable(kind) as (server, tried):
        proc, log = start(tmp_path, "serve", server)
        wait_stuck(proc, log, tried)
        elapsed = exit_time(proc, log)
    assert elapsed < EXIT_WITHIN, f"serve took {elapsed:.2f} s to exit after SIGTERM"


# --- run, leading: the Lease is released before the exit ------------------------------------

LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/?]+))?")


class FakeLeases(ThreadingHTTPServer):
    """Just enough of the apiserver for ``LeaseClient``: get, create, and update guarded by
    ``resourceVersion`` (409 on a stale one)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _LeaseHandler)
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def holder(self, namespace: str, name: str) -> str | None:
        with self.lock:
            lease = self.leases.get((namespace, name))
        return None if lease is None else str(lease["spec"].get("holderIdentity") or "")


class _LeaseHandler(BaseHTTPRequestHandler):
    server: FakeLeases

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str) -> None:
        self._reply(code, {"kind": "Status", "code": code, "reason": reason, "message": reason})

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        return body

    def do_GET(self) -> None:
        match = LEASES.match(self.path)
        if match is None or match[2] is None:
            return self._status(404, "NotFound")
        with self.server.lock:
            lease = self.server.leases.get((match[1], match[2]))
        return self._reply(200, lease) if lease else self._status(404, "NotFound")

    def _store(self, key: tuple[str, str], body: dict[str, Any], status: int) -> None:
        self.server.version += 1
        body["metadata"]["resourceVersion"] = str(self.server.version)
        self.server.leases[key] = body
        self._reply(status, body)

    def do_POST(self) -> None:
        match, body = LEASES.match(self.path), self._body()
        if match is None:
            return self._status(404, "NotFound")
        key = (match[1], str(body["metadata"]["name"]))
        with self.server.lock:
            if key in self.server.leases:
                return self._status(409, "AlreadyExists")
            return self._store(key, body, 201)

    def do_PUT(self) -> None:
        match, body = LEASES.match(self.path), self._body()
        if match is None or match[2] is None:
            return self._status(404, "NotFound")
        key = (match[1], match[2])
        with self.server.lock:
            stored = self.server.leases.get(key)
            if stored is None:
                return self._status(404, "NotFound")
            if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict")
            return self._store(key, body, 200)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_leases() -> Iterator[FakeLeases]:
    server = FakeLeases()
    server.thread.start()
    yield server
    server.shutdown()
    server.server_close()


def git_repo(path: Path) -> None:
    shutil.copytree(TEMPLATE, path)
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "config"],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True)


@pytest.mark.parametrize("kind", ["refused", "blackhole"])
@pytest.mark.slow
def test_run_as_leader_releases_its_lease_and_exits_within_a_second(
    kind: str, tmp_path: Path, fake_leases: FakeLeases
) -> None:
    git_repo(tmp_path / "config")
    lease_kubeconfig = write_kubeconfig(tmp_path / "lease.kubeconfig", fake_leases.url)
    with unreachable(kind) as (server, tried):
        proc, log = start(
            tmp_path,
            "run",
            server,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--leader-elect",
            "--lease-kubeconfig",
            str(lease_kubeconfig),
            "--identity",
            "replica-a",
        )
        wait_stuck(proc, log, tried)
        assert fake_leases.holder("default", "dispatch-reconciler") == "replica-a"
        elapsed = exit_time(proc, log)
    assert fake_leases.holder("default", "dispatch-reconciler") == ""  # released
    assert "released the lease" in log.read_text()
    assert elapsed < EXIT_WITHIN, f"run took {elapsed:.2f} s to exit after SIGTERM"
