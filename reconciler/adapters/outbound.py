"""Requests the reconciler sends outside its clusters: notification webhooks and commit
statuses (``runtime/notify.py``). One POST, its answer's status, nothing more: redirects
are not followed (a receiver must not send the body, or its token, somewhere else), and
the answer's body is read only up to ``MAX_ANSWER`` bytes. A connection that reaches one
of the addresses to ``avoid`` (a cluster's API server, however the URL spells its host:
``localhost``, ``127.1``, another name of it) is closed before anything is sent."""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

MAX_ANSWER = 64 * 1024
USER_AGENT = "dispatch-reconciler"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx answer is the result


class Refused(OSError):
    """The connection reached an address it may not send to."""


Address = tuple[str, int]  # (IP, port)


def _address(ip: str, port: int) -> Address:
    """``ip`` in one spelling: an IPv4-mapped IPv6 address as IPv4, no zone id."""
    parsed = ipaddress.ip_address(ip.partition("%")[0])
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return str(parsed), port


def addresses(urls: Iterable[str]) -> frozenset[Address]:
    """Every (IP, port) the hosts of ``urls`` resolve to; a host that does not resolve
    adds none."""
    out: set[Address] = set()
    for url in urls:
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            found = socket.getaddrinfo(parts.hostname or "", port, proto=socket.IPPROTO_TCP)
        except (OSError, ValueError, UnicodeError):
            continue
        out.update(_address(str(info[4][0]), port) for info in found)
    return frozenset(out)


def _check_peer(sock: socket.socket | None, avoid: Collection[Address]) -> None:
    if sock is None or not avoid:
        return
    peer = sock.getpeername()
    if _address(str(peer[0]), int(peer[1])) in avoid:
        sock.close()
        raise Refused(f"{peer[0]}:{peer[1]} is a cluster's API server")


class _HTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, avoid: Collection[Address], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._avoid = avoid

    def connect(self) -> None:
        super().connect()
        _check_peer(self.sock, self._avoid)


class _HTTPS(http.client.HTTPSConnection):
    def __init__(self, *args: Any, avoid: Collection[Address], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._avoid = avoid

    def connect(self) -> None:
        super().connect()  # the TLS handshake sends nothing of the request
        _check_peer(self.sock, self._avoid)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, avoid: Collection[Address]) -> None:
        super().__init__()
        self._avoid = avoid

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTP, avoid=self._avoid), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, avoid: Collection[Address]) -> None:
        super().__init__()
        self._avoid = avoid

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPS, avoid=self._avoid), req)


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout: float,
    avoid: Collection[Address] = frozenset(),
) -> int:
    """POST ``body`` to ``url``; the answer's status code. ``timeout`` bounds the connect
    and each read. An ``OSError`` when no answer came (refused, timed out, reset);
    ``Refused`` when the connection reached an address in ``avoid``."""
    opener = urllib.request.build_opener(_NoRedirect, _HTTPHandler(avoid), _HTTPSHandler(avoid))
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"User-Agent": USER_AGENT, **headers},
    )
    try:
        with opener.open(request, timeout=timeout) as answer:
            answer.read(MAX_ANSWER)
            return int(answer.status)
    except urllib.error.HTTPError as exc:  # an answer, 4xx or 5xx (or an unfollowed 3xx)
        with exc:
            exc.read(MAX_ANSWER)
        return int(exc.code)
    except urllib.error.URLError as exc:
        reason = exc.reason  # a ``Refused`` too
        raise reason if isinstance(reason, OSError) else OSError(str(reason)) from exc
