"""The sink keys in jobs.yaml (`deliver`, `on_failure`) and config.yaml (`alerts`, `smtp`,
`delivery`, `alerts_throttle`): good values load, bad ones are one error naming file, job and field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config.jobs import load_jobs
from runner.config.machine import load_config
from runner.errors import ConfigError, UsageError


def jobs(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  j:\n    prompt: hi\n" + body)
    return path


def test_every_sink_form_loads(tmp_path: Path) -> None:
    path = jobs(
        tmp_path,
        "    deliver: [file, stdout, 'file:out/{{ today }}.md', 'webhook:env:HOOK', 'slack:https://hooks.slack.com/s/T/B/X',\n"
        "      'discord:env:D', 'telegram:-100123', 'telegram:@chan_name', 'email:a@b.org',\n"
        "      {webhook: {url: 'https://x.org/h', headers: {A: env:TOKEN}, secret: env:S, template: '{{ output }}'}}]\n"
        "    on_failure: ['slack:env:SLACK']\n",
    )
    job = load_jobs(path).jobs["j"]
    assert len(job.spec.deliver) == 10 and job.spec.on_failure == ["slack:env:SLACK"]
    assert load_jobs(jobs(tmp_path, "")).jobs["j"].spec.on_failure is None  # config.yaml's alerts apply


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    on_failure: ['sms:123']\n", "job j: on_failure.0: invalid sink 'sms:123'"),
        ("    deliver: ['slack:http//nope']\n", "job j: deliver.0: slack: 'http//nope' is not an http(s) URL"),
        (
            "    deliver: [{webhook: {url: 'https://x.org', colour: 1}}]\n",
            "job j: deliver.0: webhook: unknown key(s) colour",
        ),
        ("    on_failure: ['email:nobody']\n", "job j: on_failure.0: email: 'nobody' is not an email address"),
    ],
)
def test_bad_sinks_name_job_and_field(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_jobs(jobs(tmp_path, body))
    assert expected in str(err.value)


def test_config_alerts_and_delivery(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "alerts: ['telegram:-1001', 'email:ops@example.org']\nalerts_throttle: {every: 5, min_interval: 30m}\n"
        "delivery: {attempts: 2, backoff: 1s}\nsmtp: {host: mail.local, port: 2525, from: r@x.org, password: env:PW}\n"
    )
    config = load_config(path, environ={})
    assert config.alerts_throttle.min_interval == 1800 and config.delivery.attempts == 2
    assert config.smtp is not None and config.smtp.from_ == "r@x.org"
    path.write_text("alerts: ['pager:1']\n")
    with pytest.raises(ConfigError, match=r"config.yaml: alerts.0: .*invalid sink 'pager:1'"):
        load_config(path, environ={})
    path.write_text("delivery: {attempts: 0}\n")
    with pytest.raises(ConfigError, match=r"delivery.attempts"):
        load_config(path, environ={})


def test_literal_smtp_password_needs_a_private_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("smtp: {host: h, password: hunter2hunter2}\n")
    os.chmod(path, 0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        load_config(path, environ={})
    os.chmod(path, 0o600)
    assert load_config(path, environ={}).smtp is not None
