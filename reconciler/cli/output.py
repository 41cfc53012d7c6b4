"""Terminal or pipe: how the long-running commands print.

On a terminal, ``reconciler demo`` and the dev-cluster build draw live (a table redrawn in
place, a status line with a spinner). Piped or redirected, a live display comes out as
repeated frames cut to 80 columns, so they print plain lines instead: every line whole,
tables aligned with spaces and never truncated, and nothing that needs a terminal to read.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default stdout) is an interactive terminal."""
    stream = stream if stream is not None else sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: not a terminal
        return False


def plain_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, indent: str = ""
) -> list[str]:
    """Rows aligned in columns with two spaces between them, however wide: lines for a
    pipe, a log file or ``grep``. An empty cell is shown as ``-`` so columns stay
    countable."""
    cells = [list(headers)] + [[cell if cell else "-" for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        (
            indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]


def counts_line(counts: dict[str, int]) -> str:
    """``18 (17 Succeeded, 1 Failed)``: a count per kind, largest first, never a dict."""
    total = sum(counts.values())
    if not counts:
        return "0"
    parts = ", ".join(
        f"{n} {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"{total} ({parts})"


class ProgressPrinter:
    """Progress of a long step, on ``console``'s stream.

    ``line(message)`` prints a line that stays. ``status(message)`` reports how a
    long-running part is going (elapsed time, what is left): on a terminal it replaces the
    spinner line in place; piped, it is printed as a plain line at most every
    ``plain_every`` seconds, so a log shows the build is alive without one line a second.
    """

    def __init__(self, console: Console, *, plain_every: float = 60.0) -> None:
        self.console = console
        self.live = console.is_terminal
        self.plain_every = plain_every
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._last_plain = float("-inf")

    def line(self, message: str) -> None:
        with self._lock:
            if self.live:
                self.console.print(message, markup=False, highlight=False)
            else:
                self.console.out(message, highlight=False)
            # a line means a new step: the next status is shown at once, even piped
            self._last_plain = float("-inf")

    def status(self, message: str) -> None:
        with self._lock:
            if self.live:
                if self._status is None:
                    self._status = self.console.status(message)
                    self._status.start()
                else:
                    self._status.update(message)
                return
            now = time.monotonic()
            if now - self._last_plain >= self.plain_every:
                self._last_plain = now
                self.console.out(message, highlight=False)

    def done(self) -> None:
        """Remove the spinner line (a terminal) before other output follows."""
        with self._lock:
            if self._status is not None:
                self._status.stop()
                self._status = None

    def __enter__(self) -> ProgressPrinter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()
