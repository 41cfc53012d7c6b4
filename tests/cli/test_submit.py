"""``reconciler submit`` and ``reconciler rerun`` against a Git remote served on
127.0.0.1 (``git daemon``): what lands on the remote, who committed it, the plan printed,
and bad input refused at its location with nothing left written."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support.git_daemon import git_daemon
from support.paths import TEMPLATE

from reconciler.cli.main import cli
from reconciler.cli.submit_cmd import pull_request_url
from reconciler.core.authoring.submit import (
    SubmitErrors,
    add_presets,
    apply_params,
    bump_generation,
    set_queue,
    set_stopped,
)

OP = """\
# a learning-rate try
kind: Operation
name: lr-try
presets: [a100, data]
run:
  container:
    command: [python, train.py]
    args: [--lr, "{{ params.lr }}", --epochs, "{{ params.epochs }}"]
"""
RUN_ONLY = "run:\n  kind: job\n  container: {image: busybox}\n"


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.fixture
def identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local Git identity: a global config of the test's own."""
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Alice Example\n\temail = alice@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def served(tmp_path: Path, identity: None) -> Iterator[tuple[str, Path]]:
    """The example config repo in a bare remote served by git daemon: its URL and path."""
    root = tmp_path / "served"
    seed = tmp_path / "seed"
    shutil.copytree(TEMPLATE, seed)
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "template")
    root.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(root / "config.git"))
    with git_daemon(root) as base:
        yield f"{base}/config.git", root / "config.git"


@pytest.fixture
def clone(served: tuple[str, Path], tmp_path: Path) -> Path:
    url, _ = served
    git(tmp_path, "clone", "-q", url, "clone")
    return tmp_path / "clone"


def _op_file(tmp_path: Path, text: str = OP) -> Path:
    path = tmp_path / "lr-try.yaml"
    path.write_text(text)
    return path


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_submit_push_lands_on_the_remote_as_the_local_identity(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    url, bare = served
    op = _op_file(tmp_path)
    code, out, err = _invoke(
        "submit", str(op), "--project", "vision", "-P", "lr=0.01", "-P", "epochs=3",
        "--queue", "batch", "--preset", "torch-ddp", "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 0, err
    written = git(bare, "show", "main:projects/vision/operations/lr-try.yaml")
    assert '"0.01"' in written and '"3"' in written and "# a learning-rate try" in written
    doc = yaml.safe_load(written)
    assert doc["queue"] == "batch"
    assert doc["presets"] == ["a100", "data", "torch-ddp"]
    assert git(bare, "log", "-1", "--format=%an <%ae>|%s", "main") == (
        "Alice Example <alice@example.com>|submit vision/lr-try"
    )
    assert "-P lr=0.01 -P epochs=3 --queue batch --preset torch-ddp" in git(
        bare, "log", "-1", "--format=%b", "main"
    )
    assert f"pushed {git(clone, 'rev-parse', 'HEAD')[:12]} to {url} main" in out
    plan = [line for line in out.splitlines() if line.startswith("plan: ")]
    assert plan == [plan[0]] and "vision/lr-try: queue batch, cluster local" in plan[0]
    assert "dispatched at the next cycle" in plan[0] or "position" in plan[0]


def test_submit_to_a_url_clones_into_the_cache(served: tuple[str, Path], tmp_path: Path) -> None:
    url, bare = served
    op = _op_file(tmp_path, OP.replace('"{{ params.lr }}"', '"0.1"'))
    cache = tmp_path / "cache"
    code, out, err = _invoke(
        "submit", str(op), "--project", "language", "-P", "epochs=1",
        "--repo", url, "--push", "--cache-dir", str(cache),
    )  # fmt: skip
    assert code == 0, err
    assert git(bare, "ls-tree", "--name-only", "main", "projects/language/operations/lr-try.yaml")
    assert "plan: language/lr-try: queue " in out
    clones = list(cache.glob("*.work"))
    assert len(clones) == 1 and not git(clones[0], "status", "--porcelain")


def test_unknown_parameter_is_located_and_nothing_is_written(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    _, bare = served
    op = _op_file(tmp_path)
    before = git(bare, "rev-parse", "main")
    code, out, err = _invoke(
        "submit", str(op), "--project", "vision", "-P", "lr=1", "-P", "epochs=2",
        "-P", "momentum=0.9", "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 1
    assert err.splitlines() == [
        f"{op}:1:1: -P momentum: the file has no parameter 'momentum' (its parameters: epochs, lr)"
    ]
    assert "Traceback" not in err + out
    assert git(bare, "rev-parse", "main") == before
    assert not git(clone, "status", "--porcelain")
    code, _, err = _invoke(
        "submit", str(op), "--project", "vision", "-P", "lr=1", "--repo", str(clone)
    )
    assert code == 1
    assert err.strip() == f"{op}:8:48: parameter 'epochs' has no value: pass -P epochs=VALUE"


def test_uncommitted_changes_are_refused(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    _, bare = served
    before = git(bare, "rev-parse", "main")
    (clone / "queues" / "batch.yaml").write_text("kind: Queue\n")
    (clone / "notes.txt").write_text("wip\n")
    code, _, err = _invoke(
        "submit", str(_op_file(tmp_path)), "--project", "vision", "-P", "lr=1", "-P", "epochs=2",
        "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 1
    assert sorted(err.splitlines()) == [
        f"{clone / 'notes.txt'}:1:1: uncommitted change: commit or stash it first "
        "(the commit must hold only this change)",
        f"{clone / 'queues/batch.yaml'}:1:1: uncommitted change: commit or stash it first "
        "(the commit must hold only this change)",
    ]
    assert git(bare, "rev-parse", "main") == before
    assert git(clone, "rev-parse", "HEAD") == before


def test_a_clone_not_at_the_remote_tip_is_refused(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    _, bare = served
    before = git(bare, "rev-parse", "main")
    (clone / "notes.txt").write_text("mine\n")
    git(clone, "add", "notes.txt")
    git(clone, "commit", "-qm", "not pushed yet")
    ahead = git(clone, "rev-parse", "HEAD")
    code, _, err = _invoke(
        "submit", str(_op_file(tmp_path)), "--project", "vision", "-P", "lr=1", "-P", "epochs=2",
        "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 1
    assert err.strip() == (
        f"error: {clone} is at {ahead[:12]}, not at origin/main ({before[:12]}): "
        "check out main and pull (or push) first"
    )
    assert git(bare, "rev-parse", "main") == before
    assert git(clone, "rev-parse", "HEAD") == ahead


def test_what_does_not_compile_is_refused_at_its_line(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    _, bare = served
    before = git(bare, "rev-parse", "main")
    op = _op_file(tmp_path, OP.replace("[a100, data]", "[a100, no-such-preset]"))
    code, _, err = _invoke(
        "submit", str(op), "--project", "vision", "-P", "lr=1", "-P", "epochs=2",
        "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == (
        "error: the config repo would not compile with projects/vision/operations/lr-try.yaml:"
    )
    assert lines[1].startswith("projects/vision/operations/lr-try.yaml:4:17: unknown preset")
    assert "no-such-preset" in lines[1]
    assert git(bare, "rev-parse", "main") == before
    assert not git(clone, "status", "--porcelain")
    assert not (clone / "projects/vision/operations/lr-try.yaml").exists()


def _protect_main(bare: Path) -> None:
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\nwhile read old new ref; do\n"
        '  if [ "$ref" = refs/heads/main ]; then echo "main is protected" >&2; exit 1; fi\n'
        "done\n"
    )
    hook.chmod(0o755)


def test_a_refused_push_is_an_error_and_the_commit_is_undone(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    _, bare = served
    _protect_main(bare)
    before = git(clone, "rev-parse", "HEAD")
    code, out, err = _invoke(
        "submit", str(_op_file(tmp_path)), "--project", "vision", "-P", "lr=1", "-P", "epochs=2",
        "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("error: push to ")
    assert "refused" in err and "(the commit was undone; try --branch)" in err
    assert "Traceback" not in err + out
    assert git(clone, "rev-parse", "HEAD") == before
    assert not git(clone, "status", "--porcelain")
    assert git(bare, "rev-parse", "main") == before


def test_a_protected_branch_gets_a_branch_for_a_pull_request(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    _, bare = served
    _protect_main(bare)
    before = git(clone, "rev-parse", "HEAD")
    code, out, err = _invoke(
        "submit", str(_op_file(tmp_path)), "--project", "vision", "-P", "lr=1", "-P", "epochs=2",
        "--repo", str(clone),
    )  # fmt: skip
    assert code == 0, err
    assert "main refused: remote rejected: pre-receive hook declined (main is protected): " in out
    assert "pushing to a branch for a pull request instead" in out
    branches = git(bare, "branch", "--list", "submit/*", "--format=%(refname:short)").split()
    assert len(branches) == 1 and branches[0].startswith("submit/vision-lr-try-")
    assert f"open a pull request from {branches[0]} into main on " in out
    assert git(bare, "rev-parse", "main") == before
    assert git(clone, "rev-parse", "HEAD") == before  # main stays; the change is on the branch
    assert git(clone, "rev-parse", branches[0]) == git(bare, "rev-parse", branches[0])

    code, out, err = _invoke(
        "submit", str(_op_file(tmp_path)), "--project", "language", "-P", "lr=1",
        "-P", "epochs=2", "--repo", str(clone), "--branch", "try/lr",
    )  # fmt: skip
    assert code == 0, err
    assert git(bare, "ls-tree", "--name-only", "try/lr", "projects/language/operations/")


def test_a_file_written_in_the_clone_is_submitted_in_place(
    served: tuple[str, Path], clone: Path
) -> None:
    _, bare = served
    _protect_main(bare)
    mine = clone / "projects/vision/operations/lr-try.yaml"
    mine.write_text(OP)
    code, _, err = _invoke(
        "submit", str(mine), "-P", "lr=1", "-P", "epochs=2", "--repo", str(clone), "--push"
    )  # fmt: skip
    assert code == 1 and "refused" in err
    assert mine.read_text() == OP  # the user's file, as it was, still not committed
    assert git(clone, "status", "--porcelain") == "?? projects/vision/operations/lr-try.yaml"
    (bare / "hooks" / "pre-receive").unlink()
    code, _, err = _invoke(
        "submit", str(mine), "-P", "lr=1", "-P", "epochs=2", "--repo", str(clone), "--push"
    )  # fmt: skip
    assert code == 0, err
    assert not git(clone, "status", "--porcelain")
    assert '"1"' in git(bare, "show", "main:projects/vision/operations/lr-try.yaml")


def test_rerun_bumps_the_generation(served: tuple[str, Path], clone: Path) -> None:
    _, bare = served
    code, out, err = _invoke("rerun", "vision/train-resnet", "--repo", str(clone), "--push")
    assert code == 0, err
    text = git(bare, "show", "main:projects/vision/operations/train-resnet.yaml")
    assert yaml.safe_load(text)["generation"] == 2
    assert git(bare, "log", "-1", "--format=%s", "main") == (
        "rerun vision/train-resnet: generation 2"
    )
    assert "plan: vision/train-resnet: queue " in out
    code, _, _ = _invoke("rerun", "vision/train-resnet", "--repo", str(clone), "--push")
    assert code == 0
    text = git(bare, "show", "main:projects/vision/operations/train-resnet.yaml")
    assert yaml.safe_load(text)["generation"] == 3
    code, _, err = _invoke("rerun", "vision/nope", "--repo", str(clone), "--push")
    assert code == 1 and err.startswith("error: vision/nope is not in ")


def test_stop_sets_stopped_and_rerun_clears_it(served: tuple[str, Path], clone: Path) -> None:
    _, bare = served
    path = "main:projects/vision/operations/train-resnet.yaml"
    code, _, err = _invoke("stop", "vision/train-resnet", "--repo", str(clone), "--push")
    assert code == 0, err
    assert yaml.safe_load(git(bare, "show", path))["stopped"] is True
    assert git(bare, "log", "-1", "--format=%s", "main") == (
        "stop vision/train-resnet: stopped: true"
    )
    # stopped twice: refused at the line, nothing committed
    code, _, err = _invoke("stop", "vision/train-resnet", "--repo", str(clone), "--push")
    assert code == 1 and "train-resnet.yaml:" in err and "it is stopped already" in err
    assert git(bare, "log", "-1", "--format=%s", "main").startswith("stop ")
    # rerun: stopped cleared and a new generation, as the docs say a stopped op runs again
    code, _, err = _invoke("rerun", "vision/train-resnet", "--repo", str(clone), "--push")
    assert code == 0, err
    doc = yaml.safe_load(git(bare, "show", path))
    assert "stopped" not in doc and doc["generation"] == 2


# --- the pure edits -----------------------------------------------------------------------


def test_edits_keep_the_rest_of_the_file() -> None:
    text = apply_params(OP, {"lr": "0.1", "epochs": "2"}, "f.yaml")
    assert text == OP.replace("{{ params.lr }}", "0.1").replace("{{ params.epochs }}", "2")
    queued = set_queue(text, "batch")
    assert queued.splitlines()[3] == "queue: batch"
    assert set_queue(queued, "team-a").count("queue:") == 1
    presets = add_presets(text, ["data", "notebook"], "f.yaml")
    assert yaml.safe_load(presets)["presets"] == ["a100", "data", "notebook"]
    bumped, generation = bump_generation(text, "f.yaml")
    assert generation == 2 and yaml.safe_load(bumped)["generation"] == 2
    stopped = set_stopped(text, "f.yaml", True)
    assert yaml.safe_load(stopped)["stopped"] is True
    assert set_stopped(stopped, "f.yaml", False) == text
    again, generation = bump_generation(bumped, "f.yaml")
    assert generation == 3 and again.count("generation:") == 1


def test_a_matrix_keeps_its_own_params() -> None:
    text = (
        "kind: Operation\nname: sweep\nmatrix:\n  params: {lr: [0.1, 0.01]}\n"
        "run:\n  container:\n    args: ['{{ params.lr }}', '{{ params.seed }}']\n"
    )
    filled = apply_params(text, {"seed": "7"}, "f.yaml")
    assert "'{{ params.lr }}', '7'" in filled
    with pytest.raises(SubmitErrors) as exc:
        apply_params(text, {"seed": "7", "lr": "1"}, "f.yaml")
    assert (
        str(exc.value) == "f.yaml:1:1: -P lr: the file has no parameter 'lr' (its parameters: seed)"
    )


def test_a_mapping_matrix_keeps_the_params_of_its_values() -> None:
    text = (
        "kind: Operation\nname: sweep\nmatrix:\n  kind: mapping\n"
        "  values: [{lr: 0.1}, {lr: 0.01, wd: 0.1}]\n"
        "run:\n  container:\n    args: ['{{ params.lr }}', '{{ params.wd }}', '{{ params.tag }}']\n"
    )
    filled = apply_params(text, {"tag": "v2"}, "f.yaml")
    assert "'{{ params.lr }}', '{{ params.wd }}', 'v2'" in filled


def test_a_value_that_breaks_the_yaml_is_located() -> None:
    with pytest.raises(SubmitErrors) as exc:
        apply_params("kind: Operation\nname: x\nrun: {{ params.a }}\n", {"a": "[1"}, "f.yaml")
    assert str(exc.value).startswith("f.yaml:")


_HEAD = "kind: Operation\nname: x\nqueue: batch\nrun:\n  container:\n"
_IMAGE = '    image: "img:{{ params.tag }}"\n'
_COMMAND = "    command:\n      - run{{ params.cmd }}\n"


@pytest.mark.parametrize(
    ("text", "value", "where"),
    [
        (_HEAD + _COMMAND + _IMAGE, '1" \npriority: 1000 #', "f.yaml:8:17: -P tag"),
        (_HEAD + _COMMAND + _IMAGE, '1"\nqueue: team-a #', "f.yaml:8:17: -P tag"),
        (_HEAD + _IMAGE + _COMMAND, "1\n      - --evil", "f.yaml:8:12: -P cmd"),
        (_HEAD + _IMAGE + _COMMAND, "1\nstopped: true", "f.yaml:8:12: -P cmd"),
    ],
)
def test_a_value_that_writes_keys_or_items_is_refused_at_its_placeholder(
    text: str, value: str, where: str
) -> None:
    """A ``-P`` value fills the scalar its placeholder is in and nothing else: one that
    closes the quote or the line wrote keys (a priority, another queue) into the commit."""
    params = {"tag": "v1", "cmd": "1"}
    assert "img:v1" in apply_params(text, params, "f.yaml")
    name = where.rsplit(" ", 1)[1]
    with pytest.raises(SubmitErrors) as exc:
        apply_params(text, {**params, name: value}, "f.yaml")
    assert str(exc.value).startswith(f"{where}: its value reaches beyond the value it fills")


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        (
            "git@github.com:acme/config.git",
            "https://github.com/acme/config/compare/main...b?expand=1",
        ),
        (
            "https://github.com/acme/config",
            "https://github.com/acme/config/compare/main...b?expand=1",
        ),
        (
            "https://gitlab.com/acme/ml/config.git",
            "https://gitlab.com/acme/ml/config/-/merge_requests/new"
            "?merge_request%5Bsource_branch%5D=b&merge_request%5Btarget_branch%5D=main",
        ),
        ("git://127.0.0.1:9418/config.git", None),
        ("/srv/config.git", None),
    ],
)
def test_pull_request_url(remote: str, url: str | None) -> None:
    assert pull_request_url(remote, "main", "b") == url


def test_no_project_is_a_located_error(tmp_path: Path, identity: None) -> None:
    op = _op_file(tmp_path)
    code, _, err = _invoke("submit", str(op), "-P", "lr=1", "-P", "epochs=1", "--repo", os.devnull)
    assert code == 1 and err.strip() == f"{op}:1:1: which project? pass --project"


def test_submit_plans_from_the_status_repo_it_is_given(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    url, bare = served
    missing = url.replace("config.git", "status.git")  # not served: it does not exist
    op = _op_file(tmp_path, OP.replace('"{{ params.lr }}"', '"0.1"'))
    code, out, err = _invoke(
        "submit", str(op), "--project", "language", "-P", "epochs=1",
        "--repo", str(clone), "--push", "--status-repo", missing,
    )  # fmt: skip
    assert code == 0, err
    assert git(bare, "ls-tree", "--name-only", "main", "projects/language/operations/lr-try.yaml")
    [line] = [line for line in out.splitlines() if line.startswith("plan: ")]
    assert line.startswith(f"plan: unavailable: cannot fetch {missing}: ")
    assert "\n" not in line


@pytest.mark.parametrize(
    ("args", "name", "message"),
    [
        (("--project", "vision/../language"), "ok", "--project: project 'vision/../language'"),
        (("--project", "vision", "--queue", "batch\npriority: 1000"), "ok", "--queue: queue"),
        (("--project", "vision", "--preset", "gpu, a100"), "ok", "--preset: preset 'gpu, a100'"),
        (("--project", "vision"), "../../../outside", ":2:7: name: operation '../../../outside'"),
        (("--project", "vision"), "../../../reconciler", ":2:7: name: operation"),
    ],
)
def test_names_that_are_no_names_are_refused_before_any_path_is_made(
    served: tuple[str, Path],
    clone: Path,
    tmp_path: Path,
    args: tuple[str, ...],
    name: str,
    message: str,
) -> None:
    """A name becomes a path in the clone and a scalar in the file: ``../`` or a line
    break in one must not reach either (a project ``vision/../language`` was committed
    there and planned as 'running or has run'; a queue with a newline set a priority)."""
    _, bare = served
    before = git(bare, "rev-parse", "main")
    op = _op_file(tmp_path, f"kind: Operation\nname: {name}\nqueue: batch\n" + RUN_ONLY)
    code, out, err = _invoke("submit", str(op), *args, "--repo", str(clone), "--push")
    assert code != 0 and message in err, err
    assert "Traceback" not in out + err and "is not a valid name" in err
    assert git(bare, "rev-parse", "main") == before
    assert not git(clone, "status", "--porcelain", "--ignored")
    assert not (tmp_path / "outside.yaml").exists()


@pytest.mark.parametrize("command", ["stop", "rerun"])
@pytest.mark.parametrize("operation", ["../train-vit", "vision/..", "Vision/train-vit"])
def test_stop_and_rerun_refuse_an_operation_that_is_no_name(
    clone: Path, command: str, operation: str
) -> None:
    code, out, err = _invoke(command, operation, "--repo", str(clone))
    assert code == 2 and "is not a valid name" in err, err
    assert "Traceback" not in out + err


def test_submitting_a_schedule_says_when_its_runs_come(
    served: tuple[str, Path], clone: Path, tmp_path: Path
) -> None:
    """A scheduled operation is a template, never dispatched itself: its plan line gives
    its next fire times, not "nothing to dispatch"."""
    scheduled = OP.replace('"{{ params.lr }}"', '"0.1"').replace('"{{ params.epochs }}"', '"1"')
    scheduled += "schedule:\n  kind: cron\n  cron: '0 2 * * *'\n  timezone: Europe/Paris\n"
    code, out, err = _invoke(
        "submit", str(_op_file(tmp_path, scheduled)), "--project", "vision",
        "--repo", str(clone), "--push",
    )  # fmt: skip
    assert code == 0, err
    (plan,) = [line for line in out.splitlines() if line.startswith("plan: ")]
    assert "vision/lr-try: scheduled, never dispatched itself; next runs" in plan, plan
    assert plan.count("T01:00:00+00:00") + plan.count("T00:00:00+00:00") == 3, plan
