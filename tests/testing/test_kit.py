"""runner.testing itself: ScriptedLLM drives the real loop; the kit imports without pytest; no
production code path imports it (a live `runner run-job` is checked with -X importtime)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from runner.agent.loop import Limits, run_loop
from runner.agent.types import Message
from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.errors import ModelError
from runner.testing import Reply, ScriptedLLM, call, calls, error, final, hang
from runner.tools import discover
from runner.tools.context import ApprovalResult, ToolContext
from tests.conftest import REPO


def test_scripted_llm_drives_the_real_loop(tmp_path):
    (tmp_path / "notes.txt").write_text("alpha\n")
    backend = LocalBackend(BackendContext(workdir=tmp_path, home=tmp_path))
    ctx = ToolContext(backend=backend, approve=lambda c: ApprovalResult(True))
    tools = discover().select(["terminal", "files"], ctx)
    llm = ScriptedLLM(
        call("terminal", {"command": "echo from-shell"}),
        calls(("read_file", {"path": "notes.txt"}), ("list_dir", {"path": "."})),
        final("done", usage=(7, 3)),
    )
    msgs = [{"role": "user", "content": "go"}]
    result = run_loop(msgs, tools, ctx, llm, Limits(), emit=lambda k, p: None)
    assert (result.status, result.output, result.iterations) == ("succeeded", "done", 3)
    assert result.usage.prompt_tokens == 100 + 100 + 7
    outs = [m["content"] for m in msgs if m["role"] == "tool"]
    assert "from-shell" in outs[0] and "alpha" in outs[1] and "notes.txt" in outs[2]
    assert len(llm.requests) == 3
    assert llm.requests[0]["messages"] == [{"role": "user", "content": "go"}]
    assert {t["function"]["name"] for t in llm.requests[0]["tools"]} >= {"terminal", "read_file"}
    ids = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
    assert len(set(ids)) == 3


def test_scripted_llm_errors_are_model_errors():
    llm = ScriptedLLM(error(401, "bad key"), error(429, "slow down"), error(500), hang(5))
    for status, reason in ((401, "auth_failed"), (429, "rate_limited"), (500, "model_error")):
        with pytest.raises(ModelError) as info:
            llm.complete([], [])
        assert (info.value.status, info.value.reason) == (status, reason)
    assert "bad key" not in str(info.value)
    with pytest.raises(ModelError, match="no answer within 0.1s"):
        llm.complete([], [], timeout=0.1)
    with pytest.raises(ModelError, match="script exhausted at request 5"):
        llm.complete([], [])


def test_scripted_llm_messages_defaults_and_hangs():
    ready = Message("as is")
    llm = ScriptedLLM(ready, hang(0.05), call("x", "{raw"), default=final("again"), model="m")
    assert llm.complete([], []) is ready
    late = llm.complete([], [], timeout=5)
    assert late.content == "too late" and late.model == "m"
    raw = llm.complete([], [])
    assert raw.tool_calls[0].arguments == "{raw" and raw.finish_reason == "tool_calls"
    assert llm.complete([], []).content == llm.complete([], []).content == "again"
    with pytest.raises(ValueError, match="needs FakeOpenAI"):
        llm.add(Reply(content="x", keys=("k",)))


def test_the_kit_imports_without_pytest():
    code = "import sys; sys.modules['pytest'] = None; import runner.testing; print(sorted(runner.testing.__all__))"
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "FakeOpenAI" in res.stdout and "ScriptedLLM" in res.stdout


def test_no_production_module_imports_the_kit():
    pattern = re.compile(r"^\s*(from|import)\s+runner\.testing\b", re.M)
    offenders = [
        str(p.relative_to(REPO))
        for folder in ("runner",)
        for p in (REPO / folder).rglob("*.py")
        if "testing" not in p.relative_to(REPO).parts and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_a_live_run_job_does_not_import_the_kit(project, fake):
    fake.add(final("hello"))
    project.write_jobs("jobs:\n  one:\n    prompt: say hello\n")
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", "run-job", "one", "--json"],
        env=project.env(),
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert '"output": "hello"' in res.stdout and len(fake.requests) == 1
    imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "runner.agent.llm" in imported  # the live HTTP client answered, not a replay
    assert not {m for m in imported if m.startswith("runner.testing")}


def test_scripted_llm_keeps_reasoning_refusals_and_cached_tokens():
    llm = ScriptedLLM(Reply(content="a", reasoning="why", cached=7), Reply(refusal="no"))
    first = llm.complete([], [])
    assert (first.reasoning, first.usage.cached_tokens) == ("why", 7)
    assert llm.complete([], []).answer == "no"
