"""A claiming process for the kanban stress test and benchmark: claim, (sometimes stall), complete.

Run as ``python tests/kanban_claimer.py DB OWNER LOG [--lease S] [--stall P] [--reclaim-every N]``. It drives
the real board API against a real runner.db until no task is left unfinished, and writes one
line per claim to LOG (its fence log): ``task fence claimed_at completed_at accepted claim_ms``.
A claim that "stalls" sleeps past its lease before completing, so another process reclaims the
task and this completion must be refused by the fence. Exit 0; any exception escaping is a
failure (exit 3, traceback on stderr).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.clock import utcnow  # noqa: E402
from runner.store import Store  # noqa: E402
from runner.store.board import Board  # noqa: E402
from runner.store.dialect import parse  # noqa: E402
from runner.store.tasks import FenceError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("owner")
    p.add_argument("log")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--stall", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reclaim-every", type=int, default=0, help="also sweep expired leases every N claims")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    board = Board(Store.open(parse(args.db), migrate=False))  # a runner.db path or a postgresql:// URL
    lines: list[str] = []
    idle = 0
    while True:
        t0 = time.time()
        claims = board.claim(args.owner, now=utcnow(), lease_seconds=args.lease)
        t1 = time.time()
        if not claims:
            board.reclaim_expired(now=utcnow(), backoff=0)
            row = board.store.one("SELECT COUNT(*) AS n FROM tasks WHERE status != 'done'")
            if row is None or row["n"] == 0:
                break
            idle += 1
            time.sleep(min(0.002 * idle, 0.05))
            continue
        idle = 0
        claim = claims[0]
        if args.reclaim_every and len(lines) % args.reclaim_every == 0:
            board.reclaim_expired(now=utcnow(), backoff=0)
        if args.stall and rng.random() < args.stall:
            time.sleep(args.lease * 1.5)
        try:
            board.complete(claim.task_id, claim.fence, f"done by {args.owner}", now=utcnow())
            accepted = 1
        except FenceError:
            accepted = 0
        t2 = time.time()
        lines.append(f"{claim.task_id} {claim.fence} {t1:.6f} {t2:.6f} {accepted} {(t1 - t0) * 1000:.3f}")
    Path(args.log).write_text("\n".join(lines) + ("\n" if lines else ""))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(3)
