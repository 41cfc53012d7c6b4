"""Benchmark plan_dispatch: 1,000 queues with 10k queued + 1k active operations, then
100k queued + 10k active, then the same 100k with 10% of the operations distributed (2, 4
or 8 replicas, all or nothing) and a fifth of the queues limited by ``maxPods``, then the
same 100k with every queue's quota given as 3 flavors (h100, a100, l4: the same totals,
split; 10% of the operations pinned to one GPU product by nodeSelector), measured side by
side in one run. Prints the plan time of each and, last, the ratios 100k/10k (goal: <= 1 s
at 100k, ratio <= 12), distributed/plain at 100k and 3 flavors/plain at 100k in CPU (goal:
<= 1.5, issue 26).

    PYTHONPATH=$PWD python bench/plan_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from reconciler.core.plan import plan_dispatch
from reconciler.core.types import (
    ClusterSpec,
    CompiledOperation,
    Distributed,
    FlavorSpec,
    ObservedOperation,
    OrgSettings,
    Phase,
    QueueFlavor,
    QueueSpec,
    QueueStrategy,
    RunKind,
    WorkflowRef,
)
from reconciler.core.views.plan_render import plan_to_json

PRODUCTS = {
    "h100": "NVIDIA-H100-80GB-HBM3",
    "a100": "NVIDIA-A100-SXM4-80GB",
    "l4": "NVIDIA-L4",
}
FLAVORS = {
    name: FlavorSpec(name, {"nvidia.com/gpu.product": product})
    for name, product in PRODUCTS.items()
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def build(queued: int, active: int, queues: int = 1000, seed: int = 7, distributed: float = 0.0):  # type: ignore[no-untyped-def]
    """The world; ``distributed`` is the share of operations with replicas. Its choices
    come from a second random stream, so every other choice is the plain world's."""
    rng = random.Random(seed)
    grng = random.Random(seed + 1)
    clusters = {
        f"c{i}": ClusterSpec(f"c{i}", concurrency=(None if i % 2 else 2000)) for i in range(8)
    }
    qs: dict[str, QueueSpec] = {}
    for i in range(queues):
        quota: dict[str, Decimal] = {}
        if i % 3 != 2:
            quota[GPU] = Decimal(rng.choice([4, 8, 16, 32]))
        if i % 4 == 0:
            quota["cpu"] = Decimal(rng.choice([32, 64, 128]))
            quota["memory"] = Decimal(rng.choice([256, 512])) * 2**30
        qs[f"q{i:04d}"] = QueueSpec(
            name=f"q{i:04d}",
            cluster=f"c{i % 8}",
            priority=rng.randint(0, 20),
            concurrency=rng.choice([None, 5, 10, 50]),
            quota=quota,
            strategy=QueueStrategy.STRICT_FIFO if i % 10 == 0 else QueueStrategy.BEST_EFFORT_FIFO,
            paused=i % 97 == 0,
            max_pods=grng.choice([16, 32, 64]) if distributed and i % 5 == 1 else None,
        )
    names = list(qs)
    pins = [
        {"run": {"environment": {"nodeSelector": {"nvidia.com/gpu.product": product}}}}
        for product in PRODUCTS.values()
    ]
    ops: list[CompiledOperation] = []
    observed: list[ObservedOperation] = []
    shared: dict[tuple[Decimal, ...], dict[str, Decimal]] = {}
    total = queued + active
    i = 0
    while i < total:
        q = qs[names[rng.randrange(queues)]]
        project = f"proj{rng.randrange(200)}"
        requests = {
            GPU: Decimal(rng.choice([0, 1, 1, 2, 4])),
            "cpu": Decimal(rng.choice(["0.5", "2", "8"])),
            "memory": Decimal(rng.choice([8, 32, 64])) * 2**30,
        }
        # one object per distinct map, as the compile shares them (``shared_amounts``)
        requests = shared.setdefault(tuple(requests.values()), requests)
        at = T0 + timedelta(seconds=i)
        width = 1 if rng.random() < 0.9 else rng.choice([4, 8])
        dag = width > 1 and rng.random() < 0.3
        parent = f"{project}/wf-{i}"
        for k in range(width):
            name = f"op-{i}" if width == 1 else f"wf-{i}-{k}"
            gang: dict[str, object] = {}
            total_requests = requests
            if distributed and grng.random() < distributed:
                replicas = grng.choice([2, 4, 8])
                gang = {
                    "replicas": replicas,
                    "distributed": Distributed(),
                    "pod_requests": requests,
                }
                total_requests = {r: v * replicas for r, v in requests.items()}
            ops.append(
                CompiledOperation(
                    project=project,
                    name=name,
                    path=f"{project}/operations/{'op' if width == 1 else 'wf'}-{i}.yaml",
                    queue=q.name,
                    cluster=q.cluster,
                    namespace=project,
                    kind=RunKind.JOB,
                    # one in ten pinned to a GPU product (a second stream: the rest is the
                    # same world)
                    spec=pins[grng.randrange(len(pins))] if grng.random() < 0.1 else {},
                    requests=total_requests,
                    is_approved=rng.random() > 0.01,
                    workflow=None
                    if width == 1
                    else WorkflowRef(parent, "dag" if dag else "matrix", k, concurrency=2),
                    dependencies=(f"{project}/wf-{i}-{k - 1}",) if dag and k else (),
                    submitted_at=at,
                    **gang,  # type: ignore[arg-type]
                )
            )
            if i < active:
                observed.append(ObservedOperation(f"{project}/{name}", Phase.RUNNING))
            i += 1
    return ops, qs, clusters, observed


def three_flavors(spec: QueueSpec) -> QueueSpec:
    """The queue with its quota split over h100, a100 and l4 (the same totals)."""
    parts: list[dict[str, Decimal]] = [{}, {}, {}]
    for r, total in spec.quota.items():
        third = (total / 3).to_integral_value() if r == GPU else total / 3
        parts[0][r], parts[1][r], parts[2][r] = third, third, total - 2 * third
    return replace(
        spec,
        quota={},
        flavors=tuple(QueueFlavor(n, q) for n, q in zip(PRODUCTS, parts, strict=True)),
    )


def measure(
    queued: int, active: int, repeat: int, distributed: float = 0.0, flavors: bool = False
) -> tuple[float, float, float, int, int]:
    ops, qs, clusters, observed = build(queued, active, distributed=distributed)
    if flavors:
        qs = {n: three_flavors(q) for n, q in qs.items()}
    best = render = cpu = float("inf")
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        plan = plan_dispatch(
            ops, qs, clusters, observed, OrgSettings(), NOW, flavors=FLAVORS if flavors else None
        )
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
        t = time.perf_counter()
        plan_to_json(plan)
        render = min(render, time.perf_counter() - t)
    return best, cpu, render, len(plan.dispatch), len(plan.pending)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    small = measure(10_000, 1_000, args.repeat)
    large = measure(100_000, 10_000, args.repeat)
    gangs = measure(100_000, 10_000, args.repeat, distributed=0.1)
    flavored = measure(100_000, 10_000, args.repeat, flavors=True)
    for label, (plan_s, cpu_s, json_s, nd, np) in (
        ("10k", small),
        ("100k", large),
        ("100k, 10% distributed", gangs),
        ("100k, 3 flavors per queue", flavored),
    ):
        print(
            f"{label:>5} queued: plan {plan_s * 1000:7.1f} ms wall, {cpu_s * 1000:7.1f} ms CPU"
            f"  (json render {json_s * 1000:7.1f} ms; {nd} dispatch, {np} pending)"
        )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"ratio 100k/10k: {large[0] / small[0]:.2f}")
    print(f"ratio distributed/plain at 100k: {gangs[0] / large[0]:.2f}")
    print(f"ratio 3 flavors/plain at 100k, CPU: {flavored[1] / large[1]:.2f}")


if __name__ == "__main__":
    main()
