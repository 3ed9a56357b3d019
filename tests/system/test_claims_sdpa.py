"""What the attention kata's follow-ups say about torch's fused attention, checked on the installed torch.

`F.scaled_dot_product_attention(is_causal=True)` aligns its causal mask top-left when Tq != Tk (query i
sees keys 0..i), while a KV cache needs bottom-right (the queries are the last Tq positions), which
`torch.nn.attention.bias.causal_lower_right` gives. A query whose every key is masked gets zeros.
Each is compared with SDPA given the explicit bool mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

TQ, TK, D = 2, 5, 4  # a 2-token chunk after 3 cached positions


def qkv():
    gen = torch.Generator().manual_seed(0)
    return (
        torch.randn(1, 1, TQ, D, generator=gen),
        torch.randn(1, 1, TK, D, generator=gen),
        torch.randn(1, 1, TK, D, generator=gen),
    )


def top_left() -> torch.Tensor:
    """query i may see keys 0..i"""
    return torch.arange(TK)[None, :] <= torch.arange(TQ)[:, None]


def bottom_right() -> torch.Tensor:
    """query i sits at position i + (Tk - Tq) and may see keys up to it"""
    return torch.arange(TK)[None, :] <= torch.arange(TQ)[:, None] + (TK - TQ)


def test_is_causal_is_top_left_when_tq_differs_from_tk():
    """SDPA's is_causal=True with Tq < Tk: query i sees keys 0..i (top-left), not the cache's bottom-right"""
    q, k, v = qkv()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=top_left()), atol=1e-6), (
        "is_causal=True is no longer the top-left mask (query i sees keys 0..i)"
    )
    assert not torch.allclose(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right()), atol=1e-3
    ), "is_causal=True now equals the bottom-right mask: the follow-up's warning is stale"


def test_causal_lower_right_is_bottom_right():
    """torch.nn.attention.bias.causal_lower_right(Tq, Tk): query i sees keys 0 .. i + (Tk - Tq)"""
    q, k, v = qkv()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(TQ, TK))
    assert torch.allclose(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right()), atol=1e-6
    ), "causal_lower_right is not the bottom-right mask"


def test_query_that_sees_no_key_gets_zeros():
    """SDPA with a bool mask that hides every key of a query returns zeros for it, not NaN"""
    q, k, v = qkv()
    mask = torch.ones(TQ, TK, dtype=torch.bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[0, 0, 1], torch.zeros(D)), (
        f"a fully masked query gave {out[0, 0, 1].tolist()}, not zeros"
    )
    assert torch.isfinite(out[0, 0, 0]).all() and out[0, 0, 0].abs().sum() > 0, (
        "the visible query's output broke"
    )
