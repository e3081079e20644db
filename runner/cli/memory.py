"""``runner memory list | show | edit | clear | pending | accept | reject``: the notebooks jobs keep
across runs, and the notes held for the operator because the injection scan flagged them
(docs/memory.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from runner.cli._util import echo_json, local_time, settings, table

if TYPE_CHECKING:
    from runner.memory.notebook import Notebook, Scope
    from runner.settings import Settings
    from runner.store.memory_pending import HeldNote

SCOPE_HELP = "a job name (its own notebook) or shared:NAME"


@click.group("memory")
def memory_group() -> None:
    """Notebooks the memory tool writes: a job's own (memory: job) or shared ones (memory: shared:NAME);
    notes held for review."""


def _scope(s: Settings, text: str) -> Scope:
    """The notebook SCOPE names; a bare name with nothing stored must be a job of jobs.yaml."""
    from runner.errors import UsageError
    from runner.memory.notebook import ScopeKind, parse_scope
    from runner.memory.notebooks import load

    try:
        scope = parse_scope(text)
    except ValueError as exc:
        raise UsageError(f"SCOPE {exc}") from None
    if scope.kind == ScopeKind.JOB and load(s.store, scope).version == 0:
        s.jobs.get(scope.name)  # UsageError naming the file and the closest job names
    return scope


@memory_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def memory_list(as_json: bool) -> None:
    """Every notebook in the store with its size."""
    from runner.memory.notebooks import all_notebooks

    rows = all_notebooks(settings().store)
    if as_json:
        echo_json(
            [
                {
                    "scope": r.scope,
                    "entries": len(r.notebook.entries),
                    "chars": r.notebook.chars,
                    "cap": r.notebook.cap,
                    "updated_at": r.updated_at,
                    "updated_by": r.updated_by,
                }
                for r in rows
            ]
        )
        return
    cells = [(r.scope, r.notebook.usage(), local_time(r.updated_at), r.updated_by or "") for r in rows]
    table(cells, ["SCOPE", "SIZE", "UPDATED", "BY"])


@memory_group.command("show")
@click.argument("scope", metavar="SCOPE")
@click.option("--json", "as_json", is_flag=True)
def memory_show(scope: str, as_json: bool) -> None:
    """The entries of one notebook (SCOPE: a job name or shared:NAME), separated by lines of §."""
    from runner.memory.notebook import render
    from runner.memory.notebooks import load

    s = settings()
    stored = load(s.store, _scope(s, scope))
    nb = stored.notebook
    if as_json:
        echo_json(
            {
                "scope": stored.scope,
                "entries": list(nb.entries),
                "chars": nb.chars,
                "cap": nb.cap,
                "updated_at": stored.updated_at,
                "updated_by": stored.updated_by,
            }
        )
        return
    click.echo(f"# {stored.scope}: {nb.usage()}", err=True)
    if nb.entries:
        click.echo(render(nb.entries))


@memory_group.command("edit")
@click.argument("scope", metavar="SCOPE")
def memory_edit(scope: str) -> None:
    """Open the notebook in $EDITOR (entries separated by lines holding only §); saved when it
    passes the cap and the injection scan, else nothing changes. An empty file empties it."""
    from runner.memory.notebook import render
    from runner.memory.notebooks import change, load

    s = settings()
    where = _scope(s, scope)
    stored = load(s.store, where)
    text = render(stored.notebook.entries) + "\n" if stored.notebook.entries else ""
    edited = click.edit(text, extension=".md", require_save=True)
    if edited is None or edited == text:
        click.echo(f"{where}: unchanged")
        return
    new = _checked(where, edited, stored.notebook)
    change(s.store, where, lambda _: new, by="cli", expect_version=stored.version)
    click.echo(f"{where}: saved; {new.usage()}")


def _checked(where: Scope, edited: str, before: Notebook) -> Notebook:
    """The edited text as a notebook; UsageError (exit 2) for text over the cap or a new or changed
    entry the injection scan flags (entries already stored passed it, or the operator accepted them)."""
    from runner.errors import UsageError
    from runner.memory.notebook import MemoryRefused, Notebook, parse
    from runner.memory.write import check_text
    from runner.safety.redact import Redactor

    entries = parse(edited)
    try:
        for i, entry in enumerate(entries, 1):
            if entry not in before.entries:
                check_text(entry, f"entry {i}")
        new = Notebook(tuple(dict.fromkeys(Redactor()(e) for e in entries))).within_cap()
    except MemoryRefused as exc:
        raise UsageError(f"{where}: {exc}") from None
    return new


@memory_group.command("clear")
@click.argument("scope", metavar="SCOPE")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
def memory_clear(scope: str, yes: bool) -> None:
    """Remove every entry of a notebook (asks first unless --yes)."""
    from runner.memory.notebooks import clear, load

    s = settings()
    where = _scope(s, scope)
    held = load(s.store, where).notebook
    if not held.entries:
        click.echo(f"{where}: already empty")
        return
    if not yes and not click.confirm(f"clear {where} ({held.usage()})?", default=False):
        click.echo("nothing cleared")
        return
    count = clear(s.store, where, by="cli")
    click.echo(f"{where}: cleared {count} {'entry' if count == 1 else 'entries'}")


@memory_group.command("pending")
@click.option("--json", "as_json", is_flag=True, help="every field, the whole note")
def memory_pending(as_json: bool) -> None:
    """Notes runs wrote that the injection scan flagged, held for you, oldest first. No run sees
    one until you accept it."""
    from runner.store.memory_pending import pending

    items = pending(settings().store)
    if as_json:
        echo_json([n.as_dict() for n in items])
        return
    if not items:
        click.echo("no memory note is waiting for review")
        return
    table([_pending_row(n) for n in items], ["ID", "NOTEBOOK", "ACTION", "HELD", "RUN", "FLAGGED", "NOTE"])
    click.echo(
        "whole notes: runner memory pending --json  |  answer with: runner memory accept ID  |  runner memory reject ID"
    )


def _pending_row(n: HeldNote) -> list[str]:
    from runner.safety.quoting import visible

    kinds = "; ".join(dict.fromkeys(f.split(":", 1)[0] for f in n.findings))
    text = " ⏎ ".join(visible(n.content).splitlines())
    return [n.id, n.scope, n.action, local_time(n.held_at), n.run_id or "", kinds, text[:80]]


@memory_group.command("accept")
@click.argument("note_id", metavar="ID")
def memory_accept(note_id: str) -> None:
    """Store a held note in its notebook as your decision; runs see it (quoted, as data) from the
    next one on. Exit 2 when ID is not pending or the notebook does not take it."""
    from runner.errors import UsageError
    from runner.memory.held import accept
    from runner.memory.notebook import MemoryRefused
    from runner.store.control import whoami

    by = whoami()
    try:
        note, after = accept(settings().store, note_id, by=by)
    except MemoryRefused as exc:
        raise UsageError(f"held note {note_id}: not accepted: {exc}") from None
    click.echo(f"held note {note.id}: accepted by {by} into {note.scope} ({after.usage()})")


@memory_group.command("reject")
@click.argument("note_id", metavar="ID")
def memory_reject(note_id: str) -> None:
    """Drop a held note (kept in the store as rejected). Exit 2 when ID is not pending."""
    from runner.memory.held import reject
    from runner.store.control import whoami

    by = whoami()
    note = reject(settings().store, note_id, by=by)
    click.echo(f"held note {note.id}: rejected by {by}")


COMMANDS = [memory_group]
