"""Catch-up after downtime, with a real serve: the store says the last slot was 3 h ago."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runner.serve.planner import JobState
from runner.serve.state import save_sight
from tests.servehelp import job_rows, serve_factory, ts, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


JOB = "  {name}:\n    schedule: every 15m\n    agent: false\n    pre_run: echo {name}\n    catchup: {policy}\n"


def test_catchup_skip_once_all_after_a_3h_gap(project, serve):
    """Slots every 15 min; the last one with a row was 3 h 7.5 min ago, so 12 slots are due,
    the newest 7.5 min late (never within the 30 s on-time grace, whatever the test's speed)."""
    write_config(project)
    project.write_jobs(
        "jobs:\n"
        + JOB.format(name="skipper", policy="skip")
        + JOB.format(name="oncer", policy="once")
        + JOB.format(name="aller", policy="all")
        + "    catchup_window: 1h\n"
    )
    now = datetime.now(UTC).replace(microsecond=0)
    last = now - timedelta(hours=3, minutes=7.5)
    store = project.open_store()
    for name in ("skipper", "oncer", "aller"):
        save_sight(
            store,
            JobState(
                name,
                "every 15m",
                first_seen=last - timedelta(days=1),
                last_slot=last,
                resolved_at=last - timedelta(days=1),
            ),
        )
    store.close()
    daemon = serve().started()
    wait_for(lambda: len([r for r in job_rows(project.home, "aller") if r["status"] == "succeeded"]) == 4, 15)
    wait_for(lambda: [r for r in job_rows(project.home, "oncer") if r["status"] == "succeeded"], 10)
    assert daemon.stop() == 0
    expected_slots = [last + timedelta(minutes=15 * k) for k in range(1, 13)]

    def by_status(name: str) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for row in job_rows(project.home, name):
            out.setdefault(row["status"], []).append(row)
        return out

    skipper = by_status("skipper")
    assert set(skipper) == {"missed"} and len(skipper["missed"]) == 12
    assert {r["reason"] for r in skipper["missed"]} == {"catchup_skip", "outside_window"}
    assert [ts(r["slot"]) for r in skipper["missed"]] == expected_slots

    oncer = by_status("oncer")
    assert len(oncer["succeeded"]) == 1 and len(oncer["missed"]) == 11 and set(oncer) == {"succeeded", "missed"}
    assert ts(oncer["succeeded"][0]["slot"]) == expected_slots[-1]

    aller = by_status("aller")
    assert len(aller["succeeded"]) == 4 and len(aller["missed"]) == 8 and set(aller) == {"succeeded", "missed"}
    ran = aller["succeeded"]
    assert [ts(r["slot"]) for r in ran] == expected_slots[-4:]
    assert {r["reason"] for r in aller["missed"]} == {"outside_window"}
    starts = [ts(r["started_at"]) for r in ran]
    assert starts == sorted(starts)  # in slot order, one after another
    for a, b in zip(ran, ran[1:], strict=False):
        assert ts(b["started_at"]) >= ts(a["ended_at"])
