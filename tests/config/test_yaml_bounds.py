"""Bounded YAML (issue 29, item 6): a few hundred bytes of nested aliases stand for millions of
nodes. jobs.yaml and config.yaml that do are refused at once, one line naming the file, exit 2;
anchors, aliases and merge keys of ordinary size keep working."""

from __future__ import annotations

import textwrap
import time
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.config import yamlio
from runner.config.jobs import load_jobs
from runner.errors import ConfigError
from runner.testing import final


def bomb(width: int, depth: int) -> str:
    """Nested aliases: the last anchor stands for ``width ** depth`` scalars."""
    names = [f"{chr(97 + i % 26)}{i // 26 or ''}" for i in range(depth)]  # a, b, ..., z, a1, ...
    lines = [f"{names[0]}: &{names[0]} [{','.join(['x'] * width)}]"]
    for level in range(1, depth):
        refs = ",".join([f"*{names[level - 1]}"] * width)
        lines.append(f"{names[level]}: &{names[level]} [{refs}]")
    return "\n".join(lines) + "\n"


def last_anchor(depth: int) -> str:
    return f"{chr(97 + (depth - 1) % 26)}{(depth - 1) // 26 or ''}"


# The 317-byte jobs.yaml: 4.8 million scalars under `vars:` (8.6 s and a 22.9 MB run snapshot on main before).
BOMB_JOBS = "jobs:\n  bomb:\n    prompt: hi\n    vars:\n" + textwrap.indent(bomb(9, 7), " " * 6)


def one_error(res: Any, *words: str) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for word in words:
        assert word in res.stderr, res.stderr
    return res.stderr


def tree_size(value: Any, sizes: dict[int, int] | None = None) -> int:
    """Nodes ``value`` stands for as a tree (shared objects counted at each place they appear)."""
    sizes = {} if sizes is None else sizes
    if id(value) in sizes:
        return sizes[id(value)]
    if isinstance(value, list):
        size = 1 + sum(tree_size(item, sizes) for item in value)
    elif isinstance(value, dict):
        size = 1 + sum(tree_size(k, sizes) + tree_size(v, sizes) for k, v in value.items())
    else:
        return 1
    sizes[id(value)] = size
    return size


def test_the_317_byte_bomb_is_refused_by_jobs_validate_at_once(project):
    assert len(BOMB_JOBS.encode()) == 317
    path = project.write_jobs(BOMB_JOBS)
    started = time.monotonic()
    res = project.run("jobs", "validate")
    elapsed = time.monotonic() - started
    # line 9 is `e: &e [*d,...]`, the first anchor past the limit (9**5 scalars)
    one_error(res, f"{path}: invalid YAML: line 9, column 10: aliases expand this to more than 50,000 nodes")
    assert elapsed < 5, elapsed  # 8.6 s (and 23 MB) before; interpreter start-up now


def test_a_bomb_in_jobs_yaml_runs_nothing(project, fake):
    project.write_jobs(BOMB_JOBS)
    fake.add(final("done"))
    one_error(project.run("run-job", "bomb"), "jobs.yaml: invalid YAML", "aliases expand")
    assert not fake.requests


def test_a_bomb_in_config_yaml_is_refused(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    config = project.write("config.yaml", "providers:\n  p:\n" + textwrap.indent(bomb(9, 7), " " * 4))
    one_error(project.run("--config", str(config), "jobs", "validate"), f"{config}: invalid YAML", "aliases expand")


def test_the_bound_costs_the_text_not_the_expansion():
    text = bomb(9, 12)  # 9**12 = 282 billion scalars
    started = time.perf_counter()
    with pytest.raises(yamlio.AliasBombError):
        yamlio.load(text)
    assert time.perf_counter() - started < 0.5


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  a: &a\n    prompt: hi\n    vars: {me: *a}\n")
    with pytest.raises(ConfigError, match=r"line 2, column 6: an alias refers to its own anchor"):
        load_jobs(path)


def test_merge_keys_and_aliases_of_ordinary_size_keep_working(project):
    # jobs.yaml takes only defaults and jobs at the top level: the anchors sit in a first job
    anchors = (
        "  anchors:\n    prompt: anchors\n    vars:\n"
        "      base: &base {timeout: 5m, max_iterations: 7, approvals: deny}\n"
        "      tools: &tools [terminal, files]\n"
        "      common: &vars {a: 1, b: [2, 3], c: {d: 4}}\n"
    )
    jobs = "".join(
        f"  job-{i}:\n    <<: *base\n    prompt: job {i}\n    toolsets: *tools\n    vars: {{n: {i}, common: *vars}}\n"
        for i in range(100)
    )
    path = project.write_jobs("jobs:\n" + anchors + jobs)
    job = load_jobs(path).get("job-42")
    assert job.spec.timeout == 300 and job.spec.max_iterations == 7
    assert list(job.spec.toolsets) == ["terminal", "files"]
    assert job.spec.vars == {"n": 42, "common": {"a": 1, "b": [2, 3], "c": {"d": 4}}}
    res = project.run("jobs", "validate")
    assert res.returncode == 0 and "101 jobs, all valid" in res.stdout, res.stderr


def test_a_large_file_without_aliases_is_bounded_by_its_size_alone():
    text = "[" + ",".join(["1"] * (yamlio.MAX_EXPANDED_NODES + 10)) + "]"
    assert len(yamlio.load(text)) == yamlio.MAX_EXPANDED_NODES + 10


@settings(max_examples=200, deadline=None)
@given(width=st.integers(1, 12), depth=st.integers(1, 9), uses=st.integers(1, 4))
def test_property_a_document_loads_exactly_when_it_stands_for_at_most_the_limit(width, depth, uses):
    """Any shape of nested aliases: loaded (and then as big as it looks) iff its expansion fits,
    refused otherwise, and either way at the cost of the text."""
    text = bomb(width, depth) + "".join(f"use{i}: *{last_anchor(depth)}\n" for i in range(uses))
    expected = tree_size(_load_unbounded(text))
    started = time.perf_counter()
    try:
        data = yamlio.load(text)
    except yamlio.AliasBombError:
        assert expected > yamlio.MAX_EXPANDED_NODES
    else:
        assert tree_size(data) == expected <= yamlio.MAX_EXPANDED_NODES
    assert time.perf_counter() - started < 0.5


def _load_unbounded(text: str) -> Any:
    """The same document through PyYAML's own safe loader (shared objects: cheap to build)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
