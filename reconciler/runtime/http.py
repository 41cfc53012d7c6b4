"""``--http``: /healthz, /readyz and /metrics on a small threaded server.

- ``/healthz``: 200 while the process serves requests (liveness).
- ``/readyz``: 200 only when ``ready()`` says so (last cycle succeeded and a valid config
  is loaded); 503 with its reason otherwise.
- ``/metrics``: the Prometheus text exposition of the registry.

Any other GET goes to ``web`` when given (the queue pages, ``runtime/web.py``): it
answers ``(status, body, content type)``, or None for 404.

With ``authorize`` (``--auth``, ``runtime/auth.py``), every GET and HEAD is first put to
``authorize(headers, path)``: one not allowed is answered its status (401, 403, 503) and
one line, with its headers (``WWW-Authenticate``). The webhook is not a user: its POST
keeps its own signature check.

``POST /api/webhook`` goes to ``webhook`` when given (``runtime/webhook.py``): the body is
read only with a ``Content-Length`` (ASCII digits, said once) of at most its ``max_body``
(411, 400, 413 otherwise).

What any client can make it hold is bounded: at most ``MAX_CONNECTIONS`` connections are
served at once, ``MAX_PER_CLIENT`` from one address (one thread each; another is answered
503 at once), at most ``MAX_WEBHOOK_BODIES`` webhook bodies are read at once, a request's
line and headers are at most ``MAX_HEAD`` bytes (431), each request must arrive whole
(line, headers, body) within ``READ_SECONDS`` however slowly it trickles in, and an
answer a client stops reading is dropped after ``SOCKET_TIMEOUT``. HEAD is a GET without
the body, OPTIONS lists the methods (``Allow``), any other method is 405 with ``Allow``.
Every refusal is one line of text (``{"error": ...}`` under ``/api/v1``); an exception of
ours is a 500 with a generic line and the traceback in the log, and a client that went
away is a debug line.
"""

from __future__ import annotations

import http.client
import io
import logging
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from reconciler.core.views.web_html import CONTENT_SECURITY_POLICY, error_json
from reconciler.runtime import webhook as hooks

if TYPE_CHECKING:  # the server only calls it
    from reconciler.runtime.auth import Authorize

log = logging.getLogger("reconciler.http")

# How often serve_forever checks for stop(): stop() waits up to this long (the default,
# 0.5 s, was half of the shutdown budget).
POLL_INTERVAL = 0.05

# Connections served at once (a thread each, and a webhook body of up to 5 MiB): another
# one is answered 503 at once. The pages poll every 5 s per open tab.
MAX_CONNECTIONS = 64
# Of those, from one client address: a host alone cannot take them all (and with them the
# kubelet's /healthz).
MAX_PER_CLIENT = 16
# Webhook bodies read at once (up to 5 MiB each, before the signature can be checked):
# another push is 503, the interval being the fallback. A Git host sends one per push.
MAX_WEBHOOK_BODIES = 4
# A connection answered before its request was read (503, 411, 413, ...) is closed this
# many seconds later, so that the client reads the answer rather than a reset; at most
# MAX_REFUSED refused connections wait at once.
REFUSED_LINGER = 1.0
MAX_REFUSED = 256
# Bytes of a request's line and headers in all: the stdlib caps each line at 64 KiB and
# their number at 100 (6.4 MB a request, held per connection and parsed into objects).
MAX_HEAD = 128 * 1024
# Seconds a whole request (line, headers, body) may take to arrive, however it trickles in.
READ_SECONDS = 30.0
# Seconds a write may stall (a client that stops reading the answer) before it is dropped.
SOCKET_TIMEOUT = 30.0

INTERNAL_ERROR = "internal error; see the reconciler's log"
TEXT = "text/plain; charset=utf-8"
_READ_METHODS = "GET, HEAD, OPTIONS"
_BUSY = b"busy: too many connections, retry in a moment\n"
_BUSY_ANSWER = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
    + str(len(_BUSY)).encode()
    + b"\r\n\r\n"
    + _BUSY
)

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


def _is_api(path: str) -> bool:
    return path == "/api/v1" or path.startswith("/api/v1/")


class HeadTooLarge(http.client.HTTPException):
    """The request's line and headers are over ``MAX_HEAD`` bytes (the stdlib answers an
    ``HTTPException`` from the headers' parser 431)."""


class _RequestReader(io.RawIOBase):
    """A socket's bytes, every read waiting at most until ``deadline`` (monotonic): the
    socket's own timeout counts per read, so a byte every few seconds never ends. At most
    ``budget`` bytes are read (the head's; a body's is added once it is accepted)."""

    def __init__(self, sock: socket.socket, deadline: float, budget: int) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self.budget = budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.budget <= 0:
            raise HeadTooLarge(f"request head over {MAX_HEAD} bytes")
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request was not received within {READ_SECONDS:g} s")
        self._sock.settimeout(left)
        view = memoryview(buffer)[: self.budget]
        got = self._sock.recv_into(view)
        self.budget -= got
        return got


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = SOCKET_TIMEOUT
    # a refusal of a request line that is not HTTP at all still gets a status line
    default_request_version = "HTTP/1.0"
    _head = False  # a HEAD: the answer without its body
    _answered = False  # the status line is out: a later failure cannot become a 500

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own file: replaced by one bounded in time and size
        deadline = time.monotonic() + READ_SECONDS
        self._reader = _RequestReader(self.connection, deadline, MAX_HEAD)
        self.rfile = io.BufferedReader(self._reader)

    # --- methods -----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_HEAD(self) -> None:
        self._head = True
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def do_OPTIONS(self) -> None:
        self._send(204, b"", TEXT, allow=self._allow())

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's refusals (a malformed request line or headers, a method without a
        ``do_`` here) as ours: one line, not an HTML page."""
        self.close_connection = True
        if code == HTTPStatus.NOT_IMPLEMENTED:  # no do_<METHOD>: not allowed on any path
            self._not_allowed()
            return
        log.debug("http: refused (%s): %s", code, message)
        if code == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE and explain:
            message = explain  # which limit: a line, their number, all of them
        self._error(code, message or HTTPStatus(code).phrase)

    # --- answers -----------------------------------------------------------------------

    def _guarded(self, serve: Callable[[], None]) -> None:
        """``serve()``, with an exception of ours answered 500 and logged."""
        try:
            serve()
        except (ConnectionError, TimeoutError):
            raise  # the client went away or stalled: the server's handle_error notes it
        except Exception:
            log.exception("serving %s %s", self.command, self.path[:200])
            if not self._answered:
                self.close_connection = True
                self._error(500, INTERNAL_ERROR)

    def _path(self) -> str:
        return (getattr(self, "path", "") or "").partition("?")[0]

    def _is_webhook(self) -> bool:
        """The receiver's path, with a trailing slash too (as the pages' routes)."""
        return self._path().rstrip("/") == hooks.PATH

    def _allow(self) -> str:
        if self._is_webhook() and self.server.webhook is not None:
            return "POST, OPTIONS"
        return _READ_METHODS

    def _not_allowed(self) -> None:
        allow = self._allow()
        self._error(405, f"method {self.command} not allowed here: {allow}", allow=allow)

    def _error(
        self,
        status: int,
        message: str,
        allow: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """One line: ``{"error": ...}`` under /api/v1, text elsewhere."""
        if _is_api(self._path()):
            self._send(
                status, error_json(message), "application/json", allow=allow, headers=headers
            )
        else:
            line = " ".join(message.splitlines())
            self._send(status, (line + "\n").encode(), TEXT, allow=allow, headers=headers)

    def _reply(self, status: int, message: str) -> None:
        """An answer before the body was read: the connection is closed after it, once what
        the client still sends is read off for a moment (closed with unread bytes, the
        connection is reset, and the client may see the reset instead of the answer)."""
        self.close_connection = True
        self._send(status, (message + "\n").encode(), TEXT)
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + REFUSED_LINGER
            for _ in range(16):  # at most 1 MiB
                self.connection.settimeout(max(deadline - time.monotonic(), 0.001))
                if not self.connection.recv(65536):
                    break
        except OSError:  # the time is up, or the client is gone
            pass

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        page: bool = False,
        allow: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.connection.settimeout(SOCKET_TIMEOUT)  # the read's deadline is not the answer's
        self._answered = True
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        if allow is not None:
            self.send_header("Allow", allow)
        for name, value in headers:
            self.send_header(name, value)
        if page:  # the web pages: always fresh, never sniffed, only their own script
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not self._head and status != 204:
            self.wfile.write(body)

    # --- routes ------------------------------------------------------------------------

    def _get(self) -> None:
        path, _, query = self.path.partition("?")
        decision = (
            self.server.authorize(self.headers.items(), path) if self.server.authorize else None
        )
        if self._is_webhook() and self.server.webhook is not None:
            self._not_allowed()
        elif decision is not None and not decision.allowed:
            self._error(decision.status, decision.message, headers=decision.headers)
        elif path == "/healthz":
            self._send(200, b"ok\n", TEXT)
        elif path == "/readyz":
            try:
                answer = self.server.ready()
                ok, reason = answer if isinstance(answer, tuple) else (bool(answer), "")
            except Exception as exc:  # a broken probe is "not ready", never a 500 loop
                log.exception("the readiness check")
                ok, reason = False, f"readiness check failed: {exc}"
            body = (reason or ("ok" if ok else "not ready")) + "\n"
            self._send(200 if ok else 503, body.encode(), TEXT)
        elif path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif self.server.web is not None:
            reply = self.server.web(path, query)
            if reply is None:
                self._error(404, "not found")
            else:
                code, payload, content_type = reply
                self._send(code, payload, content_type, page=True)
        else:
            self._error(404, "not found")

    def _post(self) -> None:
        receiver = self.server.webhook
        if not self._is_webhook():
            self._not_allowed()
            return
        if receiver is None:
            self._reply(404, "no webhook receiver: start with --webhook-secret-file")
            return
        if self.headers.get("Transfer-Encoding"):
            self._reply(411, "a webhook needs a Content-Length (no chunked body)")
            return
        lengths = [v.strip() for v in self.headers.get_all("Content-Length") or []]
        if not lengths:
            self._reply(411, "a webhook needs a Content-Length")
            return
        if len(set(lengths)) > 1:
            self._reply(400, "conflicting Content-Length headers")
            return
        text = lengths[0]
        if not (text.isascii() and text.isdigit()):
            self._reply(400, f"bad Content-Length {text[:20]!r}: expected digits")
            return
        if len(text) > 15 or int(text) > receiver.max_body:
            shown = text if len(text) <= 15 else "over 10^15"
            self._reply(413, f"webhook body of {shown} bytes: at most {receiver.max_body}")
            return
        if not self.server.bodies.acquire(blocking=False):
            self._reply(503, "busy: other webhook bodies are being read; retry later")
            return
        try:
            self._read_webhook(receiver, int(text))
        finally:
            self.server.bodies.release()

    def _read_webhook(self, receiver: hooks.Receiver, length: int) -> None:
        self._reader.budget = length  # at most the rest of the body (some may be buffered)
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            self._reply(408, f"webhook body not received within {READ_SECONDS:g} s")
            return
        if len(body) < length:
            self._reply(400, f"webhook body cut short: {len(body)} of {length} bytes")
            return
        reply = receiver.handle(dict(self.headers.items()), body)
        self._send(reply.status, reply.body, TEXT)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # the listen backlog (socketserver's 5 reset connections of a burst before they were
    # accepted, and refused with 503)
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        ready: Readiness,
        web: WebRoutes | None = None,
        webhook: hooks.Receiver | None = None,
        authorize: Authorize | None = None,
    ) -> None:
        self.registry = registry
        self.ready = ready
        self.web = web
        self.webhook = webhook
        self.authorize = authorize
        self.bodies = threading.BoundedSemaphore(MAX_WEBHOOK_BODIES)
        self._lock = threading.Lock()
        self._served: Counter[str] = Counter()  # connections served, by client address
        self._refused: deque[tuple[socket.socket, float]] = deque()  # to close, and when
        super().__init__(address, _Handler)  # last: a failed bind calls server_close

    def _take(self, client: str) -> bool:
        with self._lock:
            if self._served.total() >= MAX_CONNECTIONS or self._served[client] >= MAX_PER_CLIENT:
                return False
            self._served[client] += 1
            return True

    def _give_back(self, client: str) -> None:
        with self._lock:
            self._served[client] -= 1
            if self._served[client] <= 0:
                del self._served[client]

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while there is a slot (``MAX_CONNECTIONS``, at most
        ``MAX_PER_CLIENT`` of them per address); else 503 at once (from the accepting
        thread, never blocking it: the answer fits any socket buffer)."""
        client = str(client_address[0])
        if not self._take(client):
            log.debug("http: %s refused: too many connections", client)
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._give_back(client)
            raise

    def _refuse(self, sock: socket.socket) -> None:
        """503 and the end of our side at once, without blocking (the answer fits any
        socket buffer). The socket is closed a moment later (``service_actions``): closed
        at once, the request the client sends meanwhile would reset the connection, and
        the client would see the reset instead of the answer."""
        try:
            sock.setblocking(False)
            sock.send(_BUSY_ANSWER)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the client is gone already
            pass
        if len(self._refused) >= MAX_REFUSED:
            self._refused.popleft()[0].close()
        self._refused.append((sock, time.monotonic() + REFUSED_LINGER))

    def service_actions(self) -> None:
        """Close the refused sockets whose moment has passed (serve_forever calls this at
        every poll)."""
        now = time.monotonic()
        while self._refused and self._refused[0][1] <= now:
            self._refused.popleft()[0].close()

    def server_close(self) -> None:
        super().server_close()
        while self._refused:
            self._refused.popleft()[0].close()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give_back(str(client_address[0]))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Not socketserver's traceback on stderr: a client gone is a debug line, anything
        else a bug, logged."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("http: the connection from %s ended: %s", client_address, exc)
        else:
            log.error("http: serving %s", client_address, exc_info=True)


class HttpServer:
    """Serves in a daemon thread from ``start()`` until ``stop()``."""

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        ready: Readiness,
        web: WebRoutes | None = None,
        webhook: hooks.Receiver | None = None,
        authorize: Authorize | None = None,
    ) -> None:
        host, port = parse_address(address)
        try:
            self._server = _Server((host, port), registry, ready, web, webhook, authorize)
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
