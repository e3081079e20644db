"""Parked approvals through real processes: ``runner run-job`` without a TTY (stdin and stdout are
pipes) under ``approvals: manual`` parks on a dangerous command; another process answers with
``runner approvals grant | deny``; timeouts, hardline, cancel and the alert."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.testing import call, final
from tests.conftest import Project
from tests.receivers import Receiver
from tests.servehelp import rows, wait_for

SECRET = "sk-test-key-0123456789abcdef"  # the project's OPENAI_API_KEY: the redactor knows it


def manual_job(project: Project, extra: str = "") -> None:
    project.write_jobs(f"jobs:\n  m:\n    prompt: go\n    approvals: manual\n{extra}")


def runs_json(project: Project, *args: str) -> list[dict[str, Any]]:
    res = project.run("runs", "list", "--json", *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def pending(project: Project) -> list[dict[str, Any]]:
    res = project.run("approvals", "pending", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def wait_parked(project: Project, proc: subprocess.Popen[str]) -> dict[str, Any]:
    def parked() -> dict[str, Any] | None:
        assert proc.poll() is None, proc.communicate()
        found = rows(project.home, "SELECT * FROM approval_requests WHERE status='pending'")
        return found[0] if found else None

    return wait_for(parked, 30, what="the run to park on its approval")


def tool_results(fake: Any, n: int) -> list[str]:
    return [m["content"] for m in fake.requests[n]["body"]["messages"] if m["role"] == "tool"]


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def test_granted_from_another_process_runs_the_command(project: Project, fake: Any) -> None:
    (project.root / "build").mkdir()
    command = f"rm -rf build && echo {SECRET} > /dev/null"
    fake.add(call("terminal", {"command": command}), final("cleaned"))
    manual_job(project)
    proc = project.start_job("m", fake)
    request = wait_parked(project, proc)
    [shown] = pending(project)
    assert shown["id"] == request["id"] and shown["job"] == "m" and shown["run_id"] == request["run_id"]
    assert SECRET not in json.dumps(shown) and shown["command"].startswith("rm -rf build")
    assert shown["reasons"]
    listed = project.run("approvals", "pending").stdout
    assert request["id"] in listed and SECRET not in listed
    waiting = project.run("runs", "show", request["run_id"]).stdout
    assert f"waiting  for approval {request['id']}" in waiting and "status   waiting" in waiting
    assert f"runner approvals grant {request['id']}" in waiting and "rm -rf build" in waiting
    [listed_run] = runs_json(project)
    assert listed_run["status"] == "waiting" and listed_run["waiting_for"]["approval_id"] == request["id"]
    assert SECRET not in json.dumps(listed_run) and listed_run["waiting_for"]["command"].startswith("rm -rf build")
    assert [r["id"] for r in runs_json(project, "--status", "waiting")] == [request["run_id"]]
    assert runs_json(project, "--status", "running") == []
    table = project.run("runs", "list").stdout
    assert " waiting " in table

    res = project.run("approvals", "grant", request["id"])
    assert res.returncode == 0 and "granted by " in res.stdout
    code, out = finish(proc)
    assert code == 0, out
    assert not (project.root / "build").exists()
    [run] = rows(project.home)
    assert run["status"] == "succeeded"
    assert (run["iterations"], run["prompt_tokens"], run["completion_tokens"]) == (2, 200, 40)
    [audit] = rows(project.home, "SELECT * FROM approvals")
    assert audit["decision"] == "approved" and "@" in audit["decided_by"] and SECRET not in audit["command"]
    [answered] = rows(project.home, "SELECT * FROM approval_requests")
    assert answered["status"] == "granted" and answered["decided_by"] == audit["decided_by"] and answered["decided_at"]
    again = project.run("approvals", "grant", request["id"])
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0 and "already granted" in again.stderr


def test_denied_the_model_is_told_and_the_run_goes_on(project: Project, fake: Any) -> None:
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("left it"))
    manual_job(project)
    proc = project.start_job("m", fake)
    request = wait_parked(project, proc)
    res = project.run("approvals", "deny", request["id"], "--reason", "not today")
    assert res.returncode == 0, res.stderr
    code, out = finish(proc)
    assert code == 0, out
    assert (project.root / "build").exists()
    [result] = tool_results(fake, 1)
    assert result.startswith("blocked (denied by ") and "not today" in result
    assert rows(project.home)[0]["status"] == "succeeded"
    [audit] = rows(project.home, "SELECT * FROM approvals")
    assert audit["decision"] == "denied" and "@" in audit["decided_by"]


def test_no_answer_within_approval_timeout_denies_with_the_reason(project: Project, fake: Any) -> None:
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("gave up"))
    manual_job(project, "    approval_timeout: 1s\n")
    res = project.run("run-job", "m", stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert (project.root / "build").exists()
    [result] = tool_results(fake, 1)
    assert "no answer within approval_timeout 1s" in result
    [req] = rows(project.home, "SELECT * FROM approval_requests")
    assert (req["status"], req["decided_by"]) == ("expired", "timeout")
    assert rows(project.home, "SELECT decided_by FROM approvals")[0]["decided_by"] == "timeout"


def test_the_run_timeout_bounds_the_wait(project: Project, fake: Any) -> None:
    """The parked wait counts against the run's timeout: it ends before the run's own deadline."""
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("partial"))
    # 10 s: the run's start-up and first turn fit before it on a loaded machine (with 3 s a parallel
    # run timed out before it parked); the approval's own timeout is an hour
    manual_job(project, "    timeout: 10s\n")
    res = project.run("run-job", "m", stdin=subprocess.DEVNULL)
    assert (project.root / "build").exists()
    requests = rows(project.home, "SELECT * FROM approval_requests")
    assert len(requests) == 1, res.stderr  # it parked
    req = requests[0]
    assert req["status"] == "expired" and "the run's timeout came first" in req["reason"]
    [run] = rows(project.home)
    assert run["status"] == "timed_out", (run, res.stderr)


def test_hardline_is_refused_without_parking(project: Project, fake: Any) -> None:
    fake.add(call("terminal", {"command": "rm -rf /"}), final("refused"))
    manual_job(project)
    res = project.run("run-job", "m", stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert rows(project.home, "SELECT * FROM approval_requests") == []
    [audit] = rows(project.home, "SELECT * FROM approvals")
    assert (audit["level"], audit["decided_by"]) == ("hardline", "hardline")


def test_the_alert_names_the_grant_command(project: Project, fake: Any, tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.log"
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"alerts: ['file:{alerts}']\n")
    fake.add(call("terminal", {"command": f"rm -rf build; echo {SECRET}"}), final("ok"))
    manual_job(project)
    proc = project.start_job("m", fake)
    request = wait_parked(project, proc)
    text = wait_for(lambda: alerts.exists() and alerts.read_text(), 10, what="the alert file")
    assert f"runner approvals grant {request['id']}" in text and SECRET not in text
    project.run("approvals", "deny", request["id"])
    assert finish(proc)[0] == 0


def test_cancel_of_a_parked_run(project: Project, fake: Any) -> None:
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("never"))
    manual_job(project)
    proc = project.start_job("m", fake)
    request = wait_parked(project, proc)
    assert rows(project.home)[0]["status"] == "waiting"
    res = project.run("runs", "cancel", request["run_id"])
    assert res.returncode == 0, res.stderr
    code, out = finish(proc)
    assert code == 130, out
    assert (project.root / "build").exists() and len(fake.requests) == 1
    [run] = rows(project.home)
    assert (run["status"], run["reason"]) == ("interrupted", "cancelled") and "@" in run["error"]
    [req] = rows(project.home, "SELECT * FROM approval_requests")
    assert req["status"] == "cancelled" and "@" in req["decided_by"] and "cancelled by" in req["reason"]
    [audit] = rows(project.home, "SELECT * FROM approvals")
    assert (audit["decision"], audit["decided_by"]) == ("denied", "cancelled")
    assert pending(project) == []


def test_a_run_killed_while_parked_leaves_nothing_pending(project: Project, fake: Any) -> None:
    fake.add(call("terminal", {"command": "rm -rf build"}), final("never"))
    manual_job(project)
    proc = project.start_job("m", fake)
    request = wait_parked(project, proc)
    assert rows(project.home)[0]["status"] == "waiting"
    os.kill(proc.pid, signal.SIGKILL)  # the worker, by its pid, while its run waits
    proc.communicate(timeout=10)
    assert pending(project) == []  # opening the store recovered the lost run
    assert runs_json(project, "--status", "waiting") == []
    [run] = rows(project.home)
    assert (run["status"], run["reason"]) == ("unknown", "worker_lost")
    [req] = rows(project.home, "SELECT * FROM approval_requests")
    assert req["status"] == "abandoned"
    res = project.run("approvals", "grant", request["id"])
    assert res.returncode == 2 and "already abandoned" in res.stderr


def test_the_waiting_alert_goes_once_to_the_failure_sinks(project: Project, fake: Any) -> None:
    """``alerts_waiting`` unset: the failure alerts' sinks hear of the waiting run, once, with the
    (redacted) command, how to answer, and the run's dashboard page (``web.url``)."""
    receiver = Receiver().start()
    try:
        project.home.mkdir(parents=True, exist_ok=True)
        (project.home / "config.yaml").write_text(
            f"alerts: ['webhook:{receiver.url}/alerts']\nweb: {{url: 'https://runner.example.com/'}}\n"
        )
        fake.add(call("terminal", {"command": f"rm -rf build; echo {SECRET}"}), final("ok"))
        manual_job(project)
        proc = project.start_job("m", fake)
        request = wait_parked(project, proc)
        [got] = receiver.wait(1)
        body = got.json()
        assert (body["event"], body["status"], body["approval_id"]) == ("approval_needed", "waiting", request["id"])
        assert body["command"].startswith("rm -rf build") and SECRET not in got.body.decode()
        assert body["grant"] == f"runner approvals grant {request['id']}"
        assert body["url"] == f"https://runner.example.com/runs/{request['run_id']}"
        assert f"runner approvals deny {request['id']}" in body["note"] and body["url"] in body["note"]
        assert project.run("approvals", "deny", request["id"]).returncode == 0
        assert finish(proc)[0] == 0
        assert len(receiver.requests) == 1  # once per request; the run's success sends nothing
    finally:
        receiver.stop()


def test_alerts_waiting_false_tells_nobody(project: Project, fake: Any) -> None:
    receiver = Receiver().start()
    try:
        project.home.mkdir(parents=True, exist_ok=True)
        (project.home / "config.yaml").write_text(f"alerts: ['webhook:{receiver.url}']\nalerts_waiting: false\n")
        fake.add(call("terminal", {"command": "rm -rf build"}), final("ok"))
        manual_job(project)
        proc = project.start_job("m", fake)
        request = wait_parked(project, proc)
        assert project.run("approvals", "deny", request["id"]).returncode == 0
        assert finish(proc)[0] == 0
        assert receiver.requests == []
        events = rows(project.home, "SELECT kind FROM run_events WHERE kind='alert'")
        assert events == []
    finally:
        receiver.stop()


def test_alerts_waiting_names_its_own_sinks(project: Project, fake: Any) -> None:
    failures, waiting = Receiver().start(), Receiver().start()
    try:
        project.home.mkdir(parents=True, exist_ok=True)
        (project.home / "config.yaml").write_text(
            f"alerts: ['webhook:{failures.url}']\nalerts_waiting: ['webhook:{waiting.url}']\n"
        )
        fake.add(call("terminal", {"command": "rm -rf build"}), final("ok"))
        manual_job(project)
        proc = project.start_job("m", fake)
        request = wait_parked(project, proc)
        [got] = waiting.wait(1)
        assert got.json()["approval_id"] == request["id"]
        assert project.run("approvals", "deny", request["id"]).returncode == 0
        assert finish(proc)[0] == 0
        assert failures.requests == [] and len(waiting.requests) == 1
    finally:
        failures.stop()
        waiting.stop()


def test_turns_tokens_and_cost_count_up_while_the_run_goes(project: Project, fake: Any) -> None:
    """After each model reply the run's row has its turns, tokens and cost: seen while the model
    takes its time on the 2nd turn; at the end the totals are the run's as before."""
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"providers:\n  default:\n    base_url: {project.base_url}\n    model: m\n    api_keys: [env:OPENAI_API_KEY]\n"
        "    pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n"
    )
    fake.add(call("terminal", {"command": "echo hi"}), replace(final("done", usage=(300, 50)), hang=4.0))
    project.write_jobs("jobs:\n  c:\n    prompt: go\n")
    proc = project.start_job("c", fake)

    def between_turns() -> dict[str, Any] | None:
        found = runs_json(project)
        return found[0] if found and found[0]["iterations"] >= 1 and len(fake.requests) >= 2 else None

    live = wait_for(between_turns, 20, what="the 1st turn's counters while the 2nd is asked")
    assert live["status"] == "running" and live["iterations"] == 1
    assert (live["prompt_tokens"], live["completion_tokens"]) == (100, 20)
    assert live["cost_usd"] == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
    shown = project.run("runs", "show", live["id"]).stdout
    assert "turns 1" in shown and "tokens 100+20" in shown
    code, out = finish(proc)
    assert code == 0, out
    [run] = rows(project.home)
    assert (run["status"], run["iterations"], run["prompt_tokens"], run["completion_tokens"]) == ("succeeded", 2, 400, 70)
    assert run["cost_usd"] == pytest.approx((400 * 1.0 + 70 * 2.0) / 1e6)
