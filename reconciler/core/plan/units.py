"""Quantities as exact integers: nano-units, Kubernetes' finest precision.

What must live here: the one conversion of a quantity into the integers the planner
compares and back. A request rounds up and a quota rounds down, so rounding can never
over-admit; nothing else in the planner rounds.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import lru_cache

_NANO = Decimal(10) ** 9
_ONE_NANO = Decimal("1e-9")
_NANO_INT = 10**9


@lru_cache(maxsize=65536)
def request_units(value: Decimal) -> int:
    """Nano-units, rounded up (memoised: most operations share a handful of sizes)."""
    return int((value * _NANO).to_integral_value(ROUND_CEILING))


@lru_cache(maxsize=4096)
def quota_units(value: Decimal) -> int:
    """Nano-units, rounded down."""
    return int((value * _NANO).to_integral_value(ROUND_FLOOR))


@lru_cache(maxsize=65536)
def to_decimal(units: int) -> Decimal:
    """Nano-units back to a quantity, for the plan's model."""
    whole, frac = divmod(units, _NANO_INT)
    if not frac:
        return Decimal(whole)
    return (Decimal(units) * _ONE_NANO).normalize()
