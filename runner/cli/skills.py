"""``runner skills list | show | pin | unpin | archive | restore | import``: the skill library and its usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from runner.cli._util import ago, echo_json, settings, table


@click.group("skills")
def skills_group() -> None:
    """Skills: SKILL.md procedures the agent reads and writes."""


def _rows() -> list[dict[str, Any]]:
    """One row per skill found anywhere (valid, invalid, other platform, archived)."""
    from runner.skills.loader import load_catalog, sources_for
    from runner.skills.scan import scan_skill_text
    from runner.skills.shared import skill_paths
    from runner.skills.usage import UsageFile, UsageRecord

    s = settings()
    paths = skill_paths(s)
    catalog = load_catalog(sources_for(s), scanner=scan_skill_text)  # the full check: a listing can take the time
    usage = UsageFile(paths).read()
    suspect_after = s.config.curator.suspect_after_failures
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
                "fail_streak": rec.fail_streak,
                "suspect": state != "archived" and rec.suspect(suspect_after),
                "merged_into": rec.merged_into,
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
            tags=list(skill.tags),
            platforms=list(skill.platforms),
        )
    for skill in catalog.unavailable:
        row(
            skill.name,
            skill.source,
            skill.path,
            [f"only for {', '.join(skill.platforms)}"],
            skill.created_by,
            category=skill.category,
            tags=list(skill.tags),
            platforms=list(skill.platforms),
        )
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
                _state(r),
                r["provenance"],
                r.get("category") or "",
                ", ".join(r.get("tags") or ()),
                r["uses"],
                r["views"],
                ago(r["last_used"]),
                "yes" if r["pinned"] else "",
                "; ".join(r["problems"]),
            ]
            for r in rows
        ],
        ["NAME", "SOURCE", "STATE", "BY", "CATEGORY", "TAGS", "USES", "VIEWS", "LAST USED", "PINNED", "PROBLEMS"],
    )


def _state(r: dict[str, Any]) -> str:
    """The STATE column: invalid, or the lifecycle state with ``suspect`` after it when failing."""
    if r["problems"] and r["state"] != "archived":
        return "invalid"
    return f"{r['state']}, suspect" if r["suspect"] else r["state"]


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
    r = _find(name)
    md = Path(r["path"]) / "SKILL.md"
    text = md.read_text(encoding="utf-8", errors="replace") if md.is_file() else ""
    if as_json:
        echo_json({**r, "skill_md": text})
        return
    for key in ("name", "source", "state", "provenance", "pinned", "path", "category", "description", "created_at"):
        if r.get(key) not in (None, ""):
            click.echo(f"{key:<12} {r[key]}")
    for key in ("tags", "platforms"):
        if r.get(key):
            click.echo(f"{key:<12} {', '.join(r[key])}")
    if r["suspect"]:
        click.echo(f"{'suspect':<12} in {r['fail_streak']} failed runs in a row (a success clears it)")
    if r["merged_into"]:
        click.echo(f"{'merged into':<12} {r['merged_into']}")
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
    from runner.skills.loader import sources_for
    from runner.skills.manage import SkillManager
    from runner.skills.shared import skill_paths

    s = settings()
    return SkillManager(skill_paths(s), readonly=sources_for(s), actor="person")


def _home_skill(name: str) -> None:
    from runner.skills import SkillError
    from runner.skills.shared import skill_paths

    r = _find(name)
    if r["source"] != "home":
        raise SkillError(f"skill {name!r} is a {r['source']} skill: read-only and never curated")
    if r["state"] == "archived" or not (skill_paths(settings()).live(name)).is_dir():
        raise SkillError(f"skill {name!r} is archived; restore it first: runner skills restore {name}")


@skills_group.command("pin")
@click.argument("name")
def skills_pin(name: str) -> None:
    """Pin a skill in RUNNER_HOME/skills: the Curator never makes it stale or archives it."""
    from runner.skills.shared import skill_paths
    from runner.skills.usage import UsageFile

    _home_skill(name)
    UsageFile(skill_paths(settings())).set_pinned(name, True)
    click.echo(f"pinned {name}")


@skills_group.command("unpin")
@click.argument("name")
def skills_unpin(name: str) -> None:
    """Unpin a skill: the Curator may age it again (agent-created skills only)."""
    from runner.skills.shared import skill_paths
    from runner.skills.usage import UsageFile

    _home_skill(name)
    UsageFile(skill_paths(settings())).set_pinned(name, False)
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


@skills_group.command("import")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="say what would be imported or refused; write nothing")
@click.option("--json", "as_json", is_flag=True)
def skills_import(path: Path, dry_run: bool, as_json: bool) -> None:
    """Copy a Hermes skills folder (flat or category folders) into RUNNER_HOME/skills.

    Every skill passes the rules and the content scan; a refused one gets one line and the others
    are still imported (exit 1 when any was refused). Agent-created skills keep their usage when
    the folder has Hermes's .usage.json."""
    import sys

    from runner.skills.hermes import import_skills
    from runner.skills.loader import sources_for
    from runner.skills.shared import skill_paths

    s = settings()
    result = import_skills(path.expanduser(), skill_paths(s), sources_for(s), dry_run=dry_run)
    verb = "would import" if dry_run else "imported"
    if as_json:
        echo_json(
            {
                "dry_run": dry_run,
                "imported": [
                    {"name": p.name, "from": str(p.folder), "created_by": "agent" if p.agent_created else "person"}
                    for p in result.imported
                ],
                "refused": [{"name": r.name, "from": str(r.folder), "reason": r.reason} for r in result.refused],
            }
        )
    else:
        for item in result.imported:
            by = "agent-created, usage kept" if item.usage is not None else "as a person's skill"
            click.echo(f"{verb} {item.name} ({by})")
        for refused in result.refused:
            click.echo(refused.line(), err=True)
        click.echo(f"{verb} {len(result.imported)} skill(s); refused {len(result.refused)}")
    sys.exit(result.exit_code)


COMMANDS = [skills_group]
