"""runner: a scheduled batch automation runner for LLM agents.

Importing the package turns pydantic's plugins off for the process (``_without_pydantic_plugins``).
"""

import sys
import types

__version__ = "0.2.0"

_PYDANTIC_LOADER = "pydantic.plugin._loader"


def _no_plugins() -> tuple[()]:
    return ()


def _without_pydantic_plugins() -> None:
    """pydantic looks for plugins (entry points of the ``pydantic`` group) the first time it builds
    a validator, and a plugin sees every value validated: in runner that is config.yaml, literal API
    keys included. runner loads none. Its loader module is replaced before pydantic imports it by
    one that finds none: what ``PYDANTIC_DISABLE_PLUGINS=__all__`` does, without a scan of every
    installed package's metadata (``importlib.metadata`` with email, zipfile and csv: ~15 ms of a
    start) and without a variable that the commands a run starts would inherit. A process that
    built a pydantic validator before importing runner keeps what it has."""
    if _PYDANTIC_LOADER in sys.modules:
        return
    loader = types.ModuleType(_PYDANTIC_LOADER, "runner: no pydantic plugins (see runner/__init__.py)")
    setattr(loader, "get_plugins", _no_plugins)  # noqa: B010 - a module object built here
    sys.modules[_PYDANTIC_LOADER] = loader


_without_pydantic_plugins()
