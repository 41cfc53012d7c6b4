"""The arithmetic of bench/fleet_scale.py: per-item figures, growth from one size to the
next, the steady cycles' mean. These are the numbers docs/benchmarks.md quotes."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_scale", BENCH / "fleet_scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_scale"] = module
    spec.loader.exec_module(module)
    return module


fleet = _load()


def test_per_item_and_none_dispatched() -> None:
    assert fleet.per(3.0, 2) == 1.5
    assert fleet.per(3.0, 0) == 0.0  # a cycle that dispatched nothing has no cost per item


def test_growth_gives_the_ratio_and_the_exponent_of_each_step() -> None:
    steps = fleet.growth([1, 10, 50], [2.0, 20.0, 20.0])
    assert steps[0] == pytest.approx((10.0, 1.0))  # linear in the clusters
    assert steps[1] == pytest.approx((1.0, 0.0))  # flat
    ((ratio, k),) = fleet.growth([10, 50], [1.0, 25.0])
    assert ratio == pytest.approx(25.0) and k == pytest.approx(2.0)  # quadratic


def test_growth_of_a_zero_is_not_a_number() -> None:
    ((ratio, k),) = fleet.growth([1, 10], [0.0, 5.0])
    assert math.isnan(ratio) and math.isnan(k)
    assert fleet.growth([1], [5.0]) == []


def test_the_steady_mean_leaves_out_the_first_cycle() -> None:
    cycles = [{"cpu": 9.0}, {"cpu": 1.0}, {"cpu": 3.0}]
    assert fleet.steady_mean(cycles, "cpu") == 2.0
    assert fleet.steady_mean(cycles[:1], "cpu") == 9.0  # one cycle: its own
