"""Fault points parse, count down, and refuse unknown names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reconciler.runtime.faults import FaultPoints


def test_unknown_points_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault points"):
        FaultPoints.from_env("after-lunch=1")


def test_the_nth_hit_kills_the_process_with_sigkill() -> None:
    code = (
        "from reconciler.runtime.faults import FaultPoints\n"
        "f = FaultPoints.from_env('after-create=3')\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    f.hit('after-create')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -9
    assert proc.stdout.split() == ["0", "1", "2"]


def test_no_spec_means_no_faults() -> None:
    faults = FaultPoints.from_env("")
    for _ in range(10):
        faults.hit("after-create")
