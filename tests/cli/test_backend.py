"""`runner backend run` and `runner doctor` as a user runs them."""

import json


def test_backend_run_prints_output_and_exits_with_its_code(project):
    res = project.run("backend", "run", "local", "--", "echo out; echo err >&2; exit 7")
    assert res.returncode == 7
    assert res.stdout == "out\nerr\n"


def test_backend_run_bad_spec_is_exit_2(project):
    res = project.run("backend", "run", "teleport:x", "--", "true")
    assert res.returncode == 2
    assert "known types" in res.stderr and "Traceback" not in res.stderr


def test_backend_run_timeout(project):
    res = project.run("backend", "run", "--timeout", "1", "local", "--", "sleep 30")
    assert res.returncode == 124 and "timed out" in res.stderr


def test_doctor_reports_and_fails_without_a_model(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    ok = project.run("doctor", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    checks = {c["check"]: c for c in json.loads(ok.stdout)}
    assert checks["backend local"]["ok"] and checks["jobs.yaml"]["ok"]
    env = project.env()
    env.pop("OPENAI_API_KEY")
    env.pop("OPENAI_BASE_URL")
    bad = project.run("doctor", env=env)
    assert bad.returncode == 1 and "BAD  model" in bad.stdout
