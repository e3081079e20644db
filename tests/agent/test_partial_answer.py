"""A partial answer on every limit: when a budget, the wall timeout, the idle timeout or the loop
breaker stops a run, one bounded grace call without tools asks the model for a report; the run
keeps its failing status and reason, the report is its output file, `runs show` prints it and the
alert carries it. Summary calls count in the run's tokens. Real `runner run-job`, FakeOpenAI."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner.agent.loop import GRACE_MAX_TOKENS, GRACE_PROMPT, grace_reserve
from runner.testing import call, final, hang
from tests.receivers import Receiver
from tests.servehelp import in_a_tool_call

PARTIAL = "Done: listed the files. Left: write the report."


def config(project, fake, extra: str = "", **provider) -> None:
    lines = "".join(f"    {k}: {v}\n" for k, v in provider.items())
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"providers:\n  default:\n    base_url: {fake.base_url}\n    api_keys: [env:OPENAI_API_KEY]\n{lines}{extra}"
    )


def last_run(project) -> dict:
    db = project.db()
    db.row_factory = sqlite3.Row
    return dict(db.execute("SELECT * FROM runs ORDER BY created_at DESC LIMIT 1").fetchone())


def events(project, run_id: str) -> list[tuple[str, dict]]:
    db = project.db()
    rows = db.execute("SELECT kind, payload FROM run_events WHERE run_id=? ORDER BY seq", (run_id,))
    return [(k, json.loads(p)) for k, p in rows]


def assert_partial(project, fake, status: str, reason: str) -> dict:
    """The run ended ``status``/``reason``, its output file is the grace answer, and the grace
    request (the last one) had no tools, a small max_tokens and the grace prompt."""
    row = last_run(project)
    assert (row["status"], row["reason"]) == (status, reason), row
    assert Path(row["output_path"]).read_text() == PARTIAL
    grace = fake.requests[-1]["body"]
    assert "tools" not in grace and grace["max_tokens"] == GRACE_MAX_TOKENS
    assert grace["messages"][-1]["content"].startswith(GRACE_PROMPT.split("(")[0])
    kinds = [k for k, _ in events(project, row["id"])]
    assert kinds.index("limit") < kinds.index("grace") < len(kinds) - 1 - kinds[::-1].index("response")
    return row


def test_token_budget_ends_with_a_partial_answer(project, fake):
    fake.add(*[call("terminal", {"command": f"echo {i}"}) for i in range(3)], final(PARTIAL), final("never"))
    project.write_jobs("jobs:\n  b:\n    prompt: go\n    toolsets: [terminal]\n    budget: {max_tokens: 250}\n")
    res = project.run("run-job", "b")
    assert res.returncode == 1, res.stderr
    row = assert_partial(project, fake, "failed", "budget_tokens")
    assert len(fake.requests) == 4  # 3 turns (120 tokens each), then the grace call
    assert row["prompt_tokens"] + row["completion_tokens"] == 4 * 120  # the grace call counts too
    show = project.run("runs", "show", row["id"])
    assert "partial answer" in show.stdout and PARTIAL in show.stdout


def test_cost_budget_ends_with_a_partial_answer(project, fake):
    config(project, fake, pricing="{input_per_mtok: 1000, output_per_mtok: 1000}")
    fake.add(*[call("terminal", {"command": f"echo {i}"}) for i in range(5)])
    project.write_jobs("jobs:\n  c:\n    prompt: go\n    toolsets: [terminal]\n    budget: {max_cost_usd: 0.25}\n")
    fake.script.insert(3, final(PARTIAL))  # 0.12 per turn: the 3rd turn passes 0.25, the 4th request is grace
    assert project.run("run-job", "c").returncode == 1
    assert_partial(project, fake, "failed", "budget_cost")
    assert len(fake.requests) == 4


def test_loop_breaker_ends_with_a_partial_answer(project, fake):
    third = call("no_such_tool", {"x": 1}, ("terminal", {"command": "touch ran.txt"}))
    fake.add(call("no_such_tool", {"x": 1}), call("no_such_tool", {"x": 1}), third, final(PARTIAL))
    project.write_jobs("jobs:\n  l:\n    prompt: go\n    toolsets: [terminal]\n")
    assert project.run("run-job", "l").returncode == 1
    assert_partial(project, fake, "failed", "loop")
    assert len(fake.requests) == 4
    assert not (project.root / "ran.txt").exists()  # the call after the breaker did not run ...
    results = [m["content"] for m in fake.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert results[-1].startswith("not run: the same failing call")  # ... and still has a result


def test_idle_timeout_ends_with_a_partial_answer(project, fake):
    config(project, fake, retry_backoff=0.01, max_retries=0)
    fake.add(hang(60), final(PARTIAL))
    project.write_jobs("jobs:\n  i:\n    prompt: go\n    idle_timeout: 1s\n")
    started = time.monotonic()
    assert project.run("run-job", "i").returncode == 1
    assert time.monotonic() - started < 30  # cut by the 1 s idle timeout, not the 60 s answer
    assert_partial(project, fake, "timed_out", "idle_timeout")


def test_wall_timeout_keeps_a_reserve_for_the_grace_call(project, fake):
    """timeout 10s: the model call is cut at 10 - 1 s; the grace call fits before 10 s."""
    assert grace_reserve(10) == pytest.approx(1.0) and grace_reserve(3600) == 60
    config(project, fake, retry_backoff=0.01)
    fake.add(hang(30), final(PARTIAL))
    project.write_jobs("jobs:\n  t:\n    prompt: go\n    timeout: 10s\n")
    res = project.run("run-job", "t")
    exited = datetime.now(UTC)
    assert res.returncode == 1, res.stderr
    row = assert_partial(project, fake, "timed_out", "timeout")
    # from the run's start (not the interpreter's, which a loaded machine can make seconds long)
    # to the process's exit: the 10 s timeout, the grace call inside it, then the run's end
    took = (exited - datetime.fromisoformat(row["started_at"])).total_seconds()
    assert took < 13, took
    finished = [p for k, p in events(project, row["id"]) if k == "run_finished"]
    assert 8.9 <= finished[0]["seconds"] <= 10.0  # the loop stopped at the reserve, the grace call before the end


def test_grace_call_is_skipped_when_no_time_is_left(project, fake):
    """timeout 2s keeps 0.2 s: less than a grace call needs, so none is made and the output is empty."""
    fake.add(call("terminal", {"command": "sleep 30"}), final("never asked"))
    project.write_jobs("jobs:\n  t:\n    prompt: go\n    toolsets: [terminal]\n    timeout: 2s\n")
    assert project.run("run-job", "t").returncode == 1
    row = last_run(project)
    assert (row["status"], row["reason"], row["output_path"]) == ("timed_out", "timeout", None)
    assert len(fake.requests) == 1
    assert "grace_skipped" in [k for k, _ in events(project, row["id"])]


def test_the_alert_carries_the_partial_answer(project, fake, receiver: Receiver):
    config(project, fake, extra="delivery: {attempts: 1, backoff: 0.05, max_backoff: 1, timeout: 5}\n")
    fake.add(*[call("no_such_tool", {}) for _ in range(3)], final(PARTIAL))
    project.write_jobs(f"jobs:\n  a:\n    prompt: go\n    on_failure: ['webhook:{receiver.url}/alerts']\n")
    assert project.run("run-job", "a").returncode == 1
    [req] = receiver.wait(1)
    alert = req.json()
    assert (alert["status"], alert["reason"]) == ("failed", "loop")
    assert PARTIAL in alert["tail"]


def test_interrupt_makes_no_grace_call(project, fake):
    import signal

    fake.add(call("terminal", {"command": "sleep 3"}), final("never asked"))
    project.write_jobs("jobs:\n  s:\n    prompt: go\n    toolsets: [terminal]\n")
    proc = project.start_job("s", fake)
    in_a_tool_call(project.home)  # the signal comes during the command, well before the run could ask again
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 130 and len(fake.requests) == 1


def test_summary_calls_count_in_the_run_tokens_and_are_events(project, fake):
    """``summarize: true`` with a small context budget: the summary request (no tools) is counted."""
    from runner.testing import Reply

    # each reply has text and a tool call: a turn runs the call, a summary request keeps the text
    fake.add(
        *[
            Reply(
                content=f"- summary {i}: ran echo",
                tool_calls=[("terminal", {"command": f"echo {i}; head -c 6000 /dev/zero | tr '\\0' x"})],
            )
            for i in range(8)
        ],
    )
    fake.default = final("done")
    project.write_jobs(
        "jobs:\n  s:\n    prompt: go\n    toolsets: [terminal]\n    summarize: true\n    context_budget: 3000\n"
    )
    res = project.run("run-job", "s")
    assert res.returncode == 0, res.stderr
    row = last_run(project)
    evs = events(project, row["id"])
    summaries = [p for k, p in evs if k == "summary"]
    responses = [p for k, p in evs if k == "response"]
    assert summaries, [k for k, _ in evs]
    summary_requests = [r for r in fake.requests if r["body"]["messages"][0]["content"].startswith("Summarise")]
    assert len(summary_requests) == len(summaries) and all("tools" not in r["body"] for r in summary_requests)
    assert len(fake.requests) == len(responses) + len(summaries)
    total = row["prompt_tokens"] + row["completion_tokens"]
    assert total == 120 * len(fake.requests)  # every request, summaries included, is in the run's tokens
