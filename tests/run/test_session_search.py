"""Search over past runs end to end: real runs through `run-job` against the fake model server,
the `session_search` tool, `runner runs search`, `runner db reindex`; the index never holds a key."""

from __future__ import annotations

import json

import pytest

from runner.testing import call, final
from tests.servehelp import rows

JOBS = """
jobs:
  keeper:
    prompt: check the lighthouse
    toolsets: [terminal, session_search]
  other:
    prompt: routine look around
    toolsets: [terminal]
"""
KEY = "ghp_" + "Zq8Lm2Nx7Rt4Vb6Kc1Pw9Hs3Jd5Fg0Ty2Ue8"  # a GitHub token's shape: redacted by pattern


def tool_messages(fake, request: int) -> list[str]:
    return [m["content"] for m in fake.requests[request]["body"]["messages"] if m["role"] == "tool"]


def run_job(project, name: str) -> dict:
    res = project.cli("run-job", name, "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["status"] == "succeeded", summary
    return summary


def test_session_search_finds_a_tool_result_from_50_runs_ago(project, fake):
    project.write_jobs(JOBS)
    fake.add(call("terminal", {"command": f"echo 'beacon serial pelican-7781 token {KEY}'"}), final("logged"))
    first = run_job(project, "keeper")["id"]
    for i in range(49):
        fake.add(call("terminal", {"command": f"echo routine check {i}"}), final(f"all quiet {i}"))
        run_job(project, "other" if i % 2 else "keeper")
    fake.add(call("session_search", {"query": "pelican"}), final("the serial was pelican-7781"))
    last = run_job(project, "keeper")["id"]
    assert len(rows(project.home, "SELECT id FROM runs")) == 51
    [found] = tool_messages(fake, len(fake.requests) - 1)
    assert f"run {first}, job keeper" in found and "tool_result (terminal)" in found and "«pelican»" in found
    assert KEY not in found and "[REDACTED]" in found
    res = project.cli("runs", "search", "pelican", "--json")
    hits = json.loads(res.stdout)
    assert [h["run_id"] for h in hits] == [last, first]  # the last run's final answer says it too
    assert hits[1]["kind"] == "tool_result" and hits[0]["kind"] in ("response", "output")
    # the key is in no search result and nowhere in the index
    for query in (KEY, KEY[:12] + "*", "Zq8Lm2Nx7Rt4Vb6Kc1Pw9Hs3Jd5Fg0Ty2Ue8"):
        assert project.cli("runs", "search", query).stdout.strip() == "no matches"
    index = rows(project.home, "SELECT body FROM search_fts")
    assert index and not any("Zq8Lm2Nx7Rt4" in r["body"] for r in index)
    # the searching run's own tool call and result are not in the index
    assert not rows(project.home, "SELECT * FROM search_docs WHERE label='session_search'")
    # filters and the rebuild, through the CLI
    assert len(json.loads(project.cli("runs", "search", "routine", "--job", "other", "--json").stdout)) == 10
    routine = json.loads(project.cli("runs", "search", "routine", "--limit", "50", "--json").stdout)
    assert len(routine) == 49
    assert json.loads(project.cli("runs", "search", "pelican", "--since", "2000-01-01", "--json").stdout) == hits
    after_first = min(h["ts"] for h in routine)  # the second run's tool result
    recent = json.loads(project.cli("runs", "search", "pelican", "--since", after_first, "--json").stdout)
    assert [h["run_id"] for h in recent] == [last]
    before = [project.cli("runs", "search", q, "--json").stdout for q in ("routine", "quiet", "lighthouse")]
    res = project.cli("db", "reindex")
    assert res.exit_code == 0 and "outputs" in res.stdout, res.output
    assert [project.cli("runs", "search", q, "--json").stdout for q in ("routine", "quiet", "lighthouse")] == before


@pytest.mark.sqlite_only(
    "FTS5 query syntax errors (PostgreSQL raw queries are websearch_to_tsquery, which accepts any text)"
)
def test_bad_query_syntax_is_one_line_exit_2_and_a_tool_error_for_the_model(project, fake):
    project.write_jobs(JOBS)
    fake.add(call("terminal", {"command": "echo AND OR"}), final("done"))
    run_job(project, "keeper")
    docs = len(rows(project.home, "SELECT * FROM search_docs"))
    for args in (["AND OR", "--raw"], ['"unbalanced', "--raw"], ["x", "--since", "yesterday"], ["--", "  "]):
        res = project.run("runs", "search", *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
        assert "Traceback" not in res.stderr
    assert "fts5: syntax error" in project.run("runs", "search", "AND OR", "--raw").stderr
    plain = project.run("runs", "search", "AND OR")  # plain words: always a valid query
    assert plain.returncode == 0 and "«AND» «OR»" in plain.stdout
    fake.add(call("session_search", {"query": "AND OR", "raw": True}), final("ok"))
    run_job(project, "keeper")
    [told] = tool_messages(fake, len(fake.requests) - 1)
    assert told.startswith("error: search query 'AND OR': fts5: syntax error") and "\n" not in told
    assert len(rows(project.home, "SELECT * FROM search_docs WHERE run_id IN (SELECT id FROM runs)")) > docs
    assert not rows(project.home, "SELECT * FROM search_docs WHERE label='session_search'")
