"""The ledger's ``runs.reason`` for a failed run is the error's own ``reason``; the words stay the
ones older runners derived from the class name, so rows read the same before and after."""

from __future__ import annotations

import importlib
import pkgutil

import runner
from runner.errors import (
    ConfigError,
    ModelError,
    RunnerError,
    StoreError,
    StoreStateError,
    TemplateError,
    UsageError,
    failure_reason,
)

#: reasons that are not the word derived from the class name, each with why no stored row changes
#: meaning: ModelError always carried its own; the store's errors were raised only when the store
#: could not be opened (so no row ever held ``store``) until issue 14 named the run reason ``store_error``
NAMED = {
    "ModelError": None,
    "StoreError": "store_error",
    "StoreFault": "store_error",
    "StoreUnavailable": "store_error",  # issue 17: a PostgreSQL server that cannot answer now
    "StoreDamaged": "store_error",  # issue 37: a corrupt page, split from StoreFault (not transient)
    "StoreStateError": "store_state",
    "IllegalTransition": "store_error",  # issue 31: a ledger write the transition table forbids is a store fault
    "ToolsUnavailable": "tools_unavailable",  # issue 32: a new reason, no row held it before
}


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
        if cls.__name__ in NAMED:
            assert NAMED[cls.__name__] in (None, cls.reason), cls
        else:
            assert cls.reason == cls.__name__.lower().replace("error", ""), cls


def test_store_faults_are_recorded_as_store_error():
    from runner.store import StoreFault, StoreUnavailable

    assert failure_reason(StoreError("x")) == failure_reason(StoreFault("x")) == "store_error"
    assert failure_reason(StoreUnavailable("x")) == "store_error"
    assert StoreStateError("x").exit_code == 2 and StoreFault("x").exit_code == 1


def test_an_instance_may_override_the_reason():
    assert failure_reason(ModelError("x", reason="credentials_exhausted")) == "credentials_exhausted"
    assert failure_reason(TemplateError("x")) == "template"
    assert failure_reason(ConfigError(["a", "b"])) == "config"
