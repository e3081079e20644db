"""Issue 30: what the always-valid history costs per request: the history check and the wire
form of the conversation (a provider profile's copy) at 200 messages (target: the check
<= 1 ms), and the stream assembly per chunk for a 2 KB answer streamed a token at a time.

Main before: the same figures from main before's tree (``_before.each_tree``). Floors, plain
Python on the same data: for the check, one loop matching each tool call's id to a tool result;
for the wire form, a shallow copy of each message; for the assembly, joining the chunks' deltas.

    python tests/bench/bench_history.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import beside  # noqa: E402

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


def chunks_of_answer() -> list[dict]:
    answer = "word " * 400  # 2 KB, one token per chunk
    chunks = [{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in answer.split(" ")]
    return [*chunks, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]


def floors(repeat: int) -> dict[str, float]:
    """Microseconds of the plain-Python floors of the check, the wire form and the assembly."""
    msgs, chunks = conversation(200), chunks_of_answer()

    def match_calls() -> bool:
        answered = {m["tool_call_id"] for m in msgs if m["role"] == "tool"}
        return all(c["id"] in answered for m in msgs for c in m.get("tool_calls", ()))

    return {
        "check": median_us(match_calls, repeat),
        "wire": median_us(lambda: [dict(m) for m in msgs], repeat // 4),
        "assembly": median_us(lambda: "".join(c["choices"][0]["delta"].get("content", "") for c in chunks), repeat // 10),
    }


def measure(repeat: int) -> dict[str, float]:
    """Microseconds: the check, the wire form per family, the assembly of one 2 KB answer."""
    msgs = conversation(200)
    assert history_problem(msgs) is None
    found = {"check": median_us(lambda: history_problem(msgs), repeat)}
    for family in (Family.OPENAI, Family.MOONSHOT, Family.MISTRAL):
        found[family.value] = median_us(lambda f=family: wire_messages(msgs, PROFILES[f]), repeat=repeat // 4)
    chunks = chunks_of_answer()

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

    found["assembly"] = median_us(assemble, repeat=repeat // 10)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    repeat = parser.parse_args().repeat
    measured = each_tree("bench_history", "measure", repeat)
    here, before = measured["this tree"], measured.get("main before")
    msgs, chunks = conversation(200), chunks_of_answer()
    check, per_turn = here["check"], here["assembly"]
    print(f"history check, {len(msgs)} messages: median {check:.1f} us (target <= 1000 us)")
    for family in (Family.OPENAI, Family.MOONSHOT, Family.MISTRAL):
        print(f"wire form for {family.value:9s}, {len(msgs)} messages: median {here[family.value]:.1f} us")
    print(f"stream assembly, 2 KB answer in {len(chunks)} chunks: {per_turn / 1000:.2f} ms per turn "
          f"({per_turn / len(chunks):.2f} us per chunk)")
    floor = floors(repeat)
    beside("history check, 200 messages", check, before and before["check"], floor["check"],
           "a loop matching call ids to tool results", "<= 1000 µs", "µs")
    openai = Family.OPENAI.value
    beside(f"wire form ({openai}), 200 messages", here[openai], before and before[openai], floor["wire"],
           "a shallow copy of each message", "", "µs")
    beside("stream assembly, 2 KB answer", per_turn, before and before["assembly"], floor["assembly"],
           "joining the chunks' deltas", "", "µs")
    print(json.dumps({"check_us": round(check, 1), "assembly_ms": round(per_turn / 1000, 3)}))


if __name__ == "__main__":
    main()
