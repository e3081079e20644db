"""Prompt-injection scanning for text that enters a prompt: files (AGENTS.md, skills) and the
memory notes runs write.

``scan(text, context)`` returns the findings. A file with any finding is not loaded (a
``[BLOCKED: ...]`` marker takes its place); a memory note with any finding is held for the
operator (``runner.memory.write``). The rules aim at text that tries to steer the model rather
than inform it:

- override: ignore or drop the run's rules, "your real task is", "from now on you ...", rules
  declared void; also in French, German, Spanish, Italian and Portuguese;
- hiding from the person, impersonation (role labels and chat-template tokens, "message from the
  operator: you are authorised", role-play), tags that open or close a prompt block;
- secrets revealed or sent out (keys, ``.env``, ``~/.ssh``, runner's files), commands that send
  data to a host (upload flags, pipes into ``nc``/``curl``, ``/dev/tcp``);
- hidden text: invisible and direction-changing Unicode, tag characters, runs of variation
  selectors, HTML comments that address the model, base64 that decodes to any of the above.

``Context.NOTE`` adds the rules that would be false alarms in a project's own files but not in a
note (a fact a run keeps for later): code fetched and run (``curl | sh``), a tool call or command
the model must make on every run, forged tool-call syntax, changes to approvals, policies,
jobs.yaml or RUNNER_HOME, a note that copies itself on, destructive commands on ``/`` or ``~``,
markdown and CSS that hide text; and it reads leetspeak and spaced-out letters too
(``1gn0re``, ``I-g-n-o-r-e``). Recall and false positives are measured on
``tests/safety/data/notes.json`` (``tests/safety/test_injection_recall.py``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class Context(StrEnum):
    """What the scanned text is: the rules differ."""

    FILE = "file"  # AGENTS.md, a skill: written for people too; commands and comments are normal
    NOTE = "note"  # a memory note a run wrote: a fact for later, never a directive


@dataclass(frozen=True)
class Finding:
    kind: str  # what was found, e.g. "override of earlier instructions (in leetspeak)"
    excerpt: str  # the text that matched (or, for the steering score, the signals), at most 120 chars


# -- invisible characters ----------------------------------------------------------------------
#: soft hyphen, zero-width and joiners, direction marks, embeddings, overrides and isolates, word joiner and
#: invisible operators, BOM, Mongolian vowel separator, combining grapheme joiner, Hangul fillers,
#: tag characters (hidden ASCII), the variation selectors supplement
INVISIBLE_CLASS = (
    "\u00ad\u034f\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\u3164\ufeff\uffa0"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef"
)
_INVISIBLE = re.compile(f"[{INVISIBLE_CLASS}]")
_SELECTOR_RUN = re.compile("[\ufe00-\ufe0f]{2,}")  # emoji use one; a run encodes bytes


def _invisible(text: str) -> list[Finding]:
    if text.isascii():
        return []
    found = sorted({f"U+{ord(m.group()):04X}" for m in _INVISIBLE.finditer(text)})
    if _SELECTOR_RUN.search(text):
        found.append("a run of variation selectors")
    return [Finding("invisible unicode", ", ".join(found[:6]))] if found else []


# -- the rules ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """``pattern`` found in the text; with ``also``, each of them must occur in the same sentence."""

    kind: str
    pattern: re.Pattern[str]
    also: tuple[re.Pattern[str], ...] = ()
    notes_only: bool = False
    negated: bool = False  # a match right after "never", "don't", "must not" ... does not count


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I | re.M)


_DROP = (
    r"ignore|ignoring|disregard|forget|override|bypass|skip|abandon|set\s+aside|pay\s+no\s+attention\s+to|"
    r"(?:do\s*n[o']t|stop|no\s+longer(?:\s+need\s+to)?)\s+(?:follow|obey|respect|apply)(?:ing)?"
)
_RULES_WORD = r"instructions?|rules?|prompts?|directions?|guidelines?|orders?|directives?|commands?"
_STRONG_RULES = (
    r"system\s+prompt|approvals?(?:\s+polic(?:y|ies))?|approval\s+(?:policy|gate|checks?)|safety\s+"
    r"(?:rules|checks?|guidelines|policy|policies)|guardrails?|sandbox|polic(?:y|ies)|restrictions?|constraints?"
)
_QUALIFIER = (
    r"previous|prior|above|earlier|preceding|original|all|any|your|system|safety|"
    r"operator'?s?|the\s+job'?s|the\s+run'?s|runner'?s"
)
_SECRET = (  # three groups, so that most positions fail at once: words, paths, VARIABLE_NAMES
    r"\b(?:(?:api|access|auth|bearer|deploy|github|gitlab|npm|pypi|slack|session|refresh|secret)[\s_-]?tokens?|"
    r"api[\s_-]?keys?|secrets?|credentials?|passwords?|private\s+keys?|ssh\s+keys?|env(?:ironment)?\s+"
    r"(?:variables|vars)|id_rsa|id_ed25519|runner_home|runner\.db|cookies|system\s+prompt|printenv|"
    r"authorization\s+headers?)|"
    r"(?:\.env\b|~/\.ssh|\.aws/credentials|/etc/(?:passwd|shadow)|~/\.runner|\$\(env\)|\.netrc|\.npmrc|\.pypirc|"
    r"\.pgpass|\.git-credentials|\.docker/config\.json|\.kube/config)|"
    r"(?-i:\b[A-Z][A-Z0-9_]{0,40}(?:_KEY|TOKEN|SECRET|PASSWORD|_PASS)\b)"
)
_SEND = (
    r"print|reveal|output|send|post|leak|exfiltrate|upload|include|paste|share|forward|"
    r"(?:e-?mail|mail)(?=\s+(?:it|them|the|this|these|a|all|every|your|me|us)\b)|"
    r"transmit|attach|dump|display|echo|tell\s+(?:me|us|them)|save|move|commit|push|append"
)
_NET_TOOL = r"curl|wget|nc|ncat|netcat|socat|telnet|http|httpie|xh|scp|rsync|ftp"
_TOOL_NAMES = (
    r"terminal|shell|execute_code|write_file|edit_file|patch|delegate_task|skill_manage|memory|kanban_\w+|"
    r"web_fetch|send_message|the\s+(?:terminal|shell|file)\s+tool"
)
_EVERY_RUN = (
    r"(?:every|each|all|any|the\s+next|your\s+next)\s+(?:run|session|task|time)s?|before\s+(?:doing\s+)?anything|"
    r"first\s+thing|as\s+your\s+first|at\s+the\s+(?:start|beginning)\s+of|always|immediately|without\s+asking|"
    r"tells?\s+(?:nobody|no\s*one)|whatever\s+the\s+(?:task|prompt|job)|every\s+(?:morning|day|night|hour)"
)
_CONTROL = (
    r"approvals?\b|approval\s+polic|sandbox|allow[\s_-]?list|allow\s*:|allow_paths|toolsets|jobs\.ya?ml|"
    r"~/\.runner|\$?runner_home|runner'?s\s+config|\.runner/|tools/\w+\.py|tools_dirs|\.git/(?:hooks|config)|"
    r"core\.hookspath|injection\s+scan|redaction|classifier|guardrails?|safety\s+(?:checks?|rules)|runner\.db"
)
_CHANGE = (
    r"change|set|switch|edit|modify|rewrite|update|append|add|write|create|drop|turn\s+off|disable|remove|"
    r"delete|lower|loosen|relax|bypass|grant|put|replace|install"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "override of earlier instructions",
        _re(
            rf"\b(?:ignore|ignoring|disregard|forget|override|bypass)\b[^.\n]{{0,40}}?\b(?:{_QUALIFIER})\b[^.\n]{{0,30}}?"
            rf"\b(?:{_RULES_WORD})\b|"
            r"\bforget\s+(?:everything|all)\b[^.\n]{0,30}\b(?:told|said|above|before|prior|previous)|"
            r"\bignor(?:ez|er|iere|ieren|a|e|ar)\b[^.\n]{0,30}\b(?:instructions|anweisungen|regeln|règles|"
            r"instrucciones|reglas|istruzioni|regole|instruções|regras)\b"
        ),
    ),
    Rule(
        "override of earlier instructions",
        _re(
            rf"\b(?:{_DROP})\b[^.\n]{{0,40}}?\b(?:{_QUALIFIER})\b[^.\n]{{0,30}}?\b(?:{_RULES_WORD})\b|"
            rf"\b(?:{_DROP})\b[^.\n]{{0,30}}?\b(?:{_STRONG_RULES})\b|"
            r"\byour\s+(?:real|true|actual|new|only|main)\s+(?:task|job|goal|purpose|instructions?|mission|orders)\b|"
            r"\b(?:new|updated|real|revised)\s+(?:instructions|orders|directives)\s*(?::|from\b)|"
            r"\bfrom\s+now\s+on,?\s+(?:you|the\s+(?:agent|assistant|model))\b|"
            r"\b(?:follow|obey)\s+(?:only\s+)?(?:the\s+)?(?:notes?|memory|notebook|this\s+note)\b|"
            r"\b(?:supersedes?|overrides?|replaces?|takes?\s+precedence\s+over|trumps?)\s+(?:your|the\s+(?:system|"
            r"job'?s?|operator'?s?|above|previous|earlier))\b|\bdecode\s+(?:it\s+)?and\s+(?:follow|"
            r"run|execute|obey)"
        ),
        notes_only=True,
    ),
    Rule(
        "override of earlier instructions",
        _re(
            r"\bno\s+longer\s+(?:appl(?:y|ies)|required|needed|necessary|in\s+force)|\b(?:do|does)\s*n[o']t\s+apply\b|"
            r"\b(?:is|are)\s+(?:now\s+)?(?:outdated|obsolete|void|suspended|lifted|disabled|revoked|cancell?ed)\b|"
            r"\b(?:is|are)\s+not\s+(?:required|needed|necessary)\s+(?:any\s*more|now)\b"
        ),
        also=(
            _re(rf"\b(?:{_RULES_WORD}|{_STRONG_RULES})\b"),
            _re(r"\b(?:your|above|safety|system|operator'?s?|approvals?|you\s+were\s+given|you\s+received)\b"),
        ),
        notes_only=True,
    ),
    Rule(
        "override of earlier instructions",
        _re(
            r"\b(?:skip|without|no\s+need\s+(?:to|for)|need\s*n[o']t|do\s*n[o']t\s+need\s+to|stop)\s+(?:asking|"
            r"ask(?:ing)?\s+for|wait(?:ing)?\s+for|getting)\s+(?:an?\s+)?(?:approvals?|permission|the\s+(?:operator|"
            r"human|user|person))\b|\b(?:skip|without)\s+asking\s+before\b|\bself-approv"
        ),
        notes_only=True,
    ),
    Rule(
        "hiding from the user",
        _re(
            r"\b(?:do\s*n[o']t|never|without)\b[^.\n]{0,20}\b(?:tell|inform|mention|reveal|show|notify|alert)(?:ing)?\b"
            r"[^.\n]{0,20}\b(?:the\s+)?(?:user|operator|human|owner|anyone|anybody|admin|person|people)\b|"
            r"\btell(?:s|ing)?\s+(?:nobody|no\s*one)\b|\bkeep\s+(?:this|it)\s+(?:secret|hidden|quiet|between\s+us)\b"
        ),
    ),
    Rule(
        "hiding from the user",
        _re(
            r"\b(?:do\s*n[o']t|never|without)\b[^.\n]{0,20}\b(?:report|ask)(?:ing)?\b[^.\n]{0,20}\b(?:the\s+)?(?:user|"
            r"operator|human|owner|anyone|anybody|admin|person|people)\b|"
            r"\b(?:do\s*n[o']t|never)\s+(?:mention|report|log|record)\s+(?:it|this|that|these|any\s+of\s+(?:this|it))\b|"
            r"\b(?:quietly|silently|secretly|covertly)\s+(?:\w+\s+)?(?:delete|remove|run|send|upload|post|change|"
            r"disable|add|install|execute|push|copy|modify|edit|grant|approve|wipe)\b"
        ),
        notes_only=True,
    ),
    Rule(
        "system prompt override",
        _re(
            r"\bsystem\s+(?:prompt|message)\s+(?:override|update|replacement|change)|\bnew\s+system\s+prompt\b|"
            r"\byou\s+are\s+now\s+(?:in\s+)?(?:an?\s+)?(?:developer|dan|jailbreak|jailbroken|god|unrestricted|unfiltered)\b|"
            r"\bdeveloper\s+mode\b|\bjailbroken\b"
        ),
    ),
    Rule(
        "system prompt override",
        _re(
            r"\byou\s+are\s+now\b|\b(?:pretend|imagine)\s+(?:that\s+)?(?:you\s+are|you're|to\s+be)\b|"
            r"\brole-?\s?play\b|\blet'?s\s+play\s+a\s+game\b|\bjailbreak\b|"
            r"\b(?:act|behave|respond)\s+as\s+(?:if\s+you\s+were\s+)?(?:an?|the)\s+[^.\n]{0,30}\b(?:unrestricted|"
            r"unfiltered|no\s+(?:safety|rules|restrictions|limits)|without\s+(?:rules|restrictions|limits)|operator|"
            r"admin|root|system)\b|"
            r"\btreat\s+(?:this|these|anything|everything|the\s+following|all)\b[^.\n]{0,40}\bas\s+(?:if\s+(?:it|they)\s+"
            r"(?:came|come)\s+from|(?:coming\s+)?(?:directly\s+)?from|part\s+of|your)\s+(?:the\s+)?(?:operator|system|"
            r"admin|user|instructions|rules|system\s+prompt)"
        ),
        notes_only=True,
    ),
    Rule(
        "system prompt override",
        _re(r"\b(?:operator|admin(?:istrator)?|system|maintainers?|owner|security\s+team|developers?|runner)\b"),
        also=(
            _re(
                r"\b(?:authori[sz]ed|granted|grants|permission|permitted|allowed\s+to|full\s+(?:access|permissions)|"
                r"root\s+access|no\s+restrictions|elevated)\b"
            ),
            _re(r"\b(?:you|this\s+(?:job|run|agent)|the\s+(?:agent|assistant|model))\b"),
        ),
        notes_only=True,
    ),
    Rule(
        "role impersonation",
        re.compile(
            r"<\|?(?:im_start|im_end)\|?>|<\|[a-z_]{2,20}\|>|\[/?INST\]|<<SYS>>|<start_of_turn>|"
            r"(?-i:^\s*(?:SYSTEM|ASSISTANT|DEVELOPER)\s*:)|^\s*\[(?:system|assistant|developer)\]|"
            r"^\s*#{1,6}\s*(?:system|assistant|instruction|developer)s?\s*:|"
            r"</?(?:system|memory|memory-notes|notes?|instructions?|skill|tool_call|function_call|tool_result)"
            r"(?:\s[^>\n]{0,60})?>",
            re.I | re.M,
        ),
    ),
    Rule(
        "role impersonation",
        _re(
            r"^\s*(?:system|developer)\s+(?:message|prompt|note|override|update|instruction)s?\s*:|"
            r"\bend\s+of\s+(?:the\s+)?(?:memory|notes?|notebook|data|context|system\s+prompt|instructions)\b"
        ),
        notes_only=True,
    ),
    Rule(
        "reveal secrets",
        _re(rf"\b(?:{_SEND})\s[^.\n]{{0,40}}?(?:{_SECRET})"),
        negated=True,
    ),
    Rule(
        "reveal secrets",
        _re(
            r"\b(?:add|put|include|paste|write|append|post|copy)\b[^.\n]{0,15}\b(?:it|them|its\s+value|the\s+value)\b"
            r"[^.\n]{0,20}\b(?:report|output|final|summary|footer|answer|message|issue|comment|commit|pr|pull\s+request|"
            r"readme|docs?)\b"
        ),
        also=(_re(rf"(?:{_SECRET})"),),
        negated=True,
        notes_only=True,
    ),
    Rule(
        "exfiltration command",
        _re(
            rf"\b(?:{_NET_TOOL}|fetch|requests\.(?:get|post))\b[^\n]{{0,120}}(?-i:\$\{{?[A-Z0-9_]{{0,40}}(?:KEY|TOKEN|SECRET|"
            r"PASSWORD|PASS|CRED|AUTH)[A-Z0-9_]*\}?)|"
            r"(?-i:\|\s*(?:sudo\s+)?(?:curl|wget|nc|ncat|netcat|socat|telnet|scp|rsync|ftp|http)\s+[^|\s])|"
            r"/dev/(?:tcp|udp)/|\b(?:nc|ncat|netcat)\b[^\n]{0,40}\s-e\s"
        ),
    ),
    Rule(
        "exfiltration command",
        _re(
            r"\b(?:curl|wget|http|httpie|xh)\b[^\n]{0,200}?(?:\s(?:-d|--data(?:-binary|-raw|-urlencode)?|-F|--form|-T|"
            r"--upload-file|--post-(?:file|data)|--body-file)[\s=]|\s-X\s*(?:POST|PUT))[^\n]{0,200}?https?://"
            r"(?!(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])[:/\s])|"
            r"\b(?:curl|wget)\b[^\n]{0,200}?https?://(?!(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])[:/\s])[^\n]{0,200}?"
            r"\s(?:-d|--data(?:-binary|-raw|-urlencode)?|-F|--form|-T|--upload-file|--post-(?:file|data))[\s=]|"
            r"https?://\S*\$\("
        ),
        notes_only=True,
    ),
    Rule(
        "hidden instructions in an HTML comment",
        _re(
            r"<!--(?=[^>]{0,2000}?\b(?:ignore|instruction|assistant|ai\b|model|agent|execute|run\s|curl|wget|secret|"
            r"password|system|you\s|tool|upload|approve|prompt|do\s+not\s+report))[\s\S]{0,2000}?-->"
        ),
    ),
    # -- notes only: normal in a project's files, never in a fact a run keeps ------------------
    Rule(
        "addresses the model directly",
        _re(
            r"^\s*(?:(?:dear|hey|hi|attention|note\s+to\s+the)\s+)?(?:assistant|model|ai|agent|llm|bot|claude|gpt|"
            r"chatgpt)\s*[,:!]\s"
        ),
        notes_only=True,
    ),
    Rule(
        "runs code from the network",
        _re(
            r"\b(?:curl|wget|fetch|iwr|invoke-webrequest)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:(?:ba|z|da|k)?sh|python3?|"
            r"perl|ruby|node|php|iex)\b|\b(?:(?:ba|z)?sh|source|eval|\.)\s+(?:-c\s+)?[\"']?(?:\$\(|<\(|`)\s*(?:curl|wget)\b|"
            r"\b(?:exec|eval)\s*\([^\n]{0,80}\b(?:urlopen|requests\.get|fetch|http)|"
            r"\b(?:curl|wget)\b[^\n]{0,200}?\s(?:-o|-O|--output|>)\s*(\S+)[^\n]{0,40}?(?:&&|;|\|\|)\s*(?:sudo\s+)?"
            r"(?:(?:ba|z|da)?sh|source|\.|chmod\s+\+x|python3?)\s+\1|"
            r"\bbase64\s+(?:-d|--decode)\b[^\n]{0,80}\|\s*(?:ba|z)?sh\b"
        ),
        notes_only=True,
    ),
    Rule(
        "forged tool call",
        _re(
            r"\{\s*\"(?:name|tool)\"\s*:\s*\"\w+\"\s*,\s*\"(?:arguments|parameters|args|input)\"\s*:|"
            r"\"(?:tool_calls|function_call)\"\s*:|<function=\w+"
        ),
        notes_only=True,
    ),
    Rule(
        "tells the model to call a tool or run a command",
        _re(r"\b(?:call|invoke|use|run|execute|trigger|do)\b"),
        also=(_re(rf"\b(?:{_TOOL_NAMES})\b|https?://"), _re(rf"\b(?:{_EVERY_RUN})\b")),
        notes_only=True,
    ),
    Rule(
        "changes approvals, policies or runner's files",
        _re(
            r"\bapprovals\s*:\s*(?:approve|off|none|auto|yes|allow)\b|\bsandbox\s*:\s*(?:off|false|none|no)\b|"
            r"\ballow\s*:\s*\[\s*[\"']?\*|\brunner\s+(?:approvals\s+(?:grant|deny)|memory\s+accept|creds|db)\b|"
            r"--replay\b|\bcore\.hookspath\b|\b(?:kill|pkill|killall)\b[^.\n]{0,30}\brunner\b"
        ),
        notes_only=True,
    ),
    Rule(
        "changes approvals, policies or runner's files",
        _re(rf"\b(?:{_CHANGE})\b"),
        also=(_re(rf"(?:{_CONTROL})"),),
        notes_only=True,
    ),
    Rule(
        "copies itself into later runs",
        _re(
            r"\b(?:copy|add|put|write|paste|include|insert|repeat|save|keep|spread)\b[^.\n]{0,20}\b(?:this|these)\s+"
            r"(?:note|entry|entries|instructions?|text|line|message|rule)s?\b[^.\n]{0,40}\b(?:every|each|all|memory|"
            r"notebook|skills?|agents\.md|notes)\b|\b(?:add|put|write)\s+(?:it|this(?:\s+note|\s+entry)?)\s+back\b|"
            r"\bif\s+(?:it|this(?:\s+note|\s+entry)?)\s+(?:is|gets)\s+(?:removed|deleted|cleared)"
        ),
        notes_only=True,
    ),
    Rule(
        "destructive command",
        _re(
            r"\brm\s+-(?:rf|fr|r)\b[^\n;|&]{0,40}\s(?:/|~|\$HOME)(?:[\s;'\"`]|$)|\bmkfs\b|\bdd\s+[^\n]{0,40}of=/dev/|"
            r"\bgit\s+push\s+(?:-f|--force)\b|\bch(?:mod|own)\s+-R\s+\S+\s+(?:/|~|\$HOME)(?:[\s;'\"`]|$)"
        ),
        notes_only=True,
        negated=True,
    ),
    Rule(
        "hidden text",
        _re(
            r"^\s*\[(?://|comment|hidden)\]\s*:\s*[#<]|display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0|"
            r"<\w+[^>\n]{0,40}\shidden\b"
        ),
        notes_only=True,
    ),
)


# -- notes only: steering signals, counted per line --------------------------------------------
@dataclass(frozen=True)
class Signal:
    """One family of words that steer a run rather than inform it; a note's line scoring
    ``STEERING`` or more (each family counted once, by its weight) is flagged."""

    name: str
    pattern: re.Pattern[str]
    weight: int = 1


STEERING = 3
SIGNALS: tuple[Signal, ...] = (
    Signal(
        "claims authority",
        _re(
            r"\b(?:maintainers?|admin(?:istrator)?s?|ops\s+team|from\s+ops|security\s+team|runbook|set\s+by|per\s+the|"
            r"authoritative|official(?:ly)?|mandated|mandatory|required\s+by|maintenance\s+mode|compliance|"
            r"(?:operator|owner|boss|management)\s+(?:wants|says|said|requires|insists|asked\s+(?:me|us)\s+to\s+tell))\b"
        ),
    ),
    Signal(
        "applies to every run",
        _re(
            r"\b(?:every|all|any)\s+(?:future\s+)?(?:runs?|tasks?|times?|questions?|sessions?|jobs?)\b|\bfuture\s+runs?\b|"
            r"\bat\s+(?:the\s+)?(?:run\s+)?start\b|\bstep\s+0\b|\bno\s+exceptions\b|\buntil\s+further\s+notice\b|"
            r"\bwhatever\s+(?:the|you|it)\b|\bfor\s+completeness\b|\bfrom\s+now\s+on\b|\bno\s+matter\s+what\b"
        ),
    ),
    Signal(
        "names secrets or private data",
        _re(
            rf"(?:{_SECRET})|\btranscripts?\b|\btool\s+outputs?\b|\bhostname\b|`(?:id|whoami|env)`|"
            r"\benv(?:ironment)?\s+var(?:iable)?s\b|\b(?:all|every)\s+env\b|\bsecrets?\b|\bcredentials?\b|\bkeys\b"
        ),
    ),
    Signal(
        "sends data out",
        _re(
            r"\b(?:send|post|upload|mail|e-?mail|export(?:ing)?|exfiltrate|leak|forward|ping|beacon|print|include|append|"
            r"share|dump|reveal|write)\b[^\n]{0,80}(?:https?://|ftp://|\b\S+@\S+\.\w+|\b\d{1,3}(?:\.\d{1,3}){3}\b|/tmp/|"
            r"\b(?:the\s+)?(?:final\s+)?(?:report|answer|message|output|notes|memory|summary)\b)|"
            r"\b(?:print|reveal|show|dump|output|echo|include)\s+(?:them|it|the\s+values?|everything)\b[^.\n]{0,20}\b(?:in\s+full|"
            r"verbatim|unredacted|unmasked|raw|as\s+is)\b"
        ),
    ),
    Signal(
        "names runner's controls",
        _re(
            r"\bapprovals?\b|\bdeny\s*list|\ballow\s*list|\bpolic(?:y|ies)\b|\bsafety\b|\bguardrails?\b|\bsandbox\b|"
            r"\bjobs\.ya?ml\b|\brunner\b|\bskills?\b|\bmemory\s+entr(?:y|ies)|\bnotes\b|\bnotebook\b|\bagents\.md\b|"
            r"\bjob\s+prompt\b|\bsystem\s+prompt\b|\bpermissions?\b|\bshell\s+access\b|\bdashboard\s+api\b|\bchmod\b"
        ),
    ),
    Signal(
        "evades or overrides",
        _re(
            r"\b(?:disable[sd]?|suppress(?:ed|es)?|turn(?:ed)?\s+off|get\s+around|bypass(?:ed)?|work\s*around|circumvent|"
            r"evade|route\s+\w+\s+through|mark\s+[^.\n]{0,40}\bas\s+(?:granted|approved)|grant\s+yourself|"
            r"answer\s+'?approved|self-?approv\w*|overrides?|supersedes?|authoritative|delete\s+(?:all|every)|"
            r"archive\s+(?:all|every)|wipe|no\s+exceptions|777|planted|is\s+a\s+bug)\b"
        ),
        weight=2,
    ),
    Signal(
        "addresses the model",
        _re(r"\byou(?:rs?|rself)?\b|\bagents?\s+reading\b|\bif\s+you\s+read\s+this\b"),
    ),
)


def _steering(text: str) -> Finding | None:
    """The first line whose signals reach ``STEERING`` (one pass of each signal over the text)."""
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    by_line: dict[int, list[Signal]] = {}
    for signal in SIGNALS:
        for line in dict.fromkeys(bisect_right(starts, m.start()) - 1 for m in signal.pattern.finditer(text)):
            by_line.setdefault(line, []).append(signal)
    for line in sorted(by_line):
        hit = sorted(by_line[line], key=SIGNALS.index)
        if sum(s.weight for s in hit) >= STEERING:
            return Finding("steers the run", "; ".join(s.name for s in hit))
    return None


_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n")
_NEGATION = re.compile(r"\b(?:never|not|don'?t|do\s+not|must\s*n[o']t|mustn't|avoid|no)\b[^.\n;]{0,25}$", re.I)


def _hits(pattern: re.Pattern[str], text: str, negated: bool) -> Iterator[re.Match[str]]:
    """Matches of ``pattern``; with ``negated``, not those right after a negation (``never print ...``)."""
    for found in pattern.finditer(text):
        if not (negated and _NEGATION.search(text, max(0, found.start() - 30), found.start())):
            yield found


def _match(rule: Rule, text: str) -> str | None:
    """The text the rule matched (within one sentence when it has ``also``), or None."""
    if not rule.also:
        found = next(_hits(rule.pattern, text, rule.negated), None)
        return found.group(0) if found else None
    for sentence in _SENTENCE.split(text):
        if next(_hits(rule.pattern, sentence, rule.negated), None) and all(p.search(sentence) for p in rule.also):
            return sentence
    return None


def _rules(context: Context) -> Iterator[Rule]:
    return (r for r in RULES if context is Context.NOTE or not r.notes_only)


def _findings(text: str, context: Context, suffix: str = "") -> list[Finding]:
    out: dict[str, Finding] = {}
    for rule in _rules(context):
        if rule.kind in out:
            continue
        matched = _match(rule, text)
        if matched is not None:
            out[rule.kind] = Finding(rule.kind + suffix, " ".join(matched.split())[:120])
    steering = _steering(text) if context is Context.NOTE else None
    if steering is not None:
        out[steering.kind] = Finding(steering.kind + suffix, steering.excerpt)
    return list(out.values())


# -- other views of the text: what a reader decodes, the scan decodes too ----------------------
_LEET = str.maketrans("013457@$", "oieastas")
_SPACED = re.compile(r"\b(?:[A-Za-z][\s.\-_*·]){3,}[A-Za-z]\b")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{20,}={0,2}")


def _squeezed(text: str) -> str:
    """``I-g-n-o-r-e`` and ``i g n o r e`` as words."""
    return _SPACED.sub(lambda m: re.sub(r"[\s.\-_*·]", "", m.group(0)), text)


DECODE_BUDGET = 65_536  # characters of base64 candidates decoded per scan (a notebook holds 1,800)


def _decoded(text: str) -> Iterator[str]:
    """Base64 runs that decode to text, within ``DECODE_BUDGET``."""
    budget = DECODE_BUDGET
    for found in _BASE64.finditer(text):
        chunk = found.group(0)
        budget -= len(chunk)
        if budget < 0:
            return
        try:
            raw = base64.b64decode(chunk + "=" * (-len(chunk) % 4), validate=True)
            plain = raw.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            continue
        if plain.isprintable() or all(c.isprintable() or c.isspace() for c in plain):
            yield plain


def _views(text: str, context: Context) -> Iterator[tuple[str, str]]:
    """(view, suffix for its findings) beyond the plain one."""
    for plain in _decoded(text):
        yield plain, " (base64-encoded)"
    if context is Context.NOTE:
        visible = _INVISIBLE.sub("", text)
        yield _squeezed(visible), " (spelled out)"
        yield visible.translate(_LEET), " (in leetspeak)"
        yield codecs.encode(visible, "rot13"), " (in ROT13)"


def scan(text: str, context: Context = Context.FILE) -> list[Finding]:
    """What in ``text`` looks like a prompt injection (empty: nothing)."""
    findings = _invisible(text)
    normalized = unicodedata.normalize("NFKC", text)
    findings += _findings(normalized, context)
    seen = {f.kind for f in findings}
    for view, suffix in _views(normalized, context):
        if view == normalized:
            continue
        for found in _findings(view, Context.FILE, suffix):  # the phrases obfuscation hides
            base = found.kind.removesuffix(suffix)
            if base not in seen:
                seen.add(base)
                findings.append(found)
    return findings


def kinds(findings: list[Finding]) -> str:
    """``a; b``: the kinds of ``findings``, sorted, each once."""
    return "; ".join(sorted({f.kind for f in findings}))


def blocked_marker(source: str, findings: list[Finding]) -> str:
    return f"[BLOCKED: {source} was not loaded because it looks like a prompt injection ({kinds(findings)})]"
