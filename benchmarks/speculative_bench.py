"""Speculative decoding on SmolLM2: fp32 verifying a packed draft against plain fp32, side by side.

Both answer the same chat prompts greedily, interleaved after a warm-up, medians of `repeats`
rounds: tokens per second over the whole answer (prefill included), the draft's acceptance rate, and
whether the tokens were fp32's (greedy speculative decoding must be exact). Beside them, Leviathan's
predicted speed-up from the measured acceptance rate and the draft's relative step cost.

    python -m benchmarks.speculative_bench [--tokens 48] [--repeats 3] [--k 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.decode_bench import interleaved, ours_decode
from solutions.generate import generate
from solutions.speculative import expected_speedup, speculative_generate

CHATS = ["List three prime numbers.", "What is the capital of France?", "Why is the sky blue?",
         "How do I reverse a list in Python?"]


def bench(fp32, draft, tokenizer, *, tokens: int, repeats: int, k: int, chats: list[str] = CHATS) -> dict:
    """{"plain_tok_s", "spec_tok_s", "acceptance", "identical", "c", "predicted", "tokens"}: medians."""
    eos = tokenizer.eos_token_id
    prompts = [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": c}])) for c in chats]
    plain_out: list[list[int]] = []
    spec_out: list = []

    @torch.inference_mode()
    def plain() -> float:
        start = time.perf_counter()
        plain_out[:] = [generate(fp32, [p], max_new_tokens=tokens, eos_token_id=eos).tokens[0] for p in prompts]
        return time.perf_counter() - start

    @torch.inference_mode()
    def spec() -> float:
        start = time.perf_counter()
        spec_out[:] = [speculative_generate(fp32, draft, p, max_new_tokens=tokens, k=k, eos_token_id=eos)
                       for p in prompts]
        return time.perf_counter() - start

    rounds = {"plain": [], "spec": []}
    for run in (plain, spec):
        run()  # warm-up
    for _ in range(repeats):
        rounds["plain"].append(plain())
        rounds["spec"].append(spec())
    n = sum(map(len, plain_out))
    steps = interleaved({"fp32": ours_decode(fp32, 16), "draft": ours_decode(draft, 16)}, repeats)
    alpha = sum(r.accepted for r in spec_out) / max(1, sum(r.drafted for r in spec_out))
    c = steps["draft"] / steps["fp32"]
    return {"plain_tok_s": n / statistics.median(rounds["plain"]), "spec_tok_s": n / statistics.median(rounds["spec"]),
            "acceptance": alpha, "identical": [r.tokens for r in spec_out] == plain_out, "c": c,
            "predicted": expected_speedup(alpha, k, c), "tokens": n,
            "passes": sum(r.rounds for r in spec_out)}


def main() -> None:
    import solutions.system
    from solutions.system.kernels.weight_modes import draft_mode

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--k", type=int, default=4)
    args = p.parse_args()
    mode = draft_mode()
    fp32 = solutions.system.load("fp32")
    draft = solutions.system.load(mode).model
    r = bench(fp32.model, draft, fp32.tokenizer, tokens=args.tokens, repeats=args.repeats, k=args.k)
    print(f"plain fp32 {r['plain_tok_s']:.1f} tok/s, fp32 verifying {mode} (k={args.k}) {r['spec_tok_s']:.1f} tok/s "
          f"({r['spec_tok_s'] / r['plain_tok_s']:.2f}x; predicted {r['predicted']:.2f}x from alpha "
          f"{r['acceptance']:.2f}, c {r['c']:.2f}); tokens identical: {r['identical']}")


if __name__ == "__main__":
    main()
