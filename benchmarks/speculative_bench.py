"""Speculative decoding on SmolLM2: fp32 verifying a packed draft against plain fp32, side by side.

Both answer the same chat prompts greedily, interleaved after a warm-up, medians of `repeats` rounds:
tokens per second over the whole answer (prefill included), and whether the tokens were fp32's. Beside
them, the draft acceptance rate (accepted / drafted), Leviathan's alpha (accepted / (accepted +
rejected)), and his predicted speed-up from that alpha and the draft's measured relative cost c.

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

CHATS = [
    "List three prime numbers.",
    "What is the capital of France?",
    "Why is the sky blue?",
    "How do I reverse a list in Python?",
]


class Watched:
    """A model that logs each `prefill` as (its cache's length before the call, tokens fed); the rest
    of the model protocol passes through. speculative_generate calls the target's prefill once a round."""

    def __init__(self, model) -> None:
        self.model, self.config = model, model.config
        self.passes: list[tuple[int, int]] = []

    def new_cache(self, batch_size: int, max_len: int):
        return self.model.new_cache(batch_size, max_len)

    def prefill(self, ids: torch.Tensor, cache):
        self.passes.append((cache.length, ids.shape[1]))
        return self.model.prefill(ids, cache)

    def decode_step(self, ids: torch.Tensor, cache):
        return self.model.decode_step(ids, cache)


def rejections(passes: list[tuple[int, int]], prompt_len: int, accepted: int) -> int:
    """The rounds of one speculative_generate call that ended at a rejected draft, from its target passes.

    By the kata's rules a round's pass feeds the tokens the target's cache lacks and then the round's n
    drafts, and the round ends with the cache truncated to the tokens kept: the old sequence plus the
    accepted drafts (the round's own token is fed next round). So the next pass's starting length gives
    a round's accepted count; the last round's is what the call's `accepted` total leaves.
    """
    seq = prompt_len  # tokens kept before the round: prompt + new
    rejected = seen = 0
    for i, (start, fed) in enumerate(passes):
        n = start + fed - seq  # fed = seq[start:] + the n drafts
        a = passes[i + 1][0] - seq if i + 1 < len(passes) else accepted - seen
        rejected += a < n
        seen += a
        seq += a + 1
    return rejected


def estimate_alpha(accepted: int, rejected: int) -> float:
    """Leviathan's alpha from counts: accepted / (accepted + rejected), its maximum-likelihood estimate.

    In Leviathan's model each draft the target tests is accepted with probability alpha, independently,
    and a round stops testing at its first rejection: the drafts after it are never tested. The tested
    drafts are the accepted ones and one per rejecting round. accepted / drafted (the draft acceptance
    rate) tends to alpha (1 - alpha^k) / (k (1 - alpha)) instead: 0.59 for alpha = 0.8 and k = 4.
    Raises ValueError when no draft was tested.
    """
    if accepted + rejected <= 0:
        raise ValueError(f"no draft was tested (accepted {accepted}, rejected {rejected}): alpha is unknown")
    return accepted / (accepted + rejected)


def bench(fp32, draft, tokenizer, *, tokens: int, repeats: int, k: int, chats: list[str] = CHATS) -> dict:
    """{"plain_tok_s", "spec_tok_s"}: medians; "acceptance" (accepted / drafted), "alpha" (estimate_alpha),
    "rejected", "identical", "c", "predicted" (from alpha and c), "tokens", "passes"."""
    eos = tokenizer.eos_token_id
    prompts = [
        tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": c}])) for c in chats
    ]
    plain_out: list[list[int]] = []
    spec_out: list = []
    spec_rejected: list[int] = []

    @torch.inference_mode()
    def plain() -> float:
        start = time.perf_counter()
        plain_out[:] = [
            generate(fp32, [p], max_new_tokens=tokens, eos_token_id=eos).tokens[0] for p in prompts
        ]
        return time.perf_counter() - start

    @torch.inference_mode()
    def spec() -> float:
        start = time.perf_counter()
        spec_out[:], spec_rejected[:] = [], []
        for p in prompts:
            target = Watched(fp32)  # a list append per round: nothing next to a forward pass
            spec_out.append(
                speculative_generate(target, draft, p, max_new_tokens=tokens, k=k, eos_token_id=eos)
            )
            spec_rejected.append(rejections(target.passes, len(p), spec_out[-1].accepted))
        return time.perf_counter() - start

    rounds = {"plain": [], "spec": []}
    for run in (plain, spec):
        run()  # warm-up
    for _ in range(repeats):
        rounds["plain"].append(plain())
        rounds["spec"].append(spec())
    n = sum(map(len, plain_out))
    steps = interleaved({"fp32": ours_decode(fp32, 16), "draft": ours_decode(draft, 16)}, repeats)
    accepted, rejected = sum(r.accepted for r in spec_out), sum(spec_rejected)
    alpha = estimate_alpha(accepted, rejected)
    c = steps["draft"] / steps["fp32"]
    return {
        "plain_tok_s": n / statistics.median(rounds["plain"]),
        "spec_tok_s": n / statistics.median(rounds["spec"]),
        "acceptance": accepted / max(1, sum(r.drafted for r in spec_out)),
        "alpha": alpha,
        "rejected": rejected,
        "identical": [r.tokens for r in spec_out] == plain_out,
        "c": c,
        "predicted": expected_speedup(alpha, k, c),
        "tokens": n,
        "passes": sum(r.rounds for r in spec_out),
    }


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
    print(
        f"plain fp32 {r['plain_tok_s']:.1f} tok/s, fp32 verifying {mode} (k={args.k}) {r['spec_tok_s']:.1f} tok/s "
        f"({r['spec_tok_s'] / r['plain_tok_s']:.2f}x; predicted {r['predicted']:.2f}x from alpha "
        f"{r['alpha']:.2f}, c {r['c']:.2f}); draft acceptance rate {r['acceptance']:.2f}; "
        f"tokens identical: {r['identical']}"
    )


if __name__ == "__main__":
    main()
