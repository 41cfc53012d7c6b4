"""The client's CPU to read a watch stream: ``Kube.watch_managed(..., narrow=True)`` against
a TLS server in a process of its own that streams recorded Pod events
(tests/data/watch/recorded.jsonl), one chunk an event, as the apiserver writes them.

    PYTHONPATH=$PWD python bench/watch_read.py [--events 20000] [--pace-us 0] [--rounds 3]

``--pace-us`` waits that long between events (0: as fast as the socket takes them, so
reads see many events at once; 2000: about the rate of one watch in the e2e bench, a read
and a wake-up per event). It prints the CPU (``time.thread_time``) of the thread that
reads, per event after the first (the connection's set-up is not counted), each round.
Run it with ``PYTHONPATH`` at another checkout to compare code."""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reconciler.adapters.kube import Kube, connect
from reconciler.devcluster.pki import write_self_signed

RECORDED = Path(__file__).resolve().parent.parent / "tests/data/watch/recorded.jsonl"


def events() -> list[bytes]:
    """Recorded events of Pods and Jobs, as the apiserver sends them (one a line)."""
    out = []
    for line in RECORDED.read_text().splitlines():
        record = orjson.loads(line)
        if record["kind"] == "Pod":
            out.append(orjson.dumps(record["event"]) + b"\n")
    return out


def serve(listener: socket.socket, cert: Path, count: int, pace: float) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert / "tls.crt", cert / "tls.key")
    recorded = events()
    while True:
        raw, _ = listener.accept()
        with context.wrap_socket(raw, server_side=True) as conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    break
                buf += data
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for i in range(count):
                body = recorded[i % len(recorded)]
                conn.sendall(f"{len(body):x}\r\n".encode() + body + b"\r\n")
                if pace:
                    time.sleep(pace)
            conn.sendall(b"0\r\n\r\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--pace-us", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="watch-read-"))
    write_self_signed(work / "cert", "127.0.0.1")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = multiprocessing.Process(
        target=serve,
        args=(listener, work / "cert", args.events, args.pace_us / 1e6),
        daemon=True,
    )
    server.start()
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n"
        "    insecure-skip-tls-verify: true\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: dev\n  context: {cluster: c, user: u}\ncurrent-context: dev\n"
    )
    kube = Kube(connect(kubeconfig))
    per_event = []
    for round_ in range(args.rounds):
        result: dict[str, float] = {}

        def read(into: dict[str, float] = result) -> None:
            watch = kube.watch_managed("Pod", "1", narrow=True)
            next(watch)  # connected (TCP, TLS, the request): not counted
            start = time.thread_time()
            seen = sum(1 for _ in watch)
            into["cpu"] = time.thread_time() - start
            into["seen"] = seen

        thread = threading.Thread(target=read)
        wall = time.monotonic()
        thread.start()
        thread.join()
        wall = time.monotonic() - wall
        micro = 1e6 * result["cpu"] / result["seen"]
        per_event.append(micro)
        print(
            f"round {round_ + 1}: {int(result['seen'])} events in {wall:.2f} s, "
            f"reader CPU {result['cpu']:.3f} s = {micro:.1f} us/event",
            flush=True,
        )
    print(f"median {statistics.median(per_event):.1f} us/event")
    server.terminate()


if __name__ == "__main__":
    main()
