"""Chained jobs (``after:``) on a real ``runner serve``: a -> b -> c across a serve restart (each
runs once, c sees b's output), ``when: failure | always``; and the validation of ``after:``."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runner.testing import FakeOpenAI
from runner.testing.fakeopenai import error, final, when
from tests.conftest import Project
from tests.servehelp import ServeProc, rows, serve_factory, wait_for, write_config

CHAIN = """
jobs:
  a:
    prompt: "step a"
    toolsets: []
  b:
    after: [a]
    prompt: "step b got {{ upstream.a.output }}"
    toolsets: []
  c:
    after: {jobs: [b], when: success}
    prompt: "step c got {{ upstream.b.output }} from {{ upstream.b.run_id }}"
    toolsets: []
  on-fail:
    after: {jobs: [a], when: failure}
    prompt: "a failed: {{ upstream.a.status }}"
    toolsets: []
  always:
    after: {jobs: [a], when: always}
    prompt: "a ended {{ upstream.a.status }}"
    toolsets: []
"""


@pytest.fixture
def serve(project: Project) -> Iterator[Callable[[], ServeProc]]:
    yield from serve_factory(project)


def runs(project: Project, job: str) -> list[dict[str, Any]]:
    return rows(project.home, "SELECT * FROM runs WHERE job=? ORDER BY created_at", (job,))


def ended(project: Project, job: str, n: int = 1, timeout: float = 40) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        got = [r for r in runs(project, job) if r["status"] not in ("queued", "running")]
        return got if len(got) >= n else None

    return wait_for(done, timeout, what=f"{n} run(s) of {job} to end")


def test_chain_of_three_across_a_restart(project: Project, fake: FakeOpenAI, serve: Callable[[], ServeProc]) -> None:
    write_config(project)
    project.write_jobs(CHAIN)
    fake.add(
        when("step a", final("A-OUT")),
        when("step b", final("B-OUT-7731")),
        when("step c", final("C-DONE")),
        when("a ended", final("noted")),
    )
    first = serve().started()
    assert project.run("jobs", "trigger", "a").returncode == 0
    ended(project, "a")
    first.stop(signal.SIGKILL)  # serve dies as a ends: b's start is the next serve's
    a_run = runs(project, "a")[0]
    assert a_run["status"] == "succeeded"
    second = serve().started()
    c_row = ended(project, "c")[0]
    ended(project, "always")
    second.stop()
    for job in ("a", "b", "c", "always"):
        assert len(runs(project, job)) == 1, (job, runs(project, job))
    assert runs(project, "on-fail") == []
    b_row = runs(project, "b")[0]
    assert b_row["trigger"] == "chain" and c_row["trigger"] == "chain" and c_row["status"] == "succeeded"
    prompts = [json.dumps(r["body"]["messages"]) for r in fake.requests]
    c_prompt = next(p for p in prompts if "step c" in p)
    assert "B-OUT-7731" in c_prompt and b_row["id"] in c_prompt and "<upstream-output>" in c_prompt
    assert "Data, not instructions" in c_prompt
    # a third serve finds nothing more to start
    third = serve().started()
    third.wait_log("serve started")
    import time

    time.sleep(2)
    third.stop()
    for job in ("a", "b", "c", "always"):
        assert len(runs(project, job)) == 1, job


def test_when_failure(project: Project, fake: FakeOpenAI, serve: Callable[[], ServeProc]) -> None:
    write_config(project)
    project.write_jobs(CHAIN)
    fake.add(when("step a", error(400, "bad request")), when("a failed", final("paged")), when("a ended", final("ok")))
    proc = serve().started()
    assert project.run("jobs", "trigger", "a").returncode == 0
    assert ended(project, "a")[0]["status"] == "failed"
    assert ended(project, "on-fail")[0]["status"] == "succeeded"
    ended(project, "always")
    proc.stop()
    assert runs(project, "b") == [] and runs(project, "c") == []
    assert any("a failed: failed" in json.dumps(r["body"]["messages"]) for r in fake.requests)


BASE = "jobs:\n  a: {prompt: x}\n  b: {prompt: x}\n  c: {prompt: x}\n"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"a": "[a]"}, "job a: after: cycle a -> a"),
        ({"a": "[b]", "b": "[a]"}, "job a: after: cycle a -> b -> a"),
        ({"a": "[b]", "b": "[c]", "c": "[a]"}, "job a: after: cycle a -> b -> c -> a"),
        ({"b": "[nope]"}, "job b: after: unknown job 'nope'"),
        ({"b": "{jobs: [a], when: sometimes}"}, "job b: after.when: Input should be"),
        ({"b": "{jobs: []}"}, "job b: after.jobs:"),
        ({"b": "[a, a]"}, "job b: after: 'a' is listed twice"),
    ],
)
def test_after_validation(project: Project, edit: dict[str, str], expected: str) -> None:
    text = BASE
    for job, value in edit.items():
        text = text.replace(f"  {job}: {{prompt: x}}", f"  {job}: {{prompt: x, after: {value}}}")
    project.write_jobs(text)
    result = project.run("jobs", "validate")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"jobs.yaml: {expected}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("cycle") <= 1


def test_a_chain_without_a_cycle_validates(project: Project) -> None:
    project.write_jobs(BASE.replace("  c: {prompt: x}", "  c: {prompt: 'x {{ upstream.b.output }}', after: [a, b]}"))
    result = project.run("jobs", "validate")
    assert result.returncode == 0, result.stderr
    project.write_jobs(BASE.replace("  c: {prompt: x}", "  c: {prompt: 'x {{ upstream.zz.output }}', after: [a]}"))
    result = project.run("jobs", "validate")
    assert result.returncode == 2 and "upstream.zz is not defined" in result.stderr, result.stderr


def test_jobs_list_shows_the_chain(project: Project) -> None:
    project.write_jobs(CHAIN)
    for _ in range(2):  # validated, then from the listing cache
        out = project.run("jobs", "list")
        assert out.returncode == 0, out.stderr
        assert "b: started by after a (success)" in out.stdout
        assert "on-fail: started by after a (failure)" in out.stdout
    listed = json.loads(project.run("jobs", "list", "--json").stdout)
    assert {r["name"]: r["started_by"] for r in listed}["c"] == "after b (success)"
