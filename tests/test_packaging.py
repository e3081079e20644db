"""Packaging and deployment, with the real parts: the wheel pip builds (its distribution name, the
package whole, nothing else at the top, the console script); the Dockerfile, the systemd unit and docs/operations.md
agreeing (one service user, ExecStart where the documented install puts runner, the web extra,
the package compiled, a HEALTHCHECK); that HEALTHCHECK's command against a real `runner serve`
(up, hung, stopped); the image built and found healthy when dockerd has its base image."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import uuid
import zipfile
from pathlib import Path

import pytest

import runner
from tests.conftest import REPO
from tests.servehelp import ServeProc, wait_for, write_config

DOCKERFILE = REPO / "Dockerfile"
UNIT = REPO / "contrib" / "systemd" / "runner.service"
OPERATIONS = REPO / "docs" / "operations.md"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DIST_NAME = "runner-agents"  # "runner" on the package index is an unrelated project
PACKAGES = ("runner",)  # one import package: a top-level "backends" would collide with another distribution's


# -- reading the files ----------------------------------------------------------------------
def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, rest), continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            keyword, _, rest = pending.partition(" ")
            out.append((keyword.upper(), " ".join(rest.split())))
            pending = ""
    return out


def instruction(keyword: str) -> list[str]:
    return [rest for kw, rest in dockerfile() if kw == keyword]


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in instruction("ENV"):
        for item in shlex.split(rest):
            key, _, value = item.partition("=")
            env[key] = value
    return env


def healthcheck_argv() -> list[str]:
    (rest,) = instruction("HEALTHCHECK")
    options, sep, command = rest.partition("CMD ")
    assert sep, f"Dockerfile: HEALTHCHECK without CMD: {rest}"
    assert command.startswith("["), "Dockerfile: HEALTHCHECK CMD in exec form (no shell in between)"
    return json.loads(command)


def unit() -> dict[str, str]:
    service: dict[str, str] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            service[key] = value
    return service


def operations_install() -> list[str]:
    """The commands of docs/operations.md's systemd install block (the one that installs the unit)."""
    blocks = re.findall(r"```\n(.*?)```", OPERATIONS.read_text(), re.S)
    (block,) = [b for b in blocks if "runner.service /etc/systemd/system/" in b]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def useradd(text: str) -> str:
    """The one ``useradd ... runner`` command in ``text`` (a Dockerfile RUN, a doc line, a comment)."""
    found = re.findall(r"useradd [^&`\n]*?runner(?=\s*(?:&&|`|\n|$))", text)
    assert len(found) == 1, f"expected one useradd line, found {found}"
    return found[0]


# -- the wheel -------------------------------------------------------------------------------
@pytest.mark.slow
def test_wheel_has_the_distribution_name_the_package_and_the_command(tmp_path):
    """`pip wheel` of a copy of what the Dockerfile copies: metadata name and version, every file
    of the package (runner/backends/ inside it), the console script, nothing else at the top. Build isolation as `pip install .` does (setuptools>=68
    from the index or /opt/wheels)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=skip)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if res.returncode != 0 and "No matching distribution found for setuptools" in res.stderr:
        pytest.skip("pip cannot fetch the build backend (setuptools>=68) here: no index, no wheel in find-links")
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("*.whl")
    assert wheel.name == f"runner_agents-{runner.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"runner_agents-{runner.__version__}.dist-info"
        metadata = zf.read(f"{info}/METADATA").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert re.search(r"^Name: runner-agents$", metadata, re.M), metadata[:300]
    assert re.search(rf"^Version: {re.escape(runner.__version__)}$", metadata, re.M)
    assert {"web", "otel", "distributed", "anthropic"} <= set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))
    assert "[console_scripts]\nrunner = runner.entry:main" in entry_points
    for pkg in PACKAGES:  # every file of the package, data included (templates, static, py.typed)
        files = {
            p.relative_to(src).as_posix()
            for p in (src / pkg).rglob("*")
            if p.is_file() and p.name != "README.md"  # the folder READMEs are for readers of the repo
        }
        assert f"{pkg}/__init__.py" in files
        missing = sorted(files - names)
        assert not missing, f"not in the wheel: {missing[:10]}"
    assert not {n.split("/")[0] for n in names} - {*PACKAGES, info}, "the wheel installs nothing else at the top"
    assert "runner/backends/__init__.py" in names
    assert not any(n.split("/")[0] in ("backends", "backends.py") for n in names), "no top-level `backends` module"


def test_pyproject_names_the_distribution_and_keeps_the_command():
    project = PYPROJECT["project"]
    assert project["name"] == DIST_NAME
    assert project["scripts"] == {"runner": "runner.entry:main"}
    assert "version" in project["dynamic"]  # from runner/__init__.py's __version__, written once
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "runner.__version__"}
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == [f"{p}*" for p in PACKAGES]


def test_version_is_runners_own(project):
    """`runner --version` reads runner.__version__, not the metadata of a distribution named
    "runner" (an unrelated one could be installed beside it)."""
    res = project.run("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"runner, version {runner.__version__}"


def test_no_doc_installs_the_other_distribution():
    """Nothing tells the reader to `pip install runner` / `'runner[extra]'`: that is the 2013
    project on the package index."""
    wrong = re.compile(r"pip install (?:-U )?['\"]?runner(?:\[[a-z,]+\])?['\"]?(?=\s|`|$)", re.M)
    paths = [REPO / "README.md", DOCKERFILE, *sorted((REPO / "docs").glob("*.md"))]
    paths += sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in paths for m in wrong.finditer(p.read_text())]
    assert not found, found


# -- the Dockerfile, the unit and the docs agree -------------------------------------------
def test_one_service_user_everywhere():
    (run_user,) = [rest for kw, rest in dockerfile() if kw == "RUN" and "useradd" in rest]
    in_image = useradd(run_user)
    in_docs = [line.removeprefix("sudo ") for line in operations_install() if "useradd" in line]
    assert in_docs == [in_image], "docs/operations.md's useradd differs from the Dockerfile's"
    assert useradd(UNIT.read_text()) == in_image, "the unit's comment names another useradd line"
    argv = shlex.split(in_image)
    assert argv[-1] == "runner" and "--system" in argv and "--create-home" in argv
    home = argv[argv.index("--home-dir") + 1]
    assert argv[argv.index("--shell") + 1] == "/usr/sbin/nologin"
    service = unit()
    assert service["User"] == service["Group"] == "runner"
    assert instruction("USER") == ["runner"]
    assert home == docker_env()["RUNNER_HOME"] == service["Environment"].removeprefix("RUNNER_HOME=")
    assert instruction("VOLUME") == [json.dumps([home])]
    assert service["StateDirectory"] == Path(home).name and Path(home).parent == Path("/var/lib")


def test_unit_execstart_is_where_the_documented_install_puts_runner():
    commands = operations_install()
    clones = [shlex.split(c) for c in commands if c.startswith("sudo git clone ")]
    venvs = [shlex.split(c) for c in commands if " -m venv " in c]
    assert len(clones) == 1 and len(venvs) == 1, commands
    checkout, venv = Path(clones[0][-1]), Path(venvs[0][-1])
    pips = [shlex.split(c) for c in commands if c.startswith(f"sudo {venv}/bin/pip install ")]
    assert len(pips) == 1, f"docs/operations.md: no `{venv}/bin/pip install` line"
    target, extras = re.fullmatch(r"(.*)\[(.*)\]", pips[0][-1]).groups()  # type: ignore[union-attr]
    assert Path(target) == checkout and "web" in extras.split(",")
    assert set(extras.split(",")) <= set(PYPROJECT["project"]["optional-dependencies"])
    service = unit()
    exec_start = shlex.split(service["ExecStart"])
    assert exec_start[0] == f"{venv}/bin/runner"  # the console script pip writes into the venv
    installs = [shlex.split(c) for c in commands if "runner.service /etc/systemd/system/" in c]
    assert installs[0][-2] == f"{checkout}/contrib/systemd/runner.service"
    workdir = service["WorkingDirectory"]
    assert any(c.startswith("sudo install -d -o runner -g runner ") and c.endswith(f" {workdir}") for c in commands)


def test_dockerfile_installs_the_web_extra_compiles_the_package_and_checks_health():
    args = dict(rest.split("=", 1) for rest in instruction("ARG") if "=" in rest)
    extras = args["EXTRAS"].split(",")
    assert "web" in extras, "the stock image must serve the dashboard"
    assert set(extras) <= set(PYPROJECT["project"]["optional-dependencies"])
    (install,) = [rest for kw, rest in dockerfile() if kw == "RUN" and "pip install" in rest]
    assert 'pip install ".[${EXTRAS}]"' in install
    compile_cmd = install[install.index("compileall") :]
    assert all(f"/{pkg}" in compile_cmd for pkg in PACKAGES), compile_cmd
    assert "python -P " in install, "the site-packages path must be found without the WORKDIR's sources"
    copied = {shlex.split(rest)[-1].removeprefix("./") for rest in instruction("COPY")}
    assert set(PACKAGES) <= copied
    (health,) = instruction("HEALTHCHECK")
    assert re.search(r"--interval=\d+s", health) and re.search(r"--timeout=\d+s", health)
    argv = healthcheck_argv()
    assert argv[0] in PYPROJECT["project"]["scripts"]  # the console script the image installs
    from runner.cli import cli

    ctx = cli.make_context("runner", argv[1:], resilient_parsing=True)
    group = cli.get_command(ctx, argv[1])
    assert group is not None and group.name == "serve"
    assert [json.loads(rest) for rest in instruction("CMD")] == [["runner", "serve"]]


# -- the HEALTHCHECK's command against a real serve -----------------------------------------
def _health(project) -> subprocess.CompletedProcess[str]:
    argv = healthcheck_argv()
    assert argv[0] == "runner"
    return project.run(*argv[1:])  # python -m runner: the console script's entry point


@pytest.mark.slow
def test_healthcheck_follows_serves_heartbeat(project):
    """Down before serve starts; up once its heartbeat is written; down again while its main loop
    is stopped (SIGSTOP: the pid lives, the heartbeat ages past max(3 heartbeats, 15 s)); up
    when it goes on; down once it has stopped."""
    project.write_jobs("jobs:\n  tick:\n    schedule: every 1h\n    agent: false\n    pre_run: 'true'\n")
    write_config(project)
    res = _health(project)
    assert res.returncode == 1 and res.stdout.strip() == "serve: never started on this RUNNER_HOME", res
    serve = ServeProc(project).started()
    try:
        res = wait_for(lambda: (r := _health(project)).returncode == 0 and r, 20, 0.2, "a healthy serve")
        assert res.stdout.startswith(f"serve: running (pid {serve.pid}, heartbeat "), res.stdout
        began = time.monotonic()
        assert _health(project).returncode == 0
        took = time.monotonic() - began
        assert took < 5, f"one health check took {took:.2f}s"
        status = json.loads(project.run("serve", "status", "--json").stdout)
        assert status["alive"] is True and status["pid"] == serve.pid
        serve.send(signal.SIGSTOP)
        try:
            res = wait_for(lambda: (r := _health(project)).returncode == 1 and r, 40, 1.0, "a hung serve found")
            assert res.stdout.startswith(f"serve: not running (last: pid {serve.pid}"), res.stdout
        finally:
            serve.send(signal.SIGCONT)
        wait_for(lambda: _health(project).returncode == 0, 20, 0.2, "serve healthy again")
    finally:
        assert serve.stop() == 0, serve.log()
    res = _health(project)
    assert res.returncode == 1 and res.stdout.startswith(f"serve: not running (last: pid {serve.pid}"), res.stdout


# -- the image -----------------------------------------------------------------------------
def _docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert res.returncode == 0, f"docker {' '.join(args)}: {res.stderr[-3000:]}"
    return res


@pytest.mark.docker
@pytest.mark.slow
def test_image_builds_and_its_healthcheck_passes(tmp_path):
    """`docker build` of the repository, `runner serve` in it on a project, the HEALTHCHECK seen
    healthy by dockerd (interval shortened at run time), the web extra and the package's bytecode
    in the image. Skipped when the docker CLI, dockerd or the base image is missing: the build
    pulls nothing here (CI without a registry)."""
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI")
    if _docker("info", check=False, timeout=30).returncode != 0:
        pytest.skip("dockerd not reachable; run .ci/services.sh")
    (base,) = instruction("FROM")
    if _docker("image", "inspect", base, check=False, timeout=30).returncode != 0:
        pytest.skip(f"base image {base} not present in dockerd (no registry reachable to pull it): `docker pull {base}`")
    tag = f"runner-packaging-test:{uuid.uuid4().hex[:8]}"
    name = tag.replace(":", "-")
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    (project_dir / "jobs.yaml").write_text("jobs:\n  tick:\n    schedule: every 1h\n    agent: false\n    pre_run: 'true'\n")
    project_dir.chmod(0o755)
    (project_dir / "jobs.yaml").chmod(0o644)
    _docker("build", "--pull=false", "-t", tag, str(REPO), timeout=1800)
    try:
        probe = "import starlette, uvicorn, runner.web.app, runner.backends, runner; print(runner.__version__)"
        assert _docker("run", "--rm", tag, "python", "-c", probe).stdout.strip() == runner.__version__
        compiled = (
            "import os, importlib.util as u, runner, runner.backends as b; "
            "print(all(os.path.exists(u.cache_from_source(m.__file__)) for m in (runner, b)))"
        )
        cached = _docker("run", "--rm", tag, "python", "-P", "-c", compiled)
        assert cached.stdout.strip() == "True", "the package and its subpackages compiled in the image"
        assert _docker("run", "--rm", tag, "id", "-un").stdout.strip() == "runner"
        _docker(
            "run", "-d", "--init", "--name", name, "--health-interval=2s", "--health-start-period=30s",
            "-v", f"{project_dir}:/srv/project:ro", tag,
        )  # fmt: skip
        try:
            def status() -> str:
                return _docker("inspect", "-f", "{{.State.Health.Status}}", name).stdout.strip()

            wait_for(lambda: status() == "healthy", 90, 1.0, "the container healthy")
            res = _docker("exec", name, *healthcheck_argv(), check=False)
            assert res.returncode == 0 and res.stdout.startswith("serve: running"), res
        finally:
            logs = _docker("logs", name, check=False).stderr
            _docker("rm", "-f", name, check=False)
        assert "serve started" in logs, logs[-2000:]
    finally:
        _docker("rmi", "-f", tag, check=False, timeout=300)


def test_nothing_left_of_the_old_paths():
    """The unit no longer points at /usr/local/bin/runner (no documented install creates it)."""
    assert "/usr/local/bin/runner" not in UNIT.read_text()
    assert "/usr/local/bin/runner" not in OPERATIONS.read_text()
    assert os.path.isabs(unit()["ExecStart"].split()[0])
