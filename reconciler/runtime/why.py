"""A status branch's recorded cycles, read from Git and replayed (``reconciler why`` and the
operation pages): each status commit's files, the config commit its decision record names,
compiled once, and ``replay`` (``core/reporting/replay.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from reconciler.adapters.git import ConfigRepo, GitSyncError, StatusBranch, redact
from reconciler.core.compile import compile_repo
from reconciler.core.plan import PlanInputError
from reconciler.core.reporting.replay import (
    OutcomeChange,
    Replayed,
    ReplayError,
    outcome_history,
    recorded_clock,
    replay,
)
from reconciler.core.reporting.status import (
    DECISION_FILE,
    DecisionRecord,
    StatusView,
    read_status,
)
from reconciler.core.types import CompiledRepo, printable_text


class WhyError(Exception):
    """A history that cannot be replayed as asked: one line, ``error: <message>``."""


class History:
    """The recorded cycles of ``status``'s branch (fetched once, at the start), replayed on
    demand with the config of ``config``'s repo at each record's commit. Each commit is
    replayed once (``keep``: the newest replays kept)."""

    def __init__(self, config: ConfigRepo, status: StatusBranch, *, keep: int = 0) -> None:
        self.config = config
        self.status = status
        self.keep = keep
        self.commits: list[str] = []
        self._compiled: dict[str, CompiledRepo] = {}
        self._replayed: dict[str, Replayed] = {}
        self._last: tuple[str, dict[str, bytes]] | None = None  # the last commit read
        self._config_fetched = False
        self.fetch()

    def fetch(self) -> None:
        """The branch's recorded commits as the remote has them now."""
        if self.status.fetch() is None:
            where = redact(self.status.remote)
            raise WhyError(f"no status yet: branch {self.status.branch} does not exist in {where}")
        self.commits = self.status.commits_changing(DECISION_FILE)
        self._config_fetched = False

    def compiled_at(self, sha: str) -> CompiledRepo:
        if sha not in self._compiled:
            if not self._config_fetched:
                self.config.fetch()
                self._config_fetched = True
            compiled = compile_repo(self.config.snapshot(sha))
            if compiled.errors:
                raise WhyError(f"config {sha[:12]} does not compile: {compiled.errors[0]}")
            self._compiled[sha] = compiled
        return self._compiled[sha]

    def replayed(self, commit: str, view: StatusView) -> Replayed:
        known = self._replayed.get(commit)
        if known is not None:
            return known
        problems = [p for p in view.problems if not p.startswith("status/ledger/")]
        if problems:
            raise WhyError(
                f"status commit {commit[:12]} cannot be replayed: "
                f"unreadable status file {printable_text(problems[0])}"
            )
        if view.decision is None:
            raise WhyError(f"status commit {commit[:12]} records no decision")
        try:
            at = recorded_clock(view.decision)
            compiled = self.compiled_at(view.decision.config)
            decision = replay(view, compiled)
        except (ReplayError, PlanInputError) as exc:
            raise WhyError(f"status commit {commit[:12]}: {exc}") from None
        except GitSyncError as exc:
            raise WhyError(f"status commit {commit[:12]}: {exc}") from None
        out = Replayed(commit, at, view, compiled, decision)
        if self.keep:
            self._replayed[commit] = out
            for old in list(self._replayed)[: max(0, len(self._replayed) - self.keep)]:
                del self._replayed[old]
        return out

    def at_commit(self, name: str) -> Replayed:
        sha = self.status.commit_on_branch(name)
        if sha is None:
            raise WhyError(f"{name} is not a commit on the status branch {self.status.branch}")
        if sha not in self.commits:
            raise WhyError(
                f"status commit {sha[:12]} records no decision (it was written before "
                "decisions were recorded, or by hand)"
            )
        return self.replayed(sha, read_status(self.status.files_at(sha)))

    def at_time(self, when: datetime, operation: str = "") -> Replayed:
        """The cycle in force at ``when``: the last recorded at or before it, found by
        bisection, as the records' clocks rise along the branch (a branch of 10,000
        commits is some 14 commits read, not up to 10,000). With shards, the last of
        those that decided ``operation``'s queue (a record names its shard's)."""
        views: dict[str, StatusView] = {}
        low, high = 0, len(self.commits)  # [:low] recorded at or before when; [high:] not
        while low < high:
            mid = (low + high) // 2
            sha = self.commits[mid]
            view = views[sha] = self._view(sha)
            if view.decision is not None and self._clock(sha, view.decision) <= when:
                low = mid + 1
            else:
                high = mid
        if low == 0:
            raise WhyError(f"{when.isoformat()} is before the first recorded decision")
        while operation and low > 1:
            sha = self.commits[low - 1]
            view = views[sha] = views[sha] if sha in views else self._view(sha)
            if self._decides(view, operation):
                break
            low -= 1
        sha = self.commits[low - 1]
        return self.replayed(sha, views[sha] if sha in views else self._view(sha))

    def _decides(self, view: StatusView, operation: str) -> bool:
        """Whether the commit's cycle decided ``operation``: one process's, or a shard's
        whose queues hold its queue then."""
        record = view.decision
        if record is None or not record.clusters:
            return True
        compiled = self.compiled_at(record.config)
        queues = {o.queue for o in (*compiled.operations, *compiled.schedules) if o.id == operation}
        return bool(queues & set(record.queues))

    @staticmethod
    def _clock(sha: str, record: DecisionRecord) -> datetime:
        try:
            return recorded_clock(record)
        except ReplayError as exc:
            raise WhyError(f"status commit {sha[:12]}: {exc}") from None

    def every(self, last: int = 0) -> Iterator[Replayed]:
        """Every recorded cycle, oldest first (``last``: only the newest that many); a
        cycle replayed before is not read again."""
        commits = self.commits[-last:] if last else self.commits
        for sha in commits:
            known = self._replayed.get(sha)
            yield known if known is not None else self.replayed(sha, self._view(sha))

    def outcomes(self, op_id: str, last: int = 0) -> list[OutcomeChange]:
        """The operation's outcome over the recorded cycles (the newest ``last``)."""
        return outcome_history(op_id, self.every(last))[0]

    def _view(self, sha: str) -> StatusView:
        """A commit's files read back, read as a diff of the last commit read."""
        files = self.status.files_at(sha, self._last)
        self._last = (sha, files)
        return read_status(files)
