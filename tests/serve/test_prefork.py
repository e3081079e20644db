"""Every module serve's forkserver preloads exists (a renamed module would only show as a slower fire)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import runner.serve
from runner.testing import call, final


def test_every_preloaded_module_exists() -> None:
    source = Path(runner.serve.__path__[0], "prefork.py").read_text(encoding="utf-8")
    names = next(
        ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULES" for t in node.targets)
    )
    assert names
    for name in names:
        importlib.import_module(name)  # ModuleNotFoundError names the stale entry


def test_the_forkservers_config_is_reused_only_while_the_file_is_unchanged(tmp_path) -> None:
    from runner.serve.launcher import ConfigCache
    from runner.settings import Settings

    path = tmp_path / "config.yaml"
    path.write_text("serve: {max_parallel: 7}\n")
    cache = ConfigCache()
    cache.load(path)

    def fresh() -> Settings:
        return Settings(
            home=tmp_path, jobs_path=tmp_path / "jobs.yaml", config_path=path, loaded_config=cache.config_for(path)
        )

    reused = fresh()
    assert reused.loaded_config is not None and reused.config.serve.max_parallel == 7
    path.write_text("serve: {max_parallel: 9}\n")  # same size, new content
    changed = fresh()
    assert changed.loaded_config is None and changed.config.serve.max_parallel == 9
    cache.load(path)
    assert fresh().loaded_config is not None
    path.chmod(0o644)
    assert fresh().loaded_config is None  # a chmod counts too (the literal-key check reads the mode)


# A forkserver with serve's preload forks a worker per run, as serve does, and reports the modules
# the run imported that the forkserver had not: each is import work paid again by every worker.
# An agent run's worker is ``worker_main``; a script-only run goes to a reusable worker
# (``reuse_main``), here handed one run and then its channel's end.
FORKED_RUN = """
import gc, json, os, socket, sys
import runner.serve.prefork
from runner.config.jobs import referenced_files
from runner.run.forks import send_frame
from runner.serve.launcher import WorkerSpec, worker_main
from runner.serve.reuse import reuse_main
from runner.settings import Settings
from runner.statuses import RunStatus, Trigger
from runner.store import ledger

settings = Settings.from_options()
settings.store = settings.open_store()
job = settings.jobs.get(sys.argv[1])
inputs = tuple(map(str, referenced_files(settings.jobs)))
gc.collect()
gc.freeze()
seen = {}
for attempt in (1, 2):  # the second worker shows what the first one's run left warm: nothing
    run_id = ledger.open_run(settings.store, job=job.name, trigger=Trigger.MANUAL, status=RunStatus.QUEUED)
    spec = WorkerSpec(str(settings.home), str(settings.jobs_path), str(settings.config_path), job, run_id,
                      Trigger.MANUAL, control_inputs=inputs)
    r, w = os.pipe()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        before = set(sys.modules)
        try:
            if job.spec.agent:
                worker_main(spec)  # what serve's forkserver runs in each child; it ends with sys.exit
            else:
                reuse_main(theirs, {})  # returns at the channel's end
                raise SystemExit(0)
        except SystemExit as done:
            os.write(w, json.dumps([done.code, sorted(set(sys.modules) - before)]).encode())
        os._exit(0)
    os.close(w)
    theirs.close()
    if not job.spec.agent:
        send_frame(ours, ("run", spec))
        done = ours.recv(65536)
        assert done, "the reusable worker ended without reporting its run"
    ours.close()
    code, imported = json.loads(os.read(r, 1 << 20))
    os.waitpid(pid, 0)
    status = settings.store.one("SELECT status FROM runs WHERE id=?", (run_id,))["status"]
    seen[attempt] = [code, status, imported]
print(json.dumps(seen))
"""


@pytest.mark.parametrize("job", ["script", "agent"])
def test_a_forked_worker_imports_nothing_the_forkserver_did_not(project, fake, job: str) -> None:
    project.write_jobs(
        "jobs:\n"
        "  script:\n    agent: false\n    pre_run: echo hi\n"
        "  agent:\n    prompt: look around\n    toolsets: [terminal, files]\n    memory: job\n"
    )
    for _ in range(2):
        fake.add(call("terminal", {"command": "echo hi"}), final("done"))
    proc = subprocess.run(
        [sys.executable, "-c", FORKED_RUN, job], env=project.env(), cwd=project.root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)
    for code, status, imported in runs.values():
        assert (code, status) == (0, "succeeded")
        assert imported == [], f"a {job} run imported in its worker what serve's forkserver did not: {imported}"


LOAD_AFTER_PRELOAD = """
import json, sys
import runner.serve.prefork
from runner.settings import Settings

before = set(sys.modules)
settings = Settings.from_options()
settings.jobs.get("agent")
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_a_kanban_worker_finds_the_job_and_config_models_preloaded(project) -> None:
    """A kanban worker forked from the warm forkserver loads jobs.yaml and config.yaml itself (a
    serve worker gets its job pickled): the models it validates with are the forkserver's, not
    imported again in every worker. The run path imports them for typing only, so the preload
    must name them."""
    project.write_jobs("jobs:\n  agent:\n    prompt: look around\n    toolsets: [terminal, files]\n")
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AFTER_PRELOAD], env=project.env(), cwd=project.root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    imported = json.loads(proc.stdout)
    models = [m for m in imported if m.startswith(("pydantic", "runner.config.", "runner.backends"))]
    assert models == [], f"loading jobs.yaml in a forked worker imported: {models}"
