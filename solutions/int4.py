"""INT4 weight-only quantization in GGUF's Q4_1 layout, Q8_0 dequantization, and what it buys at decode.

Q4_1 stores each block of 32 weights in 20 bytes (an fp16 scale d, an fp16 minimum m, 4-bit codes
q) so that w ~= d * q + m; Q8_0 stores an fp16 scale and 32 int8 codes, w = d * q. The dequantizers
load SmolLM2 and are bit-exact against `gguf.quants.dequantize`. Shapes are numpy order, (rows,
cols) = (out_features, in_features). Not a fast kernel: `matmul_q4_1` dequantizes, then calls BLAS.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from solutions.roofline import phase_cost

BLOCK = 32  # weights per block, both formats
Q4_1_BYTES = 20  # fp16 d, fp16 m, 16 bytes of nibbles
Q8_0_BYTES = 34  # fp16 d, 32 int8


def _blocks_2d(blocks: np.ndarray, shape: tuple[int, ...], block_bytes: int, fmt: str) -> np.ndarray:
    """Check raw block bytes against a logical shape; return them as (n_blocks, block_bytes) uint8."""
    blocks = np.asarray(blocks)
    if blocks.dtype != np.uint8:
        raise ValueError(f"{fmt} blocks must be raw uint8 bytes, got dtype {blocks.dtype}")
    shape = tuple(int(s) for s in shape)
    if not shape or shape[-1] % BLOCK != 0:
        raise ValueError(
            f"{fmt} rows are cut into blocks of {BLOCK}: last dimension of {shape} is not a multiple"
        )
    n_blocks = math.prod(shape) // BLOCK
    if blocks.size != n_blocks * block_bytes:
        raise ValueError(
            f"{fmt} shape {shape} needs {n_blocks} blocks x {block_bytes} bytes = "
            f"{n_blocks * block_bytes} bytes, got {blocks.size}"
        )
    return np.ascontiguousarray(blocks).reshape(n_blocks, block_bytes)


def quantize_q4_1(w: np.ndarray) -> np.ndarray:
    """Quantize float weights (..., K), K a multiple of 32, to Q4_1 blocks: uint8 (..., K // 32 * 20).

    Per block: d = (max - min) / 15 and m = min, computed in fp32; codes are
    q = trunc((w - min) * (1 / d) + 0.5) clipped to 0..15 (d == 0 gives q = 0); d and m are stored as fp16.
    Bit-exact against gguf.quants.quantize(w, Q4_1). Raises ValueError on a bad last dimension.
    """
    w = np.asarray(w, dtype=np.float32)
    if w.ndim == 0 or w.shape[-1] % BLOCK != 0:
        raise ValueError(
            f"Q4_1 rows are cut into blocks of {BLOCK}: shape {w.shape} has a last dimension that is not a multiple"
        )
    x = w.reshape(-1, BLOCK)  # (n_blocks, 32)
    lo = x.min(axis=1, keepdims=True)
    hi = x.max(axis=1, keepdims=True)
    d = (hi - lo) / np.float32(15)
    with np.errstate(divide="ignore"):
        inv_d = np.where(d == 0, np.float32(0), np.float32(1) / d)  # the codes use the fp32 scale
    q = np.trunc((x - lo) * inv_d + np.float32(0.5)).astype(np.uint8).clip(0, 15)
    packed = q[:, :16] | (q[:, 16:] << np.uint8(4))  # (n_blocks, 16): element j low, j + 16 high
    out = np.concatenate(
        [d.astype(np.float16).view(np.uint8), lo.astype(np.float16).view(np.uint8), packed], axis=1
    )
    return out.reshape(*w.shape[:-1], w.shape[-1] // BLOCK * Q4_1_BYTES)


def dequantize_q4_1(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 block bytes -> float32 array of `shape` (numpy order; the last dimension runs along blocks).

    `blocks` is uint8 of any shape holding n_blocks * 20 bytes (as gguf.GGUFReader's tensor.data).
    Each weight is d * q + m in fp32, with d and m widened from fp16. Raises ValueError when the
    bytes do not fit `shape`.
    """
    b = _blocks_2d(blocks, shape, Q4_1_BYTES, "Q4_1")
    d = b[:, 0:2].view(np.float16).astype(np.float32)  # (n_blocks, 1)
    m = b[:, 2:4].view(np.float16).astype(np.float32)  # (n_blocks, 1)
    nib = b[:, 4:]  # (n_blocks, 16)
    out = np.empty((b.shape[0], BLOCK), dtype=np.float32)  # filled in place: no full-size temporaries
    out[:, :16] = nib & np.uint8(0x0F)  # element j: low nibble of byte j
    out[:, 16:] = nib >> np.uint8(4)  # element j + 16: high nibble of byte j
    out *= d  # d * q, then + m: the same fp32 operations, in the same order, as llama.cpp
    out += m
    return out.reshape(shape)


def dequantize_q8_0(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 block bytes -> float32 array of `shape` (numpy order): each weight is d * q, q an int8.

    `blocks` is uint8 of any shape holding n_blocks * 34 bytes. Raises ValueError when the bytes
    do not fit `shape`.
    """
    b = _blocks_2d(blocks, shape, Q8_0_BYTES, "Q8_0")
    d = b[:, 0:2].view(np.float16).astype(np.float32)  # (n_blocks, 1)
    q = b[:, 2:].view(np.int8).astype(np.float32)  # (n_blocks, 32)
    return (q * d).reshape(shape)


def matmul_q4_1(x: np.ndarray, blocks: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """x @ W.T for W (N, K) held as Q4_1 blocks: x (..., K) float32 -> (..., N) float32.

    Dequantizes a slab of rows at a time (256 KB of fp32), so the full fp32 matrix never
    exists at once. Raises ValueError when `shape` is not 2-D, the blocks do not fit it, or x's
    last dimension is not K.
    """
    if len(shape) != 2:
        raise ValueError(f"matmul_q4_1 takes a 2-D weight shape (N, K), got {tuple(shape)}")
    n, k = (int(s) for s in shape)
    rows = _blocks_2d(blocks, (n, k), Q4_1_BYTES, "Q4_1").reshape(n, k // BLOCK * Q4_1_BYTES)
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] != k:
        raise ValueError(
            f"x must end in K = {k} features to multiply a ({n}, {k}) weight, got shape {x.shape}"
        )
    x2 = x.reshape(-1, k)  # (M, K)
    out = np.empty((x2.shape[0], n), dtype=np.float32)  # (M, N)
    slab = max(1, (1 << 16) // k)  # rows per slab: 2**16 floats, 256 KB of fp32
    for r in range(0, n, slab):
        w = dequantize_q4_1(rows[r : r + slab], (min(slab, n - r), k))  # (slab, K)
        out[:, r : r + slab] = x2 @ w.T
    return out.reshape(*x.shape[:-1], n)


_BYTES_PER_WEIGHT = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "q8_0": Q8_0_BYTES / BLOCK,  # 1.0625: 8.5 bits per weight
    "q4_1": Q4_1_BYTES / BLOCK,  # 0.625: 5 bits per weight, not 4
}


def bytes_per_weight(fmt: str) -> float:
    """Storage bytes per weight, scales and minima included: fp32 4, fp16/bf16 2, q8_0 34/32, q4_1 20/32.

    `fmt` is case-insensitive. Raises ValueError for an unknown format.
    """
    key = str(fmt).lower()
    if key not in _BYTES_PER_WEIGHT:
        raise ValueError(f"unknown weight format {fmt!r}: use one of {', '.join(_BYTES_PER_WEIGHT)}")
    return _BYTES_PER_WEIGHT[key]


def _n_params(config) -> int:
    """Parameters of a Llama config: tied embedding once, attention, SwiGLU MLP, norms."""
    d, hd = config.d_model, config.head_dim
    attn = d * config.n_heads * hd * 2 + d * config.n_kv_heads * hd * 2  # q, o; k, v
    layer = attn + 3 * d * config.d_ff + 2 * d  # gate, up, down; two norms
    return config.vocab_size * d + config.n_layers * layer + d  # + final norm


_FLOAT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def predicted_decode_speedup(config, from_dtype: str, to_fmt: str, batch: int, context_len: int) -> float:
    """Predicted decode speed-up from storing every weight in `to_fmt` instead of `from_dtype`.

    Decode at small batch is bandwidth-bound, so a step's time is proportional to the bytes it
    moves: the roofline's phase_cost("decode") in from_dtype (every parameter once, the new
    token's embedding row, the KV cache read and written). Only the parameters change format:
    their n_params x bytes_per_weight(from_dtype) bytes become n_params x bytes_per_weight(to_fmt);
    the KV cache and activations stay in from_dtype. Returns bytes(from) / bytes(to).
    Raises ValueError for a from_dtype that is not fp32/fp16/bf16 (it also sets the cache's dtype),
    an unknown to_fmt, and whatever phase_cost rejects (batch < 1, context_len < 0, past max_seq_len).
    """
    key = str(from_dtype).lower()
    if key not in _FLOAT_DTYPES:
        raise ValueError(f"from_dtype is the model's float dtype (fp32, fp16 or bf16), got {from_dtype!r}")
    before = phase_cost(
        config, "decode", batch=batch, seq_len=1, context_len=context_len, dtype=_FLOAT_DTYPES[key]
    ).bytes
    n = _n_params(config)
    after = before - n * bytes_per_weight(key) + n * bytes_per_weight(to_fmt)
    return before / after
