"""``POST /hooks/JOB``: inbound webhooks start runs (docs/web.md#webhooks, docs/jobs.md#triggers).

Authenticated by the body's HMAC signature (``runner.safety.signature``), not by the dashboard's
token; no CSRF or Origin check applies (the auth middleware lets exactly ``POST /hooks/JOB``
through: ``runner.web.auth.is_hook_request``). In order:

- 404: no job declares a webhook (the route is closed), the job is unknown, or it declares none;
- 413: the body is over the job's ``max_bytes`` (``Content-Length`` first, then while reading);
- 503: the secret's environment variable is not set in this process;
- 401: no signature, a malformed one, a wrong one, or an ``X-Runner-Signature`` outside the tolerance;
- 400: a delivery id that is not 1-128 of ``[A-Za-z0-9._:-]``, a body that is not UTF-8, or one
  whose ``Content-Type`` says JSON and that does not parse;
- 200 ``{"id": RUN, "duplicate": true}``: a delivery id this job took before (GitHub's
  redelivery, a sender's retry): no second run, and a 2xx so the sender stops retrying;
- 429 (``Retry-After``): the job's ``overlap:`` takes no more runs now (its queue is full);
- 202 ``{"id": RUN}``: the ``queued`` run, its payload and the delivery id written in one
  transaction with a trigger request serve's pool takes (``runner.store.hooks``).

Without a delivery header, the delivery id is derived from the signature header, so the very same
signed request sent twice starts one run. Each answer is one log line and one count of
``runner_webhooks_total{job, outcome}``; the secret and the signature are in neither.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from runner.clock import utcnow
from runner.config.refs import resolve_key
from runner.safety.signature import GITHUB_HEADER, RUNNER_HEADER, Verdict, verify
from runner.store.hooks import Accepted, accept_delivery

if TYPE_CHECKING:
    from runner.web.source import Source

log = logging.getLogger("runner.serve.hooks")

DELIVERY_HEADERS = ("x-github-delivery", "x-runner-delivery")
_DELIVERY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: the headers a run's prompt sees (``{{ trigger.headers }}``): what the event is, never a signature
SAFE_HEADERS = (
    "content-type",
    "user-agent",
    "x-github-event",
    "x-github-delivery",
    "x-github-hook-id",
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
    "x-runner-event",
    "x-runner-delivery",
)
HEADER_CHARS = 200  # of each header value kept
RETRY_AFTER_S = 1
UNKNOWN_JOB = "-"  # the metric's job label for a name no job has (no label per guessed name)


class Outcome(StrEnum):
    """The ``outcome`` label of ``runner_webhooks_total``."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    QUEUE_FULL = "queue_full"
    NOT_FOUND = "not_found"
    TOO_LARGE = "too_large"
    NO_SECRET = "no_secret"
    UNSIGNED = "unsigned"
    MALFORMED_SIGNATURE = "malformed_signature"
    BAD_SIGNATURE = "bad_signature"
    STALE = "stale"
    MALFORMED = "malformed"


REFUSED_SIGNATURE = {
    Verdict.MISSING: Outcome.UNSIGNED,
    Verdict.MALFORMED: Outcome.MALFORMED_SIGNATURE,
    Verdict.MISMATCH: Outcome.BAD_SIGNATURE,
    Verdict.STALE: Outcome.STALE,
}


class Counter:
    """``runner_webhooks_total{job, outcome}`` in the app's own registry."""

    def __init__(self, registry: Any):
        from prometheus_client import Counter as PromCounter

        self._counter = PromCounter(
            "runner_webhooks", "Webhook deliveries by job and outcome", ["job", "outcome"], registry=registry
        )

    def count(self, job: str, outcome: Outcome) -> None:
        self._counter.labels(job=job, outcome=str(outcome)).inc()


@dataclass(frozen=True)
class Answer:
    status: int
    outcome: Outcome
    text: str  # the log line's and the response's words
    run_id: str | None = None


def _response(answer: Answer) -> Response:
    if answer.run_id is not None:
        body: dict[str, Any] = {"id": answer.run_id}
        if answer.outcome == Outcome.DUPLICATE:
            body["duplicate"] = True
        return JSONResponse(body, status_code=answer.status)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if answer.status == 429 else None
    return JSONResponse({"error": answer.text}, status_code=answer.status, headers=headers)


async def receive(request: Request) -> Response:
    """The route's handler."""
    w = request.app.state.web
    name = request.path_params["job"]
    started = time.perf_counter()
    answer, label = await _answer(request, w.source, name)
    w.hook_counter.count(label, answer.outcome)
    level = logging.INFO if answer.status < 400 else logging.WARNING
    client = request.client.host if request.client else "-"
    log.log(
        level,
        "webhook %s from %s: %d %s (%s)%s in %.0f ms",
        name[:64],
        client,
        answer.status,
        answer.outcome,
        answer.text,
        f", run {answer.run_id}" if answer.run_id else "",
        (time.perf_counter() - started) * 1000,
    )
    return _response(answer)


async def _answer(request: Request, source: Source, name: str) -> tuple[Answer, str]:
    jobs = source.jobs().value
    declared = {n: j for n, j in (jobs.jobs.items() if jobs is not None else ()) if j.spec.webhook is not None}
    if not declared:
        return Answer(404, Outcome.NOT_FOUND, "no job declares a webhook trigger"), UNKNOWN_JOB
    job = declared.get(name)
    if job is None:
        return Answer(404, Outcome.NOT_FOUND, "no job by that name declares a webhook trigger"), UNKNOWN_JOB
    spec = job.spec.webhook
    assert spec is not None
    body = await _body(request, spec.max_bytes)
    if body is None:
        return Answer(413, Outcome.TOO_LARGE, f"the body is over {spec.max_bytes:,} bytes"), name
    label, secret = resolve_key(spec.secret)
    if secret is None:
        return Answer(503, Outcome.NO_SECRET, f"the job's secret ({label}) is not set in this process"), name
    headers = {k.lower(): v for k, v in request.headers.items()}
    verdict = verify(secret.encode(), body, headers, now=time.time(), tolerance=spec.tolerance)
    if verdict != Verdict.OK:
        return Answer(401, REFUSED_SIGNATURE[verdict], f"signature refused: {verdict}"), name
    problem, payload, delivery = _parse(body, headers)
    if problem is not None:
        return Answer(400, Outcome.MALFORMED, problem), name
    kept = {h: headers[h][:HEADER_CHARS] for h in SAFE_HEADERS if h in headers}
    result = await run_in_threadpool(
        accept_delivery,
        source.store,
        job=name,
        delivery=delivery,
        overlap=job.spec.overlap,
        payload=payload,
        headers=kept,
        now=utcnow(),
    )
    if isinstance(result, Accepted):
        if result.duplicate:
            return Answer(200, Outcome.DUPLICATE, f"delivery {delivery} was taken before", result.run_id), name
        return Answer(202, Outcome.ACCEPTED, f"delivery {delivery}", result.run_id), name
    why = f"overlap: {job.spec.overlap} and run {result.busy} holds the place; retry later"
    return Answer(429, Outcome.QUEUE_FULL, why), name


async def _body(request: Request, cap: int) -> bytes | None:
    """The raw body, or None when it is over ``cap`` bytes (read no further than that)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                return None
            chunks.append(chunk)
    except ClientDisconnect:
        return b"".join(chunks)  # answered, though nobody reads it; the signature fails on a cut body
    return b"".join(chunks)


def _parse(body: bytes, headers: dict[str, str]) -> tuple[str | None, str, str]:
    """(problem or None, the payload as text, the delivery id)."""
    given = next((headers[h] for h in DELIVERY_HEADERS if h in headers), None)
    if given is not None and not _DELIVERY.match(given):
        return "the delivery id is not 1-128 of A-Z a-z 0-9 . _ : -", "", ""
    if given is None:  # the same signed request again is the same delivery
        signature = headers.get(GITHUB_HEADER) or headers.get(RUNNER_HEADER) or ""
        given = "sig:" + hashlib.sha256(signature.encode()).hexdigest()[:40]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8 text", "", given
    if "\x00" in text:
        return "the body holds a NUL character", "", given
    if "json" in headers.get("content-type", "").lower():
        try:
            json.loads(text)
        except ValueError as exc:
            return f"the body is not valid JSON ({str(exc)[:80]})", "", given
    return None, text, given
