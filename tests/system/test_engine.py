"""The serving engine on the tiny random model (milliseconds, no file).

The engine (solutions.system.serving.engine) answers concurrent requests each exactly as `generate` answers
it alone (greedy), shares decode steps among them, still does with a pool so small that the
scheduler must preempt, frees every block when a stream is closed early, and shares cached prefix
blocks only among requests of one salt.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from solutions.generate import generate
from solutions.model import tiny_model
from solutions.system.serving.engine import Engine, EngineConfig, SamplingParams

EOS = 7


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=1)


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randint(8, 256, (int(torch.randint(3, 20, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(n)
    ]


def test_prefill_last_only_is_the_last_position(model):
    """prefill(last_only=True) gives the last position's logits of a full prefill (to 1e-5), and
    caches the same keys and values (the next decode step agrees)."""
    ids = torch.tensor([[9, 10, 11, 12, 13]])
    full_cache, last_cache = model.new_cache(1, 8), model.new_cache(1, 8)
    with torch.inference_mode():
        full = model.prefill(ids, full_cache)
        last = model.prefill(ids, last_cache, last_only=True)
        assert last.shape == (1, 1, full.shape[-1]) and torch.allclose(last[:, 0], full[:, -1], atol=1e-5)
        step = torch.tensor([14])
        assert torch.allclose(
            model.decode_step(step, last_cache), model.decode_step(step, full_cache), atol=1e-5
        )


async def _ask_all(engine: Engine, requests: list[list[int]], max_tokens: int) -> list[list[int]]:
    async def one(p):
        return [t async for t in engine.submit(p, SamplingParams(max_tokens, temperature=0))]

    return await asyncio.gather(*(one(p) for p in requests))


def alone(model, prompt: list[int], max_tokens: int) -> list[int]:
    with torch.inference_mode():
        return generate(model, [prompt], max_new_tokens=max_tokens, eos_token_id=EOS).tokens[0]


@pytest.mark.parametrize(
    "config",
    [
        EngineConfig(num_blocks=256, block_size=4, max_tokens_per_step=16),
        EngineConfig(num_blocks=12, block_size=4, max_tokens_per_step=8),
    ],
    ids=["roomy", "preempting"],
)
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
        assert got[i] == alone(model, p, max_tokens), (
            f"request {i} (prompt {p}) got another answer than alone"
        )
    assert stats.max_batch_seen > 1, "no decode step served two requests"
    assert (stats.preemptions > 0) == (config.num_blocks < 64), f"preemptions: {stats.preemptions}"
    assert stats.pending == 0 and stats.blocks_in_use == 0, (
        f"blocks held after every request finished: {stats}"
    )


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


@pytest.mark.parametrize(
    "config",
    [
        EngineConfig(num_blocks=256, block_size=4, max_tokens_per_step=16),
        EngineConfig(num_blocks=14, block_size=4, max_tokens_per_step=8),
    ],
    ids=["roomy", "preempting"],
)
def test_a_shared_prefix_is_prefilled_once_and_changes_no_answer(model, config):
    """A 24-token system prompt, then requests that start with it: each later one finds its 6 blocks
    cached (cached_tokens 24) and still gets generate's greedy answer alone; with a pool of 14 blocks of
    4 they evict and preempt, and the answers still do not change."""
    gen = torch.Generator().manual_seed(5)
    system = torch.randint(8, 256, (24,), generator=gen).tolist()
    tails = [torch.randint(8, 256, (int(n),), generator=gen).tolist() for n in (3, 5, 1, 7, 2)]
    max_tokens = 6
    engine = Engine(model, EOS, config)
    engine.start()

    async def ask(prompt):
        stream = engine.submit(prompt, SamplingParams(max_tokens, temperature=0))
        return [t async for t in stream], stream.cached_tokens

    async def run():
        first = await ask(system + tails[0])
        return [first] + list(await asyncio.gather(*(ask(system + t) for t in tails[1:])))

    try:
        got = asyncio.run(run())
        stats = engine.stats()
    finally:
        engine.close()
    for (tokens, _), tail in zip(got, tails):
        assert tokens == alone(model, system + tail, max_tokens), f"tail {tail}: another answer than alone"
    assert got[0][1] == 0, f"the first request found {got[0][1]} tokens cached in an empty cache"
    if config.num_blocks > 64:
        assert [c for _, c in got[1:]] == [24] * 4, f"cached tokens of the later requests: {got}"
    else:
        assert any(c == 24 for _, c in got[1:]), f"no later request found the system prompt cached: {got}"
    assert stats.pending == 0 and stats.blocks_in_use == 0, (
        f"blocks held after every request finished: {stats}"
    )


def test_prefix_caching_off_is_the_plain_paged_cache(model):
    """EngineConfig(prefix_caching=False): nothing is found cached, answers as with it on"""
    prompt = list(range(10, 40))
    answers = {}
    for caching in (False, True):
        engine = Engine(model, EOS, EngineConfig(num_blocks=64, block_size=4, prefix_caching=caching))
        engine.start()

        async def twice(engine=engine):
            out = []
            for _ in range(2):
                stream = engine.submit(prompt, SamplingParams(5, temperature=0))
                out.append(([t async for t in stream], stream.cached_tokens))
            return out

        try:
            answers[caching] = asyncio.run(twice())
        finally:
            engine.close()
    assert [c for _, c in answers[False]] == [0, 0] and [c for _, c in answers[True]] == [0, 28]
    assert [t for t, _ in answers[False]] == [t for t, _ in answers[True]]
    with pytest.raises(ValueError, match="prefix_caching"):
        EngineConfig(prefix_caching=1)


def test_requests_under_different_salts_share_no_cached_blocks(model):
    """one 30-token prompt under salts "a", "b", "a", None: only the repeat under "a" finds its 7 full
    blocks (28 tokens) cached, and every answer is the same; a salt that is not a str is a ValueError"""
    prompt = list(range(40, 70))
    engine = Engine(model, EOS, EngineConfig(num_blocks=64, block_size=4))
    engine.start()

    async def in_turn():
        out = []
        for salt in ("a", "b", "a", None):
            stream = engine.submit(prompt, SamplingParams(5, temperature=0), salt)
            out.append(([t async for t in stream], stream.cached_tokens))
        with pytest.raises(ValueError, match="salt must be a str"):
            engine.submit(prompt, SamplingParams(5, temperature=0), b"a")
        return out

    try:
        got = asyncio.run(in_turn())
    finally:
        engine.close()
    assert [c for _, c in got] == [0, 0, 28, 0], f"cached tokens under salts a, b, a, None: {got}"
    assert all(t == got[0][0] for t, _ in got), f"a salt changed the answer: {got}"


def test_run_serves_on_the_calling_thread_until_closed(model):
    """run() is the loop on the calling thread: requests from another thread get generate's answers,
    close() from there makes run() return, and a second run() (or run() after start()) is refused."""
    import threading

    engine = Engine(model, EOS, EngineConfig(num_blocks=64, block_size=4))
    requests, got = prompts(3, seed=5), {}

    def client():
        got["answers"] = asyncio.run(_ask_all(engine, requests, 6))
        got["thread"] = threading.current_thread()
        engine.close()

    asker = threading.Thread(target=client)
    asker.start()
    engine.run()  # returns once the client closes it
    asker.join()
    assert got["answers"] == [alone(model, p, 6) for p in requests]
    with pytest.raises(RuntimeError, match="already runs"):
        engine.run()
    started = Engine(model, EOS, EngineConfig(num_blocks=64, block_size=4))
    started.start()
    try:
        with pytest.raises(RuntimeError, match="already runs"):
            started.run()
    finally:
        started.close()
