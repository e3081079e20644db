"""The run page of an ended run shows its workdir checkpoints with the diff after each (issue 33),
escaped, over HTTP from a real `runner web`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")

import httpx  # noqa: E402

from runner.testing import call, final  # noqa: E402
from tests.web.webhelp import free_port  # noqa: E402

NASTY = '<script>document.title="pwned"</script>'


def test_the_run_page_shows_each_checkpoint_and_the_diff_after_it(project, fake):
    work = project.root / "work"
    work.mkdir()
    (work / "notes.txt").write_text("line one\n")
    project.write_jobs("jobs:\n  e:\n    prompt: go\n    toolsets: [terminal, files]\n    workdir: work\n")
    fake.add(
        call("write_file", {"path": "notes.txt", "content": f"line one\n{NASTY}\n"}),
        call("terminal", {"command": "rm notes.txt && echo fresh > new.txt"}),
        final("done"),
    )
    run_id = json.loads(project.run("run-job", "e", "--json").stdout)["id"]
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "web", "--bind", f"127.0.0.1:{port}"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/runs/{run_id}", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        assert page.status_code == 200
        html = page.text
        assert "<h2>Checkpoints</h2>" in html and "before turn 1 (write_file)" in html and "at the end of the run" in html
        assert "+&lt;script&gt;document.title=" in html and NASTY not in html  # the diff, escaped
        assert "+fresh" in html and "deleted file mode" in html
        # each diff also under the step that followed its checkpoint: the write_file call of turn 1
        timeline = html.split('id="timeline"', 1)[1].split("</ol>", 1)[0]
        rows = re.findall(r'<li class="tl-row .*?</li>', timeline, flags=re.S)
        with_diff = [r for r in rows if "tl-diff" in r]
        assert len(with_diff) == 2, [r[:200] for r in rows]
        assert "-&gt; write_file" in with_diff[0] and "+&lt;script&gt;document.title=" in with_diff[0]
        assert "-&gt; terminal" in with_diff[1] and "+fresh" in with_diff[1] and NASTY not in timeline
    finally:
        proc.terminate()
        proc.wait(timeout=10)
