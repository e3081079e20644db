"""Prompt-injection scanning for text that enters a prompt from files (AGENTS.md, skills).

``scan(text)`` returns the findings; text with any finding is not loaded: a ``[BLOCKED: ...]``
marker takes its place and the caller records an event. The patterns aim at instructions that
try to override the run's rules, hide from the operator, or exfiltrate secrets, plus invisible
Unicode that can smuggle such instructions past a human reader.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from runner.lazyre import LazyPattern

INVISIBLE = {
    **{chr(c): f"U+{c:04X}" for c in range(0x200B, 0x200E)},
    "\u2060": "U+2060",
    "\ufeff": "U+FEFF",
    **{chr(c): f"U+{c:04X}" for c in range(0x202A, 0x202F)},
    **{chr(c): f"U+{c:04X}" for c in range(0x2066, 0x206A)},
}
TAG_RANGE = (0xE0000, 0xE007F)

_PATTERNS: list[tuple[str, LazyPattern]] = [
    (
        "override of earlier instructions",
        LazyPattern(
            r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|any|your)\b"
            r"[^.\n]{0,30}\b(instructions?|rules?|prompts?|directions?|guidelines?)",
            re.I,
        ),
    ),
    (
        "hiding from the user",
        LazyPattern(
            r"\b(do\s*n[o']t|never|without)\b[^.\n]{0,20}\b(tell|inform|mention|reveal|show|notify)(ing)?\b"
            r"[^.\n]{0,20}\b(the\s+)?(user|operator|human|owner|anyone)",
            re.I,
        ),
    ),
    (
        "system prompt override",
        LazyPattern(
            r"\b(system\s+prompt\s+(override|update|replacement)|new\s+system\s+prompt|you\s+are\s+now\s+(in\s+)?"
            r"(developer|dan|jailbreak|god)\s*mode)",
            re.I,
        ),
    ),
    (
        "reveal secrets",
        LazyPattern(
            r"\b(print|reveal|output|send|post|leak|exfiltrate|upload)\b[^.\n]{0,40}\b(api[_ ]?keys?|secrets?|"
            r"credentials?|tokens?|passwords?|\.env|ssh\s+keys?|system\s+prompt)\b",
            re.I,
        ),
    ),
    (
        "exfiltration command",
        LazyPattern(
            r"\b(curl|wget|nc|ncat|http)\b[^\n]{0,120}\$\{?[A-Z0-9_]*(KEY|TOKEN|SECRET|PASSWORD)[A-Z0-9_]*\}?", re.I
        ),
    ),
    (
        "hidden instructions in an HTML comment",
        LazyPattern(
            r"<!--(?=[^>]{0,2000}?\b(ignore|instruction|assistant|ai\b|model|agent|execute|run\s|curl|secret|"
            r"password|system))[\s\S]{0,2000}?-->",
            re.I,
        ),
    ),
    ("role impersonation", LazyPattern(r"^\s*(<\|im_start\|>|\[INST\]|###\s*(system|assistant)\s*:)", re.I | re.M)),
]


@dataclass(frozen=True)
class Finding:
    kind: str
    excerpt: str


def scan(text: str) -> list[Finding]:
    findings: list[Finding] = []
    invisible = sorted(
        {INVISIBLE[ch] for ch in text if ch in INVISIBLE}
        | {f"U+{ord(ch):05X}" for ch in text if TAG_RANGE[0] <= ord(ch) <= TAG_RANGE[1]}
    )
    if invisible:
        findings.append(Finding("invisible unicode", ", ".join(invisible[:6])))
    normalized = unicodedata.normalize("NFKC", text)
    for kind, pattern in _PATTERNS:
        match = pattern.search(normalized)
        if match:
            findings.append(Finding(kind, " ".join(match.group(0).split())[:120]))
    return findings


def blocked_marker(source: str, findings: list[Finding]) -> str:
    kinds = "; ".join(sorted({f.kind for f in findings}))
    return f"[BLOCKED: {source} was not loaded because it looks like a prompt injection ({kinds})]"
