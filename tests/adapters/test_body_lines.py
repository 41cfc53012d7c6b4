"""The line reader of a streamed HTTP/1.1 body (``adapters/http1.py`` ``BodyLines``: a
watch's events): fed the bytes off the socket cut anywhere, it gives the body's lines,
whatever the chunk sizes, chunk extensions, trailers and content encoding; a line that
never ends is an error once it passes its limit, not a buffer that grows; a body cut
short (the connection closed mid-chunk, or before the last chunk) is an error."""

from __future__ import annotations

import gzip
import itertools
import zlib
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.adapters.http1 import BadAnswer, BodyLines

# Lines of a body: any bytes but the newline (JSON text never holds one).
LINES = st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ")), max_size=12)
EXTENSIONS = st.sampled_from([b"", b";ext=1", b' ; name="v;x"', b";a;b=2"])
TRAILERS = st.lists(st.sampled_from([b"X-Trailer: t", b"Checksum: 0"]), max_size=2)


def chunked(body: bytes, sizes: list[int], extensions: list[bytes], trailers: list[bytes]) -> bytes:
    """``body`` in chunks of ``sizes`` (cycled; the rest as one chunk), each size in hex
    of either case, with ``extensions``, then the last chunk and ``trailers``."""
    wire = b""
    pos, i = 0, 0
    while pos < len(body):
        size = sizes[i % len(sizes)] if sizes else len(body)
        piece = body[pos : pos + max(1, size)]
        digits = f"{len(piece):x}" if i % 2 else f"{len(piece):X}"
        ext = extensions[i % len(extensions)] if extensions else b""
        wire += digits.encode() + ext + b"\r\n" + piece + b"\r\n"
        pos += len(piece)
        i += 1
    return wire + b"0\r\n" + b"".join(t + b"\r\n" for t in trailers) + b"\r\n"


def cut(wire: bytes, points: list[int]) -> list[bytes]:
    """``wire`` cut at ``points`` (any offsets), as reads off a socket give it."""
    edges = sorted({p % (len(wire) + 1) for p in points} | {0, len(wire)})
    return [wire[a:b] for a, b in itertools.pairwise(edges)]


def read(reader: BodyLines, pieces: list[bytes], closed: bool = False) -> list[bytes]:
    lines = []
    for piece in pieces:
        lines += reader.feed(piece)
    if closed:
        lines += reader.end()
    return lines


def body_of(lines: list[bytes], last: bytes) -> bytes:
    return b"".join(line + b"\n" for line in lines) + last


@settings(max_examples=300, deadline=None)
@given(
    lines=LINES,
    last=st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")),
    sizes=st.lists(st.integers(1, 400), max_size=5),
    extensions=st.lists(EXTENSIONS, max_size=3),
    trailers=TRAILERS,
    points=st.lists(st.integers(0, 10_000), max_size=30),
)
def test_a_chunked_body_cut_anywhere_gives_its_lines(
    lines: list[bytes],
    last: bytes,
    sizes: list[int],
    extensions: list[bytes],
    trailers: list[bytes],
    points: list[int],
) -> None:
    wire = chunked(body_of(lines, last), sizes, extensions, trailers)
    reader = BodyLines(chunked=True)
    assert read(reader, cut(wire, points)) == lines + ([last] if last else [])
    assert reader.done and not reader.extra


@settings(max_examples=100, deadline=None)
@given(
    lines=LINES,
    encoding=st.sampled_from(["gzip", "deflate"]),
    sizes=st.lists(st.integers(1, 200), max_size=4),
    points=st.lists(st.integers(0, 5_000), max_size=20),
)
def test_an_encoded_chunked_body_gives_its_lines(
    lines: list[bytes], encoding: str, sizes: list[int], points: list[int]
) -> None:
    body = body_of(lines, b"")
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    wire = chunked(packed, sizes, [], [])
    reader = BodyLines(chunked=True, encoding=encoding)
    assert read(reader, cut(wire, points)) == lines
    assert reader.done


@settings(max_examples=100, deadline=None)
@given(lines=LINES, points=st.lists(st.integers(0, 5_000), max_size=20))
def test_a_body_of_a_fixed_length_or_to_the_close_gives_its_lines(
    lines: list[bytes], points: list[int]
) -> None:
    body = body_of(lines, b"end")
    fixed = BodyLines(chunked=False, length=len(body))
    assert read(fixed, cut(body + b"HTTP/1.1", points)) == [*lines, b"end"]
    assert fixed.done and fixed.extra  # bytes after the body: the connection is not reused
    to_close = BodyLines(chunked=False)
    assert read(to_close, cut(body, points), closed=True) == [*lines, b"end"]


def test_a_line_that_never_ends_is_an_error_at_its_limit() -> None:
    reader = BodyLines(chunked=True, max_line=100_000)
    fed = 0

    def endless() -> Iterator[bytes]:
        while True:
            yield b"4000\r\n" + b"x" * 0x4000 + b"\r\n"

    with pytest.raises(BadAnswer, match="longer than 100000 bytes"):
        for block in endless():
            reader.feed(block)
            fed += len(block)
    assert fed <= 100_000  # it stopped at the limit, not at the end of memory
    # a line of the limit is fine
    reader = BodyLines(chunked=True, max_line=100)
    assert reader.feed(chunked(b"y" * 100 + b"\n", [7], [], [])) == [b"y" * 100]


def test_a_line_that_never_ends_through_gzip_is_an_error_at_its_limit() -> None:
    # 10 MB of one line compresses to a few KiB: the limit holds on what is decompressed
    packed = gzip.compress(b"x" * 10_000_000)
    reader = BodyLines(chunked=False, length=len(packed), encoding="gzip", max_line=100_000)
    with pytest.raises(BadAnswer, match="longer than 100000 bytes"):
        reader.feed(packed)


@pytest.mark.parametrize(
    "wire",
    [
        b'a\r\n{"type":',  # closed in the middle of a chunk
        b"3\r\nab\n",  # ...at the end of its data, before its CRLF
        b"3\r\nab\n\r\n",  # ...between chunks, before the last one
        b"3\r\nab\n\r\n0\r\n",  # ...in the trailers
        b"",  # ...before any chunk
    ],
)
def test_a_connection_closed_before_the_last_chunk_is_an_error(wire: bytes) -> None:
    reader = BodyLines(chunked=True)
    with pytest.raises(BadAnswer, match="closed in the middle"):
        read(reader, cut(wire, [3]), closed=True)
    fixed = BodyLines(chunked=False, length=10)
    with pytest.raises(BadAnswer, match="closed in the middle"):
        read(fixed, [b"12345"], closed=True)


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"zz\r\n", "not a chunk size"),
        (b"-3\r\nabc\r\n", "not a chunk size"),
        (b"0x3\r\nabc\r\n", "not a chunk size"),
        (b"1_0\r\n", "not a chunk size"),
        (b"\r\n", "not a chunk size"),
        (b"ffffffffffffffff\r\n", "not a chunk size"),
        (b"3\r\nabcX\r\n", "not followed by CRLF"),
        (b"3" + b";" * 5000 + b"\r\n", "too long"),
        (b"3" + b";" * 5000, "too long"),
        (b"0\r\n" + b"X-A: b\r\n" * 10_000, "too long"),
    ],
)
def test_what_is_not_chunked_is_an_error(wire: bytes, message: str) -> None:
    with pytest.raises(BadAnswer, match=message):
        BodyLines(chunked=True).feed(wire)


def test_bytes_after_the_last_chunk_are_marked_extra() -> None:
    reader = BodyLines(chunked=True)
    assert reader.feed(b"2\r\na\n\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n") == [b"a"]
    assert reader.done and reader.extra
    assert reader.feed(b"more") == []


def test_an_encoded_body_cut_short_or_followed_by_more_is_an_error() -> None:
    packed = gzip.compress(b"a\nb\n")
    with pytest.raises(BadAnswer, match="ends before its encoding"):
        BodyLines(chunked=False, length=len(packed) - 4, encoding="gzip").feed(packed[:-4])
    with pytest.raises(BadAnswer, match="after the end"):
        BodyLines(chunked=False, encoding="gzip").feed(packed + b"junk")
    with pytest.raises(BadAnswer, match="does not decode"):
        BodyLines(chunked=False, encoding="gzip").feed(b"not gzip at all")
    with pytest.raises(BadAnswer, match="encoded as br"):
        BodyLines(chunked=True, encoding="br")
