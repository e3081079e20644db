"""Spec parsing: string and mapping specs into the one model per backend, per-backend validation.
No services needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.backends import known_types, parse_spec, resolve
from runner.backends.base import BackendContext
from runner.backends.docker_spec import DockerSpec
from runner.backends.local import LocalBackend
from runner.backends.spec import LocalSpec
from runner.backends.ssh_spec import SSHSpec
from runner.errors import UsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("local", {"type": "local"}),
        ("  local ", {"type": "local"}),
        ("docker:busybox", {"type": "docker", "image": "busybox"}),
        ("docker:python:3.12-slim", {"type": "docker", "image": "python:3.12-slim"}),
        ("docker:ghcr.io/o/i@sha256:abc", {"type": "docker", "image": "ghcr.io/o/i@sha256:abc"}),
        ("ssh:example.com", {"type": "ssh", "host": "example.com"}),
        ("ssh:deploy@example.com", {"type": "ssh", "host": "example.com", "user": "deploy"}),
        ("ssh:deploy@10.0.0.5:2222", {"type": "ssh", "host": "10.0.0.5", "user": "deploy", "port": 2222}),
        ("ssh:[::1]:22", {"type": "ssh", "host": "::1", "port": 22}),
    ],
)
def test_string_specs(text: str, expected: dict[str, object]) -> None:
    assert parse_spec(text) == parse_spec(expected)
    assert parse_spec(text).model_dump(exclude_defaults=True) == {k: v for k, v in expected.items() if k != "type"}


@pytest.mark.parametrize(
    "text",
    [
        "local:x",
        "docker:",
        "docker:a b",
        "ssh:",
        "ssh:-oProxyCommand=x",
        "ssh:h:0",
        "ssh:h:70000",
        "ssh:a@b@c",
    ],
)
def test_invalid_string_specs(text: str) -> None:
    with pytest.raises(UsageError):
        parse_spec(text)


def test_unknown_type_lists_the_known_ones() -> None:
    assert known_types() == ["docker", "local", "ssh"]
    for spec in ("kubernetes:pod", {"type": "kubernetes"}):
        with pytest.raises(UsageError, match="known types: docker, local, ssh"):
            parse_spec(spec)  # type: ignore[arg-type]


def test_mapping_specs_keep_their_keys_and_default_to_local() -> None:
    assert parse_spec({}) == LocalSpec()
    spec = {"type": "docker", "image": "python:3.12-slim", "network": "none", "memory": "1g", "cpus": 1}
    assert parse_spec(spec) == DockerSpec(image="python:3.12-slim", network="none", memory=1024**3, cpus=1.0)
    model = parse_spec(spec)
    assert parse_spec(model) is model


def test_string_and_mapping_forms_share_the_defaults() -> None:
    """One model per backend: ``docker:IMAGE`` is hardened like a job's docker spec (1 GiB, 1 CPU), and
    ``ssh:host`` like a job's ssh spec passes no port, so ~/.ssh/config decides."""
    docker = parse_spec("docker:busybox")
    assert docker == parse_spec({"type": "docker", "image": "busybox"})
    assert isinstance(docker, DockerSpec) and (docker.memory, docker.nano_cpus) == (1024**3, 1_000_000_000)
    ssh = parse_spec("ssh:example.com")
    assert ssh == parse_spec({"type": "ssh", "host": "example.com"})
    assert isinstance(ssh, SSHSpec) and ssh.port is None
    assert "-p" not in ssh.ssh_argv(Path("/tmp/cp"), "60s")


def test_the_union_and_the_registry_agree() -> None:
    from runner import backends

    assert sorted(backends._FACTORIES) == known_types()


@given(st.text(max_size=80))
def test_parse_spec_raises_only_usage_errors(text: str) -> None:
    try:
        out = parse_spec(text)
    except UsageError:
        return
    assert out.type in known_types()


@given(st.dictionaries(st.text(max_size=12), st.one_of(st.none(), st.integers(), st.text(max_size=12))))
def test_parse_spec_mapping_raises_only_usage_errors(spec: dict[str, object]) -> None:
    try:
        out = parse_spec(spec)
    except UsageError:
        return
    assert out.type in known_types()


def test_resolve_local_and_its_options(tmp_path: Path) -> None:
    ctx = BackendContext(workdir=tmp_path, home=tmp_path)
    with resolve("local", ctx=ctx) as backend:
        assert isinstance(backend, LocalBackend)
        assert backend.run("echo via resolve", timeout=5).output == "via resolve\n"
    with pytest.raises(UsageError, match="takes no options"):
        resolve({"type": "local", "image": "x"}, ctx=ctx)


def docker_spec(fields: dict[str, object], base: Path) -> DockerSpec:
    """Parse a docker mapping and run its workdir checks, as jobs.yaml loading does."""
    spec = parse_spec({"type": "docker", **fields})
    assert isinstance(spec, DockerSpec)
    spec.check(base)
    return spec


def test_docker_spec_values(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    spec = docker_spec(
        {"image": "busybox", "memory": "1g", "cpus": "1.5", "mounts": ["data:/data", "data:/rw:rw"]},
        base=tmp_path,
    )
    assert (spec.memory, spec.nano_cpus, spec.network, spec.pull) == (
        1024**3,
        1_500_000_000,
        "none",
        "missing",
    )
    assert [(m.target, m.source, m.read_only) for m in spec.host_mounts(tmp_path)] == [
        ("/data", tmp_path / "data", True),
        ("/rw", tmp_path / "data", False),
    ]
    assert docker_spec({"image": "x", "memory": "512m"}, base=tmp_path).memory == 512 * 1024**2
    unlimited = docker_spec({"image": "x", "memory": None, "cpus": None}, base=tmp_path)
    assert (unlimited.memory, unlimited.nano_cpus) == (None, None)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"image": ""},
        {"image": "x", "memory": "lots"},
        {"image": "x", "cpus": 0},
        {"image": "x", "cpus": "many"},
        {"image": "x", "pull": "sometimes"},
        {"image": "x", "mounts": "data:/data"},
        {"image": "x", "mounts": ["data"]},
        {"image": "x", "mounts": ["data:relative"]},
        {"image": "x", "mounts": ["missing-dir:/m"]},
        {"image": "x", "mounts": ["data:/workspace"]},
        {"image": "x", "mounts": [{"source": "data"}]},
        {"image": "x", "privileged": True},
        {"image": "x", "cpus": "inf"},
    ],
)
def test_docker_spec_errors(bad: dict[str, object], tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with pytest.raises(UsageError):
        docker_spec(bad, base=tmp_path)


def test_ssh_spec_values() -> None:
    spec = parse_spec(
        {
            "type": "ssh",
            "host": "example.com",
            "user": "deploy",
            "port": "2222",
            "key": "~/.ssh/id_ed25519",
            "strict_host_key_checking": False,  # YAML `no`
            "ssh_options": {"ProxyJump": "bastion"},
        }
    )
    assert isinstance(spec, SSHSpec)
    assert (spec.port, spec.strict_host_key_checking, spec.ssh_options) == (
        2222,
        "no",
        ("ProxyJump=bastion",),
    )
    assert spec.key is not None and not spec.key.startswith("~")
    argv = spec.ssh_argv(Path("/tmp/cp"), "60s")
    assert argv[:2] == ["ssh", "-T"]
    for option in ("ControlMaster=auto", "ControlPath=/tmp/cp", "BatchMode=yes", "ConnectTimeout=10"):
        assert option in argv
    assert argv[-6:] == ["-p", "2222", "-l", "deploy", "-i", spec.key]
    assert spec.destination == "deploy@example.com:2222"


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"host": "-oProxyCommand=x"},
        {"host": "a b"},
        {"host": "h", "port": 0},
        {"host": "h", "port": 70000},
        {"host": "h", "port": True},
        {"host": "h", "strict_host_key_checking": "maybe"},
        {"host": "h", "ssh_options": ["ControlPath=/x"]},
        {"host": "h", "ssh_options": ["no equals sign"]},
        {"host": "h", "connect_timeout": -1},
        {"host": "h", "password": "x"},
    ],
)
def test_ssh_spec_errors(bad: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        parse_spec({"type": "ssh", **bad})


NO_SDK = """
import sys
from pathlib import Path
import runner.backends.docker_spec, runner.backends.spec, runner.backends.ssh_spec, runner.config.jobs
jobs = runner.config.jobs.load_jobs(Path(sys.argv[1]))
jobs.get("boxed").spec.backend.check(jobs.get("boxed").workdir)
assert "docker" not in sys.modules, sorted(m for m in sys.modules if m.startswith("docker"))
"""


def test_reading_specs_never_imports_the_docker_sdk(tmp_path: Path) -> None:
    """An uncached ``runner jobs list`` loads jobs.yaml: a docker job must not pull in the Docker SDK."""
    (tmp_path / "data").mkdir()
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  boxed:\n    prompt: hi\n    backend: {type: docker, image: x, mounts: [data:/data]}\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", NO_SDK, str(jobs)], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
