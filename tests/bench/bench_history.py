"""Issue 30: what the always-valid history costs per request: the history check and the wire
form of the conversation (a provider profile's copy) at 200 messages (target: the check
<= 1 ms), and the stream assembly per chunk for a 2 KB answer streamed a token at a time.

    python tests/bench/bench_history.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runner.agent.history import history_problem  # noqa: E402
from runner.agent.profiles import PROFILES, Family, wire_messages  # noqa: E402
from runner.agent.stream import DONE, Assembly, TextEvents  # noqa: E402


def conversation(n: int) -> list[dict]:
    msgs = [{"role": "system", "content": "s" * 4000}, {"role": "user", "content": "task"}]
    i = 0
    while len(msgs) < n:
        ids = [f"call_{i}_{k}" for k in range(2)]
        msgs.append(
            {
                "role": "assistant",
                "content": "thinking " * 20,
                "reasoning": "why " * 50,
                "tool_calls": [
                    {"id": c, "type": "function", "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
                    for c in ids
                ],
            }
        )
        msgs += [{"role": "tool", "tool_call_id": c, "content": "x" * 2000} for c in ids]
        i += 1
    return msgs[:n] if history_problem(msgs[:n]) is None else msgs


def median_us(fn, repeat: int = 2000) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    msgs = conversation(200)
    assert history_problem(msgs) is None
    check = median_us(lambda: history_problem(msgs))
    print(f"history check, {len(msgs)} messages: median {check:.1f} us (target <= 1000 us)")
    for family in (Family.OPENAI, Family.MOONSHOT, Family.MISTRAL):
        wire = median_us(lambda f=family: wire_messages(msgs, PROFILES[f]), repeat=500)
        print(f"wire form for {family.value:9s}, {len(msgs)} messages: median {wire:.1f} us")
    answer = "word " * 400  # 2 KB, one token per chunk
    chunks = [{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in answer.split(" ")]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})

    class Clock:
        deadline = None

        def progress(self, now: float) -> None:
            return None

        def idle_over(self, now: float) -> bool:
            return False

    def assemble() -> None:
        a = Assembly(provider="p")
        a.read([*chunks, DONE], clock=Clock(), events=TextEvents(lambda k, p: None))
        a.message()

    per_turn = median_us(assemble, repeat=200)
    print(f"stream assembly, 2 KB answer in {len(chunks)} chunks: {per_turn / 1000:.2f} ms per turn "
          f"({per_turn / len(chunks):.2f} us per chunk)")
    print(json.dumps({"check_us": round(check, 1), "assembly_ms": round(per_turn / 1000, 3)}))


if __name__ == "__main__":
    main()
