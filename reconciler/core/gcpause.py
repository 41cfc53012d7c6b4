"""A pause of Python's cyclic garbage collector around a burst of allocations.

What must live here: ``Pause`` (and ``paused``, a pause for a block), nothing else. A cold
compile allocates millions of long-lived objects (specs, provenance, pydantic models); each
allocation burst triggers generation-0 collections, and every few of those a generation-2
one that scans everything built so far, so the collector's cost grows with the square of
the repo. Pausing it for the compile (reference counting still frees almost everything at
once) and restoring it afterwards costs nothing but the cyclic garbage made during the
pause, collected after it. ``decide`` runs under it too: there a collection of the cycle's
young objects would be a wait on the way to its first create. Each pause's end is a
collection of what it left alive (the first allocation after it): the compile's ~20 ms and
``decide``'s ~10 ms at 100k operations, so the reconciler's cycle holds one ``Pause`` from
its read of the config until its creates are sent, and those collections run after them.
"""

from __future__ import annotations

import gc


class Pause:
    """The collector disabled on entering a block, and restored as it was at ``resume`` or
    at the block's end, whichever comes first (a nested pause, or a caller who disabled
    it, leaves it disabled)."""

    __slots__ = ("_held", "_was_enabled")

    def __init__(self) -> None:
        self._was_enabled = False
        self._held = False

    def __enter__(self) -> Pause:
        self._was_enabled = gc.isenabled()
        self._held = True
        gc.disable()
        return self

    def resume(self) -> None:
        """Restore the collector now (once; later calls do nothing)."""
        if self._held:
            self._held = False
            if self._was_enabled:
                gc.enable()

    def __exit__(self, *_exc: object) -> None:
        self.resume()


def paused() -> Pause:
    """A ``Pause`` held for a whole block (``with paused():``)."""
    return Pause()
