"""INT4 weight-only quantization in GGUF's Q4_1 layout, Q8_0 dequantization, and what it buys at decode.

Q4_1 cuts a row into blocks of 32 weights and stores each block as 20 bytes: an fp16 scale `d`,
an fp16 minimum `m`, then 16 bytes of 4-bit codes `q` (low nibbles hold elements 0-15, high
nibbles elements 16-31), so that w ~= d * q + m. Q8_0 (34 bytes per 32) stores an fp16 scale and
32 int8 codes: w = d * q. The dequantizers are the ones solutions/weights.py uses to load SmolLM2,
bit-exact against `gguf.quants.dequantize`.

Shapes are numpy / PyTorch order, (rows, cols) = (out_features, in_features): the reverse of
gguf's `tensor.shape` (ggml lists the fastest-moving dimension first). Blocks run along a row.

Left out: the K-quants, importance-weighted rounding, and a fused int4 kernel (matmul_q4_1
dequantizes a slab of rows at a time, then calls BLAS: correct and bounded in memory, not fast).
"""

from __future__ import annotations

import math

import numpy as np

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
        raise ValueError(f"{fmt} rows are cut into blocks of {BLOCK}: last dimension of {shape} is not a multiple")
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
    q = trunc((w - min) / d + 0.5) clipped to 0..15 (d == 0 gives q = 0); d and m are stored as fp16.
    Bit-exact against gguf.quants.quantize(w, Q4_1). Raises ValueError on a bad last dimension.
    """
    w = np.asarray(w, dtype=np.float32)
    if w.ndim == 0 or w.shape[-1] % BLOCK != 0:
        raise ValueError(f"Q4_1 rows are cut into blocks of {BLOCK}: shape {w.shape} has a last dimension that is not a multiple")
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
    q = np.concatenate([nib & np.uint8(0x0F), nib >> np.uint8(4)], axis=1).astype(np.float32)  # (n_blocks, 32)
    return (d * q + m).reshape(shape)


def dequantize_q8_0(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 block bytes -> float32 array of `shape` (numpy order): each weight is d * q, q an int8.

    `blocks` is uint8 of any shape holding n_blocks * 34 bytes. Raises ValueError when the bytes
    do not fit `shape`.
    """
    b = _blocks_2d(blocks, shape, Q8_0_BYTES, "Q8_0")
    d = b[:, 0:2].view(np.float16).astype(np.float32)  # (n_blocks, 1)
    q = b[:, 2:].view(np.int8).astype(np.float32)  # (n_blocks, 32)
    return (q * d).reshape(shape)
