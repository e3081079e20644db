"""Cassettes across the SDK change: an old cassette (written before reasoning, refusals and cached
tokens existed) still replays; a recording keeps reasoning and cached tokens and replays them.
And the SDK stays out of commands that make no model call."""

from __future__ import annotations

import subprocess
import sys

import yaml

from runner.testing import Reply, final
from tests.agent.test_limits import config, kinds, last_run
from tests.conftest import REPO

OLD_CASSETTE = """\
version: 1
job: old
model: gpt-4.1-mini
turns:
  - content: null
    tool_calls:
      - id: call_1
        name: terminal
        arguments: '{"command": "echo from-the-old-cassette"}'
    finish_reason: tool_calls
    usage: {prompt_tokens: 1180, completion_tokens: 31}
  - content: the old answer
    finish_reason: stop
    usage: {prompt_tokens: 1300, completion_tokens: 12}
"""


def test_an_old_cassette_still_replays(project):
    project.write("old.yaml", OLD_CASSETTE)
    project.write_jobs("jobs:\n  old:\n    prompt: go\n")
    res = project.cli("run-job", "old", "--replay", "old.yaml")
    assert res.exit_code == 0, res.output
    events = kinds(project, last_run(project)["id"])
    assert any(k == "tool_result" and "from-the-old-cassette" in p["result"] for k, p in events)
    assert [p["content"] for k, p in events if k == "response"] == [None, "the old answer"]


def test_a_recording_keeps_reasoning_and_cached_tokens_and_replays_them(project, fake):
    config(project, fake)
    fake.add(Reply(content="recorded answer", reasoning="first I think", cached=64, usage=(100, 9)))
    project.write_jobs("jobs:\n  rec:\n    prompt: go\n")
    assert project.cli("run-job", "rec", "--record", str(project.root / "rec.yaml")).exit_code == 0
    turn = yaml.safe_load((project.root / "rec.yaml").read_text())["turns"][0]
    assert turn["reasoning"] == "first I think" and turn["usage"]["cached_tokens"] == 64
    assert project.cli("run-job", "rec", "--replay", "rec.yaml").exit_code == 0
    replayed = [p for k, p in kinds(project, last_run(project)["id"]) if k == "response"][0]
    assert (replayed["reasoning"], replayed["cached_tokens"]) == ("first I think", 64)


SDK_FREE = [
    ("jobs", "list"),
    ("jobs", "validate"),
    ("runs", "list"),
    ("runs", "show", "{run}"),
    ("runs", "logs", "{run}"),
    ("creds", "list"),
]


def test_commands_without_a_model_call_never_import_the_sdk(project, fake):
    """`python -X importtime` lists every module a command imports: `openai` is not among them
    (a replayed run makes no model call either), while a live run does import it."""
    config(project, fake)
    fake.add(final("live"))
    project.write("old.yaml", OLD_CASSETTE)
    project.write_jobs("jobs:\n  old:\n    prompt: go\n    schedule: '0 3 * * *'\n")
    replayed = _imports(project, "run-job", "old", "--replay", "old.yaml")
    assert "openai" not in replayed
    run = last_run(project)["id"]
    for args in SDK_FREE:
        imported = _imports(project, *(a.format(run=run) for a in args))
        assert "openai" not in imported, f"runner {' '.join(args)} imported the openai SDK"
    assert "openai" in _imports(project, "run-job", "old")  # the control: a live model call does


def _imports(project, *args: str) -> set[str]:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", *args],
        env=project.env(PYTHONPATH=str(REPO)),
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
