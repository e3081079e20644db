"""Imported once by the warm forkserver (``runner.run.forks``) of serve and of ``runner kanban
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
    "runner.store.files",  # a run's output and transcript kept in the store
    "runner.store.hooks",  # a webhook or chained run's trigger and upstream variables
    "runner.config.tooldirs",  # the operator's tools folders, protected by every run
    # the job and config models, built once here: a worker unpickles its job and a
    # kanban worker validates jobs.yaml; the run path itself imports them for typing only
    "runner.config.jobs",
    "runner.config.machine",
    "runner.backends.spec",
    "runner.store.budget",
    "runner.run.budget",
    "runner.run.toolbox",
    "runner.run.protect",
    "runner.run.context_files",
    "runner.safety.approval",
    "runner.safety.control",
    "runner.safety.shell.classify",
    "runner.safety.shell.readonly",  # which terminal commands need a workdir checkpoint first
    "runner.safety.injection",
    "runner.skills.loader",
    "runner.agent.credentials",
    "runner.memory.notebooks",  # an agent run's memory snapshot and tool
    "runner.memory.write",
    "runner.store.memory_pending",  # the notes held for the operator (accepted ones join the snapshot)
    "runner.skills.review",  # skills_review after a run, and its auxiliary-model call
    "runner.skills.sidecall",
    "runner.host.procs",
    "ctypes",
    "jinja2.sandbox",
    "html.parser",
    "encodings.idna",
    "runner.serve.launcher",
    "runner.serve.reuse",  # the body of a reusable worker (script-only runs)
    "runner.kanban.work",
    "runner.kanban.dispatch",
    "runner.tools.kanban",
    "runner.backends",
    "runner.backends.local",
    "runner.backends.sandbox",  # an agent run's sandbox (bubblewrap and the box's client)
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "certifi",
    "jinja2",
    "pydantic",
    "yaml",
]

#: what the model client's first request imports inside the SDK and its HTTP stack (the resource
#: modules of ``client.chat.completions``, the transport, the stream parser). They are the SDK's
#: internals, not its API: one a newer release moved or dropped is skipped, and a worker's first
#: request then imports whatever that release needs, as it would without a forkserver.
SDK_REQUEST_PATH = [
    "openai.resources.chat.chat",
    "openai.resources.chat.completions.completions",
    "openai.lib.streaming.chat",
    "openai.pagination",
    "httpx2",
    "httpcore2",
    "anyio.streams.tls",
    "jiter",
    "truststore",
]

for _name in MODULES:
    importlib.import_module(_name)

for _name in SDK_REQUEST_PATH:
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError:
        pass  # see SDK_REQUEST_PATH: a worker imports its release's modules at its first request

from runner.host.tls import ca_context  # noqa: E402

ca_context()  # the CA bundle, loaded once for every worker's HTTPS requests

from runner.backends.sandbox import problem  # noqa: E402

problem()  # whether bubblewrap works here, asked once: each agent run's check reads the answer

from runner.serve.launcher import preload_store_driver  # noqa: E402

preload_store_driver(None)  # RUNNER_DATABASE_URL names PostgreSQL: its driver (config.yaml's: preload_config)
