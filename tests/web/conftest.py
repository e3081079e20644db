"""Fixtures for the web tests: one project with real runs per module, a real `runner web`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def artifacts() -> Path:
    path = Path("/tmp/runner-web-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path
