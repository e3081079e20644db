"""The Curator with injected time: each transition at its day boundary, what it must never touch,
reactivation, snapshots and reports, --dry-run changing nothing, the idle trigger, the commands."""

import json
import sqlite3
import tarfile
from datetime import timedelta

import pytest

from runner.clock import utcnow
from runner.skills import SkillPaths
from runner.skills.curator import run_pass, write_snapshot
from runner.skills.idle import CuratorTicker
from runner.skills.manage import SkillManager
from runner.skills.usage import UsageFile
from runner.store import ledger
from tests.skillkit import T0, settings_for, skill_md, tree_hash, write_skill

DAY = timedelta(days=1)
SEC = timedelta(seconds=1)
JOBS = "jobs:\n  digest:\n    prompt: hi\n    skills: [job-skill]\n  other:\n    prompt: hi\n    enabled: false\n"


def agent_skill(home, name, created, files=None):
    paths = SkillPaths.under(home)
    SkillManager(paths, actor="agent", clock=lambda: created).create(name, skill_md(name, f"The {name} procedure."))
    for rel, text in (files or {}).items():
        SkillManager(paths, actor="agent", clock=lambda: created).write_file(name, rel, text)
    return paths.live(name)


def state(project, name):
    return UsageFile(SkillPaths.under(project.home)).get(name)


def curator_rows(project):
    db = project.db()
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute("SELECT * FROM curator_runs ORDER BY started_at, id")]


@pytest.fixture
def jobs(project):
    project.write_jobs(JOBS)
    return project


def test_each_transition_at_its_day_boundary(jobs):
    project = jobs
    agent_skill(project.home, "aging", T0)
    s = settings_for(project)
    assert run_pass(s, now=T0 + 30 * DAY).plan.transitions == ()
    assert state(project, "aging").state == "active"
    result = run_pass(s, now=T0 + 30 * DAY + SEC)
    [t] = result.plan.transitions
    assert (t.name, t.from_state, t.to_state) == ("aging", "active", "stale")
    assert "no activity for 30.0 days" in t.reason
    assert state(project, "aging").stale_at == "2026-01-31T12:00:01.000+00:00"
    assert run_pass(s, now=T0 + 90 * DAY).plan.transitions == ()
    assert (SkillPaths.under(project.home).live("aging") / "SKILL.md").exists()
    result = run_pass(s, now=T0 + 90 * DAY + SEC)
    [t] = result.plan.transitions
    assert (t.from_state, t.to_state) == ("stale", "archived")
    paths = SkillPaths.under(project.home)
    assert not paths.live("aging").exists() and (paths.archived("aging") / "SKILL.md").exists()
    rec = state(project, "aging")
    assert rec.state == "archived" and rec.archived_at.startswith("2026-04-01")
    assert run_pass(s, now=T0 + 400 * DAY).plan.examined == 0  # archived skills stay archived; nothing deleted
    assert paths.archived("aging").exists()
    rows = curator_rows(project)
    assert [(r["stale"], r["archived"], r["status"]) for r in rows] == [
        (0, 0, "succeeded"),
        (1, 0, "succeeded"),
        (0, 0, "succeeded"),
        (0, 1, "succeeded"),
        (0, 0, "succeeded"),
    ]
    assert json.loads(rows[3]["changes"])[0]["to"] == "archived"


def test_an_active_skill_can_go_straight_to_archive(jobs):
    agent_skill(jobs.home, "old", T0)
    [t] = run_pass(settings_for(jobs), now=T0 + 91 * DAY).plan.transitions
    assert (t.from_state, t.to_state) == ("active", "archived")


def test_pinned_job_referenced_bundled_extra_and_person_skills_are_untouched(jobs):
    project = jobs
    home_skills = project.home / "skills"
    agent_skill(project.home, "pinned-one", T0)
    UsageFile(SkillPaths(home_skills)).set_pinned("pinned-one", True, now=T0)
    agent_skill(project.home, "job-skill", T0)
    write_skill(home_skills, "by-hand")
    write_skill(project.root / "skills", "bundled-one")
    extra = project.root.parent / "library"
    write_skill(extra, "extra-one")
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text(f"skills:\n  dirs: [{extra}]\n")
    UsageFile(SkillPaths(home_skills)).bump(["bundled-one", "extra-one", "by-hand"], "view", now=T0)
    hashes = [tree_hash(p) for p in (home_skills / "pinned-one", home_skills / "job-skill", home_skills / "by-hand")]
    outside = [tree_hash(project.root / "skills"), tree_hash(extra)]
    result = run_pass(settings_for(project), now=T0 + 1000 * DAY)
    assert result.plan.transitions == ()
    assert {(k.name, k.why) for k in result.plan.kept} == {
        ("pinned-one", "pinned"),
        ("job-skill", "used by job digest"),
    }
    assert [
        tree_hash(p) for p in (home_skills / "pinned-one", home_skills / "job-skill", home_skills / "by-hand")
    ] == hashes
    assert [tree_hash(project.root / "skills"), tree_hash(extra)] == outside
    assert {state(project, n).state for n in ("pinned-one", "job-skill", "by-hand", "bundled-one")} == {"active"}
    assert result.snapshot_path is None  # nothing changed, so nothing to snapshot


def test_reactivation_by_use_and_by_the_curator(jobs):
    project = jobs
    agent_skill(project.home, "comeback", T0)
    s = settings_for(project)
    run_pass(s, now=T0 + 31 * DAY)
    assert state(project, "comeback").state == "stale"
    UsageFile(SkillPaths.under(project.home)).bump(["comeback"], "view", now=T0 + 40 * DAY)
    rec = state(project, "comeback")
    assert (rec.state, rec.reactivated_at) == ("active", "2026-02-10T12:00:00.000+00:00")
    assert run_pass(s, now=T0 + 69 * DAY).plan.transitions == ()
    [t] = run_pass(s, now=T0 + 70 * DAY + SEC).plan.transitions
    assert t.to_state == "stale"
    (project.home / "config.yaml").write_text("curator: {stale_after_days: 60}\n")
    [t] = run_pass(settings_for(project), now=T0 + 71 * DAY).plan.transitions
    assert (t.from_state, t.to_state) == ("stale", "active") and "active again" in t.reason
    assert state(project, "comeback").state == "active"


def test_snapshot_before_changes_newest_five_kept_and_report(jobs):
    project = jobs
    s = settings_for(project)
    paths = SkillPaths.under(project.home)
    results = []
    for i in range(7):
        agent_skill(project.home, f"s{i}", T0, files={"references/notes.md": f"note {i}\n"})
        results.append(run_pass(s, now=T0 + 40 * DAY + i * DAY))
        assert [t.name for t in results[-1].plan.transitions] == [f"s{i}"]
    snaps = sorted(p.name for p in paths.backups.glob("*.tar.gz"))
    assert len(snaps) == 5 and results[-1].snapshot_path.name in snaps
    assert results[0].snapshot_path.name not in snaps
    with tarfile.open(results[-1].snapshot_path) as tar:
        names = set(tar.getnames())
        sidecar = json.load(tar.extractfile(".usage.json"))
    assert {"s6/SKILL.md", "s6/references/notes.md", "s0/SKILL.md"} <= names
    assert not any(n.startswith((".curator_backups", ".archive", ".tree.lock")) for n in names)
    assert sidecar["skills"]["s6"].get("state", "active") == "active"  # taken before the change
    report = results[-1].report_path.read_text()
    assert results[-1].report_path.parent == project.home / "logs" / "curator"
    assert "## Now stale: 1\n- `s6`: no activity for 46.0 days (since 2026-01-01T12:00:00.000+00:00)" in report
    assert f"snapshot before changes: {results[-1].snapshot_path}" in report
    row = curator_rows(project)[-1]
    assert (row["trigger"], row["status"], row["stale"], row["examined"]) == ("manual", "succeeded", 1, 7)
    assert row["report_path"] == str(results[-1].report_path)


def test_archive_slot_taken_is_reported_not_overwritten(jobs):
    agent_skill(jobs.home, "dup", T0)
    paths = SkillPaths.under(jobs.home)
    write_skill(paths.archive, "dup", skill_md("dup", "an older copy"))
    result = run_pass(settings_for(jobs), now=T0 + 100 * DAY)
    assert result.plan.transitions == () and "is taken" in result.plan.kept[0].why
    assert "an older copy" in (paths.archived("dup") / "SKILL.md").read_text()


def test_dry_run_changes_nothing_at_all(jobs):
    project = jobs
    now = utcnow()
    agent_skill(project.home, "to-archive", now - 100 * DAY)
    agent_skill(project.home, "to-stale", now - 40 * DAY)
    agent_skill(project.home, "fresh", now - DAY)
    before = tree_hash(project.home / "skills")
    res = project.cli("curator", "run", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "- `to-archive`: no activity for 100.0 days" in res.stdout and "- `to-stale`" in res.stdout
    assert "would change: 1 stale, 1 archived, 0 reactivated" in res.stdout
    assert tree_hash(project.home / "skills") == before
    assert not (project.home / "logs" / "curator").exists()
    assert not project.has_store() or curator_rows(project) == []
    res = project.cli("curator", "run", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert sorted((c["name"], c["to"]) for c in out["changes"]) == [("to-archive", "archived"), ("to-stale", "stale")]
    assert tree_hash(project.home / "skills") != before


def test_idle_ticker_fires_only_when_every_condition_holds(jobs):
    project = jobs
    agent_skill(project.home, "idle-skill", T0)
    s = settings_for(project)
    ticker = CuratorTicker(s)
    t = T0 + 30 * DAY
    first = ticker.tick(t)
    assert first.action == "seeded" and curator_rows(project) == []
    assert ticker.tick(t + 167 * timedelta(hours=1)).action == "waiting"
    store = s.store
    run = ledger.open_run(store, job="digest", trigger="schedule", now=t + 168 * timedelta(hours=1))
    busy = ticker.tick(t + 169 * timedelta(hours=1))
    assert busy.action == "busy" and "1 run(s)" in busy.reason
    ledger.finish(store, run, "succeeded", now=t + timedelta(hours=169, minutes=30))
    assert ticker.tick(t + timedelta(hours=171, minutes=29)).action == "waiting"  # idle 1h59m < 2h
    s.store.execute("UPDATE curator_state SET paused=1")
    assert ticker.tick(t + timedelta(hours=172)).action == "paused"
    s.store.execute("UPDATE curator_state SET paused=0")
    ran = ticker.tick(t + timedelta(hours=171, minutes=30))
    assert ran.action == "ran" and ran.result is not None
    assert [tr.to_state for tr in ran.result.plan.transitions] == ["stale"]
    rows = curator_rows(project)
    assert [(r["trigger"], r["status"]) for r in rows] == [("idle", "succeeded")]
    assert ticker.tick(t + timedelta(hours=172)).action == "waiting"  # the interval starts again
    (project.home / "config.yaml").write_text("curator: {enabled: false}\n")
    assert CuratorTicker(settings_for(project)).tick(t + 1000 * DAY).action == "disabled"


def test_idle_ticker_with_no_runs_ever(jobs):
    s = settings_for(jobs)
    ticker = CuratorTicker(s)
    assert ticker.tick(T0).action == "seeded"
    assert ticker.tick(T0 + timedelta(hours=168) - SEC).action == "waiting"
    assert ticker.tick(T0 + timedelta(hours=168)).action == "ran"


def test_idle_ticker_reports_a_failed_pass_and_waits(project):
    project.write_jobs("jobs:\n  broken:\n    prompt: hi\n    skills: nope-not-a-list\n")
    s = settings_for(project)
    ticker = CuratorTicker(s)
    ticker.tick(T0)
    failed = ticker.tick(T0 + 200 * timedelta(hours=1))
    assert failed.action == "failed" and "skills" in failed.reason
    assert ticker.tick(T0 + 201 * timedelta(hours=1)).action == "waiting"


def test_curator_commands(jobs):
    project = jobs
    res = project.cli("curator", "status")
    assert res.exit_code == 0 and "last pass   never" in res.stdout and "idle for    no run has ended yet" in res.stdout
    assert project.cli("curator", "pause").exit_code == 0
    status = json.loads(project.cli("curator", "status", "--json").stdout)
    assert status["paused"] is True and status["config"]["interval_hours"] == 168
    res = project.cli("curator", "run")
    assert res.exit_code == 0 and "0 agent-created skills examined" in res.stdout and "report: " in res.stdout
    assert project.cli("curator", "resume").exit_code == 0
    res = project.cli("curator", "status")
    assert "curator     enabled" in res.stdout and "next        " in res.stdout and "manual succeeded" in res.stdout


def test_curator_needs_a_valid_jobs_file(project):
    res = project.run("curator", "run")
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "jobs file not found" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    project.write_jobs("jobs:\n  j:\n    prompt: hi\n    skills: 5\n")
    res = project.run("curator", "run", "--dry-run")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "skills" in res.stderr


@pytest.mark.parametrize("tar", [None, ""], ids=["system-tar", "tarfile"])
def test_snapshot_holds_the_live_tree_and_sidecar_only(tmp_path, tar):
    paths = SkillPaths.under(tmp_path / "home")
    agent_skill(tmp_path / "home", "one", T0, files={"scripts/run.sh": "echo one\n"})
    write_skill(paths.archive, "gone")
    paths.backups.mkdir()
    (paths.backups / "older.tar.gz").write_bytes(b"")
    snap = write_snapshot(paths, T0, tar=tar)
    with tarfile.open(snap) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert archive.extractfile("one/SKILL.md").read() == (paths.live("one") / "SKILL.md").read_bytes()
        assert members["one/scripts/run.sh"].mode & 0o777 == 0o755
    assert ".usage.json" in members
    assert not any(n.startswith((".archive", ".curator_backups", ".tree.lock", ".usage.lock")) for n in members)
