"""``settle_heap``: what a long-lived ``reconciler run`` does to CPython's garbage collector
at start, and again (``HeapKeeper``) once its first cycle compiled the config and whenever a
quarter of the operations were compiled since. The garbage is collected before the rest is
frozen, so no cycle alive only through itself is kept; a full collection runs at most once
per ``FULL_COLLECTION_EVERY`` collections of the middle generation, run by the keeper
between cycles at half that count; the young generations are as they were."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

import pytest
from support.builders import World
from support.status_branch import MemoryStatusBranch, results

from reconciler.runtime.cycle import CycleResult, Reconciler
from reconciler.runtime.service import (
    FULL_COLLECTION_EVERY,
    SETTLE_AFTER,
    HeapKeeper,
    Runtime,
    settle_heap,
)
from reconciler.runtime.status import StatusPublisher


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


@pytest.mark.usefixtures("restored_gc")
def test_a_settle_again_frees_the_garbage_cycles_frozen_since() -> None:
    """A cycle frozen while alive (a compiled operation of the first settle) is freed by
    the next settle once it is garbage: ``settle_heap`` unfreezes before it collects."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    frozen = weakref.ref(a)
    settle_heap()
    del a, b
    gc.collect()
    assert frozen() is not None  # frozen: no collection looks at it
    settle_heap()
    assert frozen() is None


@pytest.mark.usefixtures("restored_gc")
def test_the_heap_is_settled_again_once_a_quarter_of_the_operations_are_new() -> None:
    """The first cycle's compile (every operation) is frozen after it; then only once more
    than a quarter of the operations (and at least ``SETTLE_AFTER``) were compiled since."""
    compiled = [0]
    keeper = HeapKeeper(lambda: compiled[0])
    compiled[0] = 100_000  # the first cycle compiled them all
    keeper.after_cycle(100_000)
    assert keeper.settles == 1 and gc.get_freeze_count() > 0
    compiled[0] += 25_000  # a quarter: not more than it
    keeper.after_cycle(100_000)
    assert keeper.settles == 1
    compiled[0] += 1
    keeper.after_cycle(100_000)
    assert keeper.settles == 2
    compiled[0] += SETTLE_AFTER  # a small config: at least SETTLE_AFTER
    keeper.after_cycle(10)
    assert keeper.settles == 2
    compiled[0] += 1
    keeper.after_cycle(10)
    assert keeper.settles == 3


@pytest.mark.usefixtures("restored_gc")
def test_a_long_lived_runtime_settles_the_heap_after_its_first_compiled_cycle() -> None:
    """``Runtime.on_cycle`` hands each cycle over a compiled config to its ``HeapKeeper``:
    the cycle that compiled the config settles the heap; one with nothing new does not."""
    world = World().queue("q")
    for i in range(SETTLE_AFTER + 1):
        world.op(f"p/o{i}")
    compiled = world.repo()
    count = [0]
    runtime = Runtime(cast(Reconciler, object()), None, heap=HeapKeeper(lambda: count[0]))
    result = CycleResult(datetime(2026, 1, 1, tzinfo=UTC), compiled.version, compiled, None, {})
    count[0] = len(compiled.operations)  # the first cycle compiled them all
    runtime.on_cycle(result)
    assert runtime.heap is not None and runtime.heap.settles == 1
    runtime.on_cycle(result)
    assert runtime.heap.settles == 1


@pytest.mark.usefixtures("restored_gc")
def test_a_status_write_of_more_than_a_quarter_of_the_records_settles_the_heap() -> None:
    """The writer's first write renders every record (its memos: a record, its file and
    what it was built from, per operation, all made after the first cycle's settle): the
    heap is settled after it, as after a compile; a write of a few records is not."""
    compiled = [100_000]
    keeper = HeapKeeper(lambda: compiled[0])
    keeper.after_cycle(100_000)
    assert keeper.settles == 0  # compiled before the keeper: settled at the start
    keeper.after_render(100_025)  # every operation's file, the queues' and the cycle's
    assert keeper.settles == 1
    keeper.after_render(25_000)
    keeper.after_render(1_028)  # a preset used by 1%
    assert keeper.settles == 1
    keeper.after_render(25_001)
    assert keeper.settles == 2


def test_the_writer_tells_how_many_files_each_write_rendered() -> None:
    """``StatusPublisher.after_render`` (the Runtime's ``HeapKeeper``) hears of every write
    that rendered a file again, once the write is over: all of them first, then what
    changed; not of a write that rendered nothing new."""
    first, second = results(2)
    rendered: list[int] = []
    branch = MemoryStatusBranch()
    publisher = StatusPublisher(branch)  # type: ignore[arg-type]
    publisher.after_render = rendered.append
    publisher.publish(first)
    assert len(rendered) == 1 and rendered[0] >= len(branch.files) - 1
    publisher.publish(first)  # the same status: nothing rendered again
    publisher.publish(second)
    assert len(rendered) == 2 and 0 < rendered[1] < rendered[0]
