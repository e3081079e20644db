"""The job page (`/jobs/NAME`, issue 35.3) over HTTP against a real `runner web`: definition with
secrets masked, prompt, schedule, chain both ways, spend, Run with variables (the row `runner jobs
trigger --var` writes), Pause/Resume back to the page; the logged-out login page; tokens and
config.yaml's `web.token` taking effect on a running `runner web` and `runner serve --web` without
a restart; charts to the cent with a runs-by-status chart; the overview and runs refreshing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("starlette", reason="runner web needs the web extra: pip install -e '.[web]'")

from tests.web.webhelp import PLANTED_KEY, Site, WebServer, csrf_of, free_port, start_web, wait_listening  # noqa: E402

SLACK_SECRET = "T0AAA/B0BBB/slackpathsecret42"
HEADER_SECRET = "hdr-secret-value-77f1"
LITERAL_SECRET = "hunter2-literal-var-secret"
EXTRA_JOBS = f"""
  report:
    description: The weekly report.
    prompt: prompts/report.md
    schedule: "0 9 * * 1"
    toolsets: [terminal]
    vars: {{audience: team, api_token: {LITERAL_SECRET}, leak: {PLANTED_KEY}}}
    deliver:
      - file
      - slack:https://hooks.slack.com/services/{SLACK_SECRET}
      - webhook: {{url: "https://example.com/hook/abc?key=querysecret", headers: {{Authorization: "Bearer {HEADER_SECRET}"}}, secret: env:HOOK_SECRET}}
  publish:
    prompt: Publish the report.
    after: report
"""


@pytest.fixture(scope="module")
def jobs(site: Site) -> Site:
    """The site's jobs.yaml with a scheduled job carrying secrets and one chained after it."""
    (site.root / "prompts").mkdir(exist_ok=True)
    (site.root / "prompts" / "report.md").write_text("Write the weekly report for {{ vars.audience }}.\n")
    with (site.root / "jobs.yaml").open("a") as f:
        f.write(textwrap.indent(textwrap.dedent(EXTRA_JOBS).strip("\n"), "  ") + "\n")
    site.cli("jobs", "validate")
    return site


def _page(client: httpx.Client, path: str) -> str:
    res = client.get(path)
    assert res.status_code == 200, (path, res.text[:500])
    return res.text


def test_the_job_page_shows_the_job_and_masks_its_secrets(jobs: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url) as client:
        page = _page(client, "/jobs/report")
        assert "<h1>Job report</h1>" in page and "The weekly report." in page
        assert "<code>0 9 * * 1</code>" in page
        fires = page.split('id="job-fires">', 1)[1].split("</dd>", 1)[0]
        assert fires.count("<br>") == 4  # the next 5 fires
        assert "Write the weekly report for {{ vars.audience }}." in page  # the template file's text
        assert "template file" in page
        downstream = page.split('id="job-downstream">', 1)[1].split("</dd>", 1)[0]
        assert 'href="/jobs/publish"' in downstream
        definition = page.split('id="job-definition">', 1)[1].split("</pre>", 1)[0]
        assert "audience: team" in definition and "api_token: &#39;***&#39;" in definition.replace("'", "&#39;")
        assert "slack:https://hooks.slack.com/***" in definition and "webhook:https://example.com/hook/***?***" in definition
        for secret in (SLACK_SECRET, "slackpathsecret42", HEADER_SECRET, LITERAL_SECRET, PLANTED_KEY, "querysecret"):
            assert secret not in page, secret
        assert f'placeholder="{LITERAL_SECRET}"' not in page  # the Run form's hints are masked too
        upstream = _page(client, "/jobs/publish").split('id="job-upstream">', 1)[1].split("</dd>", 1)[0]
        assert 'href="/jobs/report"' in upstream and "success" in upstream
        nightly = _page(client, "/jobs/nightly")
        strip = nightly.split('id="job-strip">', 1)[1].split("</dd>", 1)[0]
        assert strip.count('class="cell st-succeeded"') == 3
        spend = nightly.split('id="job-spend">', 1)[1].split("</dd>", 1)[0]
        assert "3 runs (0 failed)" in spend and "$" in spend
        missing = client.get("/jobs/no-such-job")
        assert missing.status_code == 404 and "No job no-such-job" in missing.text
        for path in ("/jobs", "/runs", "/", "/charts"):  # job names link to the page
            assert 'href="/jobs/nightly"' in _page(client, path), path


def _trigger_rows(site: Site, job: str) -> list[tuple[str, str | None]]:
    db = site.db()
    try:
        rows = db.execute(
            "SELECT requested_by, vars FROM control_requests WHERE kind = 'trigger' AND job = ? ORDER BY requested_at",
            (job,),
        ).fetchall()
    finally:
        db.close()
    return [(r[0], r[1]) for r in rows]


def test_run_with_variables_writes_what_jobs_trigger_var_writes(jobs: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url, headers={"Origin": web.url}) as client:
        csrf = csrf_of(_page(client, "/jobs/report"))
        form = {
            "csrf": csrf,
            "back": "/jobs/report",
            # the declared vars (hidden names, one left blank: the job's own value), then free pairs
            "var_key": ["api_token", "audience", "leak", "extra", ""],
            "var_value": ["", "the board", "", "1", ""],
        }
        res = client.post("/jobs/report/trigger", data=form)
        assert res.status_code == 303, res.text
        assert res.headers["location"].startswith("/jobs/report?msg=asked+serve+to+run+report+now+with+audience%2C+extra")
        rows = _trigger_rows(jobs, "report")
        assert len(rows) == 1 and rows[0][0] == "web:admin"
        assert json.loads(rows[0][1] or "") == {"audience": "the board", "extra": "1"}
        cli = jobs.cli("jobs", "trigger", "report", "--var", "audience=the board", "--var", "extra=1")
        assert cli.returncode == 0
        assert json.loads(_trigger_rows(jobs, "report")[1][1] or "") == json.loads(rows[0][1] or "")  # the same row
        bad = client.post("/jobs/report/trigger", data={**form, "var_key": ["1bad"], "var_value": ["x"]})
        assert bad.status_code == 303 and "err=1" in bad.headers["location"]
        assert "not+a+template+variable+name" in bad.headers["location"]
        nameless = client.post("/jobs/report/trigger", data={**form, "var_key": [""], "var_value": ["x"]})
        assert "err=1" in nameless.headers["location"]
        assert len(_trigger_rows(jobs, "report")) == 2  # nothing written by the refused ones
        plain = client.post("/jobs/publish/trigger", data={"csrf": csrf})  # the jobs page's Run now
        assert plain.status_code == 303 and plain.headers["location"].startswith("/jobs?msg=")
        assert _trigger_rows(jobs, "publish") == [("web:admin", None)]


def test_pause_and_resume_from_the_job_page(jobs: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url, headers={"Origin": web.url}) as client:
        csrf = csrf_of(_page(client, "/jobs/report"))
        res = client.post("/jobs/report/pause", data={"csrf": csrf, "back": "/jobs/report"})
        assert res.status_code == 303 and res.headers["location"].startswith("/jobs/report?msg=paused")
        page = _page(client, "/jobs/report")
        assert '<span class="st st-paused">paused</span>' in page and "Resume</button>" in page
        assert page.split('id="job-fires">', 1)[1].startswith("-")  # a paused job has no next fire
        assert "paused" in jobs.cli("jobs", "list").stdout.split("report", 1)[1].splitlines()[0]
        res = client.post("/jobs/report/resume", data={"csrf": csrf, "back": "/jobs/report"})
        assert res.headers["location"].startswith("/jobs/report?msg=resumed")
        assert "Pause</button>" in _page(client, "/jobs/report")


def test_charts_to_the_cent_and_runs_by_status(jobs: Site, web: WebServer) -> None:
    from runner.web.charts import USD, _fmt, usd

    assert usd(12.3456) == "$12.35" and usd(1234.5) == "$1,234.50" and usd(0.0042) == "$0.0042" and usd(0) == "$0.00"
    assert _fmt(12.3456, USD) == "$12.35" and _fmt(12.3456, " s") == "12 s"
    page = _page(httpx.Client(base_url=web.url), "/charts")
    assert 'id="by-status"' in page and 'class="bar st-succeeded"' in page
    assert "nightly</a></h3>" in page
    assert "max $0.00</text>" in page and ": $0.00</title>" in page  # the fake model's runs cost nothing: still cents
    assert re.search(r"max [1-9]\d* runs a day</text>", page)  # the seeded runs, all today


def test_overview_and_runs_refresh_themselves(jobs: Site, web: WebServer) -> None:
    with httpx.Client(base_url=web.url) as client:
        assert 'id="live" hx-get="/" hx-trigger="every 10s" hx-select="#live"' in _page(client, "/")
        runs = _page(client, "/runs?job=nightly")
        assert 'hx-get="/runs?job=nightly" hx-trigger="every 10s" hx-select="#runs-live"' in runs
        assert "hx-trigger" not in _page(client, "/runs?before=zzz")  # an older page stays put


# -- tokens and config.yaml without a restart ------------------------------------------------------
@pytest.fixture
def fresh(site: Site) -> Iterator[Site]:
    """No token in the site's RUNNER_HOME before and after (other tests' servers share it)."""
    for name in ("web-token", "web-token-readonly"):
        (site.home / name).unlink(missing_ok=True)
    config = (site.home / "config.yaml").read_text()
    yield site
    for name in ("web-token", "web-token-readonly"):
        (site.home / name).unlink(missing_ok=True)
    (site.home / "config.yaml").write_text(config)


def _serve_web(site: Site, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "serve", "--web", f"127.0.0.1:{port}"],
        env=site.env(WEB_TOK="from-the-environment-123"),
        cwd=site.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_listening(proc, port)
    return proc


def _status(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{url}/runs", headers=headers, timeout=30).status_code


@pytest.mark.parametrize("how", ["web", "serve --web"])
def test_a_new_token_applies_without_a_restart(fresh: Site, how: str) -> None:
    site = fresh
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if how == "web":
        server: WebServer | None = start_web(site, bind=f"127.0.0.1:{port}", env={"WEB_TOK": "from-the-environment-123"})
        proc = server.proc
    else:
        server, proc = None, _serve_web(site, port)
    try:
        assert _status(url) == 200  # loopback, no token yet: open
        login = httpx.get(f"{url}/login").text
        assert "None" not in login and "log out" not in login
        admin = site.cli("web", "token").stdout.strip()
        assert _status(url) == 401  # the running server asks for it at once
        assert _status(url, "wrong") == 401 and _status(url, admin) == 200
        login = httpx.get(f"{url}/login").text  # logged out: no role, no log-out button
        assert "None" not in login and "log out" not in login and "not logged in" in login
        viewer = site.cli("web", "token", "--read-only").stdout.strip()
        assert _status(url, viewer) == 200
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {viewer}"}) as client:
            page = client.get("/jobs").text
            assert "viewer (read-only)" in page and "log out" in page
            refused = client.post("/jobs/nightly/pause", data={"csrf": csrf_of(page)})
            assert refused.status_code == 403 and "read-only" in refused.text
        rotated = site.cli("web", "token", "--rotate").stdout.strip()
        assert rotated != admin and _status(url, admin) == 401 and _status(url, rotated) == 200
        (site.home / "web-token").unlink()
        (site.home / "web-token-readonly").unlink()
        assert _status(url) == 200  # loopback with no token left: as a fresh start
        with (site.home / "config.yaml").open("a") as f:  # config.yaml's web.token, read on change
            f.write("web:\n  token: env:WEB_TOK\n")
        assert _status(url) == 401 and _status(url, "from-the-environment-123") == 200
    finally:
        if server is not None:
            err = server.stop()
        else:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-3000:]


def test_off_loopback_never_falls_open(fresh: Site) -> None:
    """A dashboard bound off loopback whose token files are removed refuses every request (it does
    not turn into the tokenless loopback mode, which a forged Host header would reach)."""
    site = fresh
    admin = site.cli("web", "token").stdout.strip()
    port = free_port()
    server = start_web(site, bind=f"0.0.0.0:{port}")
    url = f"http://127.0.0.1:{port}"
    try:
        assert _status(url, admin) == 200
        (site.home / "web-token").unlink()
        deadline = time.time() + 5
        assert _status(url) == 401 and _status(url, admin) == 401
        assert time.time() < deadline
        assert httpx.get(f"{url}/login").status_code == 200  # the login page still answers
        again = site.cli("web", "token").stdout.strip()
        assert _status(url, again) == 200
    finally:
        err = server.stop()
    assert "no token left for a bind off loopback" in err
