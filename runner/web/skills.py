"""The Skills page's rows and buttons: the same catalog, usage file and ``SkillManager`` that
``runner skills list | pin | unpin | archive | restore`` use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.skills import SkillError
from runner.skills.loader import load_catalog, sources_for
from runner.skills.manage import SkillManager
from runner.skills.shared import skill_paths
from runner.skills.usage import UsageFile, UsageRecord

if TYPE_CHECKING:
    from runner.web.source import Source


@dataclass(frozen=True)
class SkillRow:
    name: str
    source: str
    state: str  # active | stale | archived | invalid | unavailable
    pinned: bool
    uses: int
    views: int
    last_used: str | None
    runs_succeeded: int
    runs_failed: int
    problems: tuple[str, ...]
    description: str

    @property
    def home(self) -> bool:
        return self.source == "home"


def rows(source: Source) -> list[SkillRow]:
    paths = skill_paths(source.settings)
    catalog = load_catalog(sources_for(source.settings))
    usage = UsageFile(paths).read()
    out: list[SkillRow] = []

    def add(name: str, src: str, state: str, problems: tuple[str, ...] = (), description: str = "") -> None:
        rec = usage.get(name, UsageRecord())
        if src == "home" and state == "active" and rec.state == "stale":
            state = "stale"
        out.append(
            SkillRow(
                name,
                src,
                state,
                rec.pinned,
                rec.use_count,
                rec.view_count,
                rec.last_touched(),
                rec.runs_succeeded,
                rec.runs_failed,
                problems,
                description,
            )
        )

    for skill in catalog.skills.values():
        add(skill.name, skill.source, "active", description=skill.description or "")
    for skill in catalog.unavailable:
        add(skill.name, skill.source, "unavailable", (f"only for {', '.join(skill.platforms)}",))
    for bad in catalog.invalid:
        add(bad.name, bad.source, "invalid", tuple(bad.problems))
    if paths.archive.is_dir():
        for folder in sorted(p for p in paths.archive.iterdir() if p.is_dir()):
            add(folder.name, "home", "archived")
    return sorted(out, key=lambda r: (r.name, r.source))


def act(source: Source, name: str, kind: str) -> str:
    paths = skill_paths(source.settings)
    if kind in ("archive", "restore"):
        manager = SkillManager(paths, readonly=sources_for(source.settings), actor="person")
        change = manager.archive(name) if kind == "archive" else manager.restore(name)
        return str(change.message)
    matches = [r for r in rows(source) if r.name == name]
    if not matches:
        raise SkillError(f"no skill {name!r}")
    if not matches[0].home:
        raise SkillError(f"skill {name!r} is a {matches[0].source} skill: read-only and never curated")
    if matches[0].state == "archived" or not paths.live(name).is_dir():
        raise SkillError(f"skill {name!r} is archived; restore it first")
    UsageFile(paths).set_pinned(name, kind == "pin")
    return f"{kind}ned {name}"
