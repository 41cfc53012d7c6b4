"""A cluster that is down: one log line per failed attempt, with the delay to the next one
(doubled up to ``CLUSTER_BACKOFF``), no line from urllib3, and one when it answers again.
The cluster is a real client on a closed 127.0.0.1 port."""

from __future__ import annotations

import logging
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from support.clocks import SteppedClock
from support.fake_kube import FakeCluster, FakeKube
from support.harness import team_a
from support.helpers import write_kubeconfig

from reconciler.adapters.kube import Kube, KubeError, connect
from reconciler.core.types import ClusterSpec, RepoSnapshot
from reconciler.runtime.cycle import CLUSTER_BACKOFF, Reconciler


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed once the socket is


@pytest.mark.parametrize("watch", [False, True])
def test_a_down_cluster_logs_one_line_per_attempt_backs_off_and_says_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, watch: bool
) -> None:
    repo = team_a("p/a").repo()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{_closed_port()}")
    up = FakeCluster("local")
    state = {"down": True}
    connects: list[str] = []

    def connect_cluster(spec: ClusterSpec) -> Any:
        connects.append(spec.name)
        return Kube(connect(kubeconfig)) if state["down"] else FakeKube(up)

    clock = SteppedClock()
    reconciler = Reconciler(
        lambda: RepoSnapshot(files={}, version=repo.version),
        connect_cluster,
        clock,
        watch=watch,
        sync_timeout=5.0,
    )

    def cycle() -> Any:
        with mock.patch("reconciler.runtime.cycle.compile_repo", lambda *_a, **_k: repo):
            return reconciler.run_once()

    caplog.set_level(logging.DEBUG, logger="urllib3")
    caplog.set_level(logging.INFO, logger="reconciler")
    try:
        for _ in range(40):  # one cycle a second for 40 s
            result = cycle()
            assert not result.clusters[0].reachable
            clock.at += timedelta(seconds=1)
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert all(r.name == "reconciler.cycle" for r in lines), [r.getMessage() for r in lines]
        attempts = len(lines)
        # tried at 0, 1, 3, 7, 15 and 31 s: 6 attempts in 40 s, one line each
        assert attempts == 6 == len(connects)
        delays = [m.getMessage().rsplit("retrying in ", 1)[1] for m in lines]
        assert delays == ["1s)", "2s)", "4s)", "8s)", "16s)", "30s)"]
        assert not [r for r in caplog.records if r.name.startswith("urllib3")]
        # the one failure, not urllib3's "Max retries exceeded" around it
        assert "Connection refused" in lines[0].getMessage()
        assert "Max retries" not in lines[0].getMessage()
        assert CLUSTER_BACKOFF[1] == 30.0
        caplog.clear()
        state["down"] = False
        clock.at += timedelta(seconds=60)
        back = cycle()
        assert back.clusters[0].reachable and back.dispatched == ("p/a",)
        said = [r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()]
        assert said == ["cluster local reachable again after 6 failed attempts (down 100s)"]
    finally:
        reconciler.close()


def test_urllib3_retries_nothing_itself(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{_closed_port()}")
    caplog.set_level(logging.DEBUG, logger="urllib3")
    with pytest.raises(KubeError, match="unreachable"):
        Kube(connect(kubeconfig)).list_managed("Job")
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]
