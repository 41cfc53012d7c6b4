"""The Kubeflow Training Operator v1.8.1, for the optional test that runs it
(tests/cluster/test_pytorchjob_operator.py): built from the wrapper module
bench/training_operator into the binary cache the dev cluster's binaries use
(``~/.cache/reconciler/bin/training-operator-v1.8.1-<key>/``), never committed, never a CI
dependency. Build it once (about two minutes on two cores) with

    PYTHONPATH=$PWD python tests/support/kubeflow_operator.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from reconciler.devcluster import build

VERSION = "v1.8.1"
MODULE = Path(__file__).resolve().parents[2] / "bench" / "training_operator"
PACKAGE = "github.com/kubeflow/training-operator/cmd/training-operator.v1"
BINARY = "training-operator"


def cached_operator() -> Path:
    """Where the binary is (it may not exist: nothing is built here)."""
    return build._module_target(BINARY, VERSION, MODULE) / BINARY


def build_operator() -> Path:
    built = build._build_module(BINARY, VERSION, MODULE, {BINARY: PACKAGE}, "-s -w", print)
    return built[BINARY]


if __name__ == "__main__":
    path = build_operator()
    print(path)
    sys.exit(0 if path.is_file() else 1)
