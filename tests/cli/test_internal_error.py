"""A bug in the compiler is an internal error, never a config error.

A compile step is made to raise (as a bug would): compile raises ``InternalError`` (no
``file:line:col`` error); the running reconciler keeps the last good config, reports
``internal_error``, counts ``reconciler_internal_errors_total`` and writes reason
``InternalError`` to ``status/config.yaml``; every command that compiles exits 70 with the
traceback and "this is a bug in the reconciler".
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.paths import TEMPLATE
from support.snapshots import overlay
from support.status_branch import MemoryStatusBranch

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.kube import Kube, KubeError
from reconciler.adapters.repo import snapshot_worktree
from reconciler.cli.main import cli
from reconciler.cli.status_cmd import warnings
from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.reporting.status import CONFIG_FILE, StatusReason, read_status
from reconciler.core.types import BUG_NOTE, ClusterSpec, ConfigError, InternalError
from reconciler.runtime.cycle import Reconciler
from reconciler.runtime.service import Runtime
from reconciler.runtime.status import StatusPublisher

_LOCATED = re.compile(r"^\S+:\d+:\d+: ", re.M)
EDITED = "projects/vision/operations/dedupe.yaml"


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("boom: a bug in a compile step")


def break_step(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make the compile step ``name`` raise, in every compiler module that looks it up."""
    patched = 0
    for module_name, module in list(sys.modules.items()):
        in_compiler = module_name == "reconciler.core.compile" or module_name.startswith(
            "reconciler.core.compile."
        )
        if in_compiler and hasattr(module, name):
            monkeypatch.setattr(module, name, _boom)
            patched += 1
    assert patched, f"no compiler module has {name}"


# --- (a) compile --------------------------------------------------------------------------


def test_a_bug_while_compiling_an_operation_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snapshot = snapshot_worktree(TEMPLATE)
    break_step(monkeypatch, "check_policy")
    with pytest.raises(InternalError) as info:
        compile_repo(snapshot)
    exc = info.value
    assert not isinstance(exc, ConfigError)
    assert isinstance(exc.cause, RuntimeError) and exc.__cause__ is exc.cause
    assert exc.what.startswith("compiling operation ")
    assert exc.path is not None and exc.path.startswith("projects/")
    assert str(exc).endswith("RuntimeError: boom: a bug in a compile step")
    assert _LOCATED.search(str(exc)) is None

    with pytest.raises(InternalError) as one:
        compile_operation(snapshot, "vision/train-resnet")
    assert one.value.what == "compiling operation vision/train-resnet"
    assert one.value.path == "projects/vision/operations/train-resnet.yaml"


def test_a_bug_outside_any_operation_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snapshot = snapshot_worktree(TEMPLATE)
    break_step(monkeypatch, "check_references")
    with pytest.raises(InternalError) as info:
        compile_repo(snapshot)
    assert info.value.what == "compiling the config repo" and info.value.path is None


def test_config_errors_are_still_config_errors() -> None:
    broken = overlay(snapshot_worktree(TEMPLATE), {EDITED: "kind: Operation\nname: [\n"})
    compiled = compile_repo(broken)
    assert compiled.errors and str(compiled.errors[0]).startswith(EDITED + ":")


# --- (b) the running reconciler ----------------------------------------------------------


def _unreachable(spec: ClusterSpec) -> Kube:
    raise KubeError(f"cluster {spec.name} is not there in a unit test")


def test_the_runtime_keeps_the_last_good_config_and_reports_the_bug(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    good = replace(snapshot_worktree(TEMPLATE), version="c1")
    text = good.files[EDITED].content.decode()
    newer = overlay(replace(good, version="c2"), {EDITED: text + "\n# edited\n"})
    feed = iter([good, newer, newer])
    rec = Reconciler(lambda: next(feed), _unreachable, SystemClock(), watch=False)
    branch = MemoryStatusBranch()
    runtime = Runtime(rec, StatusPublisher(branch))  # type: ignore[arg-type]

    first = rec.run_once()
    runtime.on_cycle(first)
    assert first.compiled is not None and first.internal_error == ""

    break_step(monkeypatch, "check_policy")
    with caplog.at_level(logging.ERROR, logger="reconciler.cycle"):
        second = rec.run_once()
    runtime.on_cycle(second)

    # the last good config stays in force; nothing is pruned
    # (the same config: a decision's compiled repo also holds its schedules' runs at its time)
    assert second.compiled is not None and second.compiled.version == "c1" == second.version
    assert {o.id for o in second.compiled.operations} == {o.id for o in first.compiled.operations}
    assert second.plan is not None and second.plan.stop == ()
    assert second.attempted_version == "c2"
    # reported as a bug, not as a config error
    assert second.config_errors == ()
    assert "RuntimeError: boom" in second.internal_error
    assert second.internal_error.startswith("compiling operation ")
    logged = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert logged and logged[0].exc_info is not None  # with its traceback
    assert BUG_NOTE in logged[0].getMessage()
    # counted
    registry = runtime.metrics.registry
    assert registry.get_sample_value("reconciler_internal_errors_total") == 1.0
    assert registry.get_sample_value("reconciler_git_sync_errors_total") == 0.0
    # written to the status branch as InternalError, with no config error
    view = read_status(branch.files)
    config = view.config
    assert config is not None
    assert config.reason == StatusReason.INTERNAL_ERROR.value == "InternalError"
    assert (config.version, config.applied, config.valid) == ("c2", "c1", False)
    assert config.errors == () and "RuntimeError: boom" in config.internal_error
    assert "internal error" in branch.messages[-1]
    lines = warnings(view)
    assert any("internal error" in line and BUG_NOTE in line for line in lines)
    assert not any("is invalid" in line for line in lines)

    # still broken on the next cycle: reported again, counted again
    third = rec.run_once()
    runtime.on_cycle(third)
    assert third.compiled is not None and third.compiled.version == "c1"
    assert third.internal_error == second.internal_error
    assert registry.get_sample_value("reconciler_internal_errors_total") == 2.0

    # fixed: the new commit applies and the status is clean again
    monkeypatch.undo()
    feed2 = iter([newer])
    rec._source = lambda: next(feed2)
    fixed = rec.run_once()
    runtime.on_cycle(fixed)
    assert fixed.internal_error == "" and fixed.version == "c2"
    config = read_status(branch.files).config
    assert config is not None and config.valid and config.reason is None
    assert b"internalError" not in branch.files[CONFIG_FILE]


# --- (c) the commands that compile --------------------------------------------------------


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _assert_reported_as_a_bug(code: int, out: str, err: str) -> None:
    assert code == 70, (code, out, err)
    assert err.startswith("internal error: ")
    assert f"({BUG_NOTE})" in err.splitlines()[0]
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err
    assert _LOCATED.search(out) is None and _LOCATED.search(err) is None
    assert "invalid" not in out + err


@pytest.mark.parametrize(
    "args",
    [
        ("validate",),
        ("validate", "-o", "json"),
        ("compile", "vision/train-resnet"),
        ("plan",),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_command_that_compiles_exits_70(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    break_step(monkeypatch, "check_policy")
    _assert_reported_as_a_bug(*_invoke(*args, "--repo", str(TEMPLATE)))


@pytest.mark.parametrize("command", ["status", "queues"])
def test_live_views_exit_70(
    monkeypatch: pytest.MonkeyPatch, remote: Path, tmp_path: Path, command: str
) -> None:
    break_step(monkeypatch, "check_policy")
    cache = str(tmp_path / "cache")
    _assert_reported_as_a_bug(
        *_invoke(command, "--live", "--repo", str(remote), "--cache-dir", cache)
    )


def test_config_errors_still_exit_1(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "reconciler.yaml").write_text("kind: Org\nnope: 1\n")
    code, out, err = _invoke("validate", "--repo", str(root))
    assert code == 1 and _LOCATED.search(out) and "internal error" not in out + err


@pytest.mark.parametrize("args", [("plan",), ("plan", "--base", "HEAD")], ids=" ".join)
def test_a_bug_while_reading_the_repo_exits_70(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """``plan`` reported any exception of the reader as ``error: cannot read HEAD in DIR``
    and exit 1, as it does a missing ref or an unreadable file: a bug in the reader blamed
    the pull request it planned."""
    import shutil
    import subprocess

    import reconciler.adapters.repo as repo_adapter

    root = tmp_path / "repo"
    shutil.copytree(TEMPLATE, root)
    for git_args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-qm", "t")):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *git_args], cwd=root, check=True
        )
    monkeypatch.setattr(repo_adapter, "needed_paths", _boom)
    monkeypatch.setattr(repo_adapter, "read_needed", _boom)
    code, out, err = _invoke(*args, "--repo", str(root))
    assert code == 70, (out, err)
    assert err.startswith("internal error: reading ")
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err
