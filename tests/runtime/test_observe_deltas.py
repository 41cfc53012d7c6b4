"""The Observer fed by the watch caches' changes (``Informer.changes``) gives, after any
sequence of list and watch events, the states ``observe_workloads`` gives over the objects
the caches hold, in their order: Jobs, Indexed Jobs, PyTorchJobs and their pods added,
changed and deleted in any order (pods before their Job, an object deleted and added again,
a pod's owner changed), relists, a kind no longer served, a fresh list in between, and
several clusters. And the cycle's read of the caches: the listing's version before the
changes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from reconciler.adapters.kube import ObjectList
from reconciler.core.decision.render import (
    ANNOTATION_GENERATION,
    ANNOTATION_OPERATION,
)
from reconciler.core.observation import observe as observe_module
from reconciler.core.observation.gang import (
    ANNOTATION_COMPLETION_INDEX,
    LABEL_KUBEFLOW_JOB_NAME,
    LABEL_KUBEFLOW_REPLICA_INDEX,
    LABEL_KUBEFLOW_REPLICA_TYPE,
)
from reconciler.core.observation.observe import CacheChanges, Observer, observe_workloads
from reconciler.core.types import CompiledRepo, Phase
from reconciler.runtime.informer import Informer

KINDS = ("Job", "Pod", "PyTorchJob")
UIDS = {"Job": 4, "Pod": 6, "PyTorchJob": 3}  # small pools: the same uid comes back
NAMES = ("a", "b")
NAMESPACES = ("n", "n", "n", "m")
CREATED = ("2026-12-04T05:00:00Z", "2026-12-04T05:00:01Z")  # ties are common
JOB_ENDS = ("", "Complete", "Failed", "FailureTarget", "Deleting")
POD_PHASES = ("Running", "Pending", "", "Unschedulable", "Succeeded", "Failed")
PYTORCH_ENDS = ("", "Succeeded", "Failed", "Restarting", "Deleting")


@dataclass
class Server:
    """What one cluster's apiserver holds, per kind, by uid."""

    objects: dict[str, dict[str, dict[str, Any]]] = field(
        default_factory=lambda: {k: {} for k in KINDS}
    )
    version: int = 1
    order: random.Random = field(default_factory=lambda: random.Random(0))

    def list_managed(self, kind: str, *_: Any, **__: Any) -> ObjectList:
        items = list(self.objects[kind].values())
        self.order.shuffle(items)  # a list's order is the server's, not the cache's
        return ObjectList(tuple(items), str(self.version))


def _meta(draw: Any, uid: str, version: int, workload: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": draw(st.sampled_from(NAMES)),
        "namespace": draw(st.sampled_from(NAMESPACES)),
        "uid": uid,
        "resourceVersion": str(version),
        "creationTimestamp": draw(st.sampled_from(CREATED)),
    }
    if workload:
        operation = draw(st.sampled_from(("p/x", "p/y", None)))
        if operation is not None:
            meta["annotations"] = {
                ANNOTATION_OPERATION: operation,
                ANNOTATION_GENERATION: draw(st.sampled_from(("1", "2"))),
            }
        if draw(st.sampled_from(JOB_ENDS)) == "Deleting":
            meta["deletionTimestamp"] = "2026-12-04T05:09:00Z"
    return meta


def _conditions(end: str) -> list[dict[str, Any]]:
    if end in ("", "Deleting"):
        return []
    return [{"type": end, "status": "True", "lastTransitionTime": "2026-12-04T05:05:00Z"}]


@st.composite
def objects(draw: Any, kind: str, uid: str, version: int) -> dict[str, Any]:
    meta = _meta(draw, uid, version, workload=kind != "Pod")
    container = {"resources": {"requests": {"cpu": draw(st.sampled_from(("1", "2")))}}}
    template = {"spec": {"containers": [container]}}
    if kind == "Job":
        parallelism = draw(st.sampled_from((1, 2)))
        spec: dict[str, Any] = {"parallelism": parallelism, "template": template}
        if parallelism > 1:
            spec["completionMode"] = "Indexed"
        status = {"conditions": _conditions(draw(st.sampled_from(JOB_ENDS)))}
        return {"metadata": meta, "spec": spec, "status": status}
    if kind == "PyTorchJob":
        workers = draw(st.sampled_from((0, 1)))
        specs: dict[str, Any] = {"Master": {"replicas": 1, "template": template}}
        if workers:
            specs["Worker"] = {"replicas": workers, "template": template}
        end = draw(st.sampled_from(PYTORCH_ENDS))
        status = {"conditions": _conditions(end)}
        return {"metadata": meta, "spec": {"pytorchReplicaSpecs": specs}, "status": status}
    labels: dict[str, Any] = {}
    job = draw(st.sampled_from((*NAMES, *NAMES, None)))
    if job is not None:
        labels["job-name"] = job
        labels[ANNOTATION_COMPLETION_INDEX] = draw(st.sampled_from(("0", "1")))
    owner = draw(st.sampled_from(("a", "b", None, None)))
    if owner is not None:
        labels[LABEL_KUBEFLOW_JOB_NAME] = owner
        replica = draw(st.sampled_from(("master", "worker")))
        labels[LABEL_KUBEFLOW_REPLICA_TYPE] = replica
        labels[LABEL_KUBEFLOW_REPLICA_INDEX] = "0"
    meta["labels"] = labels
    phase = draw(st.sampled_from(POD_PHASES))
    pod_status: dict[str, Any] = {}
    pod_spec: dict[str, Any] = {}
    if phase == "Unschedulable":
        pod_status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "full"}],
        }
    elif phase:
        pod_status = {"phase": phase}
        pod_spec = {"nodeName": draw(st.sampled_from(("node-1", "node-2")))}
        if phase in ("Succeeded", "Failed"):
            terminated = {"message": draw(st.sampled_from(('{"loss": 1}', "not json")))}
            pod_status["containerStatuses"] = [{"state": {"terminated": terminated}}]
    return {"metadata": meta, "spec": pod_spec, "status": pod_status}


CLUSTERS = ("one", "two")
CLUSTER = st.sampled_from(("one", "one", "one", "two"))
EVENT = st.tuples(
    st.just("event"),
    CLUSTER,
    st.sampled_from(("Job", "Pod", "Pod", "PyTorchJob")),
    st.sampled_from(("ADDED", "MODIFIED", "MODIFIED", "DELETED")),
    st.integers(0, 5),
    st.sampled_from((False, False, False, True)),  # missed by the watch (a relist brings it)
)
WHAT = ("event",) * 12 + ("cycle",) * 4 + ("relist", "relist", "unserved", "fresh")
OTHERS = {
    "cycle": st.tuples(st.just("cycle"), CLUSTER, st.sampled_from((False, False, False, True))),
    "relist": st.tuples(st.just("relist"), CLUSTER, st.sampled_from(KINDS)),
    "unserved": st.tuples(st.just("unserved"), CLUSTER, st.sampled_from(KINDS)),
    "fresh": st.tuples(st.just("fresh"), CLUSTER),
}
STEP = st.sampled_from(WHAT).flatmap(lambda what: EVENT if what == "event" else OTHERS[what])


class World:
    """Per cluster: its apiserver and its three watch caches (driven by hand), and an
    Observer over all of them, read as ``Reconciler._read`` reads them."""

    def __init__(self) -> None:
        self.servers = {c: Server() for c in CLUSTERS}
        self.caches = {
            c: tuple(
                Informer(self.servers[c], kind, track=True)  # type: ignore[arg-type]
                for kind in KINDS
            )
            for c in CLUSTERS
        }
        self.observer = Observer()
        self.again = dict.fromkeys(CLUSTERS, False)  # the observer follows the caches
        self.cycles = 0
        self.states = 0  # states compared, over all cycles
        for caches in self.caches.values():
            for cache in caches:
                cache._relist()

    def event(self, draw: Any, step: tuple[Any, ...]) -> None:
        _, cluster, kind, event_type, index, missed = step
        server = self.servers[cluster]
        uid = f"{kind}-{index % UIDS[kind]}"
        server.version += 1
        if event_type == "DELETED":
            obj = server.objects[kind].pop(uid, None)
            if obj is None:
                return
        else:
            obj = draw(objects(kind, uid, server.version))
            server.objects[kind][uid] = obj
        if not missed:
            self.caches[cluster][KINDS.index(kind)]._apply(event_type, obj)

    def cycle(self, cluster: str, reset: bool) -> None:
        jobs, pods, pytorchjobs = self.caches[cluster]
        # as _read: everything when the observer's copy came from a fresh list
        changes = [c.changes(reset=reset or not self.again[cluster]) for c in (jobs, pods)]
        states = self.observer.update(
            cluster, *changes, pytorchjobs.changes(reset=reset or not self.again[cluster])
        )
        self.again[cluster] = True
        expected = observe_workloads(cluster, jobs.items(), pods.items(), pytorchjobs.items())
        assert states == expected
        self.cycles += 1
        self.states += len(states)

    def fresh(self, cluster: str) -> None:
        server = self.servers[cluster]
        listed = [server.list_managed(kind).items for kind in KINDS]
        states = self.observer.observe(cluster, listed[0], listed[1], listed[2])
        assert states == observe_workloads(cluster, *listed)
        self.again[cluster] = False


@settings(max_examples=400, deadline=None)
@given(st.lists(STEP, min_size=10, max_size=100), st.data())
@pytest.mark.slow
def test_the_observer_fed_changes_equals_observe_workloads_over_the_caches(
    steps: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    world = World()
    for step in steps:
        what, cluster = step[0], step[1]
        if what == "event":
            world.event(data.draw, step)
        elif what == "relist":
            world.caches[cluster][KINDS.index(step[2])]._relist()
        elif what == "unserved":
            world.caches[cluster][KINDS.index(step[2])]._forget()
        elif what == "cycle":
            world.cycle(cluster, step[2])
        else:
            world.fresh(cluster)
    for cluster in CLUSTERS:
        world.cycle(cluster, False)
    event(f"states compared: {min(world.states // 20, 5) * 20}+")


def _job(uid: str, name: str, version: int, operation: str = "p/x") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "n",
            "uid": uid,
            "resourceVersion": str(version),
            "annotations": {ANNOTATION_OPERATION: operation},
        },
        "spec": {},
        "status": {},
    }


def _pod(uid: str, job: str, version: int, phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-{uid}",
            "namespace": "n",
            "uid": uid,
            "resourceVersion": str(version),
            "labels": {"job-name": job},
        },
        "status": {"phase": phase},
    }


def test_a_cycle_observes_only_what_changed_and_keeps_the_other_states() -> None:
    observer = Observer()
    jobs = [_job("j1", "a", 1, "p/a"), _job("j2", "b", 2, "p/b")]
    pods = [_pod("p1", "a", 3, "Pending"), _pod("p2", "b", 4, "Pending")]
    first = observer.observe("local", jobs, pods)
    assert [s.phase.value for s in first] == ["Dispatched", "Dispatched"]
    nothing = CacheChanges({})
    assert observer.update("local", nothing, nothing) is first  # nothing changed
    running = _pod("p2", "b", 5, "Running")
    moved = observer.update("local", nothing, CacheChanges({"p2": (running, False)}))
    assert moved[0] is first[0]  # p/a: not observed again
    assert (moved[1].operation, moved[1].phase.value) == ("p/b", "Running")
    gone = observer.update("local", CacheChanges({"j1": (None, False)}), nothing)
    assert [s.operation for s in gone] == ["p/b"] and gone[0] is moved[1]


def test_a_job_whose_pod_is_deleted_or_relabelled_is_observed_again() -> None:
    observer = Observer()
    nothing = CacheChanges({})
    observer.observe("local", [_job("j1", "a", 1)], [_pod("p1", "a", 2, "Running")])
    (state,) = observer.update("local", nothing, CacheChanges({"p1": (None, False)}))
    assert (state.phase.value, state.pod) == ("Dispatched", None)
    observer.observe("local", [_job("j1", "a", 1)], [_pod("p1", "a", 2, "Running")])
    (state,) = observer.update(
        "local", nothing, CacheChanges({"p1": (_pod("p1", "b", 3, "Running"), False)})
    )
    assert (state.phase.value, state.pod) == ("Dispatched", None)


def test_a_pod_whose_owner_changes_in_place_keeps_its_place_among_the_owners_pods() -> None:
    """Two pods created in the same second: the Job's pod is the first of them in the cache
    (``_latest_pod``), wherever the relabelled one joined the Job's pods."""
    observer = Observer()
    nothing = CacheChanges({})
    first = _pod("p2", "b", 2, "Pending")
    second = _pod("p1", "a", 3, "Running")
    for pod in (first, second):
        pod["metadata"]["creationTimestamp"] = "2026-12-04T05:00:00Z"
    (state,) = observer.observe("local", [_job("j1", "a", 1)], [first, second])
    assert state.pod == "a-p1"
    relabelled = _pod("p2", "a", 4, "Pending")
    relabelled["metadata"]["creationTimestamp"] = "2026-12-04T05:00:00Z"
    (state,) = observer.update("local", nothing, CacheChanges({"p2": (relabelled, False)}))
    assert state == observe_workloads("local", [_job("j1", "a", 1)], [relabelled, second])[0]
    assert (state.pod, state.phase.value) == ("a-p2", "Dispatched")


def test_a_pod_that_comes_before_its_job_is_its_pod_when_the_job_comes() -> None:
    observer = Observer()
    nothing = CacheChanges({})
    pod = _pod("p1", "a", 1, "Running")
    assert observer.update("local", nothing, CacheChanges({"p1": (pod, True)})) == ()
    (state,) = observer.update("local", CacheChanges({"j1": (_job("j1", "a", 2), True)}), nothing)
    assert (state.phase.value, state.pod) == ("Running", "a-p1")


def test_the_informer_keeps_changes_in_cache_order_and_a_list_is_a_reset() -> None:
    server = Server()
    informer = Informer(server, "Job", track=True)  # type: ignore[arg-type]
    server.objects["Job"] = {"j1": _job("j1", "a", 1)}
    informer._relist()
    first = informer.changes()
    assert first.reset and list(first.changed) == ["j1"]
    assert informer.changes() == CacheChanges({})
    informer._apply("MODIFIED", _job("j1", "a", 3))
    informer._apply("ADDED", _job("j2", "b", 2))
    informer._apply("DELETED", _job("j1", "a", 4))
    informer._apply("ADDED", _job("j1", "a", 5))  # deleted and added again: now last
    changes = informer.changes()
    assert not changes.reset
    assert [(u, c[0]["metadata"]["resourceVersion"], c[1]) for u, c in changes.changed.items()] == [
        ("j2", "2", True),
        ("j1", "5", True),
    ]
    assert [o["metadata"]["uid"] for o in informer.items()] == ["j2", "j1"]
    informer._relist()
    assert informer.changes().reset
    untracked = Informer(server, "Job")  # type: ignore[arg-type]
    untracked._relist()
    untracked._apply("ADDED", _job("j3", "c", 6))
    assert untracked._changed == {}  # nothing kept for nobody: changes() lists everything
    assert untracked.changes().reset


@dataclass
class _Created:
    """A queue of one slot and two operations on the fake cluster, watched: the first
    cycle dispatched ``created``, whose ADDED event the Job cache holds back (``held``)."""

    h: Any
    jobs: Informer
    created: str
    held: list[tuple[str, Any]]
    apply: Any  # the cache's own ``_apply``


def _created_unseen() -> _Created:
    from support.builders import World
    from support.fake_kube import FakeCycles
    from support.helpers import wait_until

    def repo(paused: bool) -> CompiledRepo:
        w = World().queue("one", concurrency=1, paused=paused)
        w.op("p/a", queue="one")
        w.op("p/b", queue="one")
        return w.repo("v1" if paused else "v2")

    h = FakeCycles(repo(paused=True), watch=True)
    h.cycle()  # the caches start and list
    h.repo = repo(paused=False)
    jobs = h.reconciler._informers["local"][0]
    real_apply = jobs._apply
    held: list[tuple[str, Any]] = []
    jobs._apply = lambda kind, obj: held.append((kind, obj))  # type: ignore[method-assign]
    (created,) = h.cycle().dispatched
    wait_until(lambda: held, timeout=10, what="the create's event")  # the watch has it
    return _Created(h, jobs, created, held, real_apply)


def test_a_create_the_watch_shows_while_the_cycle_reads_its_caches_still_counts() -> None:
    """The watch thread may apply an event between the cycle's read of the changes and its
    read of the listing's resourceVersion. The version must not cover an event the states
    lack: a create past it would be counted neither listed nor in flight, and its queue's
    one slot given twice."""
    w = _created_unseen()
    real_changes = w.jobs.changes

    def changes_then_event(*, reset: bool = False) -> CacheChanges:
        out = real_changes(reset=reset)
        for event_type, obj in w.held:  # ... and applies it now, while the cycle reads
            w.apply(event_type, obj)
        w.held.clear()
        return out

    w.jobs.changes = changes_then_event  # type: ignore[method-assign]
    second = w.h.cycle()
    assert second.dispatched == ()
    assert second.states[w.created].phase is Phase.DISPATCHED


def test_a_create_still_counts_while_the_job_cache_lists_again() -> None:
    """After a 410 the cache forgets its version and keeps what it held until the list
    returns. Read then, it would say "a fresh list" (no version: nothing lags) of objects
    that may be stale, and the create it lacks would count nowhere: the cycle lists the
    cluster afresh instead."""
    w = _created_unseen()
    with w.jobs._lock:  # what the watch does on a 410, before its list returns
        w.jobs._version = None
    assert w.jobs.healthy
    second = w.h.cycle()
    assert second.dispatched == ()
    assert second.states[w.created].phase is Phase.DISPATCHED


def test_a_change_that_failed_half_way_leaves_nothing_in_the_next_whole_listing() -> None:
    """A bug observing one Job raises half-way through a batch that deleted the others;
    whatever the view kept of them, the next reset (a whole listing, or the cycle's read
    of the caches after that failure, which takes all they hold) gives exactly what is
    listed."""
    observer = Observer()
    jobs = [_job(f"j{i}", f"n{i}", i + 1, f"p/op{i}") for i in range(20)]
    observer.observe("c", jobs, [])
    bad = _job("j0", "n0", 100, "p/op0")
    real = observe_module._observe_job

    def fails_on_bad(cluster: str, job: Any, *args: Any, **kwargs: Any) -> Any:
        if job is bad:
            raise ValueError("a bug observing one Job")
        return real(cluster, job, *args, **kwargs)

    batch = {f"j{i}": (None, False) for i in range(1, 20)} | {"j0": (bad, False)}
    with (
        mock.patch.object(observe_module, "_observe_job", fails_on_bad),
        pytest.raises(ValueError),
    ):
        observer.update("c", CacheChanges(batch), CacheChanges({}))
    good = _job("j0", "n0", 101, "p/op0")
    assert observer.observe("c", [good], []) == observe_workloads("c", [good], [])


def test_the_watches_of_a_cluster_gone_from_the_config_stop() -> None:
    """Nothing reads them any more: their threads, connections and folds would go on."""
    from support.builders import World
    from support.fake_kube import FakeCycles

    def repo(*clusters: str) -> CompiledRepo:
        w = World()
        for name in clusters:
            w.cluster(name).queue(f"q-{name}", cluster=name)
        return w.repo("+".join(clusters))

    h = FakeCycles(repo("local", "other"), watch=True)
    h.cycle()
    other = h.reconciler._informers["other"]
    h.repo = repo("local")
    h.cycle()
    assert set(h.reconciler._informers) == {"local"}
    assert "other" not in h.reconciler._observed_from
    assert all(informer._stop.is_set() for informer in other)
