"""A shard's status write: its files joined with what the other shards wrote.

What must live here: which status files a shard owns, and how a shared file is joined.
Each replica writes only its partitions' files (``ShardScope``): an operation's file when
the operation is in its partitions (one gone from the repo: when the cluster it records is
one of them), a queue's order files when the queue is; an operation's file in either
layout (``path_operation``), so a shard's first write moves its own records of a branch
written before the buckets, and no other's. The shared files are joined with
the branch's tip at each attempt of a push: ``queues.yaml`` keeps the other shards' queues
(in consideration order: priority descending, then name), ``clusters.yaml`` their clusters
(by name), the ledger every shard's runs (entries are keyed, never lost); ``config.yaml``
says the same from every shard on the same commit. A queue or cluster gone from the repo
leaves the shared files with the next write. The decision record (``_decision.yaml``)
is the cycle of the shard whose commit it is, naming the clusters and queues it decided
over (``scoped_record``), so ``reconciler why`` replays that shard's partitions alone. The
notifications owed (``_notify.yaml``) keep the other shards' entries (an entry is the
shard's whose operation it decides: one gone from the repo, whose cluster) beside the
shard's own (``owed_for``: what the next owner of a partition sends again). Like one
process's, a record or the notifications owed that change alone make no commit. So the
branch reads as one reconciler's, and two shards' writes never undo each other.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.core.plan.ledger import (
    Ledger,
    LedgerEntry,
    LedgerFile,
    is_ledger_path,
    ledger_files,
)
from reconciler.core.plan.partitions import ShardScope
from reconciler.core.reporting.notify import Owed, encode_owed, read_owed
from reconciler.core.reporting.status import (
    CLUSTERS_FILE,
    CONFIG_FILE,
    DECISION_FILE,
    NOTIFY_FILE,
    ORDER_DIR,
    QUEUES_FILE,
    STATUS_DIR,
    ClusterStatus,
    DecisionRecord,
    OperationStatus,
    QueueStatus,
    StatusFileError,
    dump_yaml,
    is_decision_path,
    is_order_path,
    parse_status_file,
    path_operation,
)

_SHARED = frozenset({QUEUES_FILE, CLUSTERS_FILE, CONFIG_FILE, NOTIFY_FILE})


def _owns(path: str, data: bytes, scope: ShardScope) -> bool:
    """Whether ``path`` (a status file of the tip, ``data``) is the shard's to rewrite or
    delete."""
    if is_order_path(path):
        name = path[len(ORDER_DIR) + 1 : -len(".yaml")].split(".")[0]
        return name in scope.queues
    # by its path, in either layout: a flat record of the shard's operations is its own to
    # delete as it writes them in their buckets, another shard's is left to that shard
    operation = path_operation(path)
    if operation in scope.operations:
        return True
    if operation in scope.known_operations:
        return False
    try:  # gone from the repo: the shard of the cluster its run was in
        parsed = parse_status_file(path, data)
    except StatusFileError:
        return False
    return isinstance(parsed, OperationStatus) and parsed.cluster in scope.clusters


def _queues(data: bytes | None, path: str) -> list[QueueStatus]:
    if data is None:
        return []
    try:
        parsed = parse_status_file(path, data)
    except StatusFileError:
        return []
    return [q for q in parsed if isinstance(q, QueueStatus)] if isinstance(parsed, tuple) else []


def _clusters(data: bytes | None) -> list[ClusterStatus]:
    if data is None:
        return []
    try:
        parsed = parse_status_file(CLUSTERS_FILE, data)
    except StatusFileError:
        return []
    return [c for c in parsed if isinstance(c, ClusterStatus)] if isinstance(parsed, tuple) else []


def _ledger(files: Mapping[str, bytes]) -> list[LedgerEntry] | None:
    """The entries of the ledger files; None when one cannot be read (left as it is)."""
    entries: list[LedgerEntry] = []
    for path in sorted(p for p in files if is_ledger_path(p)):
        try:
            parsed = parse_status_file(path, files[path])
        except StatusFileError:
            return None
        if not isinstance(parsed, LedgerFile) or parsed.worst or parsed.unread:
            return None
        entries.extend(parsed.entries)
    return entries


def scoped_record(files: Mapping[str, bytes], scope: ShardScope) -> dict[str, bytes]:
    """``files`` (a shard's, as one reconciler of its partitions renders them) with its
    decision record naming the clusters and queues the shard decided over."""
    data = files.get(DECISION_FILE)
    if data is None:
        return dict(files)
    record = parse_status_file(DECISION_FILE, data)
    if not isinstance(record, DecisionRecord):
        return dict(files)
    scoped = record.model_copy(
        update={"clusters": tuple(sorted(scope.clusters)), "queues": tuple(sorted(scope.queues))}
    )
    return {**files, DECISION_FILE: dump_yaml(scoped.to_dict())}


def _decides(owed: Owed, scope: ShardScope) -> bool:
    if owed.operation in scope.operations:
        return True
    return owed.operation not in scope.known_operations and owed.cluster in scope.clusters


def owed_for(content: bytes | None, scope: ShardScope) -> tuple[Owed, ...]:
    """The entries of ``_notify.yaml`` (``content``) that ``scope``'s shard sends: those of
    the operations it decides (a partition taken: its last owner's, still owed)."""
    if content is None:
        return ()
    entries, _, problem = read_owed(content)
    return () if problem else tuple(e for e in entries if _decides(e, scope))


def _joined_owed(tip: bytes | None, ours: bytes | None, scope: ShardScope) -> bytes | None:
    """``_notify.yaml`` with the other shards' entries of ``tip`` and the shard's own
    (``ours``); None when nothing is owed. An unreadable tip's entries are no one's."""
    theirs: tuple[Owed, ...] = ()
    dropped = 0
    if tip is not None:
        entries, dropped, problem = read_owed(tip)
        theirs = () if problem else tuple(e for e in entries if not _decides(e, scope))
    mine: tuple[Owed, ...] = ()
    if ours is not None:
        entries, more, problem = read_owed(ours)
        mine = () if problem else entries
        dropped = max(dropped, more)
    if not theirs and not mine:
        return None
    return encode_owed(theirs + mine, dropped)


def shard_changes(
    tip: Mapping[str, bytes], ours: Mapping[str, bytes], scope: ShardScope
) -> dict[str, bytes | None]:
    """The changes that make ``tip`` (the branch's status files) hold ``ours`` (the shard's
    files, as one reconciler of its partitions renders them) beside the other shards'."""
    changes: dict[str, bytes | None] = {}
    for path, data in ours.items():
        if path in _SHARED or is_ledger_path(path):
            continue
        if tip.get(path) != data and (is_decision_path(path) or _owns(path, data, scope)):
            changes[path] = data
    for path in tip:  # the record is the writer's cycle's: another's parts go
        if is_decision_path(path) and path not in ours:
            changes[path] = None
    for path, data in tip.items():
        if (
            path not in ours
            and path.startswith(f"{STATUS_DIR}/")
            and path.endswith(".yaml")
            and path not in _SHARED
            and not is_decision_path(path)
            and not is_ledger_path(path)
            and _owns(path, data, scope)
        ):
            changes[path] = None
    if CONFIG_FILE in ours and tip.get(CONFIG_FILE) != ours[CONFIG_FILE]:
        changes[CONFIG_FILE] = ours[CONFIG_FILE]
    theirs = [
        q
        for q in _queues(tip.get(QUEUES_FILE), QUEUES_FILE)
        if q.name in scope.known_queues and q.name not in scope.queues
    ]
    queues = sorted(
        theirs + _queues(ours.get(QUEUES_FILE), QUEUES_FILE), key=lambda q: (-q.priority, q.name)
    )
    joined = dump_yaml({"queues": [q.to_dict() for q in queues]})
    if tip.get(QUEUES_FILE) != joined:
        changes[QUEUES_FILE] = joined
    if CLUSTERS_FILE in ours:
        kept = [
            c
            for c in _clusters(tip.get(CLUSTERS_FILE))
            if c.name in scope.known_clusters and c.name not in scope.clusters
        ]
        clusters = sorted(kept + _clusters(ours[CLUSTERS_FILE]), key=lambda c: c.name)
        joined = dump_yaml({"clusters": [c.to_dict() for c in clusters]})
        if tip.get(CLUSTERS_FILE) != joined:
            changes[CLUSTERS_FILE] = joined
    recorded, mine = _ledger(tip), _ledger(ours)
    if recorded is not None and mine is not None and mine:
        for path, data in ledger_files(Ledger.of(recorded).with_entries(mine), dump_yaml).items():
            if tip.get(path) != data:
                changes[path] = data
    if all(is_decision_path(path) for path in changes):
        return {}  # the record alone: it rides on a commit made anyway
    owed = _joined_owed(tip.get(NOTIFY_FILE), ours.get(NOTIFY_FILE), scope)
    if owed != tip.get(NOTIFY_FILE):  # likewise what is owed: with the others
        changes[NOTIFY_FILE] = owed
    return dict(sorted(changes.items()))
