"""Workdir checkpoints (issue 33 item 3) through the real CLI: a scripted run that writes, changes,
deletes and creates files; `runs checkpoints` lists one checkpoint before each turn that could
change files; `runs rollback --to` restores each byte for byte (binary, empty, spaces, the
executable bit, deleted and new files), leaves ignored and oversize files and the workdir's own
.git alone, refuses a running run and a caller inside a run, and can be undone."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from runner.testing import call, calls, final
from tests.servehelp import in_a_tool_call

BINARY = bytes(range(256)) * 8
BIG = 1_500_000  # over checkpoint_max_file_mb: 1

JOB = """\
jobs:
  edit:
    prompt: change the files
    toolsets: [terminal, files]
    workdir: work
    checkpoint_max_file_mb: 1
"""


def tree(root: Path, skip: tuple[str, ...] = (".git", "ignored.log", "big.bin", "build")) -> dict[str, tuple[bool, str]]:
    """path -> (executable, sha256 of the bytes) of every file under ``root`` but ``skip``."""
    out = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        dirs[:] = [d for d in dirs if not (rel == Path(".") and d in skip)]
        for name in files:
            path = Path(folder) / name
            key = (rel / name).as_posix()
            if key in skip:
                continue
            out[key] = (os.access(path, os.X_OK), hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def git_state(work: Path) -> tuple[bytes, bytes, str]:
    """The workdir's own repository: HEAD, its index file, its refs."""
    refs = subprocess.run(["git", "-C", str(work), "show-ref"], capture_output=True, text=True).stdout
    return (work / ".git" / "HEAD").read_bytes(), (work / ".git" / "index").read_bytes(), refs


def make_workdir(root: Path) -> Path:
    work = root / "work"
    work.mkdir()
    (work / "keep.txt").write_text("hello\n")
    (work / "bin.dat").write_bytes(BINARY)
    (work / "empty").write_bytes(b"")
    (work / "with space.txt").write_text("spaced out\n")
    (work / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "script.sh").chmod(0o755)
    (work / "sub").mkdir()
    (work / "sub" / "deep.txt").write_text("deep\n")
    (work / ".gitignore").write_text("ignored.log\nbuild/\n")
    (work / "ignored.log").write_text("log before\n")
    (work / "build").mkdir()
    (work / "build" / "out.o").write_bytes(b"\x7fELF")
    (work / "big.bin").write_bytes(os.urandom(BIG))
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(work), *args], check=True, env=env, capture_output=True)
    return work


def script(fake) -> None:
    fake.add(
        call("terminal", {"command": "ls -la"}),  # turn 1 reads: no checkpoint
        call("write_file", {"path": "keep.txt", "content": "changed\n"}),  # turn 2
        calls(  # turn 3: one checkpoint for both calls
            ("terminal", {"command": "rm empty"}),
            ("terminal", {"command": "echo x > 'new file.txt'"}),
        ),
        call("read_file", {"path": "keep.txt"}),  # turn 4 reads
        call(  # turn 5
            "terminal",
            {
                "command": "chmod -x script.sh && printf '\\000\\001\\002' > bin.dat && rm 'with space.txt' && "
                "rm sub/deep.txt && rmdir sub && echo after > ignored.log && head -c 1600000 /dev/zero > big.bin"
            },
        ),
        final("done"),
    )


def expected_states(start: dict[str, tuple[bool, str]]) -> dict[int, dict[str, tuple[bool, str]]]:
    """The files before turns 2, 3 and 5, worked out from the state before the run."""

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    before3 = {**start, "keep.txt": (False, sha(b"changed\n"))}
    before5 = {k: v for k, v in before3.items() if k != "empty"}
    before5["new file.txt"] = (False, sha(b"x\n"))
    return {2: start, 3: before3, 5: before5}


def rollback(project, run_id: str, *args: str):
    res = project.run("runs", "rollback", run_id, *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_checkpoints_of_a_run_and_rollback_to_each(project, fake):
    work = make_workdir(project.root)
    project.write_jobs(JOB)
    start, own_git = tree(work), git_state(work)
    script(fake)
    res = project.run("run-job", "edit", "--json")
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout)["id"]
    end = tree(work)
    assert end != start and "new file.txt" in end and "sub/deep.txt" not in end
    assert not os.access(work / "script.sh", os.X_OK)

    listing = project.run("runs", "checkpoints", run_id, "--json")
    assert listing.returncode == 0, listing.stderr
    points = json.loads(listing.stdout)["checkpoints"]
    assert [(p["step"], p["tool"], p["label"]) for p in points] == [
        (2, "write_file", None),
        (3, "terminal", None),
        (5, "terminal", None),
        (None, None, "end"),
    ]
    assert [p["changed_after"] for p in points] == [1, 2, 4, None]  # turn 5: script.sh, bin.dat, two deleted
    text = project.run("runs", "checkpoints", run_id).stdout
    assert "before turn 2 (write_file)" in text and "at the end of the run" in text
    shown = project.run("runs", "show", run_id).stdout
    assert "checkpoint " in shown and "before turn 3 (terminal)" in shown
    assert "ignored: " in shown and "ignored.log" in shown and "build/" in shown  # reported
    assert "over the size cap: big.bin (1.5 MB)" in shown

    big_after, log_after = (work / "big.bin").read_bytes(), (work / "ignored.log").read_text()
    expected = expected_states(start)
    undo = None
    for step in (5, 3, 2):
        done = rollback(project, run_id, "--to", str(step))
        assert tree(work) == expected[step], step
        assert done["step"] == step and done["undo"]
        undo = undo or done["undo"]  # the first rollback's undo point: the files as the run left them
        assert (work / "big.bin").read_bytes() == big_after  # oversize: never touched
        assert (work / "ignored.log").read_text() == log_after  # ignored: never touched
        assert (work / "build" / "out.o").read_bytes() == b"\x7fELF"
        assert git_state(work) == own_git  # the workdir's own .git: HEAD, index and refs unchanged
    assert os.access(work / "script.sh", os.X_OK) and (work / "empty").read_bytes() == b""
    assert (work / "bin.dat").read_bytes() == BINARY and (work / "sub" / "deep.txt").read_text() == "deep\n"

    rollback(project, run_id, "--to", undo[:12])  # undo the first rollback: the files as the run left them
    assert tree(work) == end
    again = rollback(project, run_id)  # default: the first checkpoint, before the run changed anything
    assert tree(work) == start and again["step"] == 2

    shown = project.run("runs", "show", run_id).stdout
    assert "rollback to " in shown and "before a rollback" in shown
    listing = json.loads(project.run("runs", "checkpoints", run_id, "--json").stdout)["checkpoints"]
    assert [p["label"] for p in listing].count("rollback") == 5


def test_rollback_text_says_how_to_undo_it(project, fake):
    work = project.root / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\n")
    project.write_jobs(JOB)
    fake.add(call("terminal", {"command": "echo two > a.txt && echo new > b.txt"}), final("ok"))
    res = project.run("run-job", "edit", "--json")
    run_id = json.loads(res.stdout)["id"]
    out = project.run("runs", "rollback", run_id)
    assert out.returncode == 0, out.stderr
    assert "1 files written, 1 deleted" in out.stdout
    assert f"to undo: runner runs rollback {run_id} --to " in out.stdout
    assert (work / "a.txt").read_text() == "one\n" and not (work / "b.txt").exists()


def test_no_checkpoint_for_a_run_that_only_reads(project, fake):
    work = project.root / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\n")
    project.write_jobs(JOB)
    fake.add(call("terminal", {"command": "cat a.txt | wc -l"}), call("read_file", {"path": "a.txt"}), final("ok"))
    run_id = json.loads(project.run("run-job", "edit", "--json").stdout)["id"]
    out = project.run("runs", "checkpoints", run_id)
    assert out.returncode == 0 and "no checkpoints" in out.stdout
    refused = project.run("runs", "rollback", run_id)
    assert refused.returncode == 2 and "no checkpoints" in refused.stderr
    assert not (project.home / "checkpoints").exists() or not any((project.home / "checkpoints").iterdir())


def test_checkpoints_false_takes_none(project, fake):
    (project.root / "work").mkdir()
    project.write_jobs(JOB + "    checkpoints: false\n")
    fake.add(call("write_file", {"path": "a.txt", "content": "x"}), final("ok"))
    run_id = json.loads(project.run("run-job", "edit", "--json").stdout)["id"]
    assert json.loads(project.run("runs", "checkpoints", run_id, "--json").stdout)["checkpoints"] == []


@pytest.mark.parametrize("value", ['"yes"', "1", "[true]"])
def test_checkpoints_must_be_a_bool(project, value):
    project.write_jobs(f"jobs:\n  j:\n    prompt: hi\n    checkpoints: {value}\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "jobs.yaml: job j: checkpoints:" in res.stderr


def test_checkpoints_true_on_ssh_is_an_error(project):
    project.write_jobs("jobs:\n  j:\n    prompt: hi\n    backend: ssh:me@example.org\n    checkpoints: true\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2 and "job j: checkpoints: not available on the ssh backend" in res.stderr


def test_a_failing_snapshot_is_recorded_and_the_run_goes_on(project, fake):
    work = project.root / "work"
    work.mkdir()
    project.write_jobs(JOB.replace("checkpoint_max_file_mb: 1", "checkpoint_max_mb: 1"))
    (work / "a.bin").write_bytes(b"\0" * 600_000)
    (work / "b.bin").write_bytes(b"\0" * 600_000)
    fake.add(call("write_file", {"path": "c.txt", "content": "x"}), call("write_file", {"path": "d.txt", "content": "y"}), final("ok"))
    res = project.run("run-job", "edit", "--json")
    assert res.returncode == 0, res.stderr  # a checkpoint failure is not a run failure
    run_id = json.loads(res.stdout)["id"]
    assert (work / "d.txt").read_text() == "y"
    shown = project.run("runs", "show", run_id).stdout
    assert "checkpoint FAILED before turn 1 (no more checkpoints in this run):" in shown
    assert f"checkpoints 0, 1 FAILED (see the steps)   runner runs checkpoints {run_id}" in shown
    assert "over checkpoint_max_mb" in shown and shown.count("checkpoint FAILED") == 1
    listing = project.run("runs", "checkpoints", run_id)
    assert "1 checkpoint(s) failed" in listing.stdout


def test_rollback_refused_for_a_running_run_and_from_inside_a_run(project, fake):
    (project.root / "work").mkdir()
    project.write_jobs(JOB)
    fake.add(call("write_file", {"path": "a.txt", "content": "x"}), call("terminal", {"command": "sleep 30"}), final("ok"))
    proc = project.start_job("edit", fake)
    row = in_a_tool_call(project.home)
    try:
        res = project.run("runs", "rollback", row["id"])
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "is running" in res.stderr
    finally:
        project.run("runs", "cancel", row["id"])  # its step is cut at once
        proc.communicate(timeout=60)
    inside = project.run("runs", "rollback", row["id"], env=project.env(RUNNER_RUN_ID="someone"))
    assert inside.returncode == 2 and "refused to roll back a run's files" in inside.stderr
    assert (project.root / "work" / "a.txt").exists()  # nothing was rolled back


def test_prune_forgets_the_checkpoints_of_pruned_runs(project, fake):
    (project.root / "work").mkdir()
    project.write_jobs(JOB)
    fake.add(call("write_file", {"path": "a.txt", "content": "x"}), final("ok"))
    first = json.loads(project.run("run-job", "edit", "--json").stdout)["id"]
    fake.add(call("write_file", {"path": "a.txt", "content": "y"}), final("ok"))
    second = json.loads(project.run("run-job", "edit", "--json").stdout)["id"]
    [shadow] = list((project.home / "checkpoints").iterdir())

    def refs() -> str:
        return subprocess.run(
            ["git", "--git-dir", str(shadow), "for-each-ref", "--format=%(refname)"], capture_output=True, text=True
        ).stdout

    assert first in refs() and second in refs()
    res = project.run("runs", "prune", "--older-than", "0s", "--keep-last", "1")
    assert res.returncode == 0, res.stderr
    assert "forgot the workdir checkpoints of 1 runs" in res.stdout
    assert first not in refs() and second in refs()
    assert not list((shadow / "indexes").iterdir())  # no run left its index behind
