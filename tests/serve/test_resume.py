"""Durable runs under `runner serve` (issue 33): the worker running a 6-turn run is killed with
SIGKILL after turn 3; serve's recovery (worker_died) makes a new attempt at once that resumes from
the journal: the model is not asked again for turns 1-3, their commands do not run again, the
output is delivered once. ``resume: off`` keeps the old behaviour (no resume; a retry starts over)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from runner.testing import call, final, hang
from tests.servehelp import rows, serve_factory, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


JOB = """
jobs:
  durable:
    prompt: go
    toolsets: [terminal]
    workdir: {workdir}
    deliver: ["webhook:{url}"]
{extra}"""


def _script(fake, marker, after_hang):
    for n in (1, 2, 3):
        fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    fake.add(hang(60))
    for reply in after_hang:
        fake.add(reply)


def _kill_at_turn_4(project, fake):
    wait_for(lambda: len(fake.requests) >= 4, 40, what="turn 4's request")
    [row] = rows(project.home, "SELECT * FROM runs")
    os.kill(int(row["pid"]), signal.SIGKILL)
    return row, time.monotonic()


def test_serve_resumes_a_run_whose_worker_was_killed(project, fake, serve, receiver, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "marker.txt"
    _script(fake, marker, [call("terminal", {"command": f"echo turn-{n} >> {marker}"}) for n in (4, 5)] + [final("six")])
    write_config(project)
    project.write_jobs(JOB.format(workdir=work, url=receiver.url, extra=""))
    daemon = serve().started()
    assert project.run("jobs", "trigger", "durable").returncode == 0
    first, killed = _kill_at_turn_4(project, fake)
    wait_for(lambda: len(fake.requests) >= 5, 20, what="the resumed attempt to ask turn 4")
    print(f"\nresume latency after kill -9 under serve: {time.monotonic() - killed:.2f} s (to turn 4 asked again)")
    assert time.monotonic() - killed < 10
    wait_for(lambda: receiver.requests, 30, what="the delivery")
    runs = wait_for(
        lambda: [r for r in rows(project.home, "SELECT * FROM runs ORDER BY attempt") if r["status"] == "succeeded"]
        and rows(project.home, "SELECT * FROM runs ORDER BY attempt"),
        30,
    )
    assert daemon.stop() == 0
    assert [(r["attempt"], r["status"], r["reason"]) for r in runs] == [
        (1, "failed", "worker_died"),
        (2, "succeeded", None),
    ]
    assert runs[1]["parent_run"] == first["id"]
    assert marker.read_text().splitlines() == [f"turn-{n}" for n in range(1, 6)]
    assert [len(r["body"]["messages"]) for r in fake.requests] == [2, 4, 6, 8, 8, 10, 12]
    assert len(receiver.requests) == 1
    [resumed] = rows(project.home, "SELECT payload FROM run_events WHERE kind='resumed'")
    assert json.loads(resumed["payload"])["turn"] == 3


def test_resume_off_starts_over(project, fake, serve, receiver, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "marker.txt"
    again = [call("terminal", {"command": f"echo again >> {marker}"}), final("over")]
    _script(fake, marker, again)
    write_config(project)
    extra = "    resume: off\n    retries: {attempts: 1, backoff: 1s}\n"
    project.write_jobs(JOB.format(workdir=work, url=receiver.url, extra=extra))
    daemon = serve().started()
    assert project.run("jobs", "trigger", "durable").returncode == 0
    _kill_at_turn_4(project, fake)
    runs = wait_for(
        lambda: (r := rows(project.home, "SELECT * FROM runs ORDER BY attempt")) and r[-1]["status"] == "succeeded" and r,
        40,
    )
    assert daemon.stop() == 0
    assert [r["attempt"] for r in runs] == [1, 2]
    assert not rows(project.home, "SELECT * FROM run_events WHERE kind='resumed'")
    assert [len(r["body"]["messages"]) for r in fake.requests][4] == 2  # the retry asked turn 1 again
    assert marker.read_text().splitlines() == ["turn-1", "turn-2", "turn-3", "again"]
