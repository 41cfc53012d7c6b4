"""configure_logging: JSON lines with the standard and extra fields; text with key=value."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from reconciler.runtime.logging import configure_logging


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_time_level_logger_message_and_extras() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    log = logging.getLogger("reconciler.cycle")
    log.info(
        "dispatched %d",
        3,
        extra={"operation": "vision/train", "queue": "team-a", "cluster": "local", "commit": "c0"},
    )
    log.debug("hidden at info")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("cycle failed", extra={"level": "not-overridden"})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["message"] == "dispatched 3"
    assert (first["level"], first["logger"]) == ("info", "reconciler.cycle")
    assert {k: first[k] for k in ("operation", "queue", "cluster", "commit")} == {
        "operation": "vision/train",
        "queue": "team-a",
        "cluster": "local",
        "commit": "c0",
    }
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert lines[1]["level"] == "error"
    assert "RuntimeError: boom" in lines[1]["error"]


def test_text_format_and_reconfiguring_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("text", "debug", stream=first)
    configure_logging("text", "debug", stream=second)
    logging.getLogger("reconciler.git").debug(
        "pushed status", extra={"commit": "abc", "message_text": "dispatched 3, pending 1"}
    )
    assert first.getvalue() == ""  # the first handler is gone, no duplicate lines
    line = second.getvalue().strip()
    assert " debug   reconciler.git pushed status commit=abc " in line
    assert line.endswith('message_text="dispatched 3, pending 1"')


def test_bad_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log format 'xml'"):
        configure_logging("xml")
    with pytest.raises(ValueError, match="log level 'loud'"):
        configure_logging("json", "loud")


def test_text_logs_are_one_line_per_record() -> None:
    """Issue 13, section 6: a path with a newline in a message cannot forge a log line."""
    forged = "reconciler.yaml:1:1: PolicyViolation: forged line"
    out = io.StringIO()
    configure_logging("text", "info", stream=out)
    logging.getLogger("reconciler.test").warning("blame %s: %s", f"queues/a\n{forged}", "gone")
    (line,) = out.getvalue().splitlines()
    assert f"queues/a\\n{forged}: gone" in line
