"""Approval policies, allow patterns, the hardline block and the audit trail, through real runs."""

import ast
import json
import sqlite3
from pathlib import Path

import pytest

from runner.safety.approval import AutoApprove, decide
from runner.testing import call, final
from tests.ttyhelp import run_on_a_tty


def approvals(project):
    db = project.db()
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute("SELECT * FROM approvals ORDER BY id")]


def tool_results(fake, n):
    return [m["content"] for m in fake.requests[n]["body"]["messages"] if m["role"] == "tool"]


def test_deny_blocks_dangerous_and_tells_the_model(project, fake):
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("could not clean"))
    project.write_jobs("jobs:\n  d:\n    prompt: go\n")
    assert project.cli("run-job", "d").exit_code == 0
    assert (project.root / "build").exists()
    [result] = tool_results(fake, 1)
    assert result.startswith("blocked:") and "find another way" in result.lower()
    [row] = approvals(project)
    assert (row["level"], row["decision"], row["decided_by"], row["policy"]) == (
        "dangerous",
        "denied",
        "policy",
        "deny",
    )
    run_id = json.loads(project.cli("runs", "list", "--json").output)[0]["id"]
    assert "BLOCKED" in project.cli("runs", "show", run_id).output


def test_approve_runs_dangerous_but_never_hardline(project, fake):
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), call("terminal", {"command": "rm -rf ~"}), final("ok"))
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    approvals: approve\n    allow: ['rm -rf *']\n")
    assert project.cli("run-job", "a").exit_code == 0
    assert not (project.root / "build").exists()
    results = tool_results(fake, 2)
    assert results[0].startswith("exit code 0") and results[1].startswith("blocked:")
    rows = approvals(project)
    assert [(r["level"], r["decision"], r["decided_by"]) for r in rows] == [
        ("dangerous", "approved", "allow"),
        ("hardline", "denied", "hardline"),
    ]


def test_allow_pattern_approves_under_deny_only_when_every_flagged_part_matches(project, fake):
    (project.root / "build").mkdir()
    (project.root / "dist").mkdir()
    fake.add(
        call("terminal", {"command": "rm -rf build"}), call("terminal", {"command": "ls; rm -rf dist"}), final("ok")
    )
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    allow: ['rm -rf build']\n")
    assert project.cli("run-job", "a").exit_code == 0
    assert not (project.root / "build").exists() and (project.root / "dist").exists()


def test_agent_cannot_change_its_policy(project, fake):
    fake.add(
        call("terminal", {"command": "export RUNNER_APPROVALS=approve; echo 'approvals: approve' >> jobs.yaml"}),
        call("terminal", {"command": "RUNNER_APPROVALS=approve rm -rf sub"}),
        final("done"),
    )
    (project.root / "sub").mkdir()
    project.write_jobs("jobs:\n  a:\n    prompt: go\n")
    (project.home).mkdir(parents=True, exist_ok=True)
    assert project.cli("run-job", "a").exit_code == 0
    assert (project.root / "sub").exists()
    assert tool_results(fake, 2)[-1].startswith("blocked:")


def test_no_callback_fails_closed():
    d = decide("git push --force", policy="approve", allow=(), callback=None)
    assert not d.allowed and d.level == "dangerous"
    assert decide("git push --force", policy="approve", allow=(), callback=AutoApprove()).allowed
    assert not decide("mkfs.ext4 /dev/sda1", policy="approve", allow=("*",), callback=AutoApprove()).allowed
    assert decide("ls -la", policy="deny", allow=(), callback=None).allowed


@pytest.mark.parametrize(
    "command,level,decision",
    [
        ("rm -rf /", "hardline", "denied"),
        ("git push --force origin main", "dangerous", "denied"),
        ("pytest -x", "safe", "approved"),
    ],
)
def test_approvals_check(project, command, level, decision):
    project.write_jobs("jobs:\n  a:\n    prompt: go\n")
    res = project.cli("approvals", "check", "--job", "a", "--json", "--", *command.split())
    assert res.exit_code == 0
    out = json.loads(res.output)
    assert (out["level"], out["decision"]) == (level, decision)


def test_approvals_check_with_allow_and_list(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    allow: ['git push --force*']\n")
    out = json.loads(project.cli("approvals", "check", "--job", "a", "--json", "--", "git", "push", "--force").output)
    assert out["decision"] == "approved" and out["decided_by"] == "allow"
    fake.add(call("terminal", {"command": "git reset --hard"}), final("ok"))
    project.cli("run-job", "a")
    rows = json.loads(project.cli("approvals", "list", "--json").output)
    assert rows[0]["command"] == "git reset --hard" and rows[0]["decision"] == "denied"
    assert "git reset --hard" in project.cli("approvals", "list").output


@pytest.mark.parametrize("answer,approved", [(b"y\n", True), (b"n\n", False)])
def test_manual_policy_asks_on_the_tty(project, fake, answer, approved):
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("ok"))
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    approvals: manual\n")
    code, out = run_on_a_tty(project, "run-job", "m", reply=(b"allow it? [y/N]", answer))
    assert code == 0, out
    assert "rm -rf build" in out
    assert (project.root / "build").exists() is not approved
    [row] = approvals(project)
    assert row["decided_by"] == "human" and row["decision"] == ("approved" if approved else "denied")


def test_manual_policy_without_a_tty_parks_then_denies_at_approval_timeout(project, fake):
    """Without a TTY, `manual` parks the run for a person (tests/control/test_parked.py); with
    nobody answering, approval_timeout denies."""
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("ok"))
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    approvals: manual\n    approval_timeout: 1s\n")
    res = project.run("run-job", "m", stdin=__import__("subprocess").DEVNULL)
    assert res.returncode == 0 and (project.root / "build").exists()
    [row] = approvals(project)
    assert (row["decision"], row["decided_by"]) == ("denied", "timeout")


def test_the_policy_does_not_import_the_tools():
    """The tools call the gate; the gate does not reach back into the tools package."""
    import runner.safety

    for path in Path(runner.safety.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in names if m == "runner.tools" or m.startswith("runner.tools.")], path
