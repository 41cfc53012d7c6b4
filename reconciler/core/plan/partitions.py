"""Partitions: the repo cut into groups that can be decided apart, one shard each.

What must live here: which queues and clusters must be decided together, and the repo a
shard decides over. Two queues are in one partition when they share a cluster (a fleet
queue shares each of its clusters), a cohort (they lend each other quota), or a workflow
(a DAG child waits for its siblings, a matrix's concurrency counts them all). A cluster no
queue names is a partition of its own (its workloads still need an owner). So every check
of the planner reads only counters of its own partition, and a decision never needs two
shards.

A queue moved to a cluster of another partition while it has runs active in the old one
stays joined with the old cluster until those runs end (``moved_runs``): its new owner
counts them and never runs them again, and the old cluster's runs are never pruned as
another partition's. Every replica reads the active runs from the same status branch.

A partition's id is derived from its content, the sorted names of its clusters, never from
its position: a commit that adds a queue to a partition keeps the partition's id (and its
Lease), and only a commit that joins or splits clusters makes new ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from reconciler.core.observation.observe import WorkloadState
from reconciler.core.plan.groups import DisjointSets
from reconciler.core.types import CompiledOperation, CompiledRepo, Phase


@dataclass(frozen=True, slots=True)
class Partition:
    """Clusters and queues decided together; ``id`` is stable across commits that keep its
    clusters (a DNS label: it names the partition's Lease)."""

    id: str
    clusters: tuple[str, ...]
    queues: tuple[str, ...]


def partition_id(clusters: Iterable[str]) -> str:
    """``p-`` and 10 hex digits of a hash of the sorted cluster names."""
    joined = "\0".join(sorted(clusters)).encode()
    return "p-" + hashlib.sha256(joined).hexdigest()[:10]


def _operations(compiled: CompiledRepo) -> Iterable[CompiledOperation]:
    yield from compiled.operations
    yield from compiled.schedules


def operation_queues(compiled: CompiledRepo) -> dict[str, str]:
    """Each operation's queue (``moved_runs``' index: made once per config)."""
    return {op.id: op.queue for op in _operations(compiled)}


_ACTIVE = frozenset(p for p in Phase if p.active)


def moved_runs(
    compiled: CompiledRepo, runs: Iterable[WorkloadState], queues: Mapping[str, str] | None = None
) -> dict[str, frozenset[str]]:
    """Per queue, the clusters of ``compiled`` outside its members where ``runs`` (the
    last state known of each run) of its operations are still active: a queue moved, or
    an operation moved to another queue, while it had runs. ``queues``: the
    ``operation_queues`` of ``compiled``, when already made."""
    queue_of = operation_queues(compiled) if queues is None else queues
    members = {q.name: q.members for q in compiled.queues.values()}
    out: dict[str, set[str]] = {}
    for run in runs:
        if run.phase not in _ACTIVE:
            continue
        name = queue_of.get(run.operation)
        where = members.get(name or "")
        if where is not None and run.cluster not in where and run.cluster in compiled.clusters:
            out.setdefault(str(name), set()).add(run.cluster)
    return {q: frozenset(c) for q, c in sorted(out.items())}


def partition_repo(
    compiled: CompiledRepo, moved: Mapping[str, Iterable[str]] | None = None
) -> tuple[Partition, ...]:
    """The connected components of clusters, queues, cohorts and workflows, sorted by id;
    a queue joined with the clusters ``moved`` (``moved_runs``) names for it too."""
    sets = DisjointSets(())  # ``c/<cluster>``, ``q/<queue>``, ``h/<cohort>``, ``w/<parent>``
    for name in compiled.clusters:
        sets.find(f"c/{name}")
    moved = moved or {}
    for queue in compiled.queues.values():
        for cluster in (*queue.members, *moved.get(queue.name, ())):
            sets.union(f"q/{queue.name}", f"c/{cluster}")
        if queue.cohort:
            sets.union(f"q/{queue.name}", f"h/{queue.cohort}")
    for op in _operations(compiled):
        if op.queue not in compiled.queues:
            continue  # refused by the compiler; nothing decides it
        if op.workflow is not None:
            sets.union(f"q/{op.queue}", f"w/{op.workflow.parent}")
    clusters: dict[str, list[str]] = {}
    queues: dict[str, list[str]] = {}
    for name in sorted(sets.parent):
        kind, _, rest = name.partition("/")
        root = sets.find(name)
        if kind == "c":
            clusters.setdefault(root, []).append(rest)
        elif kind == "q":
            queues.setdefault(root, []).append(rest)
    return tuple(
        sorted(
            (
                Partition(partition_id(members), tuple(members), tuple(queues.get(root, ())))
                for root, members in clusters.items()
            ),
            key=lambda p: p.id,
        )
    )


def restrict_repo(compiled: CompiledRepo, partitions: Iterable[Partition]) -> CompiledRepo:
    """The repo a shard decides over: only ``partitions``' clusters, queues, cohorts and
    operations (a refused one where its cluster is). The org settings, connections and
    flavors stay whole: they are read, never counted."""
    partitions = tuple(partitions)
    clusters = {c for p in partitions for c in p.clusters}
    queues = {q for p in partitions for q in p.queues if q in compiled.queues}
    cohorts = {compiled.queues[q].cohort for q in queues}
    return replace(
        compiled,
        clusters={k: v for k, v in compiled.clusters.items() if k in clusters},
        queues={k: v for k, v in compiled.queues.items() if k in queues},
        operations=tuple(o for o in compiled.operations if o.queue in queues),
        schedules=tuple(o for o in compiled.schedules if o.queue in queues),
        rejected=tuple(r for r in compiled.rejected if r.cluster in clusters),
        cohorts={k: v for k, v in compiled.cohorts.items() if k in cohorts},
    )


@dataclass(frozen=True, slots=True)
class ShardScope:
    """What a shard writes of the status branch: the partitions it held when it decided,
    their queues, clusters and operations (workflow parents included), and the whole
    repo's, so that an entry of a queue, cluster or operation gone from the repo is known
    to be no one's."""

    partitions: tuple[str, ...]
    queues: frozenset[str]
    clusters: frozenset[str]
    operations: frozenset[str]
    known_queues: frozenset[str]
    known_clusters: frozenset[str]
    known_operations: frozenset[str]


def _ids(ops: Iterable[CompiledOperation]) -> set[str]:
    out: set[str] = set()
    for op in ops:
        out.add(op.id)
        if op.workflow is not None:
            out.add(op.workflow.parent)
    return out


def shard_scope(compiled: CompiledRepo, held: Iterable[Partition]) -> ShardScope:
    """The scope of a shard holding ``held`` over ``compiled`` (the whole repo)."""
    held = tuple(held)
    mine = restrict_repo(compiled, held)
    rejected = {r.operation for r in compiled.rejected}
    return ShardScope(
        tuple(p.id for p in held),
        frozenset(mine.queues),
        frozenset(mine.clusters),
        frozenset(_ids(_operations(mine)) | {r.operation for r in mine.rejected}),
        frozenset(compiled.queues),
        frozenset(compiled.clusters),
        frozenset(_ids(_operations(compiled)) | rejected),
    )
