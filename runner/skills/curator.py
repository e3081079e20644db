"""The Curator: ages the skills the agent wrote itself, and never loses one.

Only skills with ``created_by: agent`` in the usage sidecar, not pinned and not named in any job's
``skills:`` are considered. Last activity (use, view, patch or reactivation; else creation) older
than ``stale_after_days`` makes a skill ``stale``; older than ``archive_after_days`` moves it to
``skills/.archive/<name>``; a stale skill with recent activity is ``active`` again. Nothing is ever
deleted. Before changing anything a pass writes a snapshot (``skills/.curator_backups/<time>.tar.gz``,
newest five kept); every pass writes a report (``logs/curator/<time>.md``) and a ``curator_runs``
row. A dry run takes no lock, creates no file and writes no row: it only returns the plan.

The report also lists ``suspect`` skills: those in ``suspect_after_failures`` (3) failed runs in a
row. With ``consolidate: true`` a (non-dry) pass ends with the consolidation pass
(``runner.skills.consolidate``): a merge plan file for ``runner curator apply``, never a change.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.clock import iso
from runner.errors import RunnerError, UsageError
from runner.skills import ARCHIVE_DIR, BACKUP_DIR, SkillPaths, SkillStateError
from runner.skills.shared import skill_paths
from runner.skills.sidecall import ModelFactory
from runner.skills.usage import UsageFile, UsageRecord
from runner.store import Store, dumps
from runner.store.atomic import write_private

if TYPE_CHECKING:
    from runner.config.machine import CuratorConfig
    from runner.settings import Settings

KEEP_SNAPSHOTS = 5
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Transition:
    name: str
    from_state: str
    to_state: str  # stale | archived | active
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "from": self.from_state, "to": self.to_state, "reason": self.reason}


@dataclass(frozen=True)
class Kept:
    name: str
    why: str


@dataclass(frozen=True)
class CuratorPlan:
    now: datetime
    stale_after_days: float
    archive_after_days: float
    examined: int
    transitions: tuple[Transition, ...]
    kept: tuple[Kept, ...]
    suspect: tuple[Kept, ...] = ()  # skills in curator.suspect_after_failures failed runs in a row
    consolidation: str = ""  # what the consolidation pass did (curator.consolidate), for the report

    def count(self, to_state: str) -> int:
        return sum(1 for t in self.transitions if t.to_state == to_state)


@dataclass(frozen=True)
class PassResult:
    plan: CuratorPlan
    dry_run: bool
    trigger: str
    report: str
    run_id: str | None = None
    report_path: Path | None = None
    snapshot_path: Path | None = None
    merge_plan: Path | None = None  # written by the consolidation pass (curator.consolidate)

    def summary(self) -> str:
        p = self.plan
        verb = "would change" if self.dry_run else "changed"
        return (
            f"{p.examined} agent-created skills examined; {verb}: {p.count('stale')} stale, "
            f"{p.count('archived')} archived, {p.count('active')} reactivated"
        )


# -- deciding -------------------------------------------------------------------------------
def job_references(settings: Settings) -> dict[str, list[str]]:
    """skill name -> the jobs whose ``skills:`` name it (every job, enabled or not)."""
    if not settings.jobs_path.exists():
        raise UsageError(
            f"{settings.jobs_path}: jobs file not found; the curator needs it to know which skills jobs use "
            "(use --jobs PATH or set RUNNER_JOBS)"
        )
    refs: dict[str, list[str]] = {}
    for job in settings.jobs.jobs.values():
        for name in job.spec.skills:
            refs.setdefault(name, []).append(job.name)
    return refs


def _days(delta: timedelta) -> str:
    return f"{delta / DAY:.1f} days"


def make_plan(
    records: dict[str, UsageRecord],
    paths: SkillPaths,
    refs: dict[str, list[str]],
    cfg: CuratorConfig,
    now: datetime,
) -> CuratorPlan:
    """What a pass would do now (reads the tree, changes nothing)."""
    stale_after = timedelta(days=cfg.stale_after_days)
    archive_after = timedelta(days=cfg.archive_after_days)
    transitions: list[Transition] = []
    kept: list[Kept] = []
    examined = 0
    root, archive = str(paths.root), str(paths.archive)
    for name in sorted(records):
        rec = records[name]
        if rec.created_by != "agent" or rec.state == "archived":
            continue
        md = os.path.join(root, name, "SKILL.md")
        last = rec.last_activity()
        if last is None:
            try:
                last = datetime.fromtimestamp(os.stat(md).st_mtime, tz=now.tzinfo)
            except FileNotFoundError:
                continue
        elif not os.path.exists(md):
            continue  # gone from disk (moved by hand): nothing to age
        examined += 1
        if rec.pinned:
            kept.append(Kept(name, "pinned"))
            continue
        if name in refs:
            kept.append(Kept(name, "used by job " + ", ".join(refs[name])))
            continue
        age = now - last
        idle = f"no activity for {_days(age)} (since {iso(last)})"
        if age > archive_after:
            if os.path.lexists(os.path.join(archive, name)):
                kept.append(Kept(name, f"should be archived but {paths.archived(name)} is taken"))
            else:
                transitions.append(
                    Transition(name, rec.state, "archived", f"{idle}; archive after {cfg.archive_after_days:g} days")
                )
        elif age > stale_after:
            if rec.state != "stale":
                transitions.append(
                    Transition(name, rec.state, "stale", f"{idle}; stale after {cfg.stale_after_days:g} days")
                )
        elif rec.state == "stale":
            transitions.append(Transition(name, "stale", "active", f"active again: last activity {_days(age)} ago"))
    suspect = tuple(
        Kept(name, f"in {rec.fail_streak} failed runs in a row (suspect after {cfg.suspect_after_failures})")
        for name, rec in sorted(records.items())
        if rec.state != "archived" and rec.suspect(cfg.suspect_after_failures)
    )
    return CuratorPlan(
        now, cfg.stale_after_days, cfg.archive_after_days, examined, tuple(transitions), tuple(kept), suspect
    )


# -- doing ----------------------------------------------------------------------------------
def run_pass(
    settings: Settings,
    *,
    now: datetime,
    dry_run: bool = False,
    trigger: str = "manual",
    model: ModelFactory | None = None,
) -> PassResult:
    """One curator pass over RUNNER_HOME/skills (``dry_run``: plan and report only, nothing written).

    ``model`` builds the model of the consolidation pass (``curator.consolidate``); without one the
    report says the pass was skipped."""
    paths = skill_paths(settings)
    usage = UsageFile(paths)
    refs = job_references(settings)  # jobs.yaml must load: it says which skills are in use
    cfg = settings.config.curator
    if dry_run:
        preview = make_plan(usage.read(), paths, refs, cfg, now)
        return PassResult(preview, True, trigger, render_report(preview, dry_run=True, trigger=trigger))
    store = settings.store
    run_id = f"cur-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO curator_runs (id, trigger, status, started_at) VALUES (?, ?, 'running', ?)",
            (run_id, trigger, iso(now)),
        )
    applied: list[Transition] = []
    plan: CuratorPlan | None = None
    snapshot: Path | None = None
    status, error = "failed", None
    consolidation: tuple[str, Path | None] = ("", None)
    started = time.monotonic()
    try:
        with paths.changing_tree(), usage.locked():
            records = usage.read()
            plan = make_plan(records, paths, refs, cfg, now)
            if plan.transitions:
                snapshot = write_snapshot(paths, now)
            if plan.count("archived"):
                paths.archive.mkdir(parents=True, exist_ok=True)
            try:
                for t in plan.transitions:
                    _apply(t, records, paths, now)
                    applied.append(t)
            finally:
                if applied:
                    usage.write(records)
        if cfg.consolidate:
            consolidation = consolidate_step(settings, now, model)
        status = "succeeded"
    except OSError as exc:
        error = f"curator pass failed after {len(applied)} change(s): {exc}"
        raise SkillStateError(error) from exc
    except BaseException as exc:
        error = str(exc) or type(exc).__name__
        raise
    finally:
        report_path = None
        report = ""
        done = None if plan is None else replace(plan, transitions=tuple(applied), consolidation=consolidation[0])
        if done is not None:
            report = render_report(done, dry_run=False, trigger=trigger, snapshot=snapshot, error=error)
            report_path = write_report(settings.home, now, report)
        ended = now + timedelta(seconds=time.monotonic() - started)
        _finish_row(store, run_id, ended, plan, applied, status, report_path, snapshot, error)
        mark_pass(store, now)
    assert done is not None
    return PassResult(done, False, trigger, report, run_id, report_path, snapshot, consolidation[1])


def consolidate_step(settings: Settings, now: datetime, model: ModelFactory | None) -> tuple[str, Path | None]:
    """The consolidation pass of a curator pass: (what it did, for the report; the plan file).

    A model that fails or answers nonsense is reported; the ageing already done stands."""
    from runner.skills.consolidate import propose

    if model is None:
        return "skipped: this pass was given no model", None
    try:
        proposal = propose(settings, now=now, model=model)
    except (RunnerError, OSError) as exc:
        return f"failed: {exc}", None
    return proposal.summary(), proposal.plan_path


def _apply(t: Transition, records: dict[str, UsageRecord], paths: SkillPaths, now: datetime) -> None:
    rec = records[t.name]
    stamp = iso(now)
    if t.to_state == "archived":
        os.rename(os.path.join(paths.root, t.name), os.path.join(paths.archive, t.name))
        records[t.name] = replace(rec, state="archived", archived_at=stamp)
    elif t.to_state == "stale":
        records[t.name] = replace(rec, state="stale", stale_at=stamp)
    else:
        records[t.name] = replace(rec, state="active", stale_at=None, reactivated_at=stamp)


def _finish_row(
    store: Store,
    run_id: str,
    ended: datetime,
    plan: CuratorPlan | None,
    applied: list[Transition],
    status: str,
    report_path: Path | None,
    snapshot: Path | None,
    error: str | None,
) -> None:
    counts = {k: sum(1 for t in applied if t.to_state == k) for k in ("stale", "archived", "active")}
    with store.transaction() as conn:
        conn.execute(
            "UPDATE curator_runs SET status=?, ended_at=?, examined=?, stale=?, archived=?, reactivated=?, "
            "changes=?, report_path=?, snapshot_path=?, error=? WHERE id=?",
            (
                status,
                iso(ended),
                plan.examined if plan else 0,
                counts["stale"],
                counts["archived"],
                counts["active"],
                dumps([t.as_dict() for t in applied]),
                str(report_path) if report_path else None,
                str(snapshot) if snapshot else None,
                error,
                run_id,
            ),
        )


def write_snapshot(paths: SkillPaths, now: datetime, *, tar: str | None = None) -> Path:
    """tar.gz of the live skills and the sidecar (not the archive or older snapshots); keep the newest 5.

    GNU ``tar`` and ``gzip`` from PATH do the work when present (an order of magnitude faster than
    ``tarfile`` for thousands of small files, and compression runs beside the walk); otherwise
    ``tarfile`` writes the same archive.
    """
    paths.backups.mkdir(parents=True, exist_ok=True)
    dest = _unique(paths.backups, now.strftime("%Y%m%d-%H%M%S"), ".tar.gz")
    tmp = dest.with_name(f".{dest.name}.tmp")
    skip = {ARCHIVE_DIR, BACKUP_DIR, paths.usage_lock.name, paths.tree_lock.name}
    entries = [
        e for e in sorted(os.listdir(paths.root)) if e not in skip and ".tmp" not in e and not e.startswith(".new-")
    ]
    tar = tar if tar is not None else (shutil.which("tar") if shutil.which("gzip") else None)
    try:
        if tar:
            _tar_with_system_tar(tar, paths.root, entries, tmp)
        else:
            with tarfile.open(tmp, "w:gz", compresslevel=1) as archive:
                for entry in entries:
                    archive.add(paths.root / entry, arcname=entry)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    snapshots = sorted(paths.backups.glob("*.tar.gz"), key=lambda p: (p.stat().st_mtime, p.name))
    for old in snapshots[:-KEEP_SNAPSHOTS]:
        old.unlink()  # old snapshots (not skills) are the one thing a pass removes
    return dest


def _tar_with_system_tar(tar: str, root: Path, entries: list[str], dest: Path) -> None:
    """``tar -c`` the entries (names NUL-separated on stdin) through ``gzip -1``; tar and gzip run in parallel."""
    proc = subprocess.run(
        [tar, "-C", str(root), "--null", "-T", "-", "-I", "gzip -1", "-cf", str(dest)],
        input=b"".join(os.fsencode(e) + b"\0" for e in entries),
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise OSError(f"{tar} failed writing the snapshot: {err or 'exit ' + str(proc.returncode)}")


def _unique(folder: Path, stem: str, suffix: str) -> Path:
    path = folder / f"{stem}{suffix}"
    n = 2
    while path.exists():
        path = folder / f"{stem}-{n}{suffix}"
        n += 1
    return path


def write_report(home: Path, now: datetime, text: str) -> Path:
    folder = home / "logs" / "curator"
    folder.mkdir(parents=True, exist_ok=True)
    path = _unique(folder, now.strftime("%Y%m%d-%H%M%S"), ".md")
    write_private(path, text)
    return path


def render_report(
    plan: CuratorPlan, *, dry_run: bool, trigger: str, snapshot: Path | None = None, error: str | None = None
) -> str:
    title = "Curator dry run" if dry_run else "Curator pass"
    lines = [
        f"# {title} {plan.now.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        "",
        f"- trigger: {trigger}",
        f"- rules: stale after {plan.stale_after_days:g} days without activity, archived after {plan.archive_after_days:g}",
        f"- examined: {plan.examined} agent-created skills",
    ]
    if snapshot is not None:
        lines.append(f"- snapshot before changes: {snapshot}")
    if dry_run:
        lines.append("- dry run: nothing was changed")
    if error:
        lines.append(f"- error: {error}")
    sections = [("archived", "Archived (moved to skills/.archive/)"), ("stale", "Now stale"), ("active", "Reactivated")]
    for state, heading in sections:
        items = [t for t in plan.transitions if t.to_state == state]
        lines += ["", f"## {heading}: {len(items)}"]
        lines += [f"- `{t.name}`: {t.reason}" for t in items]
    lines += ["", f"## Kept as they are: {len(plan.kept)}"]
    lines += [f"- `{k.name}`: {k.why}" for k in plan.kept]
    lines += ["", f"## Suspect (failing runs that used them): {len(plan.suspect)}"]
    lines += [f"- `{k.name}`: {k.why}" for k in plan.suspect]
    if plan.consolidation:
        lines += ["", "## Consolidation", plan.consolidation]
    return "\n".join(lines) + "\n"


# -- stored state ---------------------------------------------------------------------------
def state(store: Store) -> dict[str, Any]:
    row = store.one("SELECT last_pass_at, seeded, paused, paused_at FROM curator_state WHERE id=1")
    return row or {"last_pass_at": None, "seeded": 0, "paused": 0, "paused_at": None}


def mark_pass(store: Store, now: datetime, *, seeded: bool = False) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE curator_state SET last_pass_at=?, seeded=? WHERE id=1", (iso(now), int(seeded)))


def set_paused(store: Store, paused: bool, now: datetime) -> None:
    with store.transaction() as conn:
        conn.execute(
            "UPDATE curator_state SET paused=?, paused_at=? WHERE id=1", (int(paused), iso(now) if paused else None)
        )


def last_runs(store: Store, limit: int = 5) -> list[dict[str, Any]]:
    return store.query("SELECT * FROM curator_runs ORDER BY started_at DESC, id DESC LIMIT ?", (limit,))
