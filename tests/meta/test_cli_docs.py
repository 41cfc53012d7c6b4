"""docs/cli.md is generated from the click commands; every command and option explains itself."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from support.paths import ROOT

from reconciler.cli import gendoc
from reconciler.cli.main import cli

CLI_MD = ROOT / "docs" / "cli.md"


def test_cli_md_is_up_to_date() -> None:
    expected = gendoc.render_cli_docs()
    current = CLI_MD.read_text(encoding="utf-8") if CLI_MD.exists() else ""
    assert current == expected, (
        f"docs/cli.md is out of date with the click commands; regenerate it with "
        f"`PYTHONPATH=. {gendoc.REGENERATE}` and commit the result"
    )


def test_every_command_is_documented() -> None:
    text = gendoc.render_cli_docs()
    paths = [e.ctx.command_path for e in gendoc.walk_commands()]
    # Recursive: the dev-cluster subcommands are there, each under its own heading.
    assert {"reconciler dev-cluster up", "reconciler dev-cluster down", "reconciler plan"} <= set(
        paths
    )
    for path in paths:
        assert f"## `{path}`\n" in text
    for entry in gendoc.walk_commands():
        for param in entry.command.params:
            if isinstance(param, click.Option) and not gendoc.is_help_option(param, entry.ctx):
                assert param.opts[0] in text


def test_every_command_and_option_has_help() -> None:
    missing: list[str] = []
    for entry in gendoc.walk_commands():
        path = entry.ctx.command_path
        if not gendoc.help_text(entry.command):
            missing.append(f"{path}: the command has no help text (docstring)")
        for param in entry.command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"{path} {'/'.join(param.opts)}: no help=")
    assert not missing, "add help text:\n" + "\n".join(missing)


def test_output_is_deterministic_and_width_free(monkeypatch: pytest.MonkeyPatch) -> None:
    first = gendoc.render_cli_docs()
    monkeypatch.setenv("COLUMNS", "37")
    assert gendoc.render_cli_docs() == first


def test_usage_types_and_defaults_are_rendered() -> None:
    text = gendoc.render_cli_docs()
    assert "reconciler dev-cluster up [OPTIONS]" in text
    assert "reconciler logs [OPTIONS] PROJECT/OP" in text
    # Choices, ranges, defaults, repeatable and required options.
    assert "| `-o`, `--output` | `table\\|json\\|markdown` | `table` |" in text
    assert "| `--gpu-nodes` | integer range (0<=x<=5000) | `2` |" in text
    assert "| `--cluster-kubeconfig` | `NAME=PATH`, repeatable |" in text
    assert "| `--repo` | text |  | **required.**" in text
    assert "(env `RECONCILER_REPO_CACHE`)" in text
    assert "UNSET" not in text


def test_a_computed_default_is_not_evaluated() -> None:
    @click.command("probe")
    @click.option("--where", default=lambda: "from-the-environment", help="A computed default.")
    def probe(where: str) -> None:
        """A command whose default depends on where it runs."""

    text = gendoc.render_cli_docs(probe)
    assert "| `--where` | text | (computed) |" in text
    assert "from-the-environment" not in text


def test_check_mode_reports_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    runner = CliRunner()
    stale = runner.invoke(gendoc.main, ["--out", str(out), "--check"])
    assert stale.exit_code == 1 and gendoc.REGENERATE in stale.output
    wrote = runner.invoke(gendoc.main, ["--out", str(out)])
    assert wrote.exit_code == 0 and out.read_text(encoding="utf-8") == gendoc.render_cli_docs()
    assert runner.invoke(gendoc.main, ["--out", str(out), "--check"]).exit_code == 0


def test_walk_includes_a_group_added_later() -> None:
    # New commands (e.g. one registered by another module) are picked up without edits here.
    @click.group("extra")
    def extra() -> None:
        """An extra group."""

    @extra.command("leaf")
    @click.option("--flag", is_flag=True, help="A flag.")
    def leaf(flag: bool) -> None:
        """A leaf."""

    root = click.Group("reconciler", commands={"extra": extra, **cli.commands})
    text = gendoc.render_cli_docs(root)
    assert "## `reconciler extra leaf`" in text and "| `--flag` | flag |  | A flag. |" in text
