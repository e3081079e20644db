"""Merge plans: the Curator's consolidation proposal and ``runner curator apply PLAN``.

A merge plan is a JSON file (YAML is read too, for hand-written plans)::

    {
      "version": 1,
      "created_at": "2026-12-01T02:00:00.000+00:00",   # informative
      "model": "gpt-4.1-mini",                          # informative: who proposed it
      "merges": [
        {
          "into": "deploy-app",                   # the agent-written skill that stays
          "sources": ["deploy-service"],          # agent-written skills merged into it, then archived
          "reason": "both deploy the same app",
          "content": "---\\nname: deploy-app\\n...", # the whole new SKILL.md of "into"
          "hashes": {"deploy-app": "sha256:...", "deploy-service": "sha256:..."}
        }
      ]
    }

``hashes`` holds each named skill's content hash when the plan was made (every file of its folder,
hidden files aside): a skill changed since is a stale plan. Applying checks everything before it
changes anything: the plan's shape, every name a live agent-written skill in RUNNER_HOME/skills,
no name twice, no pinned source, a free ``.archive/`` slot, the hashes, and the new SKILL.md
against the rules and the full content scan. Any problem is one line and exit 2 with nothing
touched. ``--dry-run`` prints the steps and takes no lock, writes no file (the skills tree hashes
the same before and after). A real apply holds the tree lock, checks again, writes a snapshot
(``skills/.curator_backups/``), writes each new SKILL.md, reads it back and checks it loads with the
new content, and only then moves each source to ``skills/.archive/NAME`` (``merged_into`` in the
sidecar; ``runner skills restore NAME`` brings it back). Nothing is deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from runner.clock import iso
from runner.config.strict import Strict
from runner.errors import UsageError
from runner.skills import SkillPaths, SkillStateError
from runner.skills.curator import write_report, write_snapshot
from runner.skills.loader import Invalid, read_skill
from runner.skills.manage import write_atomic
from runner.skills.rules import check_skill_md, parse_frontmatter
from runner.skills.scan import scan_skill_text
from runner.skills.shared import skill_paths
from runner.skills.usage import UsageFile, UsageRecord
from runner.store import dumps

if TYPE_CHECKING:
    from runner.settings import Settings

VERSION = 1


class Merge(Strict):
    into: str
    sources: list[str] = Field(min_length=1)
    reason: str = ""
    content: str
    hashes: dict[str, str]


class MergePlan(Strict):
    version: Literal[1]
    created_at: str | None = None
    model: str | None = None
    merges: list[Merge]


class PlanError(UsageError):
    """A merge plan that cannot be applied as it is (exit 2, one line, nothing changed)."""

    reason = "plan"


@dataclass(frozen=True)
class Applied:
    plan_path: Path
    dry_run: bool
    steps: tuple[str, ...]
    snapshot: Path | None = None
    report: Path | None = None


def content_hash(folder: Path) -> str:
    """sha256 over every file of a skill folder (relative path and bytes; hidden files aside)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(f for f in filenames if not f.startswith(".")):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            digest.update(rel.encode() + b"\0")
            with open(path, "rb") as fh:
                digest.update(fh.read())
            digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def load_plan(path: Path) -> MergePlan:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan: {exc.strerror}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data: Any = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PlanError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PlanError(f"{path}: not valid JSON: {exc}") from None
    try:
        return MergePlan.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise PlanError(f"{path}: {where}: {err['msg']}") from None


def with_agent_mark(text: str) -> str:
    """The merged SKILL.md with ``created_by: agent`` (added when missing)."""
    meta, _, _ = parse_frontmatter(text)
    if meta.get("created_by") is None:
        return re.sub(r"\A(\ufeff?---[ \t]*\r?\n)", r"\1created_by: agent\n", text, count=1)
    return text


def check_plan(plan: MergePlan, paths: SkillPaths, records: dict[str, UsageRecord]) -> list[str]:
    """Every reason ``plan`` cannot be applied now (empty: it can), each naming its merge."""
    problems: list[str] = []
    seen: set[str] = set()
    if not plan.merges:
        problems.append("merges: the plan has no merges")
    for i, merge in enumerate(plan.merges):
        where = f"merges[{i}] ({merge.into})"
        names = [merge.into, *merge.sources]
        for name in names:
            if name in seen:
                problems.append(f"{where}: skill {name!r} is named more than once in the plan")
            seen.add(name)
            problems.extend(f"{where}: {p}" for p in _check_skill(name, paths, records, merge.hashes))
        for name in merge.sources:
            if records.get(name, UsageRecord()).pinned:
                problems.append(f"{where}: skill {name!r} is pinned by a person; it is not merged away")
            if paths.archived(name).exists():
                problems.append(f"{where}: {paths.archived(name)} already exists; the source cannot be archived")
        meta, _, _ = parse_frontmatter(merge.content)
        if meta.get("created_by") not in (None, "agent"):
            problems.append(f"{where}: the merged SKILL.md must not set created_by (found {meta['created_by']!r})")
            continue
        _, md = check_skill_md(with_agent_mark(merge.content), folder=merge.into, scanner=scan_skill_text)
        problems.extend(f"{where}: merged SKILL.md refused: {p}" for p in md)
    return problems


def _check_skill(name: str, paths: SkillPaths, records: dict[str, UsageRecord], hashes: dict[str, str]) -> list[str]:
    folder = paths.live(name)
    if not (folder / "SKILL.md").is_file():
        return [f"unknown skill {name!r} (not in {paths.root})"]
    if records.get(name, UsageRecord()).created_by != "agent":
        return [f"skill {name!r} is not agent-written; the Curator merges only skills the agent wrote"]
    if name not in hashes:
        return [f"no hash for skill {name!r} in the plan"]
    if content_hash(folder) != hashes[name]:
        return [f"stale plan: skill {name!r} changed since the plan was made (make a new plan)"]
    return []


def steps_of(plan: MergePlan, paths: SkillPaths) -> tuple[str, ...]:
    out: list[str] = []
    for merge in plan.merges:
        out.append(f"rewrite {merge.into}/SKILL.md ({len(merge.content):,} characters): {merge.reason or 'merge'}")
        out.extend(f"archive {src} to {paths.archived(src)} (merged into {merge.into})" for src in merge.sources)
    return tuple(out)


def apply_plan(settings: Settings, plan_path: Path, *, now: datetime, dry_run: bool = False) -> Applied:
    """Check ``plan_path`` and carry it out (``dry_run``: check and describe; no lock, no file)."""
    paths = skill_paths(settings)
    usage = UsageFile(paths)
    plan = load_plan(plan_path)
    _raise_first(plan_path, check_plan(plan, paths, usage.read()))
    if dry_run:
        return Applied(plan_path, True, steps_of(plan, paths))

    with paths.changing_tree(), usage.locked():
        records = usage.read()
        _raise_first(plan_path, check_plan(plan, paths, records))  # again, under the lock
        snapshot = write_snapshot(paths, now)
        for merge in plan.merges:
            _merge_one(merge, paths, records, now)
        usage.write(records)
    steps = steps_of(plan, paths)
    report = _record(settings, plan_path, plan, steps, snapshot, now)
    return Applied(plan_path, False, steps, snapshot, report)


def _raise_first(plan_path: Path, problems: Sequence[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PlanError(f"{plan_path}: {problems[0]}{more}")


def _merge_one(merge: Merge, paths: SkillPaths, records: dict[str, UsageRecord], now: datetime) -> None:
    """Write the new SKILL.md, check it loads as written, then archive the sources."""

    text = with_agent_mark(merge.content)
    md = paths.live(merge.into) / "SKILL.md"
    write_atomic(md, text.encode("utf-8"), mode=os.stat(md).st_mode & 0o777)
    loaded = read_skill(paths.live(merge.into), "home", scanner=scan_skill_text)
    if isinstance(loaded, Invalid) or loaded.text != text:
        why = "; ".join(loaded.problems) if isinstance(loaded, Invalid) else "it reads back different"
        raise SkillStateError(
            f"merged skill {merge.into!r} did not verify ({why}); nothing was archived; the snapshot has the old state"
        )
    stamp = iso(now)
    into = records.get(merge.into, UsageRecord())
    records[merge.into] = replace(into, patch_count=into.patch_count + 1, last_patched_at=stamp)
    paths.archive.mkdir(parents=True, exist_ok=True)
    for src in merge.sources:
        os.rename(paths.live(src), paths.archived(src))
        rec = records.get(src, UsageRecord())
        records[src] = replace(rec, state="archived", archived_at=stamp, merged_into=merge.into)


def _record(
    settings: Settings, plan_path: Path, plan: MergePlan, steps: Sequence[str], snapshot: Path, now: datetime
) -> Path:
    """The apply's report (logs/curator/) and its curator_runs row (trigger ``apply``)."""

    lines = [f"# Curator apply {now.strftime('%Y-%m-%d %H:%M:%S %Z')}", "", f"- plan: {plan_path}"]
    lines += [f"- snapshot before changes: {snapshot}", "", "## Steps"] + [f"- {s}" for s in steps]
    report = write_report(settings.home, now, "\n".join(lines) + "\n")
    changes = [
        {"name": src, "from": "active", "to": "archived", "reason": f"merged into {m.into}"}
        for m in plan.merges
        for src in m.sources
    ]
    run_id = f"cur-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    with settings.store.transaction() as conn:
        conn.execute(
            "INSERT INTO curator_runs (id, trigger, status, started_at, ended_at, examined, stale, archived, "
            "reactivated, changes, report_path, snapshot_path) VALUES (?, 'apply', 'succeeded', ?, ?, ?, 0, ?, 0, ?, ?, ?)",
            (
                run_id,
                iso(now),
                iso(now),
                sum(1 + len(m.sources) for m in plan.merges),
                len(changes),
                dumps(changes),
                str(report),
                str(snapshot),
            ),
        )
    return report
