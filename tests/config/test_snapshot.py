"""run-job's validated snapshot (runner.config.snapshot): used only while everything a full
validation read is unchanged, and refusing on its path what a full validation refuses."""

from __future__ import annotations

import json
import stat
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.config.jobs import load_jobs
from runner.config.plain import Plain
from runner.config.snapshot import Source, attach, snapshot_file
from runner.errors import ConfigError
from runner.settings import Settings
from runner.testing import FakeOpenAI, call, final
from tests.conftest import Project

JOBS = """\
jobs:
  one:
    prompt: prompts/one.md
    toolsets: [terminal, files]
  two:
    prompt: Say ok
    context_from: [one]
"""


@pytest.fixture
def proj(project: Project) -> Project:
    project.write_jobs(JOBS)
    project.write("prompts/one.md", "Say ok\n")
    return project


def attached(project: Project) -> tuple[Source, Settings]:
    settings = Settings.from_options(jobs=str(project.jobs_path), home=str(project.home))
    return attach(settings), settings


def test_the_first_run_validates_and_writes_the_snapshot_the_next_reads_it(proj: Project) -> None:
    source, settings = attached(proj)
    assert source is Source.VALIDATED
    path = snapshot_file(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = settings.jobs.get("one")
    source, again = attached(proj)
    assert source is Source.SNAPSHOT
    job = again.jobs.get("one")
    assert isinstance(job.spec, Plain) and isinstance(first.spec, Plain)  # run-job runs the plain form either way
    assert job == first
    assert again.config == settings.config
    assert job.prompt_path() == proj.root / "prompts" / "one.md"


def _edit_jobs(p: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    p.write_jobs(JOBS.replace("Say ok", "Say yes"))


def _edit_config(p: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    p.home.mkdir(exist_ok=True)
    (p.home / "config.yaml").write_text("timezone: Europe/Berlin\n")


def _chmod_config(p: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (p.home / "config.yaml").chmod(0o644)


def _base_url(p: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/other")


def _model(p: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_MODEL", "another-model")


def _key_list(p: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEYS", "sk-one-0123456789,sk-two-0123456789")


@pytest.mark.parametrize("change", [_edit_jobs, _edit_config, _chmod_config, _base_url, _model, _key_list])
def test_any_input_of_the_validation_changed_means_a_full_validation(
    proj: Project, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", proj.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789abcdef")
    proj.home.mkdir(exist_ok=True)
    (proj.home / "config.yaml").write_text("timezone: UTC\n")
    (proj.home / "config.yaml").chmod(0o600)
    assert attached(proj)[0] is Source.VALIDATED
    assert attached(proj)[0] is Source.SNAPSHOT
    change(proj, monkeypatch)
    source, settings = attached(proj)
    assert source is Source.VALIDATED
    assert attached(proj)[0] is Source.SNAPSHOT
    if change is _base_url:
        assert settings.config.providers["default"].base_url == "http://127.0.0.1:9/other"


def test_a_key_s_value_is_not_part_of_the_snapshot(proj: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-0123456789")
    source, settings = attached(proj)
    assert source is Source.VALIDATED
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other-value-0123456789")
    assert attached(proj)[0] is Source.SNAPSHOT  # the same reference (env:OPENAI_API_KEY), read at request time
    assert b"sk-secret" not in snapshot_file(settings).read_bytes()
    assert b"sk-other" not in snapshot_file(settings).read_bytes()


def test_a_deleted_template_is_refused_on_the_snapshot_s_path_as_on_the_full_one(proj: Project) -> None:
    assert attached(proj)[0] is Source.VALIDATED
    (proj.root / "prompts" / "one.md").unlink()
    with pytest.raises(ConfigError) as from_snapshot:
        attached(proj)
    with pytest.raises(ConfigError) as in_full:
        load_jobs(proj.jobs_path)
    assert str(from_snapshot.value) == str(in_full.value)
    assert "prompt: template file prompts/one.md not found" in str(from_snapshot.value)


@pytest.mark.parametrize(
    "damage",
    [
        lambda doc: "not json at all {",
        lambda doc: json.dumps({**doc, "config": {"m": "os:system", "f": {}}}),
        lambda doc: json.dumps({**doc, "jobs": {"one": {"m": "runner.config.jobs:JobSpec"}}}),
        lambda doc: json.dumps({**doc, "version": 0}),
        lambda doc: json.dumps([doc]),
    ],
)
def test_a_damaged_snapshot_means_a_full_validation_and_a_new_snapshot(proj: Project, damage: Any) -> None:
    source, settings = attached(proj)
    path = snapshot_file(settings)
    doc = json.loads(path.read_text())
    path.write_text(damage(doc))
    assert attached(proj)[0] is Source.VALIDATED
    assert json.loads(path.read_text()) == doc
    assert attached(proj)[0] is Source.SNAPSHOT


def test_a_value_json_cannot_hold_leaves_the_models_as_they_are(project: Project) -> None:
    project.write_jobs(textwrap.dedent("""\
        jobs:
          dated:
            prompt: Say ok
            vars: {since: 2024-01-01}
        """))
    source, settings = attached(project)
    assert source is Source.FULL
    assert not isinstance(settings.jobs.get("dated").spec, Plain)
    assert not snapshot_file(settings).exists()


def test_a_broken_file_writes_no_snapshot(project: Project) -> None:
    project.write_jobs("jobs:\n  one:\n    prompt: Say ok\n    max_iterations: 0\n")
    settings = Settings.from_options(jobs=str(project.jobs_path), home=str(project.home))
    with pytest.raises(ConfigError, match="max_iterations"):
        attach(settings)
    assert not snapshot_file(settings).exists()


def test_a_changed_runner_source_file_means_a_full_validation(proj: Project, tmp_path: Path) -> None:
    import os

    from runner.config import listing

    assert attached(proj)[0] is Source.VALIDATED
    path = Path(listing.PACKAGE_DIRS[0]) / "config" / "plain.py"
    st = path.stat()
    try:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
        assert attached(proj)[0] is Source.VALIDATED
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_run_that_rewrites_its_snapshot_ends_tampered_and_the_snapshot_is_dropped(
    project: Project, fake: FakeOpenAI
) -> None:
    """A command an `approve` job may run could edit the snapshot a later run reads instead of
    jobs.yaml (allowing more): the tamper check covers it, and the next run validates in full."""
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    approvals: approve\n    max_iterations: 5\n")
    fake.default = final("ok")
    first = project.run("run-job", "j")
    assert first.returncode == 0, first.stderr
    [path] = (project.home / "cache").glob("run-*.json")
    fake.default = None
    command = f"sed -i 's/max_iterations\":5,/max_iterations\":50,/' {path}"
    fake.add(call("terminal", {"command": command}), final("done"))
    second = project.run("run-job", "j")
    assert second.returncode == 1, second.stderr
    assert "tampered" in second.stderr and str(path) in second.stderr
    assert not path.exists()
    assert attached(project)[0] is Source.VALIDATED
    assert json.loads(path.read_text())["jobs"]["j"]["f"]["max_iterations"] == 5
