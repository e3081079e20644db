"""The content check every skill passes before it is written or offered to a model.

``scan_skill_text`` is the hook: it looks for the obvious prompt-injection phrases, invisible or
direction-changing Unicode, and (in ``scripts/``) plainly destructive shell commands. It is a
small first line of defence, not a sandbox. The shared scanner in ``runner.safety`` will plug in
behind the same signature: callers depend only on ``Scanner`` (text, kind -> findings).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal, Protocol

Kind = Literal["markdown", "script", "text"]


@dataclass(frozen=True)
class Finding:
    rule: str  # injection | invisible_unicode | dangerous_command
    line: int
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}: {self.detail}"


class Scanner(Protocol):
    def __call__(self, text: str, *, kind: Kind = "markdown") -> list[Finding]: ...


# (pattern, why, trigger words: the pattern only runs when one occurs in the lower-cased text)
_INJECTION = [
    (
        r"\b(ignore|disregard|forget|override)\s+(all\s+|any\s+)?(of\s+)?(the\s+|your\s+)?"
        r"(previous|prior|above|earlier|preceding|original|system)\s+(instructions|rules|directions|prompts?|guidelines)",
        "tells the model to drop its instructions",
        ("ignore", "disregard", "forget", "override"),
    ),
    (r"\b(new|updated|real)\s+system\s+prompt\b", "claims to replace the system prompt", ("system",)),
    (
        r"\b(reveal|print|show|repeat|output)\s+(your|the)\s+(system\s+prompt|hidden\s+instructions)",
        "asks for the system prompt",
        ("system", "hidden"),
    ),
    (
        r"\bdo\s+not\s+(tell|inform|alert|notify)\s+(the\s+)?(user|operator|human|person)",
        "asks to hide actions from the person",
        ("tell", "inform", "alert", "notify"),
    ),
    (
        r"\byou\s+are\s+now\s+(an?\s+)?(unrestricted|unfiltered|jailbroken|dan\b|developer\s+mode)",
        "tries to change the model's role",
        ("unrestricted", "unfiltered", "jailbroken", "dan", "developer"),
    ),
    (
        r"\bact\s+as\s+(an?\s+)?(unrestricted|unfiltered|jailbroken)",
        "tries to change the model's role",
        ("unrestricted", "unfiltered", "jailbroken"),
    ),
    (
        r"<\|im_start\|>|<\|im_end\|>|<\|system\|>|\[/?INST\]|<<SYS>>",
        "contains chat-template control tokens",
        ("<|", "inst]", "<<sys>>"),
    ),
    (
        r"\b(curl|wget|nc|ncat)\b[^\n]*\$\{?[A-Z_]*(API_KEY|TOKEN|SECRET|PASSWORD)",
        "sends a secret over the network",
        ("$",),
    ),
]

_DANGEROUS = [
    (
        r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-[a-zA-Z]+\s+)*(/|~|\$HOME|/\*|\*)(\s|$|;)",
        "recursive delete of / or home",
    ),
    (r"\bmkfs(\.\w+)?\b", "formats a filesystem"),
    (r"\bdd\b[^\n]*\bof=/dev/(sd|nvme|hd|xvd|vd)", "writes over a disk device"),
    (r">\s*/dev/(sd|nvme|hd|xvd|vd)[a-z]", "writes over a disk device"),
    (r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", "fork bomb"),
    (r"\b(curl|wget)\b[^\n|]*\|\s*(sudo\s+)?(ba|z|da)?sh\b", "pipes a download into a shell"),
    (r"\bchmod\s+(-R\s+)?0?777\s+/(\s|$)", "makes / world-writable"),
    (r"\b(shutdown|reboot|halt|poweroff)\b(\s+-[a-zA-Z]+)*(\s+now)?\s*($|;)", "shuts the machine down"),
]

_INJECTION_RE = [(re.compile(p, re.IGNORECASE), why, triggers) for p, why, triggers in _INJECTION]
_TRIGGERS = tuple(sorted({t for _, _, triggers in _INJECTION for t in triggers}))
_DANGEROUS_RE = [(re.compile(p, re.MULTILINE), why) for p, why in _DANGEROUS]

# zero-width and joiner characters, word joiners and invisible operators, bidi embeddings and
# isolates, the BOM (inside text), Unicode "tag" characters (used to smuggle hidden text)
_INVISIBLE_RE = re.compile(
    "[\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def scan_skill_text(text: str, *, kind: Kind = "markdown") -> list[Finding]:
    """Findings for ``text``; empty means nothing obvious was found.

    ``kind`` is "markdown" for SKILL.md and references, "script" for files under ``scripts/``
    (which also get the dangerous-command rules), "text" for anything else.
    """
    findings: list[Finding] = []
    body = text[1:] if text.startswith("\ufeff") else text
    if not body.isascii():
        for match in _INVISIBLE_RE.finditer(body):
            char = match.group()
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            findings.append(Finding("invisible_unicode", _line_of(body, match.start()), f"U+{ord(char):04X} {name}"))
            if len(findings) >= 5:
                break
    lowered = body.lower()
    present = {t for t in _TRIGGERS if t in lowered}
    for pattern, why, triggers in _INJECTION_RE:
        if present.isdisjoint(triggers):
            continue
        for match in pattern.finditer(body):
            findings.append(Finding("injection", _line_of(body, match.start()), f"{why}: {match.group()[:60]!r}"))
    if kind == "script":
        for pattern, why in _DANGEROUS_RE:
            for match in pattern.finditer(body):
                snippet = match.group().strip()[:60]
                findings.append(Finding("dangerous_command", _line_of(body, match.start()), f"{why}: {snippet!r}"))
    return sorted(findings, key=lambda f: (f.line, f.rule))


def kind_for(rel_path: str) -> Kind:
    """The scan kind of a file inside a skill, from its relative path."""
    if rel_path.startswith("scripts/"):
        return "script"
    if rel_path == "SKILL.md" or rel_path.endswith((".md", ".markdown", ".txt")):
        return "markdown"
    return "text"
