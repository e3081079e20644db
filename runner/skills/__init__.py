"""Skills: SKILL.md folders that are the agent's procedural memory, and the Curator that ages them.

- ``rules.py``: the SKILL.md rules (frontmatter, fields, names, supporting-file paths).
- ``loader.py``: finding skills in their sources, the catalog (valid and invalid), the index.
- ``scan.py``: the content check (injection phrases, invisible Unicode, dangerous script commands).
- ``usage.py``: the usage sidecar ``RUNNER_HOME/skills/.usage.json`` (locked, atomically replaced).
- ``manage.py``: changes to the agent-writable skills (create, edit, patch, files, archive, restore).
- ``session.py``: what one run sees and does: index, preloading, ``skill_view``, outcomes.
- ``curator.py``: one curator pass (stale, archive, reactivate; snapshot, report).
- ``idle.py``: the idle trigger object ``runner serve`` ticks, and the curator's stored state.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.errors import RunnerError, UsageError

SUPPORT_DIRS = ("references", "templates", "scripts", "assets")
ARCHIVE_DIR = ".archive"
BACKUP_DIR = ".curator_backups"
USAGE_FILE = ".usage.json"


class SkillError(UsageError):
    """A person asked for something about skills that cannot be done (unknown name, read-only). Exit 2."""

    reason = "skill"


class SkillStateError(RunnerError, RuntimeError):
    """The skills state on disk is damaged (an unreadable usage sidecar). Exit 1."""

    reason = "skillstate"


class SkillRefused(SkillError):
    """Content failed validation or the scan; ``reasons`` says why, one item per problem."""

    reason = "skillrefused"

    def __init__(self, subject: str, reasons: Sequence[str]):
        self.reasons = tuple(reasons)
        super().__init__(f"{subject}: refused: " + "; ".join(self.reasons))


class TreeMirror(Protocol):
    """A copy of the home skills elsewhere that every change keeps in step (``runner.skills.shared``:
    the tree in a PostgreSQL store shared by several machines)."""

    def changing(self) -> AbstractContextManager[None]:
        """Around one change of the folder: bring it up to date first, send the change after."""
        ...


@dataclass(frozen=True)
class SkillPaths:
    """Where the writable skills live under RUNNER_HOME (``mirror``: the shared copy, if any)."""

    root: Path  # RUNNER_HOME/skills
    mirror: TreeMirror | None = field(default=None, compare=False, repr=False)

    @classmethod
    def under(cls, home: Path) -> SkillPaths:
        return cls(home / "skills")

    @contextmanager
    def changing_tree(self) -> Iterator[None]:
        """The tree lock (skill folders move or change), and the mirror kept in step."""
        with flock(self.tree_lock), self._mirrored():
            yield

    @contextmanager
    def changing_usage(self) -> Iterator[None]:
        """The usage sidecar's lock, and the mirror kept in step."""
        with flock(self.usage_lock), self._mirrored():
            yield

    def _mirrored(self) -> AbstractContextManager[None]:
        return self.mirror.changing() if self.mirror is not None else nullcontext()

    @property
    def archive(self) -> Path:
        return self.root / ARCHIVE_DIR

    @property
    def backups(self) -> Path:
        return self.root / BACKUP_DIR

    @property
    def usage(self) -> Path:
        return self.root / USAGE_FILE

    @property
    def usage_lock(self) -> Path:
        return self.root / ".usage.lock"

    @property
    def tree_lock(self) -> Path:
        return self.root / ".tree.lock"

    def live(self, name: str) -> Path:
        return self.root / name

    def archived(self, name: str) -> Path:
        return self.archive / name


@contextmanager
def flock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``path`` (created if missing) for the ``with`` body.

    Locks are per open file, so one process must not nest two ``flock`` calls on the same path.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
