"""``adapters/http1.py``'s parsers under hypothesis: the answer a create reads whole
(``request``) and the one a watch reads as it comes (``stream``), fed through a scripted
socket that hands over the bytes cut anywhere (every byte alone, or at random points).

- A well-formed answer (a fixed length, chunked with extensions and trailers, or ending
  with the connection; identity, gzip or deflate; after interim 1xx answers) is read to
  the same bytes by both, however it is cut.
- The same answer closed at any byte before its end is an ``OSError``, unless the body
  ends with the connection (then it is what came).
- Any bytes at all (a well-formed answer with bytes flipped, dropped or added): both
  either read the same body or fail with an ``OSError``, never another exception.
- A server that never stops sending (an endless status line, header, interim answers,
  chunk size line, trailers, body, watch line, or a compressed body that inflates
  without end) is an ``OSError`` after a bounded number of bytes.

Every example runs under an alarm: a parser that loops without reading fails it (``Hung``)
rather than hanging the test.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import signal
import socket
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reconciler.adapters import http1

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
PER_EXAMPLE = 5.0  # seconds: far more than any example needs on a loaded machine


class Hung(BaseException):
    """An example ran past ``PER_EXAMPLE`` (not an ``OSError``, so never taken as one)."""


class Unbounded(BaseException):
    """The parser read past its bound from an endless source."""


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    def hung(_sig: int, _frame: Any) -> None:
        raise Hung(f"no answer after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_POLLABLE = socket.socketpair()  # a real descriptor for ``Stream.lines`` to register


class ScriptedSocket:
    """A connection whose reads give ``pieces`` one at a time, then the end (b""), or
    with ``endless`` that block repeated forever; it counts what it gave."""

    def __init__(
        self,
        pieces: list[bytes],
        endless: bytes = b"",
        budget: int = 0,
    ) -> None:
        self.pieces = [p for p in reversed(pieces) if p]  # b"" would be the end
        self.endless = endless
        self.budget = budget
        self.given = 0
        self.sent = b""

    def recv(self, size: int) -> bytes:
        if self.pieces:
            data = self.pieces.pop()
        elif self.endless:
            data = self.endless
        else:
            return b""
        data = data[:size]
        self.given += len(data)
        if self.budget and self.given > self.budget:
            raise Unbounded(f"read {self.given} bytes of an endless answer")
        return data

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def gettimeout(self) -> float:
        return 1.0

    def settimeout(self, _timeout: float) -> None:
        pass

    def fileno(self) -> int:
        return _POLLABLE[0].fileno()


@dataclass
class Conn:
    sock: ScriptedSocket | None
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class Pool:
    """A connection pool of one scripted connection, already open."""

    sock: ScriptedSocket
    given: list[Conn] = field(default_factory=list)
    back: list[Conn] = field(default_factory=list)

    def _get_conn(self) -> Conn:
        if self.given:  # a second connection: a request sent again
            return Conn(ScriptedSocket([]))
        self.given.append(Conn(self.sock))
        return self.given[-1]

    def _put_conn(self, conn: Conn) -> None:
        self.back.append(conn)


def read_whole(sock: ScriptedSocket) -> bytes:
    """``http1.request``'s answer's body (the create's path)."""
    pool = Pool(sock)
    answer = http1.request(
        pool, "POST", "/x", "h", {}, b"{}", connect_timeout=1.0, read_timeout=1.0
    )
    return answer.data


def read_lines(sock: ScriptedSocket, max_line: int | None = None) -> list[bytes]:
    """``http1.stream``'s body, line by line (the watch's path)."""
    pool = Pool(sock)
    stream = http1.stream(
        pool, "GET", "/w", "h", {}, connect_timeout=1.0, read_timeout=1.0, max_line=max_line
    )
    try:
        return list(stream.lines())
    finally:
        stream.close()


def lines_of(body: bytes) -> list[bytes]:
    parts = body.split(b"\n")
    return parts[:-1] if parts[-1] == b"" else parts


def cut(wire: bytes, points: list[int]) -> list[bytes]:
    """``wire`` cut at ``points`` (each taken modulo its length); ``[-1]``: every byte."""
    if points == [-1]:
        return [wire[i : i + 1] for i in range(len(wire))]
    at = sorted({p % (len(wire) + 1) for p in points} | {0, len(wire)})
    return [wire[a:b] for a, b in itertools.pairwise(at) if b > a]


# --- well-formed answers ------------------------------------------------------------------


@dataclass(frozen=True)
class Wire:
    data: bytes  # the answer on the wire
    body: bytes  # its body, decoded
    framing: str  # length | chunked | close


EXTENSIONS = st.sampled_from([b"", b";a=b", b";x", b' ; q="v;w"', b";" + b"e" * 200])
TRAILERS = st.lists(st.sampled_from([b"X-T: 1", b"Checksum: abc", b"X-Long: " + b"v" * 300]))


@st.composite
def answers(draw: st.DrawFn) -> Wire:
    body = draw(st.binary(max_size=600) | st.sampled_from([b"a\nbb\n", b"\n\n", b"{}\n" * 40]))
    encoding = draw(st.sampled_from(["identity", "gzip", "deflate"]))
    encoded = {
        "identity": body,
        "gzip": gzip.compress(body),
        "deflate": zlib.compress(body),
    }[encoding]
    status = draw(st.sampled_from([b"200 OK", b"201 Created", b"409 Conflict", b"500 x y"]))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    head = b""
    for _ in range(draw(st.integers(0, 2))):
        head += b"HTTP/1.1 100 Continue\r\n\r\n"
    head += b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
    if encoding != "identity":
        head += b"Content-Encoding: " + encoding.encode() + b"\r\n"
    if framing == "length":
        head += b"Content-Length: %d\r\n\r\n" % len(encoded)
        return Wire(head + encoded, body, framing)
    if framing == "close":
        return Wire(head + b"Connection: close\r\n\r\n" + encoded, body, framing)
    wire = head + b"Transfer-Encoding: chunked\r\n\r\n"
    pos = 0
    while pos < len(encoded):
        size = draw(st.integers(1, 80))
        piece = encoded[pos : pos + size]
        pos += size
        digits = b"%x" % len(piece)
        if draw(st.booleans()):
            digits = digits.upper()
        wire += b"0" * draw(st.integers(0, 2)) + digits + draw(EXTENSIONS) + b"\r\n"
        wire += piece + b"\r\n"
    wire += b"0" + draw(EXTENSIONS) + b"\r\n"
    for trailer in draw(TRAILERS):
        wire += trailer + b"\r\n"
    return Wire(wire + b"\r\n", body, framing)


CUTS = st.just([-1]) | st.lists(st.integers(0, 1 << 16), max_size=12)


@FUZZ
@given(answers(), CUTS)
def test_a_well_formed_answer_is_read_however_it_is_cut(wire: Wire, points: list[int]) -> None:
    with within(PER_EXAMPLE):
        assert read_whole(ScriptedSocket(cut(wire.data, points))) == wire.body
        assert read_lines(ScriptedSocket(cut(wire.data, points))) == lines_of(wire.body)


@FUZZ
@given(answers(), st.integers(0, 1 << 16), CUTS)
def test_an_answer_closed_before_its_end_is_an_oserror(
    wire: Wire, at: int, points: list[int]
) -> None:
    short = wire.data[: at % len(wire.data)]
    with within(PER_EXAMPLE):
        for read in (read_whole, read_lines):
            try:
                got = read(ScriptedSocket(cut(short, points)))
            except OSError:
                continue
            # only a body that ends with the connection may end anywhere: then it is
            # what came (an encoded one may not decode: an OSError, above)
            assert wire.framing == "close", (read.__name__, short)
            body = got if read is read_whole else b"\n".join(got)
            assert wire.body.startswith(body.rstrip(b"\n")) or body == b""


def mutated(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, at, more in edits:
        pos = at % (len(out) + 1)
        if kind == 0:  # flip a byte
            if pos < len(out):
                out[pos] ^= 1 + more[0] % 255 if more else 0x20
        elif kind == 1:  # drop bytes
            del out[pos : pos + 1 + len(more)]
        else:  # add bytes
            out[pos:pos] = more
    return bytes(out)


EDITS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 1 << 16),
        st.binary(max_size=6)
        | st.sampled_from([b"\r\n", b"\r\n\r\n", b";", b"0x1", b"-1", b"1_0", b"+5", b" "]),
    ),
    min_size=1,
    max_size=4,
)


@FUZZ
@given(answers(), EDITS, CUTS)
@example(
    Wire(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n", b"", ""),
    [],
    [],
)
@example(
    Wire(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n" + b"a" * 16, b"", ""),
    [],
    [],
)
@example(Wire(b"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nab", b"", ""), [], [])
@example(Wire(b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n" + b"a" * 10, b"", ""), [], [])
@example(Wire(b"HTTP/1.1 " + b"2" * 5000 + b" OK\r\n\r\n", b"", ""), [], [])
@example(
    Wire(
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 46\r\n\r\n"
        + gzip.compress(b"a")
        + gzip.compress(b"b"),
        b"",
        "",
    ),
    [],
    [],
)
def test_any_bytes_are_read_alike_by_both_or_are_an_oserror(
    wire: Wire, edits: list[tuple[int, int, bytes]], points: list[int]
) -> None:
    data = mutated(wire.data, edits)
    outcomes: list[bytes | None] = []
    with within(PER_EXAMPLE):
        for read in (read_whole, read_lines):
            try:
                got = read(ScriptedSocket(cut(data, points)))
            except OSError:
                outcomes.append(None)
                continue
            outcomes.append(got if read is read_whole else b"\n".join(got))
    whole, lines = outcomes
    if whole is not None and lines is not None:
        assert lines == (whole[:-1] if whole.endswith(b"\n") else whole), data
    else:
        assert whole is None and lines is None, (data, outcomes)


# --- endless answers ------------------------------------------------------------------


OK = b"HTTP/1.1 200 OK\r\n"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n"
SLACK = 2 * 65536  # one read past a bound is allowed


def _bomb(size: int) -> bytes:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return squeeze.compress(b"\0" * size) + squeeze.flush()


ENDLESS = {
    "status line": (b"", b"HTTP/1.1 200 " + b"x" * 1000, http1.MAX_HEAD),
    "header": (OK + b"X: ", b"y" * 1000, http1.MAX_HEAD),
    "headers": (OK, b"X: y\r\n", http1.MAX_HEAD),
    "interim answers": (b"", b"HTTP/1.1 100 Continue\r\n\r\n", http1.MAX_HEAD),
    "chunk size line": (CHUNKED, b"0" * 1000, http1.MAX_CHUNK_LINE),
    "chunk extension": (CHUNKED + b"5;", b"e" * 1000, http1.MAX_CHUNK_LINE),
    "trailers": (CHUNKED + b"0\r\n", b"X-T: 1\r\n", http1.MAX_HEAD),
    "body": (OK + b"\r\n", b"z" * 1000, http1.MAX_BODY),
}


@pytest.mark.parametrize("name", sorted(ENDLESS))
def test_an_endless_answer_is_an_oserror_within_its_bound(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1, "MAX_BODY", 1 << 20)  # the endless body: 1 MiB, not 64
    start, block, bound = ENDLESS[name]
    bound = min(bound, http1.MAX_BODY)
    for read in (read_whole, read_lines):
        if read is read_lines and name == "body":
            continue  # a watch's body has no end: its lines are bounded (below)
        sock = ScriptedSocket([start], endless=block, budget=bound + SLACK)
        with within(PER_EXAMPLE), pytest.raises(OSError):
            read(sock)


def test_an_endless_watch_line_is_an_oserror_within_max_line() -> None:
    sock = ScriptedSocket([CHUNKED], endless=b"3e8\r\n" + b"w" * 1000 + b"\r\n", budget=SLACK)
    with within(PER_EXAMPLE), pytest.raises(OSError):
        read_lines(sock, max_line=4096)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_that_inflates_past_the_bound_is_an_oserror(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few KiB that inflate to 32 MiB, against a bound of 1 MiB: refused, not inflated."""
    monkeypatch.setattr(http1, "MAX_BODY", 1 << 20)
    bomb = _bomb(32 << 20) if encoding == "gzip" else zlib.compress(b"\0" * (32 << 20), 9)
    head = OK + b"Content-Encoding: %s\r\nContent-Length: %d\r\n\r\n" % (
        encoding.encode(),
        len(bomb),
    )
    with within(PER_EXAMPLE), pytest.raises(http1.BadAnswer, match="longer than"):
        read_whole(ScriptedSocket([head + bomb]))
    # a watch reads it line by line: one line past max_line is refused
    with within(PER_EXAMPLE), pytest.raises(http1.BadAnswer):
        read_lines(ScriptedSocket([head + bomb]), max_line=1 << 20)
