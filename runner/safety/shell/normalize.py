"""Text-level normalisation applied before a command is tokenised.

An agent (or text it read) can hide a command from a naive matcher with bytes the shell
or the terminal treats differently from how they look: ANSI colour codes, NUL bytes,
fullwidth letters (``ｒｍ``), zero-width characters, CRLF line ends, and backslash-newline
line continuations. These are folded here so the tokenizer sees one canonical spelling.
Where folding changes what bash would do (a zero-width space is an ordinary character to
bash), it only ever makes a command look *more* like a real command, so the classifier
errs towards flagging, never towards missing.

Word-level tricks (``r\\m``, ``r''m``, ``$IFS``) are handled by the tokenizer in
``split.py``, because they depend on quoting context.
"""

from __future__ import annotations

import re
import unicodedata

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks) and the short
# two-byte escapes; the 8-bit CSI introducer (0x9b) too.
_ANSI = re.compile(
    r"""
    \x1b\[ [0-?]* [ -/]* [@-~]          # CSI ... final byte
  | \x1b\] [^\x07\x1b]* (?:\x07|\x1b\\)? # OSC ... BEL or ST
  | \x1b [@-Z\\-_]                      # two-byte escapes
  | \x9b [0-?]* [ -/]* [@-~]            # 8-bit CSI
    """,
    re.VERBOSE,
)

# Control characters other than tab and newline, plus DEL and the C1 range.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

_CONTINUATION = re.compile(r"\\\n")


def _strip_format_chars(text: str) -> str:
    """Remove zero-width and other invisible "format" characters (category Cf).

    Only called when the text is not pure ASCII, so the common case costs nothing.
    """
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def normalize(text: str) -> str:
    """Return ``text`` folded to the canonical form the tokenizer expects.

    Order matters: escapes are removed before NFKC (so a fullwidth ESC cannot survive),
    CRLF becomes LF before continuations are joined, and stray carriage returns are
    dropped rather than turned into separators (which would invent commands).
    """
    if "\x1b" in text or "\x9b" in text:
        text = _ANSI.sub("", text)
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
        text = _strip_format_chars(text)
    if not text.isprintable():  # only tab, newline and control characters get here
        text = _CONTROL.sub("", text.replace("\r\n", "\n"))
    if "\\\n" in text:
        text = _CONTINUATION.sub("", text)
    return text


_ANSI_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}

_ANSI_C_NUMERIC = re.compile(r"\\(?:x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|([0-7]{1,3})|c(.))")


def decode_ansi_c(body: str) -> str:
    """Decode the body of a bash ``$'...'`` string (``$'\\x72m'`` is ``rm``).

    Escapes bash does not know are kept verbatim, as bash does.
    """
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        j = body.find("\\", i)
        if j < 0 or j + 1 >= n:
            out.append(body[i:])
            break
        out.append(body[i:j])
        m = _ANSI_C_NUMERIC.match(body, j)
        if m:
            out.append(_numeric_escape(m))
            i = m.end()
            continue
        ch = body[j + 1]
        out.append(_ANSI_C_ESCAPES.get(ch, "\\" + ch))
        i = j + 2
    return "".join(out)


def _numeric_escape(m: re.Match[str]) -> str:
    hex2, hex4, hex8, octal, ctrl = m.groups()
    if ctrl is not None:
        return chr(ord(ctrl) & 0x1F)
    if octal is not None:
        code = int(octal, 8) & 0xFF
    else:
        code = int(hex2 or hex4 or hex8, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return ""
    return chr(code)
