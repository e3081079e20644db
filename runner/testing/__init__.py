"""Test seams for runner's own suite and for operators who regression-test their jobs offline.

Nothing in runner's production code imports this package; it uses the standard library (and
``runner.agent.types`` for ``ScriptedLLM``) and imports without pytest.

Two ways to stand in for the model, with one vocabulary for the script:

* ``FakeOpenAI``: a real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions
  protocol. Point ``OPENAI_BASE_URL`` at ``server.base_url`` and run the real thing
  (``runner run-job NAME``, ``runner serve``): the CLI, the HTTP client with its retries, the
  credential pool, the tools and the ledger all run for real; only the answers are scripted.
  ``server.requests`` holds every request (body, API key, status) for assertions.
* ``ScriptedLLM``: the same script behind the in-process model seam
  (``complete(messages, tools) -> Message``, ``runner.agent.types.LLM``), for code that takes
  an ``LLM`` directly, such as ``runner.agent.loop.run_loop``.

The script: ``final(text)`` ends the run with ``text``; ``call(tool, args)`` and
``calls((tool, args), ...)`` make tool calls (the tools run for real); ``error(status,
message, headers)`` answers with an HTTP error; ``hang(seconds)`` answers late; ``cut(text,
after)`` drops a streamed answer's connection mid-way and ``stall(text, seconds, after)`` stops
sending mid-stream (``Reply`` has more knobs: reasoning, refusal, cached tokens, raw bytes).

Regression-testing your own job offline (docs/testing.md has the whole worked example)::

    import os, subprocess, sys
    import pytest
    from runner.testing import FakeOpenAI, call, final

    @pytest.fixture
    def model():
        server = FakeOpenAI().start()
        yield server
        server.stop()

    def test_my_job(model, tmp_path):
        model.add(call("terminal", {"command": "ls"}), final("all good"))
        env = dict(os.environ, OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="sk-test",
                   RUNNER_HOME=str(tmp_path / "home"))
        res = subprocess.run([sys.executable, "-m", "runner", "run-job", "my-job", "--json"],
                             env=env, capture_output=True, text=True)
        assert res.returncode == 0 and '"output": "all good"' in res.stdout

The other offline route needs no server: record the real model once with ``runner run-job
NAME --record FILE`` and replay it in tests with ``runner run-job NAME --replay FILE`` (every
tool call still runs for real).
"""

from runner.testing.fakeopenai import FakeOpenAI, Reply, call, calls, cut, error, final, hang, stall, when
from runner.testing.scripted import ScriptedLLM

__all__ = ["FakeOpenAI", "Reply", "ScriptedLLM", "call", "calls", "cut", "error", "final", "hang", "stall", "when"]
