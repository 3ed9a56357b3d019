"""Kata: FlashAttention's tiled forward with an online softmax, causal tile skipping, and Flash-Decoding.

Implement `flash_attention`, `merge_partials` and `flash_decode` with plain tensor operations;
`flash_attention_backward` and `FlashAttentionFunction` are the optional part. Not allowed here:
`scaled_dot_product_attention`, `nn.MultiheadAttention`, flex_attention, flash-attn or xformers kernels.
The prompt holds the full contract and worked examples (`dojo start flash_attention` prints it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# tile_scores(q_tile (..., rows, D), k_tile (..., cols, D)) -> (..., rows, cols): q_tile @ k_tile^T, unscaled
TileScores = Callable[[Tensor, Tensor], Tensor]


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
    return_lse: bool = False,
    tile_scores: TileScores | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v, one (block_q x block_k) tile at a time, never a (Tq x Tk) score matrix.

    q (B, Hq, Tq, D); k, v (B, Hkv, Tk, D) with Hq a multiple of Hkv: query head h reads kv head
    h // (Hq // Hkv). Returns out (B, Hq, Tq, D) in q's dtype; with return_lse=True, (out, lse) where
    lse (B, Hq, Tq) fp32 is each query's log(sum_j exp(scale * q_i . k_j)) over the keys it sees.
    - causal: bottom-right, query i sees key j iff j <= i + (Tk - Tq); a tile whose keys are all in the
      future of all its queries is never computed. A query that sees no key: zeros, lse -inf, never NaN.
    - scale: multiplies the scores; None means 1 / sqrt(D).
    - tile_scores: when given, every score comes from one call per computed tile, covering all batch rows
      and heads: tile_scores(q_tile, k_tile) is q_tile @ k_tile^T (before the scale); None means that product.
    Raises ValueError for non-4-D inputs, k and v of different shapes, q and k with different B or D,
    Hq not a multiple of Hkv, or block_q / block_k below 1.
    """
    raise NotImplementedError


def merge_partials(partials: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Attention over the union of disjoint key sets, from each set's (out (..., D), lse (...)).

    Returns (out (..., D), lse (...)) exactly as attention over all the keys would give them, without
    overflow for lse near 1e3. A partial with lse -inf (no key) adds nothing; when every partial
    has lse -inf: zeros and -inf. Raises ValueError for no partials, or partials whose shapes differ.
    """
    raise NotImplementedError


def flash_decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    splits: int,
    *,
    scale: float | None = None,
    tile_scores: TileScores | None = None,
) -> Tensor:
    """Flash-Decoding: q (B, Hq, Tq, D) (Tq small, no causal mask) against k, v (B, Hkv, Tk, D) -> (B, Hq, Tq, D).

    The keys are cut into `splits` contiguous chunks of torch.tensor_split's sizes; each chunk gives a
    partial (out, lse) from exactly one tile_scores call (all queries, all the chunk's keys, all batch
    rows and heads), and merge_partials combines them. Raises ValueError unless 1 <= splits <= Tk.
    """
    raise NotImplementedError


def flash_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    *,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Optional. (dq (B, Hq, Tq, D), dk (B, Hkv, Tk, D), dv (B, Hkv, Tk, D)) of flash_attention's output.

    out (B, Hq, Tq, D) and lse (B, Hq, Tq) are the forward's; dout (B, Hq, Tq, D) the output's gradient.
    Each tile's weights are recomputed as P = exp(scale * s - lse) from the lse given, and
    D = rowsum(dout * out) from the out given. Query heads that share a kv head sum into its dk, dv.
    A query with lse -inf (it saw no key) contributes nothing.
    """
    raise NotImplementedError


class FlashAttentionFunction(torch.autograd.Function):
    """Optional. `FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k, scale)`: flash_attention's
    output, differentiable through flash_attention_backward (save q, k, v, out and lse, never the weights)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64, scale=None):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, dout):
        raise NotImplementedError
