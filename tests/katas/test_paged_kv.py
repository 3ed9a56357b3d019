"""Hidden suite for the paged_kv kata: a block allocator, a paged KV cache and its batch view.

The allocator and the cache are checked alone against a plain oracle written here (`Oracle`: each
sequence's keys and values as one tensor per layer, and an id per physical block that forks share
and a write into a shared block replaces), then inside the reference tiny Llama
(solutions.model.tiny_model, random weights) against the contiguous cache of the kv_cache kata
(solutions.kv_cache.KVCache): the same logits, step by step. A failure here is the paged cache's.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from dojo import seeds
from dojo.testing import expect_raises
from solutions.kv_cache import KVCache
from solutions.model import tiny_model

KATA = "paged_kv"

TOL = {"rtol": 1e-5, "atol": 1e-5}  # logits of paged vs contiguous runs
SETTINGS = seeds.hypothesis_settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def model(one_thread):
    """The reference tiny Llama (2 layers, 4 query heads, 2 KV heads, head_dim 16)."""
    return tiny_model(seed=0)


def paged(kata, model, num_blocks: int, block_size: int):
    c = model.config
    return kata.PagedKVCache(c.n_layers, c.n_kv_heads, c.head_dim, num_blocks, block_size)


def raises(exc_type, fn, what: str) -> str:
    """Call fn, demand exc_type, return its message (digit groups' commas/underscores removed)."""
    return re.sub(r"(?<=\d)[,_](?=\d)", "", str(expect_raises(exc_type, fn, what)))


def kv(heads: int, t: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = seeds.generator(seed)
    return torch.randn(heads, t, dim, generator=g), torch.randn(heads, t, dim, generator=g)


def append(cache, seq: int, n_layers: int, t: int, seed: int, heads: int = 1, dim: int = 2):
    """Append t positions to `seq` in every layer; the (k, v) written per layer."""
    written = [kv(heads, t, dim, seed=1000 * seed + layer) for layer in range(n_layers)]
    for layer, (k, v) in enumerate(written):
        cache.update(seq, layer, k, v)
    return written


def token_ids(length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (length,), generator=seeds.generator(seed))


def contiguous_logits(model, prompt: torch.Tensor, steps: torch.Tensor) -> list[torch.Tensor]:
    """The contiguous cache's logits: the prompt's last position, then one per decode step, each (V,)."""
    cache = model.new_cache(1, len(prompt) + len(steps) + 1)  # solutions.kv_cache.KVCache
    assert isinstance(cache, KVCache)
    out = [model.prefill(prompt[None], cache)[0, -1]]
    out += [model.decode_step(t.view(1), cache)[0] for t in steps]
    return out


def max_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got - want).abs().max().item()


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.allclose(got, want, **TOL)


class Oracle:
    """What a paged cache must hold, written plainly: each sequence's keys and values per layer as one
    tensor, and its blocks as ids that forks share and a write into a shared block replaces."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int):
        self.n_layers, self.num_blocks, self.bs = n_layers, num_blocks, block_size
        self.k: dict[int, list[torch.Tensor]] = {}
        self.v: dict[int, list[torch.Tensor]] = {}
        self.blocks: dict[int, list[int]] = {}
        self.refs: Counter = Counter()
        self.ids = iter(range(10**9))

    def add(self, s: int) -> None:
        self.k[s] = [torch.empty(1, 0, 2) for _ in range(self.n_layers)]
        self.v[s] = [torch.empty(1, 0, 2) for _ in range(self.n_layers)]
        self.blocks[s] = []

    def tokens(self, s: int) -> int:
        return self.k[s][0].shape[1]

    def needed(self, s: int, t: int) -> int:
        """Blocks an append of t to s takes from the pool: new ones, plus a copy of a shared last block."""
        n, table = self.tokens(s), self.blocks[s]
        cow = n % self.bs != 0 and self.refs[table[-1]] > 1
        return math.ceil((n + t) / self.bs) - len(table) + cow

    def in_use(self) -> int:
        return sum(1 for c in self.refs.values() if c > 0)

    def append(self, s: int, written) -> None:
        n, table = self.tokens(s), self.blocks[s]
        if n % self.bs and self.refs[table[-1]] > 1:  # copy on write
            self.refs[table[-1]] -= 1
            table[-1] = next(self.ids)
            self.refs[table[-1]] = 1
        t = written[0][0].shape[1]
        while len(table) < math.ceil((n + t) / self.bs):
            table.append(next(self.ids))
            self.refs[table[-1]] = 1
        for layer, (k, v) in enumerate(written):
            self.k[s][layer] = torch.cat([self.k[s][layer], k], dim=1)
            self.v[s][layer] = torch.cat([self.v[s][layer], v], dim=1)

    def fork(self, p: int, c: int) -> None:
        self.k[c], self.v[c], self.blocks[c] = list(self.k[p]), list(self.v[p]), list(self.blocks[p])
        for b in self.blocks[c]:
            self.refs[b] += 1

    def free(self, s: int) -> None:
        for b in self.blocks.pop(s):
            self.refs[b] -= 1
        del self.k[s], self.v[s]


def check_sharing(cache, oracle: Oracle, history: str) -> None:
    """The cache's block tables share exactly the blocks the oracle's share, and refcounts count tables."""
    tables = {s: cache.block_table(s) for s in oracle.blocks}
    mine, theirs = {}, {}
    for s, table in tables.items():
        want = oracle.blocks[s]
        assert len(table) == len(want), (
            f"{history}: sequence {s} holds {oracle.tokens(s)} tokens in blocks of {oracle.bs}: "
            f"its block table has {len(table)} blocks, want ceil = {len(want)}"
        )
        for j, (b, w) in enumerate(zip(table, want)):
            assert mine.setdefault(b, w) == w and theirs.setdefault(w, b) == b, (
                f"{history}: block {j} of sequence {s} (physical {b}) is shared where it must not be, or "
                "not shared where it must be (forks share blocks until one writes into a shared one)"
            )
    holders = Counter(b for table in tables.values() for b in table)
    for b, count in holders.items():
        got = cache.allocator.refcount(b)
        assert got == count, f"{history}: block {b} is in {count} block tables but has reference count {got}"


# --------------------------------------------------------------------------- the allocator


@pytest.mark.points(2)
def test_allocator_hands_out_each_block_once(kata):
    """allocate hands out every block once, counts down num_free, and raises OutOfBlocksError when empty"""
    assert issubclass(kata.OutOfBlocksError, RuntimeError), "OutOfBlocksError must subclass RuntimeError"
    rng = seeds.rng(7001)
    n = rng.randint(3, 9)
    pool = kata.BlockAllocator(n)
    got = [pool.allocate() for _ in range(n)]
    assert sorted(got) == list(range(n)), (
        f"{n} allocations from a pool of {n} gave {got}, want each of 0..{n - 1} once"
    )
    assert pool.num_free == 0, f"all {n} blocks allocated: num_free {pool.num_free}, want 0"
    raises(kata.OutOfBlocksError, pool.allocate, f"allocate with all {n} blocks in use")
    back = got[rng.randrange(n)]
    pool.release(back)
    assert pool.num_free == 1, f"release one of {n}: num_free {pool.num_free}, want 1"
    again = pool.allocate()
    assert again == back, f"the only free block is {back}, but allocate gave {again}"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_allocator_hands_out_each_block_once")
def test_allocator_refcounts_and_double_free(kata):
    """a shared block is freed by its last release; a double free or a bad id is a ValueError"""
    rng = seeds.rng(7002)
    n, shares = rng.randint(3, 8), rng.randint(2, 4)
    pool = kata.BlockAllocator(n)
    held = [pool.allocate() for _ in range(rng.randrange(n))]  # other blocks in use
    b = pool.allocate()
    for _ in range(shares):
        pool.share(b)
    pool.release(b)
    free = n - len(held) - 1  # the blocks neither held nor b
    assert (pool.refcount(b), pool.num_free) == (shares, free), (
        f"pool of {n}, {len(held)} other blocks in use, allocate, share x{shares}, release: "
        f"refcount {pool.refcount(b)}, num_free {pool.num_free}; want {shares}, {free}"
    )
    for _ in range(shares):
        pool.release(b)
    assert (pool.refcount(b), pool.num_free) == (0, free + 1), (
        f"the last release: refcount {pool.refcount(b)}, num_free {pool.num_free}; want 0, {free + 1}"
    )
    raises(ValueError, lambda: pool.release(b), "release of a free block (a double free)")
    assert pool.num_free == free + 1, (
        f"a refused double free changed num_free to {pool.num_free}, want {free + 1}"
    )
    raises(ValueError, lambda: pool.share(b), "share of a free block")
    for h in held:
        pool.release(h)
    for bad in (-1, n):
        raises(ValueError, lambda bad=bad: pool.release(bad), f"release({bad}) in a pool of {n}")
        raises(ValueError, lambda bad=bad: pool.refcount(bad), f"refcount({bad}) in a pool of {n}")
    got = sorted(pool.allocate() for _ in range(n))
    assert got == list(range(n)), (
        f"after the refused double free, {n} allocations gave {got}, want each block once"
    )


@pytest.mark.example
@pytest.mark.builds_on("test_allocator_hands_out_each_block_once", "test_allocator_refcounts_and_double_free")
def test_readme_allocator_example(kata):
    """allocate gives reference count 1; share adds one; release drops one and frees the block at 0"""
    pool = kata.BlockAllocator(num_blocks=4)
    b = pool.allocate()
    assert (pool.refcount(b), pool.num_free) == (1, 3), (
        f"after one allocate of 4 blocks: refcount {pool.refcount(b)}, num_free {pool.num_free}; want 1, 3"
    )
    pool.share(b)
    assert pool.refcount(b) == 2, f"allocate then share: refcount {pool.refcount(b)}, want 2"
    pool.release(b)
    pool.release(b)
    assert (pool.refcount(b), pool.num_free) == (0, 4), (
        f"allocate, share, release, release: refcount {pool.refcount(b)}, num_free {pool.num_free}; want 0, 4"
    )


# --------------------------------------------------------------------------- the cache alone


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1])
def test_update_returns_all_positions(kata, seed):
    """update appends to one sequence and returns that layer's positions so far, in order, across blocks"""
    g = seeds.generator(seed)
    n_layers, heads, dim = 2, 2, 3
    cache = kata.PagedKVCache(n_layers, heads, dim, num_blocks=12, block_size=3)
    cache.add_sequence(7)
    chunks = [int(torch.randint(1, 6, (), generator=g)) for _ in range(6)]
    want = [(torch.empty(heads, 0, dim), torch.empty(heads, 0, dim)) for _ in range(n_layers)]
    for step, t in enumerate(chunks):
        for layer in range(n_layers):
            k, v = kv(heads, t, dim, seed=100 * seed + 10 * step + layer)
            want[layer] = (torch.cat([want[layer][0], k], dim=1), torch.cat([want[layer][1], v], dim=1))
            got_k, got_v = cache.update(7, layer, k, v)
            assert close(got_k, want[layer][0]) and close(got_v, want[layer][1]), (
                f"blocks of 3, chunks {chunks[: step + 1]}, layer {layer}: update returned k {tuple(got_k.shape)}, "
                f"want the {want[layer][0].shape[1]} positions written so far, in order"
            )
        n = want[0][0].shape[1]
        assert cache.num_tokens(7) == n, (
            f"chunks {chunks[: step + 1]}: num_tokens {cache.num_tokens(7)}, want {n}"
        )
    for layer in range(n_layers):
        got_k, got_v = cache.gather(7, layer)
        assert close(got_k, want[layer][0]) and close(got_v, want[layer][1]), (
            f"chunks {chunks}, layer {layer}: gather differs from the positions written"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions", "test_allocator_hands_out_each_block_once")
def test_blocks_allocated_on_boundaries(kata):
    """the block table grows to ceil(num_tokens / block_size) exactly when a write crosses a boundary"""
    cache = kata.PagedKVCache(2, 1, 2, num_blocks=10, block_size=4)
    cache.add_sequence(0)
    assert cache.block_table(0) == [] and cache.blocks_in_use == 0, "a new sequence must hold no blocks"
    before: list[int] = []
    n = 0
    for t in [4, 1, 3, 1, 7, 4]:  # lands on 4, 5, 8, 9, 16, 20: boundaries hit exactly and crossed
        append(cache, 0, 2, t, seed=n)
        n += t
        table = cache.block_table(0)
        assert len(table) == math.ceil(n / 4), (
            f"{n} tokens in blocks of 4: the block table has {len(table)} blocks, want ceil({n} / 4) = {math.ceil(n / 4)}"
        )
        assert table[: len(before)] == before, (
            f"appending {t} tokens changed existing blocks: {before} became {table}"
        )
        assert len(set(table)) == len(table), f"block table {table} holds a block twice"
        assert cache.blocks_in_use == len(table), (
            f"{n} tokens: blocks_in_use {cache.blocks_in_use}, want {len(table)}"
        )
        before = table


@pytest.mark.example
@pytest.mark.builds_on("test_blocks_allocated_on_boundaries")
def test_readme_fragmentation_example(kata):
    """sequences of 5, 17, 33 and 2 tokens in blocks of 16 use 7 blocks, the sum of ceil(n / 16)"""
    cache = kata.PagedKVCache(n_layers=1, n_kv_heads=1, head_dim=1, num_blocks=32, block_size=16)
    for s, n in enumerate([5, 17, 33, 2]):
        cache.add_sequence(s)
        cache.update(s, 0, torch.zeros(1, n, 1), torch.zeros(1, n, 1))
    assert cache.blocks_in_use == 7, (
        f"lengths [5, 17, 33, 2] in blocks of 16: blocks_in_use {cache.blocks_in_use}, want 7"
    )


@pytest.mark.builds_on("test_update_returns_all_positions")
def test_length_moves_after_last_layer(kata):
    """num_tokens moves on once every layer has written; a layer writing twice before that is a ValueError"""
    cache = kata.PagedKVCache(3, 1, 2, num_blocks=4, block_size=2)
    cache.add_sequence(0)
    for layer in range(3):
        assert cache.num_tokens(0) == 0, (
            f"before layer {layer} of 3 wrote 3 positions: num_tokens {cache.num_tokens(0)}, want 0"
        )
        k, v = kv(1, 3, 2, seed=layer)
        cache.update(0, layer, k, v)
    assert cache.num_tokens(0) == 3, (
        f"all 3 layers wrote 3 positions: num_tokens {cache.num_tokens(0)}, want 3"
    )
    cache.update(0, 0, *kv(1, 1, 2, seed=5))
    raises(
        ValueError,
        lambda: cache.update(0, 0, *kv(1, 1, 2, seed=6)),
        "layer 0 writes again before layers 1 and 2 wrote the previous position",
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions", "test_allocator_refcounts_and_double_free")
def test_fork_shares_until_written(kata):
    """fork shares every block (refcount 2, nothing copied); appending to either leaves the other unchanged"""
    for writer in ("child", "parent"):
        cache = kata.PagedKVCache(2, 1, 2, num_blocks=8, block_size=4)
        cache.add_sequence(0)
        prompt = append(cache, 0, 2, 6, seed=1)
        cache.fork(0, 1)
        assert cache.num_tokens(1) == 6, (
            f"fork of a 6-token sequence: the child has {cache.num_tokens(1)} tokens"
        )
        assert cache.blocks_in_use == 2, (
            f"fork of a 2-block sequence: blocks_in_use {cache.blocks_in_use}, want 2"
        )
        w, other = (1, 0) if writer == "child" else (0, 1)
        new = append(cache, w, 2, 3, seed=2)  # positions 6..8: into the shared block, then a new one
        assert cache.blocks_in_use == 4, (
            f"6 tokens, fork, the {writer} appends 3: blocks_in_use {cache.blocks_in_use}, want 4 "
            "(block 1 shared, block 2 copied for the writer, block 3 new)"
        )
        for layer in range(2):
            got_k, got_v = cache.gather(other, layer)
            assert close(got_k, prompt[layer][0]) and close(got_v, prompt[layer][1]), (
                f"fork at 6 tokens (blocks of 4), the {writer} appends 3: the other sequence's layer {layer} "
                "changed (a write into a shared block must copy it first)"
            )
            got_k, _ = cache.gather(w, layer)
            want = torch.cat([prompt[layer][0], new[layer][0]], dim=1)
            assert close(got_k, want), f"fork, the {writer} appends 3: its own layer {layer} keys are wrong"


@pytest.mark.builds_on("test_blocks_allocated_on_boundaries", "test_fork_shares_until_written")
def test_fork_at_block_boundary_copies_nothing(kata):
    """a fork at a block boundary shares only full blocks: an append takes one new block, no copy"""
    cache = kata.PagedKVCache(1, 1, 2, num_blocks=6, block_size=4)
    cache.add_sequence(0)
    append(cache, 0, 1, 8, seed=0)
    cache.fork(0, 1)
    append(cache, 1, 1, 1, seed=1)
    assert cache.blocks_in_use == 3, (
        f"8 tokens (2 full blocks of 4), fork, child appends 1: blocks_in_use {cache.blocks_in_use}, want 3"
    )
    shared = cache.block_table(0)
    assert cache.block_table(1)[:2] == shared, "the child's full blocks must stay shared with the parent"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_blocks_allocated_on_boundaries", "test_fork_shares_until_written")
def test_free_releases_blocks(kata):
    """free releases each block once: shared blocks stay with the other sequence, the rest are reusable"""
    cache = kata.PagedKVCache(1, 1, 2, num_blocks=6, block_size=2)
    cache.add_sequence(0)
    prompt = append(cache, 0, 1, 3, seed=0)  # 2 blocks
    cache.fork(0, 1)
    append(cache, 1, 1, 2, seed=1)  # copies block 2, adds block 3: 4 in use
    cache.free(1)
    assert cache.blocks_in_use == 2, (
        f"free the child: blocks_in_use {cache.blocks_in_use}, want the parent's 2"
    )
    counts = [cache.allocator.refcount(b) for b in cache.block_table(0)]
    assert counts == [1, 1], f"free the child: the parent's refcounts are {counts}, want [1, 1]"
    got_k, _ = cache.gather(0, 0)
    assert close(got_k, prompt[0][0]), "freeing the child changed the parent's keys"
    cache.free(0)
    assert cache.blocks_in_use == 0 and cache.allocator.num_free == 6, (
        f"every sequence freed: blocks_in_use {cache.blocks_in_use}, num_free {cache.allocator.num_free}; want 0, 6"
    )
    cache.add_sequence(2)
    append(cache, 2, 1, 12, seed=2)  # all 6 blocks again
    assert cache.blocks_in_use == 6, (
        f"12 tokens in blocks of 2 after freeing all: blocks_in_use {cache.blocks_in_use}"
    )
    raises(ValueError, lambda: cache.num_tokens(0), "num_tokens of a freed sequence")


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions", "test_free_releases_blocks")
def test_gather_follows_block_table_order(kata):
    """gather reads the blocks in block-table order, whatever their physical order"""
    cache = kata.PagedKVCache(1, 1, 2, num_blocks=4, block_size=2)
    written = {}
    for s in range(4):  # one block each: the pool is full
        cache.add_sequence(s)
        written[s] = append(cache, s, 1, 1, seed=s)[0]
    keep = max(range(4), key=lambda s: cache.block_table(s)[0])  # the sequence holding the highest block id
    for s in range(4):
        if s != keep:
            cache.free(s)
    ((k, v),) = append(cache, keep, 1, 6, seed=9)  # 3 more blocks, each with a lower id than its first
    table = cache.block_table(keep)
    got_k, got_v = cache.gather(keep, 0)
    want_k, want_v = torch.cat([written[keep][0], k], dim=1), torch.cat([written[keep][1], v], dim=1)
    assert close(got_k, want_k) and close(got_v, want_v), (
        f"7 positions in blocks {table} (logical order, not sorted): gather does not return them in order"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_blocks_allocated_on_boundaries",
    "test_fork_shares_until_written",
    "test_free_releases_blocks",
)
def test_out_of_blocks_changes_nothing(kata):
    """an append the pool cannot hold raises OutOfBlocksError naming the numbers, and changes nothing"""
    cache = kata.PagedKVCache(2, 1, 2, num_blocks=3, block_size=2)
    cache.add_sequence(0)
    prompt = append(cache, 0, 2, 3, seed=0)  # 2 blocks, 1 free
    table = cache.block_table(0)
    msg = raises(
        kata.OutOfBlocksError,
        lambda: cache.update(0, 0, *kv(1, 4, 2, seed=1)),
        "3 tokens in blocks of 2, append 4 more with 1 block free",
    )
    assert "2" in msg and "1" in msg, (
        f"OutOfBlocksError should name the 2 blocks needed and the 1 free; message: {msg!r}"
    )
    got = (cache.num_tokens(0), cache.block_table(0), cache.blocks_in_use)
    assert got == (3, table, 2), (
        f"after the refused append: (num_tokens, table, blocks_in_use) {got}, want (3, {table}, 2)"
    )
    assert close(cache.gather(0, 0)[0], prompt[0][0]), "the refused append changed the keys already cached"
    cache.fork(0, 1)  # shares both blocks
    cache.add_sequence(2)
    append(cache, 2, 2, 1, seed=2)  # takes the last free block
    raises(
        kata.OutOfBlocksError,
        lambda: cache.update(1, 0, *kv(1, 1, 2, seed=3)),
        "the child writes into its shared last block (a copy) with no block free",
    )
    cache.free(2)
    new = append(cache, 1, 2, 1, seed=3)  # now the copy fits
    want = torch.cat([prompt[1][0], new[1][0]], dim=1)
    assert close(cache.gather(1, 1)[0], want), (
        "after freeing a sequence, the refused append did not go through"
    )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_blocks_allocated_on_boundaries",
    "test_fork_shares_until_written",
    "test_free_releases_blocks",
)
def test_readme_fork_example(kata):
    """fork shares both blocks; the child's write copies the shared partial block; the parent is untouched"""
    cache = kata.PagedKVCache(n_layers=1, n_kv_heads=1, head_dim=2, num_blocks=8, block_size=4)
    cache.add_sequence(0)
    k = torch.arange(12.0).reshape(1, 6, 2)
    k_all, v_all = cache.update(0, 0, k, -k)
    assert torch.equal(k_all, k) and torch.equal(v_all, -k), "update of 6 positions must return them"
    got = (cache.num_tokens(0), len(cache.block_table(0)), cache.blocks_in_use)
    assert got == (6, 2, 2), (
        f"6 positions in blocks of 4: (num_tokens, table length, blocks_in_use) {got}, want (6, 2, 2)"
    )
    cache.fork(0, 1)
    assert cache.block_table(1) == cache.block_table(0), "fork: the child's block table must be the parent's"
    assert cache.blocks_in_use == 2, f"fork copied blocks: blocks_in_use {cache.blocks_in_use}, want 2"
    counts = [cache.allocator.refcount(b) for b in cache.block_table(1)]
    assert counts == [2, 2], f"after fork, the shared blocks' refcounts are {counts}, want [2, 2]"
    need = (cache.blocks_needed(1, 1), cache.blocks_needed(1, 3))
    assert need == (1, 2), (
        f"6 tokens in blocks of 4, forked: blocks_needed for 1 and 3 more tokens {need}, want (1, 2)"
    )
    step = torch.full((1, 1, 2), 100.0)
    cache.update(1, 0, step, -step)
    assert cache.blocks_in_use == 3, (
        f"child writes position 6 into the shared 2nd block: blocks_in_use {cache.blocks_in_use}, want 3 "
        "(the 1st block still shared, the 2nd copied)"
    )
    t0, t1 = cache.block_table(0), cache.block_table(1)
    assert t0[0] == t1[0] and t0[1] != t1[1], (
        f"after the child's write: tables {t0} and {t1}, want the 1st block shared only"
    )
    assert torch.equal(cache.gather(0, 0)[0], k), (
        "the child's write reached the parent (copy-on-write missing)"
    )
    assert cache.gather(1, 0)[0][0, 6].tolist() == [100.0, 100.0], "the child lost its own write"
    cache.free(0)
    counts = [cache.allocator.refcount(b) for b in cache.block_table(1)]
    assert (cache.blocks_in_use, counts) == (2, [1, 1]), (
        f"free the parent: blocks_in_use {cache.blocks_in_use}, child's refcounts {counts}; want 2, [1, 1]"
    )


@pytest.mark.points(3)
@SETTINGS
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "append", "append", "fork", "free"]), st.integers(0, 7), st.integers(1, 5)
        ),
        min_size=1,
        max_size=12,
    )
)
@pytest.mark.builds_on(
    "test_blocks_allocated_on_boundaries",
    "test_gather_follows_block_table_order",
    "test_fork_shares_until_written",
    "test_free_releases_blocks",
)
def test_random_operations_match_oracle(kata, ops):
    """over any adds, appends, forks and frees: gather, blocks_in_use, sharing and refcounts match the oracle"""
    n_layers, num_blocks, bs = 2, 8, 3
    cache = kata.PagedKVCache(n_layers, 1, 2, num_blocks=num_blocks, block_size=bs)
    oracle = Oracle(n_layers, num_blocks, bs)
    done: list[str] = []
    next_id = 0
    for i, (op, pick, t) in enumerate(ops):
        live = sorted(oracle.blocks)
        if op == "add" or not live:
            cache.add_sequence(next_id)
            oracle.add(next_id)
            done.append(f"add({next_id})")
            next_id += 1
            continue
        s = live[pick % len(live)]
        history = "; ".join(done + [f"{op}({s}{', ' + str(t) if op == 'append' else ''})"])
        if op == "append":
            written = [kv(1, t, 2, seed=100 * i + layer) for layer in range(n_layers)]
            need = cache.blocks_needed(s, t)
            assert need == oracle.needed(s, t), (
                f"blocks of {bs}, {history}: blocks_needed({s}, {t}) is {need}, want {oracle.needed(s, t)} "
                f"({oracle.tokens(s)} tokens in {len(oracle.blocks[s])} blocks)"
            )
            if oracle.needed(s, t) > num_blocks - oracle.in_use():
                raises(
                    kata.OutOfBlocksError,
                    lambda s=s, w=written: cache.update(s, 0, *w[0]),
                    f"{history} with {num_blocks - oracle.in_use()} blocks free",
                )
            else:
                for layer, (k, v) in enumerate(written):
                    cache.update(s, layer, k, v)
                oracle.append(s, written)
                done.append(f"append({s}, {t})")
        elif op == "fork":
            cache.fork(s, next_id)
            oracle.fork(s, next_id)
            done.append(f"fork({s}, {next_id})")
            next_id += 1
        else:
            cache.free(s)
            oracle.free(s)
            done.append(f"free({s})")
        history = "; ".join(done)
        assert cache.blocks_in_use == oracle.in_use(), (
            f"blocks of {bs}, {history}: blocks_in_use {cache.blocks_in_use}, want {oracle.in_use()}"
        )
    history = "; ".join(done)
    check_sharing(cache, oracle, f"blocks of {bs}, {history}")
    for s in oracle.blocks:
        assert cache.num_tokens(s) == oracle.tokens(s), (
            f"{history}: sequence {s} has num_tokens {cache.num_tokens(s)}, want {oracle.tokens(s)}"
        )
        for layer in range(n_layers):
            got_k, got_v = cache.gather(s, layer)
            ok = close(got_k, oracle.k[s][layer]) and close(got_v, oracle.v[s][layer])
            assert ok, (
                f"blocks of {bs}, {history}: gather({s}, layer {layer}) differs from the positions it appended"
            )


@pytest.mark.builds_on("test_allocator_hands_out_each_block_once")
def test_rejects_bad_input(kata):
    """unknown or duplicate sequence ids, a bad layer, and k / v of the wrong shape or dtype are ValueErrors"""
    rng = seeds.rng(7003)
    n_layers, heads, dim = rng.randint(1, 3), rng.randint(1, 3), rng.randint(2, 5)
    num_blocks, bs = rng.randint(2, 5), rng.randint(1, 4)
    cache = kata.PagedKVCache(n_layers, heads, dim, num_blocks=num_blocks, block_size=bs)
    s = rng.randrange(100)  # the sequence; u and c: ids no sequence has
    u, c = s + rng.randint(1, 50), s + rng.randint(51, 100)
    cache.add_sequence(s)
    held = rng.randrange(bs * (num_blocks - 1) + 1)  # positions already cached, a block left free
    if held:
        append(cache, s, n_layers, held, seed=7003, heads=heads, dim=dim)
    in_use = cache.blocks_in_use
    good = torch.zeros(heads, 1, dim)
    cases = {
        f"add_sequence({s}) twice": lambda: cache.add_sequence(s),
        f"fork({s}, {s}): the child id exists": lambda: cache.fork(s, s),
        f"fork({u}, {c}): no sequence {u}": lambda: cache.fork(u, c),
        f"free({u}): no sequence {u}": lambda: cache.free(u),
        f"block_table({u}): no sequence {u}": lambda: cache.block_table(u),
        f"update({u}, ...): no sequence {u}": lambda: cache.update(u, 0, good, good),
        f"update at layer {n_layers} of {n_layers}": lambda: cache.update(s, n_layers, good, good),
        "update at layer -1": lambda: cache.update(s, -1, good, good),
        f"k ({heads}, 1, {dim}) with v ({heads}, 2, {dim})": lambda: cache.update(
            s, 0, good, torch.zeros(heads, 2, dim)
        ),
        f"{heads + 1} heads for a {heads}-kv-head cache": lambda: cache.update(
            s, 0, torch.zeros(heads + 1, 1, dim), torch.zeros(heads + 1, 1, dim)
        ),
        f"head_dim {2 * dim} for head_dim {dim}": lambda: cache.update(
            s, 0, torch.zeros(heads, 1, 2 * dim), torch.zeros(heads, 1, 2 * dim)
        ),
        "4-D k and v (a batch) for one sequence": lambda: cache.update(s, 0, good[None], good[None]),
        "float64 k and v for a float32 cache": lambda: cache.update(s, 0, good.double(), good.double()),
        f"gather({s}, layer {n_layers}) of {n_layers}": lambda: cache.gather(s, n_layers),
        "view([])": lambda: cache.view([]),
        f"view([{s}, {s}])": lambda: cache.view([s, s]),
        f"view([{s}, {u}]): no sequence {u}": lambda: cache.view([s, u]),
    }
    for what, call in cases.items():
        raises(ValueError, call, what)
    assert cache.num_tokens(s) == held and cache.blocks_in_use == in_use, (
        f"rejected calls changed the cache: {held} positions in {in_use} blocks became "
        f"{cache.num_tokens(s)} in {cache.blocks_in_use}"
    )


# --------------------------------------------------------------------------- the batch view


@pytest.mark.points(2)
@pytest.mark.builds_on("test_update_returns_all_positions", "test_gather_follows_block_table_order")
def test_view_left_pads_rows(kata):
    """a view's length is the longest row; its mask and update left-pad the shorter rows"""
    cache = kata.PagedKVCache(1, 1, 2, num_blocks=12, block_size=2)
    lengths = [5, 2, 7]
    written = []
    for s, n in enumerate(lengths):
        cache.add_sequence(s)
        written.append(append(cache, s, 1, n, seed=s)[0])
    view = cache.view([2, 0, 1])  # rows in another order than the ids
    assert view.length == 7, f"view over lengths 7, 5, 2: length {view.length}, want 7"
    want = [[True] * 10, [False] * 2 + [True] * 8, [False] * 5 + [True] * 5]
    got = view.attention_mask(3).tolist()
    assert got == want, f"view over lengths [7, 5, 2], attention_mask(3): got {got}, want {want}"
    g = seeds.generator(9)
    k_new, v_new = torch.randn(3, 1, 1, 2, generator=g), torch.randn(3, 1, 1, 2, generator=g)  # (B, H, T, D)
    k_all, v_all = view.update(0, k_new, v_new)
    assert tuple(k_all.shape) == (3, 1, 8, 2), (
        f"decode step on the view: k shape {tuple(k_all.shape)}, want (3, 1, 8, 2)"
    )
    for row, s in enumerate([2, 0, 1]):
        pad = 7 - lengths[s]
        want_k = torch.cat([written[s][0], k_new[row]], dim=1)
        assert close(k_all[row, :, pad:], want_k) and close(
            v_all[row, :, pad:], torch.cat([written[s][1], v_new[row]], dim=1)
        ), (
            f"row {row} (sequence {s}, {lengths[s]} tokens): its positions must sit right-aligned after {pad} pad positions"
        )
        assert cache.num_tokens(s) == lengths[s] + 1, (
            f"sequence {s} after the view's step: {cache.num_tokens(s)} tokens"
        )
    assert view.length == 8, (
        f"after one step the view's length is {view.length}, want 8 (read from the cache)"
    )


# --------------------------------------------------------------------------- inside the model


@pytest.mark.points(3)
@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.builds_on(
    "test_update_returns_all_positions",
    "test_blocks_allocated_on_boundaries",
    "test_length_moves_after_last_layer",
)
def test_decode_matches_contiguous_cache(kata, model, block_size):
    """prefill plus decode steps through the paged cache gives the contiguous cache's logits at every step"""
    prompt, steps = token_ids(6, seed=0), token_ids(7, seed=1)
    want = contiguous_logits(model, prompt, steps)
    cache = paged(kata, model, num_blocks=16, block_size=block_size)
    cache.add_sequence(3)
    got = model.prefill(prompt[None], cache.view([3]))[0, -1]
    assert close(got, want[0]), (
        f"blocks of {block_size}, prefill of 6: logits differ by {max_diff(got, want[0]):.2e}"
    )
    for i, t in enumerate(steps):
        view = cache.view([3])
        got = model.decode_step(t.view(1), view, view.attention_mask(1))[0]
        assert close(got, want[i + 1]), (
            f"blocks of {block_size}, prefill 6 then decode: position {6 + i} differs from "
            f"the contiguous cache by {max_diff(got, want[i + 1]):.2e}"
        )
    assert cache.num_tokens(3) == 13 and len(cache.block_table(3)) == math.ceil(13 / block_size), (
        f"13 tokens in blocks of {block_size}: num_tokens {cache.num_tokens(3)}, {len(cache.block_table(3))} blocks"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_decode_matches_contiguous_cache")
def test_chunked_prefill_matches_contiguous_cache(kata, model):
    """prefill in chunks [3, 1, 4, 2] through a view gives the logits of one contiguous prefill"""
    ids = token_ids(10, seed=3)
    whole = model.prefill(ids[None], model.new_cache(1, 12))[0]
    cache = paged(kata, model, num_blocks=8, block_size=4)
    cache.add_sequence(0)
    start = 0
    for t in [3, 1, 4, 2]:
        got = model.prefill(ids[None, start : start + t], cache.view([0]))[0]
        want = whole[start : start + t]
        assert close(got, want), (
            f"chunks [3, 1, 4, 2] in blocks of 4: chunk at positions {start}..{start + t - 1} "
            f"differs from one contiguous prefill by {max_diff(got, want):.2e}"
        )
        start += t


@pytest.mark.points(3)
@pytest.mark.builds_on("test_view_left_pads_rows", "test_decode_matches_contiguous_cache")
def test_batched_decode_matches_each_alone(kata, model):
    """sequences of different lengths decoded in one batch get each its contiguous logits, as rows come and go"""
    prompts = [token_ids(n, seed=10 + n) for n in (7, 2, 5)]
    steps = [token_ids(5, seed=20 + s) for s in range(3)]
    want = [contiguous_logits(model, p, st_) for p, st_ in zip(prompts, steps)]
    cache = paged(kata, model, num_blocks=12, block_size=4)
    for s, p in enumerate(prompts):
        cache.add_sequence(s)
        model.prefill(p[None], cache.view([s]))
    rows = [0, 1, 2]
    for i in range(5):
        if i == 3:  # sequence 1 finishes: its blocks go back, the others go on
            cache.free(1)
            rows = [0, 2]
        view = cache.view(rows)
        ids = torch.stack([steps[s][i] for s in rows])
        logits = model.decode_step(ids, view, view.attention_mask(1))
        for row, s in enumerate(rows):
            assert close(logits[row], want[s][i + 1]), (
                f"batch of sequences {rows} (prompts of {[len(prompts[r]) for r in rows]} tokens), step {i}: "
                f"sequence {s} differs from its contiguous run by {max_diff(logits[row], want[s][i + 1]):.2e}"
            )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_view_left_pads_rows",
    "test_decode_matches_contiguous_cache",
    "test_batched_decode_matches_each_alone",
)
def test_readme_model_example(kata, model):
    """two prompts prefilled alone, one batched decode step: the short row gets the logits it gets alone"""
    cache = paged(kata, model, num_blocks=8, block_size=4)
    for s, prompt in enumerate([[1, 2, 3, 4, 5], [6, 7]]):
        cache.add_sequence(s)
        model.prefill(torch.tensor([prompt]), cache.view([s]))
    view = cache.view([0, 1])
    mask = view.attention_mask(1)
    assert view.length == 5, f"view over sequences of 5 and 2 tokens: length {view.length}, want 5"
    want = [[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]]
    assert mask.int().tolist() == want, (
        f"attention_mask(1) for lengths 5 and 2: {mask.int().tolist()}, want {want}"
    )
    logits = model.decode_step(torch.tensor([9, 9]), view, mask)
    got = (cache.num_tokens(0), cache.num_tokens(1), view.length)
    assert got == (6, 3, 6), (
        f"after one decode step: (num_tokens 0, num_tokens 1, view length) {got}, want (6, 3, 6)"
    )
    alone = model(torch.tensor([[6, 7, 9]]))[0, -1]
    assert close(logits[1], alone), (
        f"row 1 (2 tokens, left-padded by 3) differs from alone by {max_diff(logits[1], alone):.2e}"
    )


@pytest.mark.points(3)
@pytest.mark.builds_on("test_fork_shares_until_written", "test_batched_decode_matches_each_alone")
def test_forked_prompt_matches_contiguous_runs(kata, model):
    """one prompt forked three ways (beams, samples) decodes in a batch like three contiguous runs, sharing blocks"""
    prompt = token_ids(6, seed=30)  # blocks of 4: one full block and a shared partial one
    steps = [token_ids(3, seed=40 + s) for s in range(3)]
    want = [contiguous_logits(model, prompt, st_) for st_ in steps]
    cache = paged(kata, model, num_blocks=10, block_size=4)
    cache.add_sequence(0)
    first = model.prefill(prompt[None], cache.view([0]))[0, -1]
    assert close(first, want[0][0]), (
        f"prefill of the shared prompt differs by {max_diff(first, want[0][0]):.2e}"
    )
    cache.fork(0, 1)
    cache.fork(0, 2)
    assert cache.blocks_in_use == 2, (
        f"a 6-token prompt forked twice: blocks_in_use {cache.blocks_in_use}, want 2"
    )
    view = cache.view([0, 1, 2])
    for i in range(3):
        ids = torch.stack([steps[s][i] for s in range(3)])
        logits = model.decode_step(ids, view, view.attention_mask(1))
        for s in range(3):
            assert close(logits[s], want[s][i + 1]), (
                f"prompt of 6 forked into sequences 0, 1, 2, different tokens each: sequence {s} at step {i} differs "
                f"from its contiguous run by {max_diff(logits[s], want[s][i + 1]):.2e} (a write reached another fork?)"
            )
    assert cache.blocks_in_use == 7, (
        f"prompt of 6 in blocks of 4, 3 forks of 9 tokens: blocks_in_use {cache.blocks_in_use}, want 7 "
        "(the full first block shared, then 2 blocks each)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_out_of_blocks_changes_nothing", "test_batched_decode_matches_each_alone")
def test_model_out_of_blocks_then_resumes(kata, model):
    """a batched step the pool cannot hold raises OutOfBlocksError before any row changes; after a free it works"""
    prompts = [token_ids(4, seed=50), token_ids(4, seed=51)]
    nxt = token_ids(2, seed=52)
    want = contiguous_logits(model, prompts[0], nxt[:1])
    cache = paged(kata, model, num_blocks=3, block_size=4)
    for s, p in enumerate(prompts):
        cache.add_sequence(s)
        model.prefill(p[None], cache.view([s]))
    view = cache.view([0, 1])
    raises(
        kata.OutOfBlocksError,
        lambda: model.decode_step(nxt, view, view.attention_mask(1)),
        "two 4-token sequences in blocks of 4, 1 block free, one decode step each (2 new blocks)",
    )
    got = (cache.num_tokens(0), cache.num_tokens(1), cache.blocks_in_use)
    assert got == (4, 4, 2), (
        f"the refused decode step of 2 rows changed (num_tokens 0, num_tokens 1, blocks_in_use) "
        f"to {got}, want (4, 4, 2): check every row's blocks before any row writes"
    )
    cache.free(1)  # preempted
    view = cache.view([0])
    got = model.decode_step(nxt[:1], view, view.attention_mask(1))[0]
    assert close(got, want[1]), (
        f"after freeing sequence 1, the resumed step differs by {max_diff(got, want[1]):.2e}"
    )
