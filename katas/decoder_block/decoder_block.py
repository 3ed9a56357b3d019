"""Kata: a Llama decoder block from scratch, loaded with real weights.

Write RMSNorm, RoPE, causal grouped-query attention and the SwiGLU MLP, the block that wires them with
two residuals, and the Llama that stacks the blocks, loading tensors named and laid out as SmolLM2's
GGUF file holds them (Q and K rows permuted). Replace every `raise NotImplementedError` with your
implementation; keep the names and signatures. Read the prompt first: it is the contract (`dojo start
decoder_block` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch  # noqa: F401 - yours to use
import torch.nn.functional as F  # noqa: F401 - F.silu is fine; F.rms_norm, F.scaled_dot_product_attention are not
from torch import Tensor, nn


@dataclass
class LlamaConfig:
    """Shapes and constants of a Llama model; defaults are SmolLM2-135M's. Given: do not change the fields."""

    vocab_size: int = 49152
    d_model: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    d_ff: int = 1536
    max_seq_len: int = 8192
    rope_theta: float = 100000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"LlamaConfig.{f.name} must be a positive number, got {value!r}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError(
                f"d_model {self.d_model} must split into n_heads {self.n_heads} heads of even size, "
                f"and n_heads must be a multiple of n_kv_heads {self.n_kv_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension; fp16/bf16 computed in fp32, fp32 and float64
    in their own precision; returned in x's dtype."""
    raise NotImplementedError


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary embedding of x (..., T, D) at positions (T,): the pair (i, i + D/2) turns by
    positions[t] * theta^(-2i/D) radians. Same shape and dtype as x."""
    raise NotImplementedError


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal grouped-query attention: q (B, Hq, T, D), k and v (B, Hkv, T, D) -> (B, Hq, T, D).

    Query head h reads KV head h // (Hq // Hkv); position t sees positions 0..t; scores q.k / sqrt(D).
    """
    raise NotImplementedError


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T; weights (out, in): gate and up (d_ff, d), down (d, d_ff)."""
    raise NotImplementedError


class DecoderBlock(nn.Module):
    """One Llama layer: h = x + attention(rms_norm(x)), then h + swiglu(rms_norm(h))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config

    def load(self, weights: dict[str, Tensor], layer: int) -> None:
        """Take this layer's tensors, `blk.{layer}.attn_q.weight` and the rest, from GGUF-named fp32 `weights`
        (attn_q and attn_k rows as llama.cpp's converter permuted them). ValueError naming a tensor that is
        missing or has the wrong shape."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d_model) at positions 0..T-1 -> (B, T, d_model)."""
        raise NotImplementedError


class Llama(nn.Module):
    """Token embedding, n_layers DecoderBlocks, a final RMSNorm, and the LM head tied to the embedding."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config

    def load(self, weights: dict[str, Tensor]) -> None:
        """Take every tensor from GGUF-named fp32 `weights` (token_embd.weight, output_norm.weight, blk.{i}.*).
        ValueError naming a tensor that is missing or has the wrong shape; other keys are ignored."""
        raise NotImplementedError

    def forward(self, ids: Tensor) -> Tensor:
        """Logits (B, T, vocab_size), fp32, for token ids (B, T) of torch.long: causal, every position, no cache."""
        raise NotImplementedError
