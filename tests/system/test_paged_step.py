"""The fused int4-q8 step on the paged KV cache (solutions.system.kernels.paged_step) against the readable path.

Oracle: the same model with `fused_step = None` decoding an identical cache through PagedView's
gather (model.py's per-op path, the same Q8_1 products). As in test_fused_step.py the two differ only
by fp32 summation order: greedy tokens agree exactly and logits to a small fraction of their spread.
The native step's own promises are checked bit for bit: a row's logits do not depend on the rows
beside it, and one row on the pool is the contiguous cache's step.
"""

from __future__ import annotations

import pytest
import torch
from test_fused_step import q8_model  # pytest puts this folder on sys.path

from solutions.paged_kv import OutOfBlocksError, PagedKVCache
from solutions.system.kernels import fused_step, paged_step, streams

LENGTHS = [5, 9, 3, 16]  # prompts of each sequence: a part block, two, less than one, exactly four


@pytest.fixture(autouse=True)
def own_prefetch_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fused_step, "prefetch_file", lambda: tmp_path / "prefetch.json")
    monkeypatch.setattr(fused_step, "_calibrated", {})
    monkeypatch.setattr(streams, "streams_file", lambda: tmp_path / "streams.json")
    monkeypatch.setattr(streams, "_calibrated", {})


@pytest.fixture
def model(kernel, tmp_path):
    return q8_model(tmp_path)


def readable(model):
    """The model with its fused step taken away, for `with`."""

    class Off:
        def __enter__(self):
            self.saved, model.fused_step = model.fused_step, None

        def __exit__(self, *exc):
            model.fused_step = self.saved

    return Off()


def filled(model, lengths=LENGTHS, num_blocks=64, block_size=4, seed=0):
    """A paged cache holding one prefilled sequence per length (ids 0, 1, ...), prompts drawn from seed."""
    c = model.config
    cache = PagedKVCache(c.n_layers, c.n_kv_heads, c.head_dim, num_blocks, block_size)
    g = torch.Generator().manual_seed(seed)
    with readable(model):
        for i, n in enumerate(lengths):
            cache.add_sequence(i)
            model.prefill(torch.randint(0, c.vocab_size, (1, n), generator=g), cache.view([i]))
    return cache


def decode(model, cache, ids, seq_ids):
    view = cache.view(seq_ids)
    return model.decode_step(ids, view, view.attention_mask() if len(seq_ids) > 1 else None)  # (B, V)


def test_paged_batch_is_the_readable_batch(model):
    """Eight steps over four sequences of different lengths: the same greedy tokens, logits within 1%
    of their spread, every sequence one position longer a step, and the same keys and values in the pool."""
    fused, plain = filled(model), filled(model)
    seqs = list(range(len(LENGTHS)))
    ids = torch.tensor([3, 7, 11, 13])
    for step in range(8):
        got = decode(model, fused, ids, seqs)
        with readable(model):
            want = decode(model, plain, ids, seqs)
        spread = float(want.max() - want.min())
        assert got.shape == want.shape == (len(seqs), model.config.vocab_size)
        err = float((got - want).abs().max())
        assert err < 0.01 * spread, f"step {step}: paged fused logits off the readable path's by {err:.3g}"
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist(), f"step {step}: greedy tokens differ"
        lengths = [fused.num_tokens(s) for s in seqs]
        assert lengths == [n + step + 1 for n in LENGTHS], f"step {step}: lengths {lengths}"
        assert [fused.block_table(s) for s in seqs] == [plain.block_table(s) for s in seqs]
        ids = want.argmax(-1)
    for layer in range(model.config.n_layers):
        for s in seqs:
            got_kv, want_kv = torch.stack(fused.gather(s, layer)), torch.stack(plain.gather(s, layer))
            err = float((got_kv - want_kv).abs().max())
            assert err < 0.01 * float(want_kv.abs().max()), (
                f"layer {layer}, sequence {s}: the fused step's keys/values differ by {err:.3g}"
            )


def test_a_row_does_not_depend_on_its_batch(model):
    """Each sequence decoded alone gives bit for bit the logits it gets in the batch of four."""
    together, alone = filled(model), filled(model)
    ids = torch.tensor([3, 7, 11, 13])
    batch = decode(model, together, ids, [0, 1, 2, 3])
    for s in range(4):
        own = decode(model, alone, ids[s : s + 1], [s])
        assert torch.equal(own[0], batch[s]), f"sequence {s}'s logits change with the rows beside it"


def test_kv_prefetch_distance_changes_no_logit(model, kernel):
    """The paged attention's prefetch distance (measured at load) only moves memory traffic: a batch's
    logits are bit for bit the same at 0, 1, 3 and 4096 positions ahead (past every row's end), and a
    distance out of range is refused."""
    step, results = model.fused_step, []
    before = step.kv_distance
    try:
        for distance in (0, 1, 3, 4096):
            step.kv_distance = distance  # set before each step, as the calibrated one is
            results.append(decode(model, filled(model), torch.tensor([3, 7, 11, 13]), [0, 1, 2, 3]))
            assert kernel.module.kv_prefetch() == distance, "the step did not set its distance"
        for distance, got in zip((1, 3, 4096), results[1:]):
            assert torch.equal(results[0], got), f"prefetching {distance} positions ahead changed a logit"
        with pytest.raises(RuntimeError, match="0..4096 positions"):
            kernel.module.set_kv_prefetch(-1)
    finally:
        step.kv_distance = before
        kernel.module.set_kv_prefetch(before)


def test_one_row_on_the_pool_is_the_contiguous_step(model):
    """A sequence on the paged cache and the same prompt on the contiguous KVCache: the same bits."""
    prompt = torch.randint(0, model.config.vocab_size, (1, 11), generator=torch.Generator().manual_seed(3))
    cache = PagedKVCache(model.config.n_layers, model.config.n_kv_heads, model.config.head_dim, 16, 4)
    cache.add_sequence(0)
    flat = model.new_cache(1, 24)
    with readable(model):
        model.prefill(prompt, cache.view([0]))
        model.prefill(prompt, flat)
    token = torch.tensor([5])
    for step in range(6):
        paged, contiguous = decode(model, cache, token, [0]), model.decode_step(token, flat)
        assert torch.equal(paged, contiguous), f"step {step}: the paged step is not the contiguous one"
        token = paged.argmax(-1)


def test_forked_rows_copy_their_shared_block(model):
    """Two forks of one sequence sharing a part-filled block: each decodes into its own copy, the
    parent's keys stay as they were, and the answers are the readable path's."""
    fused, plain = filled(model, [6]), filled(model, [6])
    for cache in (fused, plain):
        cache.fork(0, 1)
    before = fused.gather(0, 0)[0].clone()
    ids = torch.tensor([9, 21])
    got = decode(model, fused, ids, [0, 1])
    with readable(model):
        want = decode(model, plain, ids, [0, 1])
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
    assert fused.block_table(0)[-1] != fused.block_table(1)[-1], "the forks still share their last block"
    assert torch.equal(fused.gather(0, 0)[0][:, :6], before), "a fork's write changed the parent's keys"
    assert float((got - want).abs().max()) < 0.01 * float(want.max() - want.min())


def test_declines_what_it_does_not_take(model):
    """No room in the pool, a pass half written, a mask not the view's own, a token outside the
    vocabulary: the fused step returns None and changes nothing, and the readable path decides."""
    c = model.config
    step = model.fused_step
    full = filled(
        model, [4, 4], num_blocks=2, block_size=4
    )  # both blocks full: the next position needs a third
    used = full.blocks_in_use
    view = full.view([0, 1])
    assert step(torch.tensor([1, 2]), view, view.attention_mask()) is None
    assert full.blocks_in_use == used and full.num_tokens(0) == 4, "a declined step took blocks"
    with pytest.raises(OutOfBlocksError):
        model.decode_step(torch.tensor([1, 2]), view, view.attention_mask())

    cache = filled(model, [5, 3])
    view = cache.view([0, 1])
    wrong = torch.ones(2, 6, dtype=torch.bool)  # pretends row 1 has no padding
    assert step(torch.tensor([1, 2]), view, wrong) is None
    assert step(torch.tensor([1, c.vocab_size]), view, view.attention_mask()) is None
    assert step(torch.tensor([[1], [2]]), view, view.attention_mask()) is None
    k = torch.zeros(1, c.n_kv_heads, 1, c.head_dim)
    cache.view([0]).update(0, k, k)  # layer 0 of a pass written, the others not
    assert step(torch.tensor([1]), cache.view([0]), None) is None
    assert [cache.num_tokens(s) for s in (0, 1)] == [5, 3]


@pytest.mark.parametrize("chunk", [paged_step.CHUNK, 5])
def test_paged_prefill_is_the_readable_prefill(model, monkeypatch, chunk):
    """A prompt in two prefills (13 tokens, then 9 after them), through native calls of at most `chunk`
    tokens: every position's logits within 1% of the readable path's spread, the same greedy tokens,
    the same keys and values; last_only gives the last position's logits alone."""
    monkeypatch.setattr(paged_step, "CHUNK", chunk)
    g = torch.Generator().manual_seed(7)
    parts = [torch.randint(0, model.config.vocab_size, (1, n), generator=g) for n in (13, 9)]
    fused, plain = filled(model, [], block_size=4), filled(model, [], block_size=4)
    for cache in (fused, plain):
        cache.add_sequence(0)
    for part in parts:
        got = model.prefill(part, fused.view([0]))
        with readable(model):
            want = model.prefill(part, plain.view([0]))
        assert got.shape == want.shape == (1, part.shape[1], model.config.vocab_size)
        spread = float(want.max() - want.min())
        err = float((got - want).abs().max())
        assert err < 0.01 * spread, f"paged prefill logits off the readable path's by {err:.3g}"
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist(), "greedy tokens differ"
    assert fused.num_tokens(0) == 22 and fused.block_table(0) == plain.block_table(0)
    for layer in range(model.config.n_layers):
        got_kv, want_kv = torch.stack(fused.gather(0, layer)), torch.stack(plain.gather(0, layer))
        assert float((got_kv - want_kv).abs().max()) < 0.01 * float(want_kv.abs().max()), f"layer {layer}"
    again = filled(model, [], block_size=4)
    again.add_sequence(0)
    model.prefill(parts[0], again.view([0]))
    last = model.prefill(parts[1], again.view([0]), last_only=True)
    assert last.shape == (1, 1, model.config.vocab_size)
    assert torch.equal(last[0, 0], got[0, -1]), "last_only is not the full prefill's last position"


def test_paged_prefill_declines_what_it_does_not_take(model):
    """Two rows, a padded mask, no room: None, nothing changed; the readable path then decides."""
    step = model.fused_step
    cache = filled(model, [3, 3], num_blocks=2, block_size=4)
    ids = torch.tensor([[1, 2]])
    assert step.prefill(torch.tensor([[1], [2]]), cache.view([0, 1]), None) is None, "two rows"
    wrong = torch.tensor([[False, True, True, True, True]])
    assert step.prefill(ids, cache.view([0]), wrong) is None, "a padded mask"
    assert step.prefill(ids, cache.view([0]), None) is None, "no block for positions 4-5"
    assert cache.num_tokens(0) == 3 and cache.blocks_in_use == 2
    with pytest.raises(OutOfBlocksError):
        model.prefill(ids, cache.view([0]))


def test_reserve_and_written_are_an_outside_writers_append():
    """PagedKVCache.reserve (what paged_step calls before the native step writes) covers the new positions,
    copying a block it shares first, and returns the lengths before them; with too few free blocks it
    returns None and changes nothing; a half-written pass is refused; written() then moves every layer on."""
    cache = PagedKVCache(2, 1, 4, 3, 4)  # 2 layers, 3 blocks of 4 positions
    cache.add_sequence(0)
    assert cache.reserve([0], 5) == [0] and len(cache.block_table(0)) == 2
    cache.written([0], 5)
    assert cache.num_tokens(0) == 5 and not cache.half_written(0)
    cache.fork(0, 1)  # shares both blocks; its next position starts in the shared second one
    assert cache.reserve([1], 8) is None, "two more blocks (a copy and a new one) fit a pool of one free"
    assert cache.block_table(1) == cache.block_table(0) and cache.allocator.num_free == 1
    assert cache.reserve([1], 2) == [5]
    assert cache.block_table(1)[0] == cache.block_table(0)[0], "the full first block stays shared"
    assert cache.block_table(1)[1] != cache.block_table(0)[1], (
        "the shared block it writes into was not copied"
    )
    cache.written([1], 2)
    cache.update(1, 0, torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))  # layer 0 only: a pass half written
    assert cache.half_written(1)
    with pytest.raises(ValueError, match="half written"):
        cache.reserve([1], 1)


def test_slots_read_through_the_block_table(model):
    """slots(): position p of a sequence is block table[p // block_size] * block_size + p % block_size."""
    cache = filled(model, [6, 2], block_size=4)
    table = paged_step.slots(cache, [0, 1], [7, 3])
    for row, s in enumerate((0, 1)):
        blocks = cache.block_table(s)
        for p in range(cache.num_tokens(s)):
            assert int(table[row, p]) == blocks[p // 4] * 4 + p % 4


def test_smollm2_engine_answers_are_the_readable_ones(kernel, smollm2_mode, smollm2_tokenizer):
    """SmolLM2 in the serving mode: three prompts decoded together on the paged cache by the fused step
    give the greedy tokens the readable path gives each of them alone on a contiguous cache."""
    model = smollm2_mode("int4-q8x2")
    assert isinstance(model.fused_step, fused_step.FusedStep)
    c = model.config
    prompts = [
        smollm2_tokenizer.encode(t) for t in ("The capital of France is", "1, 2, 3,", "Once upon a time")
    ]
    cache = PagedKVCache(c.n_layers, c.n_kv_heads, c.head_dim, 64, 16)
    first = []
    for i, p in enumerate(prompts):
        cache.add_sequence(i)
        first.append(int(model.prefill(torch.tensor([p]), cache.view([i]))[0, -1].argmax()))
    ids, got = torch.tensor(first), [[t] for t in first]
    for _ in range(12):
        ids = decode(model, cache, ids, [0, 1, 2]).argmax(-1)
        for row, t in zip(got, ids.tolist()):
            row.append(t)
    with readable(model):
        for p, tokens in zip(prompts, got):
            flat = model.new_cache(1, len(p) + 13)
            want = [int(model.prefill(torch.tensor([p]), flat)[0, -1].argmax())]
            for _ in range(12):
                want.append(int(model.decode_step(torch.tensor(want[-1:]), flat).argmax(-1)))
            assert tokens == want, f"{smollm2_tokenizer.decode(p)!r}: paged fused {tokens} != readable {want}"
