"""Files under RUNNER_HOME that hold run data: written whole or not at all, readable only by the owner."""

from __future__ import annotations

import os
from pathlib import Path

from runner.errors import StoreError


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically with mode 0600; on failure (OSError) the temporary
    file is removed, so nothing half-written is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_run_file(path: Path, text: str) -> None:
    """``write_private`` for a run's own files (output, transcript): a disk that is full or
    read-only is a ``StoreError`` naming the file, so the run ends ``failed`` (``store_error``)."""
    try:
        write_private(path, text)
    except OSError as exc:
        raise StoreError(f"{path}: cannot write: {exc.strerror or exc}") from exc
