"""An independent INT4 (Q4_1) kata solution, written from the kata's README and stub only: a
false-positive fixture for the similarity measure (tests/dojo/test_similarity.py); it passes the
hidden suite."""

from __future__ import annotations

import numpy as np
import torch

from solutions.roofline import phase_cost

QK = 32
Q4_BYTES, Q8_BYTES = 20, 34
WIDTHS = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "q8_0": Q8_BYTES / QK, "q4_1": Q4_BYTES / QK}
TORCH_TYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def quantize_q4_1(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=np.float32)
    if w.ndim == 0 or w.shape[-1] % QK:
        raise ValueError(f"last dimension {w.shape[-1:]} is not a multiple of {QK}")
    lead = w.shape[:-1]
    grouped = w.reshape(-1, QK)
    lo = grouped.min(axis=1)
    hi = grouped.max(axis=1)
    scale = (hi - lo) / np.float32(15)
    inverse = np.zeros_like(scale)
    np.divide(np.float32(1), scale, out=inverse, where=scale != 0)
    codes = np.trunc((grouped - lo[:, None]) * inverse[:, None] + np.float32(0.5))
    codes = np.clip(codes, 0, 15).astype(np.uint8)
    packed = codes[:, :16] | (codes[:, 16:] << 4)
    header = np.stack([scale.astype(np.float16), lo.astype(np.float16)], axis=1).view(np.uint8)
    out = np.concatenate([header.reshape(-1, 4), packed], axis=1)
    return out.reshape(*lead, w.shape[-1] // QK * Q4_BYTES)


def _as_blocks(blocks: np.ndarray, shape: tuple[int, ...], width: int) -> np.ndarray:
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1)
    count = int(np.prod(shape)) if len(shape) else 1
    if len(shape) == 0 or shape[-1] % QK or raw.size != count // QK * width:
        raise ValueError(f"{raw.size} bytes do not hold {shape} weights at {width} bytes per {QK}")
    return raw.reshape(-1, width)


def dequantize_q4_1(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    rows = _as_blocks(blocks, tuple(shape), Q4_BYTES)
    scale = rows[:, 0:2].copy().view(np.float16).astype(np.float32)
    low = rows[:, 2:4].copy().view(np.float16).astype(np.float32)
    nibbles = rows[:, 4:]
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32)
    return (scale * codes + low).reshape(shape)


def dequantize_q8_0(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    rows = _as_blocks(blocks, tuple(shape), Q8_BYTES)
    scale = rows[:, :2].copy().view(np.float16).astype(np.float32)
    codes = rows[:, 2:].copy().view(np.int8).astype(np.float32)
    return (codes * scale).reshape(shape)


def matmul_q4_1(x: np.ndarray, blocks: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    if len(shape) != 2:
        raise ValueError(f"shape must be (N, K), got {shape}")
    n, k = shape
    rows = _as_blocks(blocks, (n, k), Q4_BYTES).reshape(n, -1)
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1:] != (k,):
        raise ValueError(f"x ends in {x.shape[-1:]}, want ({k},)")
    out = np.empty(x.shape[:-1] + (n,), dtype=np.float32)
    step = max(1, (1 << 16) // max(k, 1))  # rows per slab: about 256 KB of fp32 at a time
    for first in range(0, n, step):
        last = min(n, first + step)
        slab = dequantize_q4_1(rows[first:last], (last - first, k))
        out[..., first:last] = x @ slab.T
    return out


def bytes_per_weight(fmt: str) -> float:
    key = str(fmt).lower()
    if key not in WIDTHS:
        raise ValueError(f"unknown format {fmt!r}; known: {sorted(WIDTHS)}")
    return WIDTHS[key]


def _parameter_count(config) -> int:
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    attention = d * d * 2 + d * kv * 2
    mlp = 3 * d * config.d_ff
    per_layer = attention + mlp + 2 * d
    return config.n_layers * per_layer + config.vocab_size * d + d


def predicted_decode_speedup(config, from_dtype: str, to_fmt: str, batch: int, context_len: int) -> float:
    source = str(from_dtype).lower()
    if source not in TORCH_TYPES:
        raise ValueError(f"from_dtype must be fp32, fp16 or bf16, got {from_dtype!r}")
    target = bytes_per_weight(to_fmt)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if context_len < 0:
        raise ValueError(f"context_len must be >= 0, got {context_len}")
    before = phase_cost(config, "decode", batch, 1, context_len, TORCH_TYPES[source]).bytes
    params = _parameter_count(config)
    after = before - params * WIDTHS[source] + params * target
    return before / after
