"""The ledger's ``runs.reason`` for a failed run is the error's own ``reason``; the words stay the
ones older runners derived from the class name, so rows read the same before and after."""

from __future__ import annotations

import importlib
import pkgutil

import runner
from runner.errors import ConfigError, ModelError, RunnerError, TemplateError, UsageError, failure_reason


def all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *all_subclasses(sub)]
    return out


def runner_errors() -> list[type]:
    for info in pkgutil.walk_packages(runner.__path__, "runner."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    return all_subclasses(RunnerError)


def test_every_runner_error_names_its_own_reason_and_it_is_the_stored_word():
    errors = runner_errors()
    assert {ConfigError, TemplateError, UsageError, ModelError} <= set(errors)
    for cls in errors:
        assert "reason" in vars(cls), f"{cls.__name__} does not name its reason"
        if cls is not ModelError:  # ModelError always carried its own reason
            assert cls.reason == cls.__name__.lower().replace("error", ""), cls


def test_an_instance_may_override_the_reason():
    assert failure_reason(ModelError("x", reason="credentials_exhausted")) == "credentials_exhausted"
    assert failure_reason(TemplateError("x")) == "template"
    assert failure_reason(ConfigError(["a", "b"])) == "config"
