"""The narrow watch caches (``Kube.watch_managed(..., narrow=True)``: each object decoded
by msgspec into the fields observation reads, ``core.observation.observe.OBSERVED_FIELDS``) give the
same observation as the whole objects: on events recorded from a real apiserver (Jobs,
Indexed Jobs, PyTorchJobs, their pods; succeeded, failed, evicted, unschedulable, deleted),
and on generated objects with any JSON anywhere (fields observation reads and others, of
the expected JSON types or not)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from support.kube_objects import job, pod
from support.paths import DATA
from support.watch_replay import replay

from reconciler.adapters.kube import Kube, KubeError, WatchExpired, narrowed
from reconciler.core.decision.trigger import event_trigger
from reconciler.core.observation.observe import cached, observe_workloads

CORPUS = DATA / "watch"


def _recorded() -> list[tuple[str, bytes]]:
    events = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            events.append((str(record["kind"]), orjson.dumps(record["event"])))
    return events


def test_recorded_events_observe_the_same_narrow_and_whole() -> None:
    events = _recorded()
    counts = replay(events)
    # what the recording covers (tests/cluster/test_watch_narrow.py made it)
    for kind in ("Job", "Pod", "PyTorchJob"):
        assert counts.get(f"{kind} ADDED", 0) >= 1, counts
        assert counts.get(f"{kind} MODIFIED", 0) >= 1, counts
    assert counts.get("Pod DELETED", 0) >= 1, counts
    texts = [line for _, line in events]
    for needle in (
        b'"completionMode":"Indexed"',
        b'"reason":"BackoffLimitExceeded"',
        b'"type":"DisruptionTarget"',
        b'"reason":"Unschedulable"',
        b'"deletionTimestamp"',
        b'"type":"Succeeded"',
        b'"managedFields"',
    ):
        assert any(needle in text for text in texts), needle


def pytorchjob(version: int, end: str = "") -> dict[str, Any]:
    base = job(7, "", version)
    replica = {"replicas": 1, "template": base["spec"]["template"]}
    status: dict[str, Any] = {"startTime": "2026-12-04T05:00:01Z", "conditions": []}
    if end:
        status["conditions"].append(
            {"type": end, "status": "True", "message": "PyTorchJob backoff limit reached"}
        )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {**base["metadata"], "name": "p-op-7-g1", "uid": "ptj-7"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": copy.deepcopy(replica)}},
        "status": status,
    }


def kubeflow_pod(n: int, replica: str, version: int) -> dict[str, Any]:
    out = pod(7, n, "Running", version)
    out["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": "p-op-7-g1",
        "training.kubeflow.org/replica-type": replica,
        "training.kubeflow.org/replica-index": "0",
    }
    out["status"]["containerStatuses"] = [
        {"name": "main", "state": {"terminated": {"message": '{"loss": 0.1}', "exitCode": 0}}}
    ]
    return out


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)  # wider ones: see the note in the docs
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "True", "False", "Running", "Complete", "Indexed", "2", "500m", "1Gi"])
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
# Where a value may land: fields observation reads, their parents, and others.
PATHS = [
    ("metadata",),
    ("metadata", "labels"),
    ("metadata", "labels", "job-name"),
    ("metadata", "annotations"),
    ("metadata", "annotations", "reconciler.dev/generation"),
    ("metadata", "annotations", "batch.kubernetes.io/job-completion-index"),
    ("metadata", "resourceVersion"),
    ("metadata", "deletionTimestamp"),
    ("metadata", "managedFields"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("spec", "parallelism"),
    ("spec", "completionMode"),
    ("spec", "nodeName"),
    ("spec", "template"),
    ("spec", "template", "spec"),
    ("spec", "template", "spec", "containers"),
    ("spec", "template", "spec", "containers", 0),
    ("spec", "template", "spec", "containers", 0, "resources"),
    ("spec", "template", "spec", "containers", 0, "resources", "limits"),
    ("spec", "template", "spec", "initContainers"),
    ("spec", "template", "spec", "volumes"),
    ("spec", "pytorchReplicaSpecs"),
    ("spec", "pytorchReplicaSpecs", "Worker"),
    ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec"),
    ("status",),
    ("status", "phase"),
    ("status", "startTime"),
    ("status", "completionTime"),
    ("status", "conditions"),
    ("status", "conditions", 0),
    ("status", "conditions", 0, "type"),
    ("status", "conditions", 0, "lastTransitionTime"),
    ("status", "containerStatuses"),
    ("status", "containerStatuses", 0, "state"),
    ("status", "containerStatuses", 0, "state", "terminated"),
    ("status", "containerStatuses", 0, "state", "terminated", "message"),
    ("status", "hostIP"),
    ("unknownTopLevel",),
]


def _put(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """Set ``path`` to ``value`` where the path's parents exist (else nothing)."""
    here: Any = obj
    for step in path[:-1]:
        if isinstance(step, int):
            if not isinstance(here, list) or len(here) <= step:
                return
        elif not isinstance(here, dict) or step not in here:
            return
        here = here[step]
    last = path[-1]
    if isinstance(last, int):
        if isinstance(here, list) and len(here) > last:
            here[last] = value
    elif isinstance(here, dict):
        here[last] = value


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # the same failure on both sides counts as the same
        return type(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["job", "indexed", "sidecar", "complete", "failed", "deleting", "pytorchjob"]),
    st.lists(st.tuples(st.sampled_from(PATHS), JSON), max_size=3),
    st.lists(st.tuples(st.sampled_from(PATHS), JSON), max_size=3),
)
def test_generated_objects_observe_the_same_narrow_and_whole(
    which: str,
    workload_changes: list[tuple[tuple[Any, ...], Any]],
    pod_changes: list[tuple[tuple[Any, ...], Any]],
) -> None:
    if which == "pytorchjob":
        kind, obj = "PyTorchJob", pytorchjob(5, "Failed")
        pods = [kubeflow_pod(0, "master", 6), kubeflow_pod(1, "worker", 6)]
    else:
        end = {"complete": "Complete", "failed": "Failed", "deleting": "Deleting"}.get(which, "")
        kind, obj = "Job", job(7, end, 5, 2 if which == "indexed" else 1)
        pods = [pod(7, 0, "Running", 6), pod(7, 1, "Unschedulable", 6)]
        if which == "sidecar":  # a native sidecar and an init container: counted apart
            obj["spec"]["template"]["spec"]["initContainers"] = [
                {"name": "log", "restartPolicy": "Always", "resources": {"limits": {"cpu": "2"}}},
                {"name": "init", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}},
            ]
    for path, value in workload_changes:
        _put(obj, path, value)
    for path, value in pod_changes:
        _put(pods[0], path, value)
    whole_obj = cached(orjson.loads(orjson.dumps(obj)))
    whole_pods = [cached(orjson.loads(orjson.dumps(p))) for p in pods]
    thin_obj = narrowed(kind, obj)
    thin_pods = [narrowed("Pod", p) for p in pods]

    def observe(workload: Any, own: list[Any]) -> Any:
        if kind == "Job":
            return lambda: observe_workloads("local", [workload], own)
        return lambda: observe_workloads("local", [], own, [workload])

    assert _outcome(observe(thin_obj, thin_pods)) == _outcome(observe(whole_obj, whole_pods))
    for event_type in ("ADDED", "MODIFIED", "DELETED"):
        assert _outcome(lambda t=event_type: event_trigger(kind, t, None, thin_obj)) == (
            _outcome(lambda t=event_type: event_trigger(kind, t, None, whole_obj))
        )


def test_the_narrow_decode_keeps_only_what_observation_reads() -> None:
    obj = job(1, "Complete", 3)
    obj["spec"]["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    thin = narrowed("Job", obj)
    assert "managedFields" not in thin["metadata"]
    assert "volumes" not in thin["spec"]["template"]["spec"]
    assert thin["status"]["conditions"][0]["type"] == "Complete"
    assert thin["metadata"]["annotations"] == obj["metadata"]["annotations"]
    # a kind without a narrow shape is kept whole, less managedFields
    node = {"metadata": {"name": "n", "managedFields": []}, "status": {"allocatable": {}}}
    assert narrowed("Node", node) == {"metadata": {"name": "n"}, "status": {"allocatable": {}}}


def _watching(lines: list[bytes]) -> Kube:
    """A ``Kube`` whose watches read ``lines`` (the stream's lines, as
    ``Kube._watch_lines`` gives them)."""
    kube = Kube(client.ApiClient())

    def watch_lines(*_args: object) -> Iterator[bytes]:
        yield from lines

    kube._watch_lines = watch_lines  # type: ignore[method-assign,assignment]
    return kube


def test_a_narrow_watch_reads_an_error_event_whole() -> None:
    gone = {"kind": "Status", "status": "Failure", "message": "too old", "code": 410}
    kube = _watching([orjson.dumps({"type": "ERROR", "object": gone})])
    with pytest.raises(WatchExpired, match="too old"):
        list(kube.watch_managed("Job", "1", narrow=True))
    # an ERROR whose Status would fit the Job's shape (no "status" string) is read whole too
    quiet = {"message": "internal error", "code": 500}
    kube = _watching([orjson.dumps({"type": "ERROR", "object": quiet})])
    with pytest.raises(KubeError, match="internal error") as raised:
        list(kube.watch_managed("Job", "1", narrow=True))
    assert raised.value.status == 500


def test_a_narrow_watch_yields_narrow_objects_and_rejects_what_is_not_json() -> None:
    obj = job(2, "", 9)
    kube = _watching([orjson.dumps({"type": "ADDED", "object": obj}), b"", b"not json"])
    events = kube.watch_managed("Job", "1", narrow=True)
    first = next(events)
    assert (first.type, first.object) == ("ADDED", narrowed("Job", obj))
    with pytest.raises(KubeError, match="bad event"):
        next(events)
