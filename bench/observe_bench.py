"""Observation per cycle: N running Jobs with one pod each, C pods changed a cycle.

The Observer is fed what changed (``Observer.update``, as ``Reconciler._read`` feeds it
from the watch caches); ``--whole`` hands it the whole listing each cycle instead
(``Observer.observe``: what a cycle did before 2026-12-04, h24a, and still does on a fresh
list). Prints the CPU time (``time.process_time``) of the observation alone per cycle,
and checks the last states against ``observe_workloads``.

    PYTHONPATH=$PWD python bench/observe_bench.py [-n 10000] [-c 100] [--cycles 50] [--whole]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from reconciler.core.decision.render import ANNOTATION_OPERATION
from reconciler.core.observation.observe import CacheChanges, Observer, observe_workloads


def job(i: int, version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"w{i}",
            "namespace": "n",
            "uid": f"j{i}",
            "resourceVersion": str(version),
            "annotations": {ANNOTATION_OPERATION: f"p/op-{i}"},
        },
        "spec": {},
        "status": {},
    }


def pod(i: int, version: int, phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"w{i}-pod",
            "namespace": "n",
            "uid": f"p{i}",
            "resourceVersion": str(version),
            "labels": {"job-name": f"w{i}"},
        },
        "status": {"phase": phase},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000, help="Jobs, one pod each")
    parser.add_argument("-c", type=int, default=100, help="pods changed a cycle")
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--whole", action="store_true", help="the whole listing each cycle")
    args = parser.parse_args()
    n = args.n
    jobs = {f"j{i}": job(i, i + 1) for i in range(n)}
    pods = {f"p{i}": pod(i, n + i + 1, "Running") for i in range(n)}
    observer = Observer()
    observer.observe("local", tuple(jobs.values()), tuple(pods.values()))
    version, spent = 3 * n, 0.0
    states: tuple[Any, ...] = ()
    for cycle in range(args.cycles):
        changed: dict[str, tuple[dict[str, Any], bool]] = {}
        for k in range(args.c):
            i = (cycle * args.c + k) % n
            version += 1
            pods[f"p{i}"] = pod(i, version, "Succeeded" if cycle % 2 else "Pending")
            changed[f"p{i}"] = (pods[f"p{i}"], False)
        started = time.process_time()
        if args.whole:
            states = observer.observe("local", tuple(jobs.values()), tuple(pods.values()))
        else:
            states = observer.update("local", CacheChanges({}), CacheChanges(changed))
        spent += time.process_time() - started
    assert states == observe_workloads("local", tuple(jobs.values()), tuple(pods.values()))
    how = "whole listing" if args.whole else "changes"
    print(
        f"observation of {n} Jobs and pods, {args.c} pods changed a cycle, fed the {how}: "
        f"{1000 * spent / args.cycles:.2f} ms CPU a cycle ({args.cycles} cycles)"
    )


if __name__ == "__main__":
    main()
