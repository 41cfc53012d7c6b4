"""Bugs in the reconciler, on the command line: handled here, once, for every command.

A problem in the config is the user's to fix (``file:line:col: message``, exit 1). An
:class:`~reconciler.core.types.InternalError` is ours: the ``reconciler`` group
(:class:`ReconcilerGroup`) turns it, from any command, into
``internal error: <what> (this is a bug in the reconciler, please report it)`` and the
traceback on stderr, and exit 70 (``EX_SOFTWARE``).
"""

from __future__ import annotations

import traceback
from typing import Any, NoReturn

import click

from reconciler.core.types import BUG_NOTE, InternalError

EX_SOFTWARE = 70  # sysexits.h: an internal software error


def report_internal_error(exc: InternalError) -> NoReturn:
    """Print the bug and its traceback on stderr; exit 70."""
    click.echo(f"internal error: {exc} ({BUG_NOTE})", err=True)
    click.echo("".join(traceback.format_exception(exc)).rstrip("\n"), err=True)
    raise SystemExit(EX_SOFTWARE)


class ReconcilerGroup(click.Group):
    """The ``reconciler`` group: an ``InternalError`` from any subcommand is reported by
    :func:`report_internal_error`, never as a config error."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InternalError as exc:
            report_internal_error(exc)
