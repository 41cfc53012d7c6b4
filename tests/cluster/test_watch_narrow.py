"""The narrow watch caches against a real apiserver: every watch event of Jobs, pods and
PyTorchJobs that live through the cases observation tells apart (a Job that succeeds with
outputs, an Indexed Job, a Job whose pod fails, a pod evicted through the Eviction API, an
unschedulable pod, a Job deleted in the foreground, a PyTorchJob with its Master and Worker
pods and the conditions its operator sets) is decoded whole and narrow, and after each
event the observation, the Observer's and the event's trigger are the same on both
(tests/support/watch_replay.py). A list of the narrow caches observes the same as a whole list.

With ``RECONCILER_RECORD_WATCH=DIR`` it also writes the events it saw to
``DIR/recorded.jsonl``: tests/data/watch/ holds such a recording, replayed by the fast
suite (tests/adapters/test_observe_narrow.py)."""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from support.builders import run_op
from support.cluster import KubeCluster
from support.helpers import wait_until
from support.watch_replay import replay

from reconciler.adapters.kube import MANAGED_SELECTOR, Kube, _byte_lines
from reconciler.core.decision.render import LABEL_MANAGED_BY, MANAGER, render_operation
from reconciler.core.observation.observe import observe_workloads
from reconciler.core.types import Phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

KINDS = ("Job", "Pod", "PyTorchJob")


def _job(namespace: str, name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    op = run_op(
        name,
        {
            "container": {"image": "busybox", "resources": {"requests": {"cpu": "100m"}}},
            "environment": {"annotations": annotations, **spec},
        },
        project="w",
        namespace=namespace,
        queue="q",
        requests={"cpu": "100m"},
    )
    rendered = render_operation(op, {}, config_version="c0ffee", dispatched_at=datetime.now(UTC))
    return dict(rendered.job)


class Recorder:
    """Raw watch lines of our Jobs, pods and PyTorchJobs from ``since``, one thread each."""

    def __init__(self, kube: Kube, since: dict[str, str]) -> None:
        self.kube = kube
        self.lines: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.threads = [
            threading.Thread(target=self._watch, args=(kind, since[kind]), daemon=True)
            for kind in KINDS
        ]
        for thread in self.threads:
            thread.start()

    def _watch(self, kind: str, version: str) -> None:
        """Watches of 2 s, each from the last event's resourceVersion, until stopped."""
        while not self.stopped.is_set():
            resp = self.kube._lister(kind)(
                label_selector=MANAGED_SELECTOR,
                resource_version=version,
                timeout_seconds=2,
                watch=True,
                _preload_content=False,
                _request_timeout=(5, 30),
            )
            for line in _byte_lines(resp, f"watching {kind}s", amt=None):
                if line.strip():
                    meta = (orjson.loads(line).get("object") or {}).get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    with self.lock:
                        self.lines.append((kind, line))

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def seen(self) -> list[tuple[str, bytes]]:
        with self.lock:
            return list(self.lines)


def _mine(events: list[tuple[str, bytes]], namespace: str) -> list[tuple[str, bytes]]:
    out = []
    for kind, line in events:
        meta = (orjson.loads(line).get("object") or {}).get("metadata") or {}
        if meta.get("namespace") == namespace:
            out.append((kind, line))
    return out


@pytest.fixture
def recorder(kube_cluster: KubeCluster) -> Iterator[Recorder]:
    kube = Kube(kube_cluster.api_client())
    since = {}
    for kind in KINDS:
        since[kind] = kube.list_managed(kind).resource_version
    recording = Recorder(kube, since)
    try:
        yield recording
    finally:
        recording.stop()


def test_narrow_caches_observe_what_the_whole_objects_do(
    kube_cluster: KubeCluster,
    namespace: str,
    pytorchjob_crd_installed: client.ApiClient,
    recorder: Recorder,
) -> None:
    api = kube_cluster.api_client()
    kube = Kube(api)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    ns = namespace

    ok = _job(ns, "ok", {"reconciler.dev/simulated-duration": "1s",
                         "reconciler.dev/simulated-outputs": '{"loss": 0.5}'})  # fmt: skip
    indexed = _job(ns, "indexed", {"reconciler.dev/simulated-duration": "1s"})
    indexed["spec"].update(completionMode="Indexed", completions=2, parallelism=2)
    fails = _job(ns, "fails", {"reconciler.dev/simulated-failure": "1s"})
    fails["spec"]["backoffLimit"] = 0
    evicted = _job(ns, "evicted", {})
    evicted["spec"]["backoffLimit"] = 0
    stuck = _job(ns, "stuck", {}, nodeSelector={"gpu.type": "none-such"})
    deleted = _job(ns, "deleted", {})
    for manifest in (ok, indexed, fails, evicted, stuck, deleted):
        kube.create_or_adopt(manifest)

    # a PyTorchJob, its status written as its operator would, and its pods
    template = copy.deepcopy(ok["spec"]["template"])
    replica = {"replicas": 1, "restartPolicy": "Never", "template": template}
    name = "w-ddp-g1"
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {**copy.deepcopy(ok["metadata"]), "name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": copy.deepcopy(replica)}},
    }
    kube.create_or_adopt(pytorchjob)
    for role in ("master", "worker"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{role}-0",
                "namespace": ns,
                "labels": {
                    LABEL_MANAGED_BY: MANAGER,
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": role,
                    "training.kubeflow.org/replica-index": "0",
                },
                "annotations": {"reconciler.dev/simulated-duration": "1s"},
            },
            "spec": copy.deepcopy(template["spec"]),
        }
        core.create_namespaced_pod(ns, pod)

    def status(*conditions: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "status": {
                "startTime": now,
                "conditions": [
                    {"type": c, "status": "True", "reason": f"PyTorchJob{c}",
                     "message": f"PyTorchJob {name} is {c.lower()}.",
                     "lastUpdateTime": now, "lastTransitionTime": now}
                    for c in conditions
                ],
                "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 1}},
            }
        }  # fmt: skip
        custom.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", ns, "pytorchjobs", name, body
        )

    status("Created")
    status("Created", "Running")

    def running(job: str) -> list[client.V1Pod]:
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
        return [p for p in pods if p.status.phase == "Running"]

    wait_until(lambda: running("w-evicted-g1") and running("w-deleted-g1"), timeout=60,
               what="the long Jobs' pods to run")  # fmt: skip
    (victim,) = running("w-evicted-g1")
    core.create_namespaced_pod_eviction(
        victim.metadata.name,
        ns,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace=ns)),
    )
    batch.delete_namespaced_job("w-deleted-g1", ns, propagation_policy="Foreground")

    def ended(job: str) -> bool:
        got = batch.read_namespaced_job(job, ns)
        return any(c.type in ("Complete", "Failed") and c.status == "True"
                   for c in got.status.conditions or [])  # fmt: skip

    wait_until(lambda: all(ended(j) for j in ("w-ok-g1", "w-indexed-g1", "w-fails-g1",
                                              "w-evicted-g1")), timeout=90,
               what="the Jobs to end")  # fmt: skip

    def pods_done() -> bool:
        pods = core.list_namespaced_pod(ns, label_selector="training.kubeflow.org/job-name").items
        return all(p.status.phase == "Succeeded" for p in pods)

    wait_until(pods_done, timeout=60, what="the PyTorchJob's pods to succeed")
    status("Created", "Running", "Succeeded")

    def gone() -> bool:
        return not batch.list_namespaced_job(ns, field_selector="metadata.name=w-deleted-g1").items

    wait_until(gone, timeout=60, what="the Job deleted in the foreground to go")

    # the recording has seen the last writes: the PyTorchJob's Succeeded and the deletion
    def caught_up() -> bool:
        texts = [line for _, line in _mine(recorder.seen(), ns)]
        return any(b'"type":"Succeeded"' in t for t in texts) and any(
            t.startswith(b'{"type":"DELETED"') and b"w-deleted-g1" in t and b'"kind":"Job"' in t
            for t in texts
        )

    wait_until(caught_up, timeout=30, what="the watches to see the last events")
    events = _mine(recorder.seen(), ns)
    counts = replay(events)
    assert counts.get("Pod DELETED", 0) >= 1 and counts.get("Job DELETED", 0) >= 1, counts

    # what the whole caches observe covers every case
    listed = {k: [o for o in kube.list_managed(k).items if o["metadata"]["namespace"] == ns]
              for k in KINDS}  # fmt: skip
    states = {s.name: s for s in observe_workloads("local", *(listed[k] for k in KINDS))}
    assert states["w-ok-g1"].phase is Phase.SUCCEEDED
    assert states["w-ok-g1"].outputs == {"loss": 0.5}
    assert states["w-indexed-g1"].phase is Phase.SUCCEEDED
    assert states["w-fails-g1"].phase is Phase.FAILED
    assert states["w-evicted-g1"].phase is Phase.FAILED
    assert states["w-stuck-g1"].phase is Phase.DISPATCHED
    assert states["w-stuck-g1"].reason is not None
    assert states["w-stuck-g1"].reason.value == "WaitingForCapacity"
    assert states[name].phase is Phase.SUCCEEDED
    narrow = {k: [o for o in kube.list_managed(k, narrow=True).items
                  if o["metadata"]["namespace"] == ns] for k in KINDS}  # fmt: skip
    assert all("managedFields" not in o["metadata"] for k in KINDS for o in narrow[k])
    assert observe_workloads("local", *(narrow[k] for k in KINDS)) == observe_workloads(
        "local", *(listed[k] for k in KINDS)
    )

    out = os.environ.get("RECONCILER_RECORD_WATCH")
    if out:  # managedFields kept in each kind's first event only: half the bytes
        kept: set[str] = set()
        with (Path(out) / "recorded.jsonl").open("wb") as f:
            for kind, line in events:
                event = orjson.loads(line)
                if kind in kept:
                    event["object"]["metadata"].pop("managedFields", None)
                kept.add(kind)
                f.write(orjson.dumps({"kind": kind, "event": event}) + b"\n")
