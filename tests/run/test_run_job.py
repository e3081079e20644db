"""`runner run-job` end to end against the fake model server: real CLI, store, tools, files."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runner.testing import call, calls, error, final
from tests.servehelp import rows

ONE = "jobs:\n  one:\n    prompt: 'Say hello to {{ vars.who }}'\n    vars: {who: world}\n    deliver: [file, stdout]\n"


def runs(project):
    """The ledger's rows, oldest first."""
    return rows(project.home, "SELECT * FROM runs ORDER BY created_at")


def events(project, run_id):
    db = project.db()
    return [
        (k, json.loads(p))
        for k, p in db.execute("SELECT kind, payload FROM run_events WHERE run_id=? ORDER BY seq", (run_id,))
    ]


def test_one_turn_job_subprocess(project, fake):
    fake.add(final("hello, world", usage=(50, 7)))
    project.write_jobs(ONE)
    res = project.run("run-job", "one")
    assert res.returncode == 0, res.stderr
    assert "hello, world" in res.stdout
    [row] = runs(project)
    assert row["status"] == "succeeded" and row["trigger"] == "manual"
    assert (row["prompt_tokens"], row["completion_tokens"], row["iterations"]) == (50, 7, 1)
    out = project.home / "outputs" / "one" / f"{row['id']}.md"
    assert out.read_text() == "hello, world"
    assert (out.stat().st_mode & 0o777) == 0o600
    body = fake.requests[0]["body"]
    assert body["messages"][1]["content"] == "Say hello to world"
    assert fake.requests[0]["key"] == "sk-test-key-0123456789abcdef"


def test_tools_run_for_real_and_cost_is_summed(project, fake):
    (project.root / "notes.txt").write_text("alpha\nbeta\n")
    fake.add(
        call("terminal", {"command": "echo from-shell; ls"}),
        calls(("read_file", {"path": "notes.txt"}), ("write_file", {"path": "out/report.md", "content": "# R"})),
        final("done"),
    )
    cfg = project.home / "config.yaml"  # (no config.yaml beside jobs.yaml: that one would be read first)
    project.home.mkdir(exist_ok=True)
    cfg.write_text(
        f"providers:\n  default:\n    base_url: {fake.base_url}\n    model: m1\n    api_keys: [env:OPENAI_API_KEY]\n"
        "    pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n"
    )
    project.write_jobs("jobs:\n  t:\n    prompt: go\n    toolsets: [terminal, files]\n")
    res = project.cli("run-job", "t", "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["status"] == "succeeded" and summary["output"] == "done"
    assert (project.root / "out" / "report.md").read_text() == "# R"
    tool_msgs = [m for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert "from-shell" in tool_msgs[0]["content"] and "notes.txt" in tool_msgs[0]["content"]
    msgs3 = [m for m in fake.requests[2]["body"]["messages"] if m["role"] == "tool"]
    assert "alpha" in msgs3[1]["content"] and "wrote 3 bytes" in msgs3[2]["content"]
    [row] = runs(project)
    assert row["cost_usd"] == pytest.approx(3 * (100 * 1.0 + 20 * 2.0) / 1e6)
    assert row["model"] == "m1"
    kinds = [k for k, _ in events(project, row["id"])]
    assert kinds.count("tool_call") == 3 and kinds.count("response") == 3
    show = project.cli("runs", "show", row["id"])
    assert "terminal" in show.output and "read_file" in show.output and "succeeded" in show.output


def test_path_escape_is_an_error_for_the_model(project, fake):
    fake.add(
        call("read_file", {"path": "../../etc/passwd"}),
        call("write_file", {"path": "/tmp/x", "content": "1"}),
        final("ok"),
    )
    project.write_jobs("jobs:\n  t:\n    prompt: go\n")
    assert project.cli("run-job", "t").exit_code == 0
    results = [m["content"] for m in fake.requests[2]["body"]["messages"] if m["role"] == "tool"]
    assert all("outside the job's workdir" in r for r in results)


def test_silent_answer_succeeds_and_delivers_nothing(project, fake):
    fake.add(final("[SILENT]"))
    project.write_jobs(ONE.replace("[file, stdout]", "[file, stdout, 'file:reports/{{ today }}.md']"))
    res = project.run("run-job", "one")
    assert res.returncode == 0
    assert "[SILENT]" not in res.stdout
    assert not (project.root / "reports").exists()
    [row] = runs(project)
    assert row["status"] == "succeeded" and row["output_path"]


def test_file_sink_template_and_webhook(project, fake):
    received = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{hook.server_address[1]}/x"
        project.home.mkdir(parents=True, exist_ok=True)  # the dead sink's retries, short
        (project.home / "config.yaml").write_text("delivery: {attempts: 2, backoff: 0.05}\n")
        fake.add(final("the report"))
        project.write_jobs(
            "jobs:\n  w:\n    prompt: go\n"
            f"    deliver: [file, 'file:reports/{{{{ job.name }}}}-{{{{ today }}}}.md', 'webhook:{url}', "
            "'webhook:http://127.0.0.1:9/dead']\n"
        )
        res = project.run("run-job", "w")
        assert res.returncode == 0, res.stderr
        [row] = runs(project)
        assert received == [{"job": "w", "run_id": row["id"], "status": "succeeded", "output": "the report"}]
        files = list((project.root / "reports").glob("w-*.md"))
        assert len(files) == 1 and files[0].read_text() == "the report"
        delivery = json.loads(row["delivery"])
        assert [d["ok"] for d in delivery] == [True, True, True, False]
        assert row["status"] == "succeeded"  # a failed sink never fails the run
    finally:
        hook.shutdown()


def test_missing_template_variable_fails_before_model(project, fake):
    project.write("jobs/p.md.j2", "Hello {{ vars.nobody }}")
    project.write_jobs("jobs:\n  p:\n    prompt: jobs/p.md.j2\n")
    res = project.run("run-job", "p")
    assert res.returncode == 2
    assert "nobody" in res.stderr and "p.md.j2" in res.stderr and "Traceback" not in res.stderr
    assert fake.requests == []


def test_var_override(project, fake):
    fake.add(final("ok"))
    project.write_jobs(ONE)
    assert project.cli("run-job", "one", "--var", "who=moon").exit_code == 0
    assert fake.requests[0]["body"]["messages"][1]["content"] == "Say hello to moon"


def test_no_model_configured(project):
    project.write_jobs(ONE)
    env = project.env()
    for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(k)
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 2
    assert "OPENAI_API_KEY" in res.stderr and "providers:" in res.stderr
    assert "Traceback" not in res.stderr
    assert not project.has_store() or runs(project) == []


def test_unknown_job_lists_known(project):
    project.write_jobs(ONE)
    res = project.run("run-job", "two")
    assert res.returncode == 2 and "known jobs: one" in res.stderr


def test_pre_run_wake_false_skips(project, fake):
    project.write("jobs/check.sh", "#!/bin/sh\necho checking\necho '{\"wake\": false}'\n", mode=0o755)
    project.write_jobs("jobs:\n  c:\n    prompt: 'x {{ pre_run.stdout }}'\n    pre_run: jobs/check.sh\n")
    res = project.run("run-job", "c")
    assert res.returncode == 0
    [row] = runs(project)
    assert row["status"] == "skipped" and row["reason"] == "wake_false"
    assert fake.requests == []


def test_pre_run_stdout_in_template(project, fake):
    fake.add(final("ok"))
    project.write_jobs(
        "jobs:\n  c:\n    prompt: 'seen: {{ pre_run.stdout | trim }} ({{ pre_run.exit_code }})'\n"
        "    pre_run: echo hi-there\n"
    )
    assert project.run("run-job", "c").returncode == 0
    assert fake.requests[0]["body"]["messages"][1]["content"] == "seen: hi-there (0)"


def test_script_only_job(project, fake):
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'echo result-line'\n    deliver: [file, stdout]\n")
    res = project.run("run-job", "s")
    assert res.returncode == 0 and "result-line" in res.stdout
    [row] = runs(project)
    assert row["status"] == "succeeded"
    assert Path(row["output_path"]).read_text() == "result-line\n"
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'true'\n")
    assert project.run("run-job", "s").returncode == 0
    assert runs(project)[-1]["status"] == "succeeded"
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'exit 3'\n")
    assert project.run("run-job", "s").returncode == 1
    assert runs(project)[-1]["reason"] == "pre_run"
    assert fake.requests == []


def test_max_iterations_then_one_grace_call_without_tools(project, fake):
    fake.add(*[call("terminal", {"command": f"echo {i}"}) for i in range(3)], final("partial summary"))
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    max_iterations: 3\n")
    res = project.run("run-job", "m")
    assert res.returncode == 1
    assert len(fake.requests) == 4
    assert "tools" not in fake.requests[3]["body"]
    [row] = runs(project)
    assert row["reason"] == "max_iterations" and Path(row["output_path"]).read_text() == "partial summary"


def test_provider_4xx_fails_run_with_message(project, fake):
    fake.add(error(400, "model 'x' does not exist"))
    project.write_jobs(ONE)
    res = project.run("run-job", "one")
    assert res.returncode == 1
    assert "does not exist" in res.stderr
    [row] = runs(project)
    assert row["status"] == "failed" and "does not exist" in row["error"]


def test_record_then_replay_offline(project, fake, tmp_path):
    (project.root / "data.txt").write_text("42\n")
    fake.add(call("terminal", {"command": "cat data.txt"}), final("the answer is 42"))
    project.write_jobs("jobs:\n  r:\n    prompt: go\n")
    cassette = tmp_path / "r.yaml"
    assert project.run("run-job", "r", "--record", str(cassette)).returncode == 0
    assert (cassette.stat().st_mode & 0o777) == 0o600
    assert "sk-test-key" not in cassette.read_text()
    env = project.env(OPENAI_BASE_URL="http://127.0.0.1:9/v1")  # nothing listens: replay must not call out
    (project.root / "data.txt").write_text("43\n")
    res = project.run("run-job", "r", "--replay", str(cassette), "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["output"] == "the answer is 42"
    row = runs(project)[-1]
    tool = [p for k, p in events(project, row["id"]) if k == "tool_result"]
    assert "43" in tool[0]["result"]  # the tool ran for real during replay
    assert len(fake.requests) == 2


def test_replay_past_the_end_fails_clearly(project, tmp_path):
    cassette = tmp_path / "short.yaml"
    cassette.write_text('version: 1\nturns:\n  - tool_calls: [{name: terminal, arguments: \'{"command": "true"}\'}]\n')
    project.write_jobs("jobs:\n  r:\n    prompt: go\n")
    res = project.run("run-job", "r", "--replay", str(cassette))
    assert res.returncode == 1
    assert "turn 2" in res.stderr and "re-record" in res.stderr


def test_shipped_cassette_replays(tmp_path):
    import shutil
    import subprocess
    import sys

    from tests.conftest import REPO

    work = tmp_path / "clone"
    shutil.copytree(REPO / "jobs", work / "jobs")
    shutil.copy(REPO / "jobs.yaml", work / "jobs.yaml")
    (work / "README.md").write_text("# a readme\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
    env.update(RUNNER_HOME=str(tmp_path / "h"), PYTHONPATH=str(REPO))
    res = subprocess.run(
        [sys.executable, "-m", "runner", "run-job", "nightly-report", "--replay", "jobs/cassettes/nightly-report.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "## Summary" in res.stdout


def test_runs_list_filters_and_json(project, fake):
    fake.add(final("a"), error(400, "nope"))
    project.write_jobs(ONE + "  two:\n    prompt: hi\n")
    project.run("run-job", "one")
    project.run("run-job", "two")
    rows = json.loads(project.cli("runs", "list", "--json").output)
    assert len(rows) == 2
    assert [r["job"] for r in json.loads(project.cli("runs", "list", "--job", "two", "--json").output)] == ["two"]
    failed = json.loads(project.cli("runs", "list", "--status", "failed", "--json").output)
    assert [r["job"] for r in failed] == ["two"]
    assert "one" in project.cli("runs", "list").output
    assert project.cli("runs", "show", "nope").exit_code == 2


def _processes_with(env_entry: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if env_entry in environ.split(b"\0"):
                found.append(int(entry))
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_processes_the_run_started_do_not_outlive_it(project, fake):
    """`setsid` (a session of its own) and a double fork both leave the command's process tree;
    the run's end still kills them."""
    token = f"LEFTOVER_{os.getpid()}_{threading.get_ident()}=1"
    fake.add(
        call("terminal", {"command": f"{token} setsid sleep 303 & {token} sh -c 'sleep 304 &' ; echo started"}),
        final("done"),
    )
    project.write_jobs("jobs:\n  t:\n    prompt: go\n    toolsets: [terminal]\n")
    res = project.run("run-job", "t")
    try:
        assert res.returncode == 0, res.stderr
        tool_msgs = [m for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool"]
        assert "started" in tool_msgs[0]["content"]
        assert _processes_with(token.encode()) == []
    finally:
        for pid in _processes_with(token.encode()):
            os.kill(pid, 9)


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_a_process_that_clears_its_environment_and_detaches_still_ends_with_the_run(project, fake):
    """`env -i setsid ...` carries no mark and leaves the session; run-job is the subreaper of what
    its commands start, so the orphan is still below it and ends with the run."""
    arg = f"313.{os.getpid() % 10_000}{threading.get_ident() % 1000}"
    fake.add(call("terminal", {"command": f"env -i setsid sleep {arg} & echo started"}), final("done"))
    project.write_jobs("jobs:\n  t:\n    prompt: go\n    toolsets: [terminal]\n")

    def sleepers() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if arg.encode() in argv:
                    found.append(int(entry))
        return found

    res = project.run("run-job", "t")
    try:
        assert res.returncode == 0, res.stderr
        assert sleepers() == []
    finally:
        for pid in sleepers():
            os.kill(pid, 9)


def test_no_model_names_the_jobs_own_cassette(project):
    """A first try with no key and no config.yaml: the one-line error says how to run the job
    offline, naming the cassette kept beside jobs.yaml when there is one."""
    project.write_jobs(ONE)
    env = {k: v for k, v in project.env().items() if not k.startswith("OPENAI_")}
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "no model is configured for job one" in res.stderr and "--replay CASSETTE" in res.stderr
    (project.root / "jobs" / "cassettes").mkdir(parents=True)
    (project.root / "jobs" / "cassettes" / "one.yaml").write_text("turns: []\n")
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 2, res.stderr
    assert "`runner run-job one --replay jobs/cassettes/one.yaml`" in res.stderr
    assert runs(project) == []  # nothing half-written: no ledger row
