"""Log output of every swarmrl process: rich on a terminal, one line per record anywhere else.

A role started by `launch/` or a service manager writes to a file or a pipe; rich would wrap its lines at 80
columns there, and logs of many processes need the logger name and the process id to be told apart. Formats:

    rich   coloured, for a person at a terminal (the default when stderr is a TTY)
    plain  ``2026-11-24T16:07:05.123Z INFO swarmrl.trainer.loop [pid 4242] message`` (default elsewhere)
    json   one JSON object per line: time, level, logger, pid, message, exception, and `extra=` fields
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Literal, TextIO, get_args

LogFormat = Literal["auto", "rich", "plain", "json"]
LOG_FORMATS: tuple[str, ...] = get_args(LogFormat)
LOG_FORMAT_ENV = "SWARMRL_LOG_FORMAT"
NOISY_LOGGERS = ("httpx", "transformers", "urllib3")

# Attributes every LogRecord has; anything else on a record came from `extra=` and is worth keeping.
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _utc_timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class PlainFormatter(logging.Formatter):
    """`time level logger [pid N] message`, the traceback (if any) on the lines after it."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_utc_timestamp(record)} {record.levelname} {record.name} [pid {record.process}] {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (tracebacks included as a string)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _utc_timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "process": record.processName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in entry:
                entry[key] = value
        return json.dumps(entry, default=str, ensure_ascii=False)


def resolve_format(requested: str | None, stream: TextIO) -> str:
    """`requested`, else $SWARMRL_LOG_FORMAT, else auto; auto is rich on a terminal and plain elsewhere."""
    chosen = (requested or os.environ.get(LOG_FORMAT_ENV) or "auto").strip().lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"log format {chosen!r} is not one of {', '.join(LOG_FORMATS)}")
    if chosen == "auto":
        return "rich" if _is_terminal(stream) else "plain"
    return chosen


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or file-like without a descriptor
        return False


def configure_logging(
    log_format: str | None = None, level: int = logging.INFO, stream: TextIO | None = None
) -> str:
    """Route the root logger to `stream` (stderr) in the resolved format; returns the format used.

    Calling it again replaces the handler it installed before (and only that one).
    """
    stream = stream or sys.stderr
    resolved = resolve_format(log_format, stream)
    if resolved == "rich":
        from rich.console import Console
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(
            console=Console(file=stream), show_path=False, rich_tracebacks=True
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter() if resolved == "json" else PlainFormatter())
    handler._swarmrl = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if installed_here(h)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return resolved


def installed_here(handler: logging.Handler) -> bool:
    """Whether `configure_logging` installed `handler` (and will replace it when called again)."""
    return bool(getattr(handler, "_swarmrl", False))
