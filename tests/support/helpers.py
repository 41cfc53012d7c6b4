"""Small helpers for tests."""

from __future__ import annotations

import contextlib
import http.server
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns a truthy value; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: T = check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
        last = check()
    return last


class Blackhole:
    """A TCP port that accepts every connection and never answers (a silent partition):
    calls to it hang until the client's timeout. ``accepted`` counts the connections."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self._held: list[socket.socket] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="blackhole", daemon=True)
        self.port = int(self._server.getsockname()[1])

    def url(self, scheme: str = "https") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        while not self._done.is_set():
            try:
                self._held.append(self._server.accept()[0])
            except TimeoutError:
                continue

    def __enter__(self) -> Blackhole:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        for sock in self._held:
            sock.close()
        self._server.close()


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records each request (``got``) and answers
    ``status`` (with ``location``: a redirect); ``running`` starts and stops it."""

    status: int = 200
    location: str = ""
    got: list[Received] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[Receiver]:
        rec = cls()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                rec.got.append(Received(self.path, headers, body))
                self.send_response(rec.status)
                if rec.location:
                    self.send_header("Location", rec.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *_: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        rec.port = int(server.server_address[1])
        thread = threading.Thread(target=server.serve_forever, name="receiver", daemon=True)
        thread.start()
        try:
            yield rec
        finally:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port where every connection is refused: bound, never listening (so no other
    process can take it meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for ``server`` with a dummy token, context ``dev``."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server}\n"
        "    insecure-skip-tls-verify: true\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: dev\n  context: {cluster: c, user: u}\ncurrent-context: dev\n"
    )
    return path


# --- bounded cost: a child process's peak memory and time ------------------------------------

BUDGET_KIB = 256 * 1024  # the budget every hostile input is refused within (issue 13, 5)


class Measured:
    """A finished child process: exit code, output, peak RSS (KiB), CPU and wall seconds."""

    def __init__(
        self, returncode: int, stdout: str, stderr: str, peak_kib: int, cpu: float, wall: float
    ) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.peak_kib = peak_kib
        self.cpu = cpu
        self.wall = wall

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __repr__(self) -> str:
        return (
            f"exit {self.returncode}, peak {self.peak_kib // 1024} MiB, cpu {self.cpu:.2f} s, "
            f"wall {self.wall:.2f} s\n{self.output[-3000:]}"
        )


def run_measured(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> Measured:
    """Run ``python -m MODULE ARGS...`` (``args`` = ``["-m", MODULE, *ARGS]``) to the end;
    its peak RSS is its own ``VmHWM`` (``peak_rss.py``), its CPU time from ``wait4``. Killed
    after ``timeout`` seconds (then the peak is unknown: reported as -1)."""
    import os
    import subprocess
    import sys
    import tempfile

    wrapper = Path(__file__).with_name("peak_rss.py")
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryDirectory() as tmp,
    ):
        peak_file = Path(tmp) / "peak"
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(wrapper), str(peak_file), *args],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
        peak = int(peak_file.read_text()) if peak_file.exists() else -1
    return Measured(proc.returncode, stdout, stderr, peak, usage.ru_utime + usage.ru_stime, wall)


def peak_rss_kib(pid: int) -> int:
    """The running process's peak RSS since its ``exec`` (``VmHWM``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for process {pid}")


def http_get(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def served_url(log: Path, timeout: float = 90) -> str:
    """The address a ``serve`` or ``run --http`` process logged, once its API describes a
    cycle."""
    found: list[str] = []

    def ready() -> bool:
        match = re.search(r" on (http://127\.0\.0\.1:\d+)", log.read_text())
        if match is None:
            return False
        try:
            http_get(match[1] + "/api/v1/fleet")
        except OSError:  # urllib's URLError included
            return False
        found.append(match[1])
        return True

    wait_until(ready, timeout=timeout, what="the server's first cycle")
    return found[0]


# --- kubeconfigs a Cluster file may point at, broken in each way ------------------------


def broken_kubeconfigs(good: str) -> dict[str, bytes]:
    """``good`` (a working kubeconfig's text) broken in each way a file can be: it does not
    parse (truncated, a NUL byte), has the wrong shape (a list, a map of clusters), holds bad
    TLS material (not base64; base64 of no certificate), or fails auth (a wrong token, an
    exec plugin that does not exist). Each must leave its cluster, only, unreachable."""
    import base64

    import yaml

    data = yaml.safe_load(good)
    raw = good.encode()

    def dump(doc: object) -> bytes:
        return yaml.safe_dump(doc).encode()

    def mutate(change: Callable[[dict], None]) -> bytes:  # type: ignore[type-arg]
        doc = yaml.safe_load(good)
        change(doc)
        return dump(doc)

    def cluster(doc: dict) -> dict:  # type: ignore[type-arg]
        return doc["clusters"][0]["cluster"]  # type: ignore[no-any-return]

    def user(doc: dict) -> dict:  # type: ignore[type-arg]
        return doc["users"][0]["user"]  # type: ignore[no-any-return]

    garbage = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot one\n").decode()
    return {
        "truncated": raw[: len(raw) // 2],
        "nul-byte": raw[:20] + b"\0" + raw[20:],
        "a-list": dump([data]),
        "clusters-a-map": mutate(lambda d: d.update(clusters={"c": d["clusters"][0]})),
        "users-a-string": mutate(lambda d: d.update(users="admin")),
        "ca-not-base64": mutate(lambda d: cluster(d).update({"certificate-authority-data": "!!"})),
        "ca-not-a-certificate": mutate(
            lambda d: cluster(d).update({"certificate-authority-data": garbage})
        ),
        "client-cert-not-a-certificate": mutate(
            lambda d: user(d).update({"client-certificate-data": garbage})
        ),
        "wrong-token": mutate(
            lambda d: d.update(
                users=[{"name": d["users"][0]["name"], "user": {"token": "not-a-token"}}]
            )
        ),
        "exec-missing": mutate(
            lambda d: d.update(
                users=[
                    {
                        "name": d["users"][0]["name"],
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": "/nonexistent/kube-login",
                            }
                        },
                    }
                ]
            )
        ),
    }
