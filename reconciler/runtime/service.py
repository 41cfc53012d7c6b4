"""The reconciler as a service: its Git source, status publisher and metrics, wired
around the cycle. Used by ``reconciler run`` and ``reconciler demo``."""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.git import ConfigRepo, GitSyncError, Retention, StatusBranch
from reconciler.adapters.kube import Kube, connect_cluster, preload_clients
from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.decision.cycle import decide_recorded
from reconciler.core.decision.schedule import next_tick
from reconciler.core.decision.trigger import Trigger
from reconciler.core.plan import PlanInputError
from reconciler.core.reporting.shards import owed_for
from reconciler.core.reporting.status import read_status
from reconciler.core.types import ClusterSpec, CompiledRepo, RepoSnapshot
from reconciler.runtime.cycle import ChangeSet, CycleResult, Reconciler, Shards
from reconciler.runtime.faults import FaultPoints
from reconciler.runtime.loop import Wakeup
from reconciler.runtime.metrics import Metrics
from reconciler.runtime.notify import Notifier, Outbox
from reconciler.runtime.status import StatusPublisher

log = logging.getLogger("reconciler.service")


def worktree_source(repo: Path) -> RepoSnapshot:
    """The files as saved (``--watch``), versioned by a hash of their content."""
    snapshot = snapshot_worktree(repo)
    digest = hashlib.sha256()
    for path in sorted(snapshot.files):
        f = snapshot.files[path]
        # a name or a link's target need not be UTF-8: their bytes, as the file system has them
        kind = b"S" if f.submodule else b"F" if f.symlink_target is None else b"L"
        if f.symlink_target is not None:
            kind += os.fsencode(f.symlink_target)
        digest.update(os.fsencode(path) + b"\0" + kind + b"\0" + f.content)
    return replace(snapshot, version=f"worktree-{digest.hexdigest()[:12]}")


class PacedSource:
    """The config source, read at most once per ``min_interval`` seconds.

    Cycles started by watch events come up to five a second; a ``git fetch`` for each would
    load the Git server (and count against a hosted one's rate limits) for nothing: the
    config is fetched once per ``--interval``, as before cycles ran on events, and a cycle
    in between plans with the snapshot in hand. ``expire`` makes the next read fresh (a
    save seen by ``--watch``, a push told by a webhook), even when it comes during a read
    (that read may have fetched before the push). A failed read is reported again, not
    retried, until the interval has passed."""

    def __init__(
        self,
        source: Callable[[], RepoSnapshot],
        min_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.min_interval = min_interval
        self.clock = clock
        self._last: RepoSnapshot | Exception | None = None
        self._at = 0.0
        self._expired = False
        self._lock = threading.Lock()
        self.reads = 0

    def expire(self) -> None:
        with self._lock:
            self._expired = True

    def __call__(self) -> RepoSnapshot:
        now = self.clock()
        last = self._last
        with self._lock:
            expired, self._expired = self._expired, False
        if last is None or expired or now >= self._at + self.min_interval:
            self._at = now
            self.reads += 1
            try:
                last = self.source()
            except Exception as exc:  # reported by the cycle (sync_error), kept until due
                last = exc
            self._last = last
        if isinstance(last, Exception):
            raise last
        return last


# Seconds a stop without a timeout of its own waits for queued notifications.
NOTIFY_GRACE = 10.0

# A full collection at most once per this many collections of the middle generation
# (CPython's default: 10). See settle_heap.
FULL_COLLECTION_EVERY = 100


def settle_heap() -> None:
    """Tune CPython's cyclic garbage collector for a long-lived reconciler process (again:
    ``HeapKeeper``).

    Each watch event is parsed into a new object that replaces the one cached, so the
    tracked heap is replaced all the time; with the default thresholds a full collection
    then rescans the whole heap (the modules, the compiled config, every cached Job and pod)
    each time a quarter of it is new: eight or nine times in a dispatch of 2,000 operations
    (docs/benchmarks.md, "Cost per operation"). Here: the
    garbage is collected once, what is left (the modules, loaded) is frozen (``gc.freeze``:
    never rescanned, still freed when unreferenced), and a full collection may run at most
    once per ``FULL_COLLECTION_EVERY`` collections of the middle generation. The young
    generations are collected as usual; a reference cycle that becomes garbage is still
    collected, only later."""
    gc.unfreeze()  # what was frozen before is collected too: its garbage cycles
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


class HeapKeeper:
    """``settle_heap`` again once a quarter of the operations were compiled since the last:
    the first cycle's compiled config (at 100k operations, millions of objects) is frozen
    then, not rescanned by every later full collection (each took seconds, in whichever
    cycle allocated past the threshold: ``bench/commit_latency.py``'s 1% preset rounds).
    A garbage cycle among frozen objects (a compiled operation replaced) is only freed at
    the next settle: the quarter bounds what waits for it, as CPython's own rule does.

    The status writer's memos are the other large part of the heap (a record, its file and
    what it was built from, per operation), made by its first write after the first cycle:
    a write that rendered more files than that quarter settles the heap too
    (``after_render``, on the writer's thread).

    What is not frozen still grows: each cycle's plan, the runs watched, the writer's
    records of what changed. CPython's full collection of it comes at a count of middle
    collections (``FULL_COLLECTION_EVERY``), in whichever cycle reaches it: a commit's
    decide at 100k met one of 0.5 s. So the keeper runs it itself at half that count,
    after a cycle or a write (``collections``), where no cycle waits for it."""

    def __init__(self, compiled: Callable[[], int]) -> None:
        self._compiled = compiled  # how many operations were compiled so far
        self._settled = compiled()
        self._operations = 0  # of the last cycle
        self._lock = threading.Lock()  # the cycle's thread and the writer's
        self.settles = 0
        self.collections = 0  # full collections run between cycles

    def after_cycle(self, operations: int) -> None:
        """After a cycle over ``operations`` operations: settle once enough are new."""
        self._operations = operations
        now = self._compiled()
        if now - self._settled > self._quarter():
            self._settle()
            self._settled = now
        else:
            self._collect_if_due()

    def after_render(self, files: int) -> None:
        """After a status write that rendered ``files`` files again: settle if they are
        more than a quarter of the operations."""
        if files > self._quarter():
            self._settle()
        else:
            self._collect_if_due()

    def _quarter(self) -> int:
        return max(SETTLE_AFTER, self._operations // 4)

    def _collect_if_due(self) -> None:
        """A full collection now if half the middle collections that trigger one passed."""
        due = FULL_COLLECTION_EVERY // 2
        if gc.get_count()[2] >= due:
            with self._lock:  # the other thread's may have run it meanwhile
                if gc.get_count()[2] >= due:
                    gc.collect()
                    self.collections += 1

    def _settle(self) -> None:
        with self._lock:
            settle_heap()
            self.settles += 1


# Operations compiled since the last settle below which ``HeapKeeper`` never settles again
SETTLE_AFTER = 1000


@dataclass
class Runtime:
    reconciler: Reconciler
    publisher: StatusPublisher | None
    metrics: Metrics = field(default_factory=Metrics)
    completed: CycleResult | None = None  # the last cycle whose status and metrics are out
    faults: FaultPoints = field(default_factory=FaultPoints.from_env)
    config: ConfigRepo | None = None  # the Git source (None with a worktree), for blame
    wakeup: Wakeup | None = None  # the loop's: asked for a cycle when a status write is due
    source: Callable[[], RepoSnapshot] | None = None  # the reconciler's config source
    # notifications and commit statuses: decided each cycle, sent by a thread of their own
    notifier: Notifier | None = None
    heap: HeapKeeper | None = None  # a long-lived process's garbage collector, kept
    _leading: bool = field(default=False, init=False)  # whether the last cycle led
    # sharded: the fleet last shown, by the config and the branch's files it was made of
    _fleet: tuple[CompiledRepo, dict[str, bytes], CycleResult] | None = field(
        default=None, init=False
    )

    def __post_init__(self) -> None:
        if self.publisher is not None:
            self.publisher.faults = self.faults  # before-status, after-status: the writer's
            self.publisher.on_failure = self.metrics.git_sync_errors.inc
            if self.notifier is not None:  # what is owed rides on the status commits
                self.publisher.owed = self.notifier.owed_file

    @property
    def sharded(self) -> bool:
        """``--shards``: this process decides over part of the config."""
        return self.reconciler is not None and self.reconciler.sharded

    def fleet(self) -> CycleResult | None:
        """Sharded: the whole fleet as the status branch records it (every shard's files,
        as this replica last read or wrote them), decided over the whole config in force
        and carried out by no one: what ``--http`` shows, as ``reconciler status`` does.
        None before a config is loaded, or without a status branch (the last cycle's)."""
        compiled = self.reconciler.config_in_force
        last = self.completed
        if compiled is None or last is None or self.publisher is None:
            return last
        try:
            files = self.publisher.files()
        except GitSyncError as exc:
            log.warning("cannot read the status branch: %s", exc)
            return last
        shown = self._fleet
        if shown is not None and shown[0] is compiled and shown[1] is files:
            return shown[2]
        try:
            decision = decide_recorded(compiled, read_status(files), last.at)
        except PlanInputError as exc:
            log.warning("cannot show the fleet: %s", exc)
            return last
        base = CycleResult(last.at, compiled.version, compiled, None, {}, last.config_errors)
        result = ChangeSet().result(base, decision, leading=False, attempted=last.attempted_version)
        self._fleet = (compiled, files, result)
        return result

    def config_changed(self) -> None:
        """Files were saved (``--watch``): read them in the cycle that this asks for."""
        if isinstance(self.source, PacedSource):
            self.source.expire()
        self.trigger(Trigger.CONFIG)

    def webhook_push(self, provider: str) -> None:
        """A Git host told of a push to the branch followed: fetch in the cycle this asks
        for, whatever ``fetch_interval`` says (``runtime/webhook.py``)."""
        if isinstance(self.source, PacedSource):
            self.source.expire()
        log.debug("webhook from %s: a fetch now", provider)
        self.trigger(Trigger.WEBHOOK)

    def trigger(self, trigger: Trigger) -> None:
        """Ask for a cycle now (the Lease gained, files saved), counted like the watches'."""
        self.metrics.cycle_triggers.labels(trigger.value).inc()
        if self.wakeup is not None:
            self.wakeup.request(trigger)

    def on_cycle(self, result: CycleResult) -> None:
        # The metrics first: whoever sees this cycle's status already sees its metrics.
        m = self.metrics
        m.cycle_duration.observe(result.duration)
        m.set_leader(result.leading)
        m.observe_clusters((h.name, h.reachable) for h in result.clusters)
        if result.sync_error:
            m.git_sync_errors.inc()
        if result.internal_error:
            m.internal_errors.inc()
        shown = result.report
        if shown is not None:
            m.observe_report(shown)
            m.set_config_commit(shown.compiled.version)
            clusters = {d.operation: (d.queue, d.cluster) for d in shown.plan.dispatch}
            for op in result.dispatched:
                queue, cluster = clusters[op]
                m.count_dispatched(queue, cluster)
        if self.notifier is not None:  # queued, never waited for; owed in the next status
            if result.leading:
                if not self._leading and not self.sharded:  # led now: what the last
                    self._owe_recorded()  # leader still owed first (a shard: as it takes)
                self.notifier.on_cycle(result)
            else:
                self.notifier.follow(result)
        self._leading = result.leading
        if self.publisher is not None and result.leading:
            # in the background: handed to the writer thread, not delaying the next cycle
            self.publisher.publish(result)
            if not self.publisher.background:
                if self.publisher.last_error:
                    m.git_sync_errors.inc()
                due = self.publisher.due
                if due is not None and self.wakeup is not None:
                    self.wakeup.request_at(due)  # put off by the cadence: a cycle writes it
        if self.wakeup is not None and result.compiled is not None:
            tick = next_tick(result.compiled, result.at)
            if tick is not None:  # a cycle at the tick's time, not up to an interval late
                left = (tick - result.at).total_seconds() - result.duration
                self.wakeup.request_at(self.wakeup.clock() + max(0.0, left))
        if self.heap is not None and result.compiled is not None:
            self.heap.after_cycle(len(result.compiled.operations))
        self.completed = result

    def _owe_recorded(self) -> None:
        """Owe the notifications the status branch says are owed (``status/_notify.yaml``:
        its last leader's, as last read), to be sent by this cycle."""
        if self.notifier is None or self.publisher is None:
            return
        try:
            self.notifier.restore(self.publisher.recorded_owed())
        except GitSyncError as exc:
            log.warning("cannot read the notifications owed: %s", exc)

    def close(self, timeout: float | None = None, final: CycleResult | None = None) -> bool:
        """Write the status last handed over and stop the status writer (shutdown); False
        when the write outlived ``timeout``. ``final`` (``Reconciler.run_final``: what the
        watch caches said after the last cycle, nothing carried out) is handed over first,
        leading or not: the publisher writes only while this process holds the Lease.
        ``unwritten`` then says why the last status is not on the branch. The
        notifications still queued are sent within ``timeout`` too, then dropped."""
        started = time.monotonic()
        if self.notifier is not None:  # sending while the status is written
            self.notifier.outbox.finish()
        written = True
        if self.publisher is not None:
            if final is not None:
                self.publisher.publish(final)
                self.completed = final
            written = self.publisher.close(timeout)
        if self.notifier is None:
            return written
        grace = NOTIFY_GRACE if timeout is None else timeout
        return self.notifier.outbox.close(grace - (time.monotonic() - started)) and written

    @property
    def unwritten(self) -> str:
        """Why the last status this process saw is not on the branch; "" when it is."""
        return self.publisher.unwritten if self.publisher is not None else ""

    def readiness(self) -> tuple[bool, str]:
        last = self.completed
        if last is None:
            return False, "no cycle has run yet"
        if last.plan is None:
            return False, "no valid config loaded" + (
                f": {last.sync_error}" if last.sync_error else ""
            )
        if last.sync_error:
            return False, f"config sync failing: {last.sync_error}"
        return True, "ok"


def make_runtime(
    repo: str,
    branch: str,
    overrides: dict[str, Path],
    *,
    worktree: bool = False,
    status_branch: str | None = "reconciler/status",
    status_repo: str | None = None,
    retention: Retention | None = None,
    cache_dir: Path | None = None,
    is_leader: Callable[[], bool] | None = None,
    wakeup: Wakeup | None = None,
    status_interval: float = 0.0,
    fetch_interval: float = 0.0,
    status_background: bool = False,
    status_leader: Callable[[], bool] | None = None,
    create_workers: int = 8,
    freeze_heap: bool = False,
    shards: Shards | None = None,
) -> Runtime:
    """The reconciler for ``repo``: a Git source (fetched into a cache, committed tree at the
    branch tip) with status on ``status_branch`` (of ``status_repo`` when set, else of the
    config repo; its history bounded by ``retention``), or the saved files with
    ``worktree``. A Git source's cache that cannot be made raises
    :class:`~reconciler.adapters.git.CacheError` here.

    With ``wakeup``, a watch event by which a run ends asks it for a cycle at once
    (``core/decision/trigger.py``); the status is then written at most every ``status_interval``
    seconds, and the config read at most every ``fetch_interval`` (on ``wakeup``'s
    clock). With ``status_background`` the status is written by a thread of its own while
    ``status_leader`` says this process leads (``StatusPublisher``); ``Runtime.close``
    writes the last one. ``create_workers``: the creates in flight per cycle. The
    Kubernetes client's API classes are imported here, not in the first cycle
    (``preload_clients``); with ``freeze_heap`` (a long-lived process), ``settle_heap``
    tunes the garbage collector once they are, and again once the config is compiled
    (``HeapKeeper``). With ``shards``, each cycle decides over
    the partitions this replica holds, and the status write joins the other shards'."""
    preload_clients()

    def connect(spec: ClusterSpec) -> Kube:
        api = connect_cluster(spec.kubeconfig, spec.context, overrides.get(spec.name))
        return Kube(api)

    publisher: StatusPublisher | None = None
    config: ConfigRepo | None = None
    source: Callable[[], RepoSnapshot]
    if worktree:
        source = partial(worktree_source, Path(repo))
    else:
        config = ConfigRepo(repo, branch, cache_dir)
        config.open()  # a cache that cannot be made fails here (CacheError), not each cycle
        source = config.sync
        if status_branch:
            publisher = StatusPublisher(
                StatusBranch(config, remote=status_repo, branch=status_branch),
                min_interval=status_interval,
                clock=wakeup.clock if wakeup is not None else time.monotonic,
                background=status_background,
                is_leader=status_leader,
                follow_interval=fetch_interval,
                retention=retention,
                status_repo=status_repo,
                idle=wakeup.wait_idle if wakeup is not None and status_background else None,
            )
    if fetch_interval > 0:
        source = PacedSource(
            source, fetch_interval, wakeup.clock if wakeup is not None else time.monotonic
        )
    metrics = Metrics()

    def on_trigger(trigger: Trigger) -> None:
        """A watch event by which a run ends: a cycle now (counted)."""
        metrics.cycle_triggers.labels(trigger.value).inc()
        if wakeup is not None:
            wakeup.request(trigger)

    reconciler = Reconciler(
        source,
        connect,
        SystemClock(),
        is_leader=is_leader or (lambda: True),
        faults=FaultPoints.from_env(),
        on_trigger=on_trigger if wakeup is not None else None,
        create_workers=create_workers,
        leader_record=publisher.leader_record if publisher is not None else None,
        blame=config.blame if config is not None else None,
        verify_commits=config.verify_signatures if config is not None else None,
        shards=shards,
        taken_record=publisher.taken_record if publisher is not None else None,
    )
    if publisher is not None and shards is not None:
        publisher.owns = shards.owns  # a partition taken since a cycle: not written by it
        publisher.retains = shards.retains
    outbox = Outbox(
        metrics,
        read_secret=lambda cluster, namespace, key: reconciler.connected(cluster).read_secret(
            namespace, key.name, key.key
        ),
        api_servers=reconciler.api_servers,
    )
    outbox.start()
    notifier = Notifier(outbox)
    runtime = Runtime(
        reconciler,
        publisher,
        metrics,
        config=None if worktree else config,
        wakeup=wakeup,
        source=source,
        notifier=notifier,
    )
    if publisher is not None and shards is not None:
        reconciler.on_taken = lambda scope, recorded: notifier.take(
            owed_for(publisher.recorded_owed(), scope),
            {op: s for op, s in recorded.seen.items() if op in scope.operations},
        )
    if publisher is not None:
        try:
            recorded = publisher.recorded()
            notifier.seed(recorded.seen)
            for line in recorded.ledger.problems.warnings():  # budgets they hold wait
                log.warning("%s", line.removeprefix("warning: "))
            reconciler.seed(recorded)
            applied = publisher.applied()
            if applied is not None and config is not None:
                reconciler.trust(applied, config.snapshot)
        except GitSyncError as exc:
            log.warning("cannot read the status branch yet: %s", exc)
    if freeze_heap:
        settle_heap()
        runtime.heap = HeapKeeper(lambda: reconciler.compiled_operations)
        if publisher is not None:
            publisher.after_render = runtime.heap.after_render
    return runtime
