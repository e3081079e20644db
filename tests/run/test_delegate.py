"""Subagents (``delegate_task``) end to end: `runner run-job` against the fake model server; the
children are real child runs in the ledger, their tools run for real on the parent's backend."""

import json
import signal
import subprocess
import sys
import time

import pytest

from runner.testing import call, final, when
from tests.servehelp import rows

JOB = """\
jobs:
  boss:
    prompt: 'Split the work.'
    toolsets: [terminal, files, delegate]
    approvals: deny
    deliver: [file, stdout]
{extra}"""


def jobs(project, extra=""):
    project.write_jobs(JOB.format(extra=extra))


def ledger(project):
    return rows(project.home, "SELECT * FROM runs ORDER BY created_at, id")


def events(project, run_id):
    db = project.db()
    return [
        (k, json.loads(p))
        for k, p in db.execute("SELECT kind, payload FROM run_events WHERE run_id=? ORDER BY seq", (run_id,))
    ]


def parent_and_children(project):
    rs = ledger(project)
    [parent] = [r for r in rs if r["parent_run_id"] is None]
    kids = [r for r in rs if r["parent_run_id"] == parent["id"]]
    return parent, kids


def test_three_children_in_parallel_summaries_and_rollup(project, fake):
    jobs(project)
    fake.add(call("delegate_task", {"goal": ["count apples", "count pears", "count plums"], "context": "fruit"}))
    for fruit, n in (("apples", 3), ("pears", 5), ("plums", 7)):
        fake.add(when(f"count {fruit}", call("terminal", {"command": f"sleep 1; echo {fruit}={n}"})))
        fake.add(when(f"count {fruit}", final(f"there are {n} {fruit}", usage=(10, 2))))
    fake.add(final("apples 3, pears 5, plums 7", usage=(40, 4)))
    started = time.monotonic()
    res = project.run("run-job", "boss")
    took = time.monotonic() - started
    assert res.returncode == 0, res.stderr
    assert "apples 3, pears 5, plums 7" in res.stdout
    parent, kids = parent_and_children(project)
    assert len(kids) == 3 and {k["status"] for k in kids} == {"succeeded"}
    assert {k["trigger"] for k in kids} == {"delegate"} and {k["job"] for k in kids} == {"boss"}
    # the three children overlapped: each slept 1 s in its terminal command
    spans = sorted((k["started_at"], k["ended_at"]) for k in kids)
    assert spans[-1][0] < spans[0][1], spans
    assert took < 20
    # only the summaries went back to the parent, in the goals' order
    second = fake.requests[-1]["body"]["messages"]
    result = next(m["content"] for m in second if m["role"] == "tool")
    assert result.index("3 apples") < result.index("5 pears") < result.index("7 plums")
    assert "apples=3" not in result  # the child's tool output stays in the child
    # each child saw a fresh context: a system prompt, its goal and the context, nothing of the parent's
    child_first = [r["body"]["messages"] for r in fake.requests if "count pears" in json.dumps(r["body"])][0]
    assert [m["role"] for m in child_first] == ["system", "user"]
    assert "Split the work" not in json.dumps(child_first) and "fruit" in child_first[1]["content"]
    names = {t["function"]["name"] for t in fake.requests[1]["body"]["tools"]}
    assert "delegate_task" not in names and "terminal" in names
    # tokens roll up: the parent's row counts its own two turns and the children's six
    assert parent["prompt_tokens"] == 100 + 40 + 3 * (100 + 10)
    assert parent["completion_tokens"] == 20 + 4 + 3 * (20 + 2)
    for k in kids:
        assert (k["prompt_tokens"], k["completion_tokens"], k["iterations"]) == (110, 22, 2)
        assert (project.home / "outputs" / "boss" / f"{k['id']}.md").read_text().startswith("there are")
    kinds = [k for k, _ in events(project, parent["id"])]
    assert kinds.count("subagent_started") == 3 and kinds.count("subagent_finished") == 3


def test_child_cannot_delegate_at_depth_one(project, fake):
    jobs(project)
    fake.add(call("delegate_task", {"goal": "nested MARK-A"}))
    fake.add(when("nested MARK-A", call("delegate_task", {"goal": "deeper"})))
    fake.add(when("nested MARK-A", final("could not delegate")))
    fake.add(final("done"))
    res = project.run("run-job", "boss")
    assert res.returncode == 0, res.stderr
    parent, [kid] = parent_and_children(project)
    assert ledger(project) == [parent, kid]  # no grandchild
    [result] = [p for k, p in events(project, kid["id"]) if k == "tool_result"]
    assert result["failed"] and "unknown tool 'delegate_task'" in result["result"]


def test_depth_two_allows_one_more_level(project, fake):
    jobs(project, "    delegation: {max_depth: 2, max_children: 1}\n")
    fake.add(call("delegate_task", {"goal": "middle MARK-M"}))
    fake.add(when("middle MARK-M", call("delegate_task", {"goal": "leaf MARK-L"})))
    fake.add(when("leaf MARK-L", final("leaf done", usage=(5, 1))))
    fake.add(when("middle MARK-M", final("middle done", usage=(5, 1))))
    fake.add(final("top done"))
    res = project.run("run-job", "boss")
    assert res.returncode == 0, res.stderr
    rs = ledger(project)
    top = next(r for r in rs if r["parent_run_id"] is None)
    middle = next(r for r in rs if r["parent_run_id"] == top["id"])
    leaf = next(r for r in rs if r["parent_run_id"] == middle["id"])
    assert leaf["status"] == middle["status"] == "succeeded"
    assert middle["prompt_tokens"] == 100 + 5 + 5  # its two turns and the leaf's one
    leaf_tools = next(r for r in fake.requests if "leaf MARK-L" in json.dumps(r["body"]["messages"][1:2]))
    assert "delegate_task" not in {t["function"]["name"] for t in leaf_tools["body"]["tools"]}


def test_depth_three_is_bad_input(project):
    jobs(project, "    delegation: {max_depth: 3}\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2
    assert "boss" in res.stderr and "delegation.max_depth" in res.stderr and "Traceback" not in res.stderr


def test_dangerous_command_in_a_child_is_denied_by_the_parents_gate(project, fake):
    jobs(project)
    target = project.root / "keep.txt"
    target.write_text("keep")
    fake.add(call("delegate_task", {"goal": "clean MARK-D", "toolsets": ["terminal", "kanban"]}))
    fake.add(when("clean MARK-D", call("terminal", {"command": "rm -rf keep.txt"})))
    fake.add(when("clean MARK-D", final("it was blocked")))
    fake.add(final("the child was blocked"))
    res = project.run("run-job", "boss")
    assert res.returncode == 0, res.stderr
    assert target.read_text() == "keep"
    parent, [kid] = parent_and_children(project)
    [result] = [p for k, p in events(project, kid["id"]) if k == "tool_result"]
    assert result["failed"] and result["result"].startswith("blocked:")
    audit = rows(project.home, "SELECT run_id, decision FROM approvals")
    assert audit == [{"run_id": kid["id"], "decision": "denied"}]
    child_tools = next(r for r in fake.requests if "clean MARK-D" in json.dumps(r["body"]["messages"][1:2]))
    assert {t["function"]["name"] for t in child_tools["body"]["tools"]} == {"terminal"}  # kanban never


def test_child_over_its_token_slice_stops_with_a_partial_summary(project, fake):
    jobs(project, "    budget: {max_tokens: 1000}\n")
    fake.add(call("delegate_task", {"goal": ["a MARK-1", "b MARK-2"]}))
    fake.add(when("a MARK-1", final("a done", usage=(10, 1))))
    from runner.testing import Reply

    fake.add(when("b MARK-2", Reply(tool_calls=[("list_dir", {})], usage=(500, 0))))
    fake.add(when("b MARK-2", final("b: partial, listed the folder", usage=(5, 5))))
    fake.add(final("summary"))
    res = project.run("run-job", "boss")
    assert res.returncode == 0, res.stderr
    parent, kids = parent_and_children(project)
    b = next(k for k in kids if "partial" in (project.home / "outputs" / "boss" / f"{k['id']}.md").read_text())
    assert b["status"] == "failed" and b["reason"] == "budget_tokens"
    result = next(m["content"] for m in fake.requests[-1]["body"]["messages"] if m["role"] == "tool")
    assert "budget_tokens; partial summary" in result and "b: partial, listed the folder" in result


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_parent_stops_the_children(project, fake, sig):
    jobs(project)
    fake.add(call("delegate_task", {"goal": ["wait MARK-1", "wait MARK-2", "wait MARK-3"]}))
    for i in (1, 2, 3):
        fake.add(when(f"wait MARK-{i}", call("terminal", {"command": "sleep 2"})))
    fake.default = final("should not be asked")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run-job", "boss"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 20
    while len(fake.requests) < 4 and time.time() < deadline:
        time.sleep(0.05)
    assert len(fake.requests) == 4, [r["body"]["messages"][-1] for r in fake.requests]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    parent, kids = parent_and_children(project)
    assert parent["status"] == "interrupted"
    assert len(kids) == 3 and {k["status"] for k in kids} == {"interrupted"}
    assert not [r for r in ledger(project) if r["status"] == "running"]
    assert len(fake.requests) == 4  # nobody asked the model again after the signal


def test_runs_show_nests_the_children_and_runs_list_marks_them(project, fake):
    jobs(project)
    fake.add(call("delegate_task", {"goal": ["look MARK-X", "look MARK-Y"]}))
    fake.add(when("look MARK-X", final("x seen", usage=(7, 1))))
    fake.add(when("look MARK-Y", final("y seen", usage=(7, 1))))
    fake.add(final("both seen"))
    assert project.run("run-job", "boss").returncode == 0
    parent, kids = parent_and_children(project)
    shown = project.run("runs", "show", parent["id"])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "subagents (2; their tokens and cost are included above):" in text
    for k in kids:
        assert f"  {k['id']}  succeeded  turns 1  tokens 7+1" in text
    assert "goal: look MARK-X" in text and "goal: look MARK-Y" in text
    for k in kids:
        assert f"-> subagent {k['id']}: look MARK-" in text
        assert f"<- subagent {k['id']}: succeeded, 8 tokens, $0.00000" in text
    child = project.run("runs", "show", kids[0]["id"])
    assert f"parent   {parent['id']}" in child.stdout
    as_json = json.loads(project.run("runs", "show", parent["id"], "--json").stdout)
    assert sorted(c["id"] for c in as_json["children"]) == sorted(k["id"] for k in kids)
    listing = project.run("runs", "list").stdout
    assert listing.count("boss [child]") == 2 and listing.count("delegate") == 2


def test_in_process_with_the_scripted_model_a_stop_event_ends_every_child(project):
    """The same run through ``execute`` with ``ScriptedLLM`` behind the model seam: the children's
    model turns come from the script (routed by goal), the stop event of the request stops them."""
    import threading

    from runner.run.execute import execute
    from runner.run.request import Given, RunRequest
    from runner.testing import ScriptedLLM
    from tests.skillkit import settings_for

    jobs(project)
    llm = ScriptedLLM(call("delegate_task", {"goal": ["slow MARK-1", "slow MARK-2"]}))
    for i in (1, 2):
        llm.add(when(f"slow MARK-{i}", call("terminal", {"command": "sleep 3"})))
    llm.default = final("asked after the stop")
    settings = settings_for(project)
    job = settings.jobs.get("boss")
    stop = threading.Event()
    req = RunRequest(job, model=Given(llm), stop=stop, deliver=False)

    def both_children_in_their_command() -> bool:
        # the stop comes while each child's command runs (set between a child's model turn and its
        # tool call, the tool is rightly never started, which is not what this test is about)
        if len(llm.requests) < 3:
            return False
        kids = parent_and_children(project)[1]
        return len(kids) == 2 and all(any(e == "tool_call" for e, _ in events(project, k["id"])) for k in kids)

    stopper = threading.Thread(target=lambda: (_wait_for(both_children_in_their_command), stop.set()))
    stopper.start()
    outcome = execute(settings, req)
    stopper.join()
    assert outcome.status == "interrupted"
    parent, kids = parent_and_children(project)
    assert parent["status"] == "interrupted" and [k["status"] for k in kids] == ["interrupted"] * 2
    assert len(llm.requests) == 3  # the parent's turn and one per child; nobody asked again
    for k in kids:
        ran = [p["arguments"]["command"] for e, p in events(project, k["id"]) if e == "tool_call"]
        assert ran == ["sleep 3"]


def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_max_children_one_runs_the_goals_one_after_another(project, fake):
    jobs(project, "    delegation: {max_children: 1}\n")
    fake.add(call("delegate_task", {"goal": ["first MARK-1", "second MARK-2"]}))
    for i in (1, 2):
        fake.add(when(f"MARK-{i}", call("terminal", {"command": "sleep 0.3"})))
        fake.add(when(f"MARK-{i}", final(f"goal {i} done")))
    fake.add(final("both"))
    res = project.run("run-job", "boss")
    assert res.returncode == 0, res.stderr
    _, kids = parent_and_children(project)
    first, second = sorted(kids, key=lambda k: k["started_at"])
    assert first["ended_at"] <= second["started_at"]
