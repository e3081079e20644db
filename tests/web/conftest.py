"""Fixtures for the web tests: one project with real runs per module, a real `runner web`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.testing import FakeOpenAI
from tests.conftest import store_mode
from tests.web.webhelp import CHROMIUM, Site, WebServer, make_site, seed_runs, start_web


@pytest.fixture(scope="module")
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    fake = FakeOpenAI().start()
    server = request.getfixturevalue("pg_server") if store_mode(request.config) == "postgresql" else None
    url = server.fresh() if server is not None else None  # --store postgresql: the module's database
    s = make_site(tmp_path_factory.mktemp("web"), fake, database_url=url)
    s.ids = seed_runs(s)  # type: ignore[attr-defined]
    yield s
    s.close()
    fake.stop()
    if server is not None and url:
        server.drop(url)


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


ARTIFACTS = Path(os.environ.get("RUNNER_TEST_ARTIFACTS", "/tmp/runner-web-artifacts"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with _playwright().sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context()
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    yield pg
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


def _playwright() -> Any:
    from playwright import sync_api

    return sync_api
