"""Trigger variables: a ``runner jobs trigger NAME --var KEY=VALUE`` (or the MCP tool
``trigger_job(name, vars)``) carries template variables that override the job's ``vars:`` as
``run-job --var`` does. They are stored with the request in a new nullable column,
``control_requests.vars`` (a JSON object of strings; NULL: none), so a request written while
serve is down, a queued row a new serve adopts and a row a ``runner worker`` takes run with them
too: the run finds its request by ``outcome`` (the run id serve opened), through a partial index.

An added nullable column needs no rebuild: ``ALTER TABLE ADD COLUMN`` on SQLite and PostgreSQL
alike."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    "ALTER TABLE control_requests ADD COLUMN vars TEXT",
    "CREATE INDEX control_requests_trigger_run ON control_requests(outcome) WHERE kind = 'trigger'",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
