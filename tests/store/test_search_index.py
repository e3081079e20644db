"""The full-text index of past runs on real SQLite: what the triggers index, filters, ranking,
rebuild, deletes, and that no query string can raise anything but the one-line QueryError."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.clock import iso
from runner.events import Event, Prompt, Request, Response, ToolCall, ToolResult
from runner.safety.redact import Redactor
from runner.statuses import Trigger
from runner.store import Store, dumps, ledger
from runner.store.migrations import m0013_search
from runner.store.runs import Recorder
from runner.store.search import KINDS, TEXT, QueryError, Search, index_output, rebuild, search, since

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def add_event(store: Store, run_id: str, seq: int, kind: str, payload: dict, ts: datetime) -> None:
    """An event as the Recorder writes it, at a chosen time (the triggers index it)."""
    store.execute(
        "INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, ?, ?, ?, ?)",
        (run_id, seq, iso(ts), kind, dumps(payload)),
    )


def add_run(store: Store, job: str, text: str, *, days_ago: float, kind: str = "tool_result") -> str:
    when = NOW - timedelta(days=days_ago)
    run_id = ledger.open_run(store, job=job, trigger=Trigger.MANUAL, now=when)
    payload = {"result": text, "name": "terminal"} if kind == "tool_result" else {"content": text}
    add_event(store, run_id, 1, kind, payload, when)
    return run_id


@pytest.fixture
def store(where):
    s = Store.open(where)  # SQLite (FTS5) and PostgreSQL (tsvector): the same behaviour
    yield s
    s.close()


def ids(hits):
    return [h.run_id for h in hits]


def test_recorder_events_are_indexed_redacted_and_skipped_kinds_are_not(store):
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    key = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    rec = Recorder(store, run_id, Redactor())
    rec(Event.PROMPT, Prompt("look at the orchard", [], "m", system_chars=10))
    rec(Event.TOOL_CALL, ToolCall("c1", "terminal", '{"command": "cat apples.txt"}'))
    rec(Event.TOOL_RESULT, ToolResult("c1", "terminal", f"granny smith; token {key}", 9, False, 0.1))
    rec(Event.RESPONSE, Response(1, "pears are ripe", [], "stop", 1, 1, 0.0, 0.1))
    rec(Event.REQUEST, Request(1, 3, 1))  # not text worth searching
    rec(Event.TOOL_CALL, ToolCall("c2", "session_search", '{"query": "orchard"}'))
    kinds = [r["kind"] for r in store.query("SELECT kind FROM search_docs ORDER BY id")]
    assert kinds == ["prompt", "tool_call", "tool_result", "response"]
    for word, kind in (("orchard", "prompt"), ("apples", "tool_call"), ("granny", "tool_result"), ("ripe", "response")):
        [hit] = search(store, Search(word))
        assert (hit.run_id, hit.kind, hit.job) == (run_id, kind, "j")
    assert "«orchard»" in search(store, Search("orchard"))[0].snippet
    assert search(store, Search(key)) == [] and search(store, Search(key[:20] + "*")) == []
    assert store.one("SELECT count(*) AS n FROM search_fts WHERE body LIKE ?", (f"%{key[8:20]}%",))["n"] == 0


def test_job_and_since_filters(store):
    old = add_run(store, "alpha", "invoice overdue", days_ago=10)
    new = add_run(store, "alpha", "invoice paid", days_ago=1)
    other = add_run(store, "beta", "invoice draft", days_ago=2)
    assert set(ids(search(store, Search("invoice"), now=NOW))) == {old, new, other}
    assert ids(search(store, Search("invoice", job="alpha"), now=NOW)) == [new, old]
    assert ids(search(store, Search("invoice", job="beta"), now=NOW)) == [other]
    week = since("7d", now=NOW)
    assert ids(search(store, Search("invoice", since=week), now=NOW)) == [new, other]
    assert ids(search(store, Search("invoice", job="alpha", since=since("2026-11-25")), now=NOW)) == [new]
    assert search(store, Search("invoice", job="gamma"), now=NOW) == []


def test_equal_matches_newest_first_and_a_better_match_first_at_equal_age(store):
    runs = [add_run(store, "j", "backup finished without errors", days_ago=d) for d in (5, 1, 3, 2, 4)]
    hits = search(store, Search("backup"), now=NOW)
    assert ids(hits) == [runs[1], runs[3], runs[2], runs[4], runs[0]]
    assert [h.ts for h in hits] == sorted((h.ts for h in hits), reverse=True)
    dense = add_run(store, "j", "backup backup backup: the backup log", days_ago=1)
    assert ids(search(store, Search("backup"), now=NOW))[0] == dense
    assert len(search(store, Search("backup"), now=NOW)) == 6
    assert len(search(store, Search("backup", limit=2), now=NOW)) == 2


def test_one_hit_per_run_its_best(store):
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL, now=NOW)
    add_event(store, run_id, 1, "prompt", {"user": "summarise the kestrel report"}, NOW)
    add_event(store, run_id, 2, "response", {"content": "kestrel kestrel kestrel sightings up"}, NOW)
    [hit] = search(store, Search("kestrel"), now=NOW)
    assert hit.kind == "response"


def test_plain_words_never_need_syntax_and_raw_syntax_errors_are_one_line(store):
    add_run(store, "j", 'the AND gate and the "OR" gate; NEAR(x) -- see foo:bar', days_ago=1)
    for text in ("AND OR", '"unbalanced', "NEAR(", "foo:bar", "gate*", "- gate", "AND gate"):
        search(store, Search(text), now=NOW)  # never raises
    assert len(search(store, Search("AND OR gate"), now=NOW)) == 1
    assert len(search(store, Search("gate OR nothing", raw=True), now=NOW)) == 1
    if store.dialect != "sqlite":  # PostgreSQL's websearch syntax takes any text (never an error)
        return
    for bad in ("AND OR", '"unbalanced', "NEAR(", "foo:bar", "gate NOT", "*"):
        with pytest.raises(QueryError) as err:
            search(store, Search(bad, raw=True), now=NOW)
        assert "\n" not in str(err.value) and err.value.exit_code == 2
    with pytest.raises(QueryError, match="no words"):
        search(store, Search(' " -- '))


def test_output_is_indexed_and_deleting_a_run_or_event_removes_its_texts(store):
    run_id = add_run(store, "j", "heron count", days_ago=1)
    index_output(store, run_id, "j", "final: 12 herons", ended=NOW)
    assert {h.kind for h in search(store, Search("herons"), now=NOW)} == {"output"}
    index_output(store, run_id, "j", "final: 14 egrets", ended=NOW)  # replaces the earlier one
    assert search(store, Search("herons"), now=NOW) == [] and ids(search(store, Search("egrets"))) == [run_id]
    store.execute("DELETE FROM run_events WHERE run_id=?", (run_id,))
    assert search(store, Search("heron"), now=NOW) == [] and ids(search(store, Search("egrets"))) == [run_id]
    store.execute("DELETE FROM runs WHERE id=?", (run_id,))
    assert search(store, Search("egrets"), now=NOW) == []
    assert store.one("SELECT count(*) AS n FROM search_docs")["n"] == 0
    assert store.one("SELECT count(*) AS n FROM search_fts")["n"] == 0


def test_rebuild_gives_the_same_results(store, tmp_path):
    runs = [add_run(store, f"job{i % 3}", f"lighthouse beam {i} keeper", days_ago=i / 2) for i in range(30)]
    out = tmp_path / "out.md"
    out.write_text("lighthouse summary for the keeper")
    store.execute("UPDATE runs SET output_path=?, ended_at=? WHERE id=?", (str(out), iso(NOW), runs[0]))
    index_output(store, runs[0], "job0", out.read_text(), ended=NOW)
    queries = [Search("lighthouse"), Search("keeper", job="job1"), Search("beam", since=since("5d", now=NOW))]
    before = [search(store, q, now=NOW) for q in queries]
    table = store.query("SELECT run_id, seq, job, ts, kind, label FROM search_docs ORDER BY run_id, seq")
    store.execute("DELETE FROM search_docs")  # an index lost
    store.execute("DELETE FROM search_fts")
    assert search(store, Search("lighthouse"), now=NOW) == []
    done = rebuild(store)
    assert (done.events, done.outputs) == (30, 1)
    assert [search(store, q, now=NOW) for q in queries] == before
    assert store.query("SELECT run_id, seq, job, ts, kind, label FROM search_docs ORDER BY run_id, seq") == table


def test_the_rebuild_text_is_the_triggers_text():
    from runner.store import search as module

    assert (TEXT, module.WANTED) == (m0013_search.TEXT, m0013_search.WANTED)
    assert "(" + ", ".join(f"'{k}'" for k in KINDS) + ")" == m0013_search.KINDS


def test_a_payload_that_is_not_json_is_stored_and_not_indexed(store):
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    add_event(store, run_id, 1, "prompt", {"user": "fine"}, NOW)
    store.execute(
        "INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, 2, ?, 'prompt', 'not json')",
        (run_id, iso(NOW)),
    )
    assert [r["seq"] for r in store.query("SELECT seq FROM search_docs")] == [1]


def test_events_written_before_the_migration_are_indexed(tmp_path):
    path = tmp_path / "runner.db"
    s = Store.open(path)
    s.execute("DROP TRIGGER search_event_added")
    run_id = add_run(s, "j", "written before the index existed: walrus", days_ago=1)
    assert search(s, Search("walrus")) == []
    s.execute("DELETE FROM _migrations WHERE name='m0013_search'")
    for name in ("search_event_removed", "search_run_removed"):
        s.execute(f"DROP TRIGGER {name}")
    s.execute("DROP TABLE search_docs")
    s.execute("DROP TABLE search_fts")
    assert s.migrate() == ["m0013_search"]
    assert ids(search(s, Search("walrus"))) == [run_id]
    s.close()


def test_since_parsing():
    assert since("7d", now=NOW) == NOW - timedelta(days=7)
    assert since("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert since("2026-11-30T10:00:00+02:00") == datetime(2026, 11, 30, 8, tzinfo=UTC)
    with pytest.raises(Exception, match="--since 'yesterday'"):
        since("yesterday")


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    s = Store.open(tmp_path_factory.mktemp("search") / "runner.db")
    words = ["alpha", "beta", "AND", "OR", '"quoted"', "naïve", "日本語", "x-y", "foo:bar", "(paren)", "*star"]
    for i in range(40):
        add_run(s, "j", " ".join(words[(i + k) % len(words)] for k in range(5)), days_ago=i)
    yield s
    s.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(max_size=80)
    | st.lists(
        st.sampled_from(
            ['"', "AND", "OR", "NOT", "(", ")", "*", ":", "NEAR", "^", "x", "-", "+", "\x00", "{", "}", ","]
        )
    ).map(" ".join),
    raw=st.booleans(),
)
def test_any_query_gives_results_or_the_one_line_error(filled, text, raw):
    try:
        hits = search(filled, Search(text, raw=raw, limit=5), now=NOW)
    except QueryError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert len(hits) <= 5
    assert all("\n" not in h.snippet for h in hits)


def test_passages_mark_the_words_as_the_index_matches_them():
    from runner.store.search import _highlight_terms, passage

    body = "Café naïve deployment: the deployed build (v2) failed " + " ".join(f"w{i}" for i in range(60))
    assert passage(body, _highlight_terms("cafe NAIVE", raw=False)).startswith("«Café» «naïve» deployment")
    marked = passage(body, _highlight_terms("deploy*", raw=False))
    assert "«deployment»: the «deployed» build (v2) failed" in marked and marked.endswith("…")
    late = passage(body, _highlight_terms("w40 OR nothing", raw=True))
    assert late.startswith("…") and "«w40»" in late and "«OR»" not in late
    assert passage("x [REDACTED]", _highlight_terms("x", raw=False)) == "«x» [REDACTED]"
