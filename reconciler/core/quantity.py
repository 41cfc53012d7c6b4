"""Kubernetes resource quantities, parsed exactly into Decimal.

Follows k8s.io/apimachinery/pkg/api/resource: a signed decimal number followed by
a binary SI suffix (Ki..Ei), a decimal SI suffix (n, u, m, "", k, M, G, T, P, E)
or a decimal exponent (e3, E-2).

What must live here: parsing, formatting and summing quantities and durations, exactly: the
one place a ``500m`` or ``1Gi`` becomes a number.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# ASCII digits only: the string is sent to Kubernetes as written, and its parser takes no
# other script's digits (``\d`` would). It trims spaces around the number, as ``strip``.
_RE = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?"
)
# Kubernetes caps quantities at 2^63-1 milli-units; anything larger is a typo.
MAX_QUANTITY = Decimal(2**63 - 1) / 1000


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


def short_repr(value: object, limit: int = 72) -> str:
    """``repr(value)``, cut to ``limit`` characters so a huge value cannot flood an error."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[: limit - 3]}...{size}"


_show = short_repr


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """Parse a quantity such as ``2``, ``500m``, ``256Gi`` or ``1e3`` into a Decimal."""
    if type(value) is str:  # the same few strings in every operation: parsed once
        return _parse_text(value)
    return _parse(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    return _parse(value)


def _parse(value: str | int | float | Decimal) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"{_show(value)} is not a quantity")
    if isinstance(value, int | Decimal):
        number = Decimal(value)
    elif isinstance(value, float):
        number = Decimal(repr(value))
    elif isinstance(value, str):
        match = _RE.fullmatch(value.strip())
        if not match:
            raise QuantityError(f"{_show(value)} is not a valid quantity (e.g. 2, 500m, 256Gi)")
        try:
            number = Decimal(match["num"])
        except InvalidOperation as exc:  # pragma: no cover - regex guards this
            raise QuantityError(f"{_show(value)} is not a valid quantity") from exc
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            number *= _DECIMAL[suffix]
        else:
            number = number.scaleb(int(suffix[1:]))
    else:
        raise QuantityError(f"{_show(value)} is not a quantity")
    if number < 0:
        raise QuantityError(f"{_show(value)} is negative")
    if number > MAX_QUANTITY:
        raise QuantityError(f"{_show(value)} is too large")
    return number


def format_quantity(value: Decimal) -> str:
    """Canonical short form: integers plain (``4``), binary sizes with Ki..Ei, fractions in m."""
    if value == value.to_integral_value():
        n = int(value)
        if n >= 2**10:
            for suffix, factor in reversed(_BINARY.items()):
                if n % factor == 0:
                    return f"{n // factor}{suffix}"
        return str(n)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value.normalize(), "f")


def sum_quantities(items: Mapping[str, Decimal], into: dict[str, Decimal]) -> dict[str, Decimal]:
    """Add ``items`` into ``into`` per resource and return it."""
    for name, amount in items.items():
        into[name] = into.get(name, Decimal(0)) + amount
    return into


def pod_requests(
    containers: Sequence[Mapping[str, Decimal]],
    init_containers: Sequence[tuple[Mapping[str, Decimal], bool]] = (),
) -> dict[str, Decimal]:
    """A pod's effective request per resource, as the scheduler counts it (Kubernetes 1.29+,
    native sidecars): the larger of the containers plus every sidecar, and of each init
    container plus the sidecars started before it. ``init_containers`` are in pod order,
    each with ``True`` when it is a sidecar (``restartPolicy: Always``)."""
    regular: dict[str, Decimal] = {}
    for amounts in containers:
        sum_quantities(amounts, regular)
    sidecars: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for amounts, sidecar in init_containers:
        if sidecar:
            sum_quantities(amounts, sidecars)
            during = dict(sidecars)
        else:
            during = sum_quantities(amounts, dict(sidecars))
        for name, amount in during.items():
            peak[name] = max(peak.get(name, Decimal(0)), amount)
    total = sum_quantities(sidecars, regular)
    for name, amount in peak.items():
        total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def format_duration(seconds: int) -> str:
    """``2h``, ``90m``, ``1h30m``, ``45s``: a duration as a config would write it."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join([f"{h}h" if h else "", f"{m}m" if m else "", f"{s}s" if s else ""]) or "0s"


# A duration as a config writes it: ``90``, ``1h30m``, ``45s`` (the schemas' pattern too).
DURATION = re.compile(r"^(?=\d)(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def duration_seconds(value: str | int) -> int:
    """Seconds in a validated timeout (an int, or ``1h30m``-style)."""
    if isinstance(value, int):
        return value
    match = DURATION.fullmatch(value)
    assert match is not None
    h, m, s = (int(g) if g else 0 for g in match.groups())
    return h * 3600 + m * 60 + s
