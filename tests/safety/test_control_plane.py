"""The runner's control files (jobs.yaml, config.yaml, templates, skills, RUNNER_HOME) are out of the
agent's reach: file tools refuse them, terminal writes are dangerous, pre_run is classified, a
run that changes them anyway ends `tampered` and serve holds the change until an operator reloads."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

import pytest

from runner.safety.approval import decide
from runner.safety.control import WRITES_CONTROL, ControlPlane, Fingerprint
from runner.testing import call, final
from tests.servehelp import serve_factory, wait_for, write_config

JOBS = "jobs:\n  j:\n    prompt: go\n{extra}"


def approvals(project):
    db = project.db()
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute("SELECT * FROM approvals ORDER BY id")]


def last_run(project):
    return json.loads(project.cli("runs", "list", "--json").output)[0]


def events(project, run_id, kind):
    db = project.db()
    db.row_factory = sqlite3.Row
    return [
        json.loads(r["payload"])
        for r in db.execute("SELECT * FROM run_events WHERE run_id=? AND kind=?", (run_id, kind))
    ]


def tool_results(fake, n):
    return [m["content"] for m in fake.requests[n]["body"]["messages"] if m["role"] == "tool"]


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


# -- file tools ---------------------------------------------------------------------------------
def test_write_file_on_jobs_yaml_is_refused_and_audited(project, fake):
    jobs = project.write_jobs(JOBS.format(extra=""))
    before = jobs.read_bytes()
    fake.add(
        call("write_file", {"path": "jobs.yaml", "content": "jobs:\n  j:\n    prompt: go\n    approvals: approve\n"}),
        call("edit_file", {"path": "jobs.yaml", "old_string": "go", "new_string": "gone"}),
        final("done"),
    )
    assert project.cli("run-job", "j").exit_code == 0
    assert jobs.read_bytes() == before
    results = tool_results(fake, 2)
    assert results == [
        "blocked: jobs.yaml is one of the runner's control files; find another way",
        "blocked: jobs.yaml is one of the runner's control files; find another way",
    ]
    rows = approvals(project)
    assert [(r["command"], r["decision"], r["decided_by"]) for r in rows] == [
        ("write_file jobs.yaml", "denied", "control"),
        ("edit_file jobs.yaml", "denied", "control"),
    ]
    assert last_run(project)["status"] == "succeeded"


def test_a_symlink_to_a_control_file_is_the_control_file(project, fake):
    jobs = project.write_jobs(JOBS.format(extra=""))
    project.write("prompts/t.md", "hello")
    (project.root / "link.yaml").symlink_to(jobs)
    (project.root / "tpl").symlink_to(project.root / "prompts")
    project.write_jobs("jobs:\n  j:\n    prompt: prompts/t.md\n")
    before = jobs.read_bytes()
    fake.add(
        call("write_file", {"path": "link.yaml", "content": "x"}),
        call("write_file", {"path": "tpl/t.md", "content": "x"}),
        call("write_file", {"path": "notes.md", "content": "fine"}),
        final("done"),
    )
    assert project.cli("run-job", "j").exit_code == 0
    assert jobs.read_bytes() == before and (project.root / "prompts/t.md").read_text() == "hello"
    r1, r2, r3 = tool_results(fake, 3)
    assert r1.startswith("blocked: link.yaml is one of the runner's control files")
    assert r2.startswith("blocked: tpl/t.md is one of the runner's control files")
    assert r3.startswith("wrote 4 bytes") and (project.root / "notes.md").read_text() == "fine"


def test_file_tools_do_not_read_runner_home_config_or_jobs(project, fake, tmp_path):
    inner = project.root / ".runner"
    inner.mkdir()
    (inner / "config.yaml").write_text("timezone: UTC\n# secret-marker\n")
    (inner / "runner-notes.txt").write_text("secret-marker in RUNNER_HOME\n")
    project.write("notes.txt", "secret-marker in the project\n")
    project.write_jobs(JOBS.format(extra=""))
    fake.add(
        call("read_file", {"path": ".runner/config.yaml"}),
        call("list_dir", {"path": ".runner"}),
        call("search_files", {"pattern": "secret-marker"}),
        call("read_file", {"path": "jobs.yaml"}),
        final("done"),
    )
    res = project.cli("run-job", "j", env=project.env(RUNNER_HOME=str(inner)))
    assert res.exit_code == 0, res.output
    read, listed, searched, jobs = tool_results(fake, 4)
    assert read == "blocked: .runner/config.yaml is one of the runner's control files; find another way"
    assert listed == "blocked: .runner is one of the runner's control files; find another way"
    assert searched == "notes.txt:1:secret-marker in the project"
    assert jobs == "blocked: jobs.yaml is one of the runner's control files; find another way"  # hidden in the sandbox too


# -- terminal --------------------------------------------------------------------------------------
def test_terminal_write_to_jobs_yaml_is_refused_under_deny(project, fake):
    jobs = project.write_jobs(JOBS.format(extra=""))
    before = jobs.read_bytes()
    fake.add(
        call("terminal", {"command": "echo '    approvals: approve' >> jobs.yaml"}),
        call("terminal", {"command": "cat jobs.yaml | wc -l"}),
        final("done"),
    )
    assert project.cli("run-job", "j").exit_code == 0
    assert jobs.read_bytes() == before
    blocked, counted = tool_results(fake, 2)
    assert blocked.startswith("blocked:") and WRITES_CONTROL in blocked
    assert counted.startswith("exit code 0")
    [row] = approvals(project)
    assert (row["level"], row["decision"], row["policy"]) == ("dangerous", "denied", "deny")
    assert WRITES_CONTROL in json.loads(row["reasons"])


def plane(tmp_path):
    (tmp_path / "proj").mkdir(exist_ok=True)
    (tmp_path / "proj" / "jobs.yaml").write_text("jobs: {}\n")
    home = str(tmp_path / "home")
    return ControlPlane(
        files=(str(tmp_path / "proj/jobs.yaml"), str(tmp_path / "home/config.yaml"), str(tmp_path / "proj/p/t.md")),
        folders=(str(tmp_path / "proj/skills"), home),
        unreadable=(home, str(tmp_path / "home/config.yaml")),
        workdir=str(tmp_path / "proj"),
    )


@pytest.mark.parametrize(
    "command",
    [
        "echo x > jobs.yaml",
        "echo x >> ./jobs.yaml",
        "printf x | tee -a jobs.yaml",
        "sed -i s/deny/approve/ jobs.yaml",
        "cp /tmp/evil jobs.yaml",
        "mv jobs.yaml old",
        "rm p/t.md",
        "ln -sf /tmp/x jobs.yaml",
        "install -m644 /tmp/x jobs.yaml",
        "truncate -s0 jobs.yaml",
        "chmod 777 jobs.yaml",
        "git checkout -- jobs.yaml",
        "git restore jobs.yaml",
        "vim jobs.yaml",
        "python3 tool.py --out=jobs.yaml",
        "cd sub && echo x >> ../jobs.yaml",
        "echo x >> $PWD/jobs.yaml",
        "rm -r ${{ROOT}}/skills/x",
        "echo x > ~/../$U/p/*.md".replace("~/../$U", "{proj}"),
        "echo x > skills/new/SKILL.md",
        "sh -c 'cat /tmp/x > jobs.yaml'",
        "echo x > {home}/runner.db",
        "cp x {home}/config.yaml",
    ],
)
def test_writes_of_control_files_are_at_least_dangerous(tmp_path, command):
    cp = plane(tmp_path)
    text = command.format(home=tmp_path / "home", proj=tmp_path / "proj")
    decision = decide(text, policy="deny", allow=("*",), callback=None, control=cp)
    assert not decision.allowed and WRITES_CONTROL in decision.reasons, decision
    approved = decide(text, policy="approve", allow=(), callback=None, control=cp)
    assert approved.level == "dangerous"


@pytest.mark.parametrize(
    "command",
    [
        "cat jobs.yaml",
        "grep -n prompt jobs.yaml",
        "git diff jobs.yaml",
        "cp jobs.yaml /tmp/copy",
        "echo x > notes.md",
        "kill -9 $PPID",
        "mkdir -p $OUT/reports",
    ],
)
def test_reading_control_files_and_writing_others_stays_safe(tmp_path, command):
    decision = decide(command, policy="deny", allow=(), callback=None, control=plane(tmp_path))
    assert decision.allowed and decision.level == "safe", decision


# -- tamper detection --------------------------------------------------------------------------------
def test_an_unsandboxed_run_that_changes_jobs_yaml_ends_tampered(project, fake):
    """The tamper check is the line behind the sandbox: with `sandbox: off` an approved write lands
    and the run ends tampered; in the sandbox it never lands (tests/safety/test_sandbox.py)."""
    project.write_jobs(JOBS.format(extra="    approvals: approve\n    sandbox: off\n"))
    fake.add(call("terminal", {"command": "echo '    allow: [\"*\"]' >> jobs.yaml"}), final("done"))
    res = project.cli("run-job", "j")
    assert res.exit_code == 1
    run = last_run(project)
    assert (run["status"], run["reason"]) == ("failed", "tampered")
    assert str(project.jobs_path) in run["error"]
    [event] = events(project, run["id"], "tampered")
    assert event["files"] == [str(project.jobs_path)]
    assert (project.home / "run" / "reload.hold").exists()


def test_fingerprint_names_changed_added_and_removed_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("1")
    first = Fingerprint.of([str(a), str(b)])
    assert first.changed(Fingerprint.of([str(a), str(b)])) == ()
    a.write_text("2")
    b.write_text("new")
    assert first.changed(Fingerprint.of([str(a), str(b)])) == (str(a), str(b))


def test_serve_holds_a_tampered_jobs_yaml_until_reload(project, fake, serve):
    write_config(project)
    project.write_jobs(
        "jobs:\n  j:\n    schedule: in 1s\n    prompt: go\n    approvals: approve\n    catchup: skip\n    sandbox: off\n"
    )
    added = "  added:\\n    schedule: every 1h\\n    agent: false\\n    pre_run: echo added\\n"
    fake.add(call("terminal", {"command": f"printf '{added}' >> jobs.yaml"}), final("done"))
    daemon = serve().started()
    wait_for(lambda: (project.home / "run" / "reload.hold").exists(), 20, what="the tampered run")
    daemon.wait_log("finished j run")
    daemon.wait_log("a run changed the runner's control files")  # the watcher polls every second
    time.sleep(2.5)  # and keeps holding the change at its next polls
    assert "reloaded" not in daemon.log()
    res = project.run("serve", "reload")
    assert res.returncode == 0, res.stderr
    daemon.wait_log("reloaded")
    assert "2 jobs" in daemon.log().split("reloaded", 1)[1]
    assert not (project.home / "run" / "reload.hold").exists()
    assert daemon.stop() == 0


def test_serve_reload_without_serve_is_a_clear_error(project):
    project.write_jobs(JOBS.format(extra=""))
    res = project.run("serve", "reload")
    assert res.returncode == 2 and "not running" in res.stderr and "Traceback" not in res.stderr


def test_sighup_reloads_at_once(project, serve):
    write_config(project)
    project.write_jobs("jobs:\n  a:\n    schedule: every 1h\n    agent: false\n    pre_run: echo a\n")
    daemon = serve().started()
    (project.home / "run" / "reload.hold").write_text("run x changed: jobs.yaml\n")
    project.write_jobs("jobs:\n  a:\n    schedule: every 1h\n    agent: false\n    pre_run: echo b\n")
    daemon.wait_log("a run changed the runner's control files")
    daemon.send(signal.SIGHUP)
    daemon.wait_log("reloaded")
    assert daemon.stop() == 0


# -- pre_run ------------------------------------------------------------------------------------------
# Each hardline payload sits where it cannot run even if the check failed (`true ||`, after `exit 0`),
# and HOME is a throwaway folder (tests/conftest.py).
def test_hardline_pre_run_is_refused_even_under_approve(project, fake):
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n    pre_run: 'true || rm -rf ~'\n")
    assert project.cli("run-job", "j").exit_code == 1
    run = last_run(project)
    assert (run["status"], run["reason"]) == ("failed", "blocked")
    assert "pre_run refused (hardline" in run["error"]
    assert not fake.requests


def test_hardline_line_in_a_pre_run_script_is_refused(project, fake):
    script = project.root / "check.sh"
    script.write_text("exit 0\nrm -rf ~\n")  # a file API, never a heredoc
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n    pre_run: check.sh\n")
    assert project.cli("run-job", "j").exit_code == 1
    run = last_run(project)
    assert (run["status"], run["reason"]) == ("failed", "blocked")
    assert "pre_run script refused" in run["error"]


def test_dangerous_pre_run_follows_the_policy(project, fake):
    (project.root / "build").mkdir()
    project.write_jobs("jobs:\n  j:\n    agent: false\n    pre_run: 'rm -rf build'\n")
    assert project.cli("run-job", "j").exit_code == 1
    assert last_run(project)["reason"] == "blocked" and (project.root / "build").exists()
    project.write_jobs("jobs:\n  j:\n    agent: false\n    approvals: approve\n    pre_run: 'rm -rf build'\n")
    assert project.cli("run-job", "j").exit_code == 0
    assert not (project.root / "build").exists()


def test_a_kanban_workspace_inside_runner_home_is_a_work_area(tmp_path):
    """RUNNER_HOME is protected, but its workspaces/ (where kanban tasks run) is not; named
    control files stay protected there too."""
    from runner.safety.control import ControlPlane

    home = tmp_path / "home"
    work = home / "workspaces" / "7"
    work.mkdir(parents=True)
    jobs = tmp_path / "jobs.yaml"
    plane = ControlPlane(
        files=(str(jobs),),
        folders=(str(home),),
        unreadable=(str(home),),
        workdir=str(work),
        exempt=(str(home / "workspaces"),),
    )
    assert plane.write_hit("out.txt") is None and plane.read_hit("out.txt") is None
    assert plane.write_hit("$TASK.txt".replace("$TASK", "x")) is None
    assert plane.write_hit("../../runner.db") == str(home)
    assert plane.read_hit("../../outputs") == str(home)
    assert plane.write_hit(str(jobs)) == str(jobs)
