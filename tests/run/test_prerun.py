"""pre_run results count (issue 32.6), through the real `runner run-job` with real shell
commands and the fake model: ``pre_run_failure: fail | inform | ignore``, a pre_run past its
``pre_run_timeout``, ``skip_when_empty``, stderr kept apart from ``pre_run.stdout``, the failure
alert to a local receiver, and the ``[SILENT]`` rule (a table against a local sink, and properties)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.run.prerun import STDERR_CHARS, STDERR_LINES, Split, _tail
from runner.silent import SILENT, is_silent
from runner.testing import final
from tests.receivers import Receiver
from tests.run.test_run_job import events, runs

FAILING = "echo partial; echo oops >&2; exit 3"
TEMPLATE = "'out=[{{ pre_run.stdout | trim }}] err=[{{ pre_run.stderr }}] code={{ pre_run.exit_code }}'"


def job(policy: str | None = None, pre_run: str = FAILING, extra: str = "") -> str:
    lines = ["jobs:", "  p:", f"    prompt: {TEMPLATE}", f"    pre_run: {json.dumps(pre_run)}", "    toolsets: []"]
    if policy is not None:
        lines.append(f"    pre_run_failure: {policy}")
    return "\n".join(lines) + "\n" + extra


def user_prompt(fake) -> str:
    return str(fake.requests[0]["body"]["messages"][1]["content"])


def test_fail_is_the_default_no_model_call_and_the_alert_names_the_stderr(project, fake, receiver: Receiver):
    project.write_jobs(job(extra=f"    on_failure: ['webhook:{receiver.url}/alerts']\n"))
    res = project.run("run-job", "p", "--json")
    assert res.returncode == 1, res.stderr
    [row] = runs(project)
    assert (row["status"], row["reason"]) == ("failed", "pre_run")
    assert row["error"] == "pre_run exited 3; stderr: oops"
    assert json.loads(res.stdout)["error"] == row["error"]
    assert fake.requests == []  # the model was never asked
    [alert] = [r.json() for r in receiver.wait(1)]
    assert (alert["event"], alert["status"], alert["reason"]) == ("failed", "failed", "pre_run")
    assert alert["error"] == "pre_run exited 3; stderr: oops" and "partial" in alert["tail"]
    [pre] = [p for k, p in events(project, row["id"]) if k == "pre_run"]
    assert (pre["exit_code"], pre["stdout"], pre["stderr"]) == (3, "partial\n", "oops")


def test_inform_tells_the_model_in_a_marked_section(project, fake):
    fake.add(final("told"))
    project.write_jobs(job("inform"))
    res = project.run("run-job", "p")
    assert res.returncode == 0, res.stderr
    assert runs(project)[0]["status"] == "succeeded"
    prompt = user_prompt(fake)
    assert prompt.startswith("out=[partial] err=[oops] code=3\n\n## pre_run failed (exit 3)\n")
    assert prompt.endswith("The end of its stderr:\n```\noops\n```")


def test_ignore_is_the_old_behaviour_and_stdout_holds_no_stderr(project, fake):
    fake.add(final("fine"))
    project.write_jobs(job("ignore"))
    assert project.run("run-job", "p").returncode == 0
    assert user_prompt(fake) == "out=[partial] err=[oops] code=3"
    assert runs(project)[0]["status"] == "succeeded"


def test_the_stderr_tail_is_its_last_lines_redacted(project, fake):
    key = "sk-live-0123456789abcdef0123456789"
    script = f"for i in $(seq 1 30); do echo line-$i >&2; done; echo 'key {key}' >&2; exit 1"
    project.write_jobs(job(pre_run=script))
    assert project.run("run-job", "p").returncode == 1
    [row] = runs(project)
    lines = row["error"].splitlines()
    assert lines[0] == "pre_run exited 1; stderr, last lines:"
    assert lines[1:-1] == [f"line-{i}" for i in range(12, 31)] and len(lines) - 1 == STDERR_LINES
    assert key not in row["error"] and "[REDACTED]" in lines[-1]


@pytest.mark.parametrize(
    ("policy", "status", "asked"), [("fail", "failed", False), ("inform", "succeeded", True), ("ignore", "succeeded", True)]
)
def test_a_pre_run_past_its_timeout_counts_as_a_failure(project, fake, policy, status, asked):
    fake.add(final("ok"))
    project.write_jobs(job(policy, pre_run="echo early; echo stuck >&2; sleep 30", extra="    pre_run_timeout: 1s\n"))
    res = project.run("run-job", "p")
    [row] = runs(project)
    assert row["status"] == status, res.stderr
    assert bool(fake.requests) is asked
    if policy == "fail":
        assert (row["reason"], row["error"]) == ("pre_run", "pre_run timed out after 1s; stderr: stuck")
    if policy == "inform":
        assert "## pre_run failed (timed out after 1s)\n" in user_prompt(fake) and "stuck" in user_prompt(fake)


def test_the_runs_own_timeout_during_pre_run_stays_timed_out(project, fake):
    project.write_jobs(job(pre_run="sleep 30", extra="    timeout: 1s\n    pre_run_failure: ignore\n"))
    assert project.run("run-job", "p").returncode == 1
    [row] = runs(project)
    assert (row["status"], row["reason"]) == ("timed_out", "timeout") and fake.requests == []


@pytest.mark.parametrize(("printed", "skipped"), [("printf '  \\n\\n'", True), ("echo >&2 only-stderr", True), ("echo news", False)])
def test_skip_when_empty(project, fake, printed, skipped):
    fake.add(final("ok"))
    project.write_jobs(job(pre_run=printed, extra="    skip_when_empty: true\n"))
    res = project.run("run-job", "p")
    assert res.returncode == 0, res.stderr
    [row] = runs(project)
    if skipped:
        assert (row["status"], row["reason"]) == ("skipped", "pre_run_empty")
        assert row["error"] == "pre_run printed nothing (skip_when_empty: true)"
        assert fake.requests == []
    else:
        assert row["status"] == "succeeded" and len(fake.requests) == 1


def test_inform_with_an_empty_stdout_still_asks_the_model(project, fake):
    fake.add(final("told"))
    project.write_jobs(job("inform", pre_run="echo broken >&2; exit 2", extra="    skip_when_empty: true\n"))
    assert project.run("run-job", "p").returncode == 0
    assert "## pre_run failed (exit 2)" in user_prompt(fake)


def test_a_script_only_job_fails_on_its_pre_run_whatever_the_policy(project):
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'echo bad >&2; exit 4'\n    pre_run_failure: ignore\n")
    assert project.run("run-job", "s").returncode == 1
    [row] = runs(project)
    assert (row["status"], row["reason"], row["error"]) == ("failed", "pre_run", "pre_run exited 4; stderr: bad")


def test_bad_values_are_one_line_exit_2(project):
    project.write_jobs(job("sometimes"))
    res = project.run("jobs", "validate")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "job p: pre_run_failure: Input should be 'fail', 'inform' or 'ignore'" in res.stderr
    project.write_jobs(job(extra="    skip_when_empty: perhaps\n"))
    res = project.run("run-job", "p")
    assert res.returncode == 2 and "job p: skip_when_empty: Input should be a valid boolean" in res.stderr
    assert runs(project) == []


# -- [SILENT] ---------------------------------------------------------------------------------
SILENT_CASES = [
    ("[SILENT]", True),
    ("[SILENT] No changes detected", True),
    ("\n\n  [SILENT]\nnothing new since yesterday\n", True),
    ("[SILENT]\n", True),
    ("Report\n[SILENT]\n", False),  # not the first line
    ("[SILENT No changes", False),  # a typo
    ("[silent]", False),
    ("**[SILENT]**", False),
]


@pytest.mark.parametrize(("text", "silent"), SILENT_CASES)
def test_silent_outputs_are_not_delivered(project, receiver: Receiver, text, silent):
    project.write("out.txt", text)
    project.write_jobs(f"jobs:\n  s:\n    agent: false\n    pre_run: cat out.txt\n    deliver: ['webhook:{receiver.url}/d']\n")
    res = project.run("run-job", "s", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["silent"] is silent
    if silent:
        assert receiver.requests == []
    else:
        [got] = receiver.wait(1)
        assert got.json()["output"] == text


def test_an_agent_answer_with_the_silent_prefix_is_kept_not_delivered(project, fake, receiver: Receiver):
    fake.add(final("[SILENT] No changes detected"))
    project.write_jobs(f"jobs:\n  a:\n    prompt: check\n    toolsets: []\n    deliver: [file, 'webhook:{receiver.url}/d']\n")
    res = project.run("run-job", "a")
    assert res.returncode == 0, res.stderr
    assert "[SILENT: nothing delivered]" in res.stderr and receiver.requests == []
    [row] = runs(project)
    assert (project.home / "outputs" / "a" / f"{row['id']}.md").read_text() == "[SILENT] No changes detected"


@given(st.text(alphabet=" \t\r\n", max_size=5), st.text(max_size=40))
def test_silent_prefix_after_any_leading_whitespace(space, rest):
    assert is_silent(space + SILENT + rest)


@given(st.text(min_size=1, max_size=40), st.text(max_size=40))
def test_silent_only_on_the_first_non_empty_line(first, rest):
    if first.strip() and not first.lstrip().startswith(SILENT) and "\n" not in first:
        assert not is_silent(f"{first}\n{SILENT}\n{rest}")


# -- the stderr split (a parser of the wrapped command's output) -------------------------------
NONCE = "0123456789abcdef"


@given(st.text(max_size=200), st.text(max_size=200))
def test_split_gives_back_stdout_and_stderr(stdout, stderr):
    split = Split(NONCE)
    assert split.parts(f"{stdout}\n{split.marker}\n{stderr}") == (stdout, stderr)
    if split.marker not in stdout:
        assert split.parts(stdout) == (stdout, "")


@given(st.text(max_size=5000))
def test_the_tail_is_a_bounded_suffix(text):
    tail = _tail(text)
    assert len(tail) <= STDERR_CHARS and len(tail.split("\n")) <= STDERR_LINES
    assert text.rstrip("\n").endswith(tail)
