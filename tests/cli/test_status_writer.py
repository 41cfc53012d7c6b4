"""The status writer in the background (``StatusPublisher(background=True)``): the cycle
hands its result over and goes on; results coalesce while a write is in progress; a
result left from before a lost Lease is dropped; ``close`` writes the last one."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from support.status_branch import MemoryStatusBranch
from support.status_branch import results as _results

from reconciler.core.reporting.status import CONFIG_FILE, read_status
from reconciler.runtime.loop import Wakeup
from reconciler.runtime.service import Runtime
from reconciler.runtime.status import StatusPublisher


class GatedBranch(MemoryStatusBranch):
    """A status branch whose writes wait for ``gate`` (a slow push)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def write(self, changes: Mapping[str, bytes | None], message: str) -> str:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().write(changes, message)

    def applied(self) -> str:
        config = read_status(self.files).config
        assert config is not None
        return config.applied


def test_the_cycle_does_not_wait_for_the_write_and_results_coalesce() -> None:
    results = _results(4)
    branch = GatedBranch()
    publisher = StatusPublisher(branch, background=True)  # type: ignore[arg-type]
    runtime = Runtime(None, publisher)  # type: ignore[arg-type]
    try:
        runtime.on_cycle(results[0])
        assert branch.entered.wait(30)  # the writer is in the push of c0, held there
        for later in results[1:]:
            runtime.on_cycle(later)  # returns at once: the write of c0 is still held
        assert runtime.completed is results[3] and branch.messages == []
        branch.gate.set()
        assert publisher.flush(30)
        # c1 and c2 were superseded before they were written: two commits, the newest last
        assert len(branch.messages) == 2 and publisher.commits == 2
        assert publisher.put_off == 2
        assert branch.applied() == "c3"
    finally:
        branch.gate.set()
        assert publisher.close(30)


def test_close_writes_the_last_result_without_waiting_for_the_cadence() -> None:
    first, second = _results(2)
    branch = GatedBranch()
    branch.gate.set()
    publisher = StatusPublisher(branch, background=True, min_interval=3600.0)  # type: ignore[arg-type]
    publisher.publish(first)
    assert publisher.flush(30) and branch.applied() == "c0"
    publisher.publish(second)  # due in an hour
    assert not publisher.flush(0.3) and branch.applied() == "c0"
    assert publisher.close(30)
    assert branch.applied() == "c1" and len(branch.messages) == 2
    publisher.publish(first)  # after close: nothing more is written
    assert branch.applied() == "c1"


def _while_leading(**settings: Any) -> tuple[GatedBranch, StatusPublisher, dict[str, bool]]:
    """A publisher that writes while ``leading["now"]``, on an open branch."""
    branch = GatedBranch()
    branch.gate.set()
    leading = {"now": True}
    publisher = StatusPublisher(
        branch,  # type: ignore[arg-type]
        is_leader=lambda: leading["now"],
        **settings,
    )
    return branch, publisher, leading


def test_a_result_from_before_a_lost_lease_is_dropped() -> None:
    first, second = _results(2)
    branch, publisher, leading = _while_leading(background=True)
    publisher.publish(first)
    assert publisher.flush(30) and branch.applied() == "c0"
    assert publisher.unwritten == ""
    leading["now"] = False
    publisher.publish(second)
    assert publisher.close(30)
    assert "no longer holds the Lease" in publisher.unwritten
    assert branch.applied() == "c0" and len(branch.messages) == 1
    assert CONFIG_FILE in branch.files


def test_a_failed_write_is_counted_by_the_runtime() -> None:
    from reconciler.adapters.git import GitSyncError

    (result,) = _results(1)

    class Refusing(GatedBranch):
        def write(self, changes: Mapping[str, bytes | None], message: str) -> str:
            raise GitSyncError("push refused by a hook")

    publisher = StatusPublisher(Refusing(), background=True)  # type: ignore[arg-type]
    runtime = Runtime(None, publisher)  # type: ignore[arg-type]
    runtime.on_cycle(result)
    assert publisher.close(30)
    assert publisher.last_error == "push refused by a hook"
    assert runtime.metrics.git_sync_errors._value.get() == 1


def test_in_the_foreground_close_writes_the_result_the_cadence_put_off() -> None:
    first, second = _results(2)
    branch = GatedBranch()
    branch.gate.set()
    publisher = StatusPublisher(branch, min_interval=3600.0)  # type: ignore[arg-type]
    runtime = Runtime(None, publisher)  # type: ignore[arg-type]
    runtime.on_cycle(first)
    runtime.on_cycle(second)  # due in an hour: put off
    assert branch.applied() == "c0" and runtime.unwritten == "put off by --status-interval"
    assert runtime.close(30)
    assert branch.applied() == "c1" and runtime.unwritten == ""


def test_a_result_close_cannot_write_says_why() -> None:
    first, second = _results(2)
    branch, publisher, leading = _while_leading(min_interval=3600.0)
    publisher.publish(first)
    publisher.publish(second)
    leading["now"] = False
    assert publisher.close(30)
    assert branch.applied() == "c0"
    assert "no longer holds the Lease" in publisher.unwritten


def test_a_failed_push_at_close_says_why() -> None:
    from reconciler.adapters.git import GitSyncError

    (result,) = _results(1)

    class Refusing(GatedBranch):
        def write(self, changes: Mapping[str, bytes | None], message: str) -> str:
            raise GitSyncError("push refused by a hook")

    publisher = StatusPublisher(Refusing())  # type: ignore[arg-type]
    publisher.publish(result)
    assert publisher.close(30)
    assert publisher.unwritten == "the push failed: push refused by a hook"


def test_run_once_says_loudly_when_its_status_is_not_on_the_branch(
    template_remote: Path, tmp_path: Path
) -> None:
    """``run --once`` whose status push a hook refuses: it exits 1 and says why."""
    from click.testing import CliRunner

    from reconciler.cli.main import cli

    hook = template_remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'status writes are frozen' >&2\nexit 1\n")
    hook.chmod(0o755)
    nowhere = tmp_path / "missing.kubeconfig"  # the cluster cannot be read: nothing runs
    args = ["run", "--once", "--repo", str(template_remote), "--cache-dir", str(tmp_path / "c")]
    args += ["--cluster-kubeconfig", f"local={nowhere}"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "error: the status of this cycle is not on the branch: the push failed" in (
        result.stderr
    )


def test_the_writer_starts_a_write_only_between_cycles_and_takes_the_newest_result() -> None:
    """The writer shares the GIL with the cycle thread: a write due while a cycle runs
    waits for its end (``idle``), and then writes the newest result, the running cycle's
    own when it handed one over; ``close`` does not wait for a cycle."""
    first, second, third = _results(3)
    wake = Wakeup()
    branch = GatedBranch()
    branch.gate.set()
    publisher = StatusPublisher(branch, background=True, idle=wake.wait_idle)  # type: ignore[arg-type]
    try:
        wake.begin_cycle()
        publisher.publish(first)
        assert not publisher.flush(0.3)  # not a timing assertion: it must still be waiting
        assert branch.messages == []
        publisher.publish(second)  # the running cycle's own result
        wake.end_cycle()
        assert publisher.flush(30)
        assert branch.applied() == "c1" and len(branch.messages) == 1
        wake.begin_cycle()  # a cycle left running (blocked on a cluster) at shutdown
        publisher.publish(third)
    finally:
        assert publisher.close(30)
    assert branch.applied() == "c2"


class CycleAtRender:
    """A writer's ``idle``: no cycle runs when it asks before a write, and one starts as
    the render does (``began`` False again: at the next write)."""

    def __init__(self, wake: Wakeup) -> None:
        self.wake = wake
        self.began = False

    def __call__(self, timeout: float) -> bool:
        if not self.began:
            self.began = True
            self.wake.begin_cycle()
            return True
        return self.wake.wait_idle(timeout)


def test_a_write_is_held_while_a_cycle_runs_and_never_holds_a_reader_of_its_lock() -> None:
    """A cycle that starts during a write (a push's, the commit after) holds the writer's
    render at its next step until the cycle ends; a thread that reads the files meanwhile
    (it may be that cycle: it takes the lock the write holds) lets the write go on."""
    first, second = _results(2)
    wake = Wakeup()
    branch = GatedBranch()
    branch.gate.set()
    idle = CycleAtRender(wake)
    publisher = StatusPublisher(branch, background=True, idle=idle)  # type: ignore[arg-type]
    try:
        publisher.publish(first)
        assert not publisher.flush(0.3)  # not a timing assertion: it must still be held
        assert not branch.entered.is_set()
        wake.end_cycle()
        assert publisher.flush(30)
        assert branch.applied() == "c0"
        idle.began = False
        publisher.publish(second)
        assert not publisher.flush(0.3)
        files = publisher.files()  # returns: the held write went on, and it reads its files
        assert read_status(files).config is not None and branch.applied() == "c1"
        assert wake.running  # the cycle that holds it never ended
    finally:
        wake.end_cycle()
        assert publisher.close(30)


class FetchingBranch(GatedBranch):
    """A ``GatedBranch`` whose fetch (a shard's ``taken_record``) waits for ``fetched``."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched = threading.Event()
        self.fetching = threading.Event()

    def fetch(self) -> str:
        self.fetching.set()
        assert self.fetched.wait(30), "the test never let the fetch end"
        return "tip"

    def files_at(self, tip: str, since: Any) -> dict[str, bytes]:
        return dict(self.files)


def test_the_settle_after_a_write_waits_for_the_cycle_even_while_a_reader_holds_the_lock() -> None:
    """``after_render`` (a full collection and a freeze) runs once no cycle runs. A reader
    of the files that holds the lock (the cycle's own ``taken_record``, fetching) let the
    held render go on, since it waited for the lock the write held; once the write let the
    lock go, it must not also let the settle run inside that cycle."""
    (first,) = _results(1)
    wake = Wakeup()
    branch = FetchingBranch()
    branch.gate.set()
    idle = CycleAtRender(wake)
    settled = threading.Event()
    publisher = StatusPublisher(branch, background=True, idle=idle)  # type: ignore[arg-type]
    publisher.after_render = lambda _files: settled.set()
    reader = threading.Thread(target=publisher.taken_record)
    try:
        publisher.publish(first)
        assert not publisher.flush(0.3)  # the render is held by the cycle
        reader.start()  # the cycle takes a partition: it waits for the write's lock
        assert branch.fetching.wait(30)  # the write went on, ended, and the reader holds it
        assert branch.applied() == "c0"
        assert wake.running
        assert not settled.wait(0.5), "the heap was settled inside a running cycle"
    finally:
        branch.fetched.set()
        reader.join(30)
        wake.end_cycle()
        assert publisher.close(30)
    assert settled.is_set()


def test_cycles_back_to_back_hold_a_write_only_for_its_budget() -> None:
    """A write waits for cycles ``hold_budget`` seconds in all, before and during its
    render; past it, it goes on beside them: a fleet whose cycles never pause still gets
    its status written."""
    first, second = _results(2)
    wake = Wakeup()
    branch = GatedBranch()
    branch.gate.set()
    publisher = StatusPublisher(
        branch,  # type: ignore[arg-type]
        background=True,
        idle=wake.wait_idle,
        hold_budget=0.5,
    )
    try:
        wake.begin_cycle()  # one cycle after another: never idle
        publisher.publish(first)
        assert publisher.flush(30)
        assert branch.applied() == "c0" and wake.running
        idle = CycleAtRender(wake)  # and one that starts with the render of the next
        wake.end_cycle()
        publisher.idle = idle
        publisher.publish(second)
        assert publisher.flush(30)
        assert branch.applied() == "c1" and wake.running
    finally:
        wake.end_cycle()
        assert publisher.close(30)
