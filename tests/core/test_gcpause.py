"""``gcpause.paused`` stops the cyclic collector for its block and restores it as it was;
``decide`` runs under it. ``gcpause.Pause`` can end before its block (the cycle's, held
until its creates are sent)."""

from __future__ import annotations

import gc

import pytest

from reconciler.core import gcpause


def test_paused_disables_the_collector_then_restores_it() -> None:
    assert gc.isenabled()
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():  # nested: still paused after the inner block
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_restores_the_collector_when_the_block_raises() -> None:
    with pytest.raises(ValueError), gcpause.paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_paused_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_collection_runs_while_paused() -> None:
    collections: list[str] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    gc.callbacks.append(note)
    try:
        with gcpause.paused():
            junk = [[i] for i in range(200_000)]  # far past generation 0's threshold
            del junk
        paused_runs = len(collections)
    finally:
        gc.callbacks.remove(note)
    assert paused_runs == 0


def test_decide_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of ``decide``, not only the planner's, runs with the collector paused
    (a collection starting in one is a wait on the way to the cycle's first create); it
    is restored after."""
    from support.builders import NOW, World

    from reconciler.core.decision import cycle

    seen: list[bool] = []
    for step in ("read_listing", "time_out_gangs", "make_actions"):
        real = getattr(cycle, step)

        def noted(*args: object, _real: object = real) -> object:
            seen.append(gc.isenabled())
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(cycle, step, noted)
    world = World().queue("q")
    world.op("p/a", queue="q")
    compiled = world.repo()
    listing = {name: cycle.ClusterListing() for name in compiled.clusters}
    decision = cycle.decide(compiled, listing, cycle.Memory(), NOW)
    assert [c.operation.id for c in decision.actions.creates] == ["p/a"]
    assert seen == [False, False, False] and gc.isenabled()


def test_a_pause_resumed_early_restores_the_collector_once() -> None:
    with gcpause.Pause() as pause:
        assert not gc.isenabled()
        with gcpause.paused():  # decide's own pause, inside the cycle's
            pass
        assert not gc.isenabled()  # its end leaves the cycle's pause held
        pause.resume()
        assert gc.isenabled()
        gc.disable()  # someone else's pause: the block's end leaves it alone
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(ValueError), gcpause.Pause():
        raise ValueError("boom")
    assert gc.isenabled()
