"""Hidden suite for the attention kata: masked, grouped-query, cross-attention, and its module.

The oracle is a per-query loop in float64: for each (batch, head, query) it lists the keys that
query may see, takes a max-subtracted softmax of their scaled scores and averages their values.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dojo import seeds
from dojo.testing import banned_uses

KATA = "attention"
BANNED = {
    "scaled_dot_product_attention",
    "MultiheadAttention",
    "flash_attn",
    "xformers",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_attention_math",
    "multi_head_attention_forward",
}


def oracle(q, k, v, *, causal=False, key_padding_mask=None, attn_mask=None, scale=None):
    """Attention one query at a time, in float64; a query that sees no key gets zeros."""
    q, k, v = q.detach().double(), k.detach().double(), v.detach().double()
    b_, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = 1 / math.sqrt(d) if scale is None else scale
    mask = None if attn_mask is None else attn_mask.broadcast_to(b_, hq, tq, tk)
    out = torch.zeros(b_, hq, tq, d, dtype=torch.float64)
    for b in range(b_):
        for h in range(hq):
            kv = h // group
            for i in range(tq):
                scores, values = [], []
                for j in range(tk):
                    if causal and j > i + (tk - tq):
                        continue
                    if key_padding_mask is not None and not key_padding_mask[b, j]:
                        continue
                    if mask is not None and mask.dtype == torch.bool and not mask[b, h, i, j]:
                        continue
                    s = float(q[b, h, i] @ k[b, kv, j]) * scale
                    if mask is not None and mask.dtype != torch.bool:
                        s += float(mask[b, h, i, j])
                    if s != -math.inf:
                        scores.append(s)
                        values.append(v[b, kv, j])
                if scores:
                    top = max(scores)
                    weights = [math.exp(s - top) for s in scores]
                    out[b, h, i] = sum(w * val for w, val in zip(weights, values)) / sum(weights)
    return out


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=seeds.generator(seed)).to(dtype)


def qkv(b=2, hq=4, hkv=2, tq=3, tk=5, d=8, seed=0):
    return (
        rand(b, hq, tq, d, seed=seed),
        rand(b, hkv, tk, d, seed=seed + 1),
        rand(b, hkv, tk, d, seed=seed + 2),
    )


AXES = {4: "(b, h, i, d)", 3: "(b, t, d_model)"}  # attention's output; the module's (B, T, d_model)


def close(got, want, what, atol=1e-5, rtol=1e-4):
    """Assert got ~ want with a message naming the property and the first differing entry (its index
    labelled with one name per dimension)."""
    assert got.shape == want.shape, f"{what}: output shape {tuple(got.shape)}, want {tuple(want.shape)}"
    got, want = got.double(), want.double()
    bad = ~torch.isclose(got, want, atol=atol, rtol=rtol)
    if bad.any():
        where = tuple(int(i) for i in bad.nonzero()[0])
        worst = (
            "NaN in the output" if got.isnan().any() else f"max error {float((got - want).abs().max()):.3g}"
        )
        axes = AXES.get(got.dim(), "index")
        raise AssertionError(
            f"{what}: at {axes} = {where} got {float(got[where]):.6g}, "
            f"want {float(want[where]):.6g} ({worst})"
        )


# ---------------------------------------------------------------- worked examples (README)


@pytest.mark.example
@pytest.mark.points(1)
def test_example_equal_scores_average_the_values(kata):
    """Equal scores average the values: q = 0 gives the mean of v."""
    q = torch.zeros(1, 1, 1, 2)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]]])
    got = kata.attention(q, k, v)
    want = torch.tensor([[[[1.0, 1.0]]]])
    close(got, want, "q = 0 should weigh the 3 keys equally, giving the mean of v")


@pytest.mark.example
@pytest.mark.points(1)
def test_example_causal_mask_is_bottom_right_aligned(kata):
    """causal_mask(2, 4): the 2 queries are the last 2 of 4 positions."""
    got = kata.causal_mask(2, 4)
    want = torch.tensor([[True, True, True, False], [True, True, True, True]])
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bool, (
        f"causal_mask should return a bool tensor, got {got!r}"
    )
    assert torch.equal(got, want), f"causal_mask(2, 4): got {got.tolist()}, want {want.tolist()}"


@pytest.mark.example
@pytest.mark.points(1)
def test_example_query_that_sees_no_key_gets_zeros(kata):
    """A query whose keys are all padding gets zeros, not NaN."""
    q, k, v = torch.ones(1, 1, 1, 2), torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2)
    got = kata.attention(q, k, v, key_padding_mask=torch.tensor([[False, False]]))
    assert torch.equal(got, torch.zeros(1, 1, 1, 2)), (
        f"all keys padded: got {got.flatten().tolist()}, want [0.0, 0.0]"
    )


@pytest.mark.example
@pytest.mark.points(1)
def test_example_grouped_query_heads_share_kv_heads(kata):
    """Hq = 4, Hkv = 2: query heads 0, 1 read kv head 0 and heads 2, 3 read kv head 1."""
    q, k = torch.zeros(1, 4, 1, 2), torch.zeros(1, 2, 1, 2)
    v = torch.tensor([10.0, 20.0]).view(1, 2, 1, 1).expand(1, 2, 1, 2).contiguous()
    got = kata.attention(q, k, v)[0, :, 0, 0]
    assert got.tolist() == [10.0, 10.0, 20.0, 20.0], (
        f"value read by query heads 0..3: got {got.tolist()}, want [10, 10, 20, 20]"
    )


# ---------------------------------------------------------------- attention


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_grouped_query_heads_share_kv_heads")
def test_grouped_query_head_mapping(kata):
    """Grouped-query: query head h reads kv head h // (Hq // Hkv), never h % Hkv."""
    q, k, v = qkv(1, 6, 2, 2, 4, 8, seed=6)  # only the mapping: the values themselves are the plain case's
    expanded = kata.attention(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1))
    close(
        kata.attention(q, k, v),
        expanded,
        "Hkv=2 should equal Hkv=6 with each kv head copied to its 3 query heads",
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.builds_on("test_grouped_query_head_mapping")
def test_equals_oracle_on_random_shapes(kata, seed):
    """Equals softmax(q k^T / sqrt(D)) v on random shapes."""
    g = seeds.generator(seed)
    b, hkv, group, tq, tk, d = (int(torch.randint(1, 4, (), generator=g)) for _ in range(6))
    q, k, v = qkv(b, hkv * group, hkv, tq, tk, 4 * d, seed=seed)
    close(kata.attention(q, k, v), oracle(q, k, v), f"no masks, q {tuple(q.shape)}, k {tuple(k.shape)}")


@pytest.mark.points(1)
def test_scale_argument(kata):
    """An explicit scale replaces 1 / sqrt(D)."""
    q, k, v = qkv(1, 2, 2, 2, 3, 4)
    close(kata.attention(q, k, v, scale=0.9), oracle(q, k, v, scale=0.9), "scale=0.9")


@pytest.mark.points(1)
@pytest.mark.builds_on("test_example_causal_mask_is_bottom_right_aligned")
def test_causal_mask_rule(kata):
    """causal_mask(Tq, Tk)[i, j] is True iff j <= i + (Tk - Tq), for Tq <, = and > Tk."""
    for tq, tk in [(1, 1), (1, 4), (3, 3), (2, 5), (4, 2)]:
        want = torch.tensor([[j <= i + (tk - tq) for j in range(tk)] for i in range(tq)])
        got = kata.causal_mask(tq, tk)
        assert got.shape == want.shape and torch.equal(got, want), (
            f"causal_mask({tq}, {tk}): got {got.int().tolist()}, want {want.int().tolist()}"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_causal_mask_rule")
def test_visible_weights_sum_to_one(kata):
    """Under a mask, each query's weights over the keys it sees sum to 1: with every value 1, every output is 1."""
    q, k, v = qkv(2, 4, 2, 3, 5, 8, seed=30)
    got = kata.attention(q, k, torch.ones_like(v), causal=True)
    lo, hi = float(got.min()), float(got.max())
    assert abs(lo - 1) <= 1e-5 and abs(hi - 1) <= 1e-5, (
        f"causal, Tq=3, Tk=5, every value 1: outputs range {lo:.4g}..{hi:.4g}, want all 1: hide the masked keys "
        "before the softmax, so the weights of the visible keys sum to 1"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("tq, tk", [(4, 4), (2, 5), (1, 6)])
@pytest.mark.builds_on(
    "test_causal_mask_rule",
    "test_grouped_query_head_mapping",
    "test_visible_weights_sum_to_one",
    "test_equals_oracle_on_random_shapes",
)
def test_causal_hides_exactly_the_future(kata, tq, tk):
    """Causal attention equals the oracle, also with Tq < Tk (the queries are the last Tq positions)."""
    q, k, v = qkv(2, 2, 1, tq, tk, 8, seed=tq * 10 + tk)
    close(kata.attention(q, k, v, causal=True), oracle(q, k, v, causal=True), f"causal, Tq={tq}, Tk={tk}")


@pytest.mark.points(1)
@pytest.mark.builds_on("test_causal_mask_rule", "test_visible_weights_sum_to_one")
def test_causal_future_keys_change_nothing(kata):
    """Under causal, changing key/value j changes only queries at positions >= j."""
    q, k, v = qkv(1, 2, 2, 3, 5, 8)  # queries sit at positions 2, 3, 4
    before = kata.attention(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4] += 5.0
    v2[:, :, 4] += 5.0
    after = kata.attention(q, k2, v2, causal=True)
    close(after[:, :, :2], before[:, :, :2], "changing key 4 (the future of queries 0, 1) changed them")
    assert not torch.allclose(after[:, :, 2], before[:, :, 2]), "query 2 (at position 4) should see key 4"


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_grouped_query_head_mapping",
    "test_causal_hides_exactly_the_future",
    "test_example_query_that_sees_no_key_gets_zeros",
)
def test_padding_equals_oracle(kata):
    """Padded keys (key_padding_mask False) get zero weight, alone and with causal."""
    q, k, v = qkv(2, 4, 2, 3, 6, 8, seed=3)
    padding = torch.tensor([[True] * 6, [False, False, True, True, False, True]])
    for causal in (False, True):
        close(
            kata.attention(q, k, v, causal=causal, key_padding_mask=padding),
            oracle(q, k, v, causal=causal, key_padding_mask=padding),
            f"key_padding_mask {padding.int().tolist()}, causal={causal}",
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_padding_equals_oracle")
def test_appending_padded_keys_changes_nothing(kata):
    """Padding invariance: appending padded keys changes no output."""
    q, k, v = qkv(2, 2, 2, 3, 4, 8, seed=4)
    k_pad = torch.cat([k, rand(2, 2, 3, 8, seed=40) * 10], dim=2)  # (B, Hkv, 7, D)
    v_pad = torch.cat([v, rand(2, 2, 3, 8, seed=41) * 10], dim=2)
    padding = torch.tensor([[True] * 4 + [False] * 3] * 2)
    close(
        kata.attention(q, k_pad, v_pad, key_padding_mask=padding),
        kata.attention(q, k, v),
        "4 real keys + 3 padded keys vs the 4 real keys alone",
    )


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_padding_equals_oracle",
    "test_causal_hides_exactly_the_future",
    "test_example_query_that_sees_no_key_gets_zeros",
)
def test_fully_masked_rows_give_zeros(kata):
    """A query that can see no key gets zeros, never NaN: all padding, causal with Tq > Tk, masks."""
    q, k, v = qkv(2, 2, 2, 3, 2, 4, seed=5)
    cases = {
        "all keys of batch row 0 padded": {"key_padding_mask": torch.tensor([[False, False], [True, True]])},
        "causal with Tq=3 > Tk=2 (query 0 sees nothing)": {"causal": True},
        "bool attn_mask all False for query 1": {
            "attn_mask": torch.tensor([[True, True], [False, False], [True, False]])
        },
        "float attn_mask -inf for query 2": {
            "attn_mask": torch.tensor([[0.0, 0.0], [0.0, 0.0], [-math.inf, -math.inf]])
        },
    }
    for what, kwargs in cases.items():
        got = kata.attention(q, k, v, **kwargs)
        assert not got.isnan().any(), f"{what}: output has NaN where a query sees no key"
        close(got, oracle(q, k, v, **kwargs), what)


@pytest.mark.points(1)
@pytest.mark.builds_on("test_equals_oracle_on_random_shapes")
def test_cross_attention_lengths(kata):
    """Cross-attention: Tq != Tk without causal, every query sees every key."""
    q, k, v = qkv(2, 2, 2, 5, 3, 8, seed=7)
    close(kata.attention(q, k, v), oracle(q, k, v), "Tq=5 queries over Tk=3 keys")


@pytest.mark.points(1)
@pytest.mark.builds_on("test_equals_oracle_on_random_shapes")
def test_stable_with_large_scores(kata):
    """Stable with scores near 1e4: the softmax subtracts the row maximum."""
    q, k, v = qkv(1, 2, 2, 2, 4, 16, seed=8)
    q[..., 0], k[..., 0] = 400.0, 100.0  # scores ~ 400 * 100 / 4 = 1e4, differing by O(1)
    got = kata.attention(q, k, v)
    assert got.isfinite().all(), (
        "scores near 1e4 gave inf or NaN: exp overflows without subtracting the row max"
    )
    close(got, oracle(q, k, v), "scores near 1e4", atol=1e-2, rtol=1e-2)


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype, tol", [(torch.float16, 3e-3), (torch.bfloat16, 2e-2)], ids=["fp16", "bf16"])
@pytest.mark.builds_on("test_stable_with_large_scores", "test_causal_hides_exactly_the_future")
def test_half_precision_close_to_fp32(kata, dtype, tol):
    """fp16 / bf16: output in the input dtype, close to fp32 attention on the same rounded inputs."""
    q, k, v = qkv(1, 2, 2, 3, 6, 16, seed=9)
    q[..., 0], k[..., 0] = 40.0, 10.0  # scores near 100: too coarse for a softmax in half precision
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    got = kata.attention(q, k, v, causal=True)
    assert got.dtype == dtype, f"{dtype} inputs gave a {got.dtype} output"
    close(
        got,
        oracle(q, k, v, causal=True),
        f"{dtype} with scores near 100 vs fp32 on the same inputs",
        atol=tol,
        rtol=tol,
    )


@pytest.mark.points(1)
def test_fp32_stays_fp32(kata):
    """fp32 inputs give an fp32 output (no float64 promotion)."""
    q, k, v = qkv(1, 2, 1, 2, 3, 4)
    got = kata.attention(q, k, v, causal=True, key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    assert got.dtype == torch.float32, f"fp32 inputs gave {got.dtype}"


@pytest.mark.points(1)
@pytest.mark.builds_on("test_grouped_query_head_mapping", "test_equals_oracle_on_random_shapes")
def test_float_mask_is_added_to_scaled_scores(kata):
    """A float attn_mask with finite values is added to the scaled scores."""
    q, k, v = qkv(2, 4, 2, 3, 5, 8, seed=10)
    bias = rand(1, 4, 3, 5, seed=11) * 2  # broadcasts over the batch
    close(
        kata.attention(q, k, v, attn_mask=bias),
        oracle(q, k, v, attn_mask=bias),
        "float attn_mask of shape (1, 4, 3, 5)",
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_causal_hides_exactly_the_future")
def test_bool_attn_mask(kata):
    """A bool attn_mask hides the keys where it is False, combined with causal."""
    q, k, v = qkv(1, 2, 2, 3, 3, 8, seed=12)
    mask = torch.tensor([[True, False, True], [True, True, False], [False, True, True]])
    close(
        kata.attention(q, k, v, attn_mask=mask, causal=True),
        oracle(q, k, v, attn_mask=mask, causal=True),
        f"bool attn_mask {mask.int().tolist()} with causal",
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_padding_equals_oracle", "test_causal_hides_exactly_the_future")
def test_equals_torch_sdpa(kata):
    """Equals torch's scaled_dot_product_attention where both are defined."""
    q, k, v = qkv(2, 4, 4, 4, 4, 8, seed=13)
    padding = torch.tensor([[True] * 4, [True, False, True, False]])
    mask = padding[:, None, None, :] & torch.ones(4, 4, dtype=torch.bool).tril()  # every query sees key 0
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(
        kata.attention(q, k, v, causal=True, key_padding_mask=padding), want, "causal + padding vs torch SDPA"
    )


@pytest.mark.points(1)
@pytest.mark.parametrize(
    "case",
    [
        "Hq not a multiple of Hkv",
        "k and v differ",
        "batch differs",
        "head dim differs",
        "padding mask shape",
        "attn_mask shape",
        "3-D q",
    ],
)
def test_bad_shapes_raise_value_error(kata, case):
    """Mismatched shapes, Hq % Hkv != 0 or a wrong-shaped mask raise ValueError."""
    q, k, v = qkv(2, 4, 2, 3, 5, 8)
    args, kwargs = {
        "Hq not a multiple of Hkv": ((q, k[:, :1].expand(2, 3, 5, 8), v[:, :1].expand(2, 3, 5, 8)), {}),
        "k and v differ": ((q, k, v[:, :, :4]), {}),
        "batch differs": ((q, k[:1], v[:1]), {}),
        "head dim differs": ((q, k[..., :4], v[..., :4]), {}),
        "padding mask shape": ((q, k, v), {"key_padding_mask": torch.ones(2, 4, dtype=torch.bool)}),
        "attn_mask shape": ((q, k, v), {"attn_mask": torch.ones(3, 4, dtype=torch.bool)}),
        "3-D q": ((q[0], k, v), {}),
    }[case]
    with pytest.raises(ValueError):
        kata.attention(*args, **kwargs)


# ---------------------------------------------------------------- MultiHeadAttention


def copy_from_torch(mha: nn.MultiheadAttention, ours: nn.Module) -> None:
    """Load mha's weights into the kata's module by name (load_state_dict: the same call in judge mode,
    where `ours` lives in the candidate's process)."""
    if mha.in_proj_weight is not None:
        wq, wk, wv = mha.in_proj_weight.chunk(3)
    else:
        wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    state = {
        "q_proj.weight": wq,
        "k_proj.weight": wk,
        "v_proj.weight": wv,
        "o_proj.weight": mha.out_proj.weight,
    }
    if mha.in_proj_bias is not None:
        for name, bias in zip(("q_proj", "k_proj", "v_proj"), mha.in_proj_bias.chunk(3)):
            state[f"{name}.bias"] = bias
        state["o_proj.bias"] = mha.out_proj.bias
    ours.load_state_dict({name: w.detach().clone() for name, w in state.items()})


@pytest.mark.points(1)
@pytest.mark.builds_on("test_padding_equals_oracle")
def test_module_keeps_positions_apart(kata):
    """MultiHeadAttention splits heads within each position: a padded position's input changes no other output."""
    ours = kata.MultiHeadAttention(16, 4)
    x = rand(1, 5, 16, seed=21)
    other = x.clone()
    other[:, 2] += 1.0
    padding = torch.tensor([[True, True, False, True, True]])  # position 2 is padding
    with torch.no_grad():
        a, b = ours(x, key_padding_mask=padding), ours(other, key_padding_mask=padding)
    changed = [t for t in (0, 1, 3, 4) if not torch.allclose(a[0, t], b[0, t], atol=1e-6)]
    assert not changed, (
        f"d_model 16, 4 heads, position 2 padded: changing its input changed the outputs at positions "
        f"{changed}; each head holds Dh features of every position: (B, T, d) -> (B, T, H, Dh) -> "
        "(B, H, T, Dh), not (B, T, d) viewed as (B, H, T, Dh)"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.builds_on(
    "test_equals_oracle_on_random_shapes",
    "test_causal_hides_exactly_the_future",
    "test_padding_equals_oracle",
    "test_module_keeps_positions_apart",
)
def test_module_equals_torch_multihead_attention(kata, bias):
    """MultiHeadAttention equals nn.MultiheadAttention after copying weights (causal + padding)."""
    torch.manual_seed(seeds.seed(14))
    mha = nn.MultiheadAttention(16, 4, bias=bias, batch_first=True).eval()
    ours = kata.MultiHeadAttention(16, 4, bias=bias)
    copy_from_torch(mha, ours)
    x = rand(2, 5, 16, seed=15)
    padding = torch.tensor([[True] * 5, [True, False, True, False, True]])  # every query sees key 0
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch: True = may NOT attend
    want, _ = mha(x, x, x, key_padding_mask=~padding, attn_mask=future, need_weights=False)
    got = ours(x, causal=True, key_padding_mask=padding)
    close(got, want, f"d_model=16, 4 heads, bias={bias}, causal + padding")


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_cross_attention_lengths",
    "test_padding_equals_oracle",
    "test_module_keeps_positions_apart",
)
def test_module_cross_attention_with_d_context(kata):
    """Cross-attention: queries from x, keys and values from a context of another length and width."""
    torch.manual_seed(seeds.seed(16))
    mha = nn.MultiheadAttention(16, 4, kdim=6, vdim=6, bias=True, batch_first=True).eval()
    ours = kata.MultiHeadAttention(16, 4, d_context=6, bias=True)
    copy_from_torch(mha, ours)
    x, context = rand(2, 3, 16, seed=17), rand(2, 7, 6, seed=18)
    padding = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    want, _ = mha(x, context, context, key_padding_mask=~padding, need_weights=False)
    close(ours(x, context, key_padding_mask=padding), want, "x (2, 3, 16) attending to context (2, 7, 6)")


@pytest.mark.points(1)
@pytest.mark.builds_on(
    "test_grouped_query_head_mapping",
    "test_causal_hides_exactly_the_future",
    "test_module_keeps_positions_apart",
)
def test_module_grouped_query(kata):
    """With n_kv_heads < n_heads, k_proj and v_proj are narrower and the heads are shared."""
    torch.manual_seed(seeds.seed(19))
    ours = kata.MultiHeadAttention(16, 4, n_kv_heads=2)
    assert ours.k_proj.weight.shape == (8, 16) and ours.v_proj.weight.shape == (8, 16), (
        f"k_proj/v_proj for 2 kv heads of dim 4 should be (8, 16), got {tuple(ours.k_proj.weight.shape)}"
    )
    x = rand(1, 4, 16, seed=20)
    q = (x @ ours.q_proj.weight.T).view(1, 4, 4, 4).transpose(1, 2)
    k = (x @ ours.k_proj.weight.T).view(1, 4, 2, 4).transpose(1, 2)
    v = (x @ ours.v_proj.weight.T).view(1, 4, 2, 4).transpose(1, 2)
    want = oracle(q, k, v, causal=True).transpose(1, 2).reshape(1, 4, 16) @ ours.o_proj.weight.double().T
    close(ours(x, causal=True), want, "4 query heads over 2 kv heads, causal")


@pytest.mark.points(1)
def test_module_bad_config_raises_value_error(kata):
    """n_heads must divide d_model and n_kv_heads must divide n_heads, else ValueError."""
    for args, kwargs in [((10, 4), {}), ((16, 4), {"n_kv_heads": 3})]:
        with pytest.raises(ValueError):
            kata.MultiHeadAttention(*args, **kwargs)


# ---------------------------------------------------------------- rules


@pytest.mark.points(1)
def test_no_fused_attention_kernels(kata, kata_path):
    """Written by hand: no scaled_dot_product_attention, nn.MultiheadAttention, flash or xformers."""
    kata.attention(*qkv(1, 1, 1, 1, 1, 2))  # a working attention first: an empty file bans nothing
    found = banned_uses(kata_path, BANNED)
    assert not found, f"{kata_path.name} uses a fused attention shortcut: {', '.join(found)}"
