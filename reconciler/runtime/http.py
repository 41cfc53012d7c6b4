"""``--http``: /healthz, /readyz and /metrics on a small threaded server.

- ``/healthz``: 200 while the process serves requests (liveness).
- ``/readyz``: 200 only when ``ready()`` says so (last cycle succeeded and a valid config
  is loaded); 503 with its reason otherwise.
- ``/metrics``: the Prometheus text exposition of the registry.

Any other GET goes to ``web`` when given (the queue pages, ``runtime/web.py``): it
answers ``(status, body, content type)``, or None for 404.

``POST /api/webhook`` goes to ``webhook`` when given (``runtime/webhook.py``): the body is
read only with a ``Content-Length`` of at most its ``max_body`` (411, 413 otherwise).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from reconciler.runtime import webhook as hooks

log = logging.getLogger("reconciler.http")

# How often serve_forever checks for stop(): stop() waits up to this long (the default,
# 0.5 s, was half of the shutdown budget).
POLL_INTERVAL = 0.05

# Seconds a connection may stall (a webhook body sent slowly) before it is dropped.
SOCKET_TIMEOUT = 30.0

# ready() returns ok, or (ok, reason); the reason is shown on /readyz.
Readiness = Callable[[], bool | tuple[bool, str]]
# web(path, query) -> (status, body, content type), or None: not found
WebRoutes = Callable[[str, str], tuple[int, bytes, str] | None]


class HttpError(RuntimeError):
    """The server could not bind its address."""


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT`` for 127.0.0.1) into a bind address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http {address!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return (host.strip("[]") or "127.0.0.1", int(port))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = SOCKET_TIMEOUT

    def do_POST(self) -> None:
        path = self.path.partition("?")[0]
        receiver = self.server.webhook
        if path != hooks.PATH:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        if receiver is None:
            self._reply(404, "no webhook receiver: start with --webhook-secret-file")
            return
        if self.headers.get("Transfer-Encoding"):
            self._reply(411, "a webhook needs a Content-Length (no chunked body)")
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            self._reply(411, "a webhook needs a Content-Length")
            return
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0:
            self._reply(400, f"bad Content-Length {length_text[:20]!r}")
            return
        if length > receiver.max_body:
            self._reply(413, f"webhook body of {length} bytes: at most {receiver.max_body}")
            return
        body = self.rfile.read(length)
        if len(body) < length:
            self._reply(400, f"webhook body cut short: {len(body)} of {length} bytes")
            return
        try:
            reply = receiver.handle(dict(self.headers.items()), body)
        except Exception:
            log.exception("webhook")
            self._reply(500, "internal error; see the reconciler's log")
            return
        self._send(reply.status, reply.body, "text/plain; charset=utf-8")

    def _reply(self, status: int, message: str) -> None:
        """An answer before the body was read: the connection is closed after it."""
        self.close_connection = True
        self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8")

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/readyz":
            try:
                answer = self.server.ready()
                ok, reason = answer if isinstance(answer, tuple) else (bool(answer), "")
            except Exception as exc:  # a broken probe is "not ready", never a 500 loop
                ok, reason = False, f"readiness check failed: {exc}"
            body = (reason or ("ok" if ok else "not ready")) + "\n"
            self._send(200 if ok else 503, body.encode(), "text/plain; charset=utf-8")
        elif path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif self.server.web is not None:
            try:
                reply = self.server.web(path, query)
            except Exception:
                log.exception("serving %s", path)
                reply = (500, b"internal error; see the reconciler's log\n", "text/plain")
            if reply is None:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
            else:
                code, payload, content_type = reply
                self._send(code, payload, content_type, page=True)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str, page: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if page:  # the web pages: always fresh, never sniffed as another type
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        ready: Readiness,
        web: WebRoutes | None = None,
        webhook: hooks.Receiver | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.registry = registry
        self.ready = ready
        self.web = web
        self.webhook = webhook


class HttpServer:
    """Serves in a daemon thread from ``start()`` until ``stop()``."""

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        ready: Readiness,
        web: WebRoutes | None = None,
        webhook: hooks.Receiver | None = None,
    ) -> None:
        host, port = parse_address(address)
        try:
            self._server = _Server((host, port), registry, ready, web, webhook)
        except OSError as exc:
            raise HttpError(f"--http {address}: cannot listen: {exc.strerror or exc}") from exc
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the real port when 0 was asked for)."""
        host, port = self._server.server_address[:2]
        return (str(host), int(port))

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL},
            name="http",
            daemon=True,
        )
        self._thread.start()
        log.info("serving /healthz /readyz /metrics", extra={"url": self.url})

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serve_forever that runs
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()
