"""Start ``reconciler run`` processes fast: a process that has imported the reconciler and
the Kubernetes client once (their lazy imports cost seconds per process on a loaded
machine), then forks one child per request. Each child is a fresh process running the CLI's
``cli`` with its own argv, environment and log file, and can be SIGKILLed like any other.

Protocol, one JSON object per line. In: ``{"argv": [...], "env": {...}, "log": path}``.
Out: ``{"pid": N}`` once forked, then ``{"status": S}`` when it ended (``-9`` for SIGKILL,
as ``subprocess`` reports it). One child at a time. Used by ``fault_loop.py``.
"""

from __future__ import annotations

import json
import os
import sys


def _preload() -> None:
    from kubernetes import client

    import reconciler.cli.main  # noqa: F401

    for name in ("ApiClient", "CoreV1Api", "BatchV1Api", "CoordinationV1Api"):
        getattr(client, name)  # the client loads its API classes (and models) lazily


def _child(request: dict[str, object]) -> None:
    log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log, 2)
    env = request.get("env")
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    argv = request["argv"]
    assert isinstance(argv, list)
    from reconciler.cli.main import cli

    code = 0
    try:
        cli.main(args=[str(a) for a in argv], prog_name="reconciler")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        code = 1
    sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    _preload()
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        out.write(json.dumps({"status": code}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()


class Zygote:
    """The client side: ``start`` a child, ``wait`` for it (None on timeout), ``signal`` it."""

    def __init__(self) -> None:
        import subprocess

        self._proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.pid: int | None = None

    def start(self, argv: list[str], env: dict[str, str], log: str) -> int:
        assert self.pid is None, "one child at a time"
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"argv": argv, "env": env, "log": log}) + "\n")
        self._proc.stdin.flush()
        self.pid = int(json.loads(self._proc.stdout.readline())["pid"])
        return self.pid

    def wait(self, timeout: float) -> int | None:
        import select

        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        if not ready:
            return None
        self.pid = None
        return int(json.loads(self._proc.stdout.readline())["status"])

    def signal(self, sig: int) -> None:
        if self.pid is not None:
            os.kill(self.pid, sig)

    def close(self) -> None:
        if self.pid is not None:
            self.signal(9)
            self.wait(10)
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=10)
