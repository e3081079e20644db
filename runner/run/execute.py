"""One run of one job, start to finish: the flow DESIGN §2 draws.

ledger row -> backend -> pre_run -> prompt -> loop (LLM <-> tools) -> output file -> delivery
-> final status. The row exists before any work and gets its final status in ``finally``.
Bad input (unknown provider, broken template, unreadable cassette) is found before the row is
written, so a mistake costs nothing and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from backends.base import BackendContext
from runner.agent.loop import Limits, LoopResult, Pricing, run_loop
from runner.agent.pruning import Pruner, summarize_with
from runner.agent.types import LLM, Usage
from runner.clock import utcnow
from runner.config.jobs import Job
from runner.errors import RunnerError, TemplateError
from runner.run.delivery import deliver, is_silent, write_private
from runner.safety.approval import build_gate
from runner.safety.redact import Redactor
from runner.settings import Settings
from runner.store import dumps
from runner.store.runs import Recorder, create_run, finish_run, last_output, mark_started, update_run

if TYPE_CHECKING:
    from runner.skills.session import SkillSession

EXIT_CODES = {"succeeded": 0, "skipped": 0, "interrupted": 130}


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str
    output: str = ""
    reason: str | None = None
    error: str | None = None
    output_path: str | None = None
    silent: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "error": self.error,
            "output_path": self.output_path,
            "silent": self.silent,
            "output": self.output,
        }


@dataclass
class RunRequest:
    job: Job
    trigger: str = "manual"
    run_id: str | None = None  # an existing queued row (scheduler, kanban) to start
    slot: datetime | None = None
    vars_override: dict[str, str] = field(default_factory=dict)
    replay: Path | None = None
    record: Path | None = None
    stdout: TextIO | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    task_id: str | None = None
    workdir: Path | None = None
    extra_tools: dict[str, Any] = field(default_factory=dict)
    llm: LLM | None = None  # tests and embedders may pass their own model seam
    interactive: bool = False  # a person at a TTY may answer `approvals: manual` prompts
    task_prompt: str | None = None  # appended to the rendered prompt (a kanban task's title, body, comments)
    # Called when the model gives its final answer: a returned text is sent once as a user turn;
    # still text after that and the run fails with reason "unfinished" (kanban: end the task).
    follow_up: Callable[[], str | None] | None = None


def prepare_llm(settings: Settings, req: RunRequest, redactor: Redactor) -> tuple[Any, Pricing, list[str]]:
    """Resolve the model before the run row exists: bad config is exit 2 with nothing written.

    Returns (factory(emit, deadline) -> LLM, pricing, key values for redaction). Each provider of
    the job's model list gets a credential pool (shared state in runner.db); with more than one,
    a FallbackLLM moves down the list when a provider's keys are exhausted or dead.
    """
    job = req.job
    if req.llm is not None:
        llm = req.llm
        return (lambda emit, deadline=None: llm), Pricing(), []
    if req.replay is not None:
        from runner.agent.cassette import ReplayLLM

        replay = ReplayLLM(req.replay)
        return (lambda emit, deadline=None: replay), Pricing(), []
    from runner.agent.credentials import PoolFactory
    from runner.run.model_choice import build_client, choose, key_source

    choices = [choose(settings.config, ref, job=job.name) for ref in job.models]
    pools = PoolFactory(lambda: settings.store)
    last = len(choices) - 1  # only the last provider waits for a cooling key; the others hand over
    sources = [key_source(c, job=job.name, pool_factory=pools, may_wait=i == last) for i, c in enumerate(choices)]
    values = [v for keys in sources for v in keys.values()]
    redactor.add(*values)

    def factory(emit: Any, deadline: float | None = None) -> LLM:
        pools.attach(emit=emit, deadline=deadline)
        chain = [(c.provider_name, build_client(c, k, emit=emit)) for c, k in zip(choices, sources, strict=True)]
        client: LLM = chain[0][1]
        if len(chain) > 1:
            from runner.agent.fallback import FallbackLLM

            client = FallbackLLM(chain, emit=emit)
        if req.record is not None:
            from runner.agent.cassette import RecordingLLM

            return RecordingLLM(client, req.record, job=job.name, redact=redactor.redact_obj)
        return client

    return factory, choices[0].pricing, values


def execute(settings: Settings, req: RunRequest) -> RunOutcome:
    job = req.job
    redactor = Redactor()
    make_llm: Any = None
    pricing, key_values = Pricing(), list[str]()
    if job.spec.agent:
        from runner.run.prompt import check_syntax

        check_syntax(job)
        _dry_render(job, req)
        make_llm, pricing, key_values = prepare_llm(settings, req, redactor)
    store = settings.store
    now = utcnow()
    if req.run_id is None:
        run_id = create_run(store, job=job.name, trigger=req.trigger, slot=req.slot, task_id=req.task_id, now=now)
    else:
        run_id = req.run_id
        mark_started(store, run_id, now=now)
    emit = Recorder(store, run_id, redactor)
    started = time.monotonic()
    deadline = started + job.spec.timeout
    status, reason, error, output, out_path, silent = "failed", None, None, "", None, False
    backend = None
    transcript: list[dict[str, Any]] = []
    try:
        emit("run_started", {"job": job.name, "trigger": req.trigger, "pid": os.getpid()})
        import backends

        workdir = req.workdir or job.workdir
        spec = job.spec.backend.model_dump(exclude_none=True)
        backend = backends.resolve(
            spec,
            ctx=BackendContext(
                workdir=workdir,
                home=settings.home,
                run_id=run_id,
                job=job.name,
                env_passthrough=tuple(job.spec.env_passthrough),
                secret_values=tuple(key_values),
            ),
        )
        run_vars = {"id": run_id, "slot": req.slot.isoformat() if req.slot else None, "trigger": req.trigger}
        pre = None
        if job.spec.pre_run:
            from runner.run.prerun import run_pre

            pre = run_pre(job, backend, run_id=run_id)
            emit("pre_run", {"exit_code": pre.exit_code, "timed_out": pre.timed_out, "stdout": pre.stdout[-4000:]})
            if not pre.wake:
                status, reason = "skipped", "wake_false"
                return _outcome(run_id, status, reason=reason)
            if pre.timed_out or (pre.exit_code != 0 and not job.spec.agent):
                status, reason = "failed", "pre_run"
                error = f"pre_run exited {pre.exit_code}" + (" (timed out)" if pre.timed_out else "")
                return _outcome(run_id, status, reason=reason, error=error)
        if not job.spec.agent:
            output = pre.stdout if pre else ""
            status = "succeeded"
        else:
            assert make_llm is not None
            result = _agent(
                transcript,
                settings,
                req,
                job,
                backend,
                emit,
                make_llm(emit, deadline),
                pricing,
                redactor,
                run_vars,
                pre,
                deadline,
                run_id,
            )
            status, reason, error, output = result.status, result.reason, result.error, result.output
            update_run(
                store,
                run_id,
                iterations=result.iterations,
                prompt_tokens=result.usage.prompt_tokens,
                completion_tokens=result.usage.completion_tokens,
                cost_usd=result.cost_usd,
            )
        silent = is_silent(output) or (not job.spec.agent and not output.strip())
        output = redactor(output)
        if output or silent:
            path = settings.home / "outputs" / job.name / f"{run_id}.md"
            write_private(path, output)
            out_path = str(path)
        if output and not silent:
            from runner.run.prompt import variables

            tvars = variables(
                job, now=now, run=run_vars, vars_override=req.vars_override, pre_run=pre.as_vars() if pre else None
            )
            delivered = deliver(
                job,
                run_id=run_id,
                status=status,
                output=output,
                output_path=Path(out_path) if out_path else None,
                variables=tvars,
                redact=redactor,
                stdout=req.stdout,
            )
            emit("delivered", {"sinks": [d.as_dict() for d in delivered]})
            update_run(store, run_id, delivery=dumps([d.as_dict() for d in delivered]))
        return _outcome(run_id, status, output=output, reason=reason, error=error, output_path=out_path, silent=silent)
    except KeyboardInterrupt:
        status, reason, error = "interrupted", "interrupted", "interrupted by the user"
        return _outcome(run_id, status, reason=reason, error=error)
    except RunnerError as exc:
        status = "failed"
        reason = getattr(exc, "reason", None) or type(exc).__name__.lower().replace("error", "") or "error"
        if isinstance(exc, TemplateError):
            reason = "template"
        error = redactor(str(exc))
        emit("error", {"reason": reason, "error": error})
        return _outcome(run_id, status, reason=reason, error=error)
    finally:
        if backend is not None:
            backend.close()
        if transcript:
            save_transcript(settings, run_id, transcript, redactor)
        finish_run(store, run_id, status, reason=reason, error=error, output_path=out_path)
        emit("run_finished", {"status": status, "reason": reason, "seconds": round(time.monotonic() - started, 3)})


def save_transcript(settings: Settings, run_id: str, messages: list[dict[str, Any]], redactor: Redactor) -> Path:
    """The conversation as sent to the model (after pruning), redacted, for post-mortems."""
    path = settings.home / "logs" / "runs" / f"{run_id}.json"
    write_private(path, json.dumps(redactor.redact_obj(messages), ensure_ascii=False, indent=1))
    return path


def _dry_render(job: Job, req: RunRequest) -> None:
    """Render the prompt with placeholder run values so a missing variable is exit 2, before any row."""
    from runner.run.prompt import job_template, render, variables

    source, name = job_template(job)
    placeholder = {"id": "dry-run", "slot": None, "trigger": req.trigger}
    tvars = variables(
        job, now=utcnow(), run=placeholder, vars_override=req.vars_override, pre_run={"stdout": "", "exit_code": 0}
    )
    render(source, tvars, name=name, base=job.base_dir)


def _outcome(run_id: str, status: str, **kw: Any) -> RunOutcome:
    return RunOutcome(run_id=run_id, status=status, **kw)


def _agent(
    transcript: list[dict[str, Any]],
    settings: Settings,
    req: RunRequest,
    job: Job,
    backend: Any,
    emit: Recorder,
    llm: LLM,
    pricing: Pricing,
    redactor: Redactor,
    run_vars: dict[str, Any],
    pre: Any,
    deadline: float,
    run_id: str,
) -> LoopResult:
    from runner.run.prompt import job_template, render, system_prompt, variables
    from runner.tools import discover
    from runner.tools.context import ToolContext

    source, name = job_template(job)
    tvars = variables(
        job,
        now=utcnow(),
        run=run_vars,
        vars_override=req.vars_override,
        pre_run=pre.as_vars() if pre else None,
        last_output=last_output(settings.store, job.name),
    )
    user_prompt = render(source, tvars, name=name, base=job.base_dir)
    if req.task_prompt:
        user_prompt = f"{user_prompt.rstrip()}\n\n{req.task_prompt}"
    skills = _skill_session(settings, job, emit)
    ctx = ToolContext(
        backend=backend,
        run_id=run_id,
        job_name=job.name,
        allow_paths=tuple(job.spec.allow_paths),
        approve=build_gate(
            job, store=settings.store, run_id=run_id, emit=emit, redact=redactor, interactive=req.interactive
        ),
        emit=emit,
        deadline=deadline,
        extras={"settings": settings, **req.extra_tools, "skills": skills},
    )
    tools = discover().select(job.spec.toolsets, ctx)
    index = None
    if skills is not None and any(t.name == "skill_view" for t in tools):
        index = skills.index(can_manage=any(t.name == "skill_manage" for t in tools))
    preloaded = skills.preload(job.spec.skills) if skills is not None else ""
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": system_prompt(job, context_file=load_context_file(backend, emit), skills_index=index),
        },
        {"role": "user", "content": user_prompt + preloaded},
    ]
    transcript.extend(messages)
    emit(
        "prompt",
        {
            "system_chars": len(messages[0]["content"]),
            "user": user_prompt[:4000],
            "tools": [t.name for t in tools],
            "model": llm.model,
        },
    )
    update_run(settings.store, run_id, model=llm.model)
    limits = Limits(
        max_iterations=job.spec.max_iterations,
        deadline=deadline,
        idle_timeout=job.spec.idle_timeout,
        max_tokens=job.spec.budget.max_tokens,
        max_cost_usd=job.spec.budget.max_cost_usd,
    )
    schemas_tokens = sum(len(json.dumps(t.schema())) for t in tools) // 4
    pruner = Pruner(
        context_budget(settings, job),
        tools_tokens=schemas_tokens,
        emit=emit,
        summarize=summarize_with(llm) if job.spec.summarize else None,
    )

    def loop(lim: Limits) -> LoopResult:
        return run_loop(messages, tools, ctx, llm, lim, emit=emit, pricing=pricing, stop=req.stop, prune=pruner)

    outcome = "failed"
    try:
        result = loop(limits)
        if req.follow_up is not None and result.status == "succeeded":
            result = _follow_up_once(req.follow_up, result, loop, messages, limits, emit)
        outcome = result.status
        return result
    finally:
        transcript[:] = messages
        if skills is not None:
            skills.finish(outcome)


def _skill_session(settings: Settings, job: Job, emit: Recorder) -> SkillSession | None:
    """The run's SkillSession when the job uses skills (the ``skills`` toolset or a ``skills:`` list)."""
    wanted = set(job.spec.toolsets)
    if not job.spec.skills and not wanted & {"skills", "skill_view", "skill_manage"}:
        return None
    from runner.skills.session import SkillSession

    return SkillSession.for_run(settings, emit=emit)


def _follow_up_once(
    follow_up: Callable[[], str | None],
    first: LoopResult,
    loop: Callable[[Limits], LoopResult],
    messages: list[dict[str, Any]],
    limits: Limits,
    emit: Recorder,
) -> LoopResult:
    """The model answered: if ``follow_up`` has a reminder, send it once and continue the same
    conversation within what is left of the limits; still unfinished after that is a failure."""
    reminder = follow_up()
    if not reminder:
        return first
    emit("follow_up", {"text": reminder})
    messages.append({"role": "user", "content": reminder})
    used = first.usage.prompt_tokens + first.usage.completion_tokens
    more = loop(
        replace(
            limits,
            max_iterations=max(1, limits.max_iterations - first.iterations),
            max_tokens=None if limits.max_tokens is None else max(1, limits.max_tokens - used),
            max_cost_usd=None if limits.max_cost_usd is None else max(0.0, limits.max_cost_usd - first.cost_usd),
        )
    )
    usage = Usage(
        first.usage.prompt_tokens + more.usage.prompt_tokens,
        first.usage.completion_tokens + more.usage.completion_tokens,
    )
    result = replace(
        more, iterations=first.iterations + more.iterations, usage=usage, cost_usd=first.cost_usd + more.cost_usd
    )
    if result.status == "succeeded" and follow_up():
        error = "the model stopped again without finishing after a reminder"
        result = replace(result, status="failed", reason="unfinished", error=error)
    return result


CONTEXT_FILES = ("AGENTS.md", "CLAUDE.md", ".cursorrules")
CONTEXT_FILE_CAP = 20_000


def load_context_file(backend: Any, emit: Any) -> str | None:
    """The first of AGENTS.md, CLAUDE.md, .cursorrules in the workdir, scanned for injection first."""
    from runner.safety.injection import blocked_marker, scan

    for name in CONTEXT_FILES:
        try:
            data = backend.read_file(f"{backend.workdir.rstrip('/')}/{name}")
        except (FileNotFoundError, IsADirectoryError):
            continue
        text = data.decode("utf-8", errors="replace")
        findings = scan(text)
        if findings:
            emit("context_blocked", {"file": name, "findings": [f.kind + ": " + f.excerpt for f in findings]})
            return blocked_marker(name, findings)
        if len(text) > CONTEXT_FILE_CAP:
            text = text[:CONTEXT_FILE_CAP] + f"\n[... {name} truncated at {CONTEXT_FILE_CAP} characters]"
        emit("context_file", {"file": name, "chars": len(text)})
        return f"Project instructions from {name} (the job's workdir):\n\n{text}"
    return None


def context_budget(settings: Settings, job: Job) -> int:
    if job.spec.context_budget:
        return job.spec.context_budget
    window = 128_000
    provider = settings.config.providers.get(job.models[0].partition("/")[0]) if job.spec.agent else None
    if provider is not None:
        window = provider.context_window
    return int(window * 0.6)
