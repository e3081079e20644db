"""The injection scan (issue 29 item 5): recall and false positives on the memory-note corpus
(``tests/safety/data/notes.json``) per round, this tree beside main before; and what a scan costs.

1. Per round (dev, round2, round3: written before the rules saw them, then tuned on; round4:
   never tuned on), hostile notes flagged and benign notes flagged: main before (one scan for
   every text), this tree for notes (``Context.NOTE``, what a memory write gets) and for files
   (``Context.FILE``, AGENTS.md and skills).
2. CPU time of a scan: per note, per full notebook (1,800 characters, what a run's start scans
   once), per 10 KB of AGENTS.md-like text; main before beside it.

"main before" is the scan of ``$RUNNER_BENCH_BASE`` (default /work/base) when that tree exists, else
``runner/safety/injection.py`` at ``git merge-base HEAD main`` (``$RUNNER_BENCH_BEFORE_REV``
overrides). Run: ``python tests/bench/bench_injection.py`` (about 10 s).

Floor of the CPU figures: one ``re.findall`` over the same text with one case-insensitive
alternation of a few injection phrases (a single regex pass). Recall and false positives are
policy figures with no floor.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _common import REPO, beside  # noqa: E402

from runner.safety.injection import Context, scan  # noqa: E402
from tests.safety.corpus import notes  # noqa: E402

ROUNDS = ("dev", "round2", "round3", "round4")


def before_module() -> tuple[ModuleType, str]:
    """main before's injection module, and where it came from."""
    base = Path(os.environ.get("RUNNER_BENCH_BASE", "/work/base"))
    path = base / "runner" / "safety" / "injection.py"
    where = str(base)
    if not path.is_file() or base.resolve() == REPO:
        rev = os.environ.get("RUNNER_BENCH_BEFORE_REV") or subprocess.run(
            ["git", "merge-base", "HEAD", "main"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        source = subprocess.run(
            ["git", "show", f"{rev}:runner/safety/injection.py"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        path = Path(tempfile.mkdtemp()) / "injection_before.py"
        path.write_text(source)
        where = f"git {rev[:10]}"
    spec = importlib.util.spec_from_file_location("injection_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["injection_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module, where


def counts(check: Callable[[str], Any], round_: str) -> str:
    hostile = [n.text for n in notes() if n.round == round_ and n.hostile]
    benign = [n.text for n in notes() if n.round == round_ and not n.hostile]
    caught = sum(bool(check(t)) for t in hostile)
    false = sum(bool(check(t)) for t in benign)
    return f"{caught}/{len(hostile)} ({caught / len(hostile):.0%}), fp {false}/{len(benign)}"


def cpu(check: Callable[[str], Any], texts: list[str], repeat: int = 5) -> float:
    """Best CPU seconds of one pass over ``texts``."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for text in texts:
            check(text)
        best = min(best, time.process_time() - started)
    return best


def agents_md(size: int = 10_000) -> str:
    block = (
        "## Build\nRun `make test` before committing; the suite takes 3 minutes.\n"
        "- Use pnpm, not npm. Lockfile changes need a reviewer.\n"
        "<!-- generated: do not edit by hand -->\n"
        "```bash\ncurl -fsSL https://example.com/install.sh -o install.sh\nbash install.sh --prefix ~/.local\n```\n"
        "Secrets come from the environment (`GITHUB_TOKEN`); never print them.\n\n"
    )
    return (block * (size // len(block) + 1))[:size]


FLOOR = re.compile(
    r"ignore (?:all )?(?:previous|prior|above) instructions|disregard|system prompt|you are now|"
    r"new instructions|do not tell the user|exfiltrate|curl [^|]*\| *(?:ba)?sh",
    re.IGNORECASE,
)


def row(name: str, value: str, target: str = "") -> None:
    print(f"{name:<44} {value:>26}" + (f"   target {target}" if target else ""))


def main() -> None:
    before, where = before_module()
    note = lambda t: scan(t, Context.NOTE)  # noqa: E731
    # main before with contexts scans as this tree does; one without them, one scan for every text
    old_context = getattr(before, "Context", None)
    then_note = (lambda t: before.scan(t, old_context.NOTE)) if old_context else before.scan  # noqa: E731
    print(f"main before: {where}")
    print("hostile flagged / benign flagged, per round")
    for round_ in ROUNDS:
        held_out = round_ == "round4"
        print(f"  {round_}{'  (held out: never tuned on)' if held_out else '  (tuned on)'}")
        row("    main before", counts(then_note, round_))
        target = ">= 9/25, fp <= 1" if held_out else ">= 95% over the tuned rounds, fp <= 2"
        row("    this tree, notes", counts(note, round_), target)
        row("    this tree, files (AGENTS.md, skills)", counts(scan, round_))
    texts = [n.text for n in notes()]
    notebook = "\n§\n".join(texts)[:1800]
    doc = agents_md()
    print("CPU per scan")
    row("  one note, main before", f"{cpu(then_note, texts) / len(texts) * 1e6:.0f} us")
    row("  one note, this tree (notes)", f"{cpu(note, texts) / len(texts) * 1e6:.0f} us")
    row("  a full notebook (run start), main before", f"{cpu(then_note, [notebook], 50) * 1e3:.2f} ms")
    row("  a full notebook (run start), this tree", f"{cpu(note, [notebook], 50) * 1e3:.2f} ms")
    row("  10 KB AGENTS.md, main before", f"{cpu(before.scan, [doc], 20) * 1e3:.2f} ms")
    row("  10 KB AGENTS.md, this tree (files)", f"{cpu(scan, [doc], 20) * 1e3:.2f} ms")
    what = "one re.findall of a few injection phrases"
    beside("one note, CPU", cpu(note, texts) / len(texts) * 1e6, cpu(then_note, texts) / len(texts) * 1e6,
           cpu(FLOOR.findall, texts) / len(texts) * 1e6, what, "", "µs")
    beside("a full notebook, CPU", cpu(note, [notebook], 50) * 1e3, cpu(then_note, [notebook], 50) * 1e3,
           cpu(FLOOR.findall, [notebook], 50) * 1e3, what, "", "ms")
    beside("10 KB AGENTS.md, CPU", cpu(scan, [doc], 20) * 1e3, cpu(before.scan, [doc], 20) * 1e3,
           cpu(FLOOR.findall, [doc], 20) * 1e3, what, "", "ms")
    beside("recall, round4 (held out), notes", counts(note, "round4"), counts(then_note, "round4"),
           "n/a (a policy figure, not a cost)", "", ">= 9/25, fp <= 1", "")


if __name__ == "__main__":
    main()
