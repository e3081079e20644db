"""YAML loading: libyaml when available (the pure-Python parser is ~10x slower), duplicate keys
refused (the last one would silently win), files read with a size bound, alias expansion bounded
(a few hundred bytes of nested aliases stand for millions of nodes: every later step that walks
the data, validation, the prompt, the transcript, pays for each one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from runner.errors import ConfigError

MAX_FILE_BYTES = 1024 * 1024  # jobs.yaml, config.yaml, cassettes: far above any real file
# Nodes a document with aliases may stand for once each alias is replaced by a copy of its anchor.
# A jobs.yaml whose 100 jobs each merge a 50-key `<<: *defaults` stands for ~10,000.
MAX_EXPANDED_NODES = 50_000

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(ConstructorError):
    """A mapping names the same key twice; the message names the key and both lines."""


class AliasBombError(ConstructorError):
    """The document's aliases expand it beyond MAX_EXPANDED_NODES nodes, or an alias holds itself."""


class BoundedLoader(_Base):
    """The safe loader (libyaml's when present) refusing documents whose aliases expand past
    MAX_EXPANDED_NODES (AliasBombError, a YAMLError)."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        return self.construct_document(node)


class _Loader(BoundedLoader):
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


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def has_aliases(root: yaml.Node) -> bool:
    """Whether some node is reached twice: an alias is its anchor's node object itself."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        stack.extend(_children(node))
    return False


def expanded_size(root: yaml.Node, *, limit: int | None = None) -> int:
    """Nodes under ``root`` (itself included) with every alias replaced by a copy of its anchor.

    Each distinct node is sized once, so this costs the nodes the text holds, not the expansion.
    AliasBombError at the first node (innermost) whose expansion passes ``limit``, or when an
    alias holds its own anchor (an endless expansion)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # being sized: the ancestors of the node in hand
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = _sized(node, 1 + sum(sizes[id(child)] for child in _children(node)), limit)
        elif key in open_nodes:
            raise AliasBombError(None, None, "an alias refers to its own anchor (endless expansion)", node.start_mark)
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))
    return sizes[id(root)]


def _sized(node: yaml.Node, size: int, limit: int | None) -> int:
    if limit is not None and size > limit:
        message = f"aliases expand this to more than {limit:,} nodes (the most a file may stand for)"
        raise AliasBombError(None, None, message, node.start_mark)
    return size


def check_expansion(root: yaml.Node, *, limit: int = MAX_EXPANDED_NODES) -> None:
    """AliasBombError when aliases make ``root`` stand for more than ``limit`` nodes. A document
    without aliases is bounded by its file size alone (it stands for exactly the nodes it holds)."""
    if has_aliases(root):
        expanded_size(root, limit=limit)


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
