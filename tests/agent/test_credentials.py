"""The credential pool end to end: real CLI and worker processes, real runner.db, the fake model
server (which logs the key of every request). Keys are named by env vars that do not look
secret and have no known key prefix, so only the pool's own redaction can hide them."""

from __future__ import annotations

import json
import re
import sqlite3
import time

from runner.safety.redact import fingerprint
from runner.testing import call, error, final

KEYS = [f"pool-key-{i:02d}-q7w8e9r0t1y2u3" for i in range(10)]
BACKUP = "backup-key-z9x8c7v6b5n4m3"
ONE = "jobs:\n  one:\n    prompt: 'say hi'\n    deliver: [file]\n"


def configure(project, fake, n=2, *, strategy="fill_first", extra="", backup=False):
    """config.yaml with provider ``default`` holding n keys (env TEST_KEY_i); returns the env."""
    project.home.mkdir(parents=True, exist_ok=True)
    refs = ", ".join(f"env:TEST_KEY_{i}" for i in range(n))
    text = (
        f"providers:\n  default:\n    base_url: {fake.base_url}\n    model: m1\n    api_keys: [{refs}]\n"
        f"    strategy: {strategy}\n"
    )
    text += "".join(f"    {line}\n" for line in extra.strip().splitlines())
    if backup:
        text += f"  backup:\n    base_url: {fake.base_url}\n    model: m2\n    api_keys: [env:TEST_BACKUP]\n"
    (project.home / "config.yaml").write_text(text)
    env = project.env(TEST_BACKUP=BACKUP, **{f"TEST_KEY_{i}": KEYS[i] for i in range(n)})
    env.pop("OPENAI_API_KEY")
    return env


def db_events(project, kinds=None):
    db = project.db()
    rows = [(k, json.loads(p)) for k, p in db.execute("SELECT kind, payload FROM run_events ORDER BY run_id, seq")]
    return [(k, p) for k, p in rows if kinds is None or k in kinds]


def last_run(project):
    db = project.db()
    db.row_factory = sqlite3.Row
    return dict(db.execute("SELECT * FROM runs ORDER BY created_at DESC LIMIT 1").fetchone())


def creds(project, env):
    res = project.cli("creds", "list", "--json", env=env)
    assert res.exit_code == 0, res.output
    return {r["fingerprint"]: r for r in json.loads(res.output)}


def test_429_retry_after_moves_to_the_other_key_at_once(project, fake):
    env = configure(project, fake, 2)
    fake.add(error(429, "slow down", {"Retry-After": "3"}, keys=(KEYS[0],)), final("ok"))
    project.write_jobs(ONE)
    res = project.cli("run-job", "one", env=env)
    assert res.exit_code == 0, res.output
    assert fake.keys_used() == [KEYS[0], KEYS[1]]
    assert fake.requests[1]["time"] - fake.requests[0]["time"] < 2.5
    kinds = [k for k, _ in db_events(project)]
    assert "credential_cooldown" in kinds and "credential_rotated" in kinds and "model_retry" not in kinds
    [(_, cool)] = db_events(project, {"credential_cooldown"})
    assert cool["seconds"] == 3 and cool["fingerprint"] == fingerprint(KEYS[0])
    show = project.cli("runs", "show", last_run(project)["id"], env=env).output
    assert "credential_cooldown" in show and "credential_rotated" in show


def test_429_retry_after_on_a_sole_key_waits_that_long(project, fake):
    env = configure(project, fake, 1)
    fake.add(error(429, "slow down", {"Retry-After": "3"}), final("ok"))
    project.write_jobs(ONE)
    assert project.cli("run-job", "one", env=env).exit_code == 0
    assert fake.keys_used() == [KEYS[0], KEYS[0]]
    assert fake.requests[1]["time"] - fake.requests[0]["time"] >= 3.0
    [(_, wait)] = db_events(project, {"credentials_wait"})
    assert 2.5 <= wait["wait_s"] <= 3.0


def test_5xx_is_retried_on_the_same_key_without_a_cooldown(project, fake):
    env = configure(project, fake, 2)
    fake.add(error(503, "overloaded"), final("ok"))
    project.write_jobs(ONE)
    assert project.cli("run-job", "one", env=env).exit_code == 0
    assert fake.keys_used() == [KEYS[0], KEYS[0]]
    assert {r["status"] for r in creds(project, env).values()} == {"ok"}
    assert len(db_events(project, {"model_retry"})) == 1 and db_events(project, {"credential_cooldown"}) == []


def test_ten_keys_nine_rate_limited_succeeds_without_using_retries(project, fake):
    env = configure(project, fake, 10, extra="max_retries: 0")
    bad = tuple(KEYS[:9])
    fake.add(*[error(429, "rate limited", {"retry-after-ms": "30000"}, keys=bad) for _ in range(9)], final("ok"))
    project.write_jobs(ONE)
    res = project.cli("run-job", "one", env=env)
    assert res.exit_code == 0, res.output
    assert fake.keys_used() == KEYS
    assert len(db_events(project, {"credential_cooldown"})) == 9
    assert db_events(project, {"model_retry"}) == []  # max_retries 0: any counted retry would have failed the run
    state = creds(project, env)
    assert all(state[fingerprint(k)]["status"] == "cooling" for k in bad)
    assert state[fingerprint(KEYS[9])]["status"] == "ok"


def test_all_keys_401_fail_fast_naming_fingerprints(project, fake):
    env = configure(project, fake, 3)
    fake.default = error(401, "Incorrect API key provided")
    project.write_jobs(ONE)
    started = time.monotonic()
    res = project.run("run-job", "one", env=env)
    assert time.monotonic() - started < 30  # not waiting out the keys' 300 s auth cooldown
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert all(fingerprint(k) in res.stderr for k in KEYS[:3])
    row = last_run(project)
    assert row["reason"] == "auth_failed"  # every key failed the same way: that is the reason
    assert "HTTP 401: Incorrect API key provided" in row["error"] and "runner creds reset --provider" in row["error"]
    assert len(fake.requests) == 3


def test_repeated_401_after_cooldown_marks_keys_dead_then_reset(project, fake):
    env = configure(project, fake, 2, extra="cooldowns: {auth_s: 0.3}")
    fake.default = error(401, "Incorrect API key provided")
    project.write_jobs(ONE)
    started = time.monotonic()
    res = project.run("run-job", "one", env=env)
    assert time.monotonic() - started < 30  # a subprocess: its start-up varies with the machine's load
    assert res.returncode == 1
    assert "dead" in res.stderr and all(fingerprint(k) in res.stderr for k in KEYS[:2])
    assert last_run(project)["reason"] == "credentials_dead"
    assert len(fake.requests) == 4  # each key: 401, cooldown, 401 again -> dead
    assert {r["status"] for r in creds(project, env).values()} == {"dead"}
    before = len(fake.requests)
    assert project.run("run-job", "one", env=env).returncode == 1
    assert len(fake.requests) == before  # dead keys are not tried again
    res = project.cli("creds", "reset", fingerprint(KEYS[0])[:6], env=env)
    assert res.exit_code == 0 and "reset 1 key" in res.output
    state = creds(project, env)
    assert state[fingerprint(KEYS[0])]["status"] == "ok" and state[fingerprint(KEYS[1])]["status"] == "dead"
    assert project.cli("creds", "reset", "--all", env=env).output.strip() == "reset 2 keys"
    fake.default = None
    fake.add(final("ok"))
    assert project.cli("run-job", "one", env=env).exit_code == 0


def test_402_cools_24h_visible_in_creds_list(project, fake):
    env = configure(project, fake, 1)
    fake.add(error(402, "payment required"))
    project.write_jobs(ONE)
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 1 and "cooling" in res.stderr
    row = creds(project, env)[fingerprint(KEYS[0])]
    assert row["status"] == "cooling" and row["last_error_code"] == 402
    assert 86400 - 60 < row["cooldown_left_s"] <= 86400
    text = project.cli("creds", "list", env=env).output
    assert (
        "cooling" in text
        and ("1d " in text or "23h59m" in text)
        and "HTTP 402" in text
        and fingerprint(KEYS[0]) in text
    )


def test_two_worker_processes_share_a_cooldown(project, fake):
    env = configure(project, fake, 2)
    project.write_jobs(ONE)
    fake.add(error(429, "slow down", {"Retry-After": "120"}, keys=(KEYS[0],)), final("first"))
    assert project.run("run-job", "one", env=env).returncode == 0
    assert fake.keys_used() == [KEYS[0], KEYS[1]]
    fake.add(final("second"))
    assert project.run("run-job", "one", env=env).returncode == 0
    assert fake.keys_used()[2:] == [KEYS[1]]  # the second process never tried the cooling key


def test_twenty_turn_run_keeps_one_key(project, fake):
    env = configure(project, fake, 3, strategy="least_used")
    fake.add(*[call("terminal", {"command": f"echo {i}"}) for i in range(19)], final("done"))
    project.write_jobs(ONE)
    assert project.run("run-job", "one", env=env).returncode == 0
    used = fake.keys_used()
    assert len(used) == 20 and len(set(used)) == 1
    assert creds(project, env)[fingerprint(used[0])]["request_count"] == 20
    fake.add(final("next run"))
    assert project.cli("run-job", "one", env=env).exit_code == 0
    assert fake.keys_used()[-1] != used[0]  # least_used: the next run starts on a fresh key


def test_headerless_429_on_a_sole_key_cools_at_most_60s_the_first_time(project, fake):
    env = configure(project, fake, 1, extra="max_wait: 1")
    fake.add(error(429, "too many requests"), error(429, "too many requests"))
    project.write_jobs(ONE)
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 1 and "max_wait" in res.stderr
    assert fake.keys_used() == [KEYS[0], KEYS[0]]
    assert fake.requests[1]["time"] - fake.requests[0]["time"] >= 1.0  # the one retry after a short backoff
    row = creds(project, env)[fingerprint(KEYS[0])]
    assert 50 < row["cooldown_left_s"] <= 60


def test_wait_must_fit_the_runs_remaining_time(project, fake):
    env = configure(project, fake, 1)
    fake.add(error(429, "slow down", {"Retry-After": "30"}))
    project.write_jobs(ONE + "    timeout: 10s\n")
    started = time.monotonic()
    res = project.cli("run-job", "one", env=env)
    assert res.exit_code == 1 and time.monotonic() - started < 5
    assert "remaining time" in res.output
    assert last_run(project)["reason"] == "rate_limited"
    assert "HTTP 429: slow down" in last_run(project)["error"]


def test_fallback_provider_takes_over_when_keys_are_exhausted(project, fake):
    env = configure(project, fake, 1, backup=True)
    fake.add(error(401, "bad key", keys=(KEYS[0],)), final("from backup"))
    project.write_jobs(ONE + "    model: [default, backup]\n")
    res = project.cli("run-job", "one", "--json", env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["output"] == "from backup"
    assert fake.keys_used() == [KEYS[0], BACKUP]
    assert fake.requests[1]["body"]["model"] == "m2"
    [(_, fb)] = db_events(project, {"provider_fallback"})
    assert fb["from"] == "default" and fb["to"] == "backup" and fb["reason"] == "auth_failed"


def test_the_run_records_the_model_and_prices_of_the_fallback_provider_that_answered(project, fake):
    env = configure(project, fake, 1, extra="pricing: {input_per_mtok: 1000, output_per_mtok: 1000}", backup=True)
    config = project.home / "config.yaml"
    config.write_text(config.read_text() + "    pricing: {input_per_mtok: 10, output_per_mtok: 20}\n")
    fake.add(error(401, "bad key", keys=(KEYS[0],)), final("from backup", usage=(100, 20)))
    project.write_jobs(ONE + "    model: [default, backup]\n")
    res = project.cli("run-job", "one", env=env)
    assert res.exit_code == 0, res.output
    row = last_run(project)
    assert row["model"] == "m2"
    assert row["cost_usd"] == (100 * 10 + 20 * 20) / 1e6  # backup's prices, not default's


def test_unknown_fallback_provider_is_bad_input(project, fake):
    env = configure(project, fake, 1)
    project.write_jobs(ONE + "    model: [default, nope]\n")
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 2 and "nope" in res.stderr and "Traceback" not in res.stderr
    assert fake.requests == []


def test_creds_reset_needs_exactly_one_selector(project, fake):
    env = configure(project, fake, 1)
    for args in ([], ["--all", "--provider", "default"], ["zzzzzz"], ["--provider", "nope"]):
        res = project.run("creds", "reset", *args, env=env)
        assert res.returncode == 2, args
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert project.run("creds", "reset", "--provider", "default", env=env).returncode == 0


def test_no_raw_key_in_db_events_logs_or_outputs(project, fake, tmp_path):
    env = configure(project, fake, 2, extra="max_wait: 5")
    fake.add(
        error(429, f"key {KEYS[0]} is rate limited", {"Retry-After": "60"}, keys=(KEYS[0],)),
        call("terminal", {"command": "cat leaked.txt; echo ${TEST_KEY_1:-scrubbed}"}),
        final(f"the keys are {KEYS[0]} and {KEYS[1]}"),
    )
    project.write_jobs(ONE.replace("[file]", "[file, stdout]"))
    (project.root / "leaked.txt").write_text(f"{KEYS[1]}\n")
    cassette = tmp_path / "rec.yaml"
    res = project.run("run-job", "one", "--record", str(cassette), env=env)
    assert res.returncode == 0, res.stderr
    fake.add(error(401, f"Incorrect API key provided: {KEYS[1]}"))
    res2 = project.run("run-job", "one", env=env)
    listing = project.run("creds", "list", env=env).stdout + project.run("creds", "list", "--json", env=env).stdout
    shown = project.run("runs", "show", last_run(project)["id"], env=env).stdout
    texts = [res.stdout, res.stderr, res2.stdout, res2.stderr, listing, shown, cassette.read_text()]
    files = [p for p in project.home.rglob("*") if p.is_file()]
    assert project.database_url or any(p.name == "runner.db" for p in files)
    blobs = [p.read_bytes().decode("latin-1") for p in files] + texts
    if project.database_url:  # --store postgresql: the store is not a file in RUNNER_HOME
        blobs.append(project.store_bytes().decode())
    for key in KEYS[:2]:
        assert not [b[:80] for b in blobs if key in b], f"raw key {key[:12]}... leaked"
    assert fingerprint(KEYS[0]) in listing and "[REDACTED]" in res.stdout
    tool_output = json.dumps(fake.requests[2]["body"])
    # the file was read, but the key in it is masked before the model sees it; the env var was not passed on
    assert KEYS[1] not in tool_output and "[REDACTED]" in tool_output and "scrubbed" in tool_output


def test_a_fallback_to_mistral_mid_run_renames_the_first_providers_tool_call_ids(project, fake):
    """Mistral takes tool-call ids of exactly 9 letters and digits: the turns the first provider
    made keep their ids in the run, and go to Mistral renamed, the call and its answer alike."""
    env = configure(project, fake, 1, backup=True)
    config = (project.home / "config.yaml").read_text().replace(
        "    model: m2\n", "    model: m2\n    profile: mistral\n"
    )
    (project.home / "config.yaml").write_text(config)
    fake.add(
        call("terminal", {"command": "echo first"}),  # from the first provider: id call_1_0
        error(401, "Incorrect API key provided", keys=(KEYS[0],)),
        final("done by mistral"),
    )
    project.write_jobs(ONE + "    model: [default, backup]\n    toolsets: [terminal]\n")
    res = project.cli("run-job", "one", "--json", env=env)
    assert res.exit_code == 0, res.output
    assert fake.keys_used() == [KEYS[0], KEYS[0], BACKUP]
    sent = fake.requests[2]["body"]["messages"]
    [turn] = [m for m in sent if m.get("tool_calls")]
    [answer] = [m for m in sent if m["role"] == "tool"]
    renamed = turn["tool_calls"][0]["id"]
    assert re.fullmatch(r"[A-Za-z0-9]{9}", renamed) and answer["tool_call_id"] == renamed
    assert fake.requests[1]["body"]["messages"][2]["tool_calls"][0]["id"] == "call_1_0"  # unchanged for the first
