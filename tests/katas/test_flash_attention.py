"""Hidden suite for the flash_attention kata: tiled online softmax, causal tile skipping, split-KV decode.

The oracle is a per-query loop in float64 (as the attention kata's): for each (batch, head, query) it lists the
keys that query may see, takes a max-subtracted softmax of their scaled scores and averages their values; it also
gives each query's log-sum-exp, and autograd through it gives the backward's gradients. The tiling is checked from
outside through `tile_scores`: the suite passes a counter that computes q_tile A k_tile^T for a matrix A it keeps,
so only scores made by its calls give the right attention, and it counts every call's tile.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from dojo import seeds
from dojo.grading.judging import judge, peak
from dojo.testing import banned_uses, expect_value_error, inconclusive

KATA = "flash_attention"
pytestmark = pytest.mark.usefixtures("one_thread")
BANNED = {
    "scaled_dot_product_attention",
    "MultiheadAttention",
    "flash_attn",
    "xformers",
    "flex_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "multi_head_attention_forward",
}


def oracle(q, k, v, *, causal=False, scale=None):
    """(out, lse): attention one query at a time in float64. A query that sees no key gets zeros and lse -inf.
    Built from tensor ops, so it is differentiable: autograd through it is the backward's reference."""
    q, k, v = q.double(), k.double(), v.double()
    b_, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = 1 / math.sqrt(d) if scale is None else scale
    outs, lses = [], []
    for b in range(b_):
        for h in range(hq):
            kv = h // group
            for i in range(tq):
                seen = [j for j in range(tk) if not causal or j <= i + (tk - tq)]
                if not seen:
                    outs.append(torch.zeros(d, dtype=torch.float64))
                    lses.append(torch.tensor(-math.inf, dtype=torch.float64))
                    continue
                scores = (k[b, kv, seen] @ q[b, h, i]) * scale  # (n_seen,)
                top = scores.max().detach()
                weights = torch.exp(scores - top)
                outs.append((weights[:, None] * v[b, kv, seen]).sum(0) / weights.sum())
                lses.append(top + torch.log(weights.sum()))
    return torch.stack(outs).view(b_, hq, tq, d), torch.stack(lses).view(b_, hq, tq)


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=seeds.generator(seed)).to(dtype)


def qkv(b=2, hq=4, hkv=2, tq=5, tk=7, d=8, seed=0):
    return (
        rand(b, hq, tq, d, seed=seed),
        rand(b, hkv, tk, d, seed=seed + 1),
        rand(b, hkv, tk, d, seed=seed + 2),
    )


def random_case(seed: int) -> dict:
    """Random shapes and block sizes (blocks from 1 to past the sequence, primes and all)."""
    r = seeds.rng(seed)
    hkv, group = r.choice([1, 2]), r.choice([1, 2])
    return {
        "b": r.choice([1, 2]),
        "hq": hkv * group,
        "hkv": hkv,
        "tq": r.randint(1, 17),
        "tk": r.randint(1, 17),
        "d": r.choice([4, 8]),
        "block_q": r.randint(1, 19),
        "block_k": r.randint(1, 19),
    }


AXES = {4: "(b, h, i, d)", 3: "(b, h, i)"}
CAUSAL_RULES = (
    " (query i sees keys j <= i + Tk - Tq; a key tile may be skipped only when its first key is past the "
    "last visible key of the query block's last query)"
)


def close(got, want, what, atol=1e-5, rtol=1e-4):
    """Assert got ~ want with a message naming the property and the first differing entry."""
    assert isinstance(got, Tensor), f"{what}: got {type(got).__name__}, want a tensor"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    got, want = got.double(), want.double()
    bad = ~torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=False)
    bad &= ~((got == want) & want.isinf())  # -inf where -inf is wanted
    if bad.any():
        where = tuple(int(i) for i in bad.nonzero()[0])
        finite = (got - want)[want.isfinite() & got.isfinite()]
        worst = "NaN in the output" if got.isnan().any() else f"max error {float(finite.abs().max()):.3g}"
        raise AssertionError(
            f"{what}: at {AXES.get(got.dim(), 'index')} = {where} got {float(got[where]):.6g}, "
            f"want {float(want[where]):.6g} ({worst})"
        )


def blocks(case: dict) -> str:
    return f"block_q={case['block_q']}, block_k={case['block_k']}"


def shape_of(case: dict) -> str:
    return (
        f"B={case['b']}, Hq={case['hq']}, Hkv={case['hkv']}, Tq={case['tq']}, Tk={case['tk']}, D={case['d']}"
    )


class TileCounter:
    """The suite's `tile_scores`: q_tile A k_tile^T for a matrix A near the identity that only the suite knows
    (so attention over scores made any other way comes out wrong), recording each call's (rows, cols, entries)."""

    def __init__(self, d: int, seed: int = 0) -> None:
        mix = torch.randn(d, d, generator=seeds.generator(1000 + seed)) * (0.5 / math.sqrt(d))
        self._mix = (torch.eye(d) + mix).double()  # (D, D)
        self._calls: list[tuple[int, int, int]] = []

    def __call__(self, q_tile, k_tile):
        d = self._mix.shape[0]
        if (
            not (isinstance(q_tile, Tensor) and isinstance(k_tile, Tensor))
            or min(q_tile.dim(), k_tile.dim()) < 2
        ):
            raise TypeError("tile_scores takes a query tile (..., rows, D) and a key tile (..., cols, D)")
        if q_tile.shape[-1] != d or k_tile.shape[-1] != d:
            raise ValueError(
                f"tile_scores: tiles of head dim {q_tile.shape[-1]} and {k_tile.shape[-1]}, want {d}"
            )
        scores = (q_tile.double() @ self._mix) @ k_tile.double().transpose(-2, -1)  # (..., rows, cols)
        self._calls.append((scores.shape[-2], scores.shape[-1], scores.numel()))
        return scores.to(q_tile.dtype)

    def mixed(self, q: Tensor) -> Tensor:
        """The queries whose plain scores are this counter's: q A."""
        return q.double() @ self._mix

    def entries(self) -> int:
        return sum(n for _, _, n in self._calls)


def tiling(tq: int, tk: int, block_q: int, block_k: int, causal: bool) -> tuple[list[tuple[int, int]], int]:
    """The (rows, cols) of every tile that holds a visible (query, key) pair, and how many tiles are skipped."""
    needed, skipped = [], 0
    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        for j0 in range(0, tk, block_k):
            j1 = min(j0 + block_k, tk)
            if causal and j0 > (i1 - 1) + (tk - tq):  # every key of the tile is in every query's future
                skipped += 1
            else:
                needed.append((i1 - i0, j1 - j0))
    return needed, skipped


# ---------------------------------------------------------------- the forward, one tile and many


@pytest.mark.points(2)
def test_single_tile_equals_oracle(kata):
    """With blocks larger than the sequences (one tile), flash_attention equals softmax(q k^T / sqrt(D)) v."""
    q, k, v = qkv(2, 2, 2, 5, 7, 8, seed=1)
    got = kata.flash_attention(q, k, v, block_q=64, block_k=64)
    close(got, oracle(q, k, v)[0], "one tile (block_q=block_k=64, Tq=5, Tk=7)")


@pytest.mark.example
@pytest.mark.points(1)
@pytest.mark.builds_on("test_single_tile_equals_oracle")
def test_example_equal_scores_average_the_values(kata):
    """Equal scores average the values, across key tiles: q = 0 with block_k=2 over 3 keys gives the mean of v."""
    q = torch.zeros(1, 1, 1, 2)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]]])
    got = kata.flash_attention(q, k, v, block_q=1, block_k=2)
    close(got, torch.tensor([[[[1.0, 1.0]]]]), "q = 0, 3 keys in tiles of 2: want the mean of v")


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.builds_on("test_single_tile_equals_oracle", "test_example_equal_scores_average_the_values")
def test_running_max_rescales_sum_and_output(kata, seed):
    """Two key tiles of one key each, the second scoring higher: it raises the running max, so the sum and the
    output summed under the old max are both rescaled by exp(m_old - m_new) before the new tile's are added."""
    q, k, v = qkv(2, 1, 1, 1, 2, 4, seed=20 + seed)
    gap = 1.0 + 2.0 * torch.rand(2, generator=seeds.generator(22 + seed))  # (B,): s1 - s0, from 1 to 3
    direction = q[:, 0, 0] / (q[:, 0, 0].pow(2).sum(-1, keepdim=True) * 0.5)  # (B, D): score +1 per unit
    k = k.clone()
    k[:, 0, 1] = k[:, 0, 0] + gap[:, None] * direction  # scale 1/sqrt(4): key 1 scores gap above key 0
    got = kata.flash_attention(q, k, v, block_q=1, block_k=1)
    close(
        got,
        oracle(q, k, v)[0],
        f"Tk=2 in key tiles of 1, the second key's score higher by {float(gap.min()):.2f} or more: when a tile "
        "raises the running max m, both the running sum and the running output must be multiplied by "
        "exp(m_old - m_new)",
    )


@pytest.mark.points(3)
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.builds_on(
    "test_single_tile_equals_oracle",
    "test_example_equal_scores_average_the_values",
    "test_running_max_rescales_sum_and_output",
)
def test_any_block_sizes_equal_oracle(kata, seed):
    """Equals the oracle for any block sizes: 1, primes, sizes that divide nothing, blocks larger than T."""
    case = random_case(seed)
    q, k, v = qkv(case["b"], case["hq"], case["hkv"], case["tq"], case["tk"], case["d"], seed=10 * seed)
    got = kata.flash_attention(q, k, v, block_q=case["block_q"], block_k=case["block_k"])
    close(got, oracle(q, k, v)[0], f"{shape_of(case)}, {blocks(case)}")


@pytest.mark.points(2)
@pytest.mark.parametrize("block_q, block_k", [(1, 1), (4, 3), (3, 5), (13, 1)])
@pytest.mark.builds_on("test_any_block_sizes_equal_oracle")
def test_fixed_block_sizes_equal_oracle(kata, block_q, block_k):
    """Blocks of 1 (a tile per score), tiles whose last one is ragged, blocks that cover all queries."""
    q, k, v = qkv(1, 2, 1, 13, 11, 4, seed=block_q * 7 + block_k)
    got = kata.flash_attention(q, k, v, block_q=block_q, block_k=block_k)
    close(got, oracle(q, k, v)[0], f"Tq=13, Tk=11, block_q={block_q}, block_k={block_k}")


@pytest.mark.points(2)
@pytest.mark.parametrize("peak", ["first", "last"])
@pytest.mark.builds_on("test_any_block_sizes_equal_oracle")
def test_stable_when_the_max_is_in_another_tile(kata, peak):
    """Scores near 1e3 whose maximum lies in the first or the last key tile: the running max rescales what
    was summed (exp(m_old - m_new)), so nothing overflows and the result is exact."""
    q, k, v = qkv(1, 2, 2, 3, 9, 4, seed=40)
    tile = slice(0, 3) if peak == "first" else slice(6, 9)
    k, q = k.clone(), q.clone()
    k[:, :, tile, 0] += 400.0  # with q[..., 0] = 5 and scale 1/2: that key tile's scores ~1e3, the rest ~1
    q[..., 0] = 5.0
    got = kata.flash_attention(q, k, v, block_q=2, block_k=3)
    assert got.isfinite().all(), (
        f"scores near 1e3, largest in the {peak} key tile (block_k=3): inf or NaN in the output; subtract the "
        "running max before exp and rescale the old sum and output by exp(m_old - m_new)"
    )
    close(got, oracle(q, k, v)[0], f"scores near 1e3, largest in the {peak} key tile", atol=1e-4, rtol=1e-3)


@pytest.mark.points(1)
@pytest.mark.builds_on("test_any_block_sizes_equal_oracle")
def test_stable_when_every_score_is_far_below_zero(kata):
    """Every score near -1e3: softmax does not care, so the result is exact. A running max that starts at 0
    instead of -inf shifts them by 0, and exp(-1e3) underflows to 0."""
    q, k, v = qkv(1, 2, 2, 3, 7, 4, seed=45)
    k, q = k.clone(), q.clone()
    k[..., 0] -= 400.0  # with q[..., 0] = 5 and scale 1/2: every score ~ -1e3
    q[..., 0] = 5.0
    got = kata.flash_attention(q, k, v, block_q=2, block_k=3)
    zeros = (
        " (all zeros: exp(s - m) underflowed; the running max must start at -inf)" if not got.any() else ""
    )
    close(got, oracle(q, k, v)[0], f"every score near -1e3, block_k=3{zeros}", atol=1e-4, rtol=1e-3)


@pytest.mark.example
@pytest.mark.points(1)
@pytest.mark.builds_on("test_single_tile_equals_oracle")
def test_example_lse_of_equal_scores(kata):
    """return_lse=True also gives each query's log-sum-exp: three equal scores of 0 give log(3)."""
    q, k, v = torch.zeros(1, 1, 1, 2), torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2)
    got = kata.flash_attention(q, k, v, block_q=1, block_k=2, return_lse=True)
    assert isinstance(got, tuple) and len(got) == 2, (
        f"return_lse=True should give (out, lse), got {type(got)}"
    )
    close(got[1], torch.tensor([[[math.log(3)]]]), "lse of three scores 0")


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.builds_on("test_example_lse_of_equal_scores", "test_any_block_sizes_equal_oracle")
def test_lse_is_the_log_sum_exp(kata, seed):
    """lse (B, Hq, Tq), fp32: log(sum_j exp(scale * q_i . k_j)) over all the keys, for any tiling (causal lse:
    with the causal tests)."""
    case = random_case(100 + seed)
    q, k, v = qkv(case["b"], case["hq"], case["hkv"], case["tq"], case["tk"], case["d"], seed=50 + seed)
    got = kata.flash_attention(q, k, v, block_q=case["block_q"], block_k=case["block_k"], return_lse=True)
    assert isinstance(got, tuple) and len(got) == 2, "return_lse=True should give (out, lse)"
    assert got[1].dtype == torch.float32, f"lse is {got[1].dtype}, want torch.float32"
    close(got[1], oracle(q, k, v)[1], f"lse, {shape_of(case)}, {blocks(case)}")


@pytest.mark.points(1)
@pytest.mark.builds_on("test_single_tile_equals_oracle", "test_any_block_sizes_equal_oracle")
def test_grouped_query_head_mapping(kata):
    """Grouped-query: query head h reads kv head h // (Hq // Hkv), never h % Hkv."""
    q, k, v = qkv(1, 6, 2, 4, 5, 4, seed=60)
    close(
        kata.flash_attention(q, k, v, block_q=3, block_k=2),
        oracle(q, k, v)[0],
        "Hq=6 over Hkv=2: query heads 0-2 read kv head 0, heads 3-5 kv head 1",
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_any_block_sizes_equal_oracle")
def test_scale_argument(kata):
    """`scale` multiplies the scores before the softmax (None means 1 / sqrt(D))."""
    q, k, v = qkv(1, 2, 2, 4, 6, 8, seed=61)
    close(
        kata.flash_attention(q, k, v, block_q=3, block_k=4, scale=0.9),
        oracle(q, k, v, scale=0.9)[0],
        "scale=0.9",
    )


# ---------------------------------------------------------------- causal


@pytest.mark.points(3)
@pytest.mark.parametrize(
    "tq, tk, block_q, block_k", [(9, 9, 5, 4), (4, 10, 3, 3), (6, 6, 1, 1), (3, 11, 2, 5)]
)
@pytest.mark.builds_on("test_any_block_sizes_equal_oracle", "test_fixed_block_sizes_equal_oracle")
def test_causal_bottom_right_equals_oracle(kata, tq, tk, block_q, block_k):
    """Causal is bottom-right aligned: query i sees key j iff j <= i + Tk - Tq, across any tiling."""
    q, k, v = qkv(2, 2, 1, tq, tk, 4, seed=tq * 10 + tk)
    got = kata.flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)
    close(
        got,
        oracle(q, k, v, causal=True)[0],
        f"causal, Tq={tq}, Tk={tk}, block_q={block_q}, block_k={block_k}{CAUSAL_RULES}",
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.builds_on(  # a key tile wholly masked for some of its rows must leave their running max as it was
    "test_causal_bottom_right_equals_oracle",
    "test_lse_is_the_log_sum_exp",
    "test_stable_when_the_max_is_in_another_tile",
)
def test_causal_random_shapes_equal_oracle(kata, seed):
    """Causal out and lse equal the oracle's on random shapes and block sizes (Tq above, below and equal to Tk)."""
    case = random_case(200 + seed)
    q, k, v = qkv(case["b"], case["hq"], case["hkv"], case["tq"], case["tk"], case["d"], seed=70 + seed)
    got = kata.flash_attention(
        q, k, v, causal=True, block_q=case["block_q"], block_k=case["block_k"], return_lse=True
    )
    assert isinstance(got, tuple) and len(got) == 2, "return_lse=True should give (out, lse)"
    want_out, want_lse = oracle(q, k, v, causal=True)
    close(got[0], want_out, f"causal{CAUSAL_RULES}, {shape_of(case)}, {blocks(case)}")
    close(got[1], want_lse, f"lse, causal{CAUSAL_RULES}, {shape_of(case)}, {blocks(case)}")


@pytest.mark.example
@pytest.mark.points(1)
@pytest.mark.builds_on("test_single_tile_equals_oracle", "test_causal_bottom_right_equals_oracle")
def test_example_query_that_sees_no_key_gets_zeros(kata):
    """Causal with Tq=3 > Tk=2: query 0 sees no key; it gets zeros and lse -inf, never NaN."""
    q, k, v = torch.ones(1, 1, 3, 2), torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2)
    out, lse = kata.flash_attention(q, k, v, causal=True, block_q=2, block_k=1, return_lse=True)
    assert not out.isnan().any(), f"causal Tq=3, Tk=2: NaN in the output {out.flatten().tolist()}"
    close(out, torch.tensor([[[[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]]]), "causal Tq=3, Tk=2 (query 0 is blind)")
    close(lse[0, 0, :1], torch.tensor([-math.inf]), "lse of the query that sees no key")


@pytest.mark.points(2)
@pytest.mark.parametrize("block_q, block_k", [(2, 3), (1, 1), (7, 2)])
@pytest.mark.builds_on(
    "test_example_query_that_sees_no_key_gets_zeros",
    "test_causal_bottom_right_equals_oracle",
    "test_lse_is_the_log_sum_exp",
)
def test_blind_queries_get_zeros(kata, block_q, block_k):
    """With Tq > Tk the first Tq - Tk queries see nothing: zeros and lse -inf, for any tiling, no NaN."""
    q, k, v = qkv(1, 2, 2, 8, 3, 4, seed=80 + block_q)
    out, lse = kata.flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k, return_lse=True)
    assert not out.isnan().any() and not lse.isnan().any(), (
        f"causal Tq=8, Tk=3, block_q={block_q}, block_k={block_k}: NaN where a query sees no key (yet): a row "
        "whose running max is still -inf must be shifted by 0, not by -inf"
    )
    want_out, want_lse = oracle(q, k, v, causal=True)
    close(out, want_out, f"causal Tq=8, Tk=3 (queries 0-4 blind), block_q={block_q}, block_k={block_k}")
    close(lse, want_lse, f"lse, causal Tq=8, Tk=3, block_q={block_q}, block_k={block_k}")


# ---------------------------------------------------------------- the tiles, counted through tile_scores


@pytest.mark.points(2)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.builds_on("test_any_block_sizes_equal_oracle", "test_causal_bottom_right_equals_oracle")
def test_scores_come_from_tile_scores(kata, causal):
    """Every score comes from `tile_scores`: given the suite's (q_tile A k_tile^T), the output is attention
    over those scores."""
    q, k, v = qkv(2, 2, 1, 7, 9, 4, seed=90)
    counter = TileCounter(4, seed=1)
    got = kata.flash_attention(q, k, v, causal=causal, block_q=3, block_k=4, tile_scores=counter)
    close(
        got,
        oracle(counter.mixed(q), k, v, causal=causal)[0],
        f"causal={causal}, Tq=7, Tk=9, block_q=3, block_k=4 with the suite's tile_scores: the scores must be the "
        "ones tile_scores returns, never q @ k^T computed apart",
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("block_q, block_k", [(3, 4), (1, 5), (8, 2)])
@pytest.mark.builds_on("test_scores_come_from_tile_scores")
def test_no_score_block_larger_than_a_tile(kata, block_q, block_k):
    """No tile_scores call computes more than block_q queries by block_k keys: no Tq x Tk score matrix."""
    q, k, v = qkv(1, 2, 2, 11, 13, 4, seed=91)
    counter = TileCounter(4, seed=2)
    kata.flash_attention(q, k, v, block_q=block_q, block_k=block_k, tile_scores=counter)
    assert counter._calls, "flash_attention never called tile_scores"
    rows, cols = max(r for r, _, _ in counter._calls), max(c for _, c, _ in counter._calls)
    assert rows <= block_q and cols <= block_k, (
        f"Tq=11, Tk=13, block_q={block_q}, block_k={block_k}: a tile_scores call computed {rows} queries x {cols} "
        f"keys; a tile is at most {block_q} x {block_k}"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.builds_on("test_scores_come_from_tile_scores", "test_no_score_block_larger_than_a_tile")
def test_every_score_computed_once(kata, seed):
    """Without causal every (query, key) score is computed exactly once: one pass, no recomputation."""
    case = random_case(300 + seed)
    q, k, v = qkv(case["b"], case["hq"], case["hkv"], case["tq"], case["tk"], case["d"], seed=95 + seed)
    counter = TileCounter(case["d"], seed=3)
    kata.flash_attention(q, k, v, block_q=case["block_q"], block_k=case["block_k"], tile_scores=counter)
    heads = case["b"] * case["hq"]
    want = heads * case["tq"] * case["tk"]
    assert counter.entries() == want, (
        f"{shape_of(case)}, {blocks(case)}: tile_scores computed {counter.entries() / heads:g} scores per "
        f"(batch, query head), want Tq x Tk = {case['tq'] * case['tk']}: each score once, in one pass"
    )


@pytest.mark.points(3)
@pytest.mark.parametrize(
    "tq, tk, block_q, block_k", [(12, 12, 4, 4), (12, 12, 5, 3), (5, 9, 2, 2), (9, 5, 4, 1), (7, 7, 1, 1)]
)
@pytest.mark.builds_on(
    "test_every_score_computed_once",
    "test_causal_bottom_right_equals_oracle",
    "test_no_score_block_larger_than_a_tile",
)
def test_causal_skips_tiles_in_the_future(kata, tq, tk, block_q, block_k):
    """Causal computes exactly the tiles that hold a visible key: tiles wholly above the diagonal are never
    computed (tiles straddling it are computed and masked)."""
    q, k, v = qkv(1, 2, 1, tq, tk, 4, seed=tq + tk + block_q)
    counter = TileCounter(4, seed=4)
    kata.flash_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k, tile_scores=counter)
    needed, skipped = tiling(tq, tk, block_q, block_k, causal=True)
    got, want = counter.entries() / 2, sum(r * c for r, c in needed)
    what = f"causal, Tq={tq}, Tk={tk}, block_q={block_q}, block_k={block_k}"
    assert got <= want, (
        f"{what}: computed {got:g} scores per head, want {want} (the {len(needed)} tiles that hold a visible key): "
        f"{skipped} tiles lie wholly above the diagonal and must be skipped, not computed and masked"
    )
    assert got >= want, (
        f"{what}: computed {got:g} scores per head, want {want}: a tile that holds a visible key was skipped"
    )


# ---------------------------------------------------------------- dtypes and errors


@pytest.mark.points(1)
@pytest.mark.builds_on("test_causal_bottom_right_equals_oracle")
def test_half_precision_close_to_fp32(kata):
    """bf16 inputs give a bf16 output close to fp32 attention on the same rounded inputs (fp32 statistics)."""
    q, k, v = (t.to(torch.bfloat16) for t in qkv(1, 2, 2, 6, 9, 16, seed=110))
    got = kata.flash_attention(q, k, v, causal=True, block_q=4, block_k=4)
    assert got.dtype == torch.bfloat16, f"bf16 inputs gave a {got.dtype} output"
    close(got, oracle(q, k, v, causal=True)[0], "bf16, causal, Tq=6, Tk=9", atol=2e-2, rtol=2e-2)


@pytest.mark.points(1)
def test_fp32_stays_fp32(kata):
    """fp32 inputs give an fp32 output and an fp32 lse (no float64 anywhere)."""
    out, lse = kata.flash_attention(
        *qkv(1, 2, 1, 3, 4, 4), causal=True, block_q=2, block_k=3, return_lse=True
    )
    assert out.dtype == torch.float32 and lse.dtype == torch.float32, (
        f"fp32 inputs gave {out.dtype}, {lse.dtype}"
    )


@pytest.mark.points(1)
@pytest.mark.parametrize(
    "case",
    ["Hq not a multiple of Hkv", "k and v differ", "head dim differs", "3-D q", "block_q=0", "block_k=-1"],
)
def test_bad_inputs_raise_value_error(kata, case):
    """Mismatched shapes, Hq % Hkv != 0 or a block size below 1 raise ValueError."""
    q, k, v = qkv(2, 4, 2, 3, 5, 8)
    args, kwargs = {
        "Hq not a multiple of Hkv": ((q, k[:, :1].expand(2, 3, 5, 8), v[:, :1].expand(2, 3, 5, 8)), {}),
        "k and v differ": ((q, k, v[:, :, :4]), {}),
        "head dim differs": ((q, k[..., :4], v[..., :4]), {}),
        "3-D q": ((q[0], k, v), {}),
        "block_q=0": ((q, k, v), {"block_q": 0}),
        "block_k=-1": ((q, k, v), {"block_k": -1}),
    }[case]
    expect_value_error(lambda: kata.flash_attention(*args, **kwargs), f"flash_attention with {case}")


# ---------------------------------------------------------------- merging partials through their LSE


def partial(q, k, v, keys):
    """The oracle's (out, lse) over a subset of the keys: what one split or one device holds."""
    out, lse = oracle(q, k[:, :, keys], v[:, :, keys])
    return out.float(), lse.float()


@pytest.mark.example
@pytest.mark.points(1)
def test_example_merge_two_partials(kata):
    """Partials with lse 0 and log 3 weigh 1 : 3: outputs [1, 0] and [0, 1] merge to [0.25, 0.75], lse log 4."""
    a = (torch.tensor([[1.0, 0.0]]), torch.tensor([0.0]))
    b = (torch.tensor([[0.0, 1.0]]), torch.tensor([math.log(3)]))
    out, lse = kata.merge_partials([a, b])
    close(out, torch.tensor([[0.25, 0.75]]), "merge of ([1, 0], lse 0) and ([0, 1], lse log 3)")
    close(lse, torch.tensor([math.log(4)]), "merged lse of lse 0 and lse log 3")


@pytest.mark.points(3)
@pytest.mark.parametrize("cuts", [[3], [1, 5], [2, 3, 6, 8]])
@pytest.mark.builds_on("test_example_merge_two_partials")
def test_merge_equals_attention_over_the_union(kata, cuts):
    """Merging the (out, lse) of disjoint key sets equals attention over all of them, and its lse theirs."""
    q, k, v = qkv(2, 2, 2, 3, 9, 4, seed=120 + len(cuts))
    edges = [0, *cuts, 9]
    parts = [partial(q, k, v, list(range(a, b))) for a, b in zip(edges, edges[1:])]
    out, lse = kata.merge_partials(parts)
    want_out, want_lse = oracle(q, k, v)
    close(out, want_out, f"merge of key splits at {cuts} of Tk=9")
    close(lse, want_lse, f"merged lse of key splits at {cuts} of Tk=9")


@pytest.mark.points(2)
@pytest.mark.builds_on("test_merge_equals_attention_over_the_union")
def test_merge_is_stable_with_large_lse(kata):
    """Partials with lse near 1e3 merge without overflow: the weights are exp(lse_s - max lse)."""
    q, k, v = qkv(1, 2, 2, 2, 6, 4, seed=130)
    q = q * 60.0  # scores in the tens and hundreds
    shift = 900.0  # every score raised by 900 (the softmax ignores it): lse near 1e3, exp(lse) overflows fp64
    parts = [(out, lse + shift) for out, lse in (partial(q, k, v, [0, 1, 2]), partial(q, k, v, [3, 4, 5]))]
    out, lse = kata.merge_partials(parts)
    assert out.isfinite().all() and lse.isfinite().all(), (
        f"partials with lse up to {float(max(p[1].max() for p in parts)):.0f}: inf or NaN in the merge; weigh "
        "each partial by exp(lse_s - max lse), never exp(lse_s)"
    )
    want_out, want_lse = oracle(q, k, v)
    close(out, want_out, "merge of partials with lse near 1e3", atol=1e-4, rtol=1e-4)
    close(lse, want_lse + shift, "merged lse near 1e3", atol=1e-3, rtol=1e-5)


@pytest.mark.points(2)
@pytest.mark.builds_on("test_merge_equals_attention_over_the_union")
def test_merge_with_empty_partials(kata):
    """A partial over no visible key (zeros, lse -inf) adds nothing; if every partial is empty: zeros, -inf."""
    q, k, v = qkv(1, 2, 1, 3, 5, 4, seed=140)
    full = partial(q, k, v, list(range(5)))
    empty = (torch.zeros(1, 2, 3, 4), torch.full((1, 2, 3), -math.inf))
    out, lse = kata.merge_partials([empty, full, empty])
    assert not out.isnan().any(), "merging an empty partial (lse -inf) gave NaN"
    close(out, full[0], "merge of [empty, all 5 keys, empty]")
    close(lse, full[1], "merged lse of [empty, all 5 keys, empty]")
    out, lse = kata.merge_partials([empty, empty])
    assert not out.isnan().any(), "merging only empty partials gave NaN, want zeros"
    close(out, empty[0], "merge of two empty partials")
    close(lse, empty[1], "merged lse of two empty partials")


@pytest.mark.points(1)
def test_merge_rejects_bad_partials(kata):
    """merge_partials of no partials, or of partials whose shapes differ, raises ValueError."""
    a = (torch.zeros(2, 3, 4), torch.zeros(2, 3))
    expect_value_error(lambda: kata.merge_partials([]), "merge_partials([])")
    expect_value_error(
        lambda: kata.merge_partials([a, (torch.zeros(2, 4, 4), torch.zeros(2, 4))]),
        "merge_partials of out (2, 3, 4) and out (2, 4, 4)",
    )


# ---------------------------------------------------------------- flash_decode


@pytest.mark.points(3)
@pytest.mark.parametrize("tq, tk, splits", [(1, 10, 1), (1, 10, 3), (1, 7, 7), (2, 13, 4), (1, 16, 5)])
@pytest.mark.builds_on(
    "test_merge_equals_attention_over_the_union",
    "test_lse_is_the_log_sum_exp",
    "test_grouped_query_head_mapping",
)
def test_flash_decode_equals_oracle(kata, tq, tk, splits):
    """flash_decode equals attention over all the keys, for any number of splits (uneven ones too)."""
    q, k, v = qkv(2, 4, 2, tq, tk, 8, seed=150 + tk + splits)
    close(
        kata.flash_decode(q, k, v, splits),
        oracle(q, k, v)[0],
        f"flash_decode Tq={tq}, Tk={tk}, splits={splits}",
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("tk, splits", [(10, 3), (6, 4), (9, 9), (5, 1)])
@pytest.mark.builds_on(
    "test_flash_decode_equals_oracle", "test_scores_come_from_tile_scores", "test_every_score_computed_once"
)
def test_flash_decode_splits_the_keys(kata, tk, splits):
    """flash_decode makes one tile_scores call per split, all queries against the split's keys, in splits of
    torch.tensor_split's sizes (differing by at most one), and merges them into the right output."""
    q, k, v = qkv(1, 2, 1, 1, tk, 4, seed=160 + tk)
    counter = TileCounter(4, seed=5)
    got = kata.flash_decode(q, k, v, splits, tile_scores=counter)
    sizes = sorted(c for _, c, _ in counter._calls)
    want = sorted(len(part) for part in torch.arange(tk).tensor_split(splits))
    assert sizes == want, (
        f"flash_decode Tk={tk}, splits={splits}: tile_scores calls over {sizes} keys, want {want} "
        "(one call per split, of torch.tensor_split's sizes)"
    )
    close(
        got,
        oracle(counter.mixed(q), k, v)[0],
        f"flash_decode Tk={tk}, splits={splits} with the suite's scores",
    )


@pytest.mark.points(1)
def test_flash_decode_rejects_bad_splits(kata):
    """splits below 1 or above Tk (a split without a key) raise ValueError."""
    q, k, v = qkv(1, 2, 2, 1, 4, 4)
    for splits in (0, 5):
        expect_value_error(
            lambda s=splits: kata.flash_decode(q, k, v, s), f"flash_decode with Tk=4, splits={splits}"
        )


# ---------------------------------------------------------------- optional: the backward


def oracle_grads(q, k, v, dout, causal):
    """(dq, dk, dv): autograd through the float64 oracle."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, _ = oracle(*leaves, causal=causal)
    out.backward(dout.double())
    return [t.grad for t in leaves]


@pytest.mark.optional
@pytest.mark.points(3)
@pytest.mark.parametrize(
    "causal, block_q, block_k", [(False, 3, 2), (True, 2, 3), (True, 1, 1), (True, 16, 16)]
)
@pytest.mark.builds_on("test_causal_bottom_right_equals_oracle", "test_lse_is_the_log_sum_exp")
def test_optional_backward_equals_autograd(kata, causal, block_q, block_k):
    """flash_attention_backward's (dq, dk, dv) equal autograd through the oracle, given the
    oracle's out and lse (grouped-query heads sum into their kv head; Tq > Tk has blind queries)."""
    q, k, v = qkv(1, 4, 2, 7, 5 if causal else 6, 4, seed=170 + block_q)
    dout = rand(*q.shape, seed=171)
    out, lse = (t.float() for t in oracle(q, k, v, causal=causal))
    got = kata.flash_attention_backward(
        q, k, v, out, lse, dout, causal=causal, block_q=block_q, block_k=block_k
    )
    assert isinstance(got, (tuple, list)) and len(got) == 3, (
        "flash_attention_backward should give (dq, dk, dv)"
    )
    what = f"causal={causal}, Tq=7, Tk={k.shape[2]}, block_q={block_q}, block_k={block_k}"
    for name, g, w in zip(("dq", "dk", "dv"), got, oracle_grads(q, k, v, dout, causal)):
        close(g, w, f"{name}, {what}", atol=1e-4, rtol=1e-3)


@pytest.mark.optional
@pytest.mark.points(2)
@pytest.mark.builds_on("test_optional_backward_equals_autograd")
def test_optional_backward_recomputes_from_the_lse(kata):
    """The backward rebuilds each tile's weights as exp(score - lse) from the lse it is given,
    with D = rowsum(dout * out): an lse raised by log 2 halves every gradient."""
    q, k, v = qkv(1, 2, 2, 5, 6, 4, seed=180)
    dout = rand(*q.shape, seed=181)
    out, lse = (t.float() for t in oracle(q, k, v, causal=True))
    got = kata.flash_attention_backward(
        q, k, v, out, lse + math.log(2), dout, causal=True, block_q=2, block_k=4
    )
    for name, g, w in zip(("dq", "dk", "dv"), got, oracle_grads(q, k, v, dout, True)):
        close(g, w / 2, f"{name} given lse + log 2 (the weights exp(s - lse) halve)", atol=1e-4, rtol=1e-3)


@pytest.mark.optional
@pytest.mark.points(2)
@pytest.mark.candidate_process  # gradients through the candidate's autograd.Function exist only in its process
@pytest.mark.builds_on(  # its forward is flash_attention's, and its backward uses that forward's lse
    "test_optional_backward_equals_autograd",
    "test_causal_random_shapes_equal_oracle",
    "test_stable_when_the_max_is_in_another_tile",
)
def test_optional_autograd_function_gradients(kata):
    """FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k, scale) is differentiable,
    and its gradients equal autograd through the oracle."""
    q, k, v = (t.requires_grad_() for t in qkv(1, 4, 2, 6, 6, 4, seed=190))
    dout = rand(*q.shape, seed=191)
    out = kata.FlashAttentionFunction.apply(q, k, v, True, 4, 3, None)
    close(out, oracle(q, k, v, causal=True)[0], "FlashAttentionFunction's output, causal")
    out.backward(dout)
    for name, g, w in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), oracle_grads(q, k, v, dout, True)):
        assert g is not None, f"{name}: no gradient reached the input through FlashAttentionFunction"
        close(g, w, f"{name} through FlashAttentionFunction, causal", atol=1e-4, rtol=1e-3)


# ---------------------------------------------------------------- claims measured inside the process


@pytest.mark.points(2)
@pytest.mark.candidate_process  # every tensor the candidate's code creates is seen only in its own process
@pytest.mark.builds_on("test_causal_bottom_right_equals_oracle", "test_no_score_block_larger_than_a_tile")
def test_never_creates_a_tq_by_tk_tensor(kata):
    """No tensor flash_attention creates (scores, weights or a mask) holds a quarter of the Tq x Tk scores:
    memory stays O(T) per head beyond the inputs."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numel, self.op = 0, ""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for t in tree_leaves(result):
                if isinstance(t, Tensor) and t.numel() > self.numel:
                    self.numel, self.op = t.numel(), str(func)
            return result

    q, k, v = qkv(1, 2, 1, 64, 64, 4, seed=200)  # the scores: 2 heads x 64 x 64 = 8192 entries; q 512
    with Largest() as seen:
        got = kata.flash_attention(q, k, v, causal=True, block_q=8, block_k=8)
    close(got, oracle(q, k, v, causal=True)[0], "causal Tq=Tk=64, block_q=block_k=8 (while counting tensors)")
    limit = 2 * 64 * 64 // 4
    assert seen.numel <= limit, (
        f"causal Tq=Tk=64, 2 heads, block_q=block_k=8: flash_attention created a tensor of {seen.numel} entries "
        f"({seen.op}); the Tq x Tk scores are {2 * 64 * 64}: keep only (block_q x block_k) tiles, build each "
        "tile's mask from its positions"
    )


@pytest.mark.points(2)
@pytest.mark.measured  # the peak is read from outside the candidate's process (dojo.grading.judging.peak)
@pytest.mark.builds_on(  # the tensor-watching test decides the same in practice mode (deferred when judged)
    "test_causal_bottom_right_equals_oracle",
    "test_no_score_block_larger_than_a_tile",
    "test_never_creates_a_tq_by_tk_tensor",
)
def test_peak_memory_far_below_a_tq_by_tk_matrix(kata):
    """One causal call with Tq = Tk = 16384 raises the process's peak memory by at most 64 MiB: a quarter of
    a (Tq, Tk) boolean mask, a sixteenth of the float32 scores (1 GiB), and starts or ends no other process.
    Judged, the kernel may not charge the process more than that at any point in the call either, counted
    from before the module was imported (a buffer made at import, shared memory and files in memory
    included). Decided from outside the process."""
    t = 16384
    q, k, v = qkv(1, 1, 1, t, t, 8, seed=210)
    attend = kata.flash_attention  # (judge mode: the worker is up, and stays the same, before the reset)
    attend(*qkv(1, 1, 1, 64, 64, 8, seed=300), causal=True)  # first-call set-up, unmeasured (other inputs)
    group = None
    if judge.active():  # the worker's cgroup: what it was charged since it booted, shared memory included
        group = judge.worker().memory
        if isinstance(group, str):
            inconclusive(group)
    # judged, the judge's own peak counts too: what the candidate's code could make it hold for it
    with peak.watch(itself=True, group=group) as seen:
        got = attend(q, k, v, causal=True, block_q=64, block_k=64)
    if seen.unmeasurable:
        inconclusive(seen.unmeasurable)
    assert type(got) is torch.Tensor, (  # judged, anything else stays in your process, to be computed later
        f"flash_attention returned a {type(got).__name__}, not a torch.Tensor: the output must be computed "
        "by the time the call returns"
    )
    assert not seen.others, (
        f"a process started or ended during the flash_attention call (pids {seen.others}): its memory "
        "cannot be measured; compute in your own process"
    )
    rows = [0, 1, t // 2 - 1, t - 1]  # a few queries against the plain softmax over the keys each sees
    for i in rows:
        w = torch.softmax((k[0, 0, : i + 1].double() @ q[0, 0, i].double()) / math.sqrt(8), dim=0)
        close(got[..., i, :], (w @ v[0, 0, : i + 1].double()).view(1, 1, 8), f"causal T={t}, query {i}")
    limit = t * t // 4
    sizes = f"the float32 scores are {t * t * 4 / 2**20:.0f} MiB, a boolean mask {t * t / 2**20:.0f} MiB"
    assert seen.rise <= limit, (
        f"causal Tq=Tk={t}, D=8, block_q=block_k=64: the call raised the peak memory by "
        f"{seen.rise / 2**20:.1f} MiB, over {limit / 2**20:.0f} MiB ({sizes}): keep only tiles, build each "
        "tile's mask from its positions"
    )
    if judge.active():  # what the kernel charged the worker's cgroup, counted from before the import
        assert seen.charged <= limit, (
            f"causal Tq=Tk={t}, D=8, block_q=block_k=64: during the call your process was charged "
            f"{seen.charged / 2**20:.1f} MiB since before your module was imported (memory kept from the "
            f"import or an earlier call, shared memory, tmpfs and files in memory count), over "
            f"{limit / 2**20:.0f} MiB ({sizes}): keep only tiles, allocate no buffer that size"
        )


# ---------------------------------------------------------------- rules


@pytest.mark.points(1)
def test_no_fused_attention_kernels(kata, kata_path):
    """Written by hand: no scaled_dot_product_attention, flex_attention, flash-attn or xformers kernels."""
    kata.flash_attention(*qkv(1, 1, 1, 1, 1, 2))  # a working attention first: an empty file bans nothing
    found = banned_uses(kata_path, BANNED)
    assert not found, f"{kata_path.name} uses a fused attention shortcut: {', '.join(found)}"
