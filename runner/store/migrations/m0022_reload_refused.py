"""The reload serve refused last (issue 37): jobs.yaml was empty, had no jobs without saying so
(``jobs: {}``) or was invalid, and serve kept its last good jobs. ``reload_refused_at`` when,
``reload_problem`` the first problem, ``reload_digest`` the SHA-256 of the content refused; all
NULL again after a reload serve applied. The dashboard shows it."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    for column in ("reload_refused_at", "reload_problem", "reload_digest"):
        db["serve_instance"].add_column(column, str)
