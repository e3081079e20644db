"""A run's output as Markdown, sanitised: raw HTML in the text is escaped (never passed through),
links and images keep only http(s), mailto and relative targets, and secrets are masked first."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from markupsafe import Markup

SAFE_SCHEMES = ("http:", "https:", "mailto:")


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
    md.validateLink = _safe_link  # type: ignore[method-assign]
    return md


def _safe_link(url: str) -> bool:
    text = url.strip().lower()
    if ":" not in text.split("/", 1)[0]:
        return True  # relative
    return text.startswith(SAFE_SCHEMES)


def render(text: str) -> Markup:
    """HTML for ``text``; ``<script>`` and every other tag in it come out as visible text."""
    return Markup(_parser().render(text))  # noqa: S704 - html=False: the parser escapes raw HTML
