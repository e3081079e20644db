"""Fleet budgets and the auxiliary model through the real `runner run-job` and `runner budget`,
FakeOpenAI as the model: a run a cap keeps from starting is skipped (exit 0), alerted to a file
sink and asks the model nothing; a run stops at its reservation with a partial answer; a
reservation that cannot be written fails the run before any model call; a killed run's
reservation is released by the recovery; the auxiliary model writes context summaries and its
calls count in the run's tokens, cost and budget."""

from __future__ import annotations

import json
import signal

from runner.testing import Reply, call, final, hang
from tests.servehelp import rows

PRICED = "pricing: {input_per_mtok: 1000, output_per_mtok: 1000}"  # 100 + 20 tokens: $0.12 a call


def config(project, fake, extra: str = "") -> None:
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"providers:\n  default:\n    base_url: {fake.base_url}\n    api_keys: [env:OPENAI_API_KEY]\n"
        f"    {PRICED}\n{extra}"
    )


def runs(project) -> list[dict]:
    return rows(project.home, "SELECT * FROM runs ORDER BY created_at, id")


def events(project, run_id: str) -> list[tuple[str, dict]]:
    return [
        (r["kind"], json.loads(r["payload"]))
        for r in rows(project.home, "SELECT kind, payload FROM run_events WHERE run_id=? ORDER BY seq", (run_id,))
    ]


def budget(project) -> dict:
    res = project.run("budget", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def scope(report: dict, kind: str, name: str = "") -> dict:
    return next(s for s in report["scopes"] if (s["scope"], s["name"]) == (kind, name))


def test_a_run_that_would_pass_the_fleet_cap_is_skipped_alerted_and_asks_nothing(project, fake):
    config(project, fake, "budgets: {daily_usd: 0.30}\nalerts: ['file:alerts/budget.md']\n")
    project.write_jobs("jobs:\n  r:\n    prompt: go\n    budget: {max_cost_usd: 0.20}\n")
    fake.default = final("done")
    first = project.run("run-job", "r")
    assert first.returncode == 0, first.stderr
    assert len(fake.requests) == 1
    second = project.run("run-job", "r")  # $0.12 spent + $0.20 reserved > $0.30
    assert second.returncode == 0, second.stderr
    assert "skipped (budget): the fleet daily cap $0.30 would be passed" in second.stderr
    assert len(fake.requests) == 1  # not one model call
    done, skipped = runs(project)
    assert (done["status"], skipped["status"], skipped["reason"]) == ("succeeded", "skipped", "budget")
    assert "fleet daily cap $0.30 would be passed" in skipped["error"] and "spent $0.12" in skipped["error"]
    kinds = [k for k, _ in events(project, skipped["id"])]
    assert "budget_refused" in kinds and "request" not in kinds
    alert = json.loads((project.root / "alerts" / "budget.md").read_text())
    assert (alert["event"], alert["run_id"], alert["status"], alert["reason"]) == (
        "skipped",
        skipped["id"],
        "skipped",
        "budget",
    )
    assert "fleet daily cap" in alert["error"]
    listed = project.run("runs", "list")
    assert "skipped" in listed.stdout and "budget" in listed.stdout
    report = budget(project)
    fleet = scope(report, "fleet")
    assert fleet["today"] == {"spent_usd": 0.12, "reserved_usd": 0.0, "cap_usd": 0.3}
    assert scope(report, "job", "r")["month"]["spent_usd"] == 0.12
    assert scope(report, "provider", "default")["today"]["spent_usd"] == 0.12 and report["open"] == []
    text = project.run("budget").stdout
    assert "fleet" in text and "$0.30" in text and "no open reservations" in text


def test_runner_budget_shows_a_running_reservation_and_recovery_releases_a_killed_one(project, fake):
    config(project, fake, "budgets: {default_run_usd: 0.5, jobs: {slow: {monthly_usd: 10}}}\n")
    project.write_jobs("jobs:\n  slow:\n    prompt: go\n")
    fake.add(hang(30))
    proc = project.start_job("slow", fake)
    try:
        report = budget(project)
        [held] = report["open"]
        assert (held["job"], held["reserved_usd"], held["providers"]) == ("slow", 0.5, ["default"])
        assert scope(report, "job", "slow")["month"] == {"spent_usd": 0.0, "reserved_usd": 0.5, "cap_usd": 10.0}
        text = project.run("budget").stdout
        assert "open reservations:" in text and held["run_id"] in text
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    report = budget(project)  # the command's store open finds the run lost: unknown, reservation settled
    assert report["open"] == [] and scope(report, "fleet")["today"]["reserved_usd"] == 0.0
    [row] = runs(project)
    assert row["status"] == "unknown"


def test_a_run_stops_at_its_reservation_with_a_partial_answer(project, fake):
    config(project, fake, "budgets: {monthly_usd: 100, default_run_usd: 0.20}\n")
    project.write_jobs("jobs:\n  r:\n    prompt: go\n    toolsets: [terminal]\n")
    fake.add(
        call("terminal", {"command": "echo 1"}),
        call("terminal", {"command": "echo 2"}),
        final("Done: 2 echoes. Left: none."),
    )
    res = project.run("run-job", "r")
    assert res.returncode == 1
    [row] = runs(project)
    assert (row["status"], row["reason"]) == ("failed", "budget_cost")
    assert "Left: none" in (project.home / "outputs" / "r" / f"{row['id']}.md").read_text()
    # two turns reach the $0.20 reservation; the grace call is the third and is counted too
    assert len(fake.requests) == 3 and abs(row["cost_usd"] - 0.36) < 1e-9
    assert scope(budget(project), "fleet")["month"]["spent_usd"] == 0.36


def test_a_reservation_that_cannot_be_written_fails_the_run_before_any_model_call(project, fake):
    config(project, fake)
    project.write_jobs("jobs:\n  r:\n    prompt: go\n")
    budget(project)  # creates the store
    db = project.db()
    if project.database_url:  # the same fault on PostgreSQL
        db.execute("CREATE FUNCTION no_budget() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE 'no room'; END $$")
        db.execute("CREATE TRIGGER no_budget BEFORE INSERT ON budget_runs FOR EACH ROW EXECUTE FUNCTION no_budget()")
    else:
        db.execute("CREATE TRIGGER no_budget BEFORE INSERT ON budget_runs BEGIN SELECT RAISE(ABORT, 'no room'); END")
    db.commit()
    db.close()
    res = project.run("run-job", "r")
    assert res.returncode == 1 and fake.requests == []
    assert "Traceback" not in res.stderr and "budget reservation" in res.stderr
    [row] = runs(project)
    assert (row["status"], row["reason"]) == ("failed", "budgetunavailable") and "no room" in row["error"]


def test_bad_budget_and_auxiliary_settings_are_exit_2_with_nothing_written(project, fake):
    config(project, fake, "budgets: {daily_usd: 1}\n")
    project.write_jobs("jobs:\n  r:\n    prompt: go\n")
    res = project.run("run-job", "r")
    assert res.returncode == 2 and "job r: budget.max_cost_usd is not set" in res.stderr
    assert runs(project) == [] and fake.requests == []
    config(project, fake, "auxiliary: nowhere\n")
    res = project.run("run-job", "r")
    assert res.returncode == 2 and "job r: auxiliary: unknown provider 'nowhere'" in res.stderr
    config(project, fake, "budgets: {daily_usd: -1}\n")
    res = project.run("budget")
    assert res.returncode == 2 and "budgets.daily_usd" in res.stderr


def test_the_auxiliary_model_writes_summaries_and_they_count_in_the_run_and_its_provider(project, fake):
    config(
        project,
        fake,
        f"  cheap:\n    base_url: {fake.base_url}\n    api_keys: [env:OPENAI_API_KEY]\n    model: aux-mini\n"
        "    pricing: {input_per_mtok: 100, output_per_mtok: 100}\n"
        "auxiliary: default\n",  # the job's own `auxiliary:` wins
    )
    fake.add(
        *[
            Reply(
                content=f"- summary {i}: ran echo",
                tool_calls=[("terminal", {"command": f"echo {i}; head -c 6000 /dev/zero | tr '\\0' x"})],
            )
            for i in range(8)
        ],
    )
    fake.default = final("done")
    project.write_jobs(
        "jobs:\n  s:\n    prompt: go\n    toolsets: [terminal]\n    summarize: true\n    context_budget: 3000\n"
        "    auxiliary: cheap/aux-large\n"
    )
    res = project.run("run-job", "s")
    assert res.returncode == 0, res.stderr
    [row] = runs(project)
    summaries = [p for k, p in events(project, row["id"]) if k == "summary"]
    aux_requests = [r for r in fake.requests if r["body"]["model"] == "aux-large"]
    main_requests = [r for r in fake.requests if r["body"]["model"] != "aux-large"]
    assert summaries and len(aux_requests) == len(summaries)
    assert all(r["body"]["messages"][0]["content"].startswith("Summarise") for r in aux_requests)
    assert all(p["provider"] == "cheap" and p["model"] == "aux-large" for p in summaries)
    assert row["prompt_tokens"] + row["completion_tokens"] == 120 * len(fake.requests)
    expected = 0.12 * len(main_requests) + 0.012 * len(aux_requests)
    assert abs(row["cost_usd"] - expected) < 1e-6
    report = budget(project)
    assert abs(scope(report, "provider", "cheap")["today"]["spent_usd"] - 0.012 * len(aux_requests)) < 1e-6
    assert abs(scope(report, "provider", "default")["today"]["spent_usd"] - 0.12 * len(main_requests)) < 1e-6
