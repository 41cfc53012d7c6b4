"""Structured logs: ``text`` for people, ``json`` (one object per line) for collectors.

Fields passed with ``extra=`` (``operation``, ``queue``, ``cluster``, ``commit``, ...) are
kept as fields: JSON keys, or ``key=value`` after the text message.

    log.info("dispatched", extra={"operation": "vision/train", "queue": "team-a"})
    {"time": "2024-05-01T12:00:00.123Z", "level": "info", "logger": "reconciler.cycle",
     "message": "dispatched", "operation": "vision/train", "queue": "team-a"}
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from reconciler.core.types import printable_text

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)
_NOISY = ("urllib3", "kubernetes", "git")


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _time(record: logging.LogRecord) -> str:
    stamp = datetime.fromtimestamp(record.created, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            out.setdefault(key, value)  # an extra never hides a standard field
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # One record, one line: a path or an error with a newline cannot forge another.
        message = printable_text(record.getMessage())
        parts = [_time(record), f"{record.levelname.lower():<7}", record.name, message]
        line = " ".join(parts)
        fields = " ".join(f"{k}={_text_value(v)}" for k, v in _extras(record).items())
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


def configure_logging(
    format: str = "text", level: str | int = "info", stream: TextIO | None = None
) -> logging.Handler:
    """Send all logs to ``stream`` (stderr) in ``format``. Calling it again replaces the
    handler it installed before; handlers installed by others are left alone."""
    if format not in FORMATS:
        raise ValueError(f"log format {format!r}: expected one of {', '.join(FORMATS)}")
    if isinstance(level, str):
        if level.lower() not in LEVELS:
            raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
        level = getattr(logging, level.upper())
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter())
    handler.set_name("reconciler")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "reconciler"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _NOISY:  # client libraries log every request at debug
        logging.getLogger(name).setLevel(max(int(level), logging.WARNING))
    return handler
