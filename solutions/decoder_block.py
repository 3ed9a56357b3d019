"""Kata reference: a Llama decoder block, and the model that stacks them, loaded from GGUF tensor names.

A block is x + attention(rms_norm(x)), then x + swiglu(rms_norm(x)): RMSNorm in fp32, RoPE on the
pairs (i, i + D/2), causal grouped-query attention, a SwiGLU MLP. `Llama` adds the token embedding,
a final norm and the tied LM head. `load` takes float tensors keyed by GGUF names, Q and K rows as
llama.cpp's converter permuted them, and undoes that permutation. Written to be read: solutions/model.py
is the fast model, and tests/system/ checks the two agree on SmolLM2. Not here: a KV cache, padding
masks, RoPE scaling, untied heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class LlamaConfig:
    """Shapes and constants of a Llama model; defaults are SmolLM2-135M's."""

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
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, computed in fp32, returned in x's dtype."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (normed * weight.float()).to(x.dtype)


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotate each pair (i, i + D/2) of x (..., T, D) by the angle positions[t] * theta^(-2i/D)."""
    D = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D)  # (D/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq  # (T, D/2)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : D // 2].float(), x[..., D // 2 :].float()  # (..., T, D/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal grouped-query attention: q (B, Hq, T, D), k and v (B, Hkv, T, D) -> (B, Hq, T, D).

    Query head h reads KV head h // (Hq / Hkv); position t sees positions 0..t; scores scaled by 1/sqrt(D).
    """
    group = q.shape[1] // k.shape[1]
    # (B, Hq, T, D): query heads h*group .. h*group + group - 1 share KV head h
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, Hq, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """The SwiGLU MLP: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, weights (out, in)."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def unpermute(w: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's Q/K row permutation, so the rows pair up as (i, i + D/2) in each head again.

    The converter wrote w.reshape(H, 2, D/2, in).swapaxes(1, 2): the file's row 2i + j of a head is
    row j * D/2 + i of the checkpoint. This is its inverse.
    """
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def take(weights: dict[str, Tensor], name: str, shape: tuple[int, ...]) -> Tensor:
    """weights[name] as an fp32 tensor of `shape`; ValueError naming the tensor when it is missing or misshapen."""
    if name not in weights:
        raise ValueError(f"the weights lack {name!r}")
    w = weights[name]
    if tuple(w.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(w.shape)}, want {shape}")
    return w.float()


class DecoderBlock(nn.Module):
    """One Llama layer: x + attention(rms_norm(x)), then x + swiglu(rms_norm(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config

    def load(self, weights: dict[str, Tensor], layer: int) -> None:
        """Take layer `layer`'s tensors (`blk.{layer}.attn_q.weight`, ...) from GGUF-named `weights`."""
        c, p = self.config, f"blk.{layer}."
        d, hd = c.d_model, c.head_dim
        self.attn_norm = take(weights, p + "attn_norm.weight", (d,))
        self.wq = unpermute(take(weights, p + "attn_q.weight", (c.n_heads * hd, d)), c.n_heads)
        self.wk = unpermute(take(weights, p + "attn_k.weight", (c.n_kv_heads * hd, d)), c.n_kv_heads)
        self.wv = take(weights, p + "attn_v.weight", (c.n_kv_heads * hd, d))
        self.wo = take(weights, p + "attn_output.weight", (d, c.n_heads * hd))
        self.ffn_norm = take(weights, p + "ffn_norm.weight", (d,))
        self.w_gate = take(weights, p + "ffn_gate.weight", (c.d_ff, d))
        self.w_up = take(weights, p + "ffn_up.weight", (c.d_ff, d))
        self.w_down = take(weights, p + "ffn_down.weight", (d, c.d_ff))

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d_model), positions 0..T-1 -> (B, T, d_model)."""
        c = self.config
        B, T, _ = x.shape
        positions = torch.arange(T, device=x.device)
        h = rms_norm(x, self.attn_norm, c.norm_eps)
        q = (h @ self.wq.T).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)  # (B, Hq, T, D)
        k = (h @ self.wk.T).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = (h @ self.wv.T).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        y = attention(q, k, v).transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim)  # (B, T, Hq * D)
        x = x + y @ self.wo.T
        return x + swiglu(rms_norm(x, self.ffn_norm, c.norm_eps), self.w_gate, self.w_up, self.w_down)


class Llama(nn.Module):
    """Embedding, `n_layers` decoder blocks, a final RMSNorm and the tied LM head (the embedding again)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layers))

    def load(self, weights: dict[str, Tensor]) -> None:
        """Take every tensor from GGUF-named `weights`; ValueError naming a missing or misshapen one."""
        c = self.config
        self.embed = take(weights, "token_embd.weight", (c.vocab_size, c.d_model))  # (V, d), also the head
        self.norm = take(weights, "output_norm.weight", (c.d_model,))
        for i, layer in enumerate(self.layers):
            layer.load(weights, i)

    def forward(self, ids: Tensor) -> Tensor:
        """Logits (B, T, vocab_size), fp32, for token ids (B, T): every position, causal, no cache."""
        x = self.embed[ids]  # (B, T, d)
        for layer in self.layers:
            x = layer(x)
        return rms_norm(x, self.norm, self.config.norm_eps) @ self.embed.T  # (B, T, V)
