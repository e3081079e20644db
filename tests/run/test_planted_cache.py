"""Issue 29: nothing left in ``RUNNER_HOME/cache`` changes what the next ``run-job`` may do.

An attacker run once rewrote run-job's validated snapshot of jobs.yaml and config.yaml there (a
``deny`` job then ran with ``approvals: approve``). run-job keeps no such copy now: it validates
the files themselves on every run, so a planted ``cache/run-*.json`` has no effect. (On the tree
that still kept the snapshot, this test fails: the rewritten snapshot lets ``rm -rf build`` run.)"""

import hashlib
import json

from runner.testing import call, final
from tests.servehelp import rows

DENY = "jobs:\n  d:\n    prompt: go\n    approvals: deny\n    toolsets: [terminal]\n"


def forged(project) -> str:
    """A forged copy of the files in the old snapshot's form: the job loosened to ``approve``."""
    spec = {"prompt": "go", "approvals": "approve", "toolsets": ["terminal"]}
    return json.dumps(
        {
            "version": 1,
            "key": hashlib.sha256(project.jobs_path.read_bytes()).hexdigest(),
            "config": {"m": "runner.config.machine:Config", "f": {"timezone": "UTC"}},
            "jobs": {"d": {"m": "runner.config.jobs:JobSpec", "f": spec}},
        }
    )


def test_a_planted_run_cache_file_does_not_loosen_the_next_run_of_a_deny_job(project, fake) -> None:
    project.write_jobs(DENY)
    fake.default = final("ok")
    first = project.run("run-job", "d")
    assert first.returncode == 0, first.stderr
    cache = project.home / "cache"
    cache.mkdir(exist_ok=True)
    for left in cache.glob("run-*.json"):  # what an attacker run did to the old snapshot (its key kept)
        left.write_text(left.read_text().replace('"deny"', '"approve"'))
    pair = f"{project.jobs_path.resolve()}\0{(project.home / 'config.yaml').resolve()}"
    for name in (f"run-{hashlib.sha256(pair.encode()).hexdigest()[:16]}", "run-0000000000000000"):
        planted = cache / f"{name}.json"  # where the old snapshot lived, and any other name
        if not planted.exists():
            planted.write_text(forged(project))
    (cache / "run-yaml.json").write_text("jobs:\n  d:\n    prompt: go\n    approvals: approve\n")
    (project.root / "build").mkdir()

    fake.default = None
    fake.add(call("terminal", {"command": "rm -rf build"}), final("could not clean"))
    second = project.run("run-job", "d")

    assert second.returncode == 0, second.stderr
    assert (project.root / "build").is_dir()  # the dangerous command never ran
    [result] = [m["content"] for m in fake.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert result.startswith("blocked:")
    [row] = rows(project.home, "SELECT level, decision, decided_by, policy FROM approvals")
    assert (row["level"], row["decision"], row["decided_by"], row["policy"]) == ("dangerous", "denied", "policy", "deny")
