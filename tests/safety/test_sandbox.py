"""The sandbox is the first line (issue 29): attacks a scripted model tries from inside an agent
run on the local backend, judged by their outcome. Most jobs here say ``approvals: approve``, so
the classifier lets the commands run and only the sandbox stands between them and the target: a
marker that must not appear, a file that must not change, a key that must not be seen, a grant
that must not happen."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.testing import call, final
from tests.conftest import REPO, Project
from tests.servehelp import rows, wait_for

#: the real interpreter (visible, read-only, in the sandbox) and runner's CLI from the test's venv
#: (under /tmp in CI: the sandbox's own /tmp hides it, which an attacker would work around)
PY = os.path.realpath(sys.executable)
RUNNER = f"PYTHONPATH={shlex.quote(str(REPO))} {shlex.quote(sys.executable)} -m runner"

pytestmark = pytest.mark.skipif(
    __import__("runner.backends.sandbox", fromlist=["problem"]).problem() is not None, reason="no bubblewrap here"
)


def terminal(command: str) -> Any:
    return call("terminal", {"command": command})


def run_job(project: Project, name: str, **env: str) -> dict[str, Any]:
    res = project.run("run-job", name, "--json", env=project.env(**env), timeout=120)
    assert res.returncode in (0, 1), res.stderr
    return dict(json.loads(res.stdout))


def snapshot(paths: list[Path]) -> dict[str, bytes | None]:
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in paths}


# -- writes to the control plane -----------------------------------------------------------------
def test_no_write_method_reaches_a_control_file(project: Project, fake: Any) -> None:
    """Every way of writing tried against main (cp, command cp, cp "$(printf ...)", a variable, dd,
    a script, Python) against every control target, under `approvals: approve`: nothing lands."""
    (project.root / ".git").mkdir()
    (project.root / ".git" / "config").write_text("[core]\n\tbare = false\n")
    project.write("prompts/t.md", "go")
    project.write_jobs("jobs:\n  j:\n    prompt: prompts/t.md\n    approvals: approve\n    max_iterations: 100\n")
    (project.home / "cache").mkdir(parents=True)
    config = project.home / "config.yaml"
    config.write_text("timezone: UTC\n")
    targets = [
        project.jobs_path,
        project.root / "prompts" / "t.md",
        project.root / "tools" / "x.py",
        project.root / "skills" / "evil" / "SKILL.md",
        project.root / ".git" / "config",
        project.root / ".git" / "hooks" / "post-checkout",
        config,
        project.home / "cache" / "run-forged.json",
        project.home / "skills" / "evil" / "SKILL.md",
    ]
    before = snapshot(targets)
    payload = project.write("payload.txt", "approvals: approve # forged\n")
    methods = [
        "cp {src} {t}",
        "command cp {src} {t}",
        'cp {src} "$(printf %s {t})"',
        "T={t}; cp {src} $T",
        "dd if={src} of={t} 2>/dev/null",
        "printf 'mkdir -p \"$(dirname {t})\"; cat {src} > {t}\\n' > w.sh && sh w.sh",
        f"{shlex.quote(PY)} -c \"import os,sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); "
        "open(sys.argv[1], 'w').write('x')\" {t}",
    ]
    commands = [m.format(src=payload, t=shlex.quote(str(t))) for t in targets for m in methods]
    fake.add(*(terminal(c) for c in commands), final("done"))
    run = run_job(project, "j")
    assert snapshot(targets) == before
    assert run["status"] == "succeeded", run  # nothing changed, so nothing was tampered with
    assert not list(project.root.glob("tools/*")) and not list(project.root.glob("skills/*"))
    assert len(fake.requests) == len(commands) + 1  # every command was tried


def test_a_planted_tools_file_never_runs_in_runner(project: Project, fake: Any) -> None:
    """A script that writes tools/x.py (the operator-tools folder the next `jobs list` imports):
    the folder is read-only in the sandbox even when it did not exist before the run."""
    marker = project.root.parent / "tools-ran"
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n")
    script = f"mkdir -p tools && printf 'open({str(marker)!r}, \"w\")\\n' > tools/x.py"
    fake.add(terminal(f"printf %s {shlex.quote(script)} > plant.sh && sh plant.sh; ls tools"), final("done"))
    run_job(project, "j")
    assert (project.root / "tools").is_dir() and not list((project.root / "tools").iterdir())
    assert project.run("jobs", "list").returncode == 0
    assert project.run("tools", "list").returncode == 0
    assert not marker.exists()


def test_a_planted_git_config_never_runs_in_a_later_run(project: Project, fake: Any) -> None:
    """gpg.program in .git/config would run during the next run's `git log` pre_run."""
    marker = project.root.parent / "gpg-ran"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(project.root.parent)}
    subprocess.run(["git", "init", "-q", str(project.root)], check=True, env=env)
    project.write("f.txt", "x")
    subprocess.run(
        ["git", "-C", str(project.root), "-c", "user.name=a", "-c", "user.email=a@b", "add", "f.txt"], env=env, check=True
    )
    subprocess.run(
        ["git", "-C", str(project.root), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x"],
        env=env,
        check=True,
    )
    config_before = (project.root / ".git" / "config").read_bytes()
    project.write_jobs(
        "jobs:\n  j:\n    prompt: go\n    approvals: approve\n    pre_run: git log -1 --show-signature\n"
    )
    evil = project.write("evil.sh", f"#!/bin/sh\ntouch {marker}\n", mode=0o755)
    fake.add(
        terminal(f"git config gpg.program {evil}; git config log.showSignature true; echo > .git/hooks/x"),
        final("done"),
        final("second run"),
    )
    run_job(project, "j")
    run_job(project, "j")
    assert (project.root / ".git" / "config").read_bytes() == config_before
    assert not (project.root / ".git" / "hooks" / "x").exists()
    assert not marker.exists()


# -- keys and the runner itself ---------------------------------------------------------------
def test_keys_and_the_runner_are_out_of_sight(project: Project, fake: Any) -> None:
    """Secrets in the runner's environment (under any name), config.yaml's literal key, the
    dashboard token and the runner's own process: none of it is readable by a command."""
    planted = {
        "OPENAI_API_KEYS": "sk-pool-one-0123456789abcdef,sk-pool-two-0123456789abcdef",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-value-31337",
        "SERVICE_AUTH": "svc-auth-value-31337",
        "DEPLOY_WEBHOOK_URL": "https://hooks.example.com/deploy-31337",
        "INNOCENT_LOOKING": "innocent-value-31337",
    }
    literal = "sk-literal-config-key-0123456789"
    (project.home).mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"providers:\n  default:\n    base_url: {project.base_url}\n    model: m\n    api_keys: [{literal}]\n"
    )
    (project.home / "config.yaml").chmod(0o600)
    (project.home / "web-token").write_text("dashboard-token-31337\n")
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n")
    home = shlex.quote(str(project.home))
    fake.add(
        terminal(
            "env > env.txt; cat /proc/[0-9]*/environ > proc-environ.txt 2>/dev/null; "
            "cat /proc/[0-9]*/cmdline > proc-cmdline.txt 2>/dev/null; ls /proc > proc-ls.txt; "
            f"cat {home}/config.yaml | base64 > config.b64; base64 {home}/web-token > token.b64; "
            f"ls -la {home} > home-ls.txt; true"
        ),
        final("done"),
    )
    run = run_job(project, "j", **planted)
    assert run["status"] == "succeeded", run
    seen = b"".join(p.read_bytes() for p in project.root.glob("*.txt")) + b"".join(
        subprocess.run(["base64", "-d", str(p)], capture_output=True).stdout for p in project.root.glob("*.b64")
    )
    assert b"PATH=" in seen  # the commands ran and wrote what they saw
    for value in [*planted["OPENAI_API_KEYS"].split(","), *list(planted.values())[1:], literal, "dashboard-token-31337"]:
        assert value.encode() not in seen, value
    assert b"run-job" not in seen  # the runner's process is not in the sandbox's /proc
    assert b"runner.db" not in seen  # RUNNER_HOME is an empty folder inside


def test_the_projects_config_beside_jobs_yaml_is_hidden(project: Project, fake: Any) -> None:
    """The config.yaml runner reads beside jobs.yaml (in the job's own workdir here) holds a literal
    key: the run uses it, its commands see an empty file."""
    literal = "sk-literal-project-key-0123456789"
    config = project.root / "config.yaml"
    config.write_text(f"providers:\n  default:\n    base_url: {project.base_url}\n    model: m\n    api_keys: [{literal}]\n")
    config.chmod(0o600)
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n")
    fake.add(terminal("base64 config.yaml > config.b64; wc -c < config.yaml > size.txt"), final("done"))
    run = run_job(project, "j", OPENAI_API_KEY="")
    assert run["status"] == "succeeded", run
    assert fake.keys_used() == [literal, literal]  # the run read it
    seen = subprocess.run(["base64", "-d", str(project.root / "config.b64")], capture_output=True).stdout
    assert seen == b"" and (project.root / "size.txt").read_text().strip() == "0"
    assert literal in config.read_text()


def test_an_mcp_servers_token_is_not_visible_to_commands(project: Project, fake: Any) -> None:
    """A stdio MCP server runs in a sandbox of its own: the run's commands cannot read its variables."""
    server = project.write(
        "server.py",
        """
        import sys, json, time
        for line in sys.stdin:
            msg = json.loads(line)
            if "id" not in msg:
                continue
            if msg["method"] == "initialize":
                result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                          "serverInfo": {"name": "t", "version": "1"}}
            elif msg["method"] == "tools/list":
                result = {"tools": [{"name": "noop", "inputSchema": {"type": "object"}}]}
            else:
                result = {"content": [{"type": "text", "text": "ok"}]}
            print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
        """,
    )
    (project.home).mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"mcp_servers:\n  t:\n    command: {PY}\n    args: [{server}]\n    env: {{SERVER_TOKEN: env:SERVER_TOKEN}}\n"
    )
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n    toolsets: [terminal, 'mcp:t']\n")
    fake.add(
        call("mcp__t__noop", {}),
        terminal("cat /proc/[0-9]*/environ > environ.txt 2>/dev/null; ls /proc > ls.txt; true"),
        final("done"),
    )
    run = run_job(project, "j", SERVER_TOKEN="mcp-token-value-31337")
    assert run["status"] == "succeeded", run
    assert (project.root / "ls.txt").exists()
    assert b"mcp-token-value-31337" not in (project.root / "environ.txt").read_bytes()


# -- approvals and other jobs ----------------------------------------------------------------
GRANT_LOOP = """
import json, os, sqlite3, subprocess, sys, time
home, jobs, python, repo, direct = json.load(open("grant.json"))
cli = [python, "-m", "runner", "--home", home, "--jobs", jobs]
env = {**os.environ, "PYTHONPATH": repo}
env.pop("RUNNER_RUN_ID", None)
with open("grant.log", "a") as log:
    end = time.time() + 12
    while time.time() < end:
        try:
            listed = subprocess.run([*cli, "approvals", "pending", "--json"], capture_output=True, text=True, env=env)
            for row in json.loads(listed.stdout or "[]"):
                done = subprocess.run([*cli, "approvals", "grant", row["id"]], capture_output=True, text=True, env=env)
                log.write(done.stdout + done.stderr)
        except (OSError, ValueError) as exc:
            log.write(f"cli: {exc}\\n")
        if direct == "yes":
            try:
                db = sqlite3.connect(os.path.join(home, "runner.db"))
                db.execute("UPDATE approval_requests SET status='granted', decided_by='me'")
                db.commit()
            except sqlite3.Error as exc:
                log.write(f"sql: {exc}\\n")
        log.flush()
        time.sleep(0.2)
"""


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_a_run_cannot_grant_its_own_approval(project: Project, fake: Any, sandbox: str) -> None:
    """In the sandbox the store is out of sight (neither the CLI nor SQL reaches it). With
    `sandbox: off` the CLI refuses a grant asked from inside a run (its ancestors include the run's
    process, whatever it unsets); SQL straight into runner.db is what `sandbox: off` gives away."""
    marker = project.root.parent / "ssh" / "granted"
    project.write_jobs(
        f"jobs:\n  m:\n    prompt: go\n    approvals: manual\n    approval_timeout: 8s\n    sandbox: {sandbox}\n"
    )
    args = [str(project.home), str(project.jobs_path), sys.executable, str(REPO), "yes" if sandbox == "on" else "no"]
    fake.add(  # the paths go in a file: a command line naming jobs.yaml would be flagged as writing it
        call("write_file", {"path": "grant.py", "content": GRANT_LOOP}),
        call("write_file", {"path": "grant.json", "content": json.dumps(args)}),
        terminal(f"unset RUNNER_RUN_ID RUNNER_JOB; ({shlex.quote(PY)} grant.py &) ; echo started"),
        terminal(f"mkdir -p {marker.parent} && chmod 777 {marker.parent} && touch {marker}"),
        final("done"),
    )
    proc = project.start_job("m", fake)
    out, err = proc.communicate(timeout=90)
    assert not marker.exists(), out + err
    requests = rows(project.home, "SELECT * FROM approval_requests")
    assert requests and all(r["status"] != "granted" for r in requests), requests
    log = (project.root / "grant.log").read_text()
    if sandbox == "off":
        assert "refused to answer an approval" in log, (log, out, err)
    else:
        assert "sql: " in log, log  # tried, and the store was not there to write


def test_run_job_of_another_job_from_inside_runs_nothing(project: Project, fake: Any) -> None:
    """The agent of a `deny` job writes a cassette and runs `runner run-job` of an `approve` job
    with it: inside the sandbox there is no jobs.yaml, no RUNNER_HOME and no key to use."""
    marker = project.root.parent / "other-job-ran"
    project.write_jobs(
        "jobs:\n  low:\n    prompt: go\n    approvals: deny\n  high:\n    prompt: go\n    approvals: approve\n"
    )
    cassette = {
        "version": 1,
        "turns": [
            {
                "content": None,
                "tool_calls": [
                    {"id": "c1", "name": "terminal", "arguments": json.dumps({"command": f"chmod 777 /tmp; touch {marker}"})}
                ],
                "finish_reason": "tool_calls",
            },
            {"content": "done", "finish_reason": "stop"},
        ],
    }
    home, jobs = shlex.quote(str(project.home)), shlex.quote(str(project.jobs_path))
    fake.add(
        call("write_file", {"path": "evil.yaml", "content": json.dumps(cassette)}),
        terminal(f"{RUNNER} --home {home} --jobs {jobs} run-job high --replay evil.yaml > nested.txt 2>&1; true"),
        final("done"),
    )
    run = run_job(project, "low")
    assert run["status"] == "succeeded", run
    assert not marker.exists()
    assert [r["job"] for r in rows(project.home)] == ["low"]


# -- the sandbox's own guarantees ------------------------------------------------------------
def test_processes_left_behind_end_with_the_run(project: Project, fake: Any) -> None:
    seconds = "731337"
    project.write_jobs("jobs:\n  j:\n    prompt: go\n")
    fake.add(terminal(f"(setsid sleep {seconds} > /dev/null 2>&1 &) ; echo left"), final("done"))
    run_job(project, "j")

    def gone() -> bool:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if seconds.encode() in (entry / "cmdline").read_bytes():
                        return False
                except OSError:
                    continue
        return True

    wait_for(gone, 10, what="the left-behind sleep to end with the run")


def test_network_off_leaves_only_loopback(project: Project, fake: Any) -> None:
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    sandbox: {network: false}\n")
    fake.add(terminal("cat /proc/net/dev > net.txt"), final("done"))
    run_job(project, "j")
    interfaces = [line.split(":")[0].strip() for line in (project.root / "net.txt").read_text().splitlines()[2:]]
    assert interfaces == ["lo"]


def test_without_bubblewrap_an_agent_job_is_refused_unless_sandbox_off(project: Project, fake: Any, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "bash", "git", "ls", "cat", "env"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            (bin_dir / tool).symlink_to(found)
    project.write_jobs("jobs:\n  j:\n    prompt: go\n  k:\n    prompt: go\n    sandbox: off\n")
    fake.add(final("unsandboxed"))
    env = project.env(PATH=str(bin_dir))
    refused = project.run("run-job", "j", env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "Traceback" not in refused.stderr
    assert "job j:" in refused.stderr and "bubblewrap" in refused.stderr and "sandbox: off" in refused.stderr
    assert not project.has_store()  # nothing written: refused before the ledger row
    allowed = project.run("run-job", "k", env=env)
    assert allowed.returncode == 0, allowed.stderr


def test_doctor_names_the_unsandboxed_jobs(project: Project) -> None:
    project.write_jobs(
        "jobs:\n  safe:\n    prompt: go\n  open:\n    prompt: go\n    sandbox: off\n"
        "  self:\n    prompt: go\n    backend: ssh:me@127.0.0.1:2222\n    workdir: /srv\n"
    )
    res = project.run("doctor", "--json")
    checks = {c["check"]: c for c in json.loads(res.stdout)}
    assert checks["sandbox"]["ok"] and "1 agent job" in checks["sandbox"]["detail"]
    assert checks["job open"]["warn"] and "UNSANDBOXED" in checks["job open"]["detail"]
    assert checks["job self"]["warn"] and "this machine" in checks["job self"]["detail"]
    assert "job safe" not in checks
    text = project.run("doctor").stdout
    assert any(line.startswith("WARN") and "job open" in line for line in text.splitlines())


def test_sandbox_key_is_validated(project: Project) -> None:
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    sandbox: {network: maybe}\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2 and "sandbox.network" in res.stderr and "Traceback" not in res.stderr


def test_a_command_sees_only_the_allowed_environment(project: Project, fake: Any) -> None:
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    env_passthrough: [WANTED]\n")
    fake.add(terminal("env | sort > env.txt"), final("done"))
    run_job(project, "j", WANTED="yes", UNWANTED="no", LC_ALL="C.UTF-8")
    names = {line.split("=", 1)[0] for line in (project.root / "env.txt").read_text().splitlines() if "=" in line}
    assert {"WANTED", "RUNNER_RUN_ID", "RUNNER_JOB", "PATH", "HOME", "LC_ALL", "TMPDIR"} <= names
    assert "UNWANTED" not in names and "OPENAI_API_KEY" not in names and "PYTHONPATH" not in names


def test_the_run_process_holds_keys_undumpable(tmp_path: Path) -> None:
    """A process of the runner's own user cannot read a key-holding runner's memory or environment."""
    python = "/usr/bin/python3"
    if os.geteuid() != 0 or not os.access(python, os.X_OK):
        pytest.skip("needs root (to run both sides as another user) and /usr/bin/python3")
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="runner-dumpable-"))  # tmp_path's parents are root's only
    script = shared / "hold.py"
    script.write_text(
        "import sys, time\nfrom runner.safety.startup import prepare_process\n"
        "prepare_process(['run-job', 'x'])\nsecret = 'held-secret-31337' * 2\nprint('ready', flush=True)\ntime.sleep(30)\n"
    )
    os.chmod(shared, 0o755)
    os.chmod(script, 0o644)

    def as_nobody() -> None:
        os.setgid(65534)
        os.setuid(65534)

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(shared)}
    holder = subprocess.Popen(
        [python, str(script)], stdout=subprocess.PIPE, text=True, env=env, preexec_fn=as_nobody, cwd=shared
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        for what in ("mem", "environ"):  # its memory, and the environment block it started with
            probe = subprocess.run(
                [python, "-c", f"print(open('/proc/{holder.pid}/{what}','rb').read(64))"],
                capture_output=True,
                text=True,
                env=env,
                preexec_fn=as_nobody,
            )
            assert probe.stdout == "" and "PermissionError" in probe.stderr, (what, probe)
    finally:
        holder.kill()
        holder.wait()
        shutil.rmtree(shared, ignore_errors=True)



def test_control_is_refused_from_anything_inside_a_sandbox(tmp_path: Path) -> None:
    """With the variables cleared: inside a sandbox every process descends from its first, which
    `runner.safety.inside` recognises (a PostgreSQL store may be reachable over the network)."""
    from runner.backends.base import BackendContext
    from runner.backends.local import LocalBackend
    from runner.backends.sandbox import Plan

    work = tmp_path / "work"
    work.mkdir()
    code = (
        "from runner.safety.inside import refuse_inside_run\n"
        "try:\n    refuse_inside_run('answer an approval', {})\nexcept Exception as exc:\n    print(exc)\n"
    )
    (work / "probe.py").write_text(code)
    backend = LocalBackend(BackendContext(workdir=work, home=tmp_path / "home", sandbox=Plan(workdir=str(work))))
    try:
        result = backend.run(f"env -i PYTHONPATH={REPO} setsid {PY} probe.py", timeout=60)
    finally:
        backend.close()
    assert "refused to answer an approval" in result.output and "process " in result.output, result.output


@pytest.mark.parametrize(
    "url,open_to_runs",
    [
        ("postgresql://runner@localhost/runner", True),
        ("postgresql:///runner?host=/run/postgresql", True),
        ("postgresql://runner@127.0.0.1:5432/runner", True),
        ("postgresql://runner:secret@localhost/runner", False),
        ("postgresql://runner@db.example.com/runner", False),
    ],
)
def test_doctor_knows_a_passwordless_local_store(url: str, open_to_runs: bool) -> None:
    from runner.cli.backend import _open_to_this_machine

    assert _open_to_this_machine(url) is open_to_runs


UNPRIVILEGED = """
import json, sys, tempfile
from pathlib import Path
from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.backends.sandbox import Plan, problem
work = Path(tempfile.mkdtemp(dir=sys.argv[1]))
secret = work / "secret.txt"
secret.write_text("hidden-31337")
b = LocalBackend(BackendContext(workdir=work, home=work / "h", sandbox=Plan(workdir=str(work), hidden=(str(secret),))))
out = {"problem": problem()}
out["etc"] = b.run("touch /etc/runner-x 2>&1; echo $?", timeout=30).output
out["id"] = b.run("id -u; ls /proc | grep -c '^[0-9]'", timeout=30).output
out["secret"] = b.run("cat secret.txt; echo; echo written > mine.txt", timeout=30).output
out["timeout"] = b.run("sleep 30", timeout=1).exit_code
b.close()
out["mine"] = (work / "mine.txt").read_text()
print(json.dumps(out))
"""


def test_the_sandbox_as_an_unprivileged_user() -> None:
    """A service account is how runner runs in production (CI runs as root): the same sandbox
    through an unprivileged user namespace."""
    import tempfile

    python = "/usr/bin/python3"
    if os.geteuid() != 0 or not os.access(python, os.X_OK):
        pytest.skip("needs root (to become another user) and /usr/bin/python3")
    if any(not os.access(p, os.R_OK | os.X_OK) or (os.stat(p).st_mode & 0o005) != 0o005 for p in [REPO, *REPO.parents]):
        pytest.skip(f"{REPO} is not readable by other users")
    shared = Path(tempfile.mkdtemp(prefix="runner-unprivileged-"))
    os.chmod(shared, 0o777)

    def as_nobody() -> None:
        os.setgid(65534)
        os.setuid(65534)

    try:
        res = subprocess.run(
            [python, "-c", UNPRIVILEGED, str(shared)],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(shared)},
            preexec_fn=as_nobody,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["problem"] is None
        assert out["etc"].strip().endswith("1")  # read-only
        uid, procs = out["id"].split()
        assert uid == "65534" and int(procs) < 10  # its own PID namespace
        assert "hidden-31337" not in out["secret"] and out["mine"] == "written\n"
        assert out["timeout"] == 124
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_closing_a_sandbox_leaves_no_process(tmp_path: Path) -> None:
    """Used or not, closed at once or after a command: nothing of the sandbox lives on (bubblewrap,
    its pid 1, the first process). Killing bubblewrap alone once left pid 1 sleeping forever."""
    from runner.backends.sandbox import Box, Plan

    work = tmp_path / "work"
    work.mkdir()
    mark = f"--chdir {work}".encode()
    for used in (False, True, False, True):
        box = Box(Plan(workdir=str(work)))
        if used:
            out_r, out_w = os.pipe()
            box.spawn(["/bin/sh", "-c", "sleep 600 & echo started"], {"PATH": "/usr/bin:/bin"}, str(work), out_w).wait(30)
            os.close(out_r)
        box.close()

    def alive() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if mark in argv and state != "Z":
                found.append(int(entry.name))
        return found

    wait_for(lambda: not alive(), 10, what="every process of the closed sandboxes to end")
