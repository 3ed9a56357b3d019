"""Masked scaled dot-product attention: causal, padding, cross-attention and grouped-query heads.

softmax(q k^T / sqrt(D) + mask) v, written out so every step can be read: grouped-query heads are
expanded explicitly, masks become -inf before the softmax, and a query that sees no key gets zeros.
Scores and softmax run in fp32. This is the attention kata's graded reference, not the inference
system's fast path (solutions/system/kernels/attention_fast.py). Not here: dropout, returning the
weights, KV caching, RoPE.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _check_inputs(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, attn_mask: Tensor | None
) -> None:
    """Raise ValueError, naming the shapes, unless the inputs follow `attention`'s contract."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D (B, H, T, D): got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    (b, hq, tq, d), (bk, hkv, tk, dk) = q.shape, k.shape
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape (B, Hkv, Tk, D): got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if bk != b or dk != d:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share batch size B and head dim D")
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads Hq={hq} must be a multiple of key/value heads Hkv={hkv}")
    if key_padding_mask is not None and (
        key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (b, tk)
    ):
        raise ValueError(
            f"key_padding_mask must be a bool (B, Tk) = {(b, tk)} tensor: "
            f"got {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
        )
    if attn_mask is not None:
        full = (b, hq, tq, tk)
        try:
            ok = torch.broadcast_shapes(attn_mask.shape, full) == full
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to (B, Hq, Tq, Tk) = {full}"
            )


def causal_mask(tq: int, tk: int, device: torch.device | str = "cpu") -> Tensor:
    """(Tq, Tk) bool, True where query i may see key j: j <= i + (Tk - Tq), bottom-right aligned.

    With a KV cache the Tq new queries are the *last* Tq of the Tk positions, so query i sits at
    position i + (Tk - Tq).
    """
    i = torch.arange(tq, device=device).unsqueeze(1)  # (Tq, 1)
    j = torch.arange(tk, device=device).unsqueeze(0)  # (1, Tk)
    return j <= i + (tk - tq)


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
    """softmax(q k^T * scale + masks) v for q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D) -> (B, Hq, Tq, D).

    Query head h reads key/value head h // (Hq // Hkv). `causal` hides key j from query i unless
    j <= i + (Tk - Tq). `key_padding_mask` (B, Tk) bool: True = a real key. `attn_mask` broadcasts
    to (B, Hq, Tq, Tk): bool (True = may attend) or float (added to the scaled scores). `scale`
    defaults to 1 / sqrt(D). A query that can see no key gets zeros. Raises ValueError on bad shapes.
    """
    _check_inputs(q, k, v, key_padding_mask, attn_mask)
    hq, tq, d = q.shape[1:]
    hkv, tk = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)  # a Python float keeps fp32 tensors fp32

    group = hq // hkv
    k = k.repeat_interleave(group, dim=1)  # (B, Hq, Tk, D): heads h*group .. h*group+group-1 share kv head h
    v = v.repeat_interleave(group, dim=1)  # (B, Hq, Tk, D)

    scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk), fp32 even for fp16 inputs
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        scores = scores + attn_mask.float()

    allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device)  # (Tq, Tk), broadcasts up
    if causal:
        allowed = allowed & causal_mask(tq, tk, q.device)
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    scores = scores.masked_fill(~allowed, float("-inf"))  # before the softmax, so masked keys get weight 0

    # Stable softmax: subtracting the row max keeps exp() <= 1. A row that sees no key has max -inf;
    # shifting it by 0 instead and clamping the sum to > 0 gives weights 0, not 0/0 = NaN.
    row_max = scores.amax(dim=-1, keepdim=True)  # (B, Hq, Tq, 1)
    sees_a_key = row_max > float("-inf")
    weights = torch.exp(scores - torch.where(sees_a_key, row_max, 0.0))
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)

    return (weights @ v.float()).to(q.dtype)  # (B, Hq, Tq, D)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections: self-attention, or cross-attention given `context`.

    Parameters: q_proj (d_model -> d_model), k_proj and v_proj (d_context -> n_kv_heads * head_dim),
    o_proj (d_model -> d_model), with biases iff `bias`. n_kv_heads < n_heads is grouped-query
    attention; n_kv_heads defaults to n_heads and d_context to d_model.
    Raises ValueError unless n_heads divides d_model and n_kv_heads divides n_heads.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        d_context: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        d_context = d_model if d_context is None else d_context
        if min(d_model, n_heads, n_kv_heads, d_context) <= 0:
            raise ValueError(
                f"sizes must be positive: d_model={d_model}, n_heads={n_heads}, "
                f"n_kv_heads={n_kv_heads}, d_context={d_context}"
            )
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_context, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_context, n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """x (B, T, d_model), context (B, S, d_context) or None (= x) -> (B, T, d_model).

        key_padding_mask: (B, S) bool, True = a real key (S = T for self-attention).
        """
        source = x if context is None else context
        d_model, d_context = self.q_proj.in_features, self.k_proj.in_features
        if (
            x.dim() != 3
            or source.dim() != 3
            or source.shape[0] != x.shape[0]
            or x.shape[-1] != d_model
            or source.shape[-1] != d_context
        ):
            raise ValueError(
                f"x must be (B, T, {d_model}) and context (B, S, {d_context}): "
                f"got {tuple(x.shape)} and {tuple(source.shape)}"
            )
        (b, t, _), s = x.shape, source.shape[1]
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, Hq, T, Dh)
        k = self.k_proj(source).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, Dh)
        v = self.v_proj(source).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, Dh)
        out = attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)  # (B, Hq, T, Dh)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))  # (B, T, d_model)
