"""Prefix caching in the serving engine: time to first token of a request that repeats a long system
prompt, against the first request that sent it, measured side by side in each round.

Each round makes a fresh engine and a system prompt of its own (so the first request finds nothing
cached), then asks two questions under it, greedy, and times each request's first token. The goal
(issue 39): the second at most 0.5x the first. Not here: concurrency (one request at a time).
"""

from __future__ import annotations

import asyncio
import statistics
import time

RULES = (
    "Answer in plain words.",
    "Say when you do not know.",
    "Never guess a number.",
    "Keep each answer short.",
    "Name your sources when you have them.",
    "Ask before you assume.",
)


def system_prompt(tokenizer, tokens: int, round_: int) -> str:
    """A system prompt of at least `tokens` tokens, its first words naming the round."""
    lines, i = [f"Session {round_}."], 0
    while len(tokenizer.encode(" ".join(lines))) < tokens:
        lines.append(f"Rule {i}: {RULES[i % len(RULES)]}")
        i += 1
    return " ".join(lines)


def ttft_pairs(model, tokenizer, *, tokens: int, rounds: int) -> list[tuple[float, float, int, int]]:
    """Per round: (first request's TTFT s, second's, second's cached tokens, prompt tokens)."""
    from solutions.system.serving.engine import Engine, SamplingParams

    async def first_token(engine, messages) -> tuple[float, int, int]:
        prompt = tokenizer.encode(tokenizer.apply_chat_template(messages))
        start = time.perf_counter()
        stream = engine.submit(prompt, SamplingParams(1, temperature=0))
        async for _ in stream:
            break
        took = time.perf_counter() - start
        await stream.aclose()
        return took, stream.cached_tokens, len(prompt)

    out = []
    for r in range(rounds):
        system = system_prompt(tokenizer, tokens, r)
        engine = Engine(model, tokenizer.eos_token_id)
        engine.start()
        try:
            times = [
                asyncio.run(
                    first_token(
                        engine, [{"role": "system", "content": system}, {"role": "user", "content": question}]
                    )
                )
                for question in ("Name a primary colour.", "What is two plus two?")
            ]
        finally:
            engine.close()
        (cold, _, _), (warm, cached, n) = times
        out.append((cold, warm, cached, n))
    return out


def prefix_ttft(model, tokenizer, *, tokens: int = 1500, rounds: int = 3) -> dict:
    pairs = ttft_pairs(model, tokenizer, tokens=tokens, rounds=rounds)
    cold = statistics.median(p[0] for p in pairs)
    warm = statistics.median(p[1] for p in pairs)
    return {
        "cold": cold,
        "warm": warm,
        "ratio": warm / cold,
        "cached": min(p[2] for p in pairs),
        "prompt": min(p[3] for p in pairs),
        "rounds": rounds,
    }
