"""``runner skills import PATH``: a Hermes skills folder copied into ``RUNNER_HOME/skills``.

PATH is a Hermes skills folder (``~/.hermes/skills``: flat ``NAME/SKILL.md`` or nested category
folders ``devops/NAME/SKILL.md``, at any depth) or one skill folder. Hidden folders (``.archive``,
``.hub``, backups) are not imported. Each skill is checked on its own: the SKILL.md rules, the full
content scan of SKILL.md and of every text supporting file, and a name not yet taken (by a skill in
RUNNER_HOME/skills, an archived one, a bundled or extra-folder skill, or an earlier folder of the
import). A refused skill gets one line with the reason; the others are still imported.

Skills are copied flat (``RUNNER_HOME/skills/NAME``, where ``skill_manage`` and the Curator find
them); a category that came only from the folder is written into the frontmatter as ``category:``
so it stays. Hermes's provenance decides who wrote a skill: one listed in ``.bundled_manifest`` or
``.hub/lock.json`` came from Hermes or its hub; any other is agent-created. When the folder has
Hermes's usage sidecar (``.usage.json``: a JSON object, skill name -> ``use_count``,
``view_count``, ``patch_count``, ``last_used_at``, ``last_viewed_at``, ``last_patched_at``,
``created_at``, ``state``, ``pinned``), agent-created skills keep that usage and become
``created_by: agent`` in runner's sidecar, so the Curator ages them as before; without the
sidecar every imported skill counts as written by a person (never aged).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.clock import iso, parse_iso, utcnow
from runner.errors import UsageError
from runner.skills import SkillPaths
from runner.skills.loader import Invalid, Source, read_skill
from runner.skills.manage import SkillManager
from runner.skills.rules import Skill, check_skill_md
from runner.skills.scan import kind_for, scan_skill_text
from runner.skills.usage import UsageFile, UsageRecord

_COUNTS = ("use_count", "view_count", "patch_count")
_STAMPS = ("last_used_at", "last_viewed_at", "last_patched_at", "created_at")


@dataclass(frozen=True)
class Found:
    folder: Path
    category: str | None  # from the folders between PATH and the skill


@dataclass(frozen=True)
class Planned:
    name: str
    folder: Path
    text: str  # the SKILL.md to write (a folder category added when needed)
    agent_created: bool
    usage: UsageRecord | None  # the mapped Hermes usage (agent-created skills with a sidecar)


@dataclass(frozen=True)
class Refused:
    folder: Path
    name: str
    reason: str

    def line(self) -> str:
        return f"refused {self.name} ({self.folder}): {self.reason}"


@dataclass(frozen=True)
class ImportResult:
    imported: tuple[Planned, ...]
    refused: tuple[Refused, ...]
    dry_run: bool

    @property
    def exit_code(self) -> int:
        """0 every skill imported; 1 some refused (the others imported)."""
        return 1 if self.refused else 0


def find_skills(root: Path) -> list[Found]:
    """Every folder with a SKILL.md under ``root`` (or ``root`` itself), hidden folders skipped."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a folder (give a Hermes skills folder, e.g. ~/.hermes/skills)")
    if (root / "SKILL.md").is_file():
        return [Found(root, None)]
    found: list[Found] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "node_modules")
        if "SKILL.md" in filenames and Path(dirpath) != root:
            rel = Path(dirpath).relative_to(root).parts
            found.append(Found(Path(dirpath), "/".join(rel[:-1]) or None))
            dirnames[:] = []  # a skill's own folders are its supporting files
    if not found:
        raise UsageError(f"{root}: no SKILL.md found in this folder or below it")
    return found


def hermes_provenance(root: Path) -> set[str]:
    """Names Hermes did not write itself: listed in ``.bundled_manifest`` (``name:hash`` lines) or ``.hub/lock.json``."""
    names: set[str] = set()
    manifest = root / ".bundled_manifest"
    if manifest.is_file():
        for line in manifest.read_text(encoding="utf-8", errors="replace").splitlines():
            name = line.split(":", 1)[0].strip()
            if name:
                names.add(name)
    lock = root / ".hub" / "lock.json"
    if lock.is_file():
        try:
            data = json.loads(lock.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise UsageError(f"{lock}: not valid JSON ({exc})") from None
        installed = data.get("installed") if isinstance(data, dict) else None
        if isinstance(installed, dict):
            names.update(str(k) for k in installed)
    return names


def hermes_usage(root: Path) -> dict[str, dict[str, Any]] | None:
    """Hermes's ``.usage.json`` (name -> record), or None when the folder has none."""
    path = root / ".usage.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"{path}: Hermes's usage sidecar is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: Hermes's usage sidecar must be a JSON object (skill name -> record)")
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def map_usage(raw: dict[str, Any], now: datetime) -> UsageRecord:
    """A Hermes usage record as runner's (agent-created): counts, times, stale state, pin."""
    counts = {k: int(raw[k]) if isinstance(raw.get(k), int) and raw[k] >= 0 else 0 for k in _COUNTS}
    stamps: dict[str, str | None] = {}
    for key in _STAMPS:
        try:
            stamps[key] = iso(_aware(parse_iso(raw.get(key)))) if isinstance(raw.get(key), str) else None
        except ValueError:
            stamps[key] = None
    state = "stale" if raw.get("state") == "stale" else "active"
    return UsageRecord(
        created_by="agent",
        state=state,
        stale_at=iso(now) if state == "stale" else None,
        pinned=raw.get("pinned") is True,
        use_count=counts["use_count"],
        view_count=counts["view_count"],
        patch_count=counts["patch_count"],
        last_used_at=stamps["last_used_at"],
        last_viewed_at=stamps["last_viewed_at"],
        last_patched_at=stamps["last_patched_at"],
        created_at=stamps["created_at"] or iso(now),
    )


def _aware(dt: datetime | None) -> datetime | None:
    from datetime import UTC

    return dt.replace(tzinfo=UTC) if dt is not None and dt.tzinfo is None else dt


def _with_category(text: str, skill: Skill) -> str:
    """``text`` with ``category:`` added when the category came only from the folder."""
    bare, _ = check_skill_md(text, folder=skill.name, category=None)
    if bare is None or bare.category == skill.category:
        return text
    return re.sub(
        r"\A(\ufeff?---[ \t]*\r?\n)", lambda m: m.group(1) + f"category: {json.dumps(skill.category)}\n", text, count=1
    )


def _support_findings(skill: Skill) -> str:
    for rel in skill.files:
        try:
            content = (skill.path / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary assets are not text the model reads
        findings = scan_skill_text(content, kind=kind_for(rel))
        if findings:
            return f"{rel}: " + "; ".join(f.brief() for f in findings)
    return ""


def plan_import(
    root: Path, paths: SkillPaths, readonly: Sequence[Source], *, now: datetime
) -> tuple[list[Planned], list[Refused]]:
    """What an import of ``root`` would do (reads only)."""
    upstream = hermes_provenance(root)
    usage = hermes_usage(root)
    checker = SkillManager(paths, readonly=readonly, actor="person")
    planned: list[Planned] = []
    refused: list[Refused] = []
    taken: set[str] = set()
    for found in find_skills(root):
        item = read_skill(found.folder, "import", category=found.category, scanner=scan_skill_text)
        if isinstance(item, Invalid):
            refused.append(Refused(found.folder, item.name, "; ".join(item.problems)))
            continue
        why = _support_findings(item) or _name_taken(item.name, paths, checker, taken)
        if why:
            refused.append(Refused(found.folder, item.name, why))
            continue
        taken.add(item.name)
        agent = usage is not None and item.name not in upstream
        record = map_usage(usage.get(item.name, {}), now) if agent and usage is not None else None
        planned.append(Planned(item.name, found.folder, _with_category(item.text, item), agent, record))
    return planned, refused


def _name_taken(name: str, paths: SkillPaths, checker: SkillManager, taken: set[str]) -> str:
    if name in taken:
        return "an earlier folder of this import has the same name"
    if paths.live(name).exists():
        return f"a skill {name!r} already exists in {paths.root}"
    if paths.archived(name).exists():
        return f"an archived skill is called {name!r} ({paths.archived(name)})"
    owner = checker.owner_elsewhere(name)
    if owner is not None:
        return f"the name is taken by a {owner.kind} skill ({owner.root})"
    return ""


def import_skills(
    root: Path, paths: SkillPaths, readonly: Sequence[Source], *, dry_run: bool = False, now: datetime | None = None
) -> ImportResult:
    """Import every acceptable skill under ``root``; ``dry_run``: plan only, nothing written."""
    now = now or utcnow()
    planned, refused = plan_import(root, paths, readonly, now=now)
    if dry_run or not planned:
        return ImportResult(tuple(planned), tuple(refused), dry_run)
    paths.root.mkdir(parents=True, exist_ok=True)
    done: list[Planned] = []
    usage = UsageFile(paths)
    with paths.changing_tree():
        for item in planned:
            if paths.live(item.name).exists():  # written since the plan was made
                refused.append(Refused(item.folder, item.name, f"a skill {item.name!r} appeared meanwhile"))
                continue
            _copy(item, paths)
            done.append(item)
        with usage.edit() as data:
            for item in done:
                rec = item.usage or replace(
                    data.get(item.name, UsageRecord()), created_by="person", created_at=iso(now)
                )
                data[item.name] = rec
    return ImportResult(tuple(done), tuple(refused), False)


def _copy(item: Planned, paths: SkillPaths) -> None:
    """Copy the folder (SKILL.md and its supporting folders, no hidden files) in one rename."""
    staging = Path(tempfile.mkdtemp(prefix=f".new-{item.name}-", dir=paths.root))
    try:
        for entry in sorted(os.listdir(item.folder)):
            src = item.folder / entry
            if entry.startswith(".") or entry == "SKILL.md" or not src.is_dir():
                continue
            shutil.copytree(src, staging / entry, symlinks=False, ignore=shutil.ignore_patterns(".*"))
        (staging / "SKILL.md").write_text(item.text, encoding="utf-8")
        os.chmod(staging, 0o755)
        os.rename(staging, paths.live(item.name))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
