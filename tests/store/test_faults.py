"""Store faults through the real `runner` command: an empty or corrupt runner.db next to earlier
runs, `doctor`'s quick_check, a full disk during a run (a real tmpfs of a few hundred KB),
`runner db backup | migrate`, and leftover processes of a run found `unknown`."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.testing import call, final, hang
from tests.conftest import Project
from tests.servehelp import small_tmpfs


def one_line(res, code: int, *words: str) -> str:
    """A clean exit ``code`` with a one-line error on stderr naming ``words``."""
    assert res.returncode == code, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    for word in words:
        assert word in lines[0], res.stderr
    return lines[0]


def seed(project: Project, fake, runs: int = 1) -> None:
    """A RUNNER_HOME with real runs in it: rows in runner.db, files in outputs/."""
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    for i in range(runs):
        fake.add(final(f"answer {i} " + "x" * 2000))
        res = project.cli("run-job", "a")  # in-process: 40 of them as subprocesses took 40 s
        assert res.exit_code == 0, res.output


# -- an empty, corrupt or foreign runner.db ---------------------------------------------------------
@pytest.mark.sqlite_only("an empty, garbage or moved runner.db file")
def test_empty_db_next_to_earlier_runs_is_refused(project, fake):
    seed(project, fake)
    db = project.home / "runner.db"
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    os.truncate(db, 0)  # `truncate -s 0 runner.db`
    line = one_line(project.run("runs", "list"), 2, str(db), "empty", "outputs", "runner db backup", "move")
    assert "earlier runs" in line
    assert db.stat().st_size == 0, "nothing was written to the file"


@pytest.mark.sqlite_only("an empty, garbage or moved runner.db file")
def test_garbage_db_is_refused(project, fake):
    seed(project, fake)
    db = project.home / "runner.db"
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database " * 500)
    one_line(project.run("runs", "list"), 2, str(db), "not a database", "backup")


@pytest.mark.sqlite_only("an empty, garbage or moved runner.db file")
def test_foreign_sqlite_file_is_refused(project):
    project.home.mkdir(parents=True)
    db = project.home / "runner.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    one_line(project.run("runs", "list"), 2, str(db), "_migrations", "notes")


@pytest.mark.sqlite_only("an empty, garbage or moved runner.db file")
def test_new_home_and_moved_aside_db_start_a_new_ledger(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    res = project.run("runs", "list")  # brand-new RUNNER_HOME
    assert res.returncode == 0, res.stderr
    assert (project.home / "runner.db").stat().st_size > 0
    seed(project, fake)
    db = project.home / "runner.db"
    for name in ("runner.db", "runner.db-wal", "runner.db-shm"):  # the fix the error suggests
        if (project.home / name).exists():
            (project.home / name).rename(project.home / f"{name}.old")
    res = project.run("runs", "list")
    assert res.returncode == 0 and "no runs" in res.stdout.lower(), res.stdout + res.stderr
    assert db.stat().st_size > 0


@pytest.mark.sqlite_only("an empty, garbage or moved runner.db file")
def test_empty_db_in_a_home_without_runs_is_a_new_ledger(project):
    """A 0-byte file and nothing else (a first start killed before its migrations) is not a loss."""
    project.home.mkdir(parents=True)
    (project.home / "runner.db").touch()
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    res = project.run("runs", "list")
    assert res.returncode == 0, res.stderr


def corrupt_middle_page(db: Path) -> None:
    """Garbage over one page in the middle of the file (its header, page 1, stays intact)."""
    size = db.stat().st_size
    page = 4096
    with open(db, "r+b") as fh:
        fh.seek((size // page // 2) * page)
        fh.write(bytes([0xDE, 0xAD, 0xBE, 0xEF]) * (page // 4))


@pytest.mark.sqlite_only("a corrupted page of the runner.db file")
def test_doctor_quick_check_reports_a_corrupted_page(project, fake):
    seed(project, fake, runs=40)
    res = project.run("doctor", "--json")
    store = next(c for c in json.loads(res.stdout) if c["check"] == "store")
    assert store["ok"] and "quick_check ok" in store["detail"], store
    db = project.home / "runner.db"
    sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()  # every page in the main file
    corrupt_middle_page(db)
    res = project.run("doctor", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    store = next(c for c in json.loads(res.stdout) if c["check"] == "store")
    assert not store["ok"], store
    # SQLite's words for a corrupt page depend on which page the garbage hit (the layout moves as
    # migrations add tables): "malformed", or SQLITE_CORRUPT's code from the page check
    assert str(db) in store["detail"], store
    assert "malformed" in store["detail"] or "error code 11" in store["detail"], store


# -- runner db backup | migrate -------------------------------------------------------------------
@pytest.mark.sqlite_only("runner db backup is SQLite's online backup (PostgreSQL: pg_dump)")
def test_db_backup_is_a_consistent_private_copy(project, fake, tmp_path):
    seed(project, fake, runs=3)
    dest = tmp_path / "backup.db"
    res = project.run("db", "backup", str(dest))
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    copy = sqlite3.connect(dest)
    assert copy.execute("SELECT COUNT(*) FROM runs WHERE status='succeeded'").fetchone()[0] == 3
    assert copy.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file, no -wal to forget
    copy.close()
    before = dest.read_bytes()
    one_line(project.run("db", "backup", str(dest)), 2, str(dest), "--force")
    assert dest.read_bytes() == before
    fake.add(final("one more"))
    assert project.run("run-job", "a").returncode == 0
    assert project.run("db", "backup", "--force", str(dest)).returncode == 0
    assert sqlite3.connect(dest).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temporary file left"


@pytest.mark.sqlite_only("runner db backup is SQLite's online backup (PostgreSQL: pg_dump)")
def test_db_backup_restores(project, fake, tmp_path):
    """The documented restore: the copy in place of runner.db, runs and events intact."""
    seed(project, fake, runs=2)
    dest = tmp_path / "backup.db"
    assert project.run("db", "backup", str(dest)).returncode == 0
    db = project.home / "runner.db"
    os.truncate(db, 0)
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    assert project.run("runs", "list").returncode == 2
    db.write_bytes(dest.read_bytes())
    res = project.run("runs", "list", "--json")
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)) == 2


@pytest.mark.sqlite_only("runner db backup is SQLite's online backup (PostgreSQL: pg_dump)")
def test_db_backup_bad_destinations(project, fake, tmp_path):
    seed(project, fake)
    one_line(project.run("db", "backup", str(tmp_path / "nope" / "b.db")), 2, "no such folder")
    one_line(project.run("db", "backup", str(tmp_path)), 2, "folder")


@pytest.mark.sqlite_only("runner db backup is SQLite's online backup (PostgreSQL: pg_dump)")
def test_db_backup_without_a_store(project, tmp_path):
    one_line(project.run("db", "backup", str(tmp_path / "b.db")), 2, "runner.db", "no store")
    assert not project.has_store()


@pytest.mark.sqlite_only("a new runner.db file; the test databases come migrated (test_pg_cli covers db migrate)")
def test_db_migrate_prints_what_it_applied(project):
    res = project.run("db", "migrate")
    assert res.returncode == 0, res.stderr
    assert "applied m0001_runs" in res.stdout
    applied = [line for line in res.stdout.splitlines() if line.startswith("applied ")]
    names = {r[0] for r in project.db().execute("SELECT name FROM _migrations")}
    assert {line.split()[1] for line in applied} == names
    res = project.run("db", "migrate")
    assert res.returncode == 0 and "up to date" in res.stdout, res.stdout


# -- a full disk during a run ---------------------------------------------------------------------
@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB tmpfs (needs root, or CAP_SYS_ADMIN); skipped where mounting is not allowed."""
    with small_tmpfs(tmp_path, 2) as mnt:
        yield mnt


def full_disk_project(project: Project, small_fs: Path) -> Project:
    """The project with RUNNER_HOME on the small filesystem, its store already created."""
    home = small_fs / "home"
    moved = Project(root=project.root, home=home, base_url=project.base_url)
    moved.write_jobs(f"jobs:\n  fill:\n    prompt: go\n    toolsets: [terminal]\n    workdir: {small_fs}\n")
    assert moved.run("runs", "list").returncode == 0
    return moved


def fill_command(leave: int) -> str:
    """A shell command that fills the filesystem of its workdir, then frees ``leave`` bytes."""
    free = f"truncate -s -{leave} filler" if leave else "true"
    return f"head -c 100000000 /dev/zero > filler 2>/dev/null; {free}; echo filled"


def test_disk_full_while_writing_the_output_fails_the_run_with_store_error(project, fake, small_fs):
    proj = full_disk_project(project, small_fs)
    # the job fills the disk but 256 KB; the answer (1 MB) no longer fits in outputs/
    fake.add(call("terminal", {"command": fill_command(256 * 1024)}), final("y" * 1_000_000))
    res = proj.run("run-job", "fill")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "store_error" in res.stderr and str(proj.home) in res.stderr, res.stderr
    row = sqlite3.connect(proj.home / "runner.db").execute("SELECT status, reason, error FROM runs").fetchone()
    assert row[0] == "failed" and row[1] == "store_error", row
    assert str(proj.home) in row[2] and ("No space left" in row[2] or "full" in row[2]), row
    leftovers = [p for p in (proj.home / "outputs").rglob("*") if p.is_file()]
    assert leftovers == [], f"nothing half-written: {leftovers}"


def test_disk_completely_full_never_leaves_a_running_row(project, fake, small_fs):
    """Not even the final status fits: one line naming runner.db, exit 1; the row is `unknown`
    once space is back and the next command recovers it."""
    proj = full_disk_project(project, small_fs)
    fake.add(call("terminal", {"command": fill_command(0)}), final("done"))
    res = proj.run("run-job", "fill")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "runner.db" in res.stderr or str(proj.home) in res.stderr, res.stderr
    (small_fs / "filler").unlink()
    out = proj.run("runs", "list", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["status"] in ("failed", "unknown"), row
    if row["status"] == "failed":
        assert row["reason"] == "store_error", row


# -- leftover processes of a run found `unknown` ------------------------------------------------------
def processes_of(run_id: str) -> dict[int, str]:
    """pid -> command line of every process whose environment carries the run's mark."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v.startswith(f"RUNNER_RUN_MARK={run_id}-".encode()) for v in environ):
            found[int(entry)] = cmdline
    return found


def _killed_run_with_sleepers(project, fake, sandbox: str) -> tuple[subprocess.Popen[bytes], str]:
    """``run-job`` whose command left two sleepers (one in a session of its own), SIGKILLed while
    it waits for the model: no ``finally``, no backend close."""
    fake.add(
        call("terminal", {"command": "sleep 300 & setsid sleep 301 & echo started"}),
        hang(60),  # the next turn: run-job waits for the model while its commands sleep on
    )
    project.write_jobs(f"jobs:\n  slow:\n    prompt: go\n    toolsets: [terminal]\n    sandbox: {sandbox}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run-job", "slow"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fake.requests) >= 2, "the tool call never finished"
        (run_id,) = [r[0] for r in project.db().execute("SELECT id FROM runs")]
        left = processes_of(run_id)
        assert sorted(left.values()) == ["sleep 300", "sleep 301"], left
    finally:
        proc.kill()  # SIGKILL: no finally, no backend close in run-job
        proc.wait()
    return proc, run_id


def test_a_killed_sandboxed_runs_processes_end_with_it(project, fake):
    """The sandbox dies with its runner (its first process is told, and the kernel kills the
    rest of its PID namespace): nothing is left for recovery to find."""
    _, run_id = _killed_run_with_sleepers(project, fake, "on")
    deadline = time.monotonic() + 5
    while processes_of(run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(run_id) == {}


def test_recovery_kills_what_a_killed_unsandboxed_run_left_running(project, fake):
    _, run_id = _killed_run_with_sleepers(project, fake, "off")
    assert sorted(processes_of(run_id).values()) == ["sleep 300", "sleep 301"], "still there after the kill"
    res = project.run("runs", "list", "--json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    assert row["status"] == "unknown" and row["reason"] == "worker_lost", row
    deadline = time.monotonic() + 5
    while processes_of(run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes_of(run_id)
    for pid in left:  # a failing test leaves nothing behind either
        os.kill(pid, signal.SIGKILL)
    assert left == {}
