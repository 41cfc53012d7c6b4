"""What the watch caches keep (``cached``: no ``managedFields``) and the observation with a
memory (``Observer``) give the same states as ``observe_workloads`` on the whole objects."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.kube_objects import job, pod

from reconciler.core.observation.observe import Observer, cached, observe_workloads

POD_PHASES = ("", "Pending", "Unschedulable", "Running", "Succeeded", "Failed")
JOB_ENDS = ("", "Complete", "Failed", "Deleting")


WORKLOAD = st.tuples(
    st.sampled_from(JOB_ENDS),
    st.lists(st.sampled_from(POD_PHASES), max_size=2),
    st.sampled_from((1, 2)),
)


def listing(
    workloads: list[tuple[str, list[str], int]], version: int
) -> tuple[list[Any], list[Any]]:
    jobs, pods = [], []
    for i, (end, phases, parallelism) in enumerate(workloads):
        jobs.append(job(i, end, version + i, parallelism))
        pods += [pod(i, n, p, version + i) for n, p in enumerate(phases) if p]
    return jobs, pods


@settings(max_examples=60, deadline=None)
@given(st.lists(WORKLOAD, max_size=6))
def test_observation_of_the_cached_objects_equals_that_of_the_whole_ones(
    workloads: list[tuple[str, list[str], int]],
) -> None:
    jobs, pods = listing(workloads, 1)
    whole = observe_workloads("local", jobs, pods)
    kept_jobs = [cached(copy.deepcopy(j)) for j in jobs]
    kept_pods = [cached(copy.deepcopy(p)) for p in pods]
    assert all("managedFields" not in o["metadata"] for o in kept_jobs + kept_pods)
    assert observe_workloads("local", kept_jobs, kept_pods) == whole


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(WORKLOAD, max_size=5), min_size=1, max_size=5))
def test_the_observer_gives_what_observe_workloads_gives_cycle_after_cycle(
    rounds: list[list[tuple[str, list[str], int]]],
) -> None:
    """Each round changes some workloads (a new resourceVersion) and drops or adds others;
    a workload that did not change keeps its resourceVersion."""
    observer = Observer()
    previous: dict[str, tuple[tuple[str, list[str], int], int]] = {}
    version = 1
    for workloads in rounds:
        jobs, pods = [], []
        for i, workload in enumerate(workloads):
            key = f"{i}"
            if previous.get(key, (None, 0))[0] != workload:
                version += 10
                previous[key] = (workload, version)
            at = previous[key][1]
            end, phases, parallelism = workload
            jobs.append(job(i, end, at, parallelism))
            pods += [pod(i, n, p, at) for n, p in enumerate(phases) if p]
        assert observer.observe("local", jobs, pods) == observe_workloads("local", jobs, pods)


def test_an_unchanged_workload_is_not_observed_again_and_a_changed_one_is() -> None:
    observer = Observer()
    jobs = [job(0, "", 5), job(1, "", 6)]
    pods = [pod(0, 0, "Running", 7), pod(1, 0, "Pending", 8)]
    first = observer.observe("local", jobs, pods)
    again = observer.observe("local", [job(0, "", 5), job(1, "", 6)], pods)
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    moved = observer.observe("local", jobs, [pods[0], pod(1, 0, "Running", 9)])
    assert moved[0] is first[0]
    assert (moved[1].phase.value, first[1].phase.value) == ("Running", "Dispatched")
    # the same uid on another cluster is another workload
    other = observer.observe("other", jobs, pods)
    assert [s.cluster for s in other] == ["other", "other"]
    assert observer.observe("local", jobs, pods)[0] is first[0]
