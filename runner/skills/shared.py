"""The home skills in a shared store: with PostgreSQL every machine sees the same agent-written skills.

``RUNNER_HOME/skills`` stays the folder skills are read from and written to, on every machine. With
a PostgreSQL store (several machines) the store holds the tree's authoritative copy: ``skill_files``
(every file but the locks, the curator's snapshots and this module's own manifest, with its SHA-256)
and ``skill_tree.version``, moved by every change. The local ``.store-manifest.json`` records the
version and the hashes this machine last synced.

- A change (``skill_manage``, the CLI, the Curator, ``runner curator apply``, an import, a usage
  update) runs inside one store transaction, whose store-wide lock serialises machines: ``pull``
  brings the folder up to the store's version, the change happens as on one machine, ``publish``
  sends what differs and moves the version.
- A reader (a run's skills, ``runner skills list``, the dashboard) pulls first: one query when
  nothing changed.
- ``pull`` takes a file from the store only where the store moved since the last sync. A file a
  person edited here meanwhile is kept as well: it is copied to ``.curator_backups/sync-<time>/``
  before the store's version replaces it. Files only this machine has (a folder in use before the
  store was shared) are published by the next change, so the first machine seeds the store.

With SQLite (one machine) none of this runs: the folder is the only copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.clock import iso, utcnow
from runner.config.database import Dialect
from runner.skills import BACKUP_DIR, SkillPaths

if TYPE_CHECKING:
    from runner.settings import Settings
    from runner.store import Store

MANIFEST = ".store-manifest.json"
SKIP_TOP = frozenset({".usage.lock", ".tree.lock", BACKUP_DIR, MANIFEST})


@dataclass(frozen=True)
class Synced:
    """What one ``pull`` or ``publish`` changed (paths relative to the skills folder)."""

    written: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # local edits copied aside before the store's version replaced them
    version: int = 0


def skill_paths(settings: Settings) -> SkillPaths:
    """This machine's home skills, synced with the store first when the store is shared."""

    plain = SkillPaths.under(settings.home)
    if settings.database.dialect is not Dialect.POSTGRESQL:
        return plain
    tree = SharedTree(settings.store, plain.root)
    tree.pull()
    return SkillPaths(plain.root, mirror=tree)


def local_files(root: Path) -> dict[str, str]:
    """Every file of the tree that is shared, by relative path, with its SHA-256."""
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for folder, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(folder, root)
        if rel_dir == ".":
            dirs[:] = [d for d in dirs if d not in SKIP_TOP]
            files = [f for f in files if f not in SKIP_TOP]
        for name in files:
            if ".tmp" in name:  # a writer's temp file (usage sidecar, manage's atomic writes)
                continue
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name))
            with open(path, "rb") as fh:
                out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


class SharedTree:
    """The mirror of one machine's home skills folder in a PostgreSQL store (``SkillPaths.mirror``)."""

    def __init__(self, store: Store, root: Path):
        self.store, self.root = store, root
        self._local = threading.local()

    # -- the manifest of the last sync --------------------------------------------------------------
    def _manifest(self) -> tuple[int, dict[str, str]]:
        try:
            doc = json.loads((self.root / MANIFEST).read_text(encoding="utf-8"))
            return int(doc["version"]), {str(k): str(v) for k, v in doc["files"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return -1, {}  # never synced (or a damaged manifest: treated as a first sync)

    def _save_manifest(self, version: int, files: dict[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{MANIFEST}.tmp{os.getpid()}"
        tmp.write_text(json.dumps({"version": version, "files": files}, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.root / MANIFEST)

    def version(self) -> int:
        row = self.store.one("SELECT version FROM skill_tree WHERE id=1")
        return int(row["version"]) if row else 0

    # -- the two directions -------------------------------------------------------------------------
    def pull(self) -> Synced:
        """Bring the folder up to the store's version (nothing to do: one query)."""
        seen, _ = self._manifest()
        if seen == self.version():
            return Synced(version=seen)
        with self.store.transaction():
            return self._pull_locked()

    def _pull_locked(self) -> Synced:
        seen, synced = self._manifest()
        version = self.version()
        if seen == version:
            return Synced(version=version)
        remote = {r["path"]: r["sha256"] for r in self.store.query("SELECT path, sha256 FROM skill_files")}
        local = local_files(self.root)
        written, deleted, kept = [], [], []
        aside = self.root / BACKUP_DIR / f"sync-{utcnow().strftime('%Y%m%dT%H%M%S%f')}"
        for rel in sorted(set(remote) | set(synced)):
            theirs, mine, last = remote.get(rel), local.get(rel), synced.get(rel)
            if theirs in (last, mine):
                continue  # the store did not move this file since our last sync, or we agree
            if mine is not None and mine != last:
                self._keep_aside(rel, aside)
                kept.append(rel)
            if theirs is None:
                self._delete(rel)
                deleted.append(rel)
            else:
                self._write(rel)
                written.append(rel)
        self._save_manifest(version, remote)
        return Synced(tuple(written), tuple(deleted), tuple(kept), version)

    def publish(self) -> Synced:
        """Send what differs from the store (call inside the store transaction of the change)."""
        with self.store.transaction() as conn:
            remote = {r["path"]: r["sha256"] for r in self.store.query("SELECT path, sha256 FROM skill_files")}
            local = local_files(self.root)
            written = sorted(rel for rel, sha in local.items() if remote.get(rel) != sha)
            deleted = sorted(set(remote) - set(local))
            now = iso(utcnow())
            for rel in written:
                body = (self.root / rel).read_bytes()
                conn.execute("DELETE FROM skill_files WHERE path=?", (rel,))
                conn.execute(
                    "INSERT INTO skill_files (path, body, sha256, updated_at) VALUES (?, ?, ?, ?)",
                    (rel, body, local[rel], now),
                )
            for rel in deleted:
                conn.execute("DELETE FROM skill_files WHERE path=?", (rel,))
            version = self.version()
            if written or deleted:
                version += 1
                conn.execute("UPDATE skill_tree SET version=?, updated_at=? WHERE id=1", (version, now))
        self._save_manifest(version, local)
        return Synced(tuple(written), tuple(deleted), (), version)

    @contextmanager
    def changing(self) -> Iterator[None]:
        """Pull, let the caller change the folder, publish: one store transaction (re-entrant)."""
        depth = getattr(self._local, "depth", 0)
        if depth:
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth
            return
        with self.store.transaction():
            self._local.depth = 1
            try:
                self._pull_locked()
                yield
                self.publish()
            finally:
                self._local.depth = 0

    # -- files --------------------------------------------------------------------------------------
    def _write(self, rel: str) -> None:
        row = self.store.one("SELECT body FROM skill_files WHERE path=?", (rel,))
        body = bytes(row["body"]) if row else b""
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
        tmp.write_bytes(body)
        os.chmod(tmp, 0o600 if rel.endswith(".json") else 0o644)
        os.replace(tmp, target)

    def _keep_aside(self, rel: str, aside: Path) -> None:
        copy = aside / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.root / rel, copy)

    def _delete(self, rel: str) -> None:
        """Remove the file, then the folders it leaves empty (up to the skills folder)."""
        (self.root / rel).unlink(missing_ok=True)
        folder = (self.root / rel).parent
        while folder != self.root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
