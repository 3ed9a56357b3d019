"""The paged KV cache (solutions.paged_kv) under SmolLM2, the way a server uses it.

Prompts are prefilled one at a time into one pool of blocks and then decoded together, one batched
forward pass per step through a `PagedView`, while sequences finish, join and fork; every sequence's
greedy tokens must be the ones it gets alone on the contiguous cache (solutions.kv_cache).
"""

from __future__ import annotations

import torch

from solutions.paged_kv import PagedKVCache

CHATS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Why is the sky blue? Answer briefly!",
]
STEPS = 8


def encode(tokenizer, text: str) -> torch.Tensor:
    """user text -> prompt ids (T,) through SmolLM2's chat template."""
    return torch.tensor(tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": text}])))


def greedy_alone(model, prompt: torch.Tensor, first: int | None = None) -> list[int]:
    """STEPS greedy tokens on the contiguous cache (the first one forced to `first` when given)."""
    cache = model.new_cache(1, len(prompt) + STEPS)
    token = model.prefill(prompt[None], cache)[0, -1].argmax()
    out = [int(token) if first is None else first]
    while len(out) < STEPS:
        out.append(int(model.decode_step(torch.tensor(out[-1:]), cache)[0].argmax()))
    return out


def test_batched_paged_decode_matches_each_sequence_alone(smollm2, smollm2_tokenizer):
    """Three prompts (one joining late) and a fork of the first decode as one batch: each gets its greedy tokens alone"""
    c = smollm2.config
    prompts = [encode(smollm2_tokenizer, t) for t in CHATS]
    cache = PagedKVCache(c.n_layers, c.n_kv_heads, c.head_dim, num_blocks=64, block_size=16)
    out: dict[int, list[int]] = {}
    second_best = None

    def admit(s: int) -> None:
        nonlocal second_best
        cache.add_sequence(s)
        logits = smollm2.prefill(prompts[s][None], cache.view([s]))[0, -1]
        out[s] = [int(logits.argmax())]
        if s == 0:  # a second sample of prompt 0: fork it, and let it start from the runner-up token
            cache.fork(0, 3)
            second_best = int(logits.topk(2).indices[1])
            out[3] = [second_best]

    admit(0)
    admit(1)
    for step in range(1, STEPS):
        if step == 3:
            admit(2)  # joins while the others decode
        rows = [s for s in out if len(out[s]) < STEPS]
        view = cache.view(rows)
        logits = smollm2.decode_step(torch.tensor([out[s][-1] for s in rows]), view, view.attention_mask(1))
        for row, s in enumerate(rows):
            out[s].append(int(logits[row].argmax()))
    while any(len(t) < STEPS for t in out.values()):  # the late one finishes alone
        view = cache.view([2])
        out[2].append(
            int(smollm2.decode_step(torch.tensor(out[2][-1:]), view, view.attention_mask(1))[0].argmax())
        )
    want = {s: greedy_alone(smollm2, prompts[s]) for s in range(3)}
    want[3] = greedy_alone(smollm2, prompts[0], first=second_best)
    for s in out:
        assert out[s] == want[s], f"sequence {s}: paged batched decode gave {out[s]}, alone {want[s]}"
    shared = len(prompts[0]) // 16  # prompt 0's full blocks stay shared with its fork
    assert cache.block_table(0)[:shared] == cache.block_table(3)[:shared]
