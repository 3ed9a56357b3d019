"""Hidden suite for the kv_cache kata: a static KV cache, alone and inside a tiny Llama.

The cache under test comes from the `kata` fixture; the model around it is the reference
(solutions.model.tiny_model, random weights), so a failure here is the cache's. The oracle for
every model property is a full recompute without a cache (`model(ids)`).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from dojo import seeds
from dojo.testing import expect_raises
from solutions.model import tiny_model

KATA = "kv_cache"

TOL = {"rtol": 1e-5, "atol": 1e-5}  # logits of cached vs recomputed runs


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def model(kata):
    """The reference tiny Llama (2 layers, 4 query heads, 2 KV heads, head_dim 16) on the kata's cache."""
    return tiny_model(seed=0, cache_cls=kata.KVCache)


def token_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=seeds.generator(seed))


def recompute(model, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, mask)


def max_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got - want).abs().max().item()


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.allclose(got, want, **TOL)


def raises(exc_type, fn, what: str) -> str:
    """Call fn, demand exc_type, return its message (digit groups' commas/underscores removed)."""
    return re.sub(r"(?<=\d)[,_](?=\d)", "", str(expect_raises(exc_type, fn, what)))


def kv(batch: int, heads: int, t: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = seeds.generator(seed)
    return torch.randn(batch, heads, t, dim, generator=g), torch.randn(batch, heads, t, dim, generator=g)


# --------------------------------------------------------------------------- README examples


@pytest.mark.example
def test_readme_bytes_example(kata):
    """bytes_needed: SmolLM2 holds 46,080 bytes of fp32 keys and values per token"""
    got = kata.KVCache.bytes_needed(30, 1, 3, 64, 1, torch.float32)
    assert got == 46_080, (
        f"bytes_needed(30 layers, batch 1, 3 kv heads, head_dim 64, 1 position, fp32): got {got}, want 46080"
    )
    got = kata.KVCache.bytes_needed(30, 1, 3, 64, 8192, torch.float16)
    assert got == 188_743_680, f"bytes_needed(30, 1, 3, 64, 8192 positions, fp16): got {got}, want 188743680"


@pytest.mark.example
@pytest.mark.points(2)
def test_readme_example(kata):
    """update returns every position cached so far; length moves on after the last layer writes"""
    cache = kata.KVCache(n_layers=2, batch_size=1, n_kv_heads=2, head_dim=4, max_len=8)
    k = torch.arange(24.0).reshape(1, 2, 3, 4)  # a prefill of 3 positions
    k_all, v_all = cache.update(0, k, -k)
    assert tuple(k_all.shape) == (1, 2, 3, 4), (
        f"prefill of 3 positions: got k shape {tuple(k_all.shape)}, want (1, 2, 3, 4)"
    )
    assert torch.equal(k_all, k) and torch.equal(v_all, -k), (
        "prefill: update must return exactly the keys and values written"
    )
    assert cache.length == 0, (
        f"after layer 0 of 2 wrote: length {cache.length}, want 0 (layer 1 has not written yet)"
    )
    cache.update(1, k, -k)
    assert cache.length == 3, f"after both layers wrote 3 positions: length {cache.length}, want 3"
    step = torch.full((1, 2, 1, 4), 100.0)  # a decode step
    k_all, v_all = cache.update(0, step, -step)
    assert tuple(k_all.shape) == (1, 2, 4, 4), (
        f"decode step after 3 cached: got k shape {tuple(k_all.shape)}, want (1, 2, 4, 4)"
    )
    assert torch.equal(k_all[:, :, :3], k) and torch.equal(k_all[:, :, 3:], step), (
        "decode step: keys must be the 3 cached positions followed by the new one"
    )
    assert torch.equal(v_all[:, :, 3:], -step), "decode step: the new value must follow the cached ones"


# --------------------------------------------------------------------------- the cache alone


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.builds_on("test_readme_example")
def test_update_returns_all_positions(kata, seed):
    """update returns this layer's keys and values so far, in order, for any chunk sizes"""
    g = seeds.generator(100 + seed)
    n_layers, batch, heads, dim, max_len = (
        3,
        2,
        2,
        4,
        16,
    )  # 5 chunks of 1..3: never full (test_cache_full checks that)
    chunks = [int(torch.randint(1, 4, (), generator=g)) for _ in range(5)]
    cache = kata.KVCache(n_layers, batch, heads, dim, max_len)
    want_k = [torch.empty(batch, heads, 0, dim) for _ in range(n_layers)]
    want_v = [torch.empty(batch, heads, 0, dim) for _ in range(n_layers)]
    for step, t in enumerate(chunks):
        for layer in range(n_layers):
            k, v = kv(batch, heads, t, dim, seed=1000 * seed + 10 * step + layer)
            want_k[layer] = torch.cat([want_k[layer], k], dim=2)
            want_v[layer] = torch.cat([want_v[layer], v], dim=2)
            got_k, got_v = cache.update(layer, k, v)
            ok = close(got_k, want_k[layer]) and close(got_v, want_v[layer])
            assert ok, (
                f"chunks {chunks[: step + 1]}, layer {layer}: update returned k {tuple(got_k.shape)}, "
                f"want the {want_k[layer].shape[2]} positions written so far, in order"
            )


@pytest.mark.builds_on("test_update_returns_all_positions")
def test_length_moves_after_last_layer(kata):
    """length moves on only once every layer has written the new positions"""
    r = seeds.rng(220)
    n_layers, chunks = r.randint(2, 4), [r.randint(2, 5), 1, r.randint(1, 3)]  # a prefill, then steps
    cache, before = kata.KVCache(n_layers, 1, 1, 2, sum(chunks) + r.randint(1, 4)), 0  # never full here
    for t in chunks:
        for layer in range(n_layers):
            assert cache.length == before, (
                f"writing {t} positions after {before}: length {cache.length} before layer {layer} writes, "
                f"want {before} until all {n_layers} layers have written"
            )
            cache.update(layer, *kv(1, 1, t, 2, seed=layer))
        assert cache.length == before + t, (
            f"after all {n_layers} layers wrote {t} after {before}: length {cache.length}, want {before + t}"
        )
        before += t


@pytest.mark.builds_on("test_update_returns_all_positions")
def test_layer_cannot_run_ahead(kata):
    """a layer writing twice before the others caught up is a ValueError"""
    cache = kata.KVCache(2, 1, 1, 2, 8)
    cache.update(0, *kv(1, 1, 2, 2, seed=0))
    raises(
        ValueError,
        lambda: cache.update(0, *kv(1, 1, 1, 2, seed=1)),
        "layer 0 writes again before layer 1 wrote the first 2 positions",
    )


@pytest.mark.points(2)
@pytest.mark.candidate_process  # buffer addresses exist only in the process that holds the buffers
@pytest.mark.builds_on("test_update_returns_all_positions")
def test_update_writes_in_place(kata):
    """update returns views of buffers allocated once: their storage never moves"""
    n_layers = 2
    cache = kata.KVCache(n_layers, 2, 2, 4, 16)
    nbytes = cache.nbytes
    seen: dict[tuple[int, str], set[int]] = {}
    keep = []  # hold every returned tensor, so no address can be recycled
    for step, t in enumerate([5, 1, 1, 1, 1]):
        for layer in range(n_layers):
            k_all, v_all = cache.update(layer, *kv(2, 2, t, 4, seed=10 * step + layer))
            keep += [k_all, v_all]
            seen.setdefault((layer, "k"), set()).add(k_all.data_ptr())
            seen.setdefault((layer, "v"), set()).add(v_all.data_ptr())
    for (layer, name), ptrs in seen.items():
        assert len(ptrs) == 1, (
            f"layer {layer} {name}: update returned tensors at {len(ptrs)} different addresses over "
            "a prefill and 4 decode steps; want views of one preallocated buffer (no concatenation)"
        )
    assert cache.nbytes == nbytes, (
        f"nbytes changed from {nbytes} to {cache.nbytes} while decoding: allocate the buffers once, when the cache is "
        "made, sized from its own n_kv_heads, head_dim and max_len (not from the first k written)"
    )


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.builds_on("test_update_writes_in_place")
def test_bytes_needed_formula(kata, dtype):
    """bytes_needed is 2 * layers * batch * kv heads * head_dim * max_len * itemsize, and nbytes agrees"""
    itemsize = torch.tensor([], dtype=dtype).element_size()
    r = seeds.rng(200 + DTYPES.index(dtype))
    shapes = [
        (r.randint(1, 4), r.randint(1, 4), r.randint(1, 4), r.randint(1, 32), r.randint(1, 64)) for _ in "ab"
    ]
    for shape in [(1, 1, 1, 1, 1), *shapes]:
        L, B, H, D, T = shape
        want = 2 * L * B * H * D * T * itemsize
        got = kata.KVCache.bytes_needed(L, B, H, D, T, dtype)
        assert got == want, f"bytes_needed{shape + (dtype,)}: got {got}, want {want}"
        cache = kata.KVCache(L, B, H, D, T, dtype=dtype)
        assert cache.nbytes == want, f"KVCache{shape} {dtype}: nbytes {cache.nbytes}, want {want}"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions")
def test_reorder_reaches_every_layer(kata):
    """reorder(index) makes row i of every layer's keys and values the old row index[i]"""
    n_layers, batch = 3, 3
    cache = kata.KVCache(n_layers, batch, 2, 4, 8)
    written = [kv(batch, 2, 3, 4, seed=layer) for layer in range(n_layers)]
    for layer, (k, v) in enumerate(written):
        cache.update(layer, k, v)
    r = seeds.rng(221)
    index = torch.tensor([r.randrange(batch) for _ in range(batch)])
    while index.tolist() == list(range(batch)):
        index = torch.tensor([r.randrange(batch) for _ in range(batch)])  # not the identity
    shown = index.tolist()
    cache.reorder(index)
    assert cache.length == 3, f"reorder changed length from 3 to {cache.length}"
    for layer, (k, v) in enumerate(written):
        new_k, new_v = kv(batch, 2, 1, 4, seed=50 + layer)
        got_k, got_v = cache.update(layer, new_k, new_v)
        want_k = torch.cat([k[index], new_k], dim=2)
        want_v = torch.cat([v[index], new_v], dim=2)
        assert close(got_k, want_k), (
            f"after reorder({shown}), layer {layer} keys: rows not reordered (or new step lost)"
        )
        assert close(got_v, want_v), (
            f"after reorder({shown}), layer {layer} values: rows not reordered (or new step lost)"
        )


@pytest.mark.builds_on("test_update_returns_all_positions")
def test_reorder_rejects_bad_index(kata):
    """reorder rejects an index of the wrong shape, dtype or range with ValueError"""
    r = seeds.rng(222)
    B = r.randint(2, 4)
    cache = kata.KVCache(1, B, 1, 2, 4)
    cache.update(0, *kv(B, 1, 1, 2, seed=0))
    rows = [r.randrange(B) for _ in range(B)]
    longer, past = rows + [r.randrange(B)], list(rows)
    past[r.randrange(B)] = B + r.randint(0, 3)
    raises(
        ValueError,
        lambda: cache.reorder(torch.tensor(longer)),
        f"reorder with {B + 1} rows for a batch of {B}",
    )
    raises(ValueError, lambda: cache.reorder(torch.tensor(past)), f"reorder({past}) for a batch of {B}")
    raises(
        ValueError,
        lambda: cache.reorder(torch.tensor(rows, dtype=torch.float32)),
        "reorder with a float index",
    )


@pytest.mark.builds_on("test_update_returns_all_positions")
def test_truncate_rejects_bad_length(kata):
    """truncate accepts 0..length and rejects anything else with ValueError"""
    r = seeds.rng(223)
    n = r.randint(2, 6)
    cache = kata.KVCache(1, 1, 1, 2, 8)
    cache.update(0, *kv(1, 1, n, 2, seed=0))
    over, under, keep = n + r.randint(1, 3), -r.randint(1, 3), r.randint(1, n - 1)
    raises(ValueError, lambda: cache.truncate(over), f"truncate({over}) with {n} positions cached")
    raises(ValueError, lambda: cache.truncate(under), f"truncate({under})")
    cache.truncate(n)
    assert cache.length == n, (
        f"truncate({n}) with {n} cached: length {cache.length}, want {n} (truncate(n) keeps the first n)"
    )
    cache.truncate(keep)
    assert cache.length == keep, f"truncate({keep}): length {cache.length}, want {keep}"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions")
def test_cache_full(kata):
    """writing past max_len raises CacheFullError (a ValueError) naming the lengths; a full cache works"""
    assert issubclass(kata.CacheFullError, ValueError), "CacheFullError must subclass ValueError"
    r = seeds.rng(224)
    prefill, steps = r.randint(2, 6), r.randint(1, 3)
    full = prefill + steps
    cache = kata.KVCache(2, 1, 1, 2, full)
    for t in [prefill] + [1] * steps:  # fills all positions exactly
        for layer in range(2):
            k_all, _ = cache.update(layer, *kv(1, 1, t, 2, seed=layer))
    assert cache.length == full, (
        f"prefill {prefill} + {steps} decode steps with max_len {full}: length {cache.length}, want {full}"
    )
    assert k_all.shape[2] == full, (
        f"the write that fills max_len {full} returned {k_all.shape[2]} positions, want {full}"
    )
    msg = raises(
        kata.CacheFullError,
        lambda: cache.update(0, *kv(1, 1, 1, 2, seed=9)),
        f"position {full + 1} with max_len {full}",
    )
    assert str(full) in msg, f"CacheFullError should name max_len {full}; message: {msg!r}"
    assert cache.length == full, f"a refused write changed length from {full} to {cache.length}"
    empty, big = kata.KVCache(1, 1, 1, 2, full), full + r.randint(1, 3)
    msg = raises(
        kata.CacheFullError,
        lambda: empty.update(0, *kv(1, 1, big, 2, seed=0)),
        f"a prefill of {big} with max_len {full}",
    )
    assert str(big) in msg and str(full) in msg, (
        f"CacheFullError should name {big} and max_len {full}; message: {msg!r}"
    )


def test_max_bytes(kata):
    """max_bytes below bytes_needed raises ValueError naming both numbers; exactly enough is fine"""
    r = seeds.rng(210)
    shape = (
        r.randint(1, 32),
        r.randint(1, 8),
        r.randint(1, 4),
        r.choice([16, 32, 64, 128]),
        r.randint(1, 4096),
    )
    need = 2 * math.prod(shape) * 4
    msg = raises(
        ValueError,
        lambda: kata.KVCache(*shape, max_bytes=need - 1),
        f"KVCache{shape} with max_bytes={need - 1}",
    )
    assert str(need) in msg and str(need - 1) in msg, (
        f"the error should name the {need} bytes needed and max_bytes {need - 1}; message: {msg!r}"
    )
    small = (r.randint(1, 3), r.randint(1, 2), r.randint(1, 2), r.choice([2, 4, 8]), r.randint(1, 16))
    kata.KVCache(*small, max_bytes=2 * math.prod(small) * 4)  # exactly enough


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_writes_in_place")
def test_rejects_bad_updates(kata):
    """update rejects a bad layer and k/v of the wrong shape or dtype with ValueError"""
    r = seeds.rng(211)
    L, B, H, D, t = r.randint(1, 3), r.randint(1, 3), r.randint(1, 3), r.choice([2, 4, 8]), r.randint(1, 4)
    cache = kata.KVCache(L, B, H, D, 8)
    layer = r.randrange(L)
    good = torch.randn(B, H, t, D, generator=seeds.generator(212))
    q_heads = H * r.randint(2, 4)

    def like(*shape):
        return torch.randn(*shape, generator=seeds.generator(213))

    cases = {
        f"layer -{1 + layer}": (-1 - layer, good, good),
        f"layer {L + layer} of {L}": (L + layer, good, good),
        f"k {(B, H, t, D)} with v {(B, H, t + 1, D)}": (layer, good, like(B, H, t + 1, D)),
        f"batch {B + 1} for a batch-{B} cache": (layer, like(B + 1, H, t, D), like(B + 1, H, t, D)),
        f"{q_heads} heads (query heads?) for a {H}-kv-head cache": (
            layer,
            like(B, q_heads, t, D),
            like(B, q_heads, t, D),
        ),
        f"head_dim {2 * D} for head_dim {D}": (layer, like(B, H, t, 2 * D), like(B, H, t, 2 * D)),
        "3-D k and v": (layer, like(B, H, D), like(B, H, D)),
        "float64 k and v for a float32 cache": (layer, good.double(), good.double()),
    }
    for what, (layer, k, v) in cases.items():
        raises(ValueError, lambda layer=layer, k=k, v=v: cache.update(layer, k, v), f"update with {what}")
    assert cache.length == 0, f"rejected updates changed length to {cache.length}"


# --------------------------------------------------------------------------- inside the model


@pytest.mark.points(3)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.builds_on("test_update_returns_all_positions", "test_length_moves_after_last_layer")
def test_decode_matches_recompute(kata, model, seed):
    """prefill plus N decode steps gives the same logits as a full recompute at every step"""
    ids = token_ids(2, 10, seed)
    want = recompute(model, ids)
    cache = model.new_cache(2, 16)
    got = model.prefill(ids[:, :4], cache)
    assert close(got, want[:, :4]), (
        f"prefill of 4 tokens: logits differ from recompute by {max_diff(got, want[:, :4]):.2e}"
    )
    for t in range(4, 10):
        got = model.decode_step(ids[:, t], cache)
        assert close(got, want[:, t]), (
            f"prefill 4 then decode: step at position {t} differs from full recompute by "
            f"{max_diff(got, want[:, t]):.2e}"
        )
        assert cache.length == t + 1, f"after decoding position {t}: length {cache.length}, want {t + 1}"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions", "test_length_moves_after_last_layer")
def test_chunked_prefill_matches_one_prefill(kata, model):
    """prefill in chunks [3, 1, 4, 2] gives the logits of one prefill of all 10 tokens"""
    ids = token_ids(2, 11, seed=3)
    whole = model.prefill(ids[:, :10], model.new_cache(2, 12))
    cache, start = model.new_cache(2, 12), 0
    for t in [3, 1, 4, 2]:
        got = model.prefill(ids[:, start : start + t], cache)
        want = whole[:, start : start + t]
        assert close(got, want), (
            f"chunks [3, 1, 4, 2]: chunk at positions {start}..{start + t - 1} differs from "
            f"one prefill by {max_diff(got, want):.2e}"
        )
        start += t
    got, want = model.decode_step(ids[:, 10], cache), recompute(model, ids)[:, 10]
    assert close(got, want), (
        f"decode after chunked prefill differs from recompute by {max_diff(got, want):.2e}"
    )


@pytest.mark.builds_on("test_readme_example")
def test_stores_kv_heads(kata, model):
    """the model's cache stores its 2 KV heads, not its 4 query heads"""
    shapes = []

    class Spy:
        """The kata's cache, with every update's returned shape noted on the way out."""

        def __init__(self, cache):
            self.cache = cache

        def update(self, layer, k, v):
            k_all, v_all = self.cache.update(layer, k, v)
            shapes.append(tuple(k_all.shape))
            return k_all, v_all

        def __getattr__(self, name):
            return getattr(self.cache, name)

    c = model.config
    cache = Spy(kata.KVCache(c.n_layers, 1, c.n_kv_heads, c.head_dim, 8))
    model.prefill(token_ids(1, 3), cache)
    assert shapes and all(s[1] == c.n_kv_heads for s in shapes), (
        f"cached keys have shapes {shapes}, want {c.n_kv_heads} heads (the KV heads; query heads are {c.n_heads})"
    )
    want = 2 * c.n_layers * 1 * c.n_kv_heads * c.head_dim * 8 * 4
    assert cache.nbytes == want, (
        f"nbytes {cache.nbytes}, want {want}: {c.n_kv_heads} kv heads x head_dim {c.head_dim} x 8"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_reorder_reaches_every_layer", "test_decode_matches_recompute")
def test_reorder_matches_reordered_batch(kata, model):
    """after reorder(index), decoding equals a fresh run on the reordered rows (beam search)"""
    ids = token_ids(3, 6, seed=4)
    index = torch.tensor([2, 2, 0])
    nxt = torch.tensor([7, 8, 9])
    cache = model.new_cache(3, 8)
    model.prefill(ids, cache)
    cache.reorder(index)
    got = model.decode_step(nxt, cache)
    want = recompute(model, torch.cat([ids[index], nxt[:, None]], dim=1))[:, -1]
    assert close(got, want), (
        f"prefill 3 rows, reorder([2, 2, 0]), decode one step: logits differ from a fresh run "
        f"on rows [2, 2, 0] by {max_diff(got, want):.2e}"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_truncate_rejects_bad_length", "test_decode_matches_recompute")
def test_truncate_then_redecode(kata, model):
    """truncate(n) then decoding new tokens equals a fresh run on the first n tokens plus the new ones"""
    ids = token_ids(2, 9, seed=5)
    cache = model.new_cache(2, 12)
    model.prefill(ids[:, :6], cache)
    for t in range(6, 9):
        model.decode_step(ids[:, t], cache)  # speculative tokens, about to be rejected
    cache.truncate(7)
    assert cache.length == 7, f"truncate(7) after 9 positions: length {cache.length}, want 7"
    new = token_ids(2, 3, seed=6)
    redo = torch.cat([ids[:, :7], new], dim=1)
    want = recompute(model, redo)
    for i in range(3):
        got = model.decode_step(new[:, i], cache)
        assert close(got, want[:, 7 + i]), (
            f"9 positions, truncate(7), re-decode: position {7 + i} differs from a "
            f"fresh run by {max_diff(got, want[:, 7 + i]):.2e}"
        )
    cache.truncate(0)
    got = model.prefill(redo[:, :4], cache)
    assert close(got, want[:, :4]), (
        f"truncate(0) then prefill differs from a fresh run by {max_diff(got, want[:, :4]):.2e}"
    )


@pytest.mark.builds_on("test_cache_full")
def test_model_refuses_overflow(kata, model):
    """a prefill past the cache's max_len raises CacheFullError"""
    cache = model.new_cache(1, 6)
    model.prefill(token_ids(1, 4), cache)
    raises(
        kata.CacheFullError, lambda: model.prefill(token_ids(1, 3), cache), "4 cached + 3 new with max_len 6"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_decode_matches_recompute")
def test_left_padded_batch_matches_rows_alone(kata, model):
    """a left-padded batch, prefilled and decoded, gives each row the logits it gets alone"""
    a, b = token_ids(1, 3, seed=7)[0], token_ids(1, 6, seed=8)[0]
    pad = 2  # pad == eos in SmolLM2: the mask, not the token, marks padding
    ids = torch.stack([torch.cat([torch.full((3,), pad), a]), b])  # (2, 6), row 0 left-padded
    mask = torch.tensor([[False] * 3 + [True] * 3, [True] * 6])
    steps = token_ids(2, 3, seed=9)
    cache = model.new_cache(2, 10)
    got = [model.prefill(ids, cache, mask)[:, -1]]
    for i in range(3):
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        got.append(model.decode_step(steps[:, i], cache, mask))
    for row, prompt in enumerate([a, b]):
        alone = recompute(model, torch.cat([prompt, steps[row]])[None])[0]  # (T, V)
        for i, logits in enumerate(got):
            want = alone[len(prompt) - 1 + i]
            assert close(logits[row], want), (
                f"row {row} (prompt of {len(prompt)} tokens{', left-padded by 3' if row == 0 else ''}), step {i}: "
                f"logits differ from the row alone by {max_diff(logits[row], want):.2e}"
            )
