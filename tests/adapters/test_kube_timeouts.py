"""Every call to an apiserver has a timeout: one that accepts connections and never
answers (a blackhole) fails a call instead of hanging it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.helpers import Blackhole, write_kubeconfig

from reconciler.adapters.kube import Kube, KubeError, bounded, connect


def test_every_cluster_call_has_a_timeout(tmp_path: Path) -> None:
    with Blackhole() as blackhole:
        api = connect(write_kubeconfig(tmp_path / "kubeconfig", blackhole.url("http")))
        bounded(api, timeout=(0.2, 0.2))  # the wrapper connect() puts on, with less time
        kube = Kube(api)
        with pytest.raises(KubeError, match="unreachable"):
            kube.list_managed("Job")  # the client's first call also loads its models
        started = time.monotonic()
        with pytest.raises(KubeError, match="unreachable"):
            kube.list_managed("Job")
        # four tries (urllib3's default retries) of 0.2 s, rather than waiting forever
        assert time.monotonic() - started < 5.0
        assert blackhole.accepted >= 2
