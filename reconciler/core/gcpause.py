"""A pause of Python's cyclic garbage collector around a burst of allocations.

What must live here: ``paused``, nothing else. A cold compile allocates millions of
long-lived objects (specs, provenance, pydantic models); each allocation burst triggers
generation-0 collections, and every few of those a generation-2 one that scans everything
built so far, so the collector's cost grows with the square of the repo. Pausing it for the
compile (reference counting still frees almost everything at once) and restoring it
afterwards costs nothing but the cyclic garbage made during the pause, collected after it.
``decide`` runs under it too: there a collection of the cycle's young objects would be a
wait on the way to its first create.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic collector until the block ends, then restore it as it was (a
    nested pause, or a caller who disabled it, leaves it disabled)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
