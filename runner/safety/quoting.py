"""Text a run wrote, shown to a later run as data: inside one tagged block, escaped so that nothing
in it can open or close a tag, and with hidden characters made visible.

``data_block("memory", {"scope": "job:x"}, LABEL, body)`` gives::

    <memory scope="job:x">
    LABEL
    ...body, escaped...
    </memory>

Escaping is XML's (``&``, ``<``, ``>`` as entities), so a note holding ``</memory>`` reads as
``&lt;/memory&gt;`` and the block ends only where runner ends it. Invisible and direction-changing
characters (``runner.safety.injection.INVISIBLE_CLASS``) become ``[U+200B]`` marks: what the model
reads is what a person reading the prompt sees.

``json_block`` holds a value as one JSON literal instead (the smart-approval judge's command): the
text decodes back exactly as it was, and nothing in it can end the block (below).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from runner.safety.injection import INVISIBLE_CLASS

_HIDDEN = re.compile(f"[{INVISIBLE_CLASS}]")


def visible(text: str) -> str:
    """``text`` with each hidden character as a ``[U+200B]`` mark (for the model and for people)."""
    if text.isascii():
        return text
    return _HIDDEN.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def escape(text: str) -> str:
    """``text`` safe inside a tagged block: entities for ``& < >``, marks for hidden characters."""
    if "&" in text or "<" in text or ">" in text:
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return visible(text)


def attribute(value: str) -> str:
    """An attribute value: escaped, quotes as entities, on one line."""
    return " ".join(escape(value).replace('"', "&quot;").split())


def data_block(tag: str, attrs: Mapping[str, str], label: str, body: str) -> str:
    """``<tag a="v">``, the label line, the escaped body, ``</tag>``. ``label`` is runner's own
    text (not escaped); ``body`` is the data."""
    shown = "".join(f' {name}="{attribute(value)}"' for name, value in attrs.items())
    return f"<{tag}{shown}>\n{label}\n{escape(body).rstrip()}\n</{tag}>"


_TAG_CHARS = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x7F: "\\u007f"}


def json_literal(value: object) -> str:
    """``value`` as JSON on one line with only printable ASCII: every other character (newlines,
    hidden and non-ASCII ones) and ``< > &`` are ``\\uXXXX`` escapes, so the literal holds no tag
    character and decodes (``json.loads``) to exactly ``value``."""
    return json.dumps(value, ensure_ascii=True).translate(_TAG_CHARS)


def json_block(tag: str, value: object) -> str:
    """``<tag>``, ``value`` as a ``json_literal``, ``</tag>``: the block ends only where runner ends it."""
    return f"<{tag}>\n{json_literal(value)}\n</{tag}>"
