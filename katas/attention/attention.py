"""Kata: masked scaled dot-product attention (causal, padding, cross-attention, grouped-query).

Implement `causal_mask`, `attention` and `MultiHeadAttention` with plain tensor operations.
Not allowed here: `scaled_dot_product_attention`, `nn.MultiheadAttention`, flash or xformers
kernels. The prompt holds the full contract and worked examples (`dojo start attention` prints
it; in a notebook it is the first cell).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def causal_mask(tq: int, tk: int, device: torch.device | str = "cpu") -> Tensor:
    """(Tq, Tk) bool, True where query i may see key j: j <= i + (Tk - Tq), bottom-right aligned.

    The Tq queries are the *last* Tq of the Tk positions (as when decoding with a KV cache), so
    causal_mask(1, 5) is all True and causal_mask(3, 3) is lower-triangular.
    """
    raise NotImplementedError


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

    - Grouped-query: Hq % Hkv == 0, and query head h reads key/value head h // (Hq // Hkv).
    - causal: query i may see key j iff j <= i + (Tk - Tq)   (see `causal_mask`).
    - key_padding_mask: (B, Tk) bool, True = a real key; False keys get zero weight.
    - attn_mask: broadcastable to (B, Hq, Tq, Tk); bool (True = may attend) or float (added to the
      scaled scores, -inf hides a key).
    - scale: multiplies q k^T; None means 1 / sqrt(D).
    - A query that can see no key gets a row of zeros, never NaN.
    - fp16 / bf16 inputs: scores and softmax in fp32, output in the input dtype. fp32 stays fp32.

    Raises ValueError (naming the shapes) for non-4-D inputs, k and v of different shapes, q and k
    with different B or D, Hq not a multiple of Hkv, a key_padding_mask that is not a (B, Tk) bool
    tensor, or an attn_mask that does not broadcast to (B, Hq, Tq, Tk).
    """
    raise NotImplementedError


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections: self-attention, or cross-attention given `context`.

    Submodules (the suite copies weights into them by these names), all `nn.Linear`:
    q_proj (d_model -> d_model), k_proj and v_proj (d_context -> n_kv_heads * head_dim) and
    o_proj (d_model -> d_model), with biases iff `bias`; head_dim = d_model // n_heads.
    n_kv_heads defaults to n_heads, d_context to d_model.
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
        raise NotImplementedError

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """x (B, T, d_model), context (B, S, d_context) or None (= x) -> (B, T, d_model).

        Queries come from x; keys and values from context (cross-attention) or x (self-attention).
        key_padding_mask: (B, S) bool, True = a real key. Raises ValueError on wrong shapes.
        """
        raise NotImplementedError
