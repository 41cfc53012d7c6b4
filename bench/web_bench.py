"""Queue view and page rendering cost, side by side with the plan they render (ratios).

    PYTHONPATH=. python bench/web_bench.py [N_OPERATIONS]

The seed example plus N generated 1-GPU operations spread over its queues is compiled and
planned once; then, each timed over several runs:

1. plan_repo (the cycle's planner) — the reference;
2. build_queues_view + the Queues page HTML (what one page load costs);
3. build_queue_detail + the page of the busiest queue (every pending op listed);
4. build_operation_detail + the page of one operation (its provenance and spec).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import compile_repo
from reconciler.core.plan import plan_repo
from reconciler.core.types import RepoFile, RepoSnapshot
from reconciler.core.views.queue_view import (
    build_operation_detail,
    build_queue_detail,
    build_queues_view,
)
from reconciler.core.views.web_html import (
    render_operation_page,
    render_queue_page,
    render_queues_page,
)

TEMPLATE = Path(__file__).resolve().parent.parent / "config-repo-template"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _repo(n: int) -> RepoSnapshot:
    files = dict(snapshot_worktree(TEMPLATE).files)
    for i in range(n):
        project, queue = (("vision", "team-a"), ("language", "team-b"))[i % 2]
        path = f"projects/{project}/operations/gen-{i}.yaml"
        body = (
            f"kind: Operation\nname: gen-{i}\nqueue: {queue}\npresets: [a100]\nrun:\n"
            f"  container:\n    command: [python, train.py]\n    args: [--seed, '{i}']\n"
        )
        files[path] = RepoFile(path, body.encode())
    return RepoSnapshot(files, version="bench")


def _best(fn: Callable[[], object], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    repo = compile_repo(_repo(n))
    assert repo.valid, repo.errors[:3]
    plan = plan_repo(repo, [], NOW)
    op_id = repo.operations[-1].id
    busiest = max(plan.queues, key=lambda q: q.pending).name

    t_plan = _best(lambda: plan_repo(repo, [], NOW))
    t_queues = _best(lambda: render_queues_page(build_queues_view(repo, plan, {}, applied=True)))

    def queue_page() -> str:
        detail = build_queue_detail(repo, plan, {}, busiest, applied=True)
        assert detail is not None
        return render_queue_page(detail)

    def op_page() -> str:
        detail = build_operation_detail(repo, plan, {}, op_id, applied=True)
        assert detail is not None
        return render_operation_page(detail)

    t_queue = _best(queue_page)
    t_op = _best(op_page)
    pending = sum(1 for p in plan.pending if p.queue == busiest)
    print(f"{len(repo.operations)} operations, {len(plan.pending)} pending")
    print(f"plan_repo                      {t_plan * 1e3:8.1f} ms  1.00x")
    print(f"queues page (view + HTML)      {t_queues * 1e3:8.1f} ms  {t_queues / t_plan:.2f}x")
    print(
        f"queue page ({busiest}, {pending} pending) {t_queue * 1e3:8.1f} ms  "
        f"{t_queue / t_plan:.2f}x"
    )
    print(f"operation page                 {t_op * 1e3:8.1f} ms  {t_op / t_plan:.2f}x")


if __name__ == "__main__":
    main()
