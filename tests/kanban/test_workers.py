"""The dispatcher and its workers for real: `runner kanban dispatch` and `runner kanban work`
subprocesses on a real runner.db, script-only jobs, SIGKILL / SIGSTOP, leases and fences."""

import os
import signal
import subprocess
import sys
import time

from runner.clock import utcnow
from tests.kanban_util import board_of, dispatcher, kinds, status_of, wait_for, write_config

JOBS = """\
jobs:
  step:
    agent: false
    pre_run: 'echo "$HERMES_KANBAN_TASK" >> {root}/order.txt; echo "result of $HERMES_KANBAN_TASK"'
  poison:
    agent: false
    pre_run: 'echo crashing; exit 3'
  slow:
    agent: false
    pre_run: 'sleep 3; echo slow'
  tagged:
    agent: false
    pre_run: 'sleep 2; echo "result of fence $HERMES_KANBAN_FENCE"'
"""


def setup(project, **kanban):
    write_config(project, **kanban)
    project.write_jobs(JOBS.format(root=project.root))


def add(project, *args):
    res = project.cli("kanban", "add", *args)
    assert res.exit_code == 0, res.output
    return int(res.output.strip())


def worker_pid(project, task_id):
    """The pid the worker recorded itself (its `started` event), once its attempt's run is going."""

    def check():
        with board_of(project) as board:
            task = board.get(task_id)
            runs = board.runs(task_id)
            going = "started" in kinds(board, task_id) and runs and runs[-1]["status"] == "running"
            return task.worker_pid if going and task.status == "running" else None

    return wait_for(check, what=f"task {task_id}'s worker to start")


def test_dependencies_run_in_order(project):
    setup(project, max_workers=3)
    a = add(project, "A", "--job", "step")
    b = add(project, "B", "--job", "step", "--parent", str(a))
    c = add(project, "C", "--job", "step", "--parent", str(b))
    with dispatcher(project):
        wait_for(lambda: status_of(project, c) == "done", timeout=30, what="C done")
    assert (project.root / "order.txt").read_text().split() == [str(a), str(b), str(c)]
    with board_of(project) as board:
        assert board.get(c).result == f"result of {c}\n"
        for parent, child in ((a, b), (b, c)):
            done_at = [e["ts"] for e in board.events(parent) if e["kind"] == "completed"][0]
            claimed_at = [e["ts"] for e in board.events(child) if e["kind"] == "claimed"][0]
            assert done_at <= claimed_at
        runs = board.runs(b)
    assert len(runs) == 1 and runs[0]["status"] == "succeeded"
    listed = project.cli("runs", "list", "--json").output
    assert '"trigger": "kanban"' in listed and f'"task_id": "{b}"' in listed
    assert (project.home / "logs" / "kanban" / f"{a}.log").read_text().startswith("=== attempt 1 (fence 1)")
    assert (project.home / "workspaces" / str(a)).is_dir()


def test_poison_task_fails_after_max_attempts_while_others_flow(project):
    setup(project, max_workers=1)
    bad = add(project, "always crashes", "--job", "poison", "--max-attempts", "2", "--priority", "9")
    good = [add(project, f"fine {i}", "--job", "step") for i in range(2)]
    with dispatcher(project):
        wait_for(lambda: all(status_of(project, t) in ("done", "failed") for t in [bad, *good]), timeout=40)
    with board_of(project) as board:
        task = board.get(bad)
        assert (task.status, task.attempts) == ("failed", 2)
        assert task.error == "pre_run exited 3"
        assert [board.get(t).status for t in good] == ["done", "done"]
        assert kinds(board, bad).count("attempt_failed") == 2 and kinds(board, bad)[-1] == "failed"
        assert [r["status"] for r in board.runs(bad)] == ["failed", "failed"]


def test_task_without_a_job_fails_with_a_clear_error(project):
    setup(project)
    with board_of(project) as board:
        t = board.add("jobless", now=utcnow(), max_attempts=1)
    with dispatcher(project):
        wait_for(lambda: status_of(project, t) == "failed", what="jobless task failed")
    with board_of(project) as board:
        assert "names no job and config.yaml sets no kanban.default_job" in (board.get(t).error or "")


def test_sigkilled_worker_is_ready_again_within_one_sweep(project, receiver):
    setup(project, retry_backoff=600)
    with (project.home / "config.yaml").open("a") as fh:
        fh.write(f"alerts: ['webhook:{receiver.url}/a']\n")
    t = add(project, "slow one", "--job", "slow")
    with dispatcher(project):
        pid = worker_pid(project, t)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: status_of(project, t) == "ready", timeout=5, what="ready again")
        assert time.monotonic() - killed < 2 + 0.1 + 2.0  # lease + one sweep (+ slack for a loaded machine)
    with board_of(project) as board:
        task = board.get(t)
        assert task.attempts == 1 and "exited with code -9" in (task.error or "")
        [run] = board.runs(t)
    assert run["status"] == "unknown"  # the dispatcher marked the killed attempt's run
    [alert] = [r.json() for r in receiver.wait(1)]  # and alerted it, once
    assert (alert["event"], alert["run_id"], alert["status"]) == ("failed", run["id"], "unknown")


def test_worker_and_dispatcher_killed_lease_expiry_reclaims(project):
    setup(project, retry_backoff=600)
    t = add(project, "slow one", "--job", "slow")
    with dispatcher(project) as first:
        pid = worker_pid(project, t)
        first.kill()
        first.wait()
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    assert status_of(project, t) == "running"  # nobody saw it die
    with dispatcher(project):
        wait_for(lambda: status_of(project, t) == "ready", timeout=20, what="lease expiry")
        waited = time.monotonic() - killed
    # lease + one sweep, + the new dispatcher's start-up (a process: seconds on a loaded machine)
    assert waited < 2 + 0.1 + 6.0, waited
    with board_of(project) as board:
        assert "reclaimed" in kinds(board, t)
        assert board.get(t).attempts == 1 and "lease expired" in (board.get(t).error or "")


def process_gone(pid):
    """Exited (a zombie waiting to be reaped counts) or gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _start_worker(project, task_id, fence):
    env = project.env(HERMES_KANBAN_TASK=str(task_id), HERMES_KANBAN_FENCE=str(fence))
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "kanban", "work"],
        env=env,
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_stopped_worker_past_its_lease_is_refused_by_the_fence(project):
    """SIGSTOP the first worker past its lease; a dispatcher elsewhere (one that cannot kill it:
    the board API, as another host would) reclaims and a second worker finishes; SIGCONT the first."""
    setup(project, lease_seconds=1.5)
    t = add(project, "contended", "--job", "tagged")
    with board_of(project) as board:
        [first] = board.claim("dispatcher-a", now=utcnow(), lease_seconds=1.5)
    w1 = _start_worker(project, t, first.fence)
    try:
        assert worker_pid(project, t) == w1.pid
        os.kill(w1.pid, signal.SIGSTOP)
        time.sleep(1.7)
        with board_of(project) as board:
            [gone] = board.reclaim_expired(now=utcnow(), backoff=0)
            assert gone.task_id == t and gone.pid == w1.pid
            [second] = board.claim("dispatcher-b", now=utcnow(), lease_seconds=1.5)
        assert second.fence == first.fence + 1
        w2 = _start_worker(project, t, second.fence)
        out2, err2 = w2.communicate(timeout=30)
        assert w2.returncode == 0, err2
        assert status_of(project, t) == "done"
    finally:
        os.kill(w1.pid, signal.SIGCONT)
    out1, err1 = w1.communicate(timeout=30)
    assert w1.returncode == 1 and "refused" in err1, err1
    with board_of(project) as board:
        task = board.get(t)
        assert (task.status, task.result, task.fence) == ("done", f"result of fence {second.fence}\n", 2)
        refused = [e for e in board.events(t) if e["kind"] == "refused"]
        assert refused and all(e["fence"] == first.fence for e in refused)
        runs = {r["status"]: r for r in board.runs(t)}
    assert runs["failed"]["reason"] == "refused" and "succeeded" in runs


def test_a_reclaimed_lease_ends_the_attempts_run_lost_in_the_same_pass(project, monkeypatch):
    """The board and the ledger give one verdict: the dispatcher pass that reclaims an expired lease
    ends the attempt's run ``unknown/worker_lost`` (so the task's next attempt may resume it)
    before it claims again, even while the stopped worker's process is still there."""
    from runner.kanban.dispatch import Dispatcher
    from runner.settings import Settings
    from tests.conftest import REPO

    setup(project, lease_seconds=1.5, retry_backoff=600)  # this dispatcher reclaims; the backoff keeps it from claiming again
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    settings = Settings.from_options(home=str(project.home), jobs=str(project.jobs_path))
    t = add(project, "stalls", "--job", "slow")
    with board_of(project) as board:
        [claim] = board.claim("dispatcher-a", now=utcnow(), lease_seconds=1.5)
        board.store.execute("UPDATE tasks SET host='other-host' WHERE id=?", (t,))
    worker = _start_worker(project, t, claim.fence)
    dispatcher = Dispatcher(settings)
    try:
        wait_for(lambda: board_runs(project, t) and board_runs(project, t)[0]["status"] == "running", what="the run")
        os.kill(worker.pid, signal.SIGSTOP)
        time.sleep(1.7)
        with board_of(project) as board:  # as on another host: the worker's pid means nothing here
            board.store.execute("UPDATE tasks SET host='other-host' WHERE id=?", (t,))
        tick = dispatcher.tick(utcnow())
        assert [r.task_id for r in tick.reclaimed] == [t]
        [run] = board_runs(project, t)
        assert (run["status"], run["reason"]) == ("unknown", "worker_lost")
        assert "lease of kanban task" in run["error"]
    finally:
        dispatcher.close()
        os.kill(worker.pid, signal.SIGCONT)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 1 and "refused" in err, err  # its late end is refused: the verdict stands
    [run] = board_runs(project, t)
    assert (run["status"], run["reason"]) == ("unknown", "worker_lost")


def board_runs(project, task_id):
    with board_of(project) as board:
        return board.runs(task_id)


def test_tick_with_injected_time_as_serve_uses_it(project, monkeypatch):
    """In-process ``Dispatcher.tick(now)`` (how `runner serve` drives it) with the real launcher."""
    from datetime import timedelta

    from runner.kanban.dispatch import Dispatcher
    from runner.settings import Settings
    from tests.conftest import REPO

    setup(project, max_workers=1, lease_seconds=30)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    settings = Settings.from_options(home=str(project.home), jobs=str(project.jobs_path))
    first = add(project, "first", "--job", "step", "--priority", "1")
    parent = add(project, "parent", "--job", "step")
    child = add(project, "child", "--job", "step", "--parent", str(parent))
    t0 = utcnow()
    with board_of(project) as board:
        board.claim("elsewhere", now=t0, lease_seconds=5)  # takes `first` (priority 1) ...
        board.store.execute("UPDATE tasks SET host='other-host' WHERE id=?", (first,))  # ... on another host
    dispatcher = Dispatcher(settings)
    try:
        r1 = dispatcher.tick(t0)
        assert [s.task_id for s in r1.started] == [parent] and r1.reclaimed == () and r1.running == 1
        wait_for(lambda: status_of(project, parent) == "done", what="parent done")
        wait_for(lambda: process_gone(r1.started[0].pid), what="the parent's worker to exit")
        assert status_of(project, child) == "ready"  # promoted by the parent's completion
        r2 = dispatcher.tick(t0 + timedelta(seconds=6))  # `first`'s lease (5 s) has run out
        assert [(x.task_id, x.status, x.host) for x in r2.reclaimed] == [(first, "ready", "other-host")]
        assert [(e.task_id, e.code, e.task_status) for e in r2.exited] == [(parent, 0, None)]
        assert [s.task_id for s in r2.started] == [first]  # priority before age; max_workers 1
        wait_for(lambda: status_of(project, first) == "done", what="first done")
        r3 = dispatcher.tick(t0 + timedelta(seconds=7))
        assert [s.task_id for s in r3.started] == [child]
        wait_for(lambda: status_of(project, child) == "done", what="child done")
    finally:
        dispatcher.close()
    with board_of(project) as board:
        assert board.get(first).attempts == 2 and board.get(first).fence == 2


def test_lease_keeper_renews_and_a_hand_move_stops_the_worker(project):
    """In-process: the renewal thread on its own connection keeps the lease alive; when a person
    moves the running task away, the next renewal is refused and the worker is told to stop."""
    import threading

    from runner.kanban.work import LeaseKeeper, TaskSession
    from runner.settings import Settings

    setup(project)
    settings = Settings.from_options(home=str(project.home), jobs=str(project.jobs_path))
    t = add(project, "long", "--job", "step")
    with board_of(project) as board:
        [claim] = board.claim("me", now=utcnow(), lease_seconds=1.5)
        session = TaskSession(board, board.get(t), claim.fence, settings)
        stop = threading.Event()

        def lost():
            if not session.ended:
                session.lost = True
                stop.set()

        keeper = LeaseKeeper(board.store.path, t, claim.fence, lease_seconds=1.5, on_lost=lost)
        keeper.start()
        try:
            time.sleep(2.0)  # longer than the lease: only renewals keep it
            assert board.reclaim_expired(now=utcnow(), backoff=0) == []
            board.move(t, "ready", now=utcnow())
            assert stop.wait(10), "the worker was not told to stop"
        finally:
            keeper.stop()
        assert session.lost and session.reminder() is None
        assert [e["payload"] for e in board.events(t) if e["kind"] == "refused"] == [
            '{"action":"renew","current_fence":1}'
        ]


def test_process_launcher_without_a_config_file(project, monkeypatch):
    """A home with no config.yaml: the worker finds the defaults itself (it used to be handed
    ``--config HOME/config.yaml`` and refused the missing file)."""
    from runner.kanban.dispatch import Dispatcher, ProcessLauncher
    from runner.settings import Settings
    from tests.conftest import REPO

    project.write_jobs(JOBS.format(root=project.root))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    settings = Settings.from_options(home=str(project.home), jobs=str(project.jobs_path))
    assert not settings.config_path.exists()
    task = add(project, "no config", "--job", "step")
    dispatcher = Dispatcher(settings, launcher=ProcessLauncher(settings))
    try:
        started = dispatcher.tick(utcnow()).started
        assert [s.task_id for s in started] == [task]
        wait_for(lambda: status_of(project, task) == "done", what="the task done")
    finally:
        dispatcher.close()


def test_a_claim_is_stamped_when_it_is_made_not_when_the_tick_began(project, monkeypatch):
    """In-process: a tick reads its ``now`` at its start; a parent task that completes during the
    tick must not look completed after its child's claim, so a claim is stamped with the
    dispatcher's clock read when it is made (never before the tick's ``now``)."""
    from datetime import timedelta

    from runner.clock import iso
    from runner.kanban.dispatch import Dispatcher
    from runner.settings import Settings
    from tests.conftest import REPO

    setup(project, max_workers=2)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    settings = Settings.from_options(home=str(project.home), jobs=str(project.jobs_path))
    task = add(project, "x", "--job", "step")
    began = utcnow() - timedelta(seconds=5)  # the tick's now
    claimed_at = utcnow()  # what the clock says when the claim is made
    dispatcher = Dispatcher(settings, clock=lambda: claimed_at)
    try:
        assert [s.task_id for s in dispatcher.tick(began).started] == [task]
        wait_for(lambda: status_of(project, task) == "done", what="x done")
    finally:
        dispatcher.close()
    with board_of(project) as board:
        [stamp] = [e["ts"] for e in board.events(task) if e["kind"] == "claimed"]
    assert stamp == iso(claimed_at)

