"""Publish each cycle's status to the status branch: only when something changed, and at
most one commit per ``min_interval`` seconds.

Cycles run on events, up to five a second (``runtime/loop.py``); a commit for each would
flood the branch's history and every tool that follows it (an Argo CD or Flux source, a
webhook, a mirror). So a cycle within ``min_interval`` of the last write attempt writes
nothing and says when the next write is due (``due``): the loop runs a cycle then, whose
status has everything the skipped ones had (status is a snapshot, not a log).

With ``background``, the write is made by a thread of its own (``status-writer``), so that
writing the status of cycle k (the files it changed, and a push) never delays cycle k+1
and its dispatches. ``publish`` then only hands the result over: results handed over while
a write is in progress or put off by the cadence coalesce (the newest one is written, and
has everything the others had). The thread writes only while ``is_leader`` says so (a
result left from before a lost Lease is dropped, and ``unwritten`` says so), and ``close``
writes the last result handed over before it returns (shutdown), in the foreground too: a
result the cadence put off is written then, not lost. When it cannot be written (the Lease
is lost, the push fails, the write outlives its time), ``unwritten`` says why, for the
process to say on its way out. The writer shares the interpreter with the cycle thread: a
write starts between cycles (``idle``), and its render is held at its next step while a
cycle runs (``_hold_for_cycle``), unless another thread waits for the lock the write holds
(``_locked``: it may be that cycle). A write waits for cycles ``hold_budget`` seconds in
all, then goes on beside them: cycles back to back never starve the status.

After its own write, the writer renders again only what a cycle changed, and compares and
summarizes those files alone (``encode_changes``); the branch read (at the start, after a
failed push, as a follower) is compared whole. A shard's write renders the whole record.

A process that does not lead (``serve``, a standby replica) follows the leader's record:
``leader_record`` reads the branch again when its tip has moved, and the cycle joins it into
its memory (``Memory.following``), so it shows what the leader recorded of a run it did not
see end, and starts from it if it takes the Lease.

With ``retention``, the writer bounds the branch's history after a commit, at most every
``retention_interval`` seconds (``StatusBranch.retain``: what is older is squashed into one
root commit, pushed with a lease). A lost lease (another replica wrote meanwhile) is tried
again after the next commit; a branch that holds a commit the reconciler did not make is
never rewritten, said once in one line, and retention stops until the process restarts."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from reconciler.adapters.git import GitSyncError, Retention, RetentionRefused, StatusBranch
from reconciler.core.decision.cycle import Memory, memory_from_status
from reconciler.core.plan import Plan
from reconciler.core.plan.partitions import ShardScope
from reconciler.core.reporting.report import encode, encode_changes
from reconciler.core.reporting.shards import scoped_record, shard_changes
from reconciler.core.reporting.status import (
    NOTIFY_FILE,
    StatusDelta,
    StatusMemos,
    delta_changes,
    is_decision_path,
    read_status,
    status_changes,
    summarize_changes,
    summarize_cycle,
)
from reconciler.core.types import CompiledRepo
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.faults import FaultPoints

log = logging.getLogger("reconciler.status")

RETENTION_INTERVAL = 600.0  # seconds between two retention passes of one writer
# seconds: how often a write held by a cycle looks for a close, or for a caller of the lock
HOLD_POLL = 0.05
# seconds a write waits for cycles in all (before and during its render): past it, it goes
# on beside them, so that cycles back to back (a busy fleet) never starve the status
HOLD_BUDGET = 5.0

LOST_LEASE = "this replica no longer holds the Lease: the leader writes the status"


class StatusPublisher:
    def __init__(
        self,
        branch: StatusBranch,
        *,
        min_interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        background: bool = False,
        is_leader: Callable[[], bool] | None = None,
        follow_interval: float = 0.0,
        retention: Retention | None = None,
        retention_interval: float = RETENTION_INTERVAL,
        status_repo: str | None = None,
        idle: Callable[[float], bool] | None = None,
        hold_budget: float = HOLD_BUDGET,
    ) -> None:
        self.branch = branch
        # in the background: whether no cycle runs, waiting up to the seconds given (the
        # loop's ``Wakeup.wait_idle``). A write renders every changed record (half a second
        # of CPU at 1,000 of them) and shares the GIL with the cycle thread: it starts
        # between cycles, not during one (nor does ``close`` wait for one)
        self.idle = idle
        self.hold_budget = hold_budget
        self._hold_until = 0.0  # the write in progress waits for cycles until then (monotonic)
        self.min_interval = min_interval
        self.clock = clock
        self._files: dict[str, bytes] | None = None  # what the branch holds, as we wrote it
        self._files_tip: str | None = None  # the commit ``_files`` was read at (None: written)
        self._last_attempt: float | None = None  # of a write (a commit, or a failed one)
        self.due: float | None = None  # when a write put off by the cadence is due
        self.commits = 0
        self.put_off = 0  # cycles whose status was left to a later one
        self.last_error = ""
        self.retention = retention if retention else None
        self.retention_interval = retention_interval
        self._retained_at: float | None = None  # the last retention pass (None: none yet)
        self.retention_refused = ""  # why retention stopped (a commit not the reconciler's)
        self.squashed = 0  # commits squashed by retention, all passes
        # --status-repo as given: what the org file's status.repo is compared with
        self.status_repo = status_repo
        self._settings_warned = ""  # the last disagreement with the org file said
        self._memos = StatusMemos()  # what spares rendering an unchanged record again
        # ``_files`` as this writer's last write left them (None: read, or not written since
        # the memos' render), and the paths its renders changed since that write
        self._own: dict[str, bytes] | None = None
        self._behind: set[str] = set()
        # the fault points around a write, and what to count a failed one with: set by the
        # Runtime (``before-status``/``after-status`` are hit by the thread that writes)
        self.faults: FaultPoints | None = None
        self.on_failure: Callable[[], None] | None = None
        # the notifications owed (``status/_notify.yaml``, None: none), set by the Runtime
        self.owed: Callable[[], bytes | None] = lambda: None
        # told how many files a write rendered again, once it is over and no cycle runs:
        # the Runtime's ``HeapKeeper`` (the first write renders every record)
        self.after_render: Callable[[int], None] | None = None
        self._rendered = 0  # files the write in progress rendered again
        self.is_leader = is_leader
        self.owns: Callable[[str], bool] | None = None  # sharded: whether a partition is held
        self.retains: Callable[[], bool] = lambda: True  # sharded: this one runs retention
        # following the leader's record (``leader_record``): at most one fetch per interval
        self.follow_interval = follow_interval
        self._followed_at: float | None = None
        self._writing = threading.Lock()  # one write at a time: the files and memos are its
        self._wanted = 0  # threads waiting for ``_writing`` outside a write (``_locked``)
        self._cond = threading.Condition()
        self._next: CycleResult | None = None  # handed over, not written yet
        self._held: CycleResult | None = None  # in the foreground: put off by the cadence
        # why the last result handed over is not on the branch ("" when it is, or when
        # nothing differed): what a process says on its way out
        self.unwritten = ""
        self._busy = False  # the writer thread holds a result
        self._closed = False
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)
            self._thread.start()

    @property
    def background(self) -> bool:
        return self._thread is not None

    def _current(self) -> dict[str, bytes]:
        if self._files is None:
            self._files = self.branch.read()
            self._files_tip = self.branch.last_tip
        return self._files

    def leader_record(self) -> Memory | None:
        """For a process that does not lead: the status branch's record if its tip moved
        since it was last read, else None; fetched at most every ``follow_interval``. A
        fetch that fails is logged and tried again at the next interval."""
        now = self.clock()
        if self._followed_at is not None and now - self._followed_at < self.follow_interval:
            return None
        self._followed_at = now
        with self._locked():
            try:
                tip = self.branch.fetch()
                known, read = self._files, self._files_tip
                if known is not None and tip == read:
                    return None
                since = (read, known) if known is not None and read is not None else None
                self._files = self.branch.files_at(tip, since)
                self._files_tip = tip
            except GitSyncError as exc:
                log.warning("cannot read the status branch: %s", exc)
                return None
            return memory_from_status(read_status(self._files))

    def taken_record(self) -> Memory:
        """The status branch's record at its tip, fetched now: what a shard starts a
        partition it takes from (its last owner's last write). Raises ``GitSyncError``."""
        with self._locked():
            tip = self.branch.fetch()
            known, read = self._files, self._files_tip
            since = (read, known) if known is not None and read is not None else None
            self._files = self.branch.files_at(tip, since)
            self._files_tip = tip
            return memory_from_status(read_status(self._files))

    def files(self) -> dict[str, bytes]:
        """The branch's files as this writer last read or wrote them (read once if never):
        the same object until they change."""
        with self._locked():
            return self._current()

    def recorded(self) -> Memory:
        """What a previous process recorded, so a workload deleted by hand while we were
        down is ``Stopped`` rather than dispatched again, and a cluster that cannot be read
        keeps its last known phases."""
        with self._locked():
            return memory_from_status(read_status(self._current()))

    def recorded_owed(self) -> bytes | None:
        """The notifications a previous process owed (``status/_notify.yaml``), or None."""
        with self._locked():
            return self._current().get(NOTIFY_FILE)

    def applied(self) -> str | None:
        """The config commit a previous process had in force (``status/config.yaml``
        ``applied``), or None: the anchor of the signature check at a start."""
        with self._locked():
            config = read_status(self._current()).config
        return (config.applied or None) if config is not None else None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """``_writing`` for a reader of the files (a cycle, a view): a write held by a cycle
        (``_hold_for_cycle``) goes on while one waits, since that cycle may be the one."""
        with self._cond:
            self._wanted += 1
        try:
            with self._writing:
                yield
        finally:
            with self._cond:
                self._wanted -= 1

    def _hold_for_cycle(self, *, locked: bool = True) -> None:
        """The write's pause, on the writer thread (before it, at each step of its render,
        before its settle): hold it while a cycle runs (they share the GIL, and a commit's
        cycle should not wait for the last one's status), unless a reader waits for the
        lock this write holds (``locked``: not before or after the write, when a reader
        holding the lock is no reason to go on), the writer closes, or the write's
        ``hold_budget`` is spent."""
        idle = self.idle
        if idle is None or threading.current_thread() is not self._thread:
            return
        while (
            not self._closed
            and not (locked and self._wanted)
            and time.monotonic() < self._hold_until
            and not idle(HOLD_POLL)
        ):
            pass

    def publish(self, result: CycleResult) -> str | None:
        """Commit the cycle's status if it differs from the branch; the new commit's SHA.
        In the background: hand it to the writer thread (None)."""
        if self._thread is None:
            return self._write(result)
        with self._cond:
            if self._closed:
                return None
            if self._next is not None:
                self.put_off += 1  # superseded before it was written
            self._next = result  # a newer status supersedes one not written yet
            self._cond.notify_all()
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._next is None and not self._closed:
                    self._cond.wait()
                if self._next is None:
                    return  # closed, all written
                # the cadence: the next write at ``min_interval`` after the last attempt,
                # with the newest result by then (at once when closing)
                while not self._closed:
                    last = self._last_attempt
                    wait = 0.0 if last is None else last + self.min_interval - self.clock()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
            # not under the lock: the cycle waited for hands its result over
            self._hold_until = time.monotonic() + self.hold_budget
            self._hold_for_cycle(locked=False)  # no lock held yet: no reader waits for it
            with self._cond:
                result, self._next = self._next, None
                assert result is not None  # only this thread takes it
                self._busy = True
            try:
                if (self.is_leader is None or self.is_leader()) and self._holds(result):
                    self._write(result, paced=False)  # paced above
                    if self.last_error and self.on_failure is not None:
                        self.on_failure()
                else:  # the Lease was lost: another leader writes; read the branch again
                    with self._writing:
                        self._files = None
                    self.unwritten = LOST_LEASE
                    log.warning("status of %s not written: %s", result.version, LOST_LEASE)
            except Exception:  # a bug writing one status must not end the writer
                log.exception("status write failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _holds(self, result: CycleResult) -> bool:
        """Sharded: this replica still holds every partition ``result`` was decided over
        (``owns``, set by the runtime); a partition taken since is its new owner's."""
        scope = result.shard
        return scope is None or self.owns is None or all(map(self.owns, scope.partitions))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every result handed over is written (or dropped); False on timeout."""
        if self._thread is None:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._next is None and not self._busy, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Write the last result handed over (not waiting for the cadence), then stop the
        writer thread. False when the write outlived ``timeout``: it is left to end with the
        process (a push is made whole or not at all). ``unwritten`` then says why the last
        result is not on the branch."""
        if self._thread is None:
            held, self._held = self._held, None
            if held is not None:
                if (self.is_leader is None or self.is_leader()) and self._holds(held):
                    self._write(held, paced=False)
                else:
                    self.unwritten = LOST_LEASE
            return True
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("shutdown: left a status write in progress after %ss", timeout)
            self.unwritten = f"the status write outlived {timeout}s and ends with the process"
            return False
        return True

    def _write(self, result: CycleResult, *, paced: bool = True) -> str | None:
        with self._writing:
            if self.faults is not None:
                self.faults.hit("before-status")
            self._rendered = 0
            sha = self._commit(result, paced=paced)
            if self.faults is not None:
                self.faults.hit("after-status")
        if self._rendered and self.after_render is not None:
            self._hold_for_cycle(locked=False)  # ``_writing`` is let go: no reader waits for it
            self.after_render(self._rendered)
        return sha

    def _commit(self, result: CycleResult, *, paced: bool) -> str | None:
        compiled, plan = result.compiled, result.plan
        if compiled is None or plan is None:
            return None  # no valid config was ever loaded: nothing to describe yet
        now = self.clock()
        last = self._last_attempt
        if paced and last is not None and now < last + self.min_interval:
            self.due = last + self.min_interval
            self.put_off += 1
            self._held = result  # written by a later cycle, or by ``close``
            self.unwritten = "put off by --status-interval"
            return None  # not even rendered: a later cycle's status supersedes this one
        self.due = None
        self._held = None
        self._check_settings(compiled)
        if result.shard is not None:
            return self._commit_shard(result, compiled, plan, result.shard, now)
        try:
            before = self._current()
            delta = encode_cycle_changes(result, self._memos, self._hold_for_cycle)
            self._rendered = len(delta.changes)
            own = before is self._own  # what this writer wrote: only what it rendered again
            files = delta.files
            if own:
                self._behind.update(delta.changes)
                changes = delta_changes(before, files, self._behind)
            else:  # read from the branch: compared whole (flat records moved to buckets)
                files = dict(files)
                # the owed notifications alone make no commit: they ride on one made anyway
                if NOTIFY_FILE in before:
                    files[NOTIFY_FILE] = before[NOTIFY_FILE]
                changes = status_changes(before, files)
                if not changes:  # the branch holds this render, but maybe its decision record
                    self._own = before
                    self._behind = {
                        path
                        for path in files.keys() | before.keys()
                        if is_decision_path(path) and before.get(path) != files.get(path)
                    }
            if not changes:
                self.unwritten = ""
                return None
            owed = self.owed()
            if owed != before.get(NOTIFY_FILE):
                changes[NOTIFY_FILE] = owed
            message = (
                summarize_changes(before, delta)
                if own
                else summarize_cycle(before, files, self._memos.phases)
            )
            self._last_attempt = now  # a failing remote is retried at the cadence too
            sha = self.branch.write(changes, message)
        except GitSyncError as exc:
            self.last_error = str(exc)
            self.unwritten = f"the push failed: {exc}"
            self._files = self._own = None  # re-read the branch next time
            log.error("status write failed: %s", exc)
            return None
        except Exception:  # a render cut short: its memos say what was not written
            self._memos, self._own = StatusMemos(), None
            raise
        merged = dict(before)
        for path, content in changes.items():
            if content is None:
                merged.pop(path, None)
            else:
                merged[path] = content
        self._files = self._own = merged
        self._behind = set()
        self._files_tip = None  # as we wrote it: a follower's next read is a whole one
        self.last_error = ""
        self.unwritten = ""
        if sha:
            self.commits += 1
            self._retain(now)
        return sha

    def _commit_shard(
        self, result: CycleResult, compiled: CompiledRepo, plan: Plan, scope: ShardScope, now: float
    ) -> str | None:
        """A shard's write: its files joined with the other shards' at the tip, again at
        each attempt of the push (``core/reporting/shards.py``); never forced."""
        try:
            before = self._current()
            known = len(self._memos.rendered)
            files = scoped_record(render_cycle_status(result, compiled, plan, self._memos), scope)
            # the records new to the memos (all of the scope's at a first write, or after a
            # partition is taken), or those that differ from the branch
            fresh = len(self._memos.rendered) - known
            owed = self.owed()  # this shard's own: joined with the others' owed
            if owed is not None:
                files[NOTIFY_FILE] = owed
            changes = shard_changes(before, files, scope)  # as this writer knows the branch
            self._rendered = max(fresh, len(changes))
            if not changes:
                self.unwritten = ""
                return None
            self._last_attempt = now
            after = dict(before)
            for path, content in changes.items():
                if content is None:
                    after.pop(path, None)
                else:
                    after[path] = content
            message = summarize_cycle(before, after, self._memos.phases)
            sha, merged = self.branch.write_joined(
                lambda tip: shard_changes(tip, files, scope), message
            )
        except GitSyncError as exc:
            self.last_error = str(exc)
            self.unwritten = f"the push failed: {exc}"
            self._files = None
            log.error("status write failed: %s", exc)
            return None
        self._files = merged
        self._files_tip = None
        self.last_error = ""
        self.unwritten = ""
        if sha:
            self.commits += 1
            if self.retains():
                self._retain(now)
        return sha

    def _check_settings(self, compiled: CompiledRepo) -> None:
        """Say once, in one line, when the config in force's ``status.repo`` or
        ``status.retention`` differs from the flags this process runs with (they win)."""
        org = compiled.org
        kept = self.retention or Retention()
        flags = (self.status_repo, kept.keep_days, kept.max_commits)
        config = (org.status_repo, org.status_keep_days, org.status_max_commits)
        if flags == config:
            self._settings_warned = ""
            return

        def said(value: str | float | None) -> str:
            return (
                "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
            )

        line = (
            f"reconciler.yaml's status settings (repo {said(config[0])}, keepDays "
            f"{said(config[1])}, maxCommits {said(config[2])}) differ from the flags this "
            f"process runs with (--status-repo {said(flags[0])}, --status-keep-days "
            f"{said(flags[1])}, --status-max-commits {said(flags[2])}): the flags are used"
        )
        if line != self._settings_warned:
            log.warning("%s", line)
            self._settings_warned = line

    def _retain(self, now: float) -> None:
        """One retention pass after a commit, at most every ``retention_interval``."""
        if self.retention is None or self.retention_refused:
            return
        if self._retained_at is not None and now - self._retained_at < self.retention_interval:
            return
        try:
            done = self.branch.retain(self.retention)
        except RetentionRefused as exc:
            log.error("%s; status retention is off until a restart", exc)
            self.retention_refused = str(exc)
            return
        except GitSyncError as exc:
            log.warning("status retention failed, tried again after the next commit: %s", exc)
            return
        if done.lost_lease:
            log.info("status retention: the branch moved meanwhile (another writer); tried again")
            return
        self._retained_at = now
        if done.squashed:
            self.squashed += done.squashed
            log.info(
                "status retention: squashed %d commits into one, kept %d",
                done.squashed,
                done.kept,
            )


def encode_cycle_changes(
    result: CycleResult, memos: StatusMemos, pause: Callable[[], None] | None = None
) -> StatusDelta:
    """``render_cycle_status`` for the writer that keeps ``memos``: what changed since its
    last render, and every file (``encode_changes``, held at each ``pause``)."""
    shown = result.report
    if shown is None:
        raise ValueError("encode_cycle_changes: a result without a decision has no report")
    return encode_changes(
        shown,
        memos,
        config_error=result.config_errors,
        config_version=result.attempted_version,
        internal_error=result.internal_error,
        pause=pause,
    )


def render_cycle_status(
    result: CycleResult, compiled: CompiledRepo, plan: Plan, memos: StatusMemos | None = None
) -> dict[str, bytes]:
    """Every status file one cycle writes: its report (``encode``: ``compiled`` and
    ``plan`` are the result's, whose report carries them), with the config commit read
    and its errors."""
    shown = result.report
    if shown is None:
        raise ValueError("render_cycle_status: a result without a decision has no report")
    return encode(
        shown,
        config_error=result.config_errors,
        config_version=result.attempted_version,
        internal_error=result.internal_error,
        memos=memos,
    )
