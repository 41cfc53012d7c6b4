"""A TCP proxy in a thread, to partition one client from the API server on demand.

``cut()`` drops every open connection and refuses new ones (the listening port is closed:
connect gets ECONNREFUSED); ``blackhole()`` keeps every connection open and accepts new ones
but forwards nothing, so calls hang until the client's timeout (a silent partition);
``heal()`` ends either. TLS passes through untouched, so the client still verifies the
server's certificate for 127.0.0.1."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._stop = threading.Event()
        self._dark = threading.Event()  # blackholed
        self._listen()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _listen(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = int(sock.getsockname()[1])
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:  # closed by cut()
                return
            if self._dark.is_set():
                with self._lock:
                    self._conns.add(client)  # held open, never answered
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in sel.select(timeout=0.5):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    if not self._dark.is_set():  # blackholed: swallowed
                        key.data.sendall(data)
                if self._stop.is_set():
                    return
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            self._close(a, b)

    def _close(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._conns.discard(sock)
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            listener.close()
        with self._lock:
            conns = list(self._conns)
        self._close(*conns)

    def blackhole(self) -> None:
        """Forward nothing more, on open and new connections alike."""
        self._dark.set()

    def heal(self) -> None:
        if self._dark.is_set():  # what was swallowed broke those streams: close them
            self._dark.clear()
            with self._lock:
                conns = list(self._conns)
            self._close(*conns)
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self._stop.set()
        self.cut()
