"""Fixtures of the cluster tests beyond the session's (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from support.cluster import KubeCluster
from support.kubeflow_crd import crd_installed


@pytest.fixture
def pytorchjob_crd_installed(kube_cluster: KubeCluster) -> Iterator[client.ApiClient]:
    with crd_installed(kube_cluster) as api:
        yield api
