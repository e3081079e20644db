"""Server-sent events: a run's new events as they are written (``step``), the rows of its timeline
that are new or changed (``trace``: a call's result came), its status and live counters (turns,
tokens, cost, steps: a ``summary`` event when they change), and "the board changed".

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

from runner.events import Recorded, cached_share
from runner.statuses import ACTIVE
from runner.store import queries, runs
from runner.web.pages import run_timeline, step_html, timeline_html

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
    # the waterfall: every event so far (a result closes a call made before the page loaded) and
    # the state of each row the page has (sent again when it changes: its end came)
    seen: list[Recorded] = []
    rows: dict[int, str] = {}
    steps: dict[str, Any] = {"steps": 0, "kinds": {}, "span": 0.0, "at": time.monotonic()}  # as computed last

    def step() -> list[bytes] | None:
        store = w.source.store
        out = []
        if not rows:  # the first poll: the rows the page was rendered with
            seen.extend(e for e in runs.events(store, run_id, 0, queries.MAX_EVENTS) if e.seq <= cursor["seq"])
            rows.update({s.seq: s.state for s in run_timeline({}, seen, True).steps} or {0: ""})
        events = runs.events(store, run_id, cursor["seq"], STEPS_PER_MESSAGE)
        row = queries.run_status(store, run_id)
        if row is None:
            return None
        if events:
            cursor["seq"] = events[-1].seq
            out.append(sse("step", step_html(w, events)))
            seen.extend(events[: max(queries.MAX_EVENTS - len(seen), 0)])  # as many as the page shows
        live = row["status"] in ACTIVE
        changed: list[Any] = []
        if events or row["status"] != shown.get("status"):  # else no row can have changed
            tl = run_timeline(row, seen, live)
            changed = [s for s in tl.steps if rows.get(s.seq) != s.state]
            if changed:
                rows.update({s.seq: s.state for s in changed})
                out.append(sse("trace", timeline_html(w, tl, changed)))
            steps.update(steps=len(tl.steps), kinds=tl.steps_by_kind, span=tl.span, at=time.monotonic())
        summary = _summary(row) | {"steps": steps["steps"], "kinds": steps["kinds"]}
        if summary != shown or changed:
            shown.clear()
            shown.update(summary)
            span = steps["span"] + (time.monotonic() - steps["at"] if live else 0.0)  # the run's, now
            out.append(sse("summary", json.dumps(summary | {"span": round(span, 3)})))
        if not live and not events:
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
        "cost": f"${(row['cost_usd'] or 0):,.4f}{cached_share(row['prompt_tokens'], row.get('cached_tokens'))}",
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
