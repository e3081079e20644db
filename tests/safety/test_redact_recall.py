"""Recall of the redactor against detect-secrets on a generated corpus, and its properties."""

import json
import random
import string
import subprocess
import sys
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.safety.redact import MASK, Redactor

ALNUM = string.ascii_letters + string.digits


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def tokens(rng: random.Random) -> dict[str, str]:
    """One random, synthetic-looking token per family."""
    b64 = ALNUM + "-_"
    return {
        "stripe": "sk_live_" + _r(rng, 24),
        "stripe_rk": "rk_live_" + _r(rng, 24),
        "telegram": f"{rng.randrange(10**8, 10**10)}:AA" + _r(rng, 33, b64),
        "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJ" + _r(rng, 30, b64) + "." + _r(rng, 43, b64),
        "github": "ghp_" + _r(rng, 36),
        "github_pat": "github_pat_" + _r(rng, 82, ALNUM + "_"),
        "gitlab": "glpat-" + _r(rng, 20, b64),
        "google": "AIza" + _r(rng, 35, b64),
        "openai": "sk-proj-" + _r(rng, 48, b64),
        "anthropic": "sk-ant-api03-" + _r(rng, 80, b64),
        "aws": "AKIA" + _r(rng, 16, string.ascii_uppercase + string.digits),
        "slack": "xoxb-" + _r(rng, 12, string.digits) + "-" + _r(rng, 24),
    }


def documents(rng: random.Random, toks: dict[str, str]) -> list[tuple[str, str, str]]:
    """(family, secret, document): each token in prose, JSON, escaped JSON, YAML and URLs, plus
    webhook URLs, URL passwords, secret-named values and a PEM key."""
    docs = []
    for fam, tok in toks.items():
        docs.append((fam, tok, f"The deploy log printed {tok} before the retry.\n"))
        docs.append((fam, tok, json.dumps({"service": "billing", "credential": tok, "note": "a\nb"}) + "\n"))
        docs.append((fam, tok, json.dumps(json.dumps({"msg": f"line\n{tok}"})) + "\n"))
        docs.append((fam, tok, f"service:\n  name: billing\n  auth: {tok}\n"))
        docs.append((fam, tok, f"curl 'https://api.example.com/v1/x?page=2&access_token={quote(tok)}'\n"))
    pw = _r(rng, 14) + "!"
    hook = _r(rng, 24)
    discord = f"{rng.randrange(10**17, 10**18)}/" + _r(rng, 68, ALNUM + "-_")
    pem_body = "\n".join(_r(rng, 64, ALNUM + "+/") for _ in range(5))
    docs += [
        ("slack_webhook", hook, f"url: https://hooks.slack.com/services/T{_r(rng, 8)}/B{_r(rng, 8)}/{hook}\n"),
        ("discord_webhook", discord, f"POST https://discord.com/api/webhooks/{discord}\n"),
        ("url_password", pw, f"DATABASE_URL=postgres://app:{pw}@db.internal:5432/app\n"),
        ("json_password", pw, json.dumps({"user": "app", "password": pw}) + "\n"),
        ("json_api_key", pw, json.dumps({"api_key": pw, "region": "eu"}) + "\n"),
        ("yaml_secret", pw, f"db:\n  host: x\n  secret: {pw}\n"),
        ("escaped_json", pw, json.dumps(json.dumps({"password": pw})) + "\n"),
        ("aws_secret", pw * 3, f"aws_secret_access_key = {(pw * 3)[:40]}\n"),
        ("pem", pem_body, f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----\n"),
    ]
    return docs


def _detect_secrets(tmp_path, docs: list[tuple[str, str, str]]) -> dict[int, list[int]]:
    """Lines detect-secrets flags, per document index."""
    for i, (_, _, doc) in enumerate(docs):
        (tmp_path / f"doc{i:03d}.txt").write_text(doc)
    scan = subprocess.run(
        [sys.executable, "-m", "detect_secrets", "scan", "--all-files", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    flagged: dict[int, list[int]] = {}
    for path, found in json.loads(scan.stdout)["results"].items():
        i = int(path.rsplit("doc", 1)[1][:3])
        flagged[i] = sorted({f["line_number"] for f in found})
    return flagged


def test_recall_against_detect_secrets(tmp_path):
    rng = random.Random(1313)
    docs = [d for _ in range(3) for d in documents(rng, tokens(rng))]
    flagged = _detect_secrets(tmp_path, docs)
    r = Redactor(include_env=False)
    ours: dict[str, int] = {}
    theirs: dict[str, int] = {}
    for i, (fam, secret, doc) in enumerate(docs):
        out = r(doc)
        lines = doc.splitlines()
        for n in flagged.get(i, []):  # everything detect-secrets flags is masked by us
            assert lines[n - 1] != out.splitlines()[n - 1] or MASK in lines[n - 1], (fam, lines[n - 1])
        theirs[fam] = theirs.get(fam, 0) + (i in flagged)
        assert secret not in out and quote(secret) not in out, (fam, doc, out)  # every planted token
        ours[fam] = ours.get(fam, 0) + 1
    for fam in theirs:
        assert ours[fam] >= theirs[fam], fam


KNOWN = ["known-Secret-1234", 'q"uo\\te-\u00e9l\u00e8ve-42']
_R = Redactor(KNOWN, include_env=False)
_pieces = st.sampled_from(
    [
        *KNOWN,
        "ghp_" + "a1" * 18,
        "sk_live_" + "b2" * 12,
        "password: hunter22",
        "\\n",
        "\\u0067",
        "%2F",
        MASK,
        "=",
        ":",
        '"',
    ]
)
_text = st.lists(st.one_of(_pieces, st.text(max_size=12)), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_redaction_is_idempotent(text):
    once = _R(text)
    assert _R(once) == once


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), st.sampled_from(KNOWN), st.text(max_size=20))
def test_known_values_masked_in_any_context_and_form(before, secret, after):
    for form in (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret)):
        out = _R(before + form + after)
        assert form not in out and MASK in out
        assert _R(out) == out  # never un-masks on a second pass
