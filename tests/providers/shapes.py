"""Recorded wire shapes of real providers, as fixtures: loading, serving, checking.

Each file under ``tests/providers/shapes/FAMILY/NAME.yaml`` is one shape a real provider (or
server) sends, taken from its public docs, its SDK's test fixtures or a public bug report, and
cites that source. The harness serves its replies, in order, from the fake server
(runner/testing/fakeopenai.py) to the real CLI (``runner run-job shape``) and checks what the run
recorded, what was sent back on the next turn and what the credential pool did.

A fixture::

    source: https://... (docs | SDK fixture | issue) - what the page shows   # required (no ': ')
    what: one line: the shape and what must happen                           # required
    profile: gemini        # config.yaml's profile: (default: the folder's name; null: none, so
                           # the base URL decides)
    base_path: /v1         # the base URL's path (and query) on the fake server
    model: some-model      # the provider's model (default: shape-model)
    keys: 1                # API keys in the provider's pool (env SHAPE_KEY_0, ...)
    provider: {...}        # more config.yaml provider keys (stream: false, api_version, ...)
    job: {...}             # more jobs.yaml keys of the job (timeout, idle_timeout, ...)
    files: {notes.txt: "text"}   # files in the job's workdir
    replies:               # one per request, in order
      - status: 200        # default 200
        headers: {retry-after: "2"}   # "{now_ms+90}" / "{now_s+90}" / "{now_iso+90}": 90 s from now
        json: {...}        # a JSON body (application/json)
        text: "..."        # or a body as text (give content-type in headers)
        sse: [...]         # or a stream: each item one event; a mapping is ``data: JSON``,
                           # ``"[DONE]"`` is ``data: [DONE]``, any other text is sent as the
                           # event's lines as they are (``": keep-alive"``, ``"event: x\\ndata: {}"``)
        every: 0.5         # seconds between stream events
        keepalive: {every: 1, for: 30}   # comments before the stream's first event
      - final: "done"      # the fake's own plain answer (streamed if the request asks)
      - call: [terminal, {command: "echo hi"}]   # the fake's own tool call
    expect:
      status: succeeded    # the run's status
      reason: null         # the run's reason (null: none)
      output: "..."        # exact output; output_contains: "..." a part of it
      error_contains: [...]   # parts of the run's error line
      requests: 2          # requests the server got
      tools_run: [terminal]   # names of the tool calls the run made, in order
      events: [truncated]  # event kinds the run recorded; no_events: [...] kinds it must not
      keys: [ok, cooling]  # each key's status in ``runner creds list`` after the run
      seconds_max: 30      # the run ended within this many seconds
      sent:                # checks of request bodies (JSON): path parts split on "."; ints index
        - {request: 1, path: messages.2.tool_calls.0.extra_content, equals: {...}}
        - {request: 1, path: messages.2.reasoning_content, absent: true}
        - {request: 1, path: messages.3.content, contains: "hi"}
      headers:             # checks of request headers (names lower case)
        - {request: 0, name: api-key, equals: "{key0}"}   # {keyN}: the value of key N
        - {request: 0, name: authorization, absent: true}
      paths: ["/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"]  # request paths

The request a run sends is [system, user prompt, then the turns]: ``messages.2`` is the first
assistant turn, ``messages.3`` its first tool result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.testing import Reply, call, final

SHAPES = Path(__file__).parent / "shapes"
KEY = "sk-shape-{i}-0123456789abcdefghij"
REQUIRED = {"source", "what", "replies", "expect"}
KNOWN = REQUIRED | {"profile", "base_path", "model", "keys", "provider", "job", "files"}
EXPECT = {
    "status", "reason", "output", "output_contains", "error_contains", "requests", "tools_run",
    "events", "no_events", "keys", "seconds_max", "sent", "headers", "paths",
}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    path: Path
    data: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"

    @property
    def family(self) -> str:
        return self.path.parent.name

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def load_all() -> list[Shape]:
    shapes = []
    for path in sorted(SHAPES.glob("*/*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise AssertionError(f"{path}: {exc}") from None
        assert isinstance(data, dict), f"{path}: not a mapping"
        missing, unknown = REQUIRED - set(data), set(data) - KNOWN
        assert not missing and not unknown, f"{path}: missing {missing or '-'}, unknown keys {unknown or '-'}"
        assert str(data["source"]).startswith(("http://", "https://")), f"{path}: source must start with a URL"
        bad = set(data["expect"]) - EXPECT
        assert not bad, f"{path}: unknown expect keys {bad}"
        shapes.append(Shape(path, data))
    return shapes


def key_value(i: int) -> str:
    return KEY.format(i=i)


def _times(text: str) -> str:
    """``{now_ms+N}`` / ``{now_s+N}`` / ``{now_iso+N}`` in a reply: the time N seconds from now as
    epoch milliseconds, epoch seconds or RFC 3339 (replies that carry reset times are recorded
    relative to the moment they are served)."""
    import re
    import time
    from datetime import UTC, datetime

    def put(m: re.Match[str]) -> str:
        at = time.time() + int(m.group(2))
        if m.group(1) == "iso":
            return datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return str(int(at * 1000) if m.group(1) == "ms" else int(at))

    return re.sub(r"\{now_(ms|s|iso)\+(\d+)\}", put, text)


def reply_of(spec: dict[str, Any]) -> Reply:
    """A fixture's reply as the fake server's ``Reply``."""
    if "final" in spec:
        return final(str(spec["final"]))
    if "call" in spec:
        name, args = spec["call"]
        return call(name, args)
    status = int(spec.get("status", 200))
    headers = {str(k): _times(str(v)) for k, v in (spec.get("headers") or {}).items()}
    if "sse" in spec:
        pieces: list[bytes] = []
        keep = spec.get("keepalive")
        if keep:
            pieces += [b": keep-alive\n\n"] * int(float(keep["for"]) / float(keep["every"]))
        for item in spec["sse"]:
            pieces.append(_event(item))
        return Reply(status=status, headers=headers, events=pieces, delay=float(spec.get("every") or (keep or {}).get("every") or 0))
    if "json" in spec:
        headers.setdefault("content-type", "application/json")
        return Reply(status=status, headers=headers, raw=_times(json.dumps(spec["json"])).encode())
    if "text" in spec:
        return Reply(status=status, headers=headers, raw=str(spec["text"]).encode())
    raise AssertionError(f"a reply needs final, call, sse, json or text: {spec}")


def _event(item: Any) -> bytes:
    if isinstance(item, (dict, list)):
        return b"data: " + json.dumps(item).encode() + b"\n\n"
    text = str(item)
    if text == "[DONE]":
        return b"data: [DONE]\n\n"
    return text.encode() + b"\n\n"


MISSING = object()


def dig(value: Any, path: str) -> Any:
    """``value`` at a dotted path (ints index lists, negative from the end); MISSING if absent."""
    for part in path.split("."):
        if isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                return MISSING
        elif isinstance(value, dict):
            if part not in value:
                return MISSING
            value = value[part]
        else:
            return MISSING
    return value


def check(value: Any, rule: dict[str, Any], what: str) -> None:
    """One ``equals`` / ``absent`` / ``contains`` / ``present`` rule on a value."""
    if rule.get("absent"):
        assert value is MISSING, f"{what}: expected absent, got {value!r}"
        return
    assert value is not MISSING, f"{what}: absent"
    if "equals" in rule:
        assert value == rule["equals"], f"{what}: {value!r} != {rule['equals']!r}"
    if "contains" in rule:
        text = value if isinstance(value, str) else json.dumps(value)
        assert str(rule["contains"]) in text, f"{what}: {rule['contains']!r} not in {text[:500]!r}"
    if "matches" in rule:
        import re

        assert re.fullmatch(str(rule["matches"]), str(value)), f"{what}: {value!r} !~ {rule['matches']}"
