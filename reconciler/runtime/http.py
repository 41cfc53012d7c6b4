"""``--http``: /healthz, /readyz and /metrics, the queue pages and the webhook receiver, on
aiohttp's low-level server (``aiohttp.web.Server``), its event loop in one thread.

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

The loop only reads requests and writes answers: the pages, ``/metrics`` and the receiver
(synchronous, and a page may take a while to compute) run in a pool of ``WORKERS``
threads, so a slow view never holds up another connection, nor ``/healthz``; the checks
of ``authorize`` in their own pool of ``REVIEWERS``, so that reviews waiting on a slow API
server hold none of those threads (``/metrics`` answers, and pages once allowed).

What any client can make it hold is bounded, and waiting clients cost a socket each, not a
thread: at most ``MAX_CONNECTIONS`` connections are open at once (another is answered 503
at once; fewer when the open-files limit leaves no room, ``connection_caps``), with no cap
per address (behind an ingress every user has the proxy's). A connection must send a
request within ``IDLE_SECONDS`` of opening or of its last answer, and a request's line and
headers must arrive within ``HEAD_SECONDS`` of their first byte (the connection is closed
otherwise); a request's line and headers are at most
``MAX_HEAD`` bytes (431); at most ``MAX_WEBHOOK_BODIES`` webhook bodies are read at once,
each within ``BODY_SECONDS`` (408); an answer a client stops reading is dropped after
``SEND_SECONDS``. HEAD is a GET without the body, OPTIONS lists the methods (``Allow``),
any other method is 405 with ``Allow``. Every refusal is one line of text
(``{"error": ...}`` under ``/api/v1``); an exception of ours is a 500 with a generic line
and the traceback in the log, and a client that went away is a debug line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeVar, cast

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong
from aiohttp.http_parser import HttpRequestParserPy, RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import MAX_MSG_QUEUE_SIZE, RequestHandler, RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from reconciler.core.views.web_html import CONTENT_SECURITY_POLICY, error_json
from reconciler.runtime import webhook as hooks

if TYPE_CHECKING:  # the server only calls it
    from reconciler.runtime.auth import Authorize

log = logging.getLogger("reconciler.http")

# Connections open at once: another is answered 503 at once. Each costs a socket and a few
# KB, not a thread (up to MAX_HEAD while its head arrives, for at most HEAD_SECONDS: 256 MiB
# at worst); the pages poll every 5 s per open tab. Well above what idle browsers and slow
# clients hold, so that they cannot starve a real request (tests/runtime/test_http_metrics.py
# holds 1,100 from one address).
MAX_CONNECTIONS = 2048
# The listen backlog: a burst of connections waits here to be accepted, not reset.
BACKLOG = 1024
# Threads computing answers (pages, /metrics, the webhook receiver): the views hold the
# GIL, so more threads would not answer sooner; the others wait their turn.
WORKERS = 4
# Threads asking the API server who a request is and what it may see (``--auth``): their
# own, as a review may wait up to the client's read timeout on a slow API server, and
# requests with forged tokens would otherwise take every thread of the pages and /metrics.
REVIEWERS = 4
# Webhook bodies read at once (up to 5 MiB each, before the signature can be checked):
# another push is 503, the interval being the fallback. A Git host sends one per push.
MAX_WEBHOOK_BODIES = 4
# A connection answered before its request was read (503, 411, 413, ...) is closed this
# many seconds later, what it still sends read off meanwhile, so that the client reads
# the answer rather than a reset; at most MAX_REFUSED connections refused for being too
# many wait at once.
REFUSED_LINGER = 1.0
MAX_REFUSED = 256
# Open files kept for the rest of the process (git's pipes, the clusters' connections, the
# log) however many connections clients hold: each is a file descriptor.
FD_RESERVE = 256
# Bytes of a request's line and headers in all; a line (the request line: 414, a header:
# 431) is at most MAX_LINE, and there are at most MAX_HEADERS headers (431).
MAX_HEAD = 128 * 1024
MAX_LINE = 64 * 1024
MAX_HEADERS = 100
# Seconds a connection may stay open without sending a request (new, or after an answer:
# a tab's poll every 5 s keeps its connection).
IDLE_SECONDS = 15.0
# Seconds a request's line and headers may take to arrive from their first byte, however
# they trickle in, and a webhook's body once its headers are in.
HEAD_SECONDS = 10.0
BODY_SECONDS = 30.0
# Seconds an answer may take to be written (a client that stops reading it is dropped).
SEND_SECONDS = 30.0
# Seconds stop() gives the answers under way before closing their connections.
STOP_SECONDS = 0.2

INTERNAL_ERROR = "internal error; see the reconciler's log"
TEXT = "text/plain; charset=utf-8"
_READ_METHODS = "GET, HEAD, OPTIONS"
_BUSY = b"busy: too many connections, retry in a moment\n"
_BUSY_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
    + str(len(_BUSY)).encode()
    + b"\r\n\r\n"
    + _BUSY
)

# ready() returns ok, or (ok, reason); the reason is shown on /readyz.
Readiness = Callable[[], bool | tuple[bool, str]]
# web(path, query) -> (status, body, content type), or None: not found
WebRoutes = Callable[[str, str], tuple[int, bytes, str] | None]

_T = TypeVar("_T")


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


class _HeadRefused(HttpProcessingError):
    """A request head refused with ``code`` (414, 431) and a one-line ``message``."""


_Parsed = tuple[list[tuple[RawRequestMessage, StreamReader]], bool, bytes]


class _BoundedHead:
    """aiohttp's request parser, with what a head may take: ``MAX_HEAD`` bytes and
    ``HEAD_SECONDS`` from its first byte (then ``expired`` is called). The bytes of a body
    being read are not counted."""

    def __init__(
        self,
        parser: HttpRequestParserPy,
        loop: asyncio.AbstractEventLoop,
        expired: Callable[[], None],
    ) -> None:
        self._parser = parser
        self._loop = loop
        self._expired = expired
        self._size = 0  # bytes of the head under way
        self._deadline: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None  # the last request's, while it arrives

    def feed_data(self, data: bytes) -> _Parsed:
        if self._body is not None and not self._body.is_eof():
            return self._feed(data)
        self._size += len(data)
        if self._size > MAX_HEAD:
            raise _HeadRefused(code=431, message=f"request head over {MAX_HEAD} bytes")
        if self._deadline is None and data:
            self._deadline = self._loop.call_later(HEAD_SECONDS, self._expired)
        messages, upgraded, tail = self._feed(data)
        if messages:
            self._size = 0
            self.cancel()
            self._body = messages[-1][1]
        return messages, upgraded, tail

    def _feed(self, data: bytes) -> _Parsed:
        try:
            return self._parser.feed_data(data)
        except LineTooLong as exc:
            # the parser has no line yet: it was reading the request line
            if not self._parser._lines:
                raise _HeadRefused(code=414, message=f"request line over {MAX_LINE} bytes") from exc
            raise _HeadRefused(code=431, message=f"header line over {MAX_LINE} bytes") from exc
        except ValueError as exc:  # int() of a Content-Length of over 4300 digits
            raise _HeadRefused(code=413, message="a Content-Length of over 4300 digits") from exc

    @property
    def under_way(self) -> bool:
        return self._deadline is not None

    def cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def __getattr__(self, name: str) -> Any:  # message_consumed, feed_eof, ...
        return getattr(self._parser, name)


class _Connection(RequestHandler):
    """aiohttp's connection, with the bounded head, its refusals as one line, and its log
    lines in ours."""

    def __init__(self, manager: _Server, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=IDLE_SECONDS,
            access_log=None,  # type: ignore[arg-type]  # aiohttp's way to turn it off
            max_line_size=MAX_LINE,
            max_field_size=MAX_LINE,
            max_headers=MAX_HEADERS,
            lingering_time=REFUSED_LINGER,
            auto_decompress=False,  # a webhook's body is signed as sent
        )
        # the pure-Python parser: any method token reaches the routes (405 with Allow),
        # any HTTP/x.y the version check (505); the C one answers both 400
        parser = HttpRequestParserPy(
            self,
            loop,
            2**16,
            max_line_size=MAX_LINE,
            max_field_size=MAX_LINE,
            max_headers=MAX_HEADERS,
            payload_exception=RequestPayloadError,
            auto_decompress=False,
            max_msg_queue_size=MAX_MSG_QUEUE_SIZE,
        )
        self._head = _BoundedHead(parser, loop, self._head_expired)
        self._parser = self._head  # type: ignore[assignment]
        self._open: _Server | None = manager  # counted there until the connection is lost

    def _process_keepalive(self) -> None:
        """aiohttp's idle check, which would close a connection whose head is under way:
        the idle time ends with a request's first byte, the head's own time bounds it from
        there (after the answer, aiohttp checks again ``IDLE_SECONDS`` later)."""
        if self._head.under_way:
            self._keepalive_handle = None
            return
        super()._process_keepalive()

    def _head_expired(self) -> None:
        log.debug("http: a request head was not received within %g s", HEAD_SECONDS)
        self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._head.cancel()
        if self._open is not None:
            self._open.opened -= 1
            self._open = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request refused before it reached the routes (or a bug aiohttp caught): one
        line, the connection closed after it."""
        if isinstance(exc, _HeadRefused):
            status, message = exc.code, exc.message
        elif isinstance(exc, BadHttpMessage) and exc.message.startswith("Too many headers"):
            status, message = 431, f"over {MAX_HEADERS} headers"
        if status >= 500:
            log.error("http: serving %s", request.remote, exc_info=exc)
            message = INTERNAL_ERROR
        else:
            log.debug("http: refused (%s): %s", status, message)
        line = " ".join((message or HTTPStatus(status).phrase).splitlines())
        response = web.Response(status=status, body=(line + "\n").encode())
        response.headers["Content-Type"] = TEXT
        response.force_close()
        return response

    def log_debug(self, *args: Any, **kw: Any) -> None:
        log.debug(*args, **kw)  # a client gone: "Ignored premature client disconnection"

    def log_exception(self, *args: Any, **kw: Any) -> None:
        log.error(*args, **kw)


def connection_caps() -> tuple[int, int]:
    """(connections open, refused connections waiting) that the open-files limit leaves
    room for beside ``FD_RESERVE``: its soft limit (often 1,024 outside a container) is
    raised toward the hard one first, as servers do; below what the bounds need, fewer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_CONNECTIONS + MAX_REFUSED + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return MAX_CONNECTIONS, MAX_REFUSED
    spare = max(0, soft - FD_RESERVE)
    return max(1, spare * 3 // 4), spare // 4


class _Busy(asyncio.Protocol):
    """A connection over ``MAX_CONNECTIONS``: 503 at once, closed ``REFUSED_LINGER``
    later (closed at once, the request the client sends meanwhile would reset the
    connection, and the client would see the reset instead of the answer)."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._closing: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sink = cast(asyncio.Transport, transport)
        sink.write(_BUSY_ANSWER)
        sink.write_eof()  # our side ends with the answer: the client need not wait
        if self._server.refused >= self._server.max_refused:
            sink.close()
            return
        self._server.refused += 1
        self._closing = self._server.loop.call_later(REFUSED_LINGER, sink.close)

    def data_received(self, data: bytes) -> None:
        pass  # read off and dropped

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closing is not None:
            self._closing.cancel()
            self._server.refused -= 1


class _Server(web.Server):
    """The connections: one ``_Connection`` each, up to ``max_open`` (``connection_caps``)."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(handler, loop=loop)
        self.loop = loop
        self.opened = 0  # from here, not from connection_made: a burst is accepted first
        self.refused = 0
        self.max_open, self.max_refused = connection_caps()
        if self.max_open < MAX_CONNECTIONS:
            log.warning(
                "http: open files limited to %d: at most %d connections (raise ulimit -n)",
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                self.max_open,
            )

    def __call__(self) -> Any:
        if self.opened >= self.max_open:
            log.debug("http: a connection refused: %d open", self.opened)
            return _Busy(self)
        self.opened += 1
        return _Connection(self, self.loop)


class HttpServer:
    """Serves in a daemon thread (its event loop) from ``start()`` until ``stop()``."""

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
        self.registry = registry
        self.ready = ready
        self.web = web
        self.webhook = webhook
        self.authorize = authorize
        self._bodies = 0  # webhook bodies being read (on the loop only)
        try:  # bound here: a taken address is the caller's error, before anything starts
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._socket = socket.create_server((host, port), family=family, backlog=BACKLOG)
        except OSError as exc:
            raise HttpError(f"--http {address}: cannot listen: {exc.strerror or exc}") from exc
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="http-worker")
        self._reviewers = ThreadPoolExecutor(REVIEWERS, thread_name_prefix="http-auth")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._connections: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the real port when 0 was asked for)."""
        host, port = self._socket.getsockname()[:2]
        return (str(host), int(port))

    @property
    def open_connections(self) -> int:
        """Connections open now (those refused as too many aside)."""
        return self._connections.opened if self._connections is not None else 0

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> None:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="http", daemon=True)
        self._thread.start()
        started.wait(5)
        log.info("serving /healthz /readyz /metrics", extra={"url": self.url})

    def stop(self) -> None:
        if self._thread is not None:
            loop, stopping = self._loop, self._stopping
            if loop is not None and stopping is not None:
                loop.call_soon_threadsafe(stopping.set)
            self._thread.join(timeout=5)
            self._thread = None
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._reviewers.shutdown(wait=False, cancel_futures=True)
        self._socket.close()

    # --- the loop's thread -------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve(loop, started))
        finally:
            started.set()
            loop.close()

    async def _serve(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        self._loop, self._stopping = loop, asyncio.Event()
        self._connections = connections = _Server(self._handle, loop)
        server = await loop.create_server(connections, sock=self._socket, backlog=BACKLOG)
        started.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            await connections.shutdown(STOP_SECONDS)

    async def _work(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _review(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on a reviewer thread."""
        return await asyncio.get_running_loop().run_in_executor(self._reviewers, fn, *args)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every request passes here, before any route (the one place a check of who is
        asking belongs); its answer is written within ``SEND_SECONDS``."""
        try:
            response = await self._route(request)
        except ConnectionError as exc:  # the client went away while its request was read
            return _gone(request, exc)
        except Exception:
            log.exception("serving %s %s", request.method, request.raw_path[:200])
            response = _error(request, 500, INTERNAL_ERROR)
            response.force_close()
        try:
            async with asyncio.timeout(SEND_SECONDS):
                await response.prepare(request)
                await response.write_eof()
        except TimeoutError:
            return _gone(request, TimeoutError(f"the answer not read within {SEND_SECONDS:g} s"))
        except ConnectionError as exc:
            return _gone(request, exc)
        return response

    async def _route(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.version.major != 1:
            version = f"{request.version.major}.{request.version.minor}"
            return _reply(505, f"HTTP/{version} not supported: HTTP/1.1 or 1.0")
        if request.method in ("GET", "HEAD"):
            return await self._get(request)
        if request.method == "POST" and _is_webhook(request) and self.webhook is not None:
            return await self._post(request, self.webhook)
        if request.method == "POST" and _is_webhook(request):
            return _reply(404, "no webhook receiver: start with --webhook-secret-file")
        allow = self._allow(request)
        if request.method == "OPTIONS":
            response = web.Response(status=204)
            response.headers["Allow"] = allow
            return response
        response = _error(request, 405, f"method {request.method} not allowed here: {allow}")
        response.headers["Allow"] = allow
        return response

    def _allow(self, request: web.BaseRequest) -> str:
        if _is_webhook(request) and self.webhook is not None:
            return "POST, OPTIONS"
        return _READ_METHODS

    async def _get(self, request: web.BaseRequest) -> web.StreamResponse:
        path, query = _target(request)
        if _is_webhook(request) and self.webhook is not None:
            allow = self._allow(request)
            response = _error(request, 405, f"method {request.method} not allowed here: {allow}")
            response.headers["Allow"] = allow
            return response
        if path == "/healthz":
            return _answer(200, b"ok\n", TEXT)
        if path == "/readyz":
            try:
                answer = self.ready()
                ok, reason = answer if isinstance(answer, tuple) else (bool(answer), "")
            except Exception as exc:  # a broken probe is "not ready", never a 500 loop
                log.exception("the readiness check")
                ok, reason = False, f"readiness check failed: {exc}"
            body = (reason or ("ok" if ok else "not ready")) + "\n"
            return _answer(200 if ok else 503, body.encode(), TEXT)
        if path == "/metrics":
            exposition = await self._work(generate_latest, self.registry)
            return _answer(200, exposition, CONTENT_TYPE_LATEST)
        if self.authorize is not None:  # the probes and metrics above stay open
            decision = await self._review(self.authorize, list(request.headers.items()), path)
            if not decision.allowed:
                response = _error(request, decision.status, decision.message)
                for name, value in decision.headers:
                    response.headers[name] = value
                return response
        if self.web is None:
            return _error(request, 404, "not found")
        reply = await self._work(self.web, path, query)
        if reply is None:
            return _error(request, 404, "not found")
        code, payload, content_type = reply
        response = _answer(code, payload, content_type)
        # the web pages: always fresh, never sniffed, only their own script
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response

    async def _post(self, request: web.BaseRequest, receiver: hooks.Receiver) -> web.StreamResponse:
        if request.headers.get("Transfer-Encoding"):
            return _reply(411, "a webhook needs a Content-Length (no chunked body)")
        lengths = [v.strip() for v in request.headers.getall("Content-Length", [])]
        if not lengths:
            return _reply(411, "a webhook needs a Content-Length")
        if len(set(lengths)) > 1:
            return _reply(400, "conflicting Content-Length headers")
        text = lengths[0]
        if not (text.isascii() and text.isdigit()):
            return _reply(400, f"bad Content-Length {text[:20]!r}: expected digits")
        if len(text) > 15 or int(text) > receiver.max_body:
            shown = text if len(text) <= 15 else "over 10^15"
            return _reply(413, f"webhook body of {shown} bytes: at most {receiver.max_body}")
        if self._bodies >= MAX_WEBHOOK_BODIES:
            return _reply(503, "busy: other webhook bodies are being read; retry later")
        self._bodies += 1
        try:
            length = int(text)
            try:
                async with asyncio.timeout(BODY_SECONDS):
                    body = await request.content.readexactly(length)
            except TimeoutError:
                return _reply(408, f"webhook body not received within {BODY_SECONDS:g} s")
            except asyncio.IncompleteReadError as exc:
                return _reply(400, f"webhook body cut short: {len(exc.partial)} of {length} bytes")
        finally:
            self._bodies -= 1
        reply = await self._work(receiver.handle, dict(request.headers.items()), body)
        return _answer(reply.status, reply.body, TEXT)


def _gone(request: web.BaseRequest, exc: Exception) -> web.Response:
    """The connection of a client that went away or stopped reading, closed: a debug line
    (aiohttp then finds it closed and drops what it would still write)."""
    log.debug("http: the connection from %s ended: %s", request.remote, exc)
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)


def _target(request: web.BaseRequest) -> tuple[str, str]:
    """The request's path (as sent, its leading slashes one: ``//x`` is no other host's
    path) and its query."""
    path, _, query = request.raw_path.partition("?")
    return ("/" + path.lstrip("/") if path.startswith("//") else path), query


def _is_webhook(request: web.BaseRequest) -> bool:
    """The receiver's path, with a trailing slash too (as the pages' routes)."""
    return _target(request)[0].rstrip("/") == hooks.PATH


def _answer(status: int, body: bytes, content_type: str) -> web.Response:
    response = web.Response(status=status, body=body)
    response.headers["Content-Type"] = content_type
    return response


def _error(request: web.BaseRequest, status: int, message: str) -> web.Response:
    """One line: ``{"error": ...}`` under /api/v1, text elsewhere."""
    if _is_api(_target(request)[0]):
        return _answer(status, error_json(message), "application/json")
    line = " ".join(message.splitlines())
    return _answer(status, (line + "\n").encode(), TEXT)


def _reply(status: int, message: str) -> web.Response:
    """An answer before the request's body was read: the connection is closed after it,
    once what the client still sends is read off for ``REFUSED_LINGER`` (closed with unread
    bytes, the connection is reset, and the client may see the reset instead of the
    answer)."""
    response = _answer(status, (message + "\n").encode(), TEXT)
    response.force_close()
    return response
