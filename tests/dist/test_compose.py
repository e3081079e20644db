"""contrib/compose: the compose file names the services docs/distributed.md promises, and the
config.yaml its services mount is valid runner configuration."""

from __future__ import annotations

import yaml

from runner.config.machine import load_config
from tests.conftest import REPO

COMPOSE = REPO / "contrib" / "compose"


def test_compose_file_has_the_store_the_broker_a_serve_and_two_workers() -> None:
    data = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    services = data["services"]
    assert {"postgres", "redis", "serve", "worker-1", "worker-2"} <= set(services)
    assert services["serve"]["command"][-1] == "serve"
    for name in ("worker-1", "worker-2"):
        assert "worker" in services[name]["command"]
        assert any(str(v).endswith(":/var/lib/runner") for v in services[name]["volumes"])  # its own RUNNER_HOME
    assert services["serve"]["environment"]["RUNNER_DATABASE_URL"].startswith("postgresql://")


def test_compose_config_is_valid() -> None:
    config = load_config(COMPOSE / "config.yaml", environ={})
    assert config.executor.type == "celery" and config.executor.broker_url().startswith("redis://")
