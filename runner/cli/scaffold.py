"""`runner init [DIR]`: a first project in an empty folder: a commented jobs.yaml and config.yaml,
and a sample job (prompt template and a cassette) that runs offline with ``--replay``.

The files are written into a temporary folder beside DIR and moved into place at the end, so a
failure leaves nothing half-written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from runner.errors import UsageError

JOBS_YAML = """\
# jobs.yaml: the jobs runner knows (reference: docs/jobs.md). Unknown keys are errors;
# check this file with `runner jobs validate`.

defaults:                       # any job key; merged under each job
  backend: local                # local | docker | ssh (docs/backends.md)
  approvals: deny               # dangerous commands: deny | approve | manual | smart
  max_iterations: 20            # model turns per run
  timeout: 10m                  # wall clock per run

jobs:
  hello:
    description: Look around the project folder and say what is in it
    schedule: "0 9 * * *"       # cron (5 fields), "every 30m", "in 2h", ISO time; omit for manual only
    timezone: UTC
    prompt: jobs/hello.md.j2    # a Jinja2 template beside this file, or inline text
    vars:
      audience: the team
    toolsets: [terminal, files]
    deliver: [file, stdout]     # also webhook:URL, slack:URL, email:ADDRESS ... (docs/jobs.md#sinks-deliver-and-on_failure)
    budget: {max_cost_usd: 0.05}
"""

CONFIG_YAML = """\
# config.yaml: machine settings (reference: docs/config.md). runner reads this file because
# it is beside jobs.yaml (`runner doctor` shows which config.yaml it read and why; --config or
# RUNNER_CONFIG name another). API keys come from environment variables, never from this file.

timezone: UTC

providers:
  default:
    base_url: https://api.openai.com/v1   # any OpenAI-compatible endpoint
    model: gpt-4.1-mini
    api_keys: [env:OPENAI_API_KEY]
    pricing: {input_per_mtok: 0.40, output_per_mtok: 1.60}

serve:
  max_parallel: 4               # runs at the same time under `runner serve`

# Old runs leave the ledger (with their events, outputs and transcripts) once a day under serve;
# `runner runs prune --dry-run` shows what would go.
retention:
  runs_older_than: 90d
  keep_last: 20                 # per job, whatever their age
"""

HELLO_PROMPT = """\
You are looking at a project folder for {{ vars.audience }} on {{ today }}.
List the folder, read anything that looks like a README, and answer in three short bullet
points: what the project is, what is in the folder, and one thing worth doing next.
"""

HELLO_CASSETTE = """\
# Model turns for `runner run-job hello --replay jobs/cassettes/hello.yaml`: the tool calls run
# for real in this folder; only the model's answers come from this file. Record your own with
# `runner run-job hello --record jobs/cassettes/hello.yaml` once a model is configured.
version: 1
job: hello
model: gpt-4.1-mini
turns:
  - content: null
    tool_calls:
      - id: call_1
        name: list_dir
        arguments: '{"path": "."}'
    finish_reason: tool_calls
    usage: {prompt_tokens: 900, completion_tokens: 20}
  - content: |
      - This is a new runner project: `jobs.yaml` defines the jobs, `config.yaml` the model provider.
      - The folder holds the sample job `hello` (its prompt and this cassette under `jobs/`).
      - Next: set OPENAI_API_KEY and run `runner run-job hello` against a live model.
    finish_reason: stop
    usage: {prompt_tokens: 1100, completion_tokens: 60}
"""

FILES = {
    "jobs.yaml": JOBS_YAML,
    "config.yaml": CONFIG_YAML,
    "jobs/hello.md.j2": HELLO_PROMPT,
    "jobs/cassettes/hello.yaml": HELLO_CASSETTE,
}


def check_target(target: Path) -> None:
    """``target`` must be missing or an empty folder."""
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: exists and is not a folder; runner init needs an empty or new folder")
    if target.is_dir():
        try:
            entries = sorted(os.listdir(target))
        except OSError as exc:
            raise UsageError(f"{target}: cannot read it: {exc.strerror or exc}") from None
        if entries:
            raise UsageError(
                f"{target}: not empty ({len(entries)} entries, e.g. {entries[0]}); runner init writes only into an empty or new folder"
            )


def write_project(target: Path) -> list[Path]:
    """Write ``FILES`` into ``target`` (missing or empty); return the paths written."""
    target = target.absolute()
    check_target(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".runner-init-", dir=target.parent))
    except OSError as exc:
        raise UsageError(f"{target}: cannot create it: {exc.strerror or exc}") from None
    try:
        for rel, text in FILES.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.is_dir():
            for entry in sorted(staging.iterdir()):
                entry.rename(target / entry.name)
            staging.rmdir()
        else:
            staging.chmod(0o755)
            staging.rename(target)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write the project: {exc.strerror or exc}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return [target / rel for rel in FILES]
