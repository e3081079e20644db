"""The content checks for skills, behind one signature (``Scanner``: text, kind -> findings).

- ``scan_skill_text``: the full check, run before anything is written (``skill_manage``) and
  before a skill's text enters a prompt (``skill_view``, preloading): invisible or
  direction-changing Unicode (with line numbers), the shared prompt-injection scanner
  (``runner.safety.injection``, the one AGENTS.md goes through) plus the phrases below, and for shell
  scripts under ``scripts/`` the shared command classifier (``runner.safety``): a script may not
  hold a command the default ``deny`` policy would block, since commands inside a script file
  are out of reach of the per-command approval gate.
- ``quick_scan``: the same Unicode check and phrases, without the shared scanner (about 30 us
  instead of about 700 us per SKILL.md), used when loading every skill for the index.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal, Protocol

from runner.safety.injection import INVISIBLE_CLASS, scan

Kind = Literal["markdown", "script", "text"]


@dataclass(frozen=True)
class SkillFinding:
    rule: str  # injection | invisible_unicode | dangerous_command
    line: int  # 1-based; 0 when the finding has no single line
    detail: str  # why, in a few words
    excerpt: str = ""  # the offending text (left out where it would reach a model from someone else)

    def __str__(self) -> str:
        return self.brief() + (f": {self.excerpt!r}" if self.excerpt else "")

    def brief(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.rule}: {self.detail}"


class Scanner(Protocol):
    def __call__(self, text: str, *, kind: Kind = "markdown") -> list[SkillFinding]: ...


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

_INJECTION_RE = [(re.compile(p, re.IGNORECASE), why, triggers) for p, why, triggers in _INJECTION]
_TRIGGERS = tuple(sorted({t for _, _, triggers in _INJECTION for t in triggers}))

# the shared scanner's hidden characters (zero-width and joiners, direction marks and overrides,
# invisible operators, the BOM inside text, Unicode "tag" characters, soft hyphens, fillers, the
# variation selectors supplement), plus the line and paragraph separators
_INVISIBLE_RE = re.compile(f"[\u2028\u2029{INVISIBLE_CLASS}]")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def quick_scan(text: str, *, kind: Kind = "markdown") -> list[SkillFinding]:
    """Invisible Unicode and the obvious injection phrases; cheap enough for every load."""
    findings: list[SkillFinding] = []
    body = text[1:] if text.startswith("\ufeff") else text
    if not body.isascii():
        for match in _INVISIBLE_RE.finditer(body):
            char = match.group()
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            findings.append(
                SkillFinding("invisible_unicode", _line_of(body, match.start()), f"U+{ord(char):04X} {name}")
            )
            if len(findings) >= 5:
                break
    lowered = body.lower()
    present = {t for t in _TRIGGERS if t in lowered}
    for pattern, why, triggers in _INJECTION_RE:
        if present.isdisjoint(triggers):
            continue
        for match in pattern.finditer(body):
            findings.append(SkillFinding("injection", _line_of(body, match.start()), why, match.group()[:60]))
    return sorted(findings, key=lambda f: (f.line, f.rule))


def scan_skill_text(text: str, *, kind: Kind = "markdown") -> list[SkillFinding]:
    """Everything ``quick_scan`` finds, plus the shared injection scanner and (for shell scripts)
    the shared command classifier. Empty means nothing was found."""

    findings = quick_scan(text, kind=kind)
    flagged_lines = {f.line for f in findings if f.rule == "injection"}
    has_invisible = any(f.rule == "invisible_unicode" for f in findings)
    for shared in scan(text):
        if shared.kind == "invisible unicode" and has_invisible:
            continue  # quick_scan reports these with their lines
        line = _line_of(text, text.find(shared.excerpt[:20])) if shared.excerpt[:20] in text else 0
        if line and line in flagged_lines:
            continue  # the same phrase, already reported
        findings.append(SkillFinding("injection", line, shared.kind, shared.excerpt[:60]))
    if kind == "script" and is_shell(text):
        findings.extend(_classify_script(text))
    return sorted(findings, key=lambda f: (f.line, f.rule))


def is_shell(text: str) -> bool:
    """A shell script: a ``sh``/``bash``/``zsh``/``dash`` shebang, or no shebang at all."""
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    if not first.startswith("#!"):
        return True
    interpreter = first[2:].strip().split()
    names = [p.rsplit("/", 1)[-1] for p in interpreter[:2]]
    return any(n in ("sh", "bash", "zsh", "dash", "ksh") for n in names)


def _classify_script(text: str) -> list[SkillFinding]:
    from runner.safety.shell import classify

    verdict = classify(text)
    if verdict.level == "safe":
        return []
    out = []
    for flagged in verdict.flagged or ("",):
        first_word = flagged.split(" ", 1)[0]
        pos = text.find(first_word) if first_word else -1
        line = _line_of(text, pos) if pos >= 0 else 0
        reasons = "; ".join(verdict.reasons)
        out.append(SkillFinding("dangerous_command", line, f"{verdict.level}: {reasons}", flagged[:80]))
    return out


def kind_for(rel_path: str) -> Kind:
    """The scan kind of a file inside a skill, from its relative path."""
    if rel_path.startswith("scripts/"):
        return "script"
    if rel_path == "SKILL.md" or rel_path.endswith((".md", ".markdown", ".txt")):
        return "markdown"
    return "text"
