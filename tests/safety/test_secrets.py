"""Planted secrets never land anywhere: runner.db, outputs, logs, cassettes, webhook payloads."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from runner.safety.redact import Redactor, fingerprint
from runner.testing import call, final

POOL_KEY = "sk-pool-key-9f8e7d6c5b4a39281706"
PLANTED = {
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd",
    "github": "ghp_1234567890abcdefghijABCDEFGHIJ123456",
    "aws": "AKIAIOSFODNN7EXAMPLQ",
    "slack": "xoxb-123456789012-abcdefghijkl",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----",
}
RAW = [POOL_KEY, *PLANTED.values(), "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"]


def test_redactor_patterns():
    r = Redactor([POOL_KEY], include_env=False)
    text = (
        " ".join(PLANTED.values()) + f" Authorization: Bearer abcdefghijklmnop123 key={POOL_KEY}"
        " https://x.example/cb?token=abc123456&x=1\nGITHUB_TOKEN=ghs_abcdefghijklmnopqrstuvwxyz12\n"
        " glpat-abcdefghijklmnopqrst hf_abcdefghijklmnopqrstuvwxyzABCDEF AIzaSyA1234567890abcdefghijklmnopqrstuv"
    )
    out = r(text)
    for raw in [
        *RAW,
        "abcdefghijklmnop123",
        "abc123456",
        "ghs_abcdefghij",
        "glpat-abcdef",
        "hf_abcdefghij",
        "AIzaSyA12",
    ]:
        assert raw not in out, raw
    assert "x=1" in out
    assert fingerprint(POOL_KEY) == fingerprint(POOL_KEY) and len(fingerprint(POOL_KEY)) == 12


def test_no_secret_anywhere_after_a_run(project, fake, tmp_path):
    got = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    secrets_text = "\n".join(f"{k}={v}" for k, v in PLANTED.items())
    (project.root / "secrets.txt").write_text(secrets_text + "\n")
    fake.add(
        call("terminal", {"command": "cat secrets.txt; echo $OPENAI_API_KEY; env | grep -c KEY || true"}),
        call("read_file", {"path": "secrets.txt"}),
        final(f"Found these: {secrets_text} and {POOL_KEY}"),
    )
    project.write_jobs(
        "jobs:\n  s:\n    prompt: 'token {{ vars.t }}'\n"
        f'    vars: {{t: "{PLANTED["github"]}"}}\n'
        f"    deliver: [file, stdout, 'webhook:http://127.0.0.1:{hook.server_address[1]}/h']\n"
    )
    cassette = tmp_path / "c.yaml"
    res = project.run("run-job", "s", "--record", str(cassette), env=project.env(OPENAI_API_KEY=POOL_KEY))
    hook.shutdown()
    assert res.returncode == 0, res.stderr
    # the key was used on the wire, but the model never saw it through tool output
    assert fake.requests[0]["key"] == POOL_KEY
    tool_text = json.dumps(fake.requests[1]["body"]["messages"][-1])
    assert POOL_KEY not in tool_text
    blobs = {p: p.read_bytes() for p in project.home.rglob("*") if p.is_file()}
    if project.database_url:  # --store postgresql: the store is not a file in RUNNER_HOME
        blobs["store"] = project.store_bytes()
    blobs[cassette] = cassette.read_bytes()
    blobs["stdout"] = res.stdout.encode()
    blobs["stderr"] = res.stderr.encode()
    for i, payload in enumerate(got):
        blobs[f"webhook{i}"] = payload.encode()
    assert got, "the webhook was not called"
    for where, data in blobs.items():
        for raw in RAW:
            assert raw.encode() not in data, f"{raw[:12]}... found in {where}"
    scan = subprocess.run(
        [sys.executable, "-m", "detect_secrets", "scan", "--all-files", str(project.home)],
        capture_output=True,
        text=True,
    )
    found = json.loads(scan.stdout)["results"] if scan.returncode == 0 else None
    assert found == {}, found
