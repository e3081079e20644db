"""(issue 20) A prompt without template syntax skips Jinja2 and renders exactly as Jinja2 would."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.errors import TemplateError
from runner.run import prompt


@given(st.text(alphabet=st.characters(blacklist_characters="{\r"), max_size=200))
def test_plain_text_renders_as_jinja2_renders_it(text: str) -> None:
    assert prompt.plain_text(text)
    env = prompt.template_env(Path("."))
    assert prompt.render(text, {}, name="t", base=Path(".")) == env.from_string(text).render() == text


@pytest.mark.parametrize("text", ["{{ now }}", "{% if x %}a{% endif %}", "{# note #}", "a\r\nb", "{"])
def test_anything_that_could_be_template_syntax_goes_through_jinja2(text: str) -> None:
    assert not prompt.plain_text(text)


def test_the_cap_still_holds_for_plain_text() -> None:
    with pytest.raises(TemplateError, match="cap"):
        prompt.render("x" * 101, {}, name="t", base=Path("."), cap=100)
