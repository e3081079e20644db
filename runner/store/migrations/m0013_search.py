"""The full-text index over past runs (``runner runs search``, the ``session_search`` tool).

``search_docs`` holds one row per indexed text (job, time, kind, tool name); ``search_fts`` (an
FTS5 table, same rowid) its text, capped at 8,000 characters. Triggers keep it current: an
inserted ``run_events`` row of a kind worth searching adds its text (the payload is redacted
already, by the ``Recorder``); a deleted event or run removes its texts. A run's final output
(seq 0) is added by ``runner.store.search.index_output``. Existing events are indexed here.
The triggers are frozen with this migration; ``runner.store.search`` holds the same text
expression for ``runner db reindex`` (a test keeps the two equal).
"""

from __future__ import annotations

from typing import Any

KINDS = "('prompt', 'response', 'tool_call', 'tool_result', 'pre_run')"

TEXT = (
    "substr(CASE {r}.kind"
    " WHEN 'prompt' THEN json_extract({r}.payload, '$.user')"
    " WHEN 'response' THEN json_extract({r}.payload, '$.content')"
    " WHEN 'tool_result' THEN json_extract({r}.payload, '$.result')"
    " WHEN 'tool_call' THEN json_extract({r}.payload, '$.name') || ' ' || json_extract({r}.payload, '$.arguments')"
    " WHEN 'pre_run' THEN json_extract({r}.payload, '$.stdout')"
    " END, 1, 8000)"
)

# the session_search tool's own calls and results are not indexed (a search would find searches);
# a payload that is not JSON (never written by the Recorder) is skipped rather than failing the insert
WANTED = (
    "{r}.kind IN " + KINDS + " AND json_valid({r}.payload)"
    " AND coalesce(json_extract({r}.payload, '$.name'), '') != 'session_search'"
)


def apply(db: Any) -> None:
    text, wanted = TEXT.format(r="NEW"), WANTED.format(r="NEW")
    db.execute(
        "CREATE TABLE search_docs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "job TEXT NOT NULL, ts TEXT NOT NULL, kind TEXT NOT NULL, label TEXT)"
    )
    db.execute("CREATE UNIQUE INDEX search_docs_event ON search_docs(run_id, seq)")
    db.execute("CREATE VIRTUAL TABLE search_fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 2')")
    db.execute(
        f"CREATE TRIGGER search_event_added AFTER INSERT ON run_events WHEN {wanted} AND length({text}) > 0 BEGIN "
        "INSERT INTO search_docs (run_id, seq, job, ts, kind, label) VALUES (NEW.run_id, NEW.seq, "
        "coalesce((SELECT job FROM runs WHERE id = NEW.run_id), ''), NEW.ts, NEW.kind, "
        "json_extract(NEW.payload, '$.name')); "
        f"INSERT INTO search_fts (rowid, body) VALUES (last_insert_rowid(), {text}); "
        "END"
    )
    db.execute(
        f"CREATE TRIGGER search_event_removed AFTER DELETE ON run_events WHEN OLD.kind IN {KINDS} BEGIN "
        "DELETE FROM search_fts WHERE rowid = (SELECT id FROM search_docs WHERE run_id = OLD.run_id AND seq = OLD.seq); "
        "DELETE FROM search_docs WHERE run_id = OLD.run_id AND seq = OLD.seq; "
        "END"
    )
    db.execute(
        "CREATE TRIGGER search_run_removed AFTER DELETE ON runs BEGIN "
        "DELETE FROM search_fts WHERE rowid IN (SELECT id FROM search_docs WHERE run_id = OLD.id); "
        "DELETE FROM search_docs WHERE run_id = OLD.id; "
        "END"
    )
    backfill(db)


def backfill(db: Any) -> None:
    """Index the events already in the ledger (outputs of earlier runs: ``runner db reindex``)."""
    text, wanted = TEXT.format(r="e"), WANTED.format(r="e")
    db.execute(
        "INSERT INTO search_docs (run_id, seq, job, ts, kind, label) "
        "SELECT e.run_id, e.seq, coalesce(r.job, ''), e.ts, e.kind, json_extract(e.payload, '$.name') "
        f"FROM run_events e LEFT JOIN runs r ON r.id = e.run_id WHERE {wanted} AND length({text}) > 0 "
        "ORDER BY e.ts, e.run_id, e.seq"
    )
    db.execute(
        f"INSERT INTO search_fts (rowid, body) SELECT d.id, {text} FROM search_docs d "
        "JOIN run_events e ON e.run_id = d.run_id AND e.seq = d.seq ORDER BY d.id"
    )


# -- PostgreSQL (issue 17): the same tables, a tsvector column with a GIN index for FTS5 --------
# ``search_fts`` is a plain table there (``rowid`` = ``search_docs.id``, ``body``, ``tsv``: its words
# split at punctuation and spaces, as FTS5's unicode61 splits them, lower-cased); the
# text of an event is the SQL function ``search_text(kind, payload)`` (the same choice of fields
# as ``TEXT`` and ``WANTED`` above; NULL when nothing is worth indexing), used by the trigger and
# by ``runner.store.search.rebuild``.
PG_STATEMENTS = [
    """
    CREATE FUNCTION search_text(kind text, payload text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        doc jsonb;
    BEGIN
        IF kind NOT IN ('prompt', 'response', 'tool_call', 'tool_result', 'pre_run') THEN
            RETURN NULL;
        END IF;
        BEGIN
            doc := payload::jsonb;
        EXCEPTION WHEN others THEN
            RETURN NULL;
        END;
        IF jsonb_typeof(doc) <> 'object' OR coalesce(doc->>'name', '') = 'session_search' THEN
            RETURN NULL;
        END IF;
        RETURN nullif(substr(CASE kind
            WHEN 'prompt' THEN doc->>'user'
            WHEN 'response' THEN doc->>'content'
            WHEN 'tool_result' THEN doc->>'result'
            WHEN 'tool_call' THEN (doc->>'name') || ' ' || (doc->>'arguments')
            WHEN 'pre_run' THEN doc->>'stdout'
        END, 1, 8000), '');
    END $$
    """,
    """
    CREATE TABLE search_fts (
        rowid BIGINT PRIMARY KEY,
        body TEXT NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', regexp_replace(body, '[[:punct:][:space:]]+', ' ', 'g'))) STORED
    )
    """,
    "CREATE INDEX search_fts_tsv ON search_fts USING GIN (tsv)",
    """
    CREATE FUNCTION search_event_added() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        body text := search_text(NEW.kind, NEW.payload);
        doc_id bigint;
    BEGIN
        IF body IS NULL THEN
            RETURN NULL;
        END IF;
        INSERT INTO search_docs (run_id, seq, job, ts, kind, label)
        VALUES (NEW.run_id, NEW.seq, coalesce((SELECT job FROM runs WHERE id = NEW.run_id), ''), NEW.ts, NEW.kind,
                NEW.payload::jsonb->>'name')
        RETURNING id INTO doc_id;
        INSERT INTO search_fts (rowid, body) VALUES (doc_id, body);
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER search_event_added AFTER INSERT ON run_events FOR EACH ROW EXECUTE FUNCTION search_event_added()",
    """
    CREATE FUNCTION search_event_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM search_fts WHERE rowid IN (SELECT id FROM search_docs WHERE run_id = OLD.run_id AND seq = OLD.seq);
        DELETE FROM search_docs WHERE run_id = OLD.run_id AND seq = OLD.seq;
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER search_event_removed AFTER DELETE ON run_events FOR EACH ROW EXECUTE FUNCTION search_event_removed()",
    """
    CREATE FUNCTION search_run_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM search_fts WHERE rowid IN (SELECT id FROM search_docs WHERE run_id = OLD.id);
        DELETE FROM search_docs WHERE run_id = OLD.id;
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER search_run_removed AFTER DELETE ON runs FOR EACH ROW EXECUTE FUNCTION search_run_removed()",
    """
    INSERT INTO search_docs (run_id, seq, job, ts, kind, label)
    SELECT e.run_id, e.seq, coalesce(r.job, ''), e.ts, e.kind, e.payload::jsonb->>'name'
    FROM run_events e LEFT JOIN runs r ON r.id = e.run_id WHERE search_text(e.kind, e.payload) IS NOT NULL
    ORDER BY e.ts, e.run_id, e.seq
    """,
    """
    INSERT INTO search_fts (rowid, body) SELECT d.id, search_text(e.kind, e.payload) FROM search_docs d
    JOIN run_events e ON e.run_id = d.run_id AND e.seq = d.seq ORDER BY d.id
    """,
]


def apply_postgresql(db: Any) -> None:
    db.execute(
        "CREATE TABLE search_docs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "job TEXT NOT NULL, ts TEXT NOT NULL, kind TEXT NOT NULL, label TEXT)"
    )
    db.execute("CREATE UNIQUE INDEX search_docs_event ON search_docs(run_id, seq)")
    for statement in PG_STATEMENTS:
        db.conn.executescript(statement)
