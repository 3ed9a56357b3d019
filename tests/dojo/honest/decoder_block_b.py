"""Kata: a Llama decoder block from scratch, loaded with real weights.

RMSNorm, RoPE (rotate-half pairing), causal grouped-query attention, the SwiGLU MLP, the block that wires
them with two residuals, and the Llama that stacks the blocks, loading tensors named and laid out as
SmolLM2's GGUF file holds them (Q and K rows permuted by llama.cpp's converter; undone in `load`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
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


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp16/bf16 (and anything non-float) compute in fp32; fp32 and float64 in their own precision."""
    if dtype in (torch.float32, torch.float64):
        return dtype
    return torch.float32


# --------------------------------------------------------------------------------------------- the parts


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension; computed in fp32, returned in x's dtype."""
    cdt = _compute_dtype(x.dtype)
    xc = x.to(cdt)
    inv_rms = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xc * inv_rms * weight.to(device=x.device, dtype=cdt)).to(x.dtype)


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary embedding of x (..., T, D) at positions (T,): the pair (i, i + D/2) turns by
    positions[t] * theta^(-2i/D) radians. Same shape and dtype as x."""
    T, D = x.shape[-2], x.shape[-1]
    if D % 2:
        raise ValueError(f"rope needs an even last dimension, got {D}")
    positions = torch.as_tensor(positions, device=x.device).reshape(-1)
    if positions.shape[0] != T:
        raise ValueError(f"rope got {positions.shape[0]} positions for a sequence of length {T}")
    half = D // 2
    # Angles in float64 so that large positions keep their accuracy; cast once for the rotation.
    inv_freq = float(theta) ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2.0 / D)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    cdt = _compute_dtype(x.dtype)
    cos, sin = angles.cos().to(cdt), angles.sin().to(cdt)
    xc = x.to(cdt)
    x1, x2 = xc[..., :half], xc[..., half:]
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal grouped-query attention: q (B, Hq, T, D), k and v (B, Hkv, T, D) -> (B, Hq, T, D).

    Query head h reads KV head h // (Hq // Hkv); position t sees positions 0..t; scores q.k / sqrt(D).
    """
    B, Hq, T, D = q.shape
    Hkv = k.shape[1]
    if k.shape != v.shape or k.shape[0] != B or k.shape[2:] != (T, D):
        raise ValueError(
            f"attention shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if Hq % Hkv:
        raise ValueError(f"query heads {Hq} are not a multiple of KV heads {Hkv}")
    group = Hq // Hkv
    cdt = _compute_dtype(q.dtype)
    # (B, Hkv, 1, T, D) against (B, Hkv, group, T, D): query head h = kv * group + g reads KV head kv.
    qg = q.to(cdt).reshape(B, Hkv, group, T, D)
    kc = k.to(cdt).unsqueeze(2)
    vc = v.to(cdt).unsqueeze(2)
    scores = (qg @ kc.transpose(-1, -2)) * (1.0 / math.sqrt(D))  # (B, Hkv, group, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = probs @ vc  # (B, Hkv, group, T, D)
    return out.reshape(B, Hq, T, D).to(q.dtype)


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T; weights (out, in): gate and up (d_ff, d), down (d, d_ff)."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


# ----------------------------------------------------------------------------------------- weight loading


def _take(weights: dict[str, Tensor], name: str, shape: tuple[int, ...]) -> Tensor:
    """The tensor `name` from `weights`, checked for presence and shape (ValueError naming it otherwise)."""
    if name not in weights:
        raise ValueError(f"missing tensor {name!r} (expected shape {shape})")
    t = weights[name]
    if not isinstance(t, Tensor):
        try:
            t = torch.as_tensor(t)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"tensor {name!r} is not a tensor: {type(t).__name__}") from exc
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if not t.is_floating_point():
        t = t.float()
    return t.detach()


def unpermute_qk(w: Tensor, n_head: int) -> Tensor:
    """Inverse of llama.cpp's LlamaModel.permute: the file's row 2i + j of a head goes back to row j*hd/2 + i."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape).contiguous()


# ---------------------------------------------------------------------------------------------- the model


class DecoderBlock(nn.Module):
    """One Llama layer: h = x + attention(rms_norm(x)), then h + swiglu(rms_norm(h))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        # Buffers (not parameters): they follow .to() / .double(), are zero until `load`.
        for key, shape in self._shapes().items():
            self.register_buffer(key, torch.zeros(shape), persistent=True)

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.config
        hd = c.head_dim
        return {
            "attn_norm": (c.d_model,),
            "attn_q": (c.n_heads * hd, c.d_model),
            "attn_k": (c.n_kv_heads * hd, c.d_model),
            "attn_v": (c.n_kv_heads * hd, c.d_model),
            "attn_output": (c.d_model, c.n_heads * hd),
            "ffn_norm": (c.d_model,),
            "ffn_gate": (c.d_ff, c.d_model),
            "ffn_up": (c.d_ff, c.d_model),
            "ffn_down": (c.d_model, c.d_ff),
        }

    def _prepare(self, weights: dict[str, Tensor], layer: int) -> dict[str, Tensor]:
        """Check and convert this layer's tensors, without touching the module (so a bad dict changes nothing)."""
        out = {
            key: _take(weights, f"blk.{layer}.{key}.weight", shape) for key, shape in self._shapes().items()
        }
        out["attn_q"] = unpermute_qk(out["attn_q"], self.config.n_heads)
        out["attn_k"] = unpermute_qk(out["attn_k"], self.config.n_kv_heads)
        return out

    def _assign(self, tensors: dict[str, Tensor]) -> None:
        for key, t in tensors.items():
            device = getattr(self, key).device
            setattr(self, key, t.to(device).contiguous())

    def load(self, weights: dict[str, Tensor], layer: int) -> None:
        """Take this layer's tensors, `blk.{layer}.attn_q.weight` and the rest, from GGUF-named fp32 `weights`
        (attn_q and attn_k rows as llama.cpp's converter permuted them). ValueError naming a tensor that is
        missing or has the wrong shape."""
        self._assign(self._prepare(weights, layer))

    def _w(self, key: str, like: Tensor) -> Tensor:
        return getattr(self, key).to(device=like.device, dtype=like.dtype)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d_model) at positions 0..T-1 -> (B, T, d_model)."""
        c = self.config
        B, T, d = x.shape
        if d != c.d_model:
            raise ValueError(f"DecoderBlock expects d_model {c.d_model}, got input of width {d}")
        hd = c.head_dim
        positions = torch.arange(T, device=x.device)

        a = rms_norm(x, self._w("attn_norm", x), c.norm_eps)
        q = (a @ self._w("attn_q", x).T).view(B, T, c.n_heads, hd).transpose(1, 2)
        k = (a @ self._w("attn_k", x).T).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        v = (a @ self._w("attn_v", x).T).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        q = rope(q, positions, c.rope_theta)
        k = rope(k, positions, c.rope_theta)
        o = attention(q, k, v).transpose(1, 2).reshape(B, T, c.n_heads * hd)
        h = x + o @ self._w("attn_output", x).T

        m = rms_norm(h, self._w("ffn_norm", h), c.norm_eps)
        return h + swiglu(m, self._w("ffn_gate", h), self._w("ffn_up", h), self._w("ffn_down", h))


class Llama(nn.Module):
    """Token embedding, n_layers DecoderBlocks, a final RMSNorm, and the LM head tied to the embedding."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.register_buffer("token_embd", torch.zeros(config.vocab_size, config.d_model))
        self.register_buffer("output_norm", torch.zeros(config.d_model))
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layers))

    def load(self, weights: dict[str, Tensor]) -> None:
        """Take every tensor from GGUF-named fp32 `weights` (token_embd.weight, output_norm.weight, blk.{i}.*).
        ValueError naming a tensor that is missing or has the wrong shape; other keys are ignored."""
        c = self.config
        embd = _take(weights, "token_embd.weight", (c.vocab_size, c.d_model))
        norm = _take(weights, "output_norm.weight", (c.d_model,))
        per_block = [block._prepare(weights, i) for i, block in enumerate(self.blocks)]  # validate all first
        self.token_embd = embd.to(self.token_embd.device).contiguous()
        self.output_norm = norm.to(self.output_norm.device).contiguous()
        for block, tensors in zip(self.blocks, per_block):
            block._assign(tensors)

    def forward(self, ids: Tensor) -> Tensor:
        """Logits (B, T, vocab_size), fp32, for token ids (B, T) of torch.long: causal, every position, no cache."""
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2:
            raise ValueError(f"ids must be (B, T), got shape {tuple(ids.shape)}")
        embd = self.token_embd
        x = embd[ids.to(device=embd.device, dtype=torch.long)]
        for block in self.blocks:
            x = block(x)
        x = rms_norm(x, self.output_norm, self.config.norm_eps)
        return (x @ embd.to(x.dtype).T).float()
