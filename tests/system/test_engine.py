"""The serving engine and its fast decode view, on the tiny random model (milliseconds, no file).

- `DecodeView` (solutions.paged_decode) gives the logits and block tables of the paged-KV kata's
  readable `PagedView`, for rows of different lengths, across block boundaries and a forked
  (copy-on-write) row, and runs out of blocks cleanly.
- The engine (solutions.engine) answers concurrent requests each exactly as `generate` answers
  it alone (greedy), shares decode steps among them, still does with a pool so small that the
  scheduler must preempt, and frees every block when a stream is closed early.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from solutions.engine import Engine, EngineConfig, SamplingParams
from solutions.generate import generate
from solutions.model import tiny_model
from solutions.paged_decode import DecodeView
from solutions.paged_kv import OutOfBlocksError, PagedKVCache

EOS = 7


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=1)


def paged_cache(model, num_blocks: int = 64, block_size: int = 4) -> PagedKVCache:
    c = model.config
    return PagedKVCache(c.n_layers, c.n_kv_heads, c.head_dim, num_blocks, block_size)


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(8, 256, (int(torch.randint(3, 20, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(n)]


def test_decode_view_equals_paged_view(model):
    """Four decode steps over rows of lengths 3..19 (one a fork sharing its parent's blocks): DecodeView
    and PagedView give the same logits, tables and lengths."""
    caches = [paged_cache(model), paged_cache(model)]
    rows = prompts(3, seed=2)
    with torch.inference_mode():
        for cache in caches:
            for i, p in enumerate(rows):
                cache.add_sequence(i)
                model.prefill(torch.tensor([p]), cache.view([i]))
            cache.fork(0, 3)  # row 3 shares row 0's blocks: its first write copies the last one
        ids = list(range(4))
        tokens = torch.tensor([11, 12, 13, 14])
        for step in range(4):
            readable, fast = caches[0].view(ids), DecodeView(caches[1], ids)
            want = model.decode_step(tokens, readable, readable.attention_mask())
            got = model.decode_step(tokens, fast, fast.attention_mask())
            assert torch.allclose(got, want, atol=1e-5), f"decode step {step}: logits differ from PagedView's"
            for i in ids:
                assert caches[1].num_tokens(i) == caches[0].num_tokens(i), f"step {step}: row {i}'s length"
                assert len(caches[1].block_table(i)) == len(caches[0].block_table(i)), f"step {step}: row {i}'s table"
            assert caches[1].blocks_in_use == caches[0].blocks_in_use
            tokens = want.argmax(-1)


def test_decode_view_out_of_blocks_changes_nothing(model):
    """With no block left for a row's next position, DecodeView raises OutOfBlocksError and leaves
    every table as it was."""
    cache = paged_cache(model, num_blocks=2, block_size=4)
    with torch.inference_mode():
        for i in range(2):
            cache.add_sequence(i)
            model.prefill(torch.tensor([[9, 10, 11, 12]]), cache.view([i]))  # each row fills its block
    tables = [cache.block_table(i) for i in range(2)]
    with pytest.raises(OutOfBlocksError):
        DecodeView(cache, [0, 1])
    assert [cache.block_table(i) for i in range(2)] == tables and cache.allocator.num_free == 0


async def _ask_all(engine: Engine, requests: list[list[int]], max_tokens: int) -> list[list[int]]:
    async def one(p):
        return [t async for t in engine.submit(p, SamplingParams(max_tokens, temperature=0))]
    return await asyncio.gather(*(one(p) for p in requests))


def alone(model, prompt: list[int], max_tokens: int) -> list[int]:
    with torch.inference_mode():
        return generate(model, [prompt], max_new_tokens=max_tokens, eos_token_id=EOS).tokens[0]


@pytest.mark.parametrize("config", [EngineConfig(num_blocks=256, block_size=4, max_tokens_per_step=16),
                                    EngineConfig(num_blocks=12, block_size=4, max_tokens_per_step=8)],
                         ids=["roomy", "preempting"])
def test_concurrent_requests_each_get_their_own_answer(model, config):
    """Eight requests at once: each gets generate's greedy answer alone, and decode steps were shared
    (with 12 blocks of 4 the scheduler must preempt and recompute; the answers do not change)."""
    requests, max_tokens = prompts(8, seed=3), 12
    engine = Engine(model, EOS, config)
    engine.start()
    try:
        got = asyncio.run(_ask_all(engine, requests, max_tokens))
        stats = engine.stats()
    finally:
        engine.close()
    for i, p in enumerate(requests):
        assert got[i] == alone(model, p, max_tokens), f"request {i} (prompt {p}) got another answer than alone"
    assert stats.max_batch_seen > 1, "no decode step served two requests"
    assert (stats.preemptions > 0) == (config.num_blocks < 64), f"preemptions: {stats.preemptions}"
    assert stats.pending == 0 and stats.blocks_in_use == 0, f"blocks held after every request finished: {stats}"


def test_closing_a_stream_frees_its_blocks(model):
    """A stream closed after two tokens: the request is dropped and its blocks go back to the pool."""
    engine = Engine(model, EOS, EngineConfig(num_blocks=64, block_size=4))
    engine.start()

    async def two_tokens():
        stream = engine.submit([9, 10, 11], SamplingParams(200, temperature=0))
        got = [await anext(stream), await anext(stream)]
        await stream.aclose()
        for _ in range(200):
            if engine.stats().pending == 0:
                break
            await asyncio.sleep(0.01)
        return got

    try:
        assert len(asyncio.run(two_tokens())) == 2
        stats = engine.stats()
    finally:
        engine.close()
    assert stats.pending == 0 and stats.blocks_in_use == 0, f"after the stream closed: {stats}"


def test_submit_refuses_what_cannot_fit(model):
    """A prompt plus max_tokens past the context, or a token outside the vocabulary: ValueError at once."""
    engine = Engine(model, EOS, EngineConfig(num_blocks=8, block_size=4))  # 32 positions

    async def submit(prompt, max_tokens):
        engine.submit(prompt, SamplingParams(max_tokens))

    with pytest.raises(ValueError, match="context of 32"):
        asyncio.run(submit([9] * 30, 3))
    with pytest.raises(ValueError, match="token ids"):
        asyncio.run(submit([9, 999], 3))
