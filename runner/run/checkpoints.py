"""Checkpoints of a run's workdir: snapshots before each model turn that may change its files,
listed by ``runner runs checkpoints`` and restored by ``runner runs rollback``.

The loop knows only ``before_mutation(step, tool)`` (``runner.tools.context.Checkpoints``); the
git plumbing is ``runner.run.shadow``'s. Each checkpoint is a ``checkpoint`` event of the run
(its commit in the workdir's shadow repository, the turn that followed, files and changes); a
failure to take one is a ``checkpoint_failed`` event and the run goes on (three in a row, or one
that cannot get better such as git missing or the size cap, and the run takes no more). When
the run ends after at least one checkpoint, a last one (``end``) holds the files as the run left
them, so the changes of every turn can be shown (not when the run was cancelled or signalled: it
must end at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import CheckpointError, UsageError
from runner.events import Checkpoint, CheckpointFailed, Emit, Event, Recorded, Rollback
from runner.run.shadow import REF_PREFIX, SHOWN, Caps, Shadow, Snapshot, Snapshotter

if TYPE_CHECKING:
    from runner.run.produce import RunView
    from runner.settings import Settings

MB = 1_000_000
MAX_FAILURES = 3  # failed checkpoints in a row before a run stops trying


class Checkpointer:
    """One run's checkpoints (``runner.tools.context.Checkpoints``)."""

    def __init__(self, shadow: Shadow, run_id: str, emit: Emit, caps: Caps, exclude: Sequence[str] = ()):
        self.shadow = shadow
        self.emit = emit
        self._exclude = tuple(exclude)
        self._snap = Snapshotter(shadow, shadow.index_of(run_id), REF_PREFIX + run_id, caps)
        self._lock = threading.Lock()
        self._failures = 0
        self._off = False
        self._taken = 0
        self._ready = False

    def before_mutation(self, step: int, tool: str) -> None:
        self._take(f"before turn {step} ({tool})", step=step, tool=tool)

    def close(self, *, stopped: bool = False) -> None:
        """The run ends: a last checkpoint (when it took any, and the run was not ``stopped``: a
        cancelled or signalled run ends within ``kill_grace``, and a snapshot of a large workdir
        could outlast it; a rollback saves the files as they are first anyway), and its index goes."""
        if self._taken and not self._off and not stopped:
            self._take("end of the run", label="end")
        self._snap.discard()

    def _take(self, message: str, *, step: int | None = None, tool: str | None = None, label: str | None = None) -> None:
        with self._lock:
            if self._off:
                return
            started = time.monotonic()
            try:
                if not self._ready:
                    self.shadow.ensure(self._exclude)
                    self._ready = True
                snap = self._snap.take(message)
                first = not self._taken
                ignored = self.shadow.ignored(self._snap.index) if first else []
            except CheckpointError as exc:
                self._failures += 1
                self._off = exc.final or self._failures >= MAX_FAILURES
                self.emit(Event.CHECKPOINT_FAILED, CheckpointFailed(str(exc), step, self._off or None))
                return
            self._failures = 0
            self._taken += 1
            point = event_of(snap, self.shadow, started, step, tool, label, ignored)
            if first:
                caps = self._snap.caps
                point = replace(point, max_mb=caps.max_bytes // MB, max_file_mb=caps.max_file_bytes // MB)
            self.emit(Event.CHECKPOINT, point)


def event_of(
    snap: Snapshot,
    shadow: Shadow,
    started: float,
    step: int | None,
    tool: str | None,
    label: str | None,
    ignored: Sequence[str] = (),
) -> Checkpoint:
    left = (list(ignored), list(snap.oversize), list(snap.skipped))
    shown = [names[:SHOWN] for names in left]
    more = sum(len(names) for names in left) - sum(len(names) for names in shown)
    return Checkpoint(
        id=snap.commit,
        workdir=str(shadow.workdir),
        files=snap.files,
        seconds=round(time.monotonic() - started, 3),
        step=step,
        tool=tool,
        label=label,
        changed=snap.changed,
        mb=round(snap.bytes / MB, 3),
        ignored=shown[0] or None,
        oversize=shown[1] or None,
        skipped=shown[2] or None,
        more=more or None,
    )


def open_checkpoints(run: RunView) -> Checkpointer | None:
    """The run's checkpointer, or None when its job takes no checkpoints (``Job.checkpointed``)."""
    job = run.job
    if not job.checkpointed:
        return None
    workdir = Path(run.req.workdir or job.workdir)
    shadow = Shadow(run.settings.home, workdir)
    caps = Caps(job.spec.checkpoint_max_mb * MB, job.spec.checkpoint_max_file_mb * MB)
    hidden = [run.settings.home, *(Path(p) for p in (run.control.unreadable if run.control else ()))]
    return Checkpointer(shadow, run.run_id, run.emit, caps, exclude=excluded(shadow.workdir, hidden))


def excluded(workdir: Path, hidden: Sequence[Path]) -> list[str]:
    """``info/exclude`` lines for what the run may not read that lies inside the workdir."""
    import os

    lines = []
    for path in hidden:
        real = Path(os.path.realpath(path))
        if real != workdir and real.is_relative_to(workdir):
            lines.append("/" + _escape(real.relative_to(workdir).as_posix()))
    return sorted(set(lines))


def _escape(path: str) -> str:
    for char in "\\*?[!# ":
        path = path.replace(char, "\\" + char)
    return path


# -- listing and rollback (runner runs checkpoints | rollback) ---------------------------------------
@dataclass(frozen=True)
class Listed:
    """A run's checkpoint as ``runs checkpoints`` lists it."""

    id: str
    ts: str
    step: int | None
    tool: str | None
    label: str | None
    files: int
    changed: int | None  # files the steps after it changed, up to the next checkpoint (None: not known)
    workdir: str
    caps: Caps | None = None  # the job's caps as its run's first checkpoint recorded them

    @property
    def when(self) -> str:
        from runner.events import checkpoint_when

        return checkpoint_when(self.step, self.tool, self.label)

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "ts": self.ts,
            "step": self.step,
            "tool": self.tool,
            "label": self.label,
            "files": self.files,
            "changed_after": self.changed,
            "workdir": self.workdir,
        }


def listed(evs: Sequence[Recorded]) -> list[Listed]:
    points = [(e.ts, e.payload) for e in evs if isinstance(e.payload, Checkpoint)]
    out = []
    for i, (ts, p) in enumerate(points):
        after = points[i + 1][1].changed if i + 1 < len(points) else None
        caps = Caps(p.max_mb * MB, p.max_file_mb * MB) if p.max_mb and p.max_file_mb else None
        out.append(Listed(p.id, ts, p.step, p.tool, p.label, p.files, after, p.workdir, caps))
    return out


def failures(evs: Sequence[Recorded]) -> int:
    return sum(1 for e in evs if isinstance(e.payload, CheckpointFailed))


def choose(points: Sequence[Listed], to: str | None) -> Listed:
    """The checkpoint ``--to`` names: a turn number (the checkpoint before that turn), a
    checkpoint id (4 or more of its first hex digits); none: the run's first checkpoint."""
    if not points:
        raise UsageError("the run has no checkpoints (see: runner runs show RUN)")
    if to is None:
        return points[0]
    text = to.strip().lower()
    if text.isdigit() and len(text) <= 6:
        found = [p for p in points if p.step == int(text) and p.label is None]
        if not found:
            steps = ", ".join(str(p.step) for p in points if p.label is None)
            raise UsageError(
                f"--to {to}: no checkpoint before turn {text} (a turn that changed no file has none); "
                f"checkpoints were taken before turns {steps}"
            )
        return found[0]
    if len(text) >= 4 and all(c in "0123456789abcdef" for c in text):
        found = [p for p in points if p.id.startswith(text)]
        if found:
            return found[0]
    raise UsageError(f"--to {to}: not a turn number or a checkpoint id of this run (see: runner runs checkpoints RUN)")


@dataclass(frozen=True)
class RolledBack:
    to: Listed
    undo: str
    written: int
    deleted: int
    untouched: tuple[str, ...]
    left_out: tuple[str, ...]  # files of the workdir no checkpoint holds (ignored, over the cap): not touched

    def as_json(self, run_id: str) -> dict[str, object]:
        return {
            "id": run_id,
            "to": self.to.id,
            "step": self.to.step,
            "undo": self.undo,
            "written": self.written,
            "deleted": self.deleted,
            "untouched": list(self.untouched),
            "left_out": list(self.left_out),
            "workdir": self.to.workdir,
        }


DEFAULT_CAPS = Caps(100 * MB, 10 * MB)  # jobs.yaml's defaults (an older run's checkpoints did not record them)


def rollback(settings: Settings, run_id: str, points: Sequence[Listed], target: Listed, emit: Emit, by: str) -> RolledBack:
    """Restore ``target``'s files in its workdir, after a checkpoint of the files as they are now
    (recorded on the run, label ``rollback``: rolling back to it undoes this one), taken with the
    run's own caps so a file the run's checkpoints left out is left alone."""
    caps = next((p.caps for p in points if p.caps is not None), DEFAULT_CAPS)
    shadow = Shadow(settings.home, Path(target.workdir))
    if not shadow.git_dir.is_dir() or not shadow.has(target.id):
        raise CheckpointError(f"checkpoint {target.id[:12]} is gone from {shadow.git_dir} (pruned?)")
    if not shadow.workdir.is_dir():
        raise UsageError(f"the run's workdir {shadow.workdir} is not a folder any more")
    started = time.monotonic()
    index = shadow.git_dir / "indexes" / f"rollback-{run_id}-{time.time_ns()}"
    index.parent.mkdir(exist_ok=True)
    snap = Snapshotter(shadow, index, REF_PREFIX + run_id, caps, commit=_head(shadow, run_id))
    try:
        now = snap.take(f"before a rollback to {target.id[:12]}")
        ignored = shadow.ignored(index)
    finally:
        snap.discard()
    point = event_of(now, shadow, started, None, None, "rollback", ignored)
    emit(Event.CHECKPOINT, point)
    restored = shadow.restore(now.commit, target.id)
    emit(
        Event.ROLLBACK,
        Rollback(
            target.id,
            now.commit,
            restored.written,
            restored.deleted,
            step=target.step,
            by=by,
            untouched=list(restored.untouched) or None,
        ),
    )
    left = tuple([*(point.ignored or ()), *(point.oversize or ()), *(point.skipped or ())])
    return RolledBack(target, now.commit, restored.written, restored.deleted, restored.untouched, left)


def _head(shadow: Shadow, run_id: str) -> str | None:
    """The run's last commit (the parent of the next one), None when its ref is gone."""
    try:
        return shadow.git("rev-parse", "--verify", "-q", REF_PREFIX + run_id).decode().strip() or None
    except CheckpointError:
        return None


def diff(settings: Settings, old: Listed, new: Listed, max_bytes: int = 200_000) -> tuple[str, bool]:
    """The changes between two checkpoints of a run (``git diff``: text, binary files named)."""
    return Shadow(settings.home, Path(old.workdir)).diff(old.id, new.id, max_bytes)
