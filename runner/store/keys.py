"""The ``credentials`` table: the state every process shares about each API key.

One row per (provider, fingerprint); the raw key is never stored. Each operation that reads and
then writes is one transaction (``BEGIN IMMEDIATE`` on SQLite, a row lock on PostgreSQL), so two
workers never pick from a stale view of cooldowns. What a failure means for a key, and which key
to pick, are the caller's rules (``runner.agent.cooldowns``, ``runner.agent.credentials``): they
come in as functions and run inside the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from runner.errors import UsageError
from runner.store import Store


class KeyStatus(StrEnum):
    OK = "ok"
    COOLING = "cooling"  # stored while a cooldown is set; a key past it reads back as ok
    DEAD = "dead"  # failed authentication again after its cooldown: until `runner creds reset`


@dataclass(frozen=True)
class KeyRow:
    provider: str
    fingerprint: str
    label: str
    position: int
    status: KeyStatus
    cooldown_until: str | None
    request_count: int
    success_count: int
    selected_at: str | None
    last_error_code: int | None
    last_error_message: str | None
    last_used_at: str | None
    rate_limit_strikes: int
    auth_strikes: int

    @classmethod
    def of(cls, row: Any) -> KeyRow:
        values = {f.name: row[f.name] for f in fields(cls)}
        values["status"] = KeyStatus(values["status"])
        for count in ("request_count", "success_count", "rate_limit_strikes", "auth_strikes"):
            values[count] = int(values[count] or 0)
        return cls(**values)


@dataclass(frozen=True)
class KeyFailure:
    """What a failed request does to its key's row."""

    status: KeyStatus
    cooldown_until: str | None
    code: int
    message: str
    at: str
    auth_strikes: int
    rate_limit_strikes: int


_COLUMNS = ", ".join(f.name for f in fields(KeyRow))


def sync(store: Store, provider: str, keys: Sequence[tuple[str, str]], stamp: str) -> None:
    """A row for each ``(fingerprint, label)``, in this order (``position``); labels kept current."""
    with store.transaction() as conn:
        for position, (fingerprint, label) in enumerate(keys):
            conn.execute(
                "INSERT INTO credentials (provider, fingerprint, label, position, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (provider, fingerprint) DO UPDATE SET label=excluded.label, position=excluded.position",
                (provider, fingerprint, label, position, stamp),
            )


def all_keys(store: Store) -> list[KeyRow]:
    return [KeyRow.of(r) for r in store.query(f"SELECT {_COLUMNS} FROM credentials ORDER BY provider, position, label")]


def reset(store: Store, *, fingerprint: str | None = None, provider: str | None = None) -> int:
    """Clear cooldowns, dead marks and strikes (counts stay) of one key (a fingerprint prefix of 4
    or more characters), one provider's keys, or every key (neither given). How many rows."""
    where, params = "1=1", list[str]()
    with store.transaction() as conn:
        if fingerprint is not None:
            prefix = fingerprint.strip().lower()
            found = {r[0] for r in conn.execute("SELECT fingerprint FROM credentials") if r[0].startswith(prefix)}
            if len(prefix) < 4 or not found:
                raise UsageError(f"creds reset: no key with fingerprint {fingerprint!r} (see: runner creds list)")
            if len(found) > 1:
                raise UsageError(f"creds reset: fingerprint {fingerprint!r} is ambiguous: {', '.join(sorted(found))}")
            where, params = "fingerprint=?", [found.pop()]
        elif provider is not None:
            if not conn.execute("SELECT 1 FROM credentials WHERE provider=?", (provider,)).fetchone():
                raise UsageError(f"creds reset: no keys for provider {provider!r} (see: runner creds list)")
            where, params = "provider=?", [provider]
        cur = conn.execute(
            "UPDATE credentials SET status='ok', cooldown_until=NULL, rate_limit_strikes=0, auth_strikes=0, "
            f"last_error_code=NULL, last_error_message=NULL WHERE {where}",
            params,
        )
        return cur.rowcount


def count_success(store: Store, provider: str, fingerprint: str) -> None:
    """A request with the key succeeded: count it and end its strike streaks."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE credentials SET success_count=success_count+1, rate_limit_strikes=0, auth_strikes=0 "
            "WHERE provider=? AND fingerprint=?",
            (provider, fingerprint),
        )


def record_failure(store: Store, provider: str, fingerprint: str, decide: Callable[[KeyRow], KeyFailure]) -> KeyFailure:
    """Read the key's row, let ``decide`` say what the failure does to it, write that: one transaction."""
    with store.transaction() as conn:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM credentials WHERE provider=? AND fingerprint=?", (provider, fingerprint)
        ).fetchone()
        failure = decide(KeyRow.of(row))
        conn.execute(
            "UPDATE credentials SET status=?, cooldown_until=?, last_error_code=?, last_error_message=?, "
            "last_error_at=?, auth_strikes=?, rate_limit_strikes=? WHERE provider=? AND fingerprint=?",
            (
                failure.status,
                failure.cooldown_until,
                failure.code,
                failure.message,
                failure.at,
                failure.auth_strikes,
                failure.rate_limit_strikes,
                provider,
                fingerprint,
            ),
        )
    return failure


def choose(
    store: Store,
    provider: str,
    fingerprints: set[str],
    pick: Callable[[list[KeyRow]], tuple[KeyRow, bool] | None],
    stamp: str,
) -> tuple[KeyRow | None, list[KeyRow]]:
    """One transaction: read the provider's rows among ``fingerprints``; ``pick`` names the key to
    use and whether it is a new choice (else the run keeps its key), or None when no key is usable;
    the chosen key's request is counted (a cooling key chosen again is ``ok``). The chosen row (or
    None) and every row read."""
    with store.transaction() as conn:
        rows = [
            KeyRow.of(r)
            for r in conn.execute(f"SELECT {_COLUMNS} FROM credentials WHERE provider=?", (provider,))
            if r["fingerprint"] in fingerprints
        ]
        picked = pick(rows)
        if picked is None:
            return None, rows
        chosen, new = picked
        conn.execute(
            "UPDATE credentials SET request_count=request_count+1, last_used_at=?, "
            "selected_at=CASE WHEN ? THEN ? ELSE selected_at END, "
            "status=CASE WHEN status='cooling' THEN 'ok' ELSE status END "
            "WHERE provider=? AND fingerprint=?",
            (stamp, new, stamp, provider, chosen.fingerprint),
        )
    return chosen, rows
