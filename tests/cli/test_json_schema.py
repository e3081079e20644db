"""Every ``--json`` output's keys against the table in docs/commands.md "JSON output", through
the real ``runner`` (one name per concept: a run is ``id``, references are ``KIND_id``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from tests.conftest import Project

DOC = Path(__file__).resolve().parents[2] / "docs" / "commands.md"

JOBS = """\
jobs:
  good:
    agent: false
    pre_run: "echo hello world"
  bad:
    agent: false
    pre_run: "echo partial; echo oops >&2; exit 3"
  daily:
    agent: false
    schedule: "0 2 * * *"
    pre_run: "true"
"""


def schema_table() -> dict[str, str]:
    """The rows of the "JSON output" table: output name -> its keys column."""
    text = DOC.read_text()
    section = text.split("## JSON output", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| (.+?) \| (.+) \|$", line)
        if m and m.group(1) not in ("output", "---"):
            rows[m.group(1).strip("`")] = m.group(2)
    return rows


def parse(spec: str) -> Any:
    """A keys column as ("list" | "lines", inner) or a dict key -> (optional, nested spec or None)."""
    spec = spec.strip()
    for kind in ("list", "lines"):
        if spec.startswith(f"{kind} of "):
            return (kind, spec[len(kind) + 4 :])
    return spec


def keys_of(spec: str, shapes: dict[str, str]) -> dict[str, tuple[bool, str | None]]:
    """``spec`` (items or a shape name) as key -> (optional, nested spec)."""
    spec = spec.strip()
    if spec in shapes:
        return keys_of(shapes[spec], shapes)
    out: dict[str, tuple[bool, str | None]] = {}
    for item in re.findall(r"\([a-z]+\)|`[a-z_]+`\??(?: \((?:list of )?[a-z]+\))?", spec):
        if item.startswith("("):
            out.update(keys_of(shapes[item.strip("()")], shapes))
            continue
        m = re.match(r"`([a-z_]+)`(\?)?(?: \((.+)\))?", item)
        assert m, item
        out[m.group(1)] = (bool(m.group(2)), m.group(3))
    assert out, f"no keys in {spec!r}"
    return out


def check(value: Any, spec: str, shapes: dict[str, str], where: str, seen: set[str]) -> None:
    """``value`` has exactly the documented keys (optional ones may be absent), recursively."""
    parsed = parse(spec)
    if isinstance(parsed, tuple):
        assert isinstance(value, list), f"{where}: expected a list, got {type(value).__name__}"
        for i, item in enumerate(value):
            check(item, parsed[1], shapes, f"{where}[{i}]", seen)
        return
    assert isinstance(value, dict), f"{where}: expected an object, got {type(value).__name__}"
    documented = keys_of(parsed, shapes)
    missing = {k for k, (optional, _) in documented.items() if not optional and k not in value}
    extra = set(value) - set(documented)
    assert not missing and not extra, f"{where}: missing {sorted(missing)}, undocumented {sorted(extra)}"
    seen.add(where.split("[")[0].split(".")[0])
    for key, (_, nested) in documented.items():
        if nested is not None and key in value:
            check(value[key], nested, shapes, f"{where}.{key}", seen)


def json_commands() -> set[str]:
    """Every command of the click tree with a ``--json`` option, as ``runner GROUP NAME``."""
    from runner.cli import cli

    found: set[str] = set()

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, f"{path} {name}")
        elif any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option)):
            found.add(path)

    walk(cli, "runner")
    return found


def test_every_json_command_is_documented() -> None:
    documented = {name for name in schema_table() if name.startswith("runner ")}
    assert json_commands() == documented


def test_json_keys_match_the_documented_schema(project: Project) -> None:
    project.write_jobs(JOBS)
    table = schema_table()
    shapes = {k: v for k, v in table.items() if not k.startswith("runner ")}
    good = project.run("run-job", "good", "--json")
    assert good.returncode == 0, good.stderr
    run_id = json.loads(good.stdout)["id"]
    assert project.run("run-job", "bad").returncode == 1
    assert project.run("kanban", "add", "a task", "--job", "good").returncode == 0
    commands = {
        "runner run-job": ["run-job", "good"],
        "runner runs list": ["runs", "list"],
        "runner runs show": ["runs", "show", run_id],
        "runner runs logs": ["runs", "logs", run_id],
        "runner runs search": ["runs", "search", "hello"],
        "runner runs checkpoints": ["runs", "checkpoints", run_id],
        "runner runs prune": ["runs", "prune", "--dry-run", "--keep-last", "100"],
        "runner jobs list": ["jobs", "list"],
        "runner jobs validate": ["jobs", "validate"],
        "runner jobs next": ["jobs", "next", "daily"],
        "runner approvals check": ["approvals", "check", "--json", "--", "ls"],
        "runner doctor": ["doctor"],
        "runner budget": ["budget"],
        "runner curator status": ["curator", "status"],
        "runner curator run": ["curator", "run", "--dry-run"],
        "runner kanban add": ["kanban", "add", "another", "--job", "good"],
        "runner kanban list": ["kanban", "list"],
        "runner kanban show": ["kanban", "show", "1"],
        "runner tools list": ["tools", "list"],
    }
    seen: set[str] = set()
    for name, args in commands.items():
        argv = args if "--json" in args else [*args, "--json"]
        res = project.run(*argv)
        assert res.returncode in (0, 1), f"{name}: {res.stderr}"
        if table[name].startswith("lines of "):
            value: Any = [json.loads(line) for line in res.stdout.splitlines()]
            spec = "list of " + table[name][len("lines of ") :]
        else:
            value, spec = json.loads(res.stdout), table[name]
        assert value, f"{name}: nothing to check"
        check(value, spec, shapes, name, seen)
    assert seen == set(commands)
    [row] = [r for r in json.loads(project.run("runs", "list", "--json").stdout) if r["id"] == run_id]
    assert "parent_run" not in row and row["retry_of_id"] is None  # one name for the retry chain
