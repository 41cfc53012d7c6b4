"""The status publisher writes, after its first write, what its renders changed alone
(``render_changes``): the branch holds exactly a full render's files, and each commit
message is the one comparing the whole branch gives, through a failed push (read again
and compared whole)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from support.status_branch import MemoryStatusBranch, results

from reconciler.adapters.git import GitSyncError
from reconciler.core.reporting.status import (
    NOTIFY_FILE,
    flat_operation_path,
    operation_path,
    path_operation,
    summarize_cycle,
)
from reconciler.runtime.cycle import CycleResult
from reconciler.runtime.status import StatusPublisher, render_cycle_status


class RecordingBranch(MemoryStatusBranch):
    """A status branch in memory; ``fail`` pushes fail first."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    def write(self, changes: Mapping[str, bytes | None], message: str) -> str:
        if self.fail:
            self.fail -= 1
            raise GitSyncError("the remote hung up")
        return super().write(changes, message)


def test_each_write_leaves_a_full_renders_files_and_message() -> None:
    branch = RecordingBranch()
    publisher = StatusPublisher(branch)  # type: ignore[arg-type]
    cycles = results(5)
    for i, result in enumerate(cycles):
        assert result.compiled is not None and result.plan is not None
        before = dict(branch.files)
        full = render_cycle_status(result, result.compiled, result.plan)
        branch.fail = 1 if i == 2 else 0  # the third write fails, the fourth reads again
        publisher.publish(result)
        if i == 2:
            assert branch.files == before and publisher.last_error
            continue
        assert branch.files == full
        assert branch.messages[-1] == summarize_cycle(before, full)
    assert publisher._own is publisher._files  # the delta was written, not read back


def _full(result: CycleResult) -> dict[str, bytes]:
    assert result.compiled is not None and result.plan is not None
    return render_cycle_status(result, result.compiled, result.plan)


def test_the_first_write_on_a_flat_branch_moves_every_record_into_its_bucket() -> None:
    """A branch written before the buckets: the first write deletes every flat record and
    writes its bucket's in one commit, its message the one of the records as they were;
    the writes after it (of what changed alone) leave a full render."""
    branch = RecordingBranch()
    cycles = results(4)
    for path, data in _full(cycles[0]).items():
        operation = path_operation(path)
        branch.files[flat_operation_path(operation) if operation else path] = data
    assert branch.files != _full(cycles[0])
    publisher = StatusPublisher(branch)  # type: ignore[arg-type]
    for before, result in itertools.pairwise(cycles):
        publisher.publish(result)
        assert branch.files == _full(result)
        assert branch.messages[-1] == summarize_cycle(_full(before), _full(result))
    assert len(branch.messages) == 3


class FollowedBranch(RecordingBranch):
    """``RecordingBranch`` that a follower can read (``fetch``, ``files_at``)."""

    def fetch(self) -> str:
        self.last_tip = f"sha{len(self.messages)}"
        return self.last_tip

    def files_at(self, tip: str, since: object) -> dict[str, bytes]:
        return dict(self.files)


def test_owed_notifications_a_follower_a_restart_and_a_hand_edit_leave_a_full_render() -> None:
    """Notifications riding on the writes of what changed (then delivered), a writer that
    follows another's record and leads again, a restart over the branch, and a hand edit
    read back: after each write the branch holds a full render's files (with what is owed)
    and the message comparing the whole branch gives."""
    branch = FollowedBranch()
    publisher = StatusPublisher(branch)  # type: ignore[arg-type]
    owed: list[bytes | None] = [None]
    publisher.owed = lambda: owed[0]
    cycles = results(9)

    def written(i: int, notify: bytes | None) -> None:
        result = cycles[i]
        assert result.compiled is not None and result.plan is not None
        before = dict(branch.files)
        full = render_cycle_status(result, result.compiled, result.plan)
        owed[0] = notify
        publisher.publish(result)
        expected = dict(full)
        if notify is not None:
            expected[NOTIFY_FILE] = notify
        assert branch.files == expected
        assert branch.messages[-1] == summarize_cycle(before, full)

    written(0, None)
    written(1, b"owed: 1\n")
    written(2, b"owed: 1\n")
    written(3, None)
    publisher.leader_record()  # a follower for a while: the branch read again
    written(4, b"owed: 2\n")
    written(5, b"owed: 2\n")
    again = StatusPublisher(branch)  # type: ignore[arg-type]
    again.owed, publisher = publisher.owed, again
    written(6, b"owed: 2\n")
    branch.files[operation_path("vision/train-vit")] = b"edited: by hand\n"
    publisher._files = None  # the Lease lost and taken again: the branch read again
    written(7, None)
    written(8, None)


def test_writes_put_off_by_the_cadence_leave_the_last_ones_full_render() -> None:
    """Results put off by ``--status-interval`` are not rendered: the write that follows
    (a later cycle's, or ``close``'s) holds that result's full render and message."""
    branch = RecordingBranch()
    now = [0.0]
    publisher = StatusPublisher(
        branch,  # type: ignore[arg-type]
        min_interval=10.0,
        clock=lambda: now[0],
    )
    cycles = results(7)
    written: dict[str, bytes] = {}
    for i, result in enumerate(cycles):
        assert result.compiled is not None and result.plan is not None
        now[0] = [0, 1, 2, 11, 12, 13, 14][i]
        publisher.publish(result)
        if i in (0, 3):  # due: the others are put off
            full = render_cycle_status(result, result.compiled, result.plan)
            assert branch.files == full
            assert branch.messages[-1] == summarize_cycle(written, full)
            written = dict(full)
        else:
            assert branch.files == written
    publisher.close()
    last = cycles[-1]
    assert last.compiled is not None and last.plan is not None
    full = render_cycle_status(last, last.compiled, last.plan)
    assert branch.files == full
    assert branch.messages[-1] == summarize_cycle(written, full)
