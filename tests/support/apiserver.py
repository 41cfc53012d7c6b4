"""A scripted HTTP/1.1 server on 127.0.0.1 that answers as an API server would (or does
not), and a ``Kube`` connected to it, for the client tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from reconciler.adapters.kube import Kube, connect
from support.helpers import write_kubeconfig

# An answer: the bytes to send, in pieces; None closes the connection instead.
Script = Callable[[bytes], list[bytes] | None]


def fixed(status: str, body: bytes, extra: str = "") -> list[bytes]:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
    return [(head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body]


def chunked(status: str, body: bytes) -> list[bytes]:
    """``body`` in chunks of 3 bytes (one with an extension), then trailers; sent a few
    bytes at a time, so every read of the client stops somewhere else."""
    wire = f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    for i in range(0, len(body), 3):
        piece = body[i : i + 3]
        wire += f"{len(piece):x}{';ext=1' if i == 0 else ''}\r\n".encode() + piece + b"\r\n"
    wire += b"0\r\nX-Trailer: t\r\n\r\n"
    return [wire[i : i + 7] for i in range(0, len(wire), 7)]


class Server:
    """Answers each request on each connection with the next of ``answers``; records the
    requests (head and body) and counts connections."""

    def __init__(self, answers: list[Script]) -> None:
        self.answers = answers
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.done = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client left (a watch it stopped reading)
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = buf[:length], buf[length:]
                self.requests.append((head, body))
                pieces = self.answers.pop(0)(head) if self.answers else None
                if pieces is None:
                    return  # close without an answer
                for piece in pieces:
                    conn.sendall(piece)
                    time.sleep(0.001)
                if b"Connection: close" in b"".join(pieces[:1]) or pieces[-1:] == [b""]:
                    return  # b"" last: close after the answer

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.done.set()
        time.sleep(0.2)  # the accept loop sees it
        self.sock.close()


@contextlib.contextmanager
def serving(tmp_path: Path) -> Iterator[Callable[..., tuple[Server, Kube]]]:
    """Makes a scripted ``Server`` of the answers given and a ``Kube`` connected to it (a
    kubeconfig with a bearer token); closes the servers at the end."""
    made: list[Server] = []

    def make(*answers: Script) -> tuple[Server, Kube]:
        server = Server(list(answers))
        made.append(server)
        return server, Kube(connect(write_kubeconfig(tmp_path / "kubeconfig", server.url())))

    try:
        yield make
    finally:
        for server in made:
            server.close()
