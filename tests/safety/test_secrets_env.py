"""The runner's own environment block holds no key (/proc/<pid>/environ), tool results are masked
before the model sees them, and what is stored is masked in its JSON-escaped form too."""

import base64
import json
import os
import subprocess
import sys

from runner.testing import call, final

KEY = "sk-envkey-7c1d9e2f4a6b8c0d1e3f"
EXTRA = "gl-extra-secret-31415926535"  # a name config.yaml refers to with env:, not secret-looking
WALK = (
    # every ancestor of the command's shell, the runner first: its environ block, base64 (so the
    # redactor cannot mask it on the way), and how many memfds each ancestor still has open
    'p=$PPID; while [ "$p" -gt 1 ]; do echo "== $p"; base64 -w0 < /proc/$p/environ; echo;'
    " ls -l /proc/$p/fd 2>/dev/null | grep -c memfd; p=$(awk '{print $4}' /proc/$p/stat); done"
)


def _blocks(tool_text: str) -> list[bytes]:
    out = []
    for line in tool_text.splitlines():
        try:
            out.append(base64.b64decode(line, validate=True))
        except ValueError:
            continue
    return out


def test_runner_environ_holds_no_key(project, fake):
    """With `sandbox: off` a command can walk up to the runner's process: its environment block
    holds no key (in the sandbox the runner is not even in /proc: tests/safety/test_sandbox.py)."""
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"providers:\n  default:\n    base_url: {project.base_url}\n    api_keys: ['env:OPENAI_API_KEY', 'env:MY_EXTRA']\n"
    )
    (project.home / "config.yaml").chmod(0o600)
    fake.add(call("terminal", {"command": WALK}), final("done"))
    project.write_jobs("jobs:\n  s:\n    prompt: look around\n    toolsets: [terminal]\n    sandbox: off\n")
    res = project.run("run-job", "s", env=project.env(OPENAI_API_KEY=KEY, MY_EXTRA=EXTRA))
    assert res.returncode == 0, res.stderr
    assert fake.requests[0]["key"] == KEY  # the held key still authenticates
    tool_text = fake.requests[1]["body"]["messages"][-1]["content"]
    blocks = _blocks(tool_text)
    assert len(blocks) >= 2, tool_text  # the runner and at least the test process
    runner_block = blocks[0]
    assert b"RUNNER_HOME=" in runner_block  # it is the runner's block, and readable
    for block in blocks:
        assert KEY.encode() not in block
        assert EXTRA.encode() not in block
    counts = [line for line in tool_text.splitlines() if line.isdigit()]
    assert counts[0] == "0", "the runner kept the handover memfd open"


def test_tool_results_masked_before_the_model(project, fake):
    secret = "ghp_" + "Zx9" * 12
    (project.root / "notes.json").write_text(json.dumps({"cfg": f"a\n{secret}", "password": "hunter2-pass"}) + "\n")
    fake.add(call("terminal", {"command": "cat notes.json"}), final("ok"))
    project.write_jobs("jobs:\n  s:\n    prompt: read\n    toolsets: [terminal]\n")
    res = project.run("run-job", "s")
    assert res.returncode == 0, res.stderr
    sent = json.dumps(fake.requests[1]["body"]["messages"][-1])
    assert secret not in sent and "hunter2-pass" not in sent
    assert "[REDACTED]" in sent


def test_stored_arguments_and_delivery_masked(project, fake, tmp_path):
    weird = 'q"uo\\te-\u00e9l\u00e8ve-42'  # a known value with a quote, a backslash and non-ASCII
    token = "ghp_" + "Qw7" * 12
    hook = "webhook:http://bob:pa55w0rd-x@127.0.0.1:9/hooks/T000/B000/zzzsecretpath"  # nobody listens
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text("delivery: {attempts: 1, timeout: 2}\n")  # no retries to wait for
    fake.add(
        call("write_file", {"path": "out.txt", "content": f"a\\n{token} and {weird}"}),
        final("done"),
    )
    project.write_jobs(f"jobs:\n  s:\n    prompt: write\n    toolsets: [files]\n    deliver: [stdout, '{hook}']\n")
    res = project.run("run-job", "s", env=project.env(WEIRD_SECRET=weird))
    assert res.returncode == 0, res.stderr
    db = project.store_bytes()
    raw_args = json.dumps({"path": "out.txt", "content": f"a\\n{token} and {weird}"})
    for needle in (token, weird, json.dumps(weird)[1:-1], json.dumps(weird, ensure_ascii=False)[1:-1], raw_args):
        assert needle.encode() not in db, needle
    conn = project.db()
    (delivery,) = conn.execute("SELECT delivery FROM runs").fetchone()
    assert "pa55w0rd-x" not in delivery and "zzzsecretpath" not in delivery
    assert "127.0.0.1:9/hooks/***" in delivery
    shown = project.run("runs", "show", conn.execute("SELECT id FROM runs").fetchone()[0])
    assert "pa55w0rd-x" not in shown.stdout and "zzzsecretpath" not in shown.stdout


# A start-up in a fresh interpreter: what hide() leaves in the block, the environment and memory.
HIDE = """
import os, sys
from runner.host import secrets
sys.stderr.write("started\\n")  # twice if the program re-executed itself
secrets.hide(["run-job", "x"])
print("OPENAI_API_KEY" in os.environ, os.environ["PLAIN"], secrets.getenv("OPENAI_API_KEY"))
sys.stdout.flush()
sys.stdout.buffer.write(open("/proc/self/environ", "rb").read())
"""


def _start(code: str) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.getcwd(), "OPENAI_API_KEY": KEY, "PLAIN": "visible"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)


def test_hide_blanks_the_block_in_place_without_a_second_start():
    res = _start(HIDE)
    assert res.returncode == 0, res.stderr
    assert res.stderr == b"started\n"  # one image: no re-exec
    first, _, block = res.stdout.partition(b"\n")
    assert first == f"False visible {KEY}".encode()  # out of os.environ, held in memory
    assert KEY.encode() not in block
    assert b"RUNNER_SECRETS_FD" not in block
    assert b"PLAIN=visible\0" in block  # the rest of the block is untouched
    assert b"OPENAI_API_KEY=" + b"\0" * len(KEY) in block  # blanked where it was


def test_the_fallback_reexecutes_with_the_values_handed_over():
    code = (
        "import os\n"
        "from runner.host import secrets\n"
        "if 'RUNNER_SECRETS_FD' not in os.environ:\n"
        "    secrets.reexec_without({'OPENAI_API_KEY': os.environ['OPENAI_API_KEY']})\n"
        "secrets.receive()\n"
        "block = open('/proc/self/environ', 'rb').read()\n"
        "memfds = [f for f in os.listdir('/proc/self/fd') if 'memfd' in os.path.realpath(f'/proc/self/fd/{f}')]\n"
        f"print(secrets.getenv('OPENAI_API_KEY'), os.environ.get('OPENAI_API_KEY'), {KEY!r}.encode() in block,"
        " os.environ['PLAIN'], len(memfds))\n"
    )
    res = _start(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().split() == [KEY, "None", "False", "visible", "0"]
