"""The loops serve runs beside the scheduler: kanban dispatch and the idle Curator's first sight."""

import json

import pytest

from tests.servehelp import serve_factory, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def test_serve_dispatches_kanban_tasks_and_seeds_the_curator(project, serve):
    write_config(project)
    project.write_jobs("jobs:\n  chore:\n    agent: false\n    pre_run: 'echo did $HERMES_KANBAN_TASK'\n")
    proc = serve().started()
    added = project.run("kanban", "add", "Tidy up", "--job", "chore", "--json")
    assert added.returncode == 0, added.stderr
    task_id = json.loads(added.stdout)["id"]

    def done():
        shown = json.loads(project.run("kanban", "show", str(task_id), "--json").stdout)
        return shown if shown["task"]["status"] == "done" else None

    shown = wait_for(done, timeout=30, what="the task to be done by a worker serve started")
    assert "did" in shown["task"]["result"]
    proc.wait_log("curator seeded")
    db = project.db()
    assert db.execute("SELECT seeded FROM curator_state").fetchone()[0] == 1
    assert proc.stop() == 0
