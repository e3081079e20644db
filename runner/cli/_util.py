"""Small helpers shared by the command modules: tables, JSON, the Settings object."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import click

from runner.settings import Settings


def settings() -> Settings:
    ctx = click.get_current_context()
    obj = ctx.find_root().obj
    assert isinstance(obj, Settings)
    return obj


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


RUN_KEYS = {"parent_run": "retry_of_id"}  # stored column -> its --json name (docs/commands.md#json-output)


def run_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored run row as every ``--json`` output names its keys: ``retry_of_id`` is the first
    attempt of the run this one retries or resumes (the ``parent_run`` column), not to be confused
    with ``parent_run_id``, the run whose ``delegate_task`` started this subagent."""
    return {RUN_KEYS.get(k, k): v for k, v in row.items()}


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Every command's table: fitted to the terminal, statuses coloured (``runner.cli._style``)."""
    from runner.cli._style import table as styled_table

    styled_table(rows, headers)


def ago(text: str | None, now: datetime | None = None) -> str:
    if not text:
        return ""
    then = datetime.fromisoformat(text)
    seconds = ((now or datetime.now(UTC)) - then).total_seconds()
    from runner.config.schedules import format_duration

    return f"{format_duration(abs(seconds))} {'ago' if seconds >= 0 else 'from now'}"


def local_time(text: str | None) -> str:
    if not text:
        return ""
    return datetime.fromisoformat(text).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def is_tty() -> bool:
    return sys.stdout.isatty()


def parse_vars(pairs: Sequence[str]) -> dict[str, str]:
    """``--var KEY=VALUE`` options (run-job, jobs trigger) as a dict; ``UsageError`` (exit 2, one
    line) for one without ``=`` or a key."""
    from runner.errors import UsageError

    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--var {pair[:60]!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out
