"""The usage sidecar: ``RUNNER_HOME/skills/.usage.json``, one record per skill name.

Every change is read-modify-write under an exclusive ``fcntl.flock`` on ``.usage.lock`` and
lands with an atomic ``os.replace`` of a fsynced temp file, so concurrent workers never lose an
update and a reader never sees half a file. Reading needs no lock.

What counts: ``use`` = loaded into a run's prompt through the job's ``skills:``; ``view`` =
``skill_view`` by the agent; ``patch`` = a change through ``skill_manage``. Runs that viewed or
used a skill add their outcome (succeeded / failed counts) and move its failure streak:
``fail_streak`` counts the consecutive runs that viewed or used the skill and ended ``failed`` or
``timed_out``; a ``succeeded`` run resets it to 0 (interrupted or skipped runs leave it as it is).
A streak of ``curator.suspect_after_failures`` (3 by default) makes the skill ``suspect`` in
``runner skills list`` and the Curator's report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from runner.clock import iso, parse_iso, utcnow
from runner.skills import SkillPaths, SkillStateError
from runner.statuses import RunStatus

Counter = Literal["use", "view", "patch"]
STATES = ("active", "stale", "archived")
VERSION = 1


@dataclass(frozen=True)
class UsageRecord:
    created_at: str | None = None
    created_by: str | None = None  # "agent" for skills written through skill_manage
    state: str = "active"  # active | stale | archived (defaults are left out of the file)
    pinned: bool = False
    use_count: int = 0
    view_count: int = 0
    patch_count: int = 0
    last_used_at: str | None = None
    last_viewed_at: str | None = None
    last_patched_at: str | None = None
    stale_at: str | None = None
    archived_at: str | None = None
    reactivated_at: str | None = None  # restored, pinned or used again after going stale
    runs_succeeded: int = 0
    runs_failed: int = 0
    fail_streak: int = 0  # consecutive failed runs that viewed or used it (a success resets it)
    merged_into: str | None = None  # archived by ``runner curator apply``: the skill it went into

    def suspect(self, after: int) -> bool:
        """Involved in ``after`` or more failed runs in a row."""
        return self.fail_streak >= after

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UsageRecord:
        return cls(**{k: v for k, v in data.items() if k in _FIELDS})

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from their defaults (so the sidecar stays small and readable)."""
        out = {}
        for name, default in _DEFAULTS:
            value = getattr(self, name)
            if value != default:
                out[name] = value
        return out

    def last_activity(self) -> datetime | None:
        """The newest of use, view, patch and reactivation; else the creation time."""
        stamps = [self.last_used_at, self.last_viewed_at, self.last_patched_at, self.reactivated_at]
        present = [s for s in stamps if s]
        if present:
            return parse_iso(max(present, key=_sort_key))
        return parse_iso(self.created_at)

    def last_touched(self) -> str | None:
        present = [s for s in (self.last_used_at, self.last_viewed_at) if s]
        return max(present, key=_sort_key) if present else None

    def bumped(self, kind: Counter, now: datetime) -> UsageRecord:
        stamp = iso(now)
        if kind == "use":
            rec = replace(self, use_count=self.use_count + 1, last_used_at=stamp)
        elif kind == "view":
            rec = replace(self, view_count=self.view_count + 1, last_viewed_at=stamp)
        else:
            rec = replace(self, patch_count=self.patch_count + 1, last_patched_at=stamp)
        if rec.state == "stale":  # used again: active from now on
            rec = replace(rec, state="active", stale_at=None, reactivated_at=stamp)
        return rec


_DEFAULTS = tuple((f.name, f.default) for f in fields(UsageRecord))
_FIELDS = {name for name, _ in _DEFAULTS}


def _sort_key(stamp: str) -> datetime:
    value = parse_iso(stamp)
    assert value is not None
    return value


class UsageFile:
    """The sidecar file and its lock. Cheap to create; holds no open files between calls."""

    def __init__(self, paths: SkillPaths):
        self.paths = paths

    @property
    def path(self) -> Path:
        return self.paths.usage

    def read(self) -> dict[str, UsageRecord]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SkillStateError(f"{self.path}: cannot read the usage sidecar: {exc.strerror}") from exc
        try:
            data = json.loads(raw)
            skills = data["skills"]
            if not isinstance(skills, dict):
                raise TypeError("'skills' is not a mapping")
            return {name: UsageRecord.from_dict(rec) for name, rec in skills.items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise SkillStateError(f"{self.path}: the usage sidecar is damaged ({exc}); fix or move it away") from exc

    def get(self, name: str) -> UsageRecord:
        return self.read().get(name, UsageRecord())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The exclusive lock, on its own (for callers that mix sidecar edits with file moves)."""
        with self.paths.changing_usage():
            yield

    @contextmanager
    def edit(self) -> Iterator[dict[str, UsageRecord]]:
        """Lock, read, let the caller change the mapping, write it back if it changed."""
        with self.locked():
            data = self.read()
            before = dict(data)
            yield data
            if data != before:
                self.write(data)

    def write(self, data: dict[str, UsageRecord]) -> None:
        """Replace the file atomically (call with the lock held)."""
        doc = {"version": VERSION, "skills": {name: data[name].to_dict() for name in sorted(data)}}
        payload = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    # -- the changes callers make ---------------------------------------------------------
    def bump(self, names: Iterable[str], kind: Counter, *, now: datetime | None = None) -> None:
        now = now or utcnow()
        with self.edit() as data:
            for name in names:
                data[name] = data.get(name, UsageRecord()).bumped(kind, now)

    def record_outcome(self, names: Iterable[str], status: str, *, now: datetime | None = None) -> None:
        """Add one run's outcome to each skill it viewed or used."""
        ok = status == RunStatus.SUCCEEDED
        bad = status in (RunStatus.FAILED, RunStatus.TIMED_OUT)
        with self.edit() as data:
            for name in names:
                rec = data.get(name, UsageRecord())
                streak = 0 if ok else rec.fail_streak + bad
                data[name] = replace(
                    rec,
                    runs_succeeded=rec.runs_succeeded + ok,
                    runs_failed=rec.runs_failed + (not ok),
                    fail_streak=streak,
                )

    def created(self, name: str, *, by: str, now: datetime | None = None) -> None:
        stamp = iso(now or utcnow())
        with self.edit() as data:
            data[name] = replace(
                data.get(name, UsageRecord()),
                created_at=stamp,
                created_by=by,
                state="active",
                stale_at=None,
                archived_at=None,
            )

    def set_pinned(self, name: str, pinned: bool, *, now: datetime | None = None) -> UsageRecord:
        stamp = iso(now or utcnow())
        with self.edit() as data:
            rec = replace(data.get(name, UsageRecord()), pinned=pinned)
            if pinned and rec.state == "stale":
                rec = replace(rec, state="active", stale_at=None, reactivated_at=stamp)
            data[name] = rec
            return rec

    def set_state(self, name: str, state: str, *, now: datetime | None = None) -> None:
        """A person's archive or restore (the curator sets states inside its own edit)."""
        assert state in STATES, state
        stamp = iso(now or utcnow())
        with self.edit() as data:
            rec = data.get(name, UsageRecord())
            if state == "archived":
                rec = replace(rec, state=state, archived_at=stamp)
            else:
                rec = replace(rec, state=state, archived_at=None, stale_at=None, reactivated_at=stamp, merged_into=None)
            data[name] = rec
