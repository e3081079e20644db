"""The HTML-to-text parser of ``web_fetch`` (``runner.tools.web``), in a module of its own so
``html.parser`` loads with the first page fetched, not with every run that lists the tools."""

from __future__ import annotations

from html.parser import HTMLParser


class Text(HTMLParser):
    def __init__(self, skip_tags: set[str], block_tags: set[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_tags, self.block_tags = skip_tags, block_tags
        self.parts: list[str] = []
        self.skip = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self.skip_tags:
            self.skip += 1
        elif tag in self.block_tags:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self.skip_tags and self.skip:
            self.skip -= 1
        elif tag in self.block_tags:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if not self.skip:
            self.parts.append(data)
