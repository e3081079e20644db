"""Full-text search over past runs: every SQL statement of the index is here, for both dialects
(SQLite: FTS5; PostgreSQL: a ``tsvector`` column with a GIN index, see below).

What is indexed (migration m0013): the rendered prompt, the model's text (so its final answer),
tool calls (name and arguments), tool results and pre_run stdout, each as its ``run_events`` row
stores it (redacted by the ``Recorder``, tool results already cut to 2,000 characters), capped
at ``INDEX_CHARS``; and each run's final output (seq 0, redacted). Triggers keep the index current
as events are written; ``rebuild`` (``runner db reindex``) makes it again from the ledger.

Ranking: FTS5 finds the matches and their ``bm25`` relevance; the ``WINDOW`` newest matches are
ranked by ``relevance / (1 + age_days / RECENCY_DAYS)`` (a match as good as another but 30 days
older counts half), one hit per run (its best), ties broken newest first.

Queries: by default each word is searched as itself (quoted, so ``AND``, ``-`` or ``"`` are plain
text; a trailing ``*`` is a prefix), all words must occur. ``raw=True`` hands the text to FTS5's
own syntax (``OR``, ``NOT``, ``NEAR``, ``"phrases"``); what FTS5 rejects is a ``QueryError``.

PostgreSQL (migration m0013's ``apply_postgresql``): ``search_fts`` is a table (``rowid``,
``body``, ``tsv`` = ``to_tsvector('simple', body)``, GIN-indexed), kept by the same triggers
(PL/pgSQL there). A query's words become a ``tsquery`` (each word as ``phraseto_tsquery``
splits it, a trailing ``*`` a prefix ``:*``, all of them ``&&``); ``raw=True`` is
``websearch_to_tsquery`` syntax (``or``, ``-word``, ``"phrases"``), which never fails. Relevance
is ``ts_rank`` (for bm25), with the same recency discount and one hit per run. Simpler than
FTS5 in one way: accents are not folded (``café`` does not find ``cafe``).
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runner.clock import iso, parse_iso, utcnow
from runner.config.schedules import parse_duration
from runner.errors import UsageError
from runner.events import Event
from runner.safety.redact import Redactor
from runner.silent import is_silent
from runner.store import Store
from runner.store.dialect import Dialect

INDEX_CHARS = 8000  # of each indexed text
WINDOW = 500  # newest matches ranked per query: bounds the cost of a word that is everywhere
RECENCY_DAYS = 30.0
MAX_LIMIT = 50
SNIPPET_TOKENS = 24
MARK = ("«", "»")
KINDS = (Event.PROMPT, Event.RESPONSE, Event.TOOL_CALL, Event.TOOL_RESULT, Event.PRE_RUN)  # as m0013 indexes them

# the text of one run_events row ``{r}`` (the same expression as the triggers of m0013)
TEXT = (
    "substr(CASE {r}.kind"
    " WHEN 'prompt' THEN json_extract({r}.payload, '$.user')"
    " WHEN 'response' THEN json_extract({r}.payload, '$.content')"
    " WHEN 'tool_result' THEN json_extract({r}.payload, '$.result')"
    " WHEN 'tool_call' THEN json_extract({r}.payload, '$.name') || ' ' || json_extract({r}.payload, '$.arguments')"
    " WHEN 'pre_run' THEN json_extract({r}.payload, '$.stdout')"
    f" END, 1, {INDEX_CHARS})"
)
WANTED = (
    "{r}.kind IN ('prompt', 'response', 'tool_call', 'tool_result', 'pre_run') AND json_valid({r}.payload)"
    " AND coalesce(json_extract({r}.payload, '$.name'), '') != 'session_search'"
)


class QueryError(UsageError):
    """A search query the engine rejects (or one with nothing to search for). Exit code 2."""

    reason = "query"


@dataclass(frozen=True)
class Search:
    """One search: ``text`` (words, or FTS5 syntax when ``raw``), optional job and start time."""

    text: str
    job: str | None = None
    since: datetime | None = None
    limit: int = 10
    raw: bool = False
    exclude_run: str | None = None  # the searching run itself (its own events match its query)


@dataclass(frozen=True)
class Hit:
    run_id: str
    job: str
    ts: str  # when the matching text was written (ISO, UTC)
    kind: str  # prompt | response | tool_call | tool_result | pre_run | output
    label: str | None  # the tool's name (tool_call, tool_result)
    snippet: str  # the matching passage, terms between « and », on one line
    score: float  # relevance with recency folded in (higher is better)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "job": self.job,
            "ts": self.ts,
            "kind": self.kind,
            "tool": self.label,
            "snippet": self.snippet,
            "score": float(f"{self.score:.4g}"),
        }


def match_expression(text: str, *, raw: bool = False) -> str:
    """The FTS5 MATCH text for ``text``; a query with nothing to search is a QueryError."""
    if raw:
        if not text.strip() or "\x00" in text:
            raise QueryError("search query: nothing to search for" if not text.strip() else "search query: NUL byte")
        return text
    terms = [_term(word) for word in text.replace("\x00", " ").split()]
    terms = [t for t in terms if t]
    if not terms:
        raise QueryError(f"search query {_show(text)}: no words to search for")
    return " ".join(terms)


def _term(word: str) -> str:
    prefix = word.endswith("*")
    word = word.rstrip("*")
    if not any(ch.isalnum() for ch in word):
        return ""
    return '"' + word.replace('"', '""') + '"' + ("*" if prefix else "")


def _show(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


def search(store: Store, q: Search, *, now: datetime | None = None) -> list[Hit]:
    """The best hits for ``q``, one per run, best and newest first (see the module's docstring)."""
    expr = match_expression(q.text, raw=q.raw)
    candidates = _candidates(store, q, expr)
    best: dict[str, tuple[float, str, int, dict[str, Any]]] = {}
    moment = now or utcnow()
    for row in candidates:
        score = _score(row["rank"], row["ts"], moment)
        key = (score, row["ts"], row["seq"])
        held = best.get(row["run_id"])
        if held is None or key > held[:3]:
            best[row["run_id"]] = (*key, row)
    ranked = sorted(best.values(), key=lambda b: (b[0], b[1], b[3]["run_id"], b[2]), reverse=True)[: q.limit]
    snippets = _snippets(store, q, [b[3]["id"] for b in ranked])
    return [
        Hit(r["run_id"], r["job"], r["ts"], r["kind"], r["label"], snippets.get(r["id"], ""), score)
        for score, _, _, r in ranked
    ]


def _score(rank: float, ts: str, now: datetime) -> float:
    """bm25 (FTS5's is negative: lower is better) as a positive relevance, discounted by age."""
    stamp = parse_iso(ts)
    age_days = max(0.0, (now - stamp).total_seconds() / 86400) if stamp else 0.0
    return -rank / (1.0 + age_days / RECENCY_DAYS)


def _candidates(store: Store, q: Search, expr: str) -> list[dict[str, Any]]:
    if store.dialect is Dialect.POSTGRESQL:
        return _candidates_pg(store, q)
    filters, values = _filters(q)
    where, params = ["search_fts MATCH ?", *filters], [expr, *values]
    sql = (
        "SELECT d.id, d.run_id, d.seq, d.job, d.ts, d.kind, d.label, bm25(search_fts) AS rank "
        "FROM search_fts JOIN search_docs d ON d.id = search_fts.rowid "
        f"WHERE {' AND '.join(where)} ORDER BY search_fts.rowid DESC LIMIT {WINDOW}"
    )
    with _syntax(q.text):
        return store.query(sql, params)


def _filters(q: Search) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if q.job:
        where.append("d.job = ?")
        params.append(q.job)
    if q.since is not None:
        where.append("d.ts >= ?")
        params.append(iso(q.since) or "")
    if q.exclude_run:
        where.append("d.run_id != ?")
        params.append(q.exclude_run)
    return where, params


def tsquery(text: str, *, raw: bool = False) -> tuple[str, list[str]]:
    """PostgreSQL: the ``tsquery`` SQL expression for ``text`` and its parameters (see the module doc).
    A word is split at punctuation as the index splits texts (``foo:bar`` is the phrase foo bar)."""
    if raw:
        match_expression(text, raw=True)  # nothing to search for: the same QueryError
        return "websearch_to_tsquery('simple', ?)", [text]
    match_expression(text)
    parts, params = [], []
    for word in text.replace("\x00", " ").split():
        prefix = word.endswith("*")
        pieces = [p for p in _PUNCT.split(word.rstrip("*").lower()) if p]
        if not pieces or not any(ch.isalnum() for ch in "".join(pieces)):
            continue
        parts.append("to_tsquery('simple', ?)")
        phrase = " <-> ".join("'" + p.replace("\\", "\\\\").replace("'", "''") + "'" for p in pieces)
        params.append(phrase + (":*" if prefix else ""))
    return " && ".join(parts), params


def _candidates_pg(store: Store, q: Search) -> list[dict[str, Any]]:
    expr, params = tsquery(q.text, raw=q.raw)
    where, more = _filters(q)
    sql = (
        "SELECT d.id, d.run_id, d.seq, d.job, d.ts, d.kind, d.label, -ts_rank(f.tsv, m.q) AS rank "
        f"FROM (SELECT {expr} AS q) m, search_fts f JOIN search_docs d ON d.id = f.rowid "
        f"WHERE {' AND '.join(['f.tsv @@ m.q', *where])} ORDER BY f.rowid DESC LIMIT {WINDOW}"
    )
    return store.query(sql, [*params, *more])


def _snippets(store: Store, q: Search, ids: list[int]) -> dict[int, str]:
    """The passage around the first matching word of each text, made here rather than by FTS5's
    ``snippet()``, which evaluates the whole query again per row (slow for prefix queries)."""
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    rows = store.query(f"SELECT rowid AS id, body FROM search_fts WHERE rowid IN ({marks})", ids)
    terms = _highlight_terms(q.text, raw=q.raw)
    return {r["id"]: passage(str(r["body"]), terms) for r in rows}


_TOKEN = re.compile(r"[^\W_]+")
_PUNCT = re.compile(r"[\s!-/:-@\[-`{-~]+")  # what the PostgreSQL index splits words at (ASCII punctuation)
_QUERY_WORD = re.compile(r"([^\W_]+)(\*?)")
_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})


def _fold(word: str) -> str:
    """A token as unicode61 with remove_diacritics compares it: lower case, no accents."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _highlight_terms(text: str, *, raw: bool) -> list[tuple[str, bool]]:
    """(folded token, is a prefix) for each word of the query (FTS5 operators left out when raw)."""
    out = []
    for m in _QUERY_WORD.finditer(text):
        if raw and m.group(1) in _OPERATORS:
            continue
        out.append((_fold(m.group(1)), bool(m.group(2))))
    return out


def passage(body: str, terms: list[tuple[str, bool]], width: int = SNIPPET_TOKENS) -> str:
    """About ``width`` words of ``body`` around the first matching one, matches between « and », on one line."""
    tokens = list(_TOKEN.finditer(body))
    if not tokens:
        return " ".join(body.split())[:200]

    def hit(token: str) -> bool:
        folded = _fold(token)
        return any(folded.startswith(t) if prefix else folded == t for t, prefix in terms)

    first = next((i for i, t in enumerate(tokens) if hit(t.group())), 0)
    lo = max(0, first - width // 3)
    hi = min(len(tokens), lo + width)
    parts, at = [], tokens[lo].start()
    for t in tokens[lo:hi]:
        parts.append(body[at : t.start()])
        parts.append(f"{MARK[0]}{t.group()}{MARK[1]}" if hit(t.group()) else t.group())
        at = t.end()
    tail = body[at : tokens[hi].start()] if hi < len(tokens) else body[at:]
    parts.append(tail.split(None, 1)[0] if tail and not tail[0].isspace() else "")  # "x)" and "[MASK]" whole
    text = " ".join("".join(parts).split())
    return ("…" if lo > 0 else "") + text + ("…" if hi < len(tokens) else "")


@contextmanager
def _syntax(text: str) -> Iterator[None]:
    """Turn FTS5's rejection of a query (an SQLITE_ERROR, not a fault of the file) into a QueryError."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) != 1:
            raise
        raise QueryError(f"search query {_show(text)}: {' '.join(str(exc).split())}") from exc


# -- writing ---------------------------------------------------------------------------------
def index_output(store: Store, run_id: str, job: str, text: str, *, ended: datetime) -> None:
    """Index a run's final output (redacted by the caller) as its seq-0 text, dated ``ended`` (the
    run's ``ended_at``, as ``rebuild`` dates it); replaces an earlier one."""
    with store.transaction() as conn:
        _drop(conn, run_id, 0)
        _add_output(conn, run_id, job, iso(ended) or "", text)


def _drop(conn: sqlite3.Connection, run_id: str, seq: int) -> None:
    conn.execute(
        "DELETE FROM search_fts WHERE rowid = (SELECT id FROM search_docs WHERE run_id = ? AND seq = ?)", (run_id, seq)
    )
    conn.execute("DELETE FROM search_docs WHERE run_id = ? AND seq = ?", (run_id, seq))


@dataclass(frozen=True)
class Rebuilt:
    events: int
    outputs: int


def rebuild(store: Store) -> Rebuilt:
    """Empty the index and make it again from ``run_events`` and the runs' output files, in one
    transaction (searches see the old index until it commits)."""

    redact = Redactor()
    text, wanted = TEXT.format(r="e"), WANTED.format(r="e")
    pg = store.dialect is Dialect.POSTGRESQL
    with store.transaction() as conn:
        conn.execute("DELETE FROM search_fts")
        conn.execute("DELETE FROM search_docs")
        if pg:  # the text of an event: the SQL function of migration m0013 (the triggers use it too)
            _reindex_events_pg(conn)
        else:
            _reindex_events(conn, text, wanted)
        events = int(conn.execute("SELECT count(*) FROM search_docs").fetchone()[0])
        outputs = 0
        for run_id, job, ts, output in _outputs(conn):
            outputs += _add_output(conn, run_id, job, ts, redact(output))
        if not pg:
            conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")
    return Rebuilt(events, outputs)


def _reindex_events(conn: sqlite3.Connection, text: str, wanted: str) -> None:
    conn.execute(
        "INSERT INTO search_docs (run_id, seq, job, ts, kind, label) "
        "SELECT e.run_id, e.seq, coalesce(r.job, ''), e.ts, e.kind, json_extract(e.payload, '$.name') "
        f"FROM run_events e LEFT JOIN runs r ON r.id = e.run_id WHERE {wanted} AND length({text}) > 0 "
        "ORDER BY e.ts, e.run_id, e.seq"
    )
    conn.execute(
        f"INSERT INTO search_fts (rowid, body) SELECT d.id, {text} FROM search_docs d "
        "JOIN run_events e ON e.run_id = d.run_id AND e.seq = d.seq ORDER BY d.id"
    )


def _reindex_events_pg(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO search_docs (run_id, seq, job, ts, kind, label) "
        "SELECT e.run_id, e.seq, coalesce(r.job, ''), e.ts, e.kind, e.payload::jsonb->>'name' "
        "FROM run_events e LEFT JOIN runs r ON r.id = e.run_id WHERE search_text(e.kind, e.payload) IS NOT NULL "
        "ORDER BY e.ts, e.run_id, e.seq"
    )
    conn.execute(
        "INSERT INTO search_fts (rowid, body) SELECT d.id, search_text(e.kind, e.payload) FROM search_docs d "
        "JOIN run_events e ON e.run_id = d.run_id AND e.seq = d.seq ORDER BY d.id"
    )


def _outputs(conn: sqlite3.Connection) -> Iterator[tuple[str, str, str, str]]:
    rows = conn.execute(
        "SELECT id, job, coalesce(ended_at, created_at), output_path FROM runs WHERE output_path IS NOT NULL "
        "ORDER BY created_at, id"
    ).fetchall()
    for run_id, job, ts, path in rows:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            body = conn.execute("SELECT body FROM run_files WHERE run_id=? AND kind='output'", (run_id,)).fetchone()
            if body is not None:  # PostgreSQL: the run's machine has the file; the store has its copy
                yield run_id, job, ts, str(body[0])
            continue  # a pruned or moved output: its events are still indexed
        yield run_id, job, ts, text


def _add_output(conn: sqlite3.Connection, run_id: str, job: str, ts: str, text: str) -> int:
    text = text[:INDEX_CHARS]
    if not text.strip() or is_silent(text):
        return 0
    cur = conn.execute(
        "INSERT INTO search_docs (run_id, seq, job, ts, kind, label) VALUES (?, 0, ?, ?, 'output', NULL)",
        (run_id, job, ts),
    )
    conn.execute("INSERT INTO search_fts (rowid, body) VALUES (?, ?)", (cur.lastrowid, text))
    return 1


def since(text: str, *, now: datetime | None = None) -> datetime:
    """``--since``: a duration back from now (``7d``, ``12h``, ``2w``) or a date / ISO time (UTC
    unless it names its offset); anything else is a UsageError naming the option."""
    from datetime import UTC

    moment = now or utcnow()
    try:
        return moment - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since {text!r}: use a duration back from now (7d, 12h) or a date (2026-11-30)") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
