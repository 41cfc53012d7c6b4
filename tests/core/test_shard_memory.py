"""A shard's memory (``Memory.split``, ``Memory.beside``): it decides over its clusters' runs
alone and keeps the others' untouched for a partition it may take later."""

from __future__ import annotations

from reconciler.core.decision.cycle import InFlight, Memory, decide
from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan.partitions import partition_repo, restrict_repo
from reconciler.core.types import Phase
from tests.support.builders import NOW, World


def _run(op: str, cluster: str, queue: str, phase: Phase = Phase.RUNNING) -> WorkloadState:
    name = op.replace("/", "-") + "-g1"
    return WorkloadState(op, 1, cluster, "t", name, f"uid-{name}", phase, queue=queue)


def test_split_and_beside_keep_every_run() -> None:
    a, b = _run("t/a", "a", "qa"), _run("t/b", "b", "qb")
    memory = Memory(
        {"t/a": a, "t/b": b},
        {"t/b": InFlight(b, "7")},
        {"t/a@g0": a},
    )
    mine, rest = memory.split({"a"})
    assert (set(mine.seen), set(mine.inflight), set(mine.superseded)) == (
        {"t/a"},
        set(),
        {"t/a@g0"},
    )
    assert (set(rest.seen), set(rest.inflight), set(rest.superseded)) == ({"t/b"}, {"t/b"}, set())
    assert mine.beside(rest) == memory


def test_a_shard_decides_over_its_runs_alone() -> None:
    """Another partition's run in the memory is neither counted nor reported by the shard
    (its cluster is not in the shard's config: whole, it would read as unreachable)."""
    world = World().queue("qa", cluster="a", concurrency=1).queue("qb", cluster="b")
    world.op("t/a", queue="qa")
    world.op("t/b", queue="qb")
    repo = world.repo()
    (pa,) = [p for p in partition_repo(repo) if p.clusters == ("a",)]
    memory = Memory({"t/b": _run("t/b", "b", "qb")})
    mine, _ = memory.split(pa.clusters)
    decision = decide(restrict_repo(repo, [pa]), {}, mine, NOW)
    assert set(decision.states) <= {"t/a"}
    assert "t/b" not in decision.memory.seen
    whole = decide(restrict_repo(repo, [pa]), {}, memory, NOW)
    assert "t/b" in whole.states  # what the split keeps out
