"""Every recorded provider shape (tests/providers/shapes/) through the real CLI: ``runner run-job``
against the fake server serving the shape, then what the run recorded, what went back to the
provider on the next turn, and what the credential pool did (tests/providers/shapes.py)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest
import yaml

from tests.providers.shapes import SHAPES, Shape, check, dig, key_value, load_all, reply_of

ALL = load_all()


def test_the_corpus_is_big_enough_and_covers_every_family():
    families = {s.family for s in ALL}
    assert len(ALL) >= 80, f"{len(ALL)} shapes"
    wanted = {
        "openai", "azure", "gemini", "anthropic", "mistral", "deepseek", "moonshot", "groq", "openrouter",
        "together", "fireworks", "vllm", "llamacpp", "ollama", "lmstudio", "tgi",
    }  # fmt: skip
    assert wanted <= families, f"no shapes for {sorted(wanted - families)}"
    assert {p.name for p in SHAPES.iterdir() if p.is_dir()} <= families | {"__pycache__"}


def run_shape(project: Any, fake: Any, shape: Shape) -> dict[str, Any]:
    base = fake.base_url.removesuffix("/v1")
    keys = int(shape.get("keys", 1))
    provider: dict[str, Any] = {
        "base_url": base + str(shape.get("base_path", "/v1")),
        "model": shape.get("model", "shape-model"),
        "api_keys": [f"env:SHAPE_KEY_{i}" for i in range(keys)],
        "retry_backoff": 0.05,
        "max_wait": 0,
    }
    profile = shape.get("profile", shape.family)
    if profile is not None:
        provider["profile"] = profile
    provider.update(shape.get("provider") or {})
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text(yaml.safe_dump({"providers": {"p": provider}}))
    job = {"prompt": "Do the task.", "model": "p", "toolsets": ["terminal", "files"], **(shape.get("job") or {})}
    project.write_jobs(yaml.safe_dump({"jobs": {"shape": job}}))
    for name, text in (shape.get("files") or {}).items():
        project.write(name, text)
    fake.add(*(reply_of(r) for r in shape["replies"]))
    env = project.env(**{f"SHAPE_KEY_{i}": key_value(i) for i in range(keys)})
    started = time.monotonic()
    res = project.cli("run-job", "shape", "--json", env=env)
    seconds = time.monotonic() - started
    assert "Traceback" not in res.output, res.output
    with project.db() as db:
        db.row_factory = __import__("sqlite3").Row
        [row] = [dict(r) for r in db.execute("SELECT * FROM runs")]
        events = [
            (k, json.loads(p))
            for k, p in db.execute("SELECT kind, payload FROM run_events WHERE run_id=? ORDER BY seq", (row["id"],))
        ]
    creds = json.loads(project.cli("creds", "list", "--json", env=env).stdout or "[]")
    return {"row": row, "events": events, "seconds": seconds, "creds": creds, "exit": res.exit_code, "out": res.output}


@pytest.mark.parametrize("shape", ALL, ids=[s.id for s in ALL])
def test_shape(project, fake, shape: Shape):
    got = run_shape(project, fake, shape)
    row, events, expect = got["row"], got["events"], shape["expect"]
    where = f"{shape.id} ({shape['what']})"
    assert row["status"] not in ("running", "queued"), where
    if row["status"] != "succeeded":
        assert row["reason"], f"{where}: a {row['status']} run with no reason"
    if "status" in expect:
        assert row["status"] == expect["status"], f"{where}: status {row['status']}/{row['reason']}: {row['error']}"
    if "reason" in expect:
        assert row["reason"] == expect["reason"], f"{where}: reason {row['reason']!r}: {row['error']}"
    output = _output(project, row)
    if "output" in expect:
        assert output == expect["output"], where
    if "output_contains" in expect:
        assert expect["output_contains"] in output, f"{where}: {output!r}"
    for part in expect.get("error_contains") or ():
        assert part in (row["error"] or ""), f"{where}: {part!r} not in error {row['error']!r}"
    if "requests" in expect:
        assert len(fake.requests) == expect["requests"], f"{where}: {len(fake.requests)} requests"
    kinds = [k for k, _ in events]
    if "tools_run" in expect:
        assert [p["name"] for k, p in events if k == "tool_call"] == expect["tools_run"], where
    for kind in expect.get("events") or ():
        assert kind in kinds, f"{where}: no {kind} event in {kinds}"
    for kind in expect.get("no_events") or ():
        assert kind not in kinds, f"{where}: a {kind} event"
    if "seconds_max" in expect:
        assert got["seconds"] <= expect["seconds_max"], f"{where}: took {got['seconds']:.1f}s"
    if "keys" in expect:
        _check_keys(got["creds"], expect["keys"], where)
    for rule in expect.get("sent") or ():
        body = fake.requests[rule["request"]]["body"]
        check(dig(body, str(rule["path"])), rule, f"{where}: request {rule['request']} {rule['path']}")
    for rule in expect.get("headers") or ():
        headers = {k.lower(): v for k, v in fake.requests[rule["request"]]["headers"].items()}
        if isinstance(rule.get("equals"), str):
            rule = {**rule, "equals": _keys_in(rule["equals"])}
        value = headers.get(str(rule["name"]).lower(), _missing())
        check(value, rule, f"{where}: request {rule['request']} header {rule['name']}")
    if "paths" in expect:
        assert [r["path"] for r in fake.requests] == expect["paths"], where


def _missing() -> Any:
    from tests.providers.shapes import MISSING

    return MISSING


def _keys_in(text: str) -> str:
    for i in range(8):
        text = text.replace(f"{{key{i}}}", key_value(i))
    return text


def _output(project: Any, row: dict[str, Any]) -> str:
    path = project.home / "outputs" / "shape" / f"{row['id']}.md"
    return path.read_text() if path.exists() else ""


def _check_keys(creds: list[dict[str, Any]], wanted: list[Any], where: str) -> None:
    by_label = {c["label"]: c for c in creds}
    for i, want in enumerate(wanted):
        cred = by_label.get(f"SHAPE_KEY_{i}")
        if isinstance(want, str):
            want = {"status": want}
        status = cred["status"] if cred else "ok"  # a key never used has no row: it is fine
        assert status == want["status"], f"{where}: key {i} is {status}, wanted {want['status']} ({cred})"
        if "cooldown_min" in want or "cooldown_max" in want:
            assert cred and cred["cooldown_until"], f"{where}: key {i} has no cooldown"
            left = datetime.fromisoformat(cred["cooldown_until"]).timestamp() - time.time()
            assert float(want.get("cooldown_min", 0)) - 2 <= left <= float(want.get("cooldown_max", 1e12)), (
                f"{where}: key {i} cools {left:.1f}s"
            )
