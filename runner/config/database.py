"""Which database the store is: SQLite (the default, one file in RUNNER_HOME) or PostgreSQL.

``database:`` in config.yaml or ``RUNNER_DATABASE_URL`` names it: ``sqlite:///PATH`` (or a plain
path), ``postgresql://user:password@host:port/name``. Importing this module imports no driver
and not the store (``runner jobs list`` reads it without loading sqlite3); ``runner.store.dialect``
re-exports it for the store's side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from runner.errors import UsageError

ENV = "RUNNER_DATABASE_URL"
#: PostgreSQL: the store-wide advisory lock ``store.transaction()`` takes ('RUNN'), which gives
#: each read-then-write transaction SQLite's one-writer-at-a-time ``BEGIN IMMEDIATE``
STORE_LOCK = 0x52554E4E
PG_SCHEMES = ("postgresql", "postgres")


class Dialect(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class PgURL(str):
    """A PostgreSQL connection URL, as a ``Store``'s ``path`` (what another thread or process
    opens again); ``str()`` is the URL itself, ``shown`` the URL without its password."""

    __slots__ = ()

    @property
    def shown(self) -> str:
        return redact_url(self)


@dataclass(frozen=True)
class Target:
    """Where a store lives: a SQLite file or a PostgreSQL URL."""

    dialect: Dialect
    path: Path | None = None  # SQLite
    url: PgURL | None = None  # PostgreSQL

    @property
    def shown(self) -> str:
        return str(self.path) if self.path is not None else redact_url(self.url or "")


def parse(text: str, *, what: str = "database") -> Target:
    """``sqlite:///PATH``, a plain path, or ``postgresql://...``; anything else is a UsageError."""
    text = text.strip()
    if not text:
        raise UsageError(f"{what}: empty; use sqlite:///PATH or postgresql://user@host/name")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in PG_SCHEMES:
        parts = urlsplit(text)
        if not parts.path.strip("/"):
            raise UsageError(f"{what}: {redact_url(text)}: name the database (postgresql://user@host/NAME)")
        return Target(Dialect.POSTGRESQL, url=PgURL(urlunsplit(parts._replace(scheme="postgresql"))))
    if scheme == "sqlite":
        rest = text.split("://", 1)[1]
        if not rest.startswith("/"):
            raise UsageError(f"{what}: {text}: use sqlite:///ABSOLUTE/PATH (three slashes)")
        return Target(Dialect.SQLITE, path=Path(rest))
    if scheme:
        raise UsageError(f"{what}: {redact_url(text)}: unknown scheme {scheme!r}; use sqlite:/// or postgresql://")
    return Target(Dialect.SQLITE, path=Path(text).expanduser().absolute())


def configured(home: Path, setting: str | None) -> Target:
    """The store of a RUNNER_HOME: ``RUNNER_DATABASE_URL``, else config.yaml's ``database:``,
    else ``runner.db`` in RUNNER_HOME."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return parse(env, what=ENV)
    if setting:
        return parse(setting, what="config.yaml: database")
    return Target(Dialect.SQLITE, path=home / "runner.db")


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<database url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))
