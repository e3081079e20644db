"""The usage sidecar: counts and times, reactivation on use, atomic replace, and 8 real processes
bumping it at once without losing an update."""

import json
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import pytest

from runner.skills import SkillPaths, SkillStateError
from runner.skills.usage import UsageFile, UsageRecord
from tests.conftest import REPO
from tests.skillkit import T0


def test_bumps_counts_times_and_outcomes(tmp_path):
    usage = UsageFile(SkillPaths(tmp_path / "skills"))
    assert usage.read() == {}
    usage.created("a", by="agent", now=T0)
    usage.bump(["a", "b"], "use", now=T0 + timedelta(hours=1))
    usage.bump(["a"], "view", now=T0 + timedelta(hours=2))
    usage.bump(["a"], "patch", now=T0 + timedelta(hours=3))
    usage.record_outcome(["a", "b"], "succeeded")
    usage.record_outcome(["a"], "timed_out")
    a, b = usage.get("a"), usage.get("b")
    assert (a.use_count, a.view_count, a.patch_count) == (1, 1, 1)
    assert (a.runs_succeeded, a.runs_failed, b.runs_succeeded) == (1, 1, 1)
    assert a.created_by == "agent" and b.created_by is None
    assert a.last_activity() == T0 + timedelta(hours=3)
    assert UsageRecord(created_at="2026-01-01T12:00:00.000+00:00").last_activity() == T0
    doc = json.loads(usage.path.read_text())
    assert doc["version"] == 1 and set(doc["skills"]) == {"a", "b"}
    assert (usage.path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in usage.path.parent.iterdir() if ".tmp" in p.name] == []


def test_a_stale_skill_used_again_is_active(tmp_path):
    usage = UsageFile(SkillPaths(tmp_path / "skills"))
    with usage.edit() as data:
        data["s"] = UsageRecord(created_by="agent", state="stale", stale_at="2026-01-01T00:00:00+00:00")
    usage.bump(["s"], "view", now=T0)
    rec = usage.get("s")
    assert (rec.state, rec.stale_at, rec.reactivated_at) == ("active", None, "2026-01-01T12:00:00.000+00:00")


def test_damaged_sidecar_is_a_clear_error_and_is_not_overwritten(tmp_path):
    paths = SkillPaths(tmp_path / "skills")
    paths.root.mkdir(parents=True)
    paths.usage.write_text("{not json")
    with pytest.raises(SkillStateError, match="usage sidecar is damaged"):
        UsageFile(paths).bump(["a"], "view")
    assert paths.usage.read_text() == "{not json"


WORKER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from runner.skills import SkillPaths
    from runner.skills.usage import UsageFile

    root, go, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    usage = UsageFile(SkillPaths(root))
    while not go.exists():
        time.sleep(0.005)
    for i in range(rounds):
        usage.bump(["shared", f"own-{os.getpid()}"], "view")
        usage.bump(["shared"], "use")
        usage.record_outcome(["shared"], "succeeded" if i % 2 else "failed")
    print(os.getpid())
    """
)


def test_eight_processes_lose_no_update(tmp_path):
    root, go = tmp_path / "skills", tmp_path / "go"
    rounds, workers = 8, 8
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), str(go), str(rounds)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(workers)
    ]
    time.sleep(0.3)
    go.touch()
    pids = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        pids.append(int(out.strip()))
    data = UsageFile(SkillPaths(root)).read()
    shared = data["shared"]
    assert shared.view_count == rounds * workers
    assert shared.use_count == rounds * workers
    assert shared.runs_succeeded + shared.runs_failed == rounds * workers
    assert shared.runs_failed == workers * ((rounds + 1) // 2)
    assert {f"own-{p}" for p in pids} <= set(data)
    assert all(data[f"own-{p}"].view_count == rounds for p in pids)
