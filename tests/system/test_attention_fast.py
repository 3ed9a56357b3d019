"""The inference system's fused attention (solutions/system/kernels/attention_fast.py) equals the readable reference."""

from __future__ import annotations

import pytest
import torch

from solutions import attention as readable
from solutions.system.kernels import attention_fast as fast


def random_case(seed: int, dtype: torch.dtype = torch.float32):
    """Random q, k, v and masks: GQA groups 1..3, Tq above, at and below Tk, padding with blind rows."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda lo, hi: int(torch.randint(lo, hi + 1, (), generator=g))
    b, hkv, group, tq, tk, d = pick(1, 3), pick(1, 3), pick(1, 3), pick(1, 6), pick(1, 8), pick(1, 16)
    q = torch.randn(b, hkv * group, tq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, tk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, tk, d, generator=g).to(dtype)
    padding = torch.rand(b, tk, generator=g) < 0.7 if seed % 3 else None
    if padding is not None and seed % 5 == 0:
        padding[0] = False  # a whole row of padding: every query of batch row 0 is blind
    return q, k, v, padding


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_fast_equals_readable_on_random_shapes(seed, causal):
    """The fused path equals the readable path: GQA, causal with Tq <, =, > Tk, padding, blind rows."""
    q, k, v, padding = random_case(seed)
    want = readable.attention(q, k, v, causal=causal, key_padding_mask=padding)
    got = fast.attention(q, k, v, causal=causal, key_padding_mask=padding)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert not got.isnan().any(), f"NaN in the fused output for q {tuple(q.shape)}, k {tuple(k.shape)}"
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("padding", [None, "all real"])
def test_unpadded_prefill_shortcut_equals_readable(padding):
    """Causal with Tq == Tk and no padded key (the is_causal shortcut) equals the readable path."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, h, 33, 16, generator=g) for h in (6, 2, 2))  # GQA group 3
    mask = torch.ones(2, 33, dtype=torch.bool) if padding else None
    want = readable.attention(q, k, v, causal=True, key_padding_mask=mask)
    got = fast.attention(q, k, v, causal=True, key_padding_mask=mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_blind_queries_get_zeros():
    """A query that sees no key (all padding, or causal with Tq > Tk) gets exact zeros."""
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 2, 8), torch.randn(2, 2, 2, 8)
    padding = torch.tensor([[False, False], [True, True]])
    out = fast.attention(q, k, v, causal=True, key_padding_mask=padding)
    assert (out[0] == 0).all(), "all-padding batch row should give zeros"
    assert (out[1, :, 0] == 0).all(), "query 0 of 3 sees no key of 2 under bottom-right causal"
    assert (out[1, :, 1:] != 0).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", range(10))
def test_half_precision_equals_readable(seed, dtype):
    """In fp16 / bf16 the fused path keeps the dtype and matches the readable path to rounding."""
    q, k, v, padding = random_case(seed, dtype)
    q = q * 10  # scores near 100: a softmax in half precision would visibly drift
    want = readable.attention(q, k, v, causal=True, key_padding_mask=padding)
    got = fast.attention(q, k, v, causal=True, key_padding_mask=padding)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=1e-2)


def test_decode_shape_from_a_cache_view():
    """SmolLM2 decode shapes, k/v as non-contiguous views of a preallocated cache: equal, fp32 kept."""
    buf_k, buf_v = torch.randn(2, 3, 64, 64), torch.randn(2, 3, 64, 64)
    k, v = buf_k[:, :, :40], buf_v[:, :, :40]  # (B, Hkv, Tk, D) views, as KVCache.update returns
    q = torch.randn(2, 9, 1, 64)
    all_real = torch.ones(2, 40, dtype=torch.bool)
    padding = all_real.clone()
    padding[1, :7] = False  # a left-padded row
    for mask in (None, all_real, padding):
        got = fast.attention(q, k, v, causal=True, key_padding_mask=mask)
        want = readable.attention(q, k, v, causal=True, key_padding_mask=mask)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_attn_mask_and_scale_follow_the_reference():
    """A float or bool attn_mask and a custom scale give the reference's result."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(1, 4, 3, 8, generator=g),
        torch.randn(1, 2, 5, 8, generator=g),
        torch.randn(1, 2, 5, 8, generator=g),
    )
    for mask in (torch.randn(1, 4, 3, 5, generator=g), torch.rand(3, 5, generator=g) < 0.5):
        got = fast.attention(q, k, v, causal=True, attn_mask=mask, scale=0.3)
        want = readable.attention(q, k, v, causal=True, attn_mask=mask, scale=0.3)
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(fast.attention(q, k, v, scale=0.3), readable.attention(q, k, v, scale=0.3))


def test_gradients_equal_and_finite_with_blind_rows():
    """Gradients through the fused path equal the readable path's, and stay finite for blind queries."""
    q, k, v, padding = random_case(5)  # seed 5: batch row 0 is all padding
    grads = []
    for impl in (readable, fast):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        impl.attention(*leaves, causal=True, key_padding_mask=padding).square().sum().backward()
        grads.append([t.grad for t in leaves])
    for want, got in zip(*grads):
        assert got.isfinite().all()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_bad_shapes_raise_value_error():
    """Bad shapes raise the reference's ValueError."""
    q, k = torch.randn(1, 3, 2, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="multiple"):
        fast.attention(q, k, k)
    with pytest.raises(ValueError, match="key_padding_mask"):
        fast.attention(torch.randn(1, 4, 2, 8), k, k, key_padding_mask=torch.ones(1, 5, dtype=torch.bool))
