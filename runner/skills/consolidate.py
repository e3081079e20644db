"""The Curator's consolidation pass (``curator: {consolidate: true}``): a merge plan, never a change.

One request to the auxiliary model (config.yaml's ``auxiliary:``, else the ``default`` provider;
built by the caller: ``runner.run.model_choice.side_model``)
with the agent-written skills in RUNNER_HOME/skills (name, description, SKILL.md, shortened). The
model answers ``{"merges": [{"into", "sources", "reason", "content"}]}`` for skills that overlap.
Each proposed merge is checked like ``runner curator apply`` checks it (``merge.check_plan``); the
ones that pass are written, with each skill's content hash, to a plan file
``logs/curator/<time>-merge-plan.json`` that a person reads and applies with
``runner curator apply PLAN [--dry-run]``. Dropped proposals and the call's tokens and cost are in
the result (and the Curator's report).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.clock import iso
from runner.errors import RunnerError
from runner.skills import SkillPaths
from runner.skills.merge import Merge, MergePlan, check_plan, content_hash
from runner.skills.shared import skill_paths
from runner.skills.sidecall import ModelFactory, PricedReply
from runner.skills.usage import UsageFile
from runner.store.atomic import write_private

if TYPE_CHECKING:
    from runner.settings import Settings

SKILL_CHARS = 6000  # each skill's SKILL.md in the request
MAX_TOKENS = 8000

SYSTEM = """\
You maintain a library of skills (SKILL.md procedures) an agent wrote for itself. Find skills that \
overlap: the same task written twice, or one a special case of another. For each group propose one \
merge: the skill that stays ("into"), the ones merged into it ("sources"), why, and the complete new \
SKILL.md of "into" (same frontmatter name, a description covering all of them, every step and pitfall \
worth keeping). Propose nothing for skills that merely look alike.

Answer with exactly one JSON object and nothing else:
{"merges": [{"into": "<name>", "sources": ["<name>", ...], "reason": "<why>", "content": "<SKILL.md>"}]}
or {"merges": []} when nothing overlaps."""


class ConsolidateError(RunnerError, ValueError):
    reason = "consolidate"


@dataclass(frozen=True)
class Proposal:
    plan_path: Path | None  # None: nothing to merge (no file written)
    merges: int
    dropped: tuple[str, ...]  # proposed merges that failed the checks, one reason each
    reply: PricedReply | None  # None when there were fewer than two skills to compare

    def summary(self) -> str:
        cost = "" if self.reply is None else f" (model {self.reply.model}, ${self.reply.cost_usd:.4f})"
        if self.plan_path is None:
            text = "no merges proposed" + cost
        else:
            text = f"{self.merges} merge(s) proposed{cost}: review, then `runner curator apply {self.plan_path}`"
        if self.dropped:
            text += "; dropped: " + "; ".join(self.dropped)
        return text


def agent_skills(paths: SkillPaths) -> dict[str, str]:
    """name -> SKILL.md of every live agent-written skill."""
    out: dict[str, str] = {}
    for name, rec in sorted(UsageFile(paths).read().items()):
        md = paths.live(name) / "SKILL.md"
        if rec.created_by == "agent" and rec.state != "archived" and md.is_file():
            out[name] = md.read_text(encoding="utf-8", errors="replace")
    return out


def request(skills: dict[str, str]) -> list[dict[str, Any]]:
    parts = []
    for name, text in skills.items():
        body = text if len(text) <= SKILL_CHARS else text[:SKILL_CHARS] + "\n[... shortened ...]"
        parts.append(f'<skill name="{name}">\n{body.strip()}\n</skill>')
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*)\n```\s*\Z", re.DOTALL)


def parse_merges(text: str) -> list[dict[str, Any]]:
    raw = text.strip()
    fenced = _FENCE.match(raw)
    data: Any
    try:
        data = json.loads(fenced.group(1) if fenced else raw)
    except ValueError:
        raise ConsolidateError("the consolidation answer is not a JSON object") from None
    merges = data.get("merges") if isinstance(data, dict) else None
    if not isinstance(merges, list) or not all(isinstance(m, dict) for m in merges):
        raise ConsolidateError("the consolidation answer has no 'merges' list of objects")
    return merges


def propose(settings: Settings, *, now: datetime, model: ModelFactory) -> Proposal:
    """Ask for merges and write the ones that pass the checks to a plan file (nothing else changes).

    ``model`` builds the model (only called when there are two or more skills to compare)."""
    paths = skill_paths(settings)
    skills = agent_skills(paths)
    if len(skills) < 2:
        return Proposal(None, 0, (), None)
    reply = model().complete(request(skills), max_tokens=MAX_TOKENS)
    records = UsageFile(paths).read()
    kept: list[Merge] = []
    dropped: list[str] = []
    for i, raw in enumerate(parse_merges(reply.text)):
        names = [raw.get("into"), *(raw.get("sources") or [])]
        hashes = {n: content_hash(paths.live(n)) for n in names if isinstance(n, str) and n in skills}
        try:
            merge = Merge.model_validate({**raw, "hashes": hashes})
        except ValueError as exc:
            dropped.append(f"merge {i}: not a valid merge ({str(exc).splitlines()[0]})")
            continue
        problems = check_plan(MergePlan(version=1, merges=[*kept, merge]), paths, records)
        if problems:
            dropped.append(problems[0])
            continue
        kept.append(merge)
    if not kept:
        return Proposal(None, 0, tuple(dropped), reply)
    plan = MergePlan(version=1, created_at=iso(now), model=reply.model, merges=kept)
    return Proposal(write_plan(settings.home, now, plan), len(kept), tuple(dropped), reply)


def write_plan(home: Path, now: datetime, plan: MergePlan) -> Path:
    folder = home / "logs" / "curator"
    path = folder / f"{now.strftime('%Y%m%d-%H%M%S')}-merge-plan.json"
    n = 2
    while path.exists():
        path = folder / f"{now.strftime('%Y%m%d-%H%M%S')}-{n}-merge-plan.json"
        n += 1
    write_private(path, json.dumps(plan.model_dump(), indent=2, ensure_ascii=False) + "\n")
    return path
