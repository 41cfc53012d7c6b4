"""The status publisher writes, after its first write, what its renders changed alone
(``render_changes``): the branch holds exactly a full render's files, and each commit
message is the one comparing the whole branch gives, through a failed push (read again
and compared whole)."""

from __future__ import annotations

from collections.abc import Mapping

from support.status_branch import results

from reconciler.adapters.git import GitSyncError
from reconciler.core.reporting.status import summarize_cycle
from reconciler.runtime.status import StatusPublisher, render_cycle_status


class RecordingBranch:
    """A status branch in memory; ``fail`` pushes fail first."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.messages: list[str] = []
        self.last_tip: str | None = None
        self.fail = 0

    def read(self) -> dict[str, bytes]:
        return dict(self.files)

    def write(self, changes: Mapping[str, bytes | None], message: str) -> str:
        if self.fail:
            self.fail -= 1
            raise GitSyncError("the remote hung up")
        for path, content in changes.items():
            if content is None:
                self.files.pop(path, None)
            else:
                self.files[path] = content
        self.messages.append(message)
        return f"sha{len(self.messages)}"


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
