"""The maintained client of the bench's A/B: ``http1.request`` and ``http1.stream`` done by
urllib3 (its ``http.client`` parser and response object) on the same connection pool.

``bench/_dispatcher.py --client urllib3`` installs these in place of ``adapters/http1.py``'s,
so the reconciler's creates and watches go through urllib3 and everything else stays as it
is. It is urllib3 at its cheapest: the pool kept, as ``Kube._direct`` keeps it (no
``PoolManager`` lookup, about 60 µs a request), the answer read whole (a create) or its
chunks as they come (a watch: ``stream(None)``, no wait for a full buffer), split into
lines as ``adapters/kube.py``'s urllib3 path does for a proxy. Failures are urllib3's
(``HTTPError``) or ``OSError``; the reconciler takes both.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import urllib3

from reconciler.adapters import http1


def _headers(resp: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.headers.items()}


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
) -> http1.Answer:
    """``http1.request`` by urllib3: the whole answer, the connection back to the pool."""
    resp = pool.urlopen(
        method,
        target,
        body=body,
        headers=headers,
        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
        preload_content=False,
        assert_same_host=False,
    )
    try:
        data = resp.read()
    finally:
        resp.release_conn()
    return http1.Answer(resp.status, resp.reason or "", _headers(resp), data)


class Stream:
    """``http1.Stream`` by urllib3: an answer whose body is read as it comes."""

    def __init__(self, resp: Any, max_line: int) -> None:
        self._resp = resp
        self.status = resp.status
        self.reason = resp.reason or ""
        self.headers = _headers(resp)
        self._max_line = max_line

    def read(self) -> http1.Answer:
        try:
            data = self._resp.read()
        finally:
            self._resp.release_conn()
        return http1.Answer(self.status, self.reason, self.headers, data)

    def lines(self, gather: float = 0.0) -> Generator[bytes, None, None]:
        """Each chunk as it arrives, split at newlines (``gather`` is http1's own: urllib3
        hands over each chunk as one read)."""
        resp = self._resp
        pending = b""
        done = False
        try:
            for chunk in resp.stream(None, decode_content=True):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                yield from complete
                if len(pending) > self._max_line:
                    raise http1.BadAnswer(f"a line longer than {self._max_line} bytes")
            done = True
            if pending:
                yield pending
        finally:
            if not done:
                resp.close()
            resp.release_conn()

    def close(self) -> None:
        self._resp.close()
        self._resp.release_conn()


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
    """``http1.stream`` by urllib3: returns once the answer's head is read."""
    resp = pool.urlopen(
        method,
        target,
        headers=headers,
        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
        preload_content=False,
        assert_same_host=False,
    )
    return Stream(resp, max_line or http1.MAX_LINE)


def install() -> None:
    """Every create and watch of ``adapters/kube.py`` from here on goes through urllib3."""
    http1.request = request
    http1.stream = stream  # type: ignore[assignment]
