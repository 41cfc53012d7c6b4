"""One HTTP/1.1 request on a kept-alive connection of a urllib3 connection pool, its answer
read straight off the socket (``adapters/kube.py``'s creates).

The pool is the kubernetes ``ApiClient``'s own: its connections are opened by urllib3 with
the client's TLS settings (CA, client certificate, hostname check) and go back to it, so
the watches and the other calls share them. What this leaves out is the per-request
Python of ``http.client`` and urllib3 (the status line and headers parsed through the
``email`` package, the response objects, the retry bookkeeping), about half of a create's
CPU in the reconciler (docs/benchmarks.md, "The watch threads and the creates, third
pass"). Everything that fails is an ``OSError``, as the socket's own failures are."""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from typing import Any

CONNECT_TRIES = 4  # as urllib3's default retries: a failed connect is tried 3 more times
MAX_HEAD = 64 * 1024  # the status line and the headers
MAX_BODY = 64 * 1024 * 1024  # an answer's body (the apiserver's objects are at most ~3 MiB)
_READ = 65536


class BadAnswer(OSError):
    """The server's answer is not HTTP/1.1 as this reads it (too long, malformed)."""


class Unanswered(OSError):
    """The connection closed before any byte of an answer came back."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer as the kubernetes client's exceptions read one (``ApiException``)."""

    status: int
    reason: str
    headers: dict[str, str]  # names in lower case
    data: bytes


def request(
    pool: Any,
    method: str,
    target: str,
    host: str,
    headers: dict[str, str],
    body: bytes,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> Answer:
    """Send ``method target`` with ``headers`` and ``body`` on a connection of ``pool`` (a
    urllib3 ``HTTPConnectionPool``), read the whole answer, and hand the connection back
    (closed first unless it can be used again). As urllib3 does by default, a connect
    (TCP and TLS) that fails is tried again up to three times, and the pool replaces a
    connection it finds dropped before the request is sent. Unlike urllib3, a reused
    connection the server closes after that, before any byte of an answer, is replaced
    once and the request sent again (urllib3 raises): for a create this is safe, since a
    create the server had stored answers 409 and is adopted. Any other failure is
    raised."""
    head = _head(method, target, host, headers, len(body))
    for attempt in (1, 2):
        conn = pool._get_conn()
        reused = conn.sock is not None
        keep = False
        try:
            if conn.sock is None:
                _connect(conn, connect_timeout)
            sock = conn.sock
            sock.settimeout(read_timeout)
            try:
                sock.sendall(head + body)
            except OSError as exc:  # the server closed the kept-alive connection
                raise Unanswered(f"sending: {exc}") from exc
            answer, keep = _read_answer(sock)
            return answer
        except Unanswered:
            if attempt == 1 and reused:
                continue
            raise
        finally:
            if not keep:
                conn.close()
            pool._put_conn(conn)
    raise AssertionError("unreachable")  # pragma: no cover


def _connect(conn: Any, timeout: float) -> None:
    for tries_left in range(CONNECT_TRIES - 1, -1, -1):
        conn.timeout = timeout
        try:
            conn.connect()
            return
        except Exception:  # urllib3's NewConnectionError, SSLError; OSError
            conn.close()
            if not tries_left:
                raise


def _head(method: str, target: str, host: str, headers: dict[str, str], length: int) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {length}"]
    skip = {"host", "content-length", "transfer-encoding", "connection"}
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in skip]
    if any("\r" in line or "\n" in line for line in lines):
        raise ValueError("a header or the target holds a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Reader:
    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.got = False  # any byte of the answer

    def fill(self) -> None:
        chunk = self.sock.recv(_READ)
        if not chunk:
            if not self.got:
                raise Unanswered("the connection closed before an answer")
            raise BadAnswer("the connection closed in the middle of the answer")
        self.got = True
        self.buf += chunk

    def line(self, limit: int) -> bytes:
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                out = bytes(self.buf[:end])
                del self.buf[: end + 2]
                return out
            if len(self.buf) > limit:
                raise BadAnswer("a line of the answer is too long")
            self.fill()

    def exactly(self, size: int) -> bytes:
        while len(self.buf) < size:
            self.fill()
        out = bytes(self.buf[:size])
        del self.buf[:size]
        return out


def _read_answer(sock: Any) -> tuple[Answer, bool]:
    """The answer, and whether the connection can carry another request."""
    reader = _Reader(sock)
    while True:
        status_line = reader.line(MAX_HEAD)
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        size = 0
        while True:
            line = reader.line(MAX_HEAD)
            if not line:
                break
            size += len(line)
            if size > MAX_HEAD:
                raise BadAnswer("the answer's headers are too long")
            name, sep, value = line.partition(b":")
            if not sep:
                raise BadAnswer(f"not a header: {line[:80]!r}")
            key = name.strip().decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        if not 100 <= status < 200:
            break  # an interim answer (100 Continue) is followed by the real one
    version = parts[0]
    reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep = "close" not in tokens and (version != b"HTTP/1.0" or "keep-alive" in tokens)
    if status in (204, 304):
        data = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        data = _chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise BadAnswer("a Content-Length that is not a number") from None
        if not 0 <= length <= MAX_BODY:
            raise BadAnswer(f"an answer of {length} bytes")
        data = reader.exactly(length)
    else:  # the body ends with the connection
        keep = False
        while True:
            try:
                reader.fill()
            except BadAnswer:  # closed: the end of the body
                break
            if len(reader.buf) > MAX_BODY:
                raise BadAnswer("an answer too long")
        data = bytes(reader.buf)
        reader.buf.clear()
    if reader.buf:  # more than one answer: never reuse such a connection
        keep = False
    encoding = headers.get("content-encoding", "identity").lower()
    try:
        if encoding == "gzip":
            data = gzip.decompress(data)
        elif encoding == "deflate":
            data = zlib.decompress(data)
        elif encoding != "identity":
            raise BadAnswer(f"an answer encoded as {encoding}")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BadAnswer(f"an answer that does not decode as {encoding}: {exc}") from exc
    return Answer(status, reason, headers, data), keep


def _chunked(reader: _Reader) -> bytes:
    out = bytearray()
    while True:
        line = reader.line(1024)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadAnswer(f"not a chunk size: {line[:40]!r}") from None
        if size < 0 or len(out) + size > MAX_BODY:
            raise BadAnswer("an answer too long")
        if size == 0:
            while reader.line(MAX_HEAD):  # trailers, to the empty line
                pass
            return bytes(out)
        out += reader.exactly(size)
        if reader.exactly(2) != b"\r\n":
            raise BadAnswer("a chunk not followed by CRLF")
