"""`model_options:` per provider (config.yaml) and per job (jobs.yaml): what reaches the wire, what
is refused as bad input (exit 2, one line), a 400 from the provider (no retry loop), and cached
prompt tokens recorded and priced with `cached_input_per_mtok`."""

from __future__ import annotations

import pytest

from runner.config.model_options import ModelOptions, max_tokens_key, request_fields
from runner.testing import Reply, error, final
from tests.agent.test_limits import config, last_run


def test_job_options_override_the_providers_and_reach_the_request(project, fake):
    config(
        project,
        fake,
        model_options="{temperature: 0.9, seed: 7, extra_body: {top_k: 40, min_p: 0.1}, "
        "extra_headers: {X-Team: data, X-Env: prod}}",
    )
    fake.add(final("ok"))
    project.write_jobs(
        """\
        jobs:
          o:
            prompt: go
            model_options:
              temperature: 0.2
              top_p: 0.5
              max_tokens: 300
              reasoning_effort: low
              response_format: {type: json_object}
              extra_body: {top_k: 5}
              extra_headers: {X-Env: test}
        """
    )
    assert project.cli("run-job", "o").exit_code == 0
    request = fake.requests[0]
    body = request["body"]
    assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (0.2, 0.5, 7, 300)
    assert body["reasoning_effort"] == "low" and body["response_format"] == {"type": "json_object"}
    assert (body["top_k"], body["min_p"]) == (5, 0.1)  # extra_body merged key by key, the job's wins
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert (headers["x-team"], headers["x-env"]) == ("data", "test")
    assert headers["authorization"] == "Bearer sk-test-key-0123456789abcdef"


def test_max_tokens_is_max_completion_tokens_for_reasoning_models(project, fake):
    config(project, fake, model="o3-mini", model_options="{max_tokens: 50}")
    fake.add(final("ok"))
    project.write_jobs("jobs:\n  r:\n    prompt: go\n")
    assert project.cli("run-job", "r").exit_code == 0
    body = fake.requests[0]["body"]
    assert body["max_completion_tokens"] == 50 and "max_tokens" not in body


def test_the_max_tokens_field_rule():
    assert max_tokens_key("auto", "gpt-4.1-mini") == "max_tokens"
    assert max_tokens_key("auto", "openai/o4-mini") == "max_completion_tokens"
    assert max_tokens_key("auto", "gpt-5") == "max_completion_tokens"
    assert max_tokens_key("max_completion_tokens", "llama3") == "max_completion_tokens"
    fields = request_fields(ModelOptions(max_tokens=9, seed=1), model="m", field="max_tokens")
    assert fields == {"seed": 1, "max_tokens": 9}


def test_options_over_merge_key_by_key():
    base = ModelOptions(temperature=1.0, seed=3, extra_headers={"A": "1"})
    job = ModelOptions(temperature=0.0, extra_headers={"B": "2"})
    merged = job.over(base)
    assert (merged.temperature, merged.seed, merged.extra_headers) == (0.0, 3, {"A": "1", "B": "2"})


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ("{temprature: 0.2}", "model_options.temprature"),
        ("{temperature: 9}", "model_options.temperature"),
        ("{max_tokens: 0}", "model_options.max_tokens"),
    ],
)
def test_a_bad_job_option_is_exit_2_naming_file_job_and_field(project, fake, options, field):
    config(project, fake)
    project.write_jobs(f"jobs:\n  bad:\n    prompt: go\n    model_options: {options}\n")
    res = project.run("run-job", "bad")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    line = next(x for x in res.stderr.splitlines() if field in x)
    assert "jobs.yaml" in line and "bad" in line
    assert fake.requests == []
    assert not project.has_store() or _no_runs(project)


def test_a_bad_provider_option_is_exit_2_naming_the_file(project, fake):
    config(project, fake, model_options="{colour: blue}")
    project.write_jobs("jobs:\n  j:\n    prompt: go\n")
    res = project.run("run-job", "j")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "config.yaml" in res.stderr and "model_options.colour" in res.stderr
    assert fake.requests == []


def test_an_option_the_provider_rejects_fails_the_run_with_its_message(project, fake):
    config(project, fake, retry_backoff=0.01, model_options="{temperature: 0.3}")
    message = "Unsupported value: 'temperature' does not support 0.3 with this model."
    fake.add(error(400, message), final("never"))
    project.write_jobs("jobs:\n  r:\n    prompt: go\n")
    res = project.run("run-job", "r")
    assert res.returncode == 1 and message in res.stderr
    row = last_run(project)
    assert row["status"] == "failed" and message in row["error"]
    assert len(fake.requests) == 1  # no retry loop (the grace call is not made for a model error)


def test_cached_prompt_tokens_are_recorded_and_priced(project, fake):
    config(project, fake, pricing="{input_per_mtok: 1000, cached_input_per_mtok: 100, output_per_mtok: 2000}")
    fake.add(Reply(content="ok", usage=(1000, 100), cached=800))
    project.write_jobs("jobs:\n  c:\n    prompt: go\n")
    assert project.cli("run-job", "c").exit_code == 0
    row = last_run(project)
    # 200 fresh x $1000/M + 800 cached x $100/M + 100 out x $2000/M = 0.2 + 0.08 + 0.2
    assert row["cached_tokens"] == 800 and row["cost_usd"] == pytest.approx(0.48)
    assert "1000+100 (800 cached)" in project.cli("runs", "show", row["id"]).output


def test_cached_tokens_cost_the_input_price_when_no_cached_price_is_set(project, fake):
    config(project, fake, pricing="{input_per_mtok: 1000, output_per_mtok: 0}")
    fake.add(Reply(content="ok", usage=(1000, 0), cached=800))
    project.write_jobs("jobs:\n  c:\n    prompt: go\n")
    assert project.cli("run-job", "c").exit_code == 0
    assert last_run(project)["cost_usd"] == pytest.approx(1.0)


def _no_runs(project) -> bool:

    return project.db().execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
