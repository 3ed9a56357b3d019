"""SmolLM2 end to end: our model against HuggingFace transformers on the same GGUF weights.

Logits on chat prompts, greedy continuations, cached decode against full recompute, left-padded
batches against their rows alone, and the context limit. Logits are compared, not text: a wrong
RoPE pairing still produces plausible English.
"""

from __future__ import annotations

import pytest
import torch

CHATS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is, in one sentence.",
    "def fib(n):\n    # complete this Python function",
    "Translate 'good morning' into Spanish and German.",
    "Why is the sky blue? Answer briefly!",
]
EOS = 2  # <|im_end|>; also the pad id in SmolLM2, so padding is found by the mask, never by value


@pytest.fixture(scope="module")
def encode_chat(smollm2_tokenizer):
    """user text -> prompt ids (1, T) through SmolLM2's chat template and our tokenizer."""

    def encode(text: str) -> torch.Tensor:
        prompt = smollm2_tokenizer.apply_chat_template([{"role": "user", "content": text}])
        return torch.tensor([smollm2_tokenizer.encode(prompt)])

    return encode


def greedy(model, ids: torch.Tensor, n: int) -> list[int]:
    """Greedy continuation of ids (1, T) with our KV cache, stopping after EOS."""
    cache = model.new_cache(1, ids.shape[1] + n)
    token = model.prefill(ids, cache)[:, -1].argmax(-1)  # (1,)
    out = [int(token)]
    while len(out) < n and out[-1] != EOS:
        token = model.decode_step(token, cache).argmax(-1)
        out.append(int(token))
    return out


@pytest.mark.parametrize("text", CHATS[:5])
def test_logits_match_huggingface(smollm2, hf_smollm2, encode_chat, text):
    """Logits equal HuggingFace's within 1e-3, with the same argmax, at every position of a chat prompt."""
    ids = encode_chat(text)
    with torch.inference_mode():
        ours, theirs = smollm2(ids)[0], hf_smollm2(ids).logits[0]  # (T, V)
    worst = (ours - theirs).abs().max().item()
    assert worst < 1e-3, f"logits differ from HuggingFace by {worst:.2e} on {text!r} ({ids.shape[1]} tokens)"
    differ = (ours.argmax(-1) != theirs.argmax(-1)).nonzero().flatten().tolist()
    assert not differ, f"argmax differs from HuggingFace at positions {differ} of {text!r}"


@pytest.mark.parametrize("text", CHATS[:2])
def test_greedy_32_tokens_match_huggingface(smollm2, hf_smollm2, encode_chat, text):
    """32 greedy new tokens (prefill + cached decode) are exactly HuggingFace generate's."""
    ids = encode_chat(text)
    ours = greedy(smollm2, ids, 32)
    with torch.inference_mode():
        out = hf_smollm2.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=32,
            do_sample=False,
            eos_token_id=EOS,
            pad_token_id=EOS,
        )
    theirs = out[0, ids.shape[1] :].tolist()
    assert ours == theirs, (
        f"greedy tokens differ from HuggingFace on {text!r}:\n ours   {ours}\n theirs {theirs}"
    )


def test_cached_decode_equals_full_recompute(smollm2, encode_chat):
    """Prefill in two chunks then decode step by step gives the logits of a full forward at each step."""
    ids = encode_chat(CHATS[2])
    cont = torch.tensor([[504, 3458, 314, 253, 1345, 30]])  # arbitrary tokens to decode
    full = torch.cat([ids, cont], dim=1)
    with torch.inference_mode():
        want = smollm2(full)[0]  # (T, V)
    cache = smollm2.new_cache(1, full.shape[1])
    half = ids.shape[1] // 2
    got = [smollm2.prefill(ids[:, :half], cache)[0], smollm2.prefill(ids[:, half:], cache)[0]]
    got += [smollm2.decode_step(cont[:, i], cache) for i in range(cont.shape[1])]
    got = torch.cat(got)  # (T, V)
    worst = (got - want).abs().max(-1).values
    assert worst.max() < 1e-4, (
        f"cached logits differ from recompute by {worst.max():.2e} at position {worst.argmax()}"
    )
    assert cache.length == full.shape[1], f"cache length {cache.length} after {full.shape[1]} tokens"


def test_left_padded_batch_equals_rows_alone(smollm2, encode_chat):
    """A left-padded batch (mask + per-row positions) gives each row the logits it gets alone."""
    rows = [encode_chat(CHATS[0])[0], encode_chat(CHATS[3])[0]]
    width = max(len(r) for r in rows)
    ids = torch.full((2, width), EOS)
    mask = torch.zeros(2, width, dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :], mask[b, width - len(r) :] = r, True
    cache = smollm2.new_cache(2, width + 3)
    batch = [smollm2.prefill(ids, cache, mask)[:, -1]]  # (2, V)
    nxt = batch[0].argmax(-1)
    for _ in range(3):
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        batch.append(smollm2.decode_step(nxt, cache, mask))
        nxt = batch[-1].argmax(-1)
    for b, r in enumerate(rows):
        alone = greedy_logits(smollm2, r[None], 3)
        worst = max((batch[s][b] - alone[s]).abs().max().item() for s in range(4))
        assert worst < 1e-4, f"row {b} ({len(r)} real of {width}) differs from running alone by {worst:.2e}"


def greedy_logits(model, ids: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Last-position logits (V,) after the prompt and after each of n greedy steps, batch of one."""
    cache = model.new_cache(1, ids.shape[1] + n)
    out = [model.prefill(ids, cache)[0, -1]]
    for _ in range(n):
        out.append(model.decode_step(out[-1].argmax(-1)[None], cache)[0])
    return out


def test_prompt_longer_than_context_is_a_clear_error(smollm2):
    """A prompt past the 8192-token context raises ValueError naming the context, before any compute."""
    too_long = torch.zeros(1, smollm2.config.max_seq_len + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="context"):
        smollm2(too_long)
    cache = smollm2.new_cache(1, 8)
    with pytest.raises(ValueError):
        smollm2.prefill(torch.zeros(1, 9, dtype=torch.long), cache)  # past the cache: CacheFullError


def test_bad_token_ids_are_a_clear_error(smollm2):
    """Ids outside the vocabulary, or not a (B, T) long tensor, raise ValueError."""
    with pytest.raises(ValueError, match="49152"):
        smollm2(torch.tensor([[1, 49152]]))
    with pytest.raises(ValueError, match="long"):
        smollm2(torch.tensor([[1.0, 2.0]]))


def test_rope_rotates_each_pair_i_and_i_plus_half_by_its_angle():
    """apply_rope turns (x_i, x_{i+D/2}) by position * theta^(-2i/D), as HF's rotate-half Llama does."""
    from solutions.model import apply_rope, rope_tables

    D, theta = 8, 100000.0
    x = torch.randn(2, 5, 3, D, generator=torch.Generator().manual_seed(0))  # (B, T, H, D)
    cos, sin = rope_tables(D, 16, theta)
    got = apply_rope(x, cos[:5][:, None], sin[:5][:, None])
    want = torch.empty_like(x)
    for t in range(5):
        for i in range(D // 2):
            angle = torch.tensor(t * theta ** (-2 * i / D), dtype=torch.float64)
            a, b = x[:, t, :, i].double(), x[:, t, :, i + D // 2].double()
            want[:, t, :, i] = a * angle.cos() - b * angle.sin()
            want[:, t, :, i + D // 2] = b * angle.cos() + a * angle.sin()
    worst = (got - want).abs().max().item()
    assert worst < 1e-5, f"RoPE differs from the pair rotation by {worst:.2e}"


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_asks_a_llama_for_the_last_position_only(beams):
    """solutions.generate prefills a model that offers `prefill_last_only` with last_only=True (one
    position through the LM head) and any other with the kata's plain call: the same tokens, scores"""
    from solutions.generate import generate
    from solutions.model import tiny_model

    model = tiny_model(0)
    calls, real = [], model.prefill
    model.prefill = lambda *args, **kwargs: calls.append(kwargs) or real(*args, **kwargs)
    prompts = [[5, 17, 200, 3], [9, 42]]  # two lengths: the shorter is left-padded
    how = {"strategy": "beam", "num_beams": beams} if beams > 1 else {}
    got = generate(model, prompts, max_new_tokens=6, **how)
    assert calls == [{"last_only": True}], calls
    model.prefill_last_only = False
    calls.clear()
    want = generate(model, prompts, max_new_tokens=6, **how)
    assert calls == [{}], calls
    assert got.tokens == want.tokens and got.scores == pytest.approx(want.scores, abs=1e-5)
