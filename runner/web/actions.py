"""The dashboard's buttons: each POST checks the role (a read-only token cannot act) and the CSRF
token, calls the same function the CLI command calls, and redirects back with a one-line message
(303, so the browser's reload does not post twice).

A follow-up's Cancel calls ``runner.store.followups.cancel`` (as ``runner jobs followups cancel``).
Run now, cancel, a message to a run, a kanban comment, kanban retry and approve / deny go through
``runner.store.control`` (the store-backed control API that ``runner jobs trigger``, ``runner runs cancel | say``, ``runner kanban comment |
retry`` and ``runner approvals grant|deny`` use)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from runner.agent.credentials import reset, sync_config
from runner.clock import utcnow
from runner.errors import RunnerError, UsageError
from runner.serve.state import set_paused
from runner.store.board import Board
from runner.web import skills
from runner.web.auth import CSRF_COOKIE, CSRF_FIELD, CSRF_HEADER, Role, csrf_ok


class Refused(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


async def guard(request: Request, *, role_needed: bool = True) -> FormData:
    """The form of an allowed POST; raises ``Refused`` (403) for a viewer or a bad CSRF token (a
    cross-site Origin never gets here: the auth middleware refuses it)."""
    form = await request.form()
    submitted = request.headers.get(CSRF_HEADER) or str(form.get(CSRF_FIELD) or "")
    if not csrf_ok(request.cookies.get(CSRF_COOKIE), submitted):
        raise Refused(403, "CSRF token missing or wrong: reload the page and try again")
    if role_needed and request.state.role != Role.ADMIN:
        raise Refused(403, "this token is read-only: it can view, not act")
    return form


def back(request: Request, form: FormData, default: str, message: str, *, error: bool = False) -> Response:
    target = str(form.get("back") or default)
    if not target.startswith("/") or target.startswith("//"):
        target = default
    target = target.split("?", 1)[0]
    query = {"msg": message, **({"err": "1"} if error else {})}
    return RedirectResponse(f"{target}?{urlencode(query)}", status_code=303)


Handler = Callable[[Request, FormData], str]


def action(default_back: Callable[[Request], str], fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap ``fn(request, form) -> message`` (sync, run in the thread pool) as a POST endpoint."""

    async def endpoint(request: Request) -> Response:
        try:
            form = await guard(request)
        except Refused as exc:
            return PlainTextResponse(exc.text, status_code=exc.status)
        where = default_back(request)
        try:
            message = await run_in_threadpool(fn, request, form)
        except RunnerError as exc:
            return back(request, form, where, str(exc).splitlines()[0] if str(exc) else type(exc).__name__, error=True)
        return back(request, form, where, message)

    return endpoint


def _source(request: Request) -> Any:
    return request.app.state.web.source


def _who(request: Request) -> str:
    return f"web:{request.state.role}"


def _control() -> Any:
    """``runner.store.control`` (branch i-control); a clear error when this build does not have it."""
    try:
        from runner.store import control
    except ImportError:
        raise UsageError("this runner has no runner.store.control (live control): the button needs it") from None
    return control


# -- jobs -------------------------------------------------------------------------------------
def _job(request: Request) -> str:
    name = request.path_params["name"]
    loaded = _source(request).jobs()
    if loaded.value is None:
        raise UsageError(f"jobs.yaml does not load: {loaded.error}")
    loaded.value.get(name)  # UsageError naming the job when it does not exist
    return str(name)


def pause(request: Request, form: FormData) -> str:
    name = _job(request)
    set_paused(_source(request).store, name, True, f"paused from the web ({_who(request)})")
    return f"paused {name}"


def resume(request: Request, form: FormData) -> str:
    name = _job(request)
    set_paused(_source(request).store, name, False)
    return f"resumed {name}"


def form_vars(form: FormData) -> dict[str, str]:
    """The Run form's variables: ``var_key`` / ``var_value`` pairs in order; a pair with a blank
    value is left out (the job's own value stays), a value without a name is refused."""
    keys, values = form.getlist("var_key"), form.getlist("var_value")
    if len(keys) != len(values):
        raise UsageError(f"vars: {len(keys)} names but {len(values)} values")
    out: dict[str, str] = {}
    for key, value in zip(keys, values, strict=True):
        name, text = str(key).strip(), str(value)
        if not text:
            continue
        if not name:
            raise UsageError(f"var value {text[:40]!r} has no name")
        out[name] = text
    return out


def trigger(request: Request, form: FormData) -> str:
    """``runner jobs trigger NAME [--var KEY=VALUE ...]``: the same checks (``trigger_vars``) and request."""
    name = _job(request)
    given = form_vars(form)
    request_id = _control().request_trigger(_source(request).store, name, by=_who(request), vars=given)
    shown = f" with {', '.join(sorted(given))}" if given else ""
    return f"asked serve to run {name} now{shown} (request {request_id})"


def cancel_followup(request: Request, form: FormData) -> str:
    """``runner jobs followups cancel ID``: the pending follow-up never fires."""
    from runner.store.followups import FollowupRefused
    from runner.store.followups import cancel as cancel_pending

    followup_id = request.path_params["followup_id"]
    try:
        done = cancel_pending(_source(request).store, followup_id, by=_who(request), now=utcnow())
    except FollowupRefused as exc:
        raise UsageError(str(exc)) from None
    return f"cancelled follow-up {done.id} of {done.job} (was due {done.due_at[:19]} UTC)"


# -- runs -------------------------------------------------------------------------------------
def cancel(request: Request, form: FormData) -> str:
    run_id = request.path_params["run_id"]
    _control().request_cancel(_source(request).store, run_id, by=_who(request))
    return f"asked run {run_id} to stop now (its current step is cut)"


def say(request: Request, form: FormData) -> str:
    run_id = request.path_params["run_id"]
    _control().request_steer(_source(request).store, run_id, str(form.get("message") or ""), by=_who(request))
    return f"message queued for run {run_id}: the model gets it before its next request"


# -- the board --------------------------------------------------------------------------------
@contextmanager
def _board(request: Request) -> Iterator[Any]:
    board = Board(_source(request).store)
    try:
        yield board
    finally:
        board.close()  # its writers' lock file


def _task_id(request: Request) -> int:
    return int(request.path_params["task_id"])


def _ids(text: str) -> list[int]:
    out = []
    for part in text.replace(",", " ").split():
        part = part.lstrip("#")
        if not part.isdigit():
            raise UsageError(f"parents: {part!r} is not a task id")
        out.append(int(part))
    return out


def add_task(request: Request, form: FormData) -> str:
    source = _source(request)
    config = source.config()
    job = str(form.get("job") or "").strip() or None
    if (job or config.kanban.default_job) is None:
        raise UsageError("no job for this task: choose one or set kanban.default_job in config.yaml")
    loaded = source.jobs()
    if loaded.value is not None:
        loaded.value.get(job or config.kanban.default_job)
    priority_text = str(form.get("priority") or "0").strip()
    if not priority_text.lstrip("-").isdigit():
        raise UsageError(f"priority {priority_text!r} is not a whole number")
    with _board(request) as board:
        task_id = board.add(
            str(form.get("title") or ""),
            now=utcnow(),
            body=str(form.get("body") or ""),
            parents=_ids(str(form.get("parents") or "")),
            priority=int(priority_text),
            job=job,
            max_attempts=config.kanban.max_attempts,
            created_by=_who(request),
        )
    return f"added task {task_id}"


def move(request: Request, form: FormData) -> str:
    with _board(request) as board:
        task = board.move(_task_id(request), str(form.get("to") or ""), now=utcnow(), actor=_who(request))
    return f"task {task.id}: {task.status}"


def comment(request: Request, form: FormData) -> str:
    """Stored; on a running task also sent to its run (``runner.store.control.comment_task``)."""
    text = str(form.get("text") or "")
    done = _control().comment_task(_source(request).store, _task_id(request), text, by=_who(request), now=utcnow())
    if done.steered is not None:
        return f"task {done.task_id}: comment added and sent to its running run {done.steered}"
    if done.why is not None:
        return f"task {done.task_id}: comment added (not sent to the running attempt: {done.why})"
    return f"task {done.task_id}: comment added"


def block(request: Request, form: FormData) -> str:
    with _board(request) as board:
        board.block(_task_id(request), str(form.get("reason") or ""), now=utcnow(), actor=_who(request))
    return f"task {_task_id(request)}: blocked"


def unblock(request: Request, form: FormData) -> str:
    with _board(request) as board:
        task = board.unblock(_task_id(request), now=utcnow())
    return f"task {task.id}: {task.status}"


def retry(request: Request, form: FormData) -> str:
    _control().retry_task(_source(request).store, str(_task_id(request)), by=_who(request))
    return f"task {_task_id(request)}: queued again"


# -- approvals --------------------------------------------------------------------------------
def _answer(granted: bool) -> Handler:
    def answer(request: Request, form: FormData) -> str:
        approval_id = request.path_params["approval_id"]
        reason = str(form.get("reason") or "").strip() or None
        _control().answer_approval(
            _source(request).store, approval_id, granted=granted, by=_who(request), reason=reason
        )
        return f"approval {approval_id}: {'granted' if granted else 'denied'}"

    return answer


# -- credentials and skills -------------------------------------------------------------------
def reset_key(request: Request, form: FormData) -> str:
    source = _source(request)
    sync_config(source.store, source.config())
    fingerprint = str(form.get("fingerprint") or "").strip()
    if not fingerprint:
        raise UsageError("reset: no key fingerprint given")
    n = reset(source.store, fingerprint=fingerprint, provider=None, everything=False)
    return f"reset {n} key{'s' if n != 1 else ''}"


def _skill(kind: str) -> Handler:
    def act(request: Request, form: FormData) -> str:
        return skills.act(_source(request), request.path_params["name"], kind)

    return act


def routes() -> list[Route]:
    def to(path: str) -> Callable[[Request], str]:
        return lambda request: path.format(**request.path_params)

    table: list[tuple[str, Callable[[Request], str], Handler]] = [
        ("/jobs/{name}/pause", to("/jobs"), pause),
        ("/jobs/{name}/resume", to("/jobs"), resume),
        ("/jobs/{name}/trigger", to("/jobs"), trigger),  # the job page's form sends back=/jobs/NAME
        ("/followups/{followup_id}/cancel", to("/jobs"), cancel_followup),
        ("/runs/{run_id}/cancel", to("/runs/{run_id}"), cancel),
        ("/runs/{run_id}/say", to("/runs/{run_id}"), say),
        ("/board/tasks", to("/board"), add_task),
        ("/board/tasks/{task_id:int}/move", to("/board"), move),
        ("/board/tasks/{task_id:int}/comment", to("/board/tasks/{task_id}"), comment),
        ("/board/tasks/{task_id:int}/block", to("/board"), block),
        ("/board/tasks/{task_id:int}/unblock", to("/board"), unblock),
        ("/board/tasks/{task_id:int}/retry", to("/board"), retry),
        ("/approvals/{approval_id}/grant", to("/approvals"), _answer(True)),
        ("/approvals/{approval_id}/deny", to("/approvals"), _answer(False)),
        ("/credentials/reset", to("/credentials"), reset_key),
        *((f"/skills/{{name}}/{kind}", to("/skills"), _skill(kind)) for kind in ("pin", "unpin", "archive", "restore")),
    ]
    return [Route(path, action(default, fn), methods=["POST"]) for path, default, fn in table]
