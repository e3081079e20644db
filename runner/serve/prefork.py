"""Imported once by the warm forkserver (``runner.forks``) of serve and of ``runner kanban
dispatch``, before it forks any worker: everything a worker (a run, or a kanban task) would
otherwise pay for at each start. Imported for its effects; nothing else imports it.

The heavy modules (httpx and its transport stack, pydantic, jinja2, the worker, the agent loop,
the tools, the local backend) and the TLS context of the model client (loading the CA bundle
takes tens of milliseconds) are ready in every forked worker.
"""

from __future__ import annotations

import importlib

MODULES = [
    "runner.run.execute",
    "runner.run.agent_output",
    "runner.run.model_source",
    "runner.agent.loop",
    "runner.agent.llm",
    "openai",  # the model client: imported once here, not by every worker
    "runner.run.model_choice",
    "runner.run.prompt",
    "runner.run.prerun",
    "runner.run.delivery",
    "runner.delivery.alerts",
    "runner.delivery.send",
    "runner.delivery.retry",
    "runner.tools",
    "runner.tools.files",
    "runner.tools.terminal",
    "runner.store",
    "runner.store.runs",
    "runner.store.budget",
    "runner.run.budget",
    "runner.run.toolbox",
    "runner.run.protect",
    "runner.run.context_files",
    "runner.safety.approval",
    "runner.safety.control",
    "runner.safety.shell.classify",
    "runner.safety.injection",
    "runner.skills.loader",
    "runner.agent.credentials",
    "runner.procs",
    "ctypes",
    "jinja2.sandbox",
    "html.parser",
    "encodings.idna",
    "runner.serve.launcher",
    "runner.kanban.work",
    "runner.kanban.dispatch",
    "runner.tools.kanban",
    "backends",
    "backends.local",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "certifi",
    "jinja2",
    "pydantic",
    "yaml",
]

for _name in MODULES:
    importlib.import_module(_name)

from runner.tls import ca_context  # noqa: E402

ca_context()  # the CA bundle, loaded once for every worker's HTTPS requests

from runner.warm import ready_loaded  # noqa: E402

ready_loaded()  # LazyPatterns compiled and deferred validators built once, not in every child

from runner.serve.launcher import preload_store_driver  # noqa: E402

preload_store_driver(None)  # RUNNER_DATABASE_URL names PostgreSQL: its driver (config.yaml's: preload_config)
