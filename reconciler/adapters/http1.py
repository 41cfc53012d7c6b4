"""HTTP/1.1 on a kept-alive connection of a urllib3 connection pool, read straight off the
socket: one request and its whole answer (``request``: ``adapters/kube.py``'s creates), or
a request whose answer's body is read as it comes, line by line (``stream``: its watches).

The pool is the kubernetes ``ApiClient``'s own: its connections are opened by urllib3 with
the client's TLS settings (CA, client certificate, hostname check) and go back to it, so
the watches and the other calls share them. What this leaves out is the per-request
Python of ``http.client`` and urllib3 (the status line and headers parsed through the
``email`` package, the response objects, the retry bookkeeping, the chunked reads a few
bytes at a time), about half of a create's CPU in the reconciler and most of a watch
event's read (docs/benchmarks.md, "The watch threads and the creates, third pass" and
"The watch threads, fourth pass"). Everything that fails is an ``OSError``, as the
socket's own failures are."""

from __future__ import annotations

import select
import time
import zlib
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

CONNECT_TRIES = 4  # as urllib3's default retries: a failed connect is tried 3 more times
MAX_HEAD = 64 * 1024  # the status line and the headers
MAX_BODY = 64 * 1024 * 1024  # an answer's body (the apiserver's objects are at most ~3 MiB)
# A line of a streamed body (a watch event: one object, at most ~3 MiB as JSON): a stream
# whose line grows past this is an error, not a buffer that grows without end.
MAX_LINE = 16 * 1024 * 1024
MAX_CHUNK_LINE = 4096  # a chunk's size line, extensions included
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
    data = _head(method, target, host, headers, len(body)) + body
    conn, reader, head = _exchange(pool, data, connect_timeout, read_timeout)
    keep = False
    try:
        answer, keep = _read_body(reader, head)
        return answer
    finally:
        _release(pool, conn, keep)


def stream(
    pool: Any,
    method: str,
    target: str,
    host: str,
    headers: dict[str, str],
    *,
    connect_timeout: float,
    read_timeout: float,
    max_line: int | None = None,
) -> Stream:
    """Send ``method target`` (no body) as ``request`` does, and return once the answer's
    head is read: its body is read as it comes (``Stream.lines``: lines of at most
    ``max_line`` bytes, by default ``MAX_LINE``), each read waiting at most
    ``read_timeout`` seconds."""
    data = _head(method, target, host, headers, 0)
    conn, reader, head = _exchange(pool, data, connect_timeout, read_timeout)
    try:
        body = BodyLines.of(head, max_line or MAX_LINE)
    except BadAnswer:
        _release(pool, conn, False)
        raise
    return Stream(pool, conn, reader, head, body)


def _exchange(
    pool: Any, data: bytes, connect_timeout: float, read_timeout: float
) -> tuple[Any, _Reader, _Head]:
    """Send ``data`` (a request) on a connection of ``pool``; the connection, its reader
    and the answer's head. On a failure the connection is closed and handed back."""
    for attempt in (1, 2):
        conn = pool._get_conn()
        reused = conn.sock is not None
        try:
            if conn.sock is None:
                _connect(conn, connect_timeout)
            sock = conn.sock
            if sock.gettimeout() != read_timeout:  # a system call: not for every request
                sock.settimeout(read_timeout)
            try:
                sock.sendall(data)
            except OSError as exc:  # the server closed the kept-alive connection
                raise Unanswered(f"sending: {exc}") from exc
            reader = _Reader(sock)
            return conn, reader, _read_head(reader)
        except Unanswered:
            _release(pool, conn, False)
            if attempt == 1 and reused:
                continue
            raise
        except BaseException:
            _release(pool, conn, False)
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _release(pool: Any, conn: Any, keep: bool) -> None:
    """Hand ``conn`` back to ``pool``, closed first unless it can carry another request."""
    if not keep:
        conn.close()
    pool._put_conn(conn)


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


@dataclass(frozen=True, slots=True)
class _Head:
    """An answer's status line and headers (names in lower case)."""

    status: int
    reason: str
    headers: dict[str, str]
    keep: bool  # the connection may carry another request after this answer


def _read_head(reader: _Reader) -> _Head:
    size = 0  # of every head read, interim answers' included: a server can send no end
    while True:
        status_line = reader.line(MAX_HEAD)
        size += len(status_line)
        parts = status_line.split(b" ", 2)
        if (
            len(parts) < 2
            or not parts[0].startswith(b"HTTP/1.")
            or len(parts[1]) != 3
            or not parts[1].isdigit()
        ):
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
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
        if size > MAX_HEAD:
            raise BadAnswer("the answer's interim heads are too long")
    version = parts[0]
    reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep = "close" not in tokens and (version != b"HTTP/1.0" or "keep-alive" in tokens)
    return _Head(status, reason, headers, keep)


def _read_body(reader: _Reader, head: _Head) -> tuple[Answer, bool]:
    """The whole answer, and whether the connection can carry another request."""
    status, headers, keep = head.status, head.headers, head.keep
    if status in (204, 304):
        data = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        data = _chunked(reader)
    elif "content-length" in headers:
        length = _content_length(headers)
        if length > MAX_BODY:
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
    data = _decoded(data, headers.get("content-encoding", "identity").lower())
    return Answer(status, head.reason, headers, data), keep


def _decoded(data: bytes, encoding: str) -> bytes:
    """``data`` decoded as ``BodyLines`` decodes it (one gzip member or zlib stream, and
    nothing after it), inflated to at most ``MAX_BODY`` bytes: a few KiB that would
    inflate to gigabytes are refused, not inflated."""
    if encoding == "identity":
        return data
    if encoding == "gzip":
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflate = zlib.decompressobj()
    else:
        raise BadAnswer(f"an answer encoded as {encoding}")
    try:
        out = inflate.decompress(data, MAX_BODY + 1)
    except zlib.error as exc:
        raise BadAnswer(f"an answer that does not decode as {encoding}: {exc}") from exc
    if len(out) > MAX_BODY:
        raise BadAnswer(f"an answer that inflates to longer than {MAX_BODY} bytes")
    if not inflate.eof or inflate.unused_data:
        raise BadAnswer(f"an answer that does not decode as {encoding}: not one whole stream")
    return out


def _content_length(headers: dict[str, str]) -> int:
    value = headers["content-length"]
    if not (value.isascii() and value.isdigit()):  # not "+1", "1_0", " 1" nor "1, 1"
        raise BadAnswer(f"a Content-Length that is not a number: {value[:40]!r}")
    return int(value)


def _chunk_size(line: bytes) -> int:
    """A chunk's size from its size line (extensions dropped): hex digits only, as many as
    a size below 2**60 takes (``int`` alone would take "0x1", "+1" and "1_0")."""
    digits = line.split(b";", 1)[0].strip(b" \t")
    if not digits or len(digits) > 15 or digits.strip(_HEX):
        raise BadAnswer(f"not a chunk size: {line[:40]!r}")
    return int(digits, 16)


def _chunked(reader: _Reader) -> bytes:
    out = bytearray()
    while True:
        line = reader.line(MAX_CHUNK_LINE)
        if len(line) > MAX_CHUNK_LINE:
            raise BadAnswer("a chunk's size line too long")
        size = _chunk_size(line)
        if len(out) + size > MAX_BODY:
            raise BadAnswer("an answer too long")
        if size == 0:
            trailers = 0
            while line := reader.line(MAX_HEAD):  # trailers, to the empty line
                trailers += len(line) + 2
                if trailers > MAX_HEAD:
                    raise BadAnswer("an answer's trailers too long")
            return bytes(out)
        out += reader.exactly(size)
        if reader.exactly(2) != b"\r\n":
            raise BadAnswer("a chunk not followed by CRLF")


class Stream:
    """An answer whose head is read and whose body comes as it is read: whole
    (``read``: an error answer) or line by line (``lines``: a watch). Its connection goes
    back to the pool once the body is read to its end or left (closed first, unless it
    can carry another request)."""

    def __init__(self, pool: Any, conn: Any, reader: _Reader, head: _Head, body: BodyLines) -> None:
        self.status = head.status
        self.reason = head.reason
        self.headers = head.headers
        self._pool = pool
        self._conn: Any = conn
        self._reader = reader
        self._head = head
        self._body = body

    def read(self) -> Answer:
        """The whole answer (its body at most ``MAX_BODY`` bytes)."""
        keep = False
        try:
            answer, keep = _read_body(self._reader, self._head)
            return answer
        finally:
            self._done(keep)

    def lines(self, gather: float = 0.0) -> Generator[bytes, None, None]:
        """The body's lines, without their newlines, as they come (``BodyLines``): one read
        of the socket of up to 64 KiB (a TLS record) at a time. With ``gather``, once
        nothing more is there to read and no line is cut, wait that many seconds before
        the next read, so that lines that come in quick succession are read together, with
        one wake-up of the thread, not one each (the rest of a cut line is read at once).
        Leaving the iterator before the body's end closes the connection."""
        body = self._body
        keep = False
        try:
            first = bytes(self._reader.buf)
            self._reader.buf.clear()
            yield from body.feed(first)
            sock = self._conn.sock
            recv = sock.recv
            pending = getattr(sock, "pending", None)  # TLS: decrypted, not yet read
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            while not body.done:
                data = recv(_READ)
                yield from body.feed(data) if data else body.end()
                if (
                    gather
                    and not body.midline
                    and not (pending and pending())
                    and not poller.poll(0)
                ):  # all read, at the end of a line: let the next lines gather
                    time.sleep(gather)
            keep = self._head.keep and not body.extra
        finally:
            self._done(keep)

    def close(self) -> None:
        """Drop the connection (a body left unread)."""
        self._done(False)

    def _done(self, keep: bool) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            _release(self._pool, conn, keep)


# The states of a chunked body's reader.
_SIZE, _DATA, _CRLF, _TRAILER, _END = range(5)
_HEX = b"0123456789abcdefABCDEF"


class BodyLines:
    """An HTTP/1.1 body fed as it comes off the socket, in blocks cut anywhere, and given
    back as lines (without the newline): de-chunked (extensions and trailers read and
    dropped), decompressed when encoded (gzip, deflate), split at each newline. A body
    of a fixed length, chunked, or ending with the connection. A line that grows past
    ``max_line`` bytes is an error (``BadAnswer``), so memory stays bounded on a stream
    that never ends a line; so is a body cut short. ``done`` once the body's end is read
    (then the last line, if it has no newline, has been given too); ``extra`` when bytes
    came after it."""

    def __init__(
        self,
        *,
        chunked: bool,
        length: int | None = None,
        encoding: str = "identity",
        max_line: int = MAX_LINE,
    ) -> None:
        self.max_line = max_line
        self.done = False
        self.extra = False
        self._chunked = chunked
        self._length = length  # left to read of a fixed-length body; None: not one
        self._state = _SIZE
        self._left = 0  # left to read of the current chunk
        self._raw = b""  # a chunk's size line, its CRLF or a trailer, cut by a read
        self._trailers = 0  # bytes of trailers so far
        self._held: list[bytes] = []  # the line being read, in pieces
        self._held_size = 0
        if encoding == "gzip":
            self._inflate: Any = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._inflate = zlib.decompressobj()
        elif encoding == "identity":
            self._inflate = None
        else:
            raise BadAnswer(f"an answer encoded as {encoding}")
        if length == 0:
            self.done = True

    @classmethod
    def of(cls, head: _Head, max_line: int = MAX_LINE) -> BodyLines:
        """The reader of the body ``head`` announces."""
        headers = head.headers
        encoding = headers.get("content-encoding", "identity").lower()
        if head.status in (204, 304):
            return cls(chunked=False, length=0, encoding=encoding, max_line=max_line)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return cls(chunked=True, encoding=encoding, max_line=max_line)
        if "content-length" in headers:
            length = _content_length(headers)
            return cls(chunked=False, length=length, encoding=encoding, max_line=max_line)
        return cls(chunked=False, encoding=encoding, max_line=max_line)

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that ``data``, the next bytes off the connection, completes."""
        if self.done:
            self.extra = self.extra or bool(data)
            return []
        if self._chunked:
            pieces = self._dechunk(data)
        elif self._length is not None:
            take = data[: self._length]
            self._length -= len(take)
            self.extra = len(take) < len(data)
            self.done = not self._length
            pieces = [take]
        else:
            pieces = [data]
        body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        lines = self._split(body) if self._inflate is None else self._inflated(body)
        if self.done:
            lines += self._finish()
        return lines

    @property
    def midline(self) -> bool:
        """Part of a line is read, not its end."""
        return bool(self._held)

    def end(self) -> list[bytes]:
        """The connection closed: the last line of a body that ends with it, or
        ``BadAnswer`` for a body cut short."""
        if self._chunked or self._length is not None:
            raise BadAnswer("the connection closed in the middle of the answer")
        self.done = True
        return self._finish()

    def _dechunk(self, data: bytes) -> list[bytes]:
        """The body bytes in ``data``, without the chunks' framing."""
        raw = self._raw + data if self._raw else data
        pieces: list[bytes] = []
        pos, size = 0, len(raw)
        state, left = self._state, self._left
        while pos < size:
            if state == _DATA:
                end = pos + left
                if end > size:
                    pieces.append(raw[pos:])
                    left -= size - pos
                    pos = size
                    break
                pieces.append(raw[pos:end])
                pos, state = end, _CRLF
            elif state == _CRLF:
                if size - pos < 2:
                    break
                if raw[pos : pos + 2] != b"\r\n":
                    raise BadAnswer("a chunk not followed by CRLF")
                pos, state = pos + 2, _SIZE
            elif state == _END:
                self.extra = True
                break
            else:  # a size line, or a trailer
                end = raw.find(b"\r\n", pos)
                limit = MAX_CHUNK_LINE if state == _SIZE else MAX_HEAD - self._trailers
                if end < 0 or end - pos > limit:
                    if size - pos > limit:
                        raise BadAnswer("a chunk's size line or a trailer too long")
                    break
                line = raw[pos:end]
                pos = end + 2
                if state == _TRAILER:
                    self._trailers += len(line) + 2
                    if not line:
                        state = _END
                        self.done = True
                    continue
                left = _chunk_size(line)
                state = _DATA if left else _TRAILER
        self._raw = raw[pos:] if state != _END else b""
        self._state, self._left = state, left
        return pieces

    def _split(self, body: bytes) -> list[bytes]:
        if b"\n" not in body:
            if body:
                self._hold(body)
            return []
        lines = body.split(b"\n")
        if self._held:
            self._held.append(lines[0])
            lines[0] = b"".join(self._held)
            self._held, self._held_size = [], 0
        tail = lines.pop()
        if tail:
            self._hold(tail)
        return lines

    def _hold(self, piece: bytes) -> None:
        self._held.append(piece)
        self._held_size += len(piece)
        if self._held_size > self.max_line:
            raise BadAnswer(f"a line of the answer longer than {self.max_line} bytes")

    def _inflated(self, body: bytes) -> list[bytes]:
        """``body`` decompressed, at most ``max_line`` bytes at a time, split in lines."""
        inflate = self._inflate
        lines: list[bytes] = []
        try:
            while True:
                if inflate.eof:
                    if body or inflate.unused_data:
                        raise BadAnswer("bytes after the end of an encoded answer")
                    return lines
                piece = inflate.decompress(body, self.max_line)
                lines += self._split(piece)
                body = inflate.unconsumed_tail
                if not body and len(piece) < self.max_line and not inflate.unused_data:
                    return lines
        except zlib.error as exc:
            raise BadAnswer(f"an answer that does not decode: {exc}") from exc

    def _finish(self) -> list[bytes]:
        """At the body's end: the last line, if it has no newline."""
        if self._inflate is not None and not self._inflate.eof:
            raise BadAnswer("an encoded answer that ends before its encoding does")
        if not self._held:
            return []
        last = b"".join(self._held)
        self._held, self._held_size = [], 0
        return [last]
