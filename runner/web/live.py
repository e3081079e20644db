"""Server-sent events: a run's new steps as they are written, its status and live counters (turns,
tokens, cost: a ``summary`` event when they change), and "the board changed".

Both poll the store (a read of one index range) every ``POLL_S``; a worker in another process
writes the rows, so there is nothing to subscribe to. A stream ends when its run ends, when the
client goes away, or after ``MAX_STREAM_S`` (the browser's EventSource then reconnects).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from runner.statuses import ACTIVE
from runner.store import queries, runs
from runner.web.pages import step_html

POLL_S = 0.2
STEPS_PER_MESSAGE = 500  # rows of the timeline sent in one server-sent event
BOARD_POLL_S = 0.5
KEEPALIVE_S = 15.0
MAX_STREAM_S = 3600.0
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def sse(event: str, text: str) -> bytes:
    lines = text.splitlines() or [""]
    return (f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n").encode()


async def _poll(request: Request, step: Any, interval: float) -> AsyncIterator[bytes]:
    """Call ``step()`` (in a worker thread) every ``interval``; yield what it returns until it
    returns None (the end), the client disconnects or the stream is an hour old."""
    started = last = time.monotonic()
    while time.monotonic() - started < MAX_STREAM_S:
        chunks = await anyio.to_thread.run_sync(step)
        if chunks is None:
            return
        for chunk in chunks:
            yield chunk
            last = time.monotonic()
        if time.monotonic() - last > KEEPALIVE_S:
            yield b": keep-alive\n\n"
            last = time.monotonic()
        if await request.is_disconnected():
            return
        await anyio.sleep(interval)


def run_stream(request: Request) -> StreamingResponse:
    w = request.app.state.web
    run_id = request.path_params["run_id"]
    after_text = request.query_params.get("after", "0")
    cursor = {"seq": int(after_text) if after_text.isdigit() else 0}
    shown: dict[str, Any] = {}  # the summary sent last

    def step() -> list[bytes] | None:
        store = w.source.store
        out = []
        events = runs.events(store, run_id, cursor["seq"], STEPS_PER_MESSAGE)
        if events:
            cursor["seq"] = events[-1].seq
            out.append(sse("step", step_html(w, events)))
        row = queries.run_status(store, run_id)
        if row is None:
            return None
        summary = _summary(row)
        if summary != shown:
            shown.clear()
            shown.update(summary)
            out.append(sse("summary", json.dumps(summary)))
        if row["status"] not in ACTIVE and not events:
            out.append(sse("end", str(row["status"])))
            return out or None
        return out

    async def body() -> AsyncIterator[bytes]:
        ended = False
        async for chunk in _poll(request, step, POLL_S):
            yield chunk
            ended = chunk.startswith(b"event: end")
            if ended:
                return

    return StreamingResponse(body(), media_type="text/event-stream", headers=HEADERS)


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    """What the run page shows live besides its steps: the status and the counters."""
    return {
        "status": str(row["status"]),
        "turns": row["iterations"] or 0,
        "tokens": f"{row['prompt_tokens'] or 0} + {row['completion_tokens'] or 0}",
        "cost": f"${(row['cost_usd'] or 0):,.4f}",
    }


def board_stream(request: Request) -> StreamingResponse:
    w = request.app.state.web
    seen = {"version": queries.board_version(w.source.store)}

    def step() -> list[bytes]:
        version = queries.board_version(w.source.store)
        if version == seen["version"]:
            return []
        seen["version"] = version
        return [sse("changed", str(version[0]))]

    return StreamingResponse(_poll(request, step, BOARD_POLL_S), media_type="text/event-stream", headers=HEADERS)
