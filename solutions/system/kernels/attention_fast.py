"""The inference system's attention: torch's fused kernel where it is the same computation.

Same function and contract as `solutions.attention.attention`, which stays the readable reference.
Grouped-query heads are folded into extra query rows of their kv head, not copied, and every mask is
a bool "may attend" mask built as the reference builds it. A float or bool `attn_mask` goes to the
readable path. It is not the attention kata's reference: that file's suite bans fused kernels.
tests/system/test_attention_fast.py checks this module against the readable path.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from solutions import attention as readable


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """Same as `solutions.attention.attention` (see there), computed by the fused kernel."""
    if attn_mask is not None:
        return readable.attention(
            q, k, v, causal=causal, key_padding_mask=key_padding_mask, attn_mask=attn_mask, scale=scale
        )
    readable._check_inputs(q, k, v, key_padding_mask, None)
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = hq // hkv

    all_real = key_padding_mask is None or bool(key_padding_mask.all())
    if causal and tq == tk and tq > 1 and all_real:  # unpadded prefill: no query is blind
        out = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=True, scale=scale, enable_gqa=True
        )  # (B, Hq, Tq, D)
        return out.to(q.dtype)

    allowed = None  # bool, broadcastable to (B, 1, Tq, Tk); None = every query sees every key
    if causal and tq > 1:  # one query after Tk - 1 earlier keys sees them all
        allowed = readable.causal_mask(tq, tk, q.device)  # (Tq, Tk)
    if not all_real:  # all real: no mask needed
        keys = key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
        allowed = keys if allowed is None else allowed & keys  # (B, 1, Tq, Tk)
    blind = None  # (.., Tq, 1) queries that can see no key
    if allowed is not None:
        blind = ~allowed.any(dim=-1, keepdim=True)
        if blind.any():
            allowed = allowed | blind  # attend to everything, zeroed below: no 0/0 in the kernel
        else:
            blind = None
        if allowed.shape[-2] > 1:
            allowed = allowed.repeat(*[1] * (allowed.dim() - 2), group, 1)  # (.., group * Tq, Tk)

    q_rows = q.float().reshape(b, hkv, group * tq, d)  # (B, Hkv, group * Tq, D); fp32 no-op for fp32
    out = F.scaled_dot_product_attention(q_rows, k.float(), v.float(), attn_mask=allowed, scale=scale)
    out = out.reshape(b, hq, tq, d)  # (B, Hq, Tq, D)
    if blind is not None:
        out = out.masked_fill(blind, 0.0)
    return out.to(q.dtype)
