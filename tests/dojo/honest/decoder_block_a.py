"""Kata: a Llama decoder block from scratch, loaded with real weights.

Write RMSNorm, RoPE, causal grouped-query attention and the SwiGLU MLP, the block that wires them with
two residuals, and the Llama that stacks the blocks, loading tensors named and laid out as SmolLM2's
GGUF file holds them (Q and K rows permuted). Replace every `raise NotImplementedError` with your
implementation; keep the names and signatures. Read the prompt first: it is the contract (`dojo start
decoder_block` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch  # noqa: F401 - yours to use
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


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least fp32: half / bfloat16 / fp32 compute in fp32, float64 stays float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension; computed in fp32, returned in x's dtype."""
    cdt = _compute_dtype(x.dtype)
    xf = x.to(cdt)
    inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.to(device=x.device, dtype=cdt)).to(x.dtype)


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary embedding of x (..., T, D) at positions (T,): the pair (i, i + D/2) turns by
    positions[t] * theta^(-2i/D) radians. Same shape and dtype as x."""
    D = x.shape[-1]
    T = x.shape[-2]
    if D % 2:
        raise ValueError(f"rope needs an even last dimension, got {D}")
    positions = torch.as_tensor(positions, device=x.device).reshape(-1)
    if positions.numel() != T:
        raise ValueError(f"rope: {positions.numel()} positions for a sequence of length {T}")
    half = D // 2
    cdt = _compute_dtype(x.dtype)
    # Angles in float64 for accuracy, then cast to the compute dtype.
    inv_freq = float(theta) ** (-(2.0 * torch.arange(half, dtype=torch.float64, device=x.device)) / D)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    cos = torch.cos(angles).to(cdt)
    sin = torch.sin(angles).to(cdt)
    xf = x.to(cdt)
    x1, x2 = xf[..., :half], xf[..., half:]
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal grouped-query attention: q (B, Hq, T, D), k and v (B, Hkv, T, D) -> (B, Hq, T, D).

    Query head h reads KV head h // (Hq // Hkv); position t sees positions 0..t; scores q.k / sqrt(D).
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("attention expects 4-D q, k, v of shape (B, H, T, D)")
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    if Hq % Hkv:
        raise ValueError(f"query heads {Hq} must be a multiple of KV heads {Hkv}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} disagree")
    group = Hq // Hkv
    cdt = _compute_dtype(q.dtype)
    qf, kf, vf = q.to(cdt), k.to(cdt), v.to(cdt)
    if group > 1:  # query head h -> KV head h // group
        kf = kf.repeat_interleave(group, dim=1)
        vf = vf.repeat_interleave(group, dim=1)
    scores = (qf @ kf.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, Hq, Tq, Tk)
    # Query i (the last Tq of Tk positions) sees key j iff j <= i + (Tk - Tq); with Tq == Tk: j <= i.
    i = torch.arange(Tq, device=q.device)[:, None]
    j = torch.arange(Tk, device=q.device)[None, :]
    mask = j > i + (Tk - Tq)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs @ vf).to(q.dtype)


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T; weights (out, in): gate and up (d_ff, d), down (d, d_ff)."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def _unpermute(w: Tensor, n_head: int) -> Tensor:
    """Inverse of llama.cpp's LlamaModel.permute: the file's row 2i + j of a head goes back to row j*hd/2 + i."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape).contiguous()


def _take(weights: dict[str, Tensor], name: str, shape: tuple[int, ...]) -> Tensor:
    if name not in weights:
        raise ValueError(f"missing tensor {name!r} (expected shape {shape})")
    t = weights[name]
    if not isinstance(t, Tensor):
        raise ValueError(f"tensor {name!r} is not a torch.Tensor but {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t.detach()


_BLOCK_TENSORS = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)


class DecoderBlock(nn.Module):
    """One Llama layer: h = x + attention(rms_norm(x)), then h + swiglu(rms_norm(h))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        for name in _BLOCK_TENSORS:
            self.register_buffer(name, None)

    def _prepare(self, weights: dict[str, Tensor], layer: int) -> dict[str, Tensor]:
        """Validate and fetch this layer's tensors (Q and K un-permuted) without touching the module."""
        c = self.config
        hd = c.head_dim
        d, q_out, kv_out = c.d_model, c.n_heads * hd, c.n_kv_heads * hd
        shapes = {
            "attn_norm": (d,),
            "attn_q": (q_out, d),
            "attn_k": (kv_out, d),
            "attn_v": (kv_out, d),
            "attn_output": (d, q_out),
            "ffn_norm": (d,),
            "ffn_gate": (c.d_ff, d),
            "ffn_up": (c.d_ff, d),
            "ffn_down": (d, c.d_ff),
        }
        out = {name: _take(weights, f"blk.{layer}.{name}.weight", shape) for name, shape in shapes.items()}
        out["attn_q"] = _unpermute(out["attn_q"], c.n_heads)
        out["attn_k"] = _unpermute(out["attn_k"], c.n_kv_heads)
        return out

    def _commit(self, tensors: dict[str, Tensor]) -> None:
        for name, t in tensors.items():
            setattr(self, name, t)  # registered buffer: follows .to() / .double()

    def load(self, weights: dict[str, Tensor], layer: int) -> None:
        """Take this layer's tensors, `blk.{layer}.attn_q.weight` and the rest, from GGUF-named fp32 `weights`
        (attn_q and attn_k rows as llama.cpp's converter permuted them). ValueError naming a tensor that is
        missing or has the wrong shape."""
        self._commit(self._prepare(weights, layer))

    def _w(self, name: str, like: Tensor) -> Tensor:
        t = getattr(self, name)
        if t is None:
            raise RuntimeError("DecoderBlock used before load()")
        return t.to(device=like.device, dtype=like.dtype)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d_model) at positions 0..T-1 -> (B, T, d_model)."""
        c = self.config
        B, T, _ = x.shape
        hd = c.head_dim
        eps = c.norm_eps
        positions = torch.arange(T, device=x.device)

        xn = rms_norm(x, self._w("attn_norm", x), eps)
        q = (xn @ self._w("attn_q", x).T).view(B, T, c.n_heads, hd).transpose(1, 2)
        k = (xn @ self._w("attn_k", x).T).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        v = (xn @ self._w("attn_v", x).T).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        q = rope(q, positions, c.rope_theta)
        k = rope(k, positions, c.rope_theta)
        a = attention(q, k, v).transpose(1, 2).reshape(B, T, c.n_heads * hd)
        h = x + a @ self._w("attn_output", x).T

        hn = rms_norm(h, self._w("ffn_norm", h), eps)
        return h + swiglu(hn, self._w("ffn_gate", h), self._w("ffn_up", h), self._w("ffn_down", h))


class Llama(nn.Module):
    """Token embedding, n_layers DecoderBlocks, a final RMSNorm, and the LM head tied to the embedding."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layers))
        self.register_buffer("token_embd", None)
        self.register_buffer("output_norm", None)

    def load(self, weights: dict[str, Tensor]) -> None:
        """Take every tensor from GGUF-named fp32 `weights` (token_embd.weight, output_norm.weight, blk.{i}.*).
        ValueError naming a tensor that is missing or has the wrong shape; other keys are ignored."""
        c = self.config
        # Validate everything first so a failed load leaves the model unchanged.
        embd = _take(weights, "token_embd.weight", (c.vocab_size, c.d_model))
        norm = _take(weights, "output_norm.weight", (c.d_model,))
        per_block = [block._prepare(weights, i) for i, block in enumerate(self.blocks)]
        self.token_embd = embd
        self.output_norm = norm
        for block, tensors in zip(self.blocks, per_block):
            block._commit(tensors)

    def forward(self, ids: Tensor) -> Tensor:
        """Logits (B, T, vocab_size), fp32, for token ids (B, T) of torch.long: causal, every position, no cache."""
        if self.token_embd is None or self.output_norm is None:
            raise RuntimeError("Llama used before load()")
        embd = self.token_embd
        x = embd[ids.to(device=embd.device, dtype=torch.long)]
        for block in self.blocks:
            x = block(x)
        x = rms_norm(x, self.output_norm, self.config.norm_eps)
        return (x @ embd.T).float()
