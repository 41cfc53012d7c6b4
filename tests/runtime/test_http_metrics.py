"""/healthz, /readyz and /metrics over real HTTP; metrics parsed with prometheus_client."""

from __future__ import annotations

import logging
import pathlib
import select
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support.builders import NOW, World

from reconciler.runtime import http
from reconciler.runtime.http import HttpError, HttpServer, parse_address
from reconciler.runtime.metrics import Metrics


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get_logged(server: HttpServer, path: str, caplog: pytest.LogCaptureFixture) -> tuple[int, str]:
    """One GET of ``path`` on ``server`` (started and stopped here), its errors logged."""
    server.start()
    try:
        with caplog.at_level("ERROR", logger="reconciler.http"):
            status, _, body = _get(server.url + path)
    finally:
        server.stop()
    return status, body


class Readiness:
    def __init__(self) -> None:
        self.state: bool | tuple[bool, str] = (False, "no cycle has run yet")

    def __call__(self) -> bool | tuple[bool, str]:
        return self.state


@pytest.fixture
def served() -> Iterator[tuple[HttpServer, Metrics, Readiness]]:
    metrics, ready = Metrics(), Readiness()
    server = HttpServer("127.0.0.1:0", metrics.registry, ready)
    server.start()
    yield server, metrics, ready
    server.stop()


def _world() -> World:
    w = (
        World()
        .cluster("local")
        .queue("team-a", quota={"nvidia.com/gpu": 2})
        .queue("batch", concurrency=3)
    )
    w.ops("vision/train-{}", 5, queue="team-a", gpu=1)
    w.ops("etl/job-{}", 4, queue="batch")
    return w


def test_a_queue_with_flavors_has_quota_series_per_flavor() -> None:
    w = World().cluster("local").cohort("pool", "2h").queue("team-a", cohort="pool")
    w.flavored(
        "team-a", ("h100", {"gpu": 1}), ("a100", {"gpu": 1}), borrowing_limit={"a100": {"gpu": 2}}
    )
    w.queue("team-b", cohort="pool").flavored("team-b", ("h100", {"gpu": 4}), ("a100", {"gpu": 4}))
    w.queue("plain", quota={"nvidia.com/gpu": 2})
    w.op("vision/big", queue="team-a", gpu=3).timeout("1h")
    metrics = Metrics()
    metrics.observe_plan(w.plan())
    value = metrics.registry.get_sample_value

    def of(queue: str, flavor: str) -> dict[str, str]:
        return {"queue": queue, "resource": "nvidia.com/gpu", "flavor": flavor}

    assert value("reconciler_queue_quota_used", of("team-a", "a100")) == 3
    assert value("reconciler_queue_quota_limit", of("team-a", "a100")) == 1
    assert value("reconciler_queue_quota_borrowed", of("team-a", "a100")) == 2
    assert value("reconciler_queue_quota_used", of("team-a", "h100")) == 0
    assert value("reconciler_queue_quota_lent", of("team-b", "a100")) == 2
    assert value("reconciler_queue_quota_used", of("team-a", "")) is None  # no sum series
    assert value("reconciler_queue_quota_limit", of("plain", "")) == 2
    # a flavor the queue no longer has is removed, not left at its last value
    w.flavored("team-a", ("h100", {"gpu": 1}))
    metrics.observe_plan(w.plan())
    assert value("reconciler_queue_quota_limit", of("team-a", "a100")) is None
    assert value("reconciler_queue_quota_limit", of("team-a", "h100")) == 1


def test_healthz_and_readyz_follow_the_callable(
    served: tuple[HttpServer, Metrics, Readiness],
) -> None:
    server, _, ready = served
    assert _get(server.url + "/healthz")[0] == 200
    status, _, body = _get(server.url + "/readyz")
    assert (status, body) == (503, "no cycle has run yet\n")
    ready.state = True
    assert _get(server.url + "/readyz")[:1] == (200,)
    ready.state = (False, "config commit abc123 is invalid")
    assert _get(server.url + "/readyz")[0::2] == (503, "config commit abc123 is invalid\n")
    assert _get(server.url + "/nope")[0] == 404


def test_a_raising_readiness_check_is_not_ready(caplog: pytest.LogCaptureFixture) -> None:
    """Not ready (a probe answers 503, never a 500 loop), and the bug is logged with its
    traceback: it was only in the probe's answer."""
    metrics = Metrics()

    def broken() -> bool:
        raise RuntimeError("boom")

    status, body = _get_logged(
        HttpServer("127.0.0.1:0", metrics.registry, broken), "/readyz", caplog
    )
    assert status == 503 and "boom" in body
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)


def test_metrics_expose_every_series(served: tuple[HttpServer, Metrics, Readiness]) -> None:
    server, metrics, _ = served
    metrics.observe_plan(_world().plan())
    metrics.count_dispatched("team-a", "local", 2)
    metrics.count_dispatched("batch", "local", 3)
    metrics.git_sync_errors.inc()
    metrics.cycle_duration.observe(0.3)
    metrics.set_config_commit("c0ffee")
    metrics.set_config_commit("beef01")
    metrics.set_leader(True)

    status, content_type, text = _get(server.url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    s = _samples(text)
    a = (("cluster", "local"), ("queue", "team-a"))
    b = (("cluster", "local"), ("queue", "batch"))
    gpu = (("flavor", ""), ("queue", "team-a"), ("resource", "nvidia.com/gpu"))
    assert s[("reconciler_queue_active_operations", a)] == 2  # with this plan's dispatches
    assert s[("reconciler_queue_pending_operations", a)] == 3
    assert s[("reconciler_queue_pending_operations", b)] == 1
    assert s[("reconciler_queue_quota_used", gpu)] == 2  # with this plan's dispatches
    assert s[("reconciler_queue_quota_limit", gpu)] == 2
    assert s[("reconciler_dispatched_total", a)] == 2
    assert s[("reconciler_dispatched_total", b)] == 3
    assert s[("reconciler_git_sync_errors_total", ())] == 1
    assert s[("reconciler_cycle_duration_seconds_count", ())] == 1
    assert s[("reconciler_cycle_duration_seconds_sum", ())] == pytest.approx(0.3)
    assert s[("reconciler_cycle_duration_seconds_bucket", (("le", "0.5"),))] == 1
    assert s[("reconciler_cycle_duration_seconds_bucket", (("le", "0.25"),))] == 0
    commits = {k[1] for k in s if k[0] == "reconciler_config_commit_info"}
    assert commits == {(("commit", "beef01"),)}  # only the commit in force
    assert s[("reconciler_leader", ())] == 1


def test_observe_plan_drops_queues_that_left_the_plan() -> None:
    metrics = Metrics()
    metrics.observe_plan(_world().plan())
    w = World().cluster("local").queue("batch", concurrency=3)
    w.ops("etl/job-{}", 1, queue="batch")
    metrics.observe_plan(w.plan())
    from prometheus_client import generate_latest

    s = _samples(generate_latest(metrics.registry).decode())
    queues = {dict(k[1]).get("queue") for k in s if k[0].startswith("reconciler_queue_")}
    assert queues == {"batch"}


def test_budget_gauges_follow_the_plan() -> None:
    """Per budgeted queue: its limit, what the ledger says it spent in the window and what
    its active runs (with this plan's dispatches) committed; gone when the budget is."""
    from datetime import timedelta
    from decimal import Decimal

    from prometheus_client import generate_latest
    from support.builders import NOW

    from reconciler.core.plan.ledger import LedgerEntry
    from reconciler.core.types import BudgetPeriod, BudgetSpec

    budget = BudgetSpec(Decimal(3), BudgetPeriod.DAY, "nvidia.com/gpu-hours")
    w = World().cluster("local").queue("gpu", budget=budget)
    for i in range(3):
        w.op(f"p/o{i}", queue="gpu", gpu=1).timeout(3600)
    done = LedgerEntry(
        operation="p/old",
        generation=1,
        workload="p-old-g1",
        queue="gpu",
        cluster="local",
        phase="Succeeded",
        requests={"nvidia.com/gpu": Decimal(1)},
        start=NOW - timedelta(hours=1, minutes=30),
        end=NOW - timedelta(hours=1),
        cost=Decimal(0),
    )
    metrics = Metrics()
    metrics.observe_plan(w.plan(ledger=[done]))
    s = _samples(generate_latest(metrics.registry).decode())
    key = (("queue", "gpu"), ("unit", "nvidia.com/gpu-hours"))
    assert s[("reconciler_queue_budget_limit", key)] == 3
    assert s[("reconciler_queue_budget_spent", key)] == 0.5
    assert s[("reconciler_queue_budget_committed", key)] == 2  # two of three dispatched
    metrics.observe_plan(World().cluster("local").queue("gpu").plan())
    s = _samples(generate_latest(metrics.registry).decode())
    assert not [k for k in s if k[0].startswith("reconciler_queue_budget")]


def test_address_parsing_and_bind_errors() -> None:
    assert parse_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_address(":9090") == ("127.0.0.1", 9090)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("8080", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_address(bad)
    first = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True)
    try:
        with pytest.raises(HttpError, match="cannot listen"):
            HttpServer(f"127.0.0.1:{first.address[1]}", Metrics().registry, lambda: True)
    finally:
        first.stop()


def test_cluster_up_and_errors_follow_each_cycle() -> None:
    from prometheus_client import generate_latest

    metrics = Metrics()
    metrics.observe_clusters([("local", True), ("remote", False)])
    metrics.observe_clusters([("local", True), ("remote", False)])
    s = _samples(generate_latest(metrics.registry).decode())
    assert s[("reconciler_cluster_up", (("cluster", "local"),))] == 1
    assert s[("reconciler_cluster_up", (("cluster", "remote"),))] == 0
    assert s[("reconciler_cluster_errors_total", (("cluster", "remote"),))] == 2
    metrics.observe_clusters([("remote", True)])  # back: up again, the count stays
    s = _samples(generate_latest(metrics.registry).decode())
    assert s[("reconciler_cluster_up", (("cluster", "remote"),))] == 1
    assert s[("reconciler_cluster_errors_total", (("cluster", "remote"),))] == 2


# --- hostile clients ----------------------------------------------------------------------


def _raw(server: HttpServer, request: bytes, wait: float = 5.0, source: str = "") -> bytes:
    """Send ``request`` byte for byte (from the address ``source``, when given); the whole
    answer (until the server closes)."""
    with socket.create_connection(server.address, wait, (source, 0) if source else None) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def _status_headers_body(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body


def test_connections_are_bounded_and_released_on_disconnect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread per connection, without bound, was a thread and a body buffer (up to 5 MiB
    for a webhook) per client: past ``MAX_CONNECTIONS`` a client is answered 503 at once."""
    monkeypatch.setattr(http, "MAX_CONNECTIONS", 4)
    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True)
    server.start()
    held = []
    try:
        for _ in range(4):  # each holds a slot: a request line, never the blank line
            sock = socket.create_connection(server.address, timeout=5)
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            held.append(sock)
        status, headers, body = _status_headers_body(_raw(server, b"GET /healthz HTTP/1.0\r\n\r\n"))
        assert status == 503 and headers["retry-after"] == "1"
        assert body.endswith(b"\n") and len(body.splitlines()) == 1 and b"busy" in body
        for sock in held:
            sock.close()
        held.clear()
        for _ in range(100):  # the slots come back as the handlers see the disconnects
            if _get(server.url + "/healthz")[0] == 200:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the slots were not released on disconnect")
    finally:
        for sock in held:
            sock.close()
        server.stop()


def _raise_file_limit(needed: int) -> None:
    """The soft limit on open files up to ``needed`` (at most the hard limit)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        top = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft == resource.RLIM_INFINITY or soft >= needed, f"open files limited to {soft}"


def _timed_get(url: str) -> tuple[int, float]:
    t0 = time.monotonic()
    status = _get(url)[0]
    return status, time.monotonic() - t0


def test_idle_and_slow_connections_do_not_starve_requests() -> None:
    """With 64 connections at most, 16 per address, 16 slow browsers behind one proxy (one
    address for all) locked everyone out, and 400 idle connections with 50 half-sent
    requests made GET / answer 503. With 1,000 idle connections and 100 half-sent requests
    open, all from one address, GET / and GET /healthz answer in under 1 s."""
    _raise_file_limit(2 * 1100 + 256)  # our sockets and the server's, in one process

    def web(path: str, query: str) -> tuple[int, bytes, str] | None:
        return (200, b"<h1>queues</h1>\n", "text/html; charset=utf-8") if path == "/" else None

    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=web)
    server.start()
    held: list[socket.socket] = []
    try:
        for i in range(1100):  # a bounded loop: 1,000 idle, then 100 half-sent
            sock = socket.create_connection(server.address, timeout=5)
            if i >= 1000:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            held.append(sock)
        for _ in range(200):  # until the server has accepted them all
            if server.open_connections >= 1100:
                break
            time.sleep(0.02)
        assert server.open_connections >= 1100
        for path in ("/", "/healthz", "/", "/healthz"):
            status, took = _timed_get(server.url + path)
            assert status == 200 and took < 1.0, (path, status, took)
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_a_slow_page_holds_neither_the_loop_nor_healthz() -> None:
    """The pages are computed on worker threads: with every worker busy on a slow view,
    /healthz and /readyz still answer at once, and the pages waiting their turn are
    answered once a worker is free."""
    release = threading.Event()

    def web(path: str, query: str) -> tuple[int, bytes, str]:
        release.wait(10)
        return 200, b"page\n", "text/plain"

    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=web)
    server.start()
    pages: list[int] = []
    readers = [
        threading.Thread(target=lambda: pages.append(_get(server.url + "/")[0]))
        for _ in range(http.WORKERS + 2)
    ]
    try:
        for reader in readers:
            reader.start()
        time.sleep(0.3)  # every worker is in web()
        for path in ("/healthz", "/readyz"):
            status, took = _timed_get(server.url + path)
            assert status == 200 and took < 1.0, (path, took)
        assert pages == []
        release.set()
        for reader in readers:
            reader.join(10)
        assert pages == [200] * (http.WORKERS + 2)
    finally:
        release.set()
        server.stop()


def test_an_idle_connection_is_closed(
    served: tuple[HttpServer, Metrics, Readiness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that sends no request, new or after an answer on a kept-alive
    connection, is closed after ``IDLE_SECONDS``; while it asks, it is kept."""
    monkeypatch.setattr(http, "IDLE_SECONDS", 0.5)
    server, _, _ = served
    with socket.create_connection(server.address, timeout=5) as new:
        t0 = time.monotonic()
        assert new.recv(1) == b""  # closed, without an answer
        assert 0.4 < time.monotonic() - t0 < 3
    with socket.create_connection(server.address, timeout=5) as kept:
        for _ in range(3):  # each request within the idle time: the same connection
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"ok\n"):
                answer += kept.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            time.sleep(0.25)
        t0 = time.monotonic()
        assert kept.recv(1) == b""
        assert time.monotonic() - t0 < 3


def test_a_request_begun_before_the_idle_time_is_up_gets_its_head_time(
    served: tuple[HttpServer, Metrics, Readiness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle time ends with a request's first byte: a head begun just before it is up
    has ``HEAD_SECONDS`` to arrive, and is answered."""
    monkeypatch.setattr(http, "IDLE_SECONDS", 0.5)
    monkeypatch.setattr(http, "HEAD_SECONDS", 2.0)
    server, _, _ = served
    with socket.create_connection(server.address, timeout=5) as sock:
        time.sleep(0.3)
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(0.6)  # past the idle time, within the head's
        sock.sendall(b"Host: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok\n"):
            chunk = sock.recv(65536)
            assert chunk, f"closed after {answer!r}"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_an_answer_the_client_stops_reading_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that never reads a large answer held its connection (and, with threads, a
    thread) for good: the answer is dropped after ``SEND_SECONDS``."""
    monkeypatch.setattr(http, "SEND_SECONDS", 0.5)

    def web(path: str, query: str) -> tuple[int, bytes, str]:
        return 200, b"x" * (64 << 20), "text/plain"  # far over the sockets' buffers

    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=web)
    server.start()
    try:
        with socket.create_connection(server.address, timeout=5) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(1024).startswith(b"HTTP/1.1 200 ")  # the answer is under way
            assert server.open_connections == 1
            for _ in range(200):
                if server.open_connections == 0:
                    break
                time.sleep(0.05)
            assert server.open_connections == 0, "the connection was still open after 10 s"
        assert _get(server.url + "/healthz")[0] == 200
    finally:
        server.stop()


def test_a_request_that_trickles_in_is_dropped_at_its_deadline(
    served: tuple[HttpServer, Metrics, Readiness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slowloris: a byte of header every 0.1 s kept a connection (and its thread) forever, as
    the socket timeout counts per read. A request's line and headers must arrive within
    ``HEAD_SECONDS`` of their first byte."""
    monkeypatch.setattr(http, "HEAD_SECONDS", 0.5)
    server, _, _ = served
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        closed = False
        for _ in range(50):  # 5 s of one header byte every 0.1 s
            try:
                sock.sendall(b"X")
            except OSError:
                closed = True
                break
            ready, _, _ = select.select([sock], [], [], 0.1)
            if ready:  # an answer, or the end: either way the server gave up on it
                closed = True
                break
        assert closed, "the connection was still open after 5 s"


def test_a_client_that_goes_away_mid_answer_is_no_traceback(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """socketserver printed the ConnectionResetError's traceback on stderr (bypassing the
    log format); a client gone is a debug line, not an error."""
    answered = threading.Event()
    client_gone = threading.Event()

    def web(path: str, query: str) -> tuple[int, bytes, str]:
        client_gone.wait(5)
        answered.set()
        return 200, b"x" * 100_000, "text/plain"

    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=web)
    server.start()
    try:
        with caplog.at_level("DEBUG", logger="reconciler.http"):
            sock = socket.create_connection(server.address, timeout=5)
            sock.sendall(b"GET /page HTTP/1.0\r\n\r\n")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset: the answer's writes fail
            client_gone.set()
            assert answered.wait(5)
            for _ in range(100):
                if any("connection" in r.getMessage() for r in caplog.records):
                    break
                time.sleep(0.05)
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("connection" in r.getMessage() for r in caplog.records)


def test_a_bug_while_serving_metrics_is_a_logged_500(caplog: pytest.LogCaptureFixture) -> None:
    """Any exception of ours is a 500 with a generic body and the traceback in the log, not a
    connection closed without an answer."""

    class Broken:
        def collect(self) -> Iterator[Any]:
            raise RuntimeError("collector bug")

    registry = CollectorRegistry()
    registry.register(Broken())  # type: ignore[arg-type]
    status, body = _get_logged(
        HttpServer("127.0.0.1:0", registry, lambda: True), "/metrics", caplog
    )
    assert (status, body) == (500, "internal error; see the reconciler's log\n")
    assert "collector bug" not in body
    assert any(r.exc_info and "collector bug" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.parametrize(
    ("request_line", "status", "allow"),
    [
        (b"PUT /healthz HTTP/1.0", 405, "GET, HEAD, OPTIONS"),
        (b"DELETE /metrics HTTP/1.0", 405, "GET, HEAD, OPTIONS"),
        (b"BREW /healthz HTTP/1.0", 405, "GET, HEAD, OPTIONS"),
        (b"POST /healthz HTTP/1.0", 405, "GET, HEAD, OPTIONS"),
        (b"OPTIONS /healthz HTTP/1.0", 204, "GET, HEAD, OPTIONS"),
    ],
)
def test_other_methods_are_405_with_allow(
    served: tuple[HttpServer, Metrics, Readiness], request_line: bytes, status: int, allow: str
) -> None:
    server, _, _ = served
    answer = _raw(server, request_line + b"\r\nContent-Length: 0\r\n\r\n")
    got, headers, body = _status_headers_body(answer)
    assert (got, headers["allow"]) == (status, allow), answer
    if status == 405:
        assert headers["content-type"] == "text/plain; charset=utf-8"
        assert body.endswith(b"\n") and len(body.splitlines()) == 1
    else:
        assert body == b""


def test_head_is_get_without_the_body(served: tuple[HttpServer, Metrics, Readiness]) -> None:
    server, _, _ = served
    got, headers, body = _status_headers_body(_raw(server, b"HEAD /metrics HTTP/1.0\r\n\r\n"))
    full = _get(server.url + "/metrics")[2].encode()
    assert got == 200 and body == b""
    assert abs(int(headers["content-length"]) - len(full)) < 200  # a scrape's own series moved


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.0\r\n\r\n", 414),
        (b"GET / HTTP/1.0\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431),
        (b"GET / HTTP/7.0\r\n\r\n", 505),
        # each line within the stdlib's 64 KiB, 100 of them were 6.4 MB a request (64
        # connections held 470 MB, then 1 GB as they were parsed): at most MAX_HEAD in all
        (b"GET /healthz HTTP/1.0\r\n" + b"X-Pad: " + b"a" * 60_000 + b"\r\n" * 3 + b"\r\n", 200),
        (b"GET /healthz HTTP/1.0\r\n" + (b"X-Pad: " + b"a" * 60_000 + b"\r\n") * 3 + b"\r\n", 431),
    ],
)
def test_malformed_requests_get_one_line(
    served: tuple[HttpServer, Metrics, Readiness], sent: bytes, status: int
) -> None:
    """The stdlib's own refusals were an HTML page; every refusal is one line of text."""
    server, _, _ = served
    got, headers, body = _status_headers_body(_raw(server, sent))
    assert got == status
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body.endswith(b"\n") and len(body.splitlines()) == 1 and b"<" not in body
    if len(sent) > http.MAX_HEAD:
        assert body == f"request head over {http.MAX_HEAD} bytes\n".encode()


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_bad_http_address_is_a_usage_error_not_a_traceback(
    command: str, tmp_path: pathlib.Path
) -> None:
    """``run --http foo`` raised parse_address's ValueError out of the command."""
    from click.testing import CliRunner

    from reconciler.cli.main import cli

    extra = ["--watch"] if command == "run" else []
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:  # the command configures logging for the process: put it back for the next tests
        result = CliRunner().invoke(
            cli, [command, "--repo", str(tmp_path), *extra, "--http", "foo"]
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert result.exit_code == 2, result.output
    assert "error: --http 'foo': expected HOST:PORT" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_gauges_count_what_the_report_says_is_held() -> None:
    """A failed create holds nothing in the gauges either: they are set from the cycle's
    report, as its status and pages are."""
    from decimal import Decimal

    from reconciler.core.decision.cycle import ClusterListing, InFlight, Memory, decide
    from reconciler.core.observation.observe import WorkloadState
    from reconciler.core.reporting.report import Failure, Outcome, report
    from reconciler.core.reporting.status import StatusReason
    from reconciler.core.types import Phase

    w = World().queue("q", quota={"nvidia.com/gpu": 4})
    w.op("p/a", gpu=2)
    w.op("p/b", gpu=2)
    compiled = w.repo()
    decision = decide(compiled, {"local": ClusterListing()}, Memory(), NOW)
    created = WorkloadState(
        "p/a", 1, "local", "p", "p-a-g1", "u", Phase.DISPATCHED, queue="q",
        requests={"nvidia.com/gpu": Decimal(2)},
    )  # fmt: skip
    outcome = Outcome(
        created=(InFlight(created, "1"),),
        failed={"p/b": Failure(StatusReason.DISPATCH_FAILED, "refused")},
    )
    metrics = Metrics()
    metrics.observe_report(report(compiled, decision, outcome))
    get = metrics.registry.get_sample_value
    assert get("reconciler_queue_active_operations", {"queue": "q", "cluster": "local"}) == 1
    gpu = {"queue": "q", "resource": "nvidia.com/gpu", "flavor": ""}
    assert get("reconciler_queue_quota_used", gpu) == 2
    metrics.observe_report(report(compiled, decision, Outcome.none()))  # a follower's
    assert get("reconciler_queue_active_operations", {"queue": "q", "cluster": "local"}) == 0
    assert get("reconciler_queue_quota_used", gpu) == 0


_FILES_CHILD = """
import os, sys
import reconciler.core.compile  # the packages in the order the CLI imports them
from reconciler.runtime.http import HttpServer
from reconciler.runtime.metrics import Metrics
server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True)
server.start()
print(server.url, flush=True)
for _ in sys.stdin:  # a line: open what a cycle would (git's pipes, a kubeconfig)
    try:
        files = [open(os.devnull) for _ in range(64)]
        for f in files:
            f.close()
        print("opened", flush=True)
    except OSError as exc:
        print(exc.strerror, flush=True)
"""


@pytest.mark.parametrize("hard", [None, 512])
def test_connections_leave_the_process_files_of_its_own(hard: int | None) -> None:
    """Each connection is a file descriptor: under a soft limit of 512 open files (a
    systemd service's or a shell's default is 1,024), 600 idle connections took them all,
    and the cycle's own git and clusters failed with "Too many open files". The server
    raises the soft limit toward the hard one, and holds its connections below what the
    limit leaves (a hard limit of 512: fewer connections, some answered 503)."""
    import resource
    import subprocess
    import sys

    top = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard is None else hard
    _raise_file_limit(600 + 256)
    child = subprocess.Popen(
        [sys.executable, "-c", _FILES_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (512, top)),
    )
    assert child.stdin is not None and child.stdout is not None
    held: list[socket.socket] = []
    try:
        url = child.stdout.readline().strip()
        host, port = url.removeprefix("http://").split(":")
        for _ in range(600):  # a bounded loop
            held.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(1.0)  # accepted (or refused) by now
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "opened"
    finally:
        for sock in held:
            sock.close()
        child.kill()
        child.wait(5)
