"""A streamed body left mid-way (a watch the informer stops) closes its connection rather
than hand it back to the pool with unread bytes, which the next request would read."""

from __future__ import annotations

from collections.abc import Iterator

from reconciler.adapters.kube import _lines


class FakeResponse:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False
        self.released = False

    def stream(self, amt: int | None, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def test_a_stream_read_to_the_end_goes_back_to_the_pool() -> None:
    resp = FakeResponse([b'{"a": 1}\n{"b"', b": 2}\n"])
    assert list(_lines(resp, "x")) == ['{"a": 1}', '{"b": 2}']
    assert resp.released and not resp.closed


def test_a_stream_left_mid_way_is_closed_first() -> None:
    resp = FakeResponse([b"one\ntwo\n", b"three\n"])
    lines = _lines(resp, "x")
    assert next(lines) == "one"
    lines.close()  # the consumer stops early
    assert resp.closed and resp.released
