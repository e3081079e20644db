"""The Starlette application: routes, the auth middleware, template rendering.

``build_app(settings, tokens)`` is what ``runner web`` and ``runner serve --web`` serve. Pages are
plain HTML forms and links (readable and usable without JavaScript); htmx and ``app.js`` only
refresh parts live. Handlers that read the store are sync (Starlette runs them in its thread
pool; the store gives each thread its own SQLite connection).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from runner import __version__
from runner.safety.redact import Redactor
from runner.settings import Settings
from runner.store import queries
from runner.web import actions, hooks, live, metrics, pages
from runner.web.auth import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    Role,
    Tokens,
    TokenSource,
    cross_site_refusal,
    csrf_ok,
    host_is_loopback,
    is_hook_request,
    new_csrf,
    session_value,
)
from runner.web.source import Source

HERE = Path(__file__).parent
OPEN_PATHS = frozenset({"/login"})  # pages anyone may open, by exact path
OPEN_PREFIXES = ("/static/",)  # and folders


def is_open(path: str) -> bool:
    """May ``path`` be read without a token? ``/login`` exactly (not ``/loginX``), or a static file
    (no ``..`` segment: the router does not resolve one, and the check must not rely on that)."""
    return path in OPEN_PATHS or (path.startswith(OPEN_PREFIXES) and ".." not in path.split("/"))


class Web:
    """What every handler needs: the source of data, the tokens, the templates, the metrics registry."""

    def __init__(self, settings: Settings, tokens: TokenSource):
        import jinja2

        self.source = Source(settings)
        self.token_source = tokens  # re-read when the files or config.yaml change: no restart
        self.redactor = Redactor()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
        )
        pages.install_filters(self.env, self.redactor)
        self.registry = metrics.registry(self.source.store)
        self.hook_counter = hooks.Counter(self.registry)

    def render(self, request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        template = self.env.get_template(name)
        signed_in = request.state.role is not None
        html = template.render(
            request=request,
            csrf=request.state.csrf,
            role=request.state.role,
            can_act=request.state.role == Role.ADMIN,
            auth=request.state.tokens.required,
            version=__version__,
            msg=request.query_params.get("msg"),
            err=request.query_params.get("err") == "1",
            path=request.url.path,
            waiting_count=queries.waiting_count(self.source.store) if signed_in else 0,  # the nav's badge
            **context,
        )
        return HTMLResponse(html, status_code=status_code)


def web(request: Request) -> Web:
    return request.app.state.web


class AuthMiddleware(BaseHTTPMiddleware):
    """Decide the request's role (or refuse it) and keep a CSRF cookie on every browser session."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        scope = request.scope
        if is_hook_request(request.method, scope["path"], scope.get("raw_path"), scope.get("root_path", "")):
            # exactly POST /hooks/JOB, authenticated by its signature; no cookie is read or set
            hook_response = await call_next(request)
            hook_response.headers.setdefault("X-Content-Type-Options", "nosniff")
            return hook_response
        w = web(request)
        tokens = request.state.tokens = w.token_source.current()  # one reading for the whole request
        cookie = request.cookies.get(CSRF_COOKIE)
        request.state.csrf = cookie or new_csrf()
        role = _role(request, tokens)
        request.state.role = role
        response: Response
        if not tokens.required and not host_is_loopback(request.headers.get("host", "")):
            # no token: only loopback names, so a rebound DNS name cannot read or drive it
            response = PlainTextResponse("without a token this dashboard answers loopback host names only", 403)
        elif (cross := _cross_site(request, tokens)) is not None:
            response = PlainTextResponse(cross, 403)
        elif role is None and not is_open(request.url.path):
            response = _refuse(request)
        else:
            response = await call_next(request)
        if cookie is None:
            response.set_cookie(CSRF_COOKIE, request.state.csrf, httponly=True, samesite="strict", path="/")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
        )
        return response


def _role(request: Request, tokens: Tokens) -> Role | None:
    if not tokens.required:
        return Role.ADMIN
    bearer = _bearer(request)
    if bearer is not None:
        return tokens.role_for(bearer)
    return tokens.role_for_session(request.cookies.get(SESSION_COOKIE))


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


def _cross_site(request: Request, tokens: Tokens) -> str | None:
    """Why this state-changing request may not act (see ``auth.cross_site_refusal``), or None."""
    return cross_site_refusal(
        request.method,
        request.headers.get("origin"),
        host=request.headers.get("host", ""),
        scheme=request.url.scheme,
        bearer=tokens.role_for(_bearer(request)) is not None,
    )


def _refuse(request: Request) -> Response:
    wants_html = "text/html" in request.headers.get("accept", "")
    if request.method == "GET" and wants_html:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
    return PlainTextResponse("a token is required (Authorization: Bearer TOKEN)", status_code=401)


def login_page(request: Request) -> Response:
    return web(request).render(request, "login.html", next=request.query_params.get("next", "/"), failed=False)


async def login_submit(request: Request) -> Response:
    w = web(request)
    form = await request.form()
    nxt = str(form.get("next") or "/")
    if not nxt.startswith("/") or nxt.startswith("//"):
        nxt = "/"
    if not csrf_ok(request.cookies.get(CSRF_COOKIE), str(form.get(CSRF_FIELD) or "")):
        return PlainTextResponse("CSRF token missing or wrong: reload the page and try again", status_code=403)
    token = str(form.get("token") or "").strip()
    if request.state.tokens.role_for(token) is None:
        return w.render(request, "login.html", status_code=401, next=nxt, failed=True)
    response = RedirectResponse(nxt, status_code=303)
    response.set_cookie(SESSION_COOKIE, session_value(token), httponly=True, samesite="strict", path="/")
    return response


async def logout(request: Request) -> Response:
    await actions.guard(request, role_needed=False)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def metrics_endpoint(request: Request) -> Response:
    body, content_type = metrics.render(web(request).registry)
    return Response(body, media_type=content_type)


def routes() -> list[Any]:
    return [
        Route("/", pages.overview),
        Route("/jobs", pages.jobs),
        Route("/jobs/{name}", pages.job_detail),
        Route("/runs", pages.runs),
        Route("/runs/{run_id}", pages.run_detail),
        Route("/runs/{run_id}/stream", live.run_stream),
        Route("/board", pages.board),
        Route("/board/columns", pages.board_columns),
        Route("/board/stream", live.board_stream),
        Route("/board/tasks/{task_id:int}", pages.task_detail),
        Route("/approvals", pages.approvals),
        Route("/credentials", pages.credentials),
        Route("/skills", pages.skills),
        Route("/curator/{pass_id}", pages.curator_report),
        Route("/charts", pages.charts),
        Route("/metrics", metrics_endpoint),
        Route("/hooks/{job}", hooks.receive, methods=["POST"]),
        Route("/login", login_page),
        Route("/login", login_submit, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        *actions.routes(),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]


def build_app(settings: Settings, tokens: TokenSource) -> Starlette:
    app = Starlette(routes=routes(), middleware=[Middleware(AuthMiddleware)])
    app.state.web = Web(settings, tokens)
    return app
