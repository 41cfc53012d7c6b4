"""A Git remote served on 127.0.0.1 by ``git daemon``, pushes allowed: what a user's
clone talks to, over the network, in the tests of ``submit`` and ``rerun``."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from reconciler.devcluster.cluster import free_port


@contextlib.contextmanager
def git_daemon(root: Path) -> Iterator[str]:
    """Serve every repository under ``root``; yields ``git://127.0.0.1:PORT``."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={root}",
            "--export-all",
            "--enable=receive-pack",
            "--informative-errors",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("git daemon did not start") from None
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
