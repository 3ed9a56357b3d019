"""The engine's prefix-caching paged cache (solutions.system.serving.prefix_kv) on the tiny model.

A sequence started on a cached prefix holds that prefix's keys and values, so prefilling only the rest
gives the logits a prefill of the whole prompt gives; the allocator keeps freed full blocks, evicts
them least recently freed and tail first, and only when no plain block is left; a salt keeps two
tenants' prefixes apart.
"""

from __future__ import annotations

import pytest
import torch

from solutions.model import tiny_model
from solutions.system.serving.prefix_kv import CachingPagedKVCache


def cache_for(model, num_blocks: int = 32, block_size: int = 4) -> CachingPagedKVCache:
    c = model.config
    return CachingPagedKVCache(c.n_layers, c.n_kv_heads, c.head_dim, num_blocks, block_size)


def prefill(model, cache, seq: int, tokens: list[int]) -> torch.Tensor:
    """Prefill `tokens` after what `seq` holds; the last position's logits (V,)."""
    return model.prefill(torch.tensor([tokens]), cache.view([seq]), last_only=True)[0, -1]


def test_a_cached_prefix_gives_the_same_logits_as_a_full_prefill():
    """prompt B shares A's first 3 blocks: started on them, B prefills 2 tokens, and its logits and next
    decode step equal a fresh cache's prefill of all of B"""
    torch.manual_seed(0)
    model = tiny_model(0)
    a = torch.randint(0, 256, (14,)).tolist()
    b = a[:12] + [7, 9]
    cache = cache_for(model)
    assert cache.start(0, a) == 0
    prefill(model, cache, 0, a)
    cache.publish(0, a)
    cache.free(0)
    assert cache.allocator.num_cached == 3 and cache.blocks_in_use == 0
    assert cache.start(1, b) == 12
    got = prefill(model, cache, 1, b[12:])
    cache.publish(1, b)
    fresh = cache_for(model)
    fresh.add_sequence(0)
    want = prefill(model, fresh, 0, b)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    step = int(want.argmax())
    got2 = model.decode_step(torch.tensor([step]), cache.view([1]))[0]
    want2 = model.decode_step(torch.tensor([step]), fresh.view([0]))[0]
    torch.testing.assert_close(got2, want2, rtol=1e-5, atol=1e-5)


def test_the_last_prompt_token_is_always_computed():
    """a prompt that is all cached blocks still leaves its last block to compute"""
    model = tiny_model(0)
    cache = cache_for(model)
    a = list(range(12))
    cache.start(0, a)
    prefill(model, cache, 0, a)
    cache.publish(0, a)
    assert cache.start(1, a) == 8 and cache.num_tokens(1) == 8


def test_freed_blocks_are_evicted_least_recently_freed_and_tail_first():
    """a pool of 4 blocks of 2: A's two full blocks freed, then B's; a 3-block prompt takes the plain
    block, then A's tail; A's head still hits"""
    model = tiny_model(0)
    cache = cache_for(model, num_blocks=6, block_size=2)
    a, b = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10]
    for seq, tokens in ((0, a), (1, b)):
        cache.start(seq, tokens)
        prefill(model, cache, seq, tokens)
        cache.publish(seq, tokens)
    cache.free(0)
    cache.free(1)
    assert (cache.allocator.num_free, cache.allocator.num_cached) == (6, 4)
    cache.start(2, [20, 21, 22, 23, 24])
    prefill(model, cache, 2, [20, 21, 22, 23, 24])  # 3 blocks: 2 plain, then A's tail evicted
    assert cache.allocator.num_cached == 3
    assert cache.start(3, a[:4] + [0]) == 2  # A's head survives its tail
    assert cache.start(4, b[:4] + [0]) == 4  # B untouched


def test_a_salt_keeps_two_tenants_prefixes_apart():
    """a prompt published under salt "a" is found again only under "a": not under "b", None or ""
    (each its own namespace, as the prefix_cache kata's salt)"""
    model = tiny_model(0)
    cache = cache_for(model)
    a = list(range(20, 34))
    cache.start(0, a, salt="a")
    prefill(model, cache, 0, a)
    cache.publish(0, a, salt="a")
    cache.free(0)
    found = {salt: cache.start(seq, a, salt=salt) for seq, salt in enumerate(("b", None, "", "a"), 1)}
    assert found == {"b": 0, None: 0, "": 0, "a": 12}, f"cached tokens found per salt: {found}"


def test_one_sequence_keeps_the_salt_it_was_opened_under():
    """publishing a sequence under another salt than it was opened under, or a salt that is not a str,
    is a ValueError naming the salt"""
    cache = cache_for(tiny_model(0))
    a = list(range(8))
    cache.start(0, a, salt="a")
    with pytest.raises(ValueError, match="opened under salt 'a', not 'b'"):
        cache.publish(0, a, salt="b")
    with pytest.raises(ValueError, match="salt must be a str or None"):
        cache.start(1, a, salt=5)
