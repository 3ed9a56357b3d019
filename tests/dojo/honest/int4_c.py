"""GGUF Q4_1 / Q8_0 in numpy, a slab-wise quantized matmul, and the roofline's INT4 prediction.

Variant B: the block layouts are numpy structured dtypes.
"""

from __future__ import annotations

import math

import numpy as np

BLOCK = 32

# one record per block, byte-exact with GGUF (little-endian fp16 scales)
Q4_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", (BLOCK // 2,))])
Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", (BLOCK,))])
assert Q4_1.itemsize == 20 and Q8_0.itemsize == 34


def _records(blocks, shape, layout: np.dtype):
    """View raw bytes as block records, after checking they hold exactly `shape`'s weights."""
    dims = tuple(int(n) for n in np.atleast_1d(np.asarray(shape, dtype=np.int64)))
    if not dims:
        raise ValueError("empty shape")
    if min(dims) < 0:
        raise ValueError(f"bad shape {dims}")
    if dims[-1] % BLOCK != 0:
        raise ValueError(f"the last dimension ({dims[-1]}) must be a multiple of {BLOCK}")
    buf = np.ascontiguousarray(blocks)
    if buf.dtype != np.uint8:
        raise ValueError(f"expected uint8 block bytes, got {buf.dtype}")
    n_blocks = math.prod(dims) // BLOCK
    if buf.size != n_blocks * layout.itemsize:
        raise ValueError(
            f"{buf.size} bytes cannot hold a {dims} tensor: that is {n_blocks} blocks of "
            f"{layout.itemsize} bytes = {n_blocks * layout.itemsize}"
        )
    return buf.reshape(-1).view(layout), dims


def quantize_q4_1(w: np.ndarray) -> np.ndarray:
    """Quantize float weights (..., K), K a multiple of 32, to Q4_1 blocks: uint8 (..., K // 32 * 20)."""
    arr = np.asarray(w, dtype=np.float32)
    if arr.ndim < 1 or arr.shape[-1] % BLOCK:
        raise ValueError(f"last dimension must be a multiple of {BLOCK}; got shape {arr.shape}")
    x = arr.reshape(-1, BLOCK)
    rec = np.zeros(x.shape[0], dtype=Q4_1)
    if x.shape[0]:
        lo = np.min(x, axis=-1, keepdims=True)
        hi = np.max(x, axis=-1, keepdims=True)
        scale = (hi - lo) / np.float32(15.0)
        safe = np.where(scale == 0, np.float32(1.0), scale)
        inv = np.where(scale == 0, np.float32(0.0), np.float32(1.0) / safe).astype(np.float32)
        codes = np.trunc((x - lo) * inv + np.float32(0.5))
        codes = np.clip(codes, 0, 15).astype(np.uint8)
        rec["d"] = scale[:, 0].astype(np.float16)
        rec["m"] = lo[:, 0].astype(np.float16)
        rec["qs"] = codes[:, :16] | (codes[:, 16:] << 4)
    return rec.view(np.uint8).reshape(*arr.shape[:-1], arr.shape[-1] // BLOCK * Q4_1.itemsize)


def _q4_1_values(rec: np.ndarray) -> np.ndarray:
    """Block records (n,) -> float32 weights (n, 32)."""
    qs = rec["qs"]
    codes = np.empty((rec.shape[0], BLOCK), dtype=np.float32)
    codes[:, :16] = qs & 0x0F
    codes[:, 16:] = qs >> 4
    d = rec["d"].astype(np.float32)[:, None]
    m = rec["m"].astype(np.float32)[:, None]
    codes *= d
    codes += m
    return codes


def dequantize_q4_1(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 block bytes (uint8, any shape, n_blocks * 20 bytes) -> float32 array of `shape`."""
    rec, dims = _records(blocks, shape, Q4_1)
    return _q4_1_values(rec).reshape(dims)


def dequantize_q8_0(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 block bytes (uint8, any shape, n_blocks * 34: fp16 d then 32 int8 q) -> float32 d * q of `shape`."""
    rec, dims = _records(blocks, shape, Q8_0)
    vals = rec["qs"].astype(np.float32) * rec["d"].astype(np.float32)[:, None]
    return vals.reshape(dims)


def matmul_q4_1(x: np.ndarray, blocks: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """x @ W.T for W (N, K) held as Q4_1 blocks: x (..., K) float32 -> (..., N) float32."""
    if len(tuple(shape)) != 2:
        raise ValueError(f"W's shape must be (N, K), got {tuple(shape)}")
    rec, (n_rows, k) = _records(blocks, shape, Q4_1)
    xs = np.asarray(x, dtype=np.float32)
    if xs.ndim < 1 or xs.shape[-1] != k:
        raise ValueError(f"x's last dimension must be K = {k}; x has shape {xs.shape}")
    lead = xs.shape[:-1]
    x2 = xs.reshape(-1, k)
    y = np.zeros((x2.shape[0], n_rows), dtype=np.float32)
    per_row = k // BLOCK
    # at most 1/8 of the rows (and at most ~2 MiB of fp32) dequantized at any time
    step = max(1, min(n_rows // 8, (1 << 21) // max(4 * k, 1)))
    rec2 = rec.reshape(n_rows, per_row) if per_row else rec.reshape(n_rows, 0)
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        slab = _q4_1_values(rec2[start:stop].reshape(-1)).reshape(stop - start, k)
        y[:, start:stop] = x2 @ slab.T
    return y.reshape(*lead, n_rows)


def bytes_per_weight(fmt: str) -> float:
    """Storage bytes per weight, scales included, for "fp32", "fp16", "bf16", "q8_0", "q4_1"."""
    name = str(fmt).strip().lower() if isinstance(fmt, str) else ""
    if name == "fp32":
        return 4.0
    if name in ("fp16", "bf16"):
        return 2.0
    if name == "q8_0":
        return Q8_0.itemsize / BLOCK
    if name == "q4_1":
        return Q4_1.itemsize / BLOCK
    raise ValueError(f"unknown weight format {fmt!r}")


def _parameter_count(cfg) -> int:
    hd = cfg.head_dim
    attention = cfg.d_model * hd * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
    mlp = 3 * cfg.d_model * cfg.d_ff
    per_layer = attention + mlp + 2 * cfg.d_model
    return cfg.n_layers * per_layer + cfg.d_model + cfg.vocab_size * cfg.d_model


def predicted_decode_speedup(config, from_dtype: str, to_fmt: str, batch: int, context_len: int) -> float:
    """Predicted decode speed-up from storing every weight in `to_fmt` instead of `from_dtype`."""
    import torch

    from solutions.roofline import phase_cost

    src = from_dtype.lower() if isinstance(from_dtype, str) else from_dtype
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(src)
    if torch_dtype is None:
        raise ValueError(f"from_dtype {from_dtype!r} is not a float dtype (fp32, fp16, bf16)")
    dst_bpw = bytes_per_weight(to_fmt)
    if batch < 1 or context_len < 0:
        raise ValueError(f"need batch >= 1 and context_len >= 0, got {batch} and {context_len}")
    total = phase_cost(config, "decode", batch, 1, context_len, torch_dtype).bytes
    n = _parameter_count(config)
    rest = total - n * bytes_per_weight(src)
    return total / (rest + n * dst_bpw)
