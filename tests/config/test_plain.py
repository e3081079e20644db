"""The plain form of the config models (runner.config.plain): the same values and the same answers
as the pydantic models it was frozen from, read-only, and nothing but config models by tag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.config.jobs import load_jobs
from runner.config.machine import load_config
from runner.config.plain import Plain, Unfreezable, freeze, plain_class, thaw
from runner.errors import UsageError

CONFIG = """\
timezone: Europe/Berlin
providers:
  default:
    base_url: http://127.0.0.1:9/v1
    api_keys: [env:OPENAI_API_KEY]
    model_options: {temperature: 0.2, extra_body: {a: 1}}
  other:
    base_url: http://127.0.0.1:9/v2
    api_keys: [env:OTHER_KEY]
mcp_servers:
  tools:
    command: python
    args: [-m, tool]
    env: [SOME_TOKEN]
    approvals: {read: safe}
  remote:
    url: http://127.0.0.1:9/mcp
    headers: {Authorization: env:MCP_TOKEN}
alerts: [file, "webhook:http://127.0.0.1:9/hook"]
auxiliary: other/small
"""

JOBS = """\
jobs:
  local:
    prompt: Say ok
    model: [other/big, default]
    model_options: {temperature: 0.7, extra_body: {b: 2}}
    vars: {n: 3, nested: {x: [1, 2.5, null, true]}}
    web: {allow_domains: [example.com], deny_domains: [bad.example.com]}
    retries: {attempts: 2, backoff: 10m}
    toolsets: [terminal, files]
  boxed:
    prompt: Say ok
    backend: {type: docker, image: "busybox:1", memory: 512m, cpus: 1.5, mounts: ["data:/data:ro"]}
  remote:
    prompt: Say ok
    workdir: /srv/app
    backend: "ssh:deploy@build.example.org:2222"
"""


@pytest.fixture
def loaded(tmp_path: Path) -> tuple[Any, Any]:
    (tmp_path / "data").mkdir()
    config_path = tmp_path / "config.yaml"
    config_path.write_text(CONFIG)
    config_path.chmod(0o600)
    jobs_path = tmp_path / "jobs.yaml"
    jobs_path.write_text(JOBS)
    env = {"OPENAI_API_KEY": "sk-x"}
    config = load_config(config_path, environ=env)
    return config, load_jobs(jobs_path, default_timezone=config.timezone)


def _through_json(model: Any) -> Any:
    return thaw(json.loads(json.dumps(freeze(model))))


def test_every_value_survives_freezing_through_json(loaded: tuple[Any, Any]) -> None:
    config, jobs = loaded
    assert _through_json(config).model_dump() == config.model_dump()
    for job in jobs.jobs.values():
        plain = _through_json(job.spec)
        assert isinstance(plain, Plain)
        assert plain.model_dump() == job.spec.model_dump()
        assert type(plain.backend).__name__ == type(job.spec.backend).__name__
    assert _through_json(config).model_dump(mode="json") == config.model_dump(mode="json")


def test_the_plain_form_answers_as_the_models_do(loaded: tuple[Any, Any], tmp_path: Path) -> None:
    config, jobs = loaded
    pconfig = _through_json(config)
    for ref in ("default", "other", "other/big", "meta-llama/Llama-3.1-8B", "nobody"):
        assert pconfig.split_model_ref(ref) == config.split_model_ref(ref)
    local = jobs.jobs["local"].spec
    plocal = _through_json(local)
    assert plocal.web.policy() == local.web.policy()
    provider = config.providers["default"].model_options
    merged = plocal.model_options.over(pconfig.providers["default"].model_options)
    assert merged.model_dump() == local.model_options.over(provider).model_dump()
    assert plocal.backend.check(tmp_path) is None
    docker = jobs.jobs["boxed"].spec.backend
    pdocker = _through_json(docker)
    assert pdocker.nano_cpus == docker.nano_cpus == 1_500_000_000
    assert pdocker.host_mounts(tmp_path) == docker.host_mounts(tmp_path)
    assert [str(m) for m in pdocker.mounts] == [str(m) for m in docker.mounts]
    assert pdocker.check(tmp_path) is None and docker.check(tmp_path) is None  # the checks a snapshot's hit runs
    (tmp_path / "data").rmdir()
    with pytest.raises(UsageError) as plain_refusal:
        pdocker.check(tmp_path)
    with pytest.raises(UsageError) as model_refusal:
        docker.check(tmp_path)
    assert str(plain_refusal.value) == str(model_refusal.value)
    ssh = jobs.jobs["remote"].spec.backend
    pssh = _through_json(ssh)
    assert (pssh.destination, pssh.workdir) == (ssh.destination, ssh.workdir) == ("deploy@build.example.org:2222", "/srv/app")
    assert pssh.ssh_argv(tmp_path / "c", "60") == ssh.ssh_argv(tmp_path / "c", "60")
    assert pssh.check(tmp_path) is None and ssh.check(tmp_path) is None
    for name, server in config.mcp_servers.items():
        plain = pconfig.mcp_servers[name]
        assert plain.kind == server.kind
        assert plain.level_of("read", False) == server.level_of("read", False)
        assert plain.model_dump(mode="json") == server.model_dump(mode="json")


def test_a_plain_object_is_read_only_and_copies_with_changes(loaded: tuple[Any, Any]) -> None:
    spec = _through_json(loaded[1].jobs["local"].spec)
    with pytest.raises(TypeError, match="read-only"):
        spec.prompt = "rm -rf /"
    with pytest.raises(TypeError, match="read-only"):
        del spec.approvals
    changed = spec.model_copy(update={"max_iterations": 3})
    assert (changed.max_iterations, spec.max_iterations) == (3, 30)
    assert changed != spec and spec == _through_json(loaded[1].jobs["local"].spec)
    assert hash(spec) == hash(_through_json(loaded[1].jobs["local"].spec))
    with pytest.raises(AttributeError):
        _ = spec.no_such_field


def _spec_with_vars(tmp_path: Path, vars_yaml: str) -> Any:
    """The validated spec of a one-job jobs.yaml whose ``vars:`` is ``vars_yaml``."""
    jobs_path = tmp_path / "jobs.yaml"
    jobs_path.write_text(f"jobs:\n  one:\n    prompt: Say ok\n    vars: {vars_yaml}\n")
    return load_jobs(jobs_path).jobs["one"].spec


def test_values_json_cannot_hold_are_refused(tmp_path: Path) -> None:
    spec = _spec_with_vars(tmp_path, "{since: 2024-01-01}")
    with pytest.raises(Unfreezable, match="date"):
        freeze(spec)


@pytest.mark.parametrize(
    "tree",
    [
        {"m": "os:system", "f": {}},
        {"m": "runner.settings:Settings", "f": {}},
        {"m": "runner.config.jobs:JobSpec", "f": {}, "extra": 1},
        {"x": 1},
        {"m": "runner.config.jobs:Job Spec", "f": {}},
        {"t": {"a": 1}},
        (1, 2),
    ],
)
def test_thaw_takes_nothing_but_config_models(tree: Any) -> None:
    with pytest.raises(ValueError):
        thaw(tree)


def test_a_user_mapping_shaped_like_a_model_stays_a_mapping(tmp_path: Path) -> None:
    spec = _spec_with_vars(tmp_path, '{m: "runner.config.jobs:JobSpec", f: {prompt: other}}')
    plain = _through_json(spec)
    assert plain.vars == {"m": "runner.config.jobs:JobSpec", "f": {"prompt": "other"}}
    assert plain_class("runner.config.jobs:JobSpec") is type(plain)


_SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_KEYS = st.sampled_from(["m", "f", "d", "t", "x", "__class__"]) | st.text(max_size=6)
_VALUES = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), _VALUES, max_size=4))
def test_any_vars_survive_the_round_trip_exactly(values: dict[str, Any]) -> None:
    from runner.config.jobs import JobSpec

    spec = JobSpec(prompt="Say ok", vars=values)
    assert _through_json(spec).vars == spec.vars


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_thaw_takes_any_json_or_refuses_it_with_a_value_error(tree: Any) -> None:
    try:
        thaw(tree)
    except ValueError:
        pass
