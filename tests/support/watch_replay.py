"""Replay watch events (the apiserver's raw JSON lines) into two sets of caches, as the
informers keep them: the whole objects (``orjson`` and ``cached``: what the caches held
before) and the narrow ones (the adapter's msgspec decode, ``Kube.watch_managed(...,
narrow=True)``), and check after every event that observation, its memory (``Observer``)
and the event's trigger are the same on both. Used on events recorded from a real
apiserver (tests/cluster/test_watch_narrow.py, and its recording in tests/data/watch/)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from reconciler.adapters.kube import _narrow, _parse
from reconciler.core.decision.render_kubeflow import KIND as PYTORCHJOB
from reconciler.core.decision.trigger import event_trigger
from reconciler.core.observation.observe import Observer, cached, observe_workloads

KINDS = ("Job", "Pod", PYTORCHJOB)


def whole(line: bytes) -> dict[str, Any]:
    event: dict[str, Any] = orjson.loads(line)
    event["object"] = cached(event.get("object") or {})
    return event


def narrow(kind: str, line: bytes) -> dict[str, Any]:
    shape = _narrow(kind)
    assert shape is not None
    event: dict[str, Any] = _parse(line, shape.event)
    event["object"] = cached(event.get("object") or {})
    return event


def _apply(cache: dict[str, Mapping[str, Any]], event: Mapping[str, Any]) -> Any:
    obj = event["object"]
    uid = str((obj.get("metadata") or {}).get("uid"))
    before = cache.get(uid)
    if event["type"] in ("ADDED", "MODIFIED"):
        cache[uid] = obj
    elif event["type"] == "DELETED":
        cache.pop(uid, None)
    return before


def replay(events: Iterable[tuple[str, bytes]]) -> dict[str, int]:
    """Apply ``(kind, line)`` events in order to both sets of caches; assert that after each
    one the observation (``observe_workloads`` and an ``Observer`` each) and the event's
    trigger are equal. Returns how many events of each type were replayed."""
    caches: dict[str, dict[str, dict[str, Mapping[str, Any]]]] = {
        "whole": {k: {} for k in KINDS},
        "narrow": {k: {} for k in KINDS},
    }
    observers = {"whole": Observer(), "narrow": Observer()}
    counts: dict[str, int] = {}
    for kind, line in events:
        full, thin = whole(line), narrow(kind, line)
        assert full["type"] == thin["type"]
        if full["type"] == "BOOKMARK":
            continue
        counts[f"{kind} {full['type']}"] = counts.get(f"{kind} {full['type']}", 0) + 1
        triggers = []
        for name, event in (("whole", full), ("narrow", thin)):
            before = _apply(caches[name][kind], event)
            triggers.append(event_trigger(kind, event["type"], before, event["object"]))
        assert triggers[0] == triggers[1], line[:300]
        states = {}
        for name, held in caches.items():
            jobs, pods, pytorchjobs = (list(held[k].values()) for k in KINDS)
            states[name] = observe_workloads("local", jobs, pods, pytorchjobs)
            assert observers[name].observe("local", jobs, pods, pytorchjobs) == states[name]
        assert states["narrow"] == states["whole"], line[:300]
    return counts
