"""Queue view and page rendering cost, side by side with the plan they render (ratios).

    PYTHONPATH=. python bench/web_bench.py [N_OPERATIONS] [--http-only]

The seed example plus N generated 1-GPU operations spread over its queues is compiled and
planned once; then, each timed over several runs:

1. plan_repo (the cycle's planner) — the reference;
2. build_queues_view + the Queues page HTML (what one page load costs);
3. build_queue_detail + the page of the busiest queue (every pending op listed);
4. build_operation_detail + the page of one operation (its provenance and spec);
5. over HTTP (``runtime/http.py``'s ``HttpServer`` on 127.0.0.1, serving the queues page
   computed per request as ``/`` and ``/healthz``), from a client in this process:
   a. GET / and GET /healthz one after the other, a new connection each: median and max;
   b. the same with 1,000 idle connections and 100 half-sent requests open (one client
      address, as behind a proxy): answers by status, median and max, and what holding
      them added to this process's RSS;
   c. 8 keep-alive clients for 3 s, 4 on GET / and 4 on GET /healthz: requests a second
      of each, /healthz's median and max while the pages are computed, and this process's
      CPU per request (the client's included: the same on any server).
   It uses only HttpServer's constructor, start, stop and address, so the same section
   runs against another checkout's server (PYTHONPATH=that checkout).
"""

from __future__ import annotations

import contextlib
import http.client
import resource
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import compile_repo
from reconciler.core.plan import plan_repo
from reconciler.core.types import RepoFile, RepoSnapshot
from reconciler.core.views.queue_view import (
    build_operation_detail,
    build_queue_detail,
    build_queues_view,
)
from reconciler.core.views.web_html import (
    render_operation_page,
    render_queue_page,
    render_queues_page,
)
from reconciler.runtime.http import HttpServer
from reconciler.runtime.metrics import Metrics

TEMPLATE = Path(__file__).resolve().parent.parent / "config-repo-template"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _repo(n: int) -> RepoSnapshot:
    files = dict(snapshot_worktree(TEMPLATE).files)
    for i in range(n):
        project, queue = (("vision", "team-a"), ("language", "team-b"))[i % 2]
        path = f"projects/{project}/operations/gen-{i}.yaml"
        body = (
            f"kind: Operation\nname: gen-{i}\nqueue: {queue}\npresets: [a100]\nrun:\n"
            f"  container:\n    command: [python, train.py]\n    args: [--seed, '{i}']\n"
        )
        files[path] = RepoFile(path, body.encode())
    return RepoSnapshot(files, version="bench")


def _best(fn: Callable[[], object], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _get(address: tuple[str, int], path: str) -> tuple[int | str, float]:
    """One GET on a new connection: its status (or the error's name) and seconds."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - t0
    except OSError as exc:
        return type(exc).__name__, time.perf_counter() - t0
    finally:
        conn.close()


def _latencies(address: tuple[str, int], path: str, count: int) -> str:
    answers = [_get(address, path) for _ in range(count)]
    statuses: dict[int | str, int] = {}
    for status, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    times = [t for status, t in answers if status == 200] or [float("nan")]
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str))
    return (
        f"GET {path:<8} x{count}: {shown}; 200s median {statistics.median(times) * 1e3:.1f} ms,"
        f" max {max(times) * 1e3:.1f} ms"
    )


def _hold(address: tuple[str, int], idle: int, half_sent: int) -> list[socket.socket]:
    """``idle`` connections that send nothing and ``half_sent`` that send half a request."""
    held = []
    for i in range(idle + half_sent):
        try:
            sock = socket.create_connection(address, timeout=5)
        except OSError:
            continue
        if i >= idle:
            with contextlib.suppress(OSError):
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        held.append(sock)
    return held


def _mixed(address: tuple[str, int], seconds: float) -> str:
    """4 keep-alive clients on GET /, 4 on GET /healthz, for ``seconds``."""
    stop = time.monotonic() + seconds
    counts = {"/": 0, "/healthz": 0}
    health: list[float] = []
    lock = threading.Lock()

    def client(path: str) -> None:
        conn = http.client.HTTPConnection(*address, timeout=10)
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                continue
            with lock:
                counts[path] += response.status == 200
                if path == "/healthz":
                    health.append(time.perf_counter() - t0)
        conn.close()

    threads = [threading.Thread(target=client, args=(p,)) for p in ["/"] * 4 + ["/healthz"] * 4]
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu
    health = health or [float("nan")]
    return (
        f"8 clients {seconds:g} s: GET / {counts['/'] / seconds:.1f}/s, GET /healthz "
        f"{counts['/healthz'] / seconds:.1f}/s (median {statistics.median(health) * 1e3:.1f} ms,"
        f" max {max(health) * 1e3:.1f} ms); CPU {cpu * 1e3 / max(sum(counts.values()), 1):.2f} ms"
        " a request (client and server)"
    )


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def http_section(repo: Any, plan: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # 1,100 client sockets and the server's, in this process
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))

    def web(path: str, query: str) -> tuple[int, bytes, str] | None:
        if path != "/":
            return None
        page = render_queues_page(build_queues_view(repo, plan, {}, applied=True))
        return 200, page.encode(), "text/html; charset=utf-8"

    server = HttpServer("127.0.0.1:0", Metrics().registry, lambda: True, web=web)
    server.start()
    address = server.address
    try:
        print("HTTP, unloaded:")
        print("  " + _latencies(address, "/healthz", 50))
        print("  " + _latencies(address, "/", 20))
        rss = _rss_mb()
        held = _hold(address, 1000, 100)
        time.sleep(1.0)  # accepted (or refused) by now
        print(
            f"HTTP, with {len(held)} connections open (1,000 idle, 100 half-sent; RSS"
            f" +{_rss_mb() - rss:.1f} MB, the client's sockets included):"
        )
        print("  " + _latencies(address, "/healthz", 50))
        print("  " + _latencies(address, "/", 20))
        for sock in held:
            sock.close()
        time.sleep(1.0)
        print("HTTP, mixed:")
        print("  " + _mixed(address, 3.0))
    finally:
        server.stop()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 5000
    repo = compile_repo(_repo(n))
    assert repo.valid, repo.errors[:3]
    plan = plan_repo(repo, [], NOW)
    if "--http-only" in sys.argv:
        print(f"{len(repo.operations)} operations, {len(plan.pending)} pending")
        http_section(repo, plan)
        return
    op_id = repo.operations[-1].id
    busiest = max(plan.queues, key=lambda q: q.pending).name

    t_plan = _best(lambda: plan_repo(repo, [], NOW))
    t_queues = _best(lambda: render_queues_page(build_queues_view(repo, plan, {}, applied=True)))

    def queue_page() -> str:
        detail = build_queue_detail(repo, plan, {}, busiest, applied=True)
        assert detail is not None
        return render_queue_page(detail)

    def op_page() -> str:
        detail = build_operation_detail(repo, plan, {}, op_id, applied=True)
        assert detail is not None
        return render_operation_page(detail)

    t_queue = _best(queue_page)
    t_op = _best(op_page)
    pending = sum(1 for p in plan.pending if p.queue == busiest)
    print(f"{len(repo.operations)} operations, {len(plan.pending)} pending")
    print(f"plan_repo                      {t_plan * 1e3:8.1f} ms  1.00x")
    print(f"queues page (view + HTML)      {t_queues * 1e3:8.1f} ms  {t_queues / t_plan:.2f}x")
    print(
        f"queue page ({busiest}, {pending} pending) {t_queue * 1e3:8.1f} ms  "
        f"{t_queue / t_plan:.2f}x"
    )
    print(f"operation page                 {t_op * 1e3:8.1f} ms  {t_op / t_plan:.2f}x")
    http_section(repo, plan)


if __name__ == "__main__":
    main()
