"""`runner init` round trip through the real CLI: the files it writes validate, the sample job
runs offline from its cassette, a non-empty folder is refused with one line and left alone."""

from __future__ import annotations

import subprocess
import sys

from runner.cli.scaffold import FILES


def _runner(project, *args, cwd):
    env = project.env()
    env.pop("OPENAI_BASE_URL")
    env.pop("OPENAI_API_KEY")
    env.pop("RUNNER_JOBS")  # the new project's ./jobs.yaml
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_init_writes_a_project_that_validates_and_runs_offline(project, tmp_path):
    target = tmp_path / "new" / "proj"
    res = _runner(project, "init", str(target), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()) == sorted(FILES)
    assert all(line.lstrip().startswith("#") for line in (target / "config.yaml").read_text().splitlines()[:3])
    checked = _runner(project, "jobs", "validate", cwd=target)  # config.yaml beside jobs.yaml is read
    assert checked.returncode == 0 and "1 jobs, all valid" in checked.stdout, checked.stderr
    ran = _runner(project, "run-job", "hello", "--replay", "jobs/cassettes/hello.yaml", cwd=target)
    assert ran.returncode == 0, ran.stderr
    assert "new runner project" in ran.stdout
    doctor = _runner(project, "doctor", cwd=target)
    assert f"{target / 'config.yaml'} (beside jobs.yaml)" in doctor.stdout, doctor.stdout
    listed = _runner(project, "runs", "list", "--json", cwd=target)
    assert '"status": "succeeded"' in listed.stdout


def test_init_in_an_empty_folder_here(project, tmp_path):
    here = tmp_path / "empty"
    here.mkdir()
    res = _runner(project, "init", cwd=here)
    assert res.returncode == 0, res.stderr
    assert (here / "jobs.yaml").exists() and (here / "jobs" / "cassettes" / "hello.yaml").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".runner-init-")]


def test_init_refuses_a_folder_with_anything_in_it(project, tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    res = _runner(project, "init", str(target), cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "not empty" in res.stderr and str(target) in res.stderr
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = _runner(project, "init", str(afile), cwd=tmp_path)
    assert res.returncode == 2 and "not a folder" in res.stderr and "Traceback" not in res.stderr
