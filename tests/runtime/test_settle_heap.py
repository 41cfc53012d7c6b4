"""``settle_heap``: what a long-lived ``reconciler run`` does to CPython's garbage collector
once at start. The garbage is collected before the rest is frozen, so no cycle alive only
through itself is kept; a full collection runs at most once per ``FULL_COLLECTION_EVERY``
collections of the middle generation; the young generations are as they were."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from reconciler.runtime.service import FULL_COLLECTION_EVERY, settle_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """The rest of the test session with the collector as it found it."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
def test_settle_heap_collects_the_garbage_then_freezes_the_rest() -> None:
    young, middle, _ = gc.get_threshold()
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle: freed only by the collector
    garbage = weakref.ref(a)
    kept = _Node()
    del a, b
    settle_heap()
    assert garbage() is None  # collected, not frozen
    assert gc.get_freeze_count() > 0
    assert all(o is not kept for o in gc.get_objects())  # frozen: never rescanned
    assert gc.get_threshold() == (young, middle, FULL_COLLECTION_EVERY)


@pytest.mark.usefixtures("restored_gc")
def test_a_cycle_made_after_is_still_collected() -> None:
    settle_heap()
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    garbage = weakref.ref(a)
    del a, b
    gc.collect()
    assert garbage() is None
