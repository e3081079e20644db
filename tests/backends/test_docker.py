"""Docker-specific behaviour, read back from a real dockerd."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_helpers import make_ctx

from runner.backends import resolve
from runner.backends.base import BackendContext
from runner.backends.docker import LABEL_HOME, LABEL_JOB, LABEL_MANAGED, LABEL_RUN, cleanup_stale
from runner.backends.docker_spec import DockerSpec
from runner.errors import BackendError, UsageError

pytestmark = pytest.mark.docker
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def client(docker_image: str) -> Iterator[Any]:
    import docker

    api = docker.from_env()
    yield api
    api.close()


@pytest.fixture(scope="module")
def hardened(docker_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """One container with limits and two extra mounts, shared by the read-only checks."""
    root = tmp_path_factory.mktemp("hardened")
    (root / "ro").mkdir()
    (root / "ro" / "data.txt").write_text("read me")
    (root / "rw").mkdir()
    ctx = make_ctx(root, run_id="hardened-run", job="hardening")
    spec = {
        "type": "docker",
        "image": docker_image,
        "memory": "256m",
        "cpus": 0.5,
        "mounts": [f"{root / 'ro'}:/data", {"source": str(root / "rw"), "target": "/out", "rw": True}],
    }
    backend = resolve(spec, ctx=ctx)
    yield backend, ctx.workdir
    backend.close()


def test_hardening_as_docker_inspect_reports_it(hardened: tuple[Any, Path], client: Any) -> None:
    backend, workdir = hardened
    info = client.api.inspect_container(backend.name)
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 256
    assert host["NetworkMode"] == "none"
    assert host["Memory"] == 256 * MiB
    assert host["NanoCpus"] == 500_000_000
    assert "/tmp" in host["Tmpfs"]
    assert info["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
    assert info["Config"]["WorkingDir"] == "/workspace"
    labels = info["Config"]["Labels"]
    assert (labels[LABEL_MANAGED], labels[LABEL_RUN], labels[LABEL_JOB]) == ("1", "hardened-run", "hardening")
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    assert mounts["/workspace"]["Source"] == str(workdir.resolve()) and mounts["/workspace"]["RW"]
    assert mounts["/data"]["RW"] is False and mounts["/out"]["RW"] is True
    assert not any("docker.sock" in m["Source"] for m in info["Mounts"])


def test_inside_the_container(hardened: tuple[Any, Path]) -> None:
    backend, _ = hardened
    interfaces = backend.run("cat /proc/net/dev", timeout=10).output
    assert "lo:" in interfaces and "eth0" not in interfaces
    capabilities = backend.run("grep CapEff /proc/self/status", timeout=10).output
    assert capabilities.split()[-1] == "0000000000000000"
    assert backend.run("cat /data/data.txt", timeout=10).output == "read me"
    assert backend.run("touch /data/new", timeout=10).exit_code != 0
    assert backend.run("echo out > /out/file && cat /out/file", timeout=10).output == "out\n"
    assert backend.run("grep ' /tmp ' /proc/mounts", timeout=10).output.startswith("tmpfs")


def test_files_in_workspace_belong_to_the_invoking_user(hardened: tuple[Any, Path]) -> None:
    backend, workdir = hardened
    backend.run("mkdir -p made && echo x > made/by-command", cwd="/workspace", timeout=10)
    backend.write_file("/workspace/made/by-write-file", b"y")
    for path in (workdir / "made", workdir / "made" / "by-command", workdir / "made" / "by-write-file"):
        assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid()), path


def test_user_override_writes_as_that_uid(make_backend: Callable[..., Any]) -> None:
    backend, ctx = make_backend("docker", user="4321:4321")
    os.chmod(ctx.workdir, 0o777)
    assert backend.run("id -u; id -g", timeout=10).output == "4321\n4321\n"
    backend.run("echo hi > from-4321", timeout=10)
    backend.write_file("written-4321", b"hi")
    for name in ("from-4321", "written-4321"):
        info = (ctx.workdir / name).stat()
        assert (info.st_uid, info.st_gid) == (4321, 4321)


def test_fork_bomb_ends_at_the_timeout_and_host_stays_responsive(make_backend: Callable[..., Any]) -> None:
    backend, _ = make_backend("docker")
    host_latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            started = time.monotonic()
            subprocess.run(["true"], check=True)
            host_latencies.append(time.monotonic() - started)
            time.sleep(0.2)

    prober = threading.Thread(target=probe)
    prober.start()
    started = time.monotonic()
    try:
        result = backend.run("bomb() { while :; do bomb & done; }; bomb 2>/dev/null & exec sleep 600", timeout=3)
    finally:
        stop.set()
        prober.join()
    elapsed = time.monotonic() - started
    assert result.timed_out and result.exit_code == 124
    assert elapsed < 3 + 10 + 2 + 2  # kill retried for <= 10 s (it waits for a free pid), then abort
    assert host_latencies and max(host_latencies) < 1.0
    assert backend.run("echo alive", timeout=10).output == "alive\n"
    processes = backend.run("ls /proc | grep -c '^[0-9]'", timeout=10).output
    assert int(processes) < 10, "the bomb's processes should be gone, not just our wait"


def test_daemon_not_running_is_a_fast_backend_error(
    docker_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    started = time.monotonic()
    with pytest.raises(BackendError, match="cannot reach the Docker daemon"):
        resolve({"type": "docker", "image": docker_image}, ctx=make_ctx(tmp_path))
    with pytest.raises(BackendError):
        cleanup_stale(lambda run_id: True, home=tmp_path)
    assert time.monotonic() - started < 5


def test_missing_image_with_pull_never(docker_image: str, tmp_path: Path) -> None:
    spec = {"type": "docker", "image": "runner-test:does-not-exist", "pull": "never"}
    with pytest.raises(BackendError, match="not present and pull is 'never'"):
        resolve(spec, ctx=make_ctx(tmp_path))


def test_docker_socket_is_never_mounted(tmp_path: Path) -> None:
    sockets = [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)]
    for sock in sockets:
        for source in (sock, os.path.dirname(sock), "/"):
            with pytest.raises(UsageError, match="Docker socket"):
                DockerSpec.model_validate({"image": "x", "mounts": [f"{source}:/mnt"]}).check(tmp_path)
    fake = tmp_path / "docker.sock"
    with pytest.raises(UsageError, match="Docker socket"):
        DockerSpec.model_validate({"image": "x", "mounts": [f"{fake}:/var/run/docker.sock"]}).check(tmp_path)


def test_workdir_exposing_the_socket_is_refused(docker_image: str) -> None:
    ctx = BackendContext(workdir=Path("/run"), home=Path("/tmp"))
    if not os.path.exists("/run/docker.sock") and not os.path.exists("/var/run/docker.sock"):
        pytest.skip("no local docker socket")
    with pytest.raises(UsageError, match="Docker socket"):
        resolve({"type": "docker", "image": docker_image}, ctx=ctx)


def test_cleanup_stale_removes_only_inactive_runs_of_its_own_home(docker_image: str, tmp_path: Path, client: Any) -> None:
    """A home's cleanup removes its runs that are gone; another RUNNER_HOME on the same dockerd
    (whose runs this home's store does not know) keeps its containers; a container made before
    the home label existed is judged by its run alone."""
    import docker

    made: list[Any] = []
    legacy = None

    def container(home: str, run_id: str) -> Any:
        ctx = make_ctx(tmp_path / home, run_id=run_id, job="cleanup")
        made.append(resolve({"type": "docker", "image": docker_image}, ctx=ctx))
        return made[-1]

    try:
        stale, live = container("a", f"stale-{os.getpid()}"), container("a", f"live-{os.getpid()}")
        other = container("b", f"other-{os.getpid()}")
        legacy = client.containers.create(
            docker_image, "sleep 600", labels={LABEL_MANAGED: "1", LABEL_RUN: f"legacy-{os.getpid()}"}
        )
        assert stale.name and other.name and legacy.labels.get(LABEL_HOME) is None
        assert dict(client.containers.get(stale.name).labels)[LABEL_HOME] == str((tmp_path / "a" / "home").resolve())
        removed = cleanup_stale(lambda run_id: run_id.startswith("live-"), home=tmp_path / "a" / "home")
        assert sorted(removed) == sorted([stale.name, legacy.name])
        names = {c.name for c in client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"})}
        assert stale.name not in names and live.name in names and other.name in names
        with pytest.raises(BackendError):
            stale.run("true", timeout=5)
        assert live.run("echo ok", timeout=5).output == "ok\n"
        assert other.run("echo ok", timeout=5).output == "ok\n"
    finally:
        for backend in made:
            backend.close()
        if legacy is not None:  # still there when the test failed before the cleanup removed it
            with contextlib.suppress(docker.errors.NotFound):
                legacy.remove(force=True)


def test_protected_files_inside_the_workdir_are_read_only_in_the_container(docker_image: str, tmp_path: Path) -> None:
    """The control plane (jobs.yaml, a template folder) is bind-mounted read-only over itself."""
    ctx = make_ctx(tmp_path, run_id="protected-run", job="protected")
    work = ctx.workdir
    (work / "jobs.yaml").write_text("jobs: {}\n")
    (work / "jobs").mkdir()
    (work / "jobs" / "prompt.md").write_text("hello\n")
    (work / "notes.txt").write_text("free\n")
    ctx = BackendContext(
        workdir=work,
        home=ctx.home,
        run_id="protected-run",
        job="protected",
        protected=(work / "jobs.yaml", work / "jobs"),
    )
    backend = resolve({"type": "docker", "image": docker_image}, ctx=ctx)
    try:
        for target in ("/workspace/jobs.yaml", "/workspace/jobs/prompt.md", "/workspace/jobs/new.md"):
            res = backend.run(f"echo tampered >> {target}", timeout=30)
            assert res.exit_code != 0, (target, res.output)
        assert backend.run("echo more >> /workspace/notes.txt", timeout=30).exit_code == 0
    finally:
        backend.close()
    assert (work / "jobs.yaml").read_text() == "jobs: {}\n"
    assert (work / "jobs" / "prompt.md").read_text() == "hello\n"
    assert not (work / "jobs" / "new.md").exists()
    assert (work / "notes.txt").read_text() == "free\nmore\n"


# -- reuse between runs of one process (issue 20) -------------------------------------------
def test_runs_in_one_process_share_the_client_and_the_image_check(
    docker_image: str, tmp_path: Path, client: Any
) -> None:
    from runner.backends.docker import DAEMON

    DAEMON.reset()
    spec = {"type": "docker", "image": docker_image, "pull": "never"}
    first = resolve(spec, ctx=make_ctx(tmp_path / "a", run_id="reuse-1", job="reuse"))
    first.close()
    second = resolve(spec, ctx=make_ctx(tmp_path / "b", run_id="reuse-2", job="reuse"))
    try:
        assert second.run("echo hi", timeout=30).output == "hi\n"
        assert second._client is first._client is DAEMON.client()  # type: ignore[attr-defined]
        assert second.container_id != first.container_id  # type: ignore[attr-defined]
    finally:
        second.close()
    import docker

    for backend in (first, second):  # each run's container is still removed at close
        with pytest.raises(docker.errors.NotFound):
            client.api.inspect_container(backend.container_id)  # type: ignore[attr-defined]
    pid = os.fork()
    if pid == 0:  # a forked child (serve's workers) never uses its parent's sockets
        os._exit(0 if DAEMON.client() is not first._client else 1)  # type: ignore[attr-defined]
    assert os.waitpid(pid, 0)[1] == 0


def test_an_image_removed_between_runs_is_checked_again(docker_image: str, tmp_path: Path, client: Any) -> None:
    from runner.backends.docker import DAEMON

    tag = f"runner-test:reuse-{os.getpid()}"
    client.images.get(docker_image).tag(tag)
    spec = {"type": "docker", "image": tag, "pull": "never"}
    try:
        resolve(spec, ctx=make_ctx(tmp_path / "a")).close()  # the image is now known present
        client.images.remove(tag)
        with pytest.raises(BackendError, match="not present and pull is 'never'"):
            resolve(spec, ctx=make_ctx(tmp_path / "b"))
        client.images.get(docker_image).tag(tag)
        resolve(spec, ctx=make_ctx(tmp_path / "c")).close()
    finally:
        DAEMON.forget_image(tag)
        import docker

        try:
            client.images.remove(tag)
        except docker.errors.ImageNotFound:  # the test failed before tagging it again
            pass


def test_a_run_cannot_plant_operator_tools_through_the_mounted_project(docker_image: str, project: Any, fake: Any) -> None:
    """Issue 29: a run on the Docker backend created tools/ in the mounted project, and the next
    `jobs list` imported it inside runner. tools/ and skills/ beside jobs.yaml are made (empty)
    before the container starts and mounted read-only over themselves."""
    import json

    from runner.testing import call, final

    marker = project.root.parent / "tools-ran"
    project.write_jobs(
        f"jobs:\n  d:\n    prompt: go\n    approvals: approve\n    backend: docker:{docker_image}\n"
    )
    plant = (
        "mkdir -p tools skills/evil; echo 'open(\"" + str(marker) + "\", \"w\")' > tools/x.py; "
        "echo '# evil' > skills/evil/SKILL.md; ls -la tools skills; true"
    )
    fake.add(call("terminal", {"command": plant}), final("done"))
    res = project.run("run-job", "d", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "succeeded"
    assert (project.root / "tools").is_dir() and not list((project.root / "tools").iterdir())
    assert not (project.root / "skills" / "evil").exists()
    assert project.run("jobs", "list").returncode == 0
    assert not marker.exists()


def test_checkpoints_and_rollback_of_a_docker_run(docker_image: str, project: Any, fake: Any) -> None:
    """Issue 33: the workdir is bind-mounted from the host, so its checkpoints are taken on the
    host; a rollback restores what the container's commands changed, byte for byte."""
    import json
    import os

    from runner.testing import call, calls, final
    from tests.run.test_checkpoints import tree

    work = project.root / "work"
    work.mkdir()
    (work / "keep.txt").write_text("hello\n")
    (work / "gone.bin").write_bytes(bytes(range(256)))
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o755)
    project.write_jobs(f"jobs:\n  d:\n    prompt: go\n    workdir: work\n    backend: docker:{docker_image}\n")
    start = tree(work)
    fake.add(
        call("terminal", {"command": "ls"}),
        calls(("write_file", {"path": "keep.txt", "content": "changed\n"}), ("terminal", {"command": "rm gone.bin"})),
        call("terminal", {"command": "echo new > 'new file' && chmod -x run.sh"}),
        final("done"),
    )
    res = project.run("run-job", "d", "--json")
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout)["id"]
    assert (work / "new file").read_text() == "new\n" and not os.access(work / "run.sh", os.X_OK)
    end = tree(work)
    points = json.loads(project.run("runs", "checkpoints", run_id, "--json").stdout)["checkpoints"]
    assert [(p["step"], p["label"]) for p in points] == [(2, None), (3, None), (None, "end")]
    back = project.run("runs", "rollback", run_id, "--json")
    assert back.returncode == 0, back.stderr
    assert tree(work) == start
    assert project.run("runs", "rollback", run_id, "--to", json.loads(back.stdout)["undo"]).returncode == 0
    assert tree(work) == end
