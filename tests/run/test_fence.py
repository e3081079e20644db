"""A run fenced by the ledger (issue 37, Deliver 3): when another process declares its run lost
(serve, after its worker stopped sending heartbeats: the retry policy takes over), the run's own
process sees it at once, cuts its current step (the command is ended: its side effect never
happens), stops, delivers nothing and leaves the verdict standing."""

from __future__ import annotations

import json
import subprocess
import time

from runner.store import ledger
from runner.testing import call, final
from tests.servehelp import marker, rows, sleeping, wait_for


def test_a_run_declared_lost_stops_itself_and_delivers_nothing(project, fake):
    fake.add(call("terminal", {"command": "sleep 3; echo step-done"}), final("the answer that must not land"))
    project.write_jobs("jobs:\n  fenced:\n    prompt: go\n    toolsets: [terminal]\n    deliver: [file]\n")
    proc = project.start_job("fenced", fake)
    run = wait_for(lambda: rows(project.home, "SELECT * FROM runs WHERE status='running'"), 20)[0]
    store = project.open_store()
    try:
        assert ledger.declare_lost(store, run["id"], error="worker w1 stopped sending heartbeats")
    finally:
        store.close()
    proc.wait(timeout=30)
    [row] = rows(project.home, "SELECT * FROM runs")
    assert (row["status"], row["reason"]) == ("unknown", "worker_lost")  # the verdict stands
    assert len(fake.requests) == 1  # it asked the model nothing after it was fenced
    assert not (project.home / "outputs" / "fenced").exists() or not any((project.home / "outputs" / "fenced").iterdir())
    kinds = [r["kind"] for r in rows(project.home, "SELECT kind FROM run_events ORDER BY seq")]
    assert "fenced" in kinds, kinds
    fenced = rows(project.home, "SELECT payload FROM run_events WHERE kind='fenced'")[0]
    assert json.loads(fenced["payload"])["reason"] == "worker_lost"


def test_a_run_declared_lost_cuts_its_command(project, fake):
    """The command in flight when the verdict lands is cut (SIGTERM, SIGKILL after kill_grace): the
    file it would write after its sleep never appears, and run-job ends within kill_grace + 1 s."""
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text("serve: {kill_grace: 2}\n")
    mark, side = marker(60), project.root / "side-effect"
    fake.add(call("terminal", {"command": f"sleep {mark} && touch {side}"}), final("the answer that must not land"))
    project.write_jobs("jobs:\n  fenced:\n    prompt: go\n    toolsets: [terminal]\n    deliver: [file]\n")
    proc = project.start_job("fenced", fake)
    run = wait_for(lambda: rows(project.home, "SELECT * FROM runs WHERE status='running'"), 20)[0]
    wait_for(lambda: sleeping(mark), 20, what="the command's sleep")
    store = project.open_store()
    try:
        assert ledger.declare_lost(store, run["id"], error="worker w1 stopped sending heartbeats")
    finally:
        store.close()
    declared = time.monotonic()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert time.monotonic() - declared < 3, "the fenced run did not stop within kill_grace + 1 s"
    [row] = rows(project.home, "SELECT * FROM runs")
    assert (row["status"], row["reason"]) == ("unknown", "worker_lost")
    assert not sleeping(mark) and not side.exists() and len(fake.requests) == 1
    result = json.loads(rows(project.home, "SELECT payload FROM run_events WHERE kind='tool_result'")[0]["payload"])
    assert result["cut"] is True
