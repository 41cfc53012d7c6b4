"""Every command with a cache it cannot create and a HOME it cannot write.

The CI of a pull request may run with a read-only HOME: ``XDG_CACHE_HOME``, the repo cache
(``RECONCILER_REPO_CACHE``) and HOME all point where nothing can be made (the test runs
as root too, so ``/proc`` and a path under a regular file, not file modes). Each command
of the CLI's own parser runs once on a clone of the example config with a status branch:
never a traceback nor exit 70; a command that needs the repo cache (or the build cache)
says so in one ``error:`` line naming the remedy; one that only reads a status branch
after its work is done (``submit``, ``rerun``, ``stop``) says it on one line and
succeeds; the others never mention it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from support.git_commands import ENV, git
from support.paths import ROOT, TEMPLATE
from support.status_branch import write_cycle

from reconciler.adapters.git import ConfigRepo, StatusBranch
from reconciler.cli.errors import EX_SOFTWARE
from reconciler.cli.main import cli

REPO_CACHE_ERROR = "error: cannot use the repo cache "
BUILD_CACHE_ERROR = "error: cannot use the build cache "
PLAN_WARNING = "plan: unavailable: cannot use the repo cache "
OP = "vision/train-resnet"
IMPORTS = ROOT / "tests" / "data" / "import"

# What each command needs of the cache: "repo" and "build" (a one-line error), "warning"
# (done, one line says what was not), "none" (never mentioned). {tmp} is the test's dir.
COMMANDS: dict[str, tuple[list[str], str]] = {
    "validate": ([], "none"),
    "compile": ([OP], "none"),
    "schema": ([], "none"),
    "plan": ([], "repo"),  # the clone has the status branch: the plan starts from it
    "run": (["--repo", ".", "--once"], "repo"),
    "serve": (["--repo", ".", "--http", "127.0.0.1:0"], "repo"),
    "status": ([], "repo"),
    "queues": ([], "repo"),
    "usage": ([], "repo"),
    "why": ([OP], "repo"),
    "logs": ([OP], "none"),  # no cluster to read: its own error, not the cache's
    "submit": (["{tmp}/new.yaml", "--project", "vision"], "warning"),
    "rerun": ([OP], "warning"),
    "stop": ([OP], "warning"),
    "demo": (["--workdir", "{tmp}/demo"], "repo"),
    "dev-cluster up": ([], "build"),
    "dev-cluster build": ([], "build"),
    "dev-cluster down": ([], "none"),
    "dev-cluster status": ([], "none"),
    "dev-cluster env": ([], "none"),
    "import polyaxon": (
        [str(IMPORTS / "polyaxon" / "ddp.yaml"), "--project", "p", "--out", "{tmp}/out-p"],
        "none",
    ),
    "import kueue": (
        [str(IMPORTS / "kueue" / "cluster-queues.yaml"), "--out", "{tmp}/out-k"],
        "none",
    ),
}


def leaf_commands(group: click.Group, prefix: str = "") -> Iterator[str]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from leaf_commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}"


def test_every_command_is_listed() -> None:
    assert sorted(leaf_commands(cli)) == sorted(COMMANDS)


@pytest.fixture(scope="module")
def unwritable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A clone of the example config whose origin has a status branch, and an environment
    where no cache can be made."""
    tmp = tmp_path_factory.mktemp("unwritable")
    work = tmp / "work"
    shutil.copytree(TEMPLATE, work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "template")
    remote = tmp / "remote.git"
    git(tmp, "clone", "-q", "--bare", str(work), str(remote))
    config = ConfigRepo(str(remote), cache_dir=tmp / "cache")
    assert write_cycle(config, StatusBranch(config)) is not None
    clone = tmp / "clone"
    git(tmp, "clone", "-q", str(remote), str(clone))
    (tmp / "new.yaml").write_text(
        (clone / "projects" / "vision" / "operations" / "train-resnet.yaml")
        .read_text()
        .replace("train-resnet", "train-again")
    )
    (tmp / "a-file").write_text("not a directory\n")
    env = {k: v for k, v in ENV.items() if not k.startswith(("RECONCILER_", "XDG_"))}
    env |= {
        "HOME": "/proc/nope/home",
        "XDG_CACHE_HOME": "/proc/nope",
        "RECONCILER_REPO_CACHE": str(tmp / "a-file" / "repos"),
        "PYTHONPATH": str(ROOT),
    }
    return clone, env


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_with_an_unwritable_cache(
    command: str, unwritable: tuple[Path, dict[str, str]]
) -> None:
    clone, env = unwritable
    args, needs = COMMANDS[command]
    tmp = str(clone.parent)
    argv = [*command.split(), *(a.replace("{tmp}", tmp) for a in args)]
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", *argv],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out, err = done.stdout, done.stderr
    assert "Traceback" not in err and "Traceback" not in out, err
    assert done.returncode != EX_SOFTWARE, err
    mentions = [ln for ln in (out + err).splitlines() if re.search(r"\bcache\b", ln, re.I)]
    if needs == "repo":
        assert done.returncode == 1, err
        assert [ln for ln in err.splitlines() if ln.startswith("error:")] == mentions, err
        assert len(mentions) == 1 and mentions[0].startswith(REPO_CACHE_ERROR), err
        assert "--cache-dir or RECONCILER_REPO_CACHE" in mentions[0]
    elif needs == "build":
        assert done.returncode == 1, err
        assert len(mentions) == 1 and mentions[0].startswith(BUILD_CACHE_ERROR), err
        assert "/proc/nope/reconciler" in mentions[0]
    elif needs == "warning":
        assert done.returncode == 0, err
        assert len(mentions) == 1 and mentions[0].startswith(PLAN_WARNING), out + err
    else:
        assert mentions == [], out + err


def test_plan_without_a_status_branch_needs_no_cache(
    unwritable: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """Nothing to read: the plan is made, and the cache never mentioned."""
    clone, env = unwritable
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "--single-branch", "-b", "main", str(clone), str(fresh))
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "plan", "-o", "json"],
        cwd=fresh,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert '"dispatch"' in done.stdout


def test_plan_honours_cache_dir(unwritable: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """``--cache-dir`` (and ``RECONCILER_REPO_CACHE``) put the status branch's cache
    where it can be made: the plan starts from the status branch."""
    clone, env = unwritable
    for extra, more_env in (
        (["--cache-dir", str(tmp_path / "flag")], {}),
        ([], {"RECONCILER_REPO_CACHE": str(tmp_path / "env")}),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "reconciler", "plan", "-o", "json", *extra],
            cwd=clone,
            env=env | more_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    assert [p.suffix for p in (tmp_path / "flag").iterdir()] == [".git"]
    assert [p.suffix for p in (tmp_path / "env").iterdir()] == [".git"]


def test_a_repo_url_is_cloned_into_the_cache_or_refused_in_one_line(
    unwritable: tuple[Path, dict[str, str]],
) -> None:
    """``rerun --repo URL`` works in a clone kept in the cache: none can be made there."""
    clone, env = unwritable
    remote = clone.parent / "remote.git"
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "rerun", OP, "--repo", f"file://{remote}"],
        cwd=clone.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and REPO_CACHE_ERROR in errors[0], done.stderr
