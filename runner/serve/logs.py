"""serve's log lines: plain text with timestamps; under journald without them (journald stamps
each line) and with a ``<N>`` syslog priority prefix journald turns into the entry's priority; or
one JSON object per line (``--log-format json``, ``RUNNER_LOG_FORMAT=json``, config ``log_format``).

journald is detected the way systemd documents it: ``$JOURNAL_STREAM`` is ``DEVICE:INODE`` of the
stream systemd connected, and it must be the very stream we write to (a child whose stderr was
redirected to a file inherits the variable but not the stream).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import IO, Any

from runner.errors import UsageError


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


FORMAT_ENV = "RUNNER_LOG_FORMAT"
#: logging level -> syslog priority (sd-daemon(3) prefixes)
PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


def choose_format(option: str | None, environ: Mapping[str, str], configured: str | None) -> LogFormat:
    """``--log-format`` wins, then ``RUNNER_LOG_FORMAT``, then config.yaml's ``log_format``, else text."""

    value = option or environ.get(FORMAT_ENV) or configured or LogFormat.TEXT
    try:
        return LogFormat(value.lower())
    except ValueError:
        raise UsageError(f"{FORMAT_ENV}={value!r}: expected one of text, json") from None


def under_journald(stream: IO[Any], environ: Mapping[str, str]) -> bool:
    """Whether ``stream`` is the journal stream systemd connected (``$JOURNAL_STREAM``)."""
    value = environ.get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return False
    return st.st_dev == int(device) and st.st_ino == int(inode)


class JournalFormatter(logging.Formatter):
    """``<6>message``: no timestamp (journald adds its own), the level as a syslog priority."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ms), level, logger, msg, and exc when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def text_formatter() -> logging.Formatter:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    fmt.default_msec_format = "%s.%03d"
    return fmt


def stream_formatter(kind: LogFormat, stream: IO[Any], environ: Mapping[str, str]) -> logging.Formatter:
    """The formatter for serve's stderr: JSON if asked, journald's form under journald, else text."""
    if kind == LogFormat.JSON:
        return JsonFormatter()
    if under_journald(stream, environ):
        return JournalFormatter("%(levelname)s %(message)s")
    return text_formatter()


class LogFile(logging.handlers.RotatingFileHandler):
    """``RUNNER_HOME/logs/serve.log``, rotated. A write that fails (the disk is full, the file
    system read-only) says so once on stderr, in one line, instead of a traceback per log line;
    the lines go on to stderr meanwhile, and the file is written again once it can be."""

    _failing = False
    _error: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self._error = None
        super().emit(record)
        if self._error is None and self._failing:
            self._failing = False
            sys.stderr.write(f"runner serve: {self.baseFilename} is written again\n")

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self._error = sys.exc_info()[1]
        if not self._failing:
            self._failing = True
            sys.stderr.write(
                f"runner serve: cannot write {self.baseFilename}: {self._error}; stderr only until it can\n"
            )
