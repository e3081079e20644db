"""``runner skills list | show | pin | unpin | archive | restore``: the skill library and its usage."""

from __future__ import annotations

from typing import Any

import click

from runner.cli._util import ago, echo_json, settings, table


@click.group("skills")
def skills_group() -> None:
    """Skills: SKILL.md procedures the agent reads and writes."""


def _rows() -> list[dict[str, Any]]:
    """One row per skill found anywhere (valid, invalid, other platform, archived)."""
    from runner.skills import SkillPaths
    from runner.skills.loader import load_catalog, sources_for
    from runner.skills.scan import scan_skill_text
    from runner.skills.usage import UsageFile, UsageRecord

    s = settings()
    paths = SkillPaths.under(s.home)
    catalog = load_catalog(sources_for(s), scanner=scan_skill_text)  # the full check: a listing can take the time
    usage = UsageFile(paths).read()
    rows: list[dict[str, Any]] = []

    def row(name: str, source: str, path: Any, problems: list[str], created_by: str | None, **extra: Any) -> None:
        rec = usage.get(name, UsageRecord())  # keyed by name: bundled skills count views too
        archived = extra.pop("archived", False)
        if source == "home":
            state = "archived" if archived else ("stale" if rec.state == "stale" else "active")
            provenance = rec.created_by or created_by or "person"
        else:
            state, provenance = "active", source
        rows.append(
            {
                "name": name,
                "source": source,
                "state": state,
                "provenance": provenance,
                "pinned": rec.pinned,
                "uses": rec.use_count,
                "views": rec.view_count,
                "patches": rec.patch_count,
                "last_used": rec.last_touched(),
                "runs_succeeded": rec.runs_succeeded,
                "runs_failed": rec.runs_failed,
                "created_at": rec.created_at,
                "archived_at": rec.archived_at if state == "archived" else None,
                "path": str(path),
                "problems": problems,
                **extra,
            }
        )

    for skill in catalog.skills.values():
        row(
            skill.name,
            skill.source,
            skill.path,
            [],
            skill.created_by,
            category=skill.category,
            description=skill.description,
        )
    for skill in catalog.unavailable:
        row(skill.name, skill.source, skill.path, [f"only for {', '.join(skill.platforms)}"], skill.created_by)
    for bad in catalog.invalid:
        row(bad.name, bad.source, bad.path, list(bad.problems), None)
    if paths.archive.is_dir():
        for folder in sorted(p for p in paths.archive.iterdir() if p.is_dir()):
            row(folder.name, "home", folder, [], None, archived=True)
    return sorted(rows, key=lambda r: (r["name"], r["source"]))


@skills_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def skills_list(as_json: bool) -> None:
    """Every skill: source, state, provenance, uses, last used, pinned, problems."""
    rows = _rows()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no skills (bundled: skills/ beside jobs.yaml; yours: RUNNER_HOME/skills)")
        return
    table(
        [
            [
                r["name"],
                r["source"],
                r["state"] if not r["problems"] else "invalid",
                r["provenance"],
                r["uses"],
                r["views"],
                ago(r["last_used"]),
                "yes" if r["pinned"] else "",
                "; ".join(r["problems"]),
            ]
            for r in rows
        ],
        ["NAME", "SOURCE", "STATE", "BY", "USES", "VIEWS", "LAST USED", "PINNED", "PROBLEMS"],
    )


def _find(name: str) -> dict[str, Any]:
    from runner.errors import UsageError

    matches = [r for r in _rows() if r["name"] == name]
    if not matches:
        raise UsageError(f"no skill {name!r} (see: runner skills list)")
    return matches[0]


@skills_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def skills_show(name: str, as_json: bool) -> None:
    """Show a skill: where it is, its usage, its problems and its SKILL.md."""
    from pathlib import Path

    r = _find(name)
    md = Path(r["path"]) / "SKILL.md"
    text = md.read_text(encoding="utf-8", errors="replace") if md.is_file() else ""
    if as_json:
        echo_json({**r, "skill_md": text})
        return
    for key in ("name", "source", "state", "provenance", "pinned", "path", "category", "description", "created_at"):
        if r.get(key) not in (None, ""):
            click.echo(f"{key:<12} {r[key]}")
    click.echo(
        f"{'usage':<12} {r['uses']} uses, {r['views']} views, {r['patches']} patches; last used {ago(r['last_used']) or 'never'}"
    )
    click.echo(f"{'runs':<12} {r['runs_succeeded']} succeeded, {r['runs_failed']} failed (runs that viewed or used it)")
    for problem in r["problems"]:
        click.echo(f"{'problem':<12} {problem}")
    if text:
        click.echo("")
        click.echo(text.rstrip())


def _manager() -> Any:
    from runner.skills import SkillPaths
    from runner.skills.loader import sources_for
    from runner.skills.manage import SkillManager

    s = settings()
    return SkillManager(SkillPaths.under(s.home), readonly=sources_for(s), actor="person")


def _home_skill(name: str) -> None:
    from runner.skills import SkillError, SkillPaths

    r = _find(name)
    if r["source"] != "home":
        raise SkillError(f"skill {name!r} is a {r['source']} skill: read-only and never curated")
    if r["state"] == "archived" or not (SkillPaths.under(settings().home).live(name)).is_dir():
        raise SkillError(f"skill {name!r} is archived; restore it first: runner skills restore {name}")


@skills_group.command("pin")
@click.argument("name")
def skills_pin(name: str) -> None:
    """Pin a skill in RUNNER_HOME/skills: the Curator never makes it stale or archives it."""
    from runner.skills import SkillPaths
    from runner.skills.usage import UsageFile

    _home_skill(name)
    UsageFile(SkillPaths.under(settings().home)).set_pinned(name, True)
    click.echo(f"pinned {name}")


@skills_group.command("unpin")
@click.argument("name")
def skills_unpin(name: str) -> None:
    """Unpin a skill: the Curator may age it again (agent-created skills only)."""
    from runner.skills import SkillPaths
    from runner.skills.usage import UsageFile

    _home_skill(name)
    UsageFile(SkillPaths.under(settings().home)).set_pinned(name, False)
    click.echo(f"unpinned {name}")


@skills_group.command("archive")
@click.argument("name")
def skills_archive(name: str) -> None:
    """Move a skill from RUNNER_HOME/skills to skills/.archive/NAME (nothing is deleted)."""
    change = _manager().archive(name)
    click.echo(change.message)


@skills_group.command("restore")
@click.argument("name")
def skills_restore(name: str) -> None:
    """Move an archived skill back into RUNNER_HOME/skills, active again."""
    change = _manager().restore(name)
    click.echo(change.message)


COMMANDS = [skills_group]
