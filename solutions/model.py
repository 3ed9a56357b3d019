"""A Llama-architecture decoder (SmolLM2-135M), assembled from the kata references.

RMSNorm, RoPE, grouped-query attention, a SwiGLU MLP and tied embeddings. `forward` (no cache),
`prefill` (a chunk into a KV cache) and `decode_step` (one token per row) share one per-layer loop;
batches may be left-padded (`attention_mask`). Attention and cache are injectable (`attention_fn`,
`cache_cls`) so a learner's passed katas can be swapped in. A matrix may be a packed weight and a
model may carry a native `fused_step`; this file's path stays the readable one they are tested
against. Not here: training conveniences, fp16 activations, sliding windows, RoPE scaling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.system.kernels import packed_gemm


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
            if f.type in ("int", int) and not isinstance(value, int):
                raise ValueError(f"LlamaConfig.{f.name} must be an integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads} "
                "(grouped-query attention shares each KV head among a whole group of query heads)"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even: RoPE rotates pairs of dimensions")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def smollm2_135m(cls) -> LlamaConfig:
        return cls()

    @classmethod
    def tiny(cls, **overrides) -> LlamaConfig:
        """A model small enough for a test to run in milliseconds; same architecture."""
        base = cls(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128, max_seq_len=256)
        return replace(base, **overrides)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (torch's fused kernel, same math)."""
    return F.rms_norm(x, weight.shape, weight, eps)


def rope_tables(head_dim: int, max_len: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and signed sin of position * frequency, each (max_len, head_dim), for `apply_rope`.

    Dimension i (< D/2) and i + D/2 share frequency theta^(-2i/D), as in HF's Llama. The sin table's
    first half is negated, folding rotate-half's minus sign into the table.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # (T, D/2)
    sin = angles.sin()
    return torch.cat([angles, angles], dim=-1).cos(), torch.cat([-sin, sin], dim=-1)  # (T, D) each


def apply_rope(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """Rotate each pair (i, i + D/2) of x (..., D) by its position's angle; tables broadcast to x.

    Readable form: x * cos + cat(-x2, x1) * sin, with x1, x2 the two halves ("rotate half").
    Here cat(x2, x1) is x.roll(D/2) and the minus sign lives in `signed_sin`: three ops, not six.
    """
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


def linear_weight(n_out: int, n_in: int) -> nn.Parameter:
    """An (n_out, n_in) weight for F.linear, row-major. Which memory order BLAS multiplies fastest
    differs between machines; solutions.system.kernels.calibration measures it and the loader applies it."""
    return nn.Parameter(torch.empty(n_out, n_in))


def project(x: Tensor, w) -> Tensor:
    """x (..., K) @ w.T for a weight w (N, K): F.linear for a Tensor, else the packed weight's own
    product (solutions.system.kernels.weight_modes), fp32 in and out either way. An fp32 weight marked by
    solutions.system.kernels.packed_gemm.enable goes through MKL's packed GEMM for the row counts it was marked for."""
    if not isinstance(w, Tensor):
        return w(x)
    y = packed_gemm.project(x, w)
    return F.linear(x, w) if y is None else y


class Block(nn.Module):
    """One decoder layer: x + attn(norm(x)), then x + mlp(norm(x)). Weights fused for speed."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        d, hd = config.d_model, config.head_dim
        self.q_dim, self.kv_dim = config.n_heads * hd, config.n_kv_heads * hd
        self.attn_norm = nn.Parameter(torch.empty(d))
        self.wqkv = linear_weight(self.q_dim + 2 * self.kv_dim, d)  # rows: q | k | v
        self.wo = linear_weight(d, self.q_dim)
        self.ffn_norm = nn.Parameter(torch.empty(d))
        self.w_gate_up = linear_weight(2 * config.d_ff, d)  # rows: gate | up
        self.w_down = linear_weight(d, config.d_ff)


class Llama(nn.Module):
    """A Llama decoder with `forward`, `prefill` and `decode_step`; logits are fp32."""

    prefill_last_only = True  # prefill(..., last_only=True) exists: solutions.generate asks for one position

    def __init__(
        self, config: LlamaConfig, *, attention_fn: Callable | None = None, cache_cls: type | None = None
    ):
        super().__init__()
        if attention_fn is None:
            from solutions.system.kernels.attention_fast import (
                attention as attention_fn,  # fused, same contract
            )
        if cache_cls is None:
            from solutions.kv_cache import KVCache as cache_cls
        self.config = config
        self.attention_fn = attention_fn
        self.cache_cls = cache_cls
        self.embed = linear_weight(config.vocab_size, config.d_model)  # (V, d), also the LM head
        self.lm_head = None  # None: the tied embedding; a packed weight where the mode holds it apart
        self.fused_step = (
            None  # a native whole step (solutions.system.kernels.fused_step), where the mode has one
        )
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.Parameter(torch.empty(config.d_model))
        cos, sin = rope_tables(config.head_dim, config.max_seq_len, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_signed_sin", sin, persistent=False)

    def new_cache(self, batch_size: int, max_len: int | None = None):
        """An empty KV cache for `batch_size` rows and up to `max_len` positions (default: the context)."""
        c = self.config
        max_len = c.max_seq_len if max_len is None else max_len
        if max_len > c.max_seq_len:
            raise ValueError(f"cache max_len {max_len} exceeds the model's context of {c.max_seq_len}")
        return self.cache_cls(
            c.n_layers,
            batch_size,
            c.n_kv_heads,
            c.head_dim,
            max_len,
            dtype=self.norm.dtype,
            device=self.norm.device,
        )

    def forward(self, ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) for ids (B, T), recomputing everything (no cache)."""
        return self._run(ids, None, attention_mask)

    @torch.no_grad()
    def prefill(
        self, ids: Tensor, cache, attention_mask: Tensor | None = None, *, last_only: bool = False
    ) -> Tensor:
        """Append ids (B, T) after the cache's `length` positions; logits (B, T, V), or with
        `last_only` only the last position's (B, 1, V): the LM head then runs on one position, not T.

        Call it repeatedly for chunked prefill. `attention_mask` (B, cache.length + T), True = real
        token, covers the cached and the new positions.
        Raises ValueError if the tokens would run past the context, and the cache's error
        (`CacheFullError`) if they would run past the cache.
        """
        fused = getattr(self.fused_step, "prefill", None)
        if fused is not None and (logits := fused(ids, cache, attention_mask, last_only)) is not None:
            return logits  # tokens of one row in native calls
        return self._run(ids, cache, attention_mask, last_only)

    @torch.no_grad()
    def decode_step(self, ids: Tensor, cache, attention_mask: Tensor | None = None) -> Tensor:
        """One new token per row: ids (B,) -> logits (B, V); mask (B, cache.length + 1) as in prefill."""
        if ids.dim() != 1:
            raise ValueError(
                f"decode_step takes one token per row, ids of shape (B,); got {tuple(ids.shape)}"
            )
        if (
            self.fused_step is not None
            and (logits := self.fused_step(ids, cache, attention_mask)) is not None
        ):
            return logits  # (1, V): the same step in native code (it declines anything but plain batch 1)
        return self._run(ids[:, None], cache, attention_mask)[:, -1]

    def _run(self, ids: Tensor, cache, attention_mask: Tensor | None, last_only: bool = False) -> Tensor:
        c = self.config
        if ids.dim() != 2 or ids.dtype != torch.long:
            raise ValueError(f"ids must be a (B, T) tensor of torch.long; got {tuple(ids.shape)} {ids.dtype}")
        B, T = ids.shape
        start = 0 if cache is None else cache.length
        if T == 0:
            raise ValueError("ids is empty: there is no token to run")
        if start + T > c.max_seq_len:
            raise ValueError(
                f"{start} cached + {T} new tokens = {start + T} exceeds the model's context "
                f"of {c.max_seq_len} tokens"
            )
        if int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {c.vocab_size}); got {int(ids.min())}..{int(ids.max())}"
            )

        if attention_mask is None:
            positions = torch.arange(start, start + T, device=ids.device)[None]  # (1, T)
            key_mask = None
        else:
            if attention_mask.shape != (B, start + T):
                raise ValueError(
                    f"attention_mask must be (B, cached + new) = {(B, start + T)}; "
                    f"got {tuple(attention_mask.shape)}"
                )
            key_mask = attention_mask.bool()
            # subtle: a left-padded row counts positions from its first real token
            positions = (key_mask.long().cumsum(-1) - 1).clamp(min=0)[:, start:]  # (B, T)
        cos = self.rope_cos[positions][:, :, None]  # (B or 1, T, 1, D)
        sin = self.rope_signed_sin[positions][:, :, None]

        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv_heads
        x = (
            F.embedding(ids, self.embed) if isinstance(self.embed, Tensor) else self.embed.rows(ids)
        )  # (B, T, d)
        for i, layer in enumerate(self.layers):
            qkv = project(rms_norm(x, layer.attn_norm, c.norm_eps), layer.wqkv).view(B, T, nh + 2 * nkv, hd)
            qk = apply_rope(qkv[:, :, : nh + nkv], cos, sin)  # (B, T, Hq + Hkv, D): one rotation for both
            q = qk[:, :, :nh].transpose(1, 2)  # (B, Hq, T, D)
            k = qk[:, :, nh:].transpose(1, 2)  # (B, Hkv, T, D)
            v = qkv[:, :, nh + nkv :].transpose(1, 2)  # (B, Hkv, T, D)
            if cache is not None:
                k, v = cache.update(i, k, v)  # (B, Hkv, start + T, D)
            y = self.attention_fn(q, k, v, causal=True, key_padding_mask=key_mask)  # (B, Hq, T, D)
            x = x + project(y.transpose(1, 2).reshape(B, T, layer.q_dim), layer.wo)
            gate, up = project(rms_norm(x, layer.ffn_norm, c.norm_eps), layer.w_gate_up).chunk(2, dim=-1)
            x = x + project(F.silu(gate) * up, layer.w_down)
        head = self.embed if self.lm_head is None else self.lm_head
        if last_only:
            x = x[:, -1:]  # (B, 1, d): norm and head are per position
        return project(rms_norm(x, self.norm, c.norm_eps), head)  # (B, T or 1, V)


def tiny_model(
    seed: int = 0, *, attention_fn: Callable | None = None, cache_cls: type | None = None, **config_overrides
) -> Llama:
    """A `LlamaConfig.tiny` model with deterministic random weights (the global RNG is untouched).

    Linear weights ~ N(0, 1/fan_in) keep activations O(1); embeddings with std 0.25 give logits
    with std ~2: distinct enough that greedy and beam search are not coin flips, small enough that
    cached and recomputed logits agree to ~5e-6.
    """
    model = Llama(LlamaConfig.tiny(**config_overrides), attention_fn=attention_fn, cache_cls=cache_cls)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norm weights
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name == "embed":
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
    return model.eval()


def smollm2_shaped(seed: int = 0, **config_overrides) -> Llama:
    """SmolLM2's shapes (LlamaConfig's defaults, with any overrides) and random weights, uniform in
    +-0.03: no file to read and the same FLOPs and bytes per pass, for measuring, not for text.
    Every weight is written: uninitialised memory may hold denormals, which are slow."""
    model = Llama(replace(LlamaConfig(), **config_overrides))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.03, 0.03, generator=gen)
    return model.eval()
