"""YAML loading: libyaml when available (the pure-Python parser is ~10x slower), duplicate keys
refused (the last one would silently win), files read with a size bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from runner.errors import ConfigError

MAX_FILE_BYTES = 1024 * 1024  # jobs.yaml, config.yaml, cassettes: far above any real file

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(ConstructorError):
    """A mapping names the same key twice; the message names the key and both lines."""


class _Loader(_Base):
    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicates(self, node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicates(loader: Any, node: yaml.MappingNode) -> None:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *base` keys are overridden on purpose
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:
            continue  # an unhashable key; the constructor reports it
        if first is not None:
            message = f"duplicate key {key!r} (lines {first} and {line}; the last would win)"
            raise DuplicateKeyError(None, None, message, key_node.start_mark)
        seen[key] = line


def load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


def read_text(path: Path, *, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``, read with a bound; ConfigError (exit 2) naming the file otherwise."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ConfigError(f"{path}: larger than the {limit // 1024} KiB limit for this file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None


def load_file(path: Path, *, limit: int = MAX_FILE_BYTES) -> Any:
    """Read (bounded) and parse a YAML file; ConfigError naming the file, line and problem."""
    text = read_text(path, limit=limit)
    try:
        return load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {yaml_problem(exc)}") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)
