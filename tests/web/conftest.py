"""Fixtures for the web tests: one project with real runs per module, a real `runner web`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.testing import FakeOpenAI
from tests.web.webhelp import Site, WebServer, make_site, seed_runs, start_web


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    fake = FakeOpenAI().start()
    s = make_site(tmp_path_factory.mktemp("web"), fake)
    s.ids = seed_runs(s)  # type: ignore[attr-defined]
    yield s
    s.close()
    fake.stop()


@pytest.fixture(scope="module")
def web(site: Site) -> Iterator[WebServer]:
    server = start_web(site)
    yield server
    server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """Keep each phase's report on the test item (the browser fixture screenshots a failure)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
