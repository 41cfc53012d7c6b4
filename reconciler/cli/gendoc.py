"""Generate ``docs/cli.md`` from the click commands, so the reference cannot drift.

``python -m reconciler.cli.gendoc`` rewrites docs/cli.md; ``--check`` exits 1 when the file
differs from what the commands say. The output depends only on the commands: commands are
visited in the order ``list_commands`` gives (sorted), options in declaration order, and no
terminal width is consulted.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from reconciler.cli.main import cli

PROG = "reconciler"
DEFAULT_OUT = Path("docs/cli.md")
REGENERATE = "python -m reconciler.cli.gendoc"
WIDTH = 100  # for any text click formats itself; never the terminal's


@dataclass(frozen=True)
class Entry:
    """One command with its context (for usage lines and the command path)."""

    command: click.Command
    ctx: click.Context


def walk_commands(root: click.Command = cli, prog: str = PROG) -> Iterator[Entry]:
    """Every command, depth first: a group, then its subcommands in ``list_commands`` order."""
    ctx = click.Context(root, info_name=prog, terminal_width=WIDTH, max_content_width=WIDTH)
    yield from _walk(root, ctx)


def _walk(command: click.Command, ctx: click.Context) -> Iterator[Entry]:
    yield Entry(command, ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = click.Context(
                sub, info_name=name, parent=ctx, terminal_width=WIDTH, max_content_width=WIDTH
            )
            yield from _walk(sub, sub_ctx)


def is_help_option(param: click.Parameter, ctx: click.Context) -> bool:
    return isinstance(param, click.Option) and set(param.opts) == set(ctx.help_option_names)


def help_text(command: click.Command) -> str:
    """The command's docstring as click shows it: dedented, cut at ``\\f``."""
    text = inspect.cleandoc(command.help or command.short_help or "")
    return text.split("\f", 1)[0].replace("\b\n", "").strip()


def _escape(text: str) -> str:
    """For a Markdown table cell: no pipes, no HTML, one line."""
    text = " ".join(text.split())
    return text.replace("|", "\\|").replace("<", "\\<").replace(">", "\\>")


def _code(text: str) -> str:
    escaped = text.replace("|", "\\|")
    return f"`{escaped}`"


def describe_type(param: click.Parameter, ctx: click.Context) -> str:
    """A short, width-free description of what the parameter takes."""
    if isinstance(param, click.Option) and param.is_flag and not param.count:
        kind = "flag"
    else:
        ptype = param.type
        if isinstance(ptype, click.Choice):
            kind = _code("|".join(str(c) for c in ptype.choices))
        elif isinstance(ptype, click.Path):
            kind = {(True, False): "file", (False, True): "directory"}.get(
                (ptype.file_okay, ptype.dir_okay), "path"
            )
        elif isinstance(ptype, click.IntRange | click.FloatRange):
            kind = f"{ptype.name} ({ptype._describe_range()})"
        else:
            kind = ptype.name
        if param.metavar and isinstance(param, click.Option):
            kind = f"{_code(param.metavar)} ({kind})" if kind != "text" else _code(param.metavar)
    if param.multiple:
        kind += ", repeatable"
    if isinstance(param, click.Argument) and not param.required:
        kind += ", optional"
    return kind


def describe_default(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and isinstance(param.show_default, str):
        return _escape(param.show_default)
    if callable(param.default):
        return "(computed)"  # e.g. from the environment: never evaluated here
    default = param.to_info_dict()["default"]  # click's "unset" sentinel becomes None
    if default is None or default in ((), []):
        return ""
    if default == "":
        return '`""`'
    if isinstance(param, click.Option) and param.is_flag and default is False:
        return ""
    if isinstance(default, Path):
        default = str(default)
    return _code(str(default) if not isinstance(default, str) else repr(default)[1:-1])


def _option_names(param: click.Option) -> str:
    names = [*param.opts, *param.secondary_opts]
    return ", ".join(_code(n) for n in sorted(names, key=lambda n: (n.startswith("--"), n)))


def render_command(entry: Entry) -> str:
    command, ctx = entry.command, entry.ctx
    path = ctx.command_path
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    lines = [f"## `{path}`", ""]
    text = help_text(command)
    if text:
        lines += [text, ""]
    lines += ["```", usage, "```", ""]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    options = [
        p for p in command.params if isinstance(p, click.Option) and not is_help_option(p, ctx)
    ]
    if arguments:
        lines += ["| argument | takes |", "|---|---|"]
        for arg in arguments:
            lines.append(f"| {_code(arg.make_metavar(ctx))} | {describe_type(arg, ctx)} |")
        lines.append("")
    if options:
        lines += ["| option | takes | default | meaning |", "|---|---|---|---|"]
        for opt in options:
            meaning = _escape(opt.help or "")
            if opt.required:
                meaning = f"**required.** {meaning}".strip()
            if opt.envvar:
                meaning += f" (env {_code(str(opt.envvar))})"
            lines.append(
                f"| {_option_names(opt)} | {describe_type(opt, ctx)} | "
                f"{describe_default(opt)} | {meaning} |"
            )
        lines.append("")
    if isinstance(command, click.Group):
        subs = [
            (name, sub)
            for name in command.list_commands(ctx)
            if (sub := command.get_command(ctx, name)) is not None and not sub.hidden
        ]
        lines += ["| command | does |", "|---|---|"]
        for name, sub in subs:
            anchor = _anchor(f"{path} {name}")
            summary = _escape(sub.get_short_help_str(limit=WIDTH))
            lines.append(f"| [`{name}`](#{anchor}) | {summary} |")
        lines.append("")
    return "\n".join(lines)


def _anchor(command_path: str) -> str:
    """GitHub's heading anchor for ``## `reconciler dev-cluster up` ``."""
    return command_path.lower().replace(" ", "-")


def render_cli_docs(root: click.Command = cli) -> str:
    """The whole of docs/cli.md."""
    entries = list(walk_commands(root))
    head = [
        "# Command line reference",
        "",
        f"<!-- Generated from the click commands by `{REGENERATE}`; do not edit by hand. -->",
        "",
        "Every command takes `-h`/`--help`. Bad input is reported as `file:line:col: message`",
        "and exits 1; usage errors exit 2 (`plan --base` also exits 3 when the change alters the",
        "plan). A bug in the reconciler itself is not a config error: any command prints",
        "`internal error: <what> (this is a bug in the reconciler, please report it)` and the",
        "traceback on stderr, and exits 70. Concepts and file formats: [README.md](README.md).",
        "",
    ]
    for entry in entries[1:]:
        path = entry.ctx.command_path
        depth = path.count(" ") - 1
        head.append(f"{'  ' * depth}- [`{path}`](#{_anchor(path)})")
    head.append("")
    return "\n".join(head + [render_command(e) for e in entries]).rstrip("\n") + "\n"


@click.command("gendoc")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="The Markdown file to write.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the file is out of date.")
def main(out: Path, check: bool) -> None:
    """Write the command line reference (docs/cli.md) from the click commands."""
    text = render_cli_docs()
    if check:
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != text:
            click.echo(f"error: {out} is out of date; run `{REGENERATE}`", err=True)
            sys.exit(1)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    click.echo(str(out))


if __name__ == "__main__":
    main()
