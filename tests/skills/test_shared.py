"""The home skills shared through a PostgreSQL store: two "machines" (two RUNNER_HOMEs, nothing
shared but the database) see each other's agent-written skills, archives and usage; a person's
local edit is kept aside, never lost; concurrent usage updates from several processes add up; with
SQLite nothing is mirrored."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from runner.settings import Settings
from runner.skills.loader import load_catalog, sources_for
from runner.skills.manage import SkillManager
from runner.skills.shared import MANIFEST, skill_paths
from runner.skills.usage import UsageFile
from runner.store import Store
from runner.store.dialect import PgURL

BODY = "---\nname: {name}\ndescription: {what}\n---\n\n# {name}\n\n1. {what}\n"


def machine(tmp_path: Path, name: str, url: str | None) -> Settings:
    home = tmp_path / name
    home.mkdir()
    if url:
        (home / "config.yaml").write_text(f"database: {url}\n")
    (tmp_path / f"{name}-proj").mkdir()
    return Settings(home=home, jobs_path=tmp_path / f"{name}-proj" / "jobs.yaml", config_path=home / "config.yaml")


def agent(settings: Settings) -> SkillManager:
    return SkillManager(skill_paths(settings), readonly=sources_for(settings), actor="agent")


def skill_md(name: str, what: str) -> str:
    return BODY.format(name=name, what=what)


def test_a_skill_written_on_one_machine_is_seen_on_another(tmp_path, pg_url):
    a, b = machine(tmp_path, "a", pg_url), machine(tmp_path, "b", pg_url)
    agent(a).create("deploy-check", skill_md("deploy-check", "check the deploy"))
    agent(a).write_file("deploy-check", "references/hosts.md", "web-1\nweb-2\n")
    seen = load_catalog([s for s in sources_for(b) if s.kind == "home"])
    assert seen.skills == {}  # b has not synced yet: nothing was pulled by load_catalog itself
    paths_b = skill_paths(b)  # a run, `skills list` or the dashboard on b
    skill = load_catalog(sources_for(b)).get("deploy-check")
    assert skill is not None and skill.source == "home"
    assert (paths_b.live("deploy-check") / "references" / "hosts.md").read_text() == "web-1\nweb-2\n"
    assert UsageFile(paths_b).get("deploy-check").created_by == "agent"
    # b patches it; a sees the patch, and the store has one copy of each file
    agent(b).patch("deploy-check", "1. check the deploy", "1. check the deploy and the hosts")
    assert "and the hosts" in (skill_paths(a).live("deploy-check") / "SKILL.md").read_text()
    store = Store.open(PgURL(pg_url))
    paths = sorted(r["path"] for r in store.query("SELECT path FROM skill_files"))
    store.close()
    assert paths == [".usage.json", "deploy-check/SKILL.md", "deploy-check/references/hosts.md"]


def test_archive_and_usage_travel_and_counts_add_up(tmp_path, pg_url):
    a, b = machine(tmp_path, "a", pg_url), machine(tmp_path, "b", pg_url)
    agent(a).create("one", skill_md("one", "do one"))
    UsageFile(skill_paths(a)).bump(["one"], "view")
    UsageFile(skill_paths(b)).bump(["one"], "view")
    UsageFile(skill_paths(b)).record_outcome(["one"], "failed")
    rec = UsageFile(skill_paths(a)).get("one")
    assert (rec.view_count, rec.runs_failed, rec.fail_streak) == (2, 1, 1)
    SkillManager(skill_paths(b), readonly=sources_for(b), actor="person").archive("one")
    paths_a = skill_paths(a)
    assert not paths_a.live("one").exists() and (paths_a.archived("one") / "SKILL.md").is_file()
    assert UsageFile(paths_a).get("one").state == "archived"


def test_first_machine_seeds_the_store_and_local_edits_are_kept_aside(tmp_path, pg_url):
    a, b = machine(tmp_path, "a", pg_url), machine(tmp_path, "b", pg_url)
    old = a.home / "skills" / "legacy"  # a skill this machine had before the store was shared
    old.mkdir(parents=True)
    (old / "SKILL.md").write_text(skill_md("legacy", "the old way"))
    agent(a).create("fresh", skill_md("fresh", "the new way"))  # the first change publishes both
    paths_b = skill_paths(b)
    assert (paths_b.live("legacy") / "SKILL.md").is_file() and (paths_b.live("fresh") / "SKILL.md").is_file()
    # a person edits b's copy by hand; then a changes the same file: b keeps its edit aside
    (paths_b.live("fresh") / "SKILL.md").write_text(skill_md("fresh", "edited by hand on b"))
    agent(a).patch("fresh", "1. the new way", "1. the newer way")
    paths_b = skill_paths(b)
    assert "the newer way" in (paths_b.live("fresh") / "SKILL.md").read_text()
    [kept] = list((b.home / "skills" / ".curator_backups").glob("sync-*/fresh/SKILL.md"))
    assert "edited by hand on b" in kept.read_text()
    assert (b.home / "skills" / MANIFEST).is_file()


def _bump_many(home: str, jobs: str, n: int) -> None:
    settings = Settings(home=Path(home), jobs_path=Path(jobs), config_path=Path(home) / "config.yaml")
    for _ in range(n):
        UsageFile(skill_paths(settings)).bump(["busy"], "use")


def test_usage_from_several_machines_at_once_loses_no_update(tmp_path, pg_url):
    homes = [machine(tmp_path, f"m{i}", pg_url) for i in range(4)]
    agent(homes[0]).create("busy", skill_md("busy", "be busy"))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_bump_many, args=(str(s.home), str(s.jobs_path), 15)) for s in homes]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert UsageFile(skill_paths(homes[1])).get("busy").use_count == 60


def test_sqlite_store_mirrors_nothing(tmp_path):
    a = machine(tmp_path, "a", None)
    paths = skill_paths(a)
    assert paths.mirror is None
    agent(a).create("local", skill_md("local", "stay here"))
    assert not (paths.root / MANIFEST).exists()
    store = Store.open(a.home / "runner.db")
    assert store.one("SELECT COUNT(*) AS n FROM skill_files")["n"] == 0  # type: ignore[index]
    store.close()
