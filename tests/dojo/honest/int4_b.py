"""INT4 weight-only quantization (GGUF Q4_1), Q8_0 dequantization, decode speed-up (variant A)."""

from __future__ import annotations

import numpy as np

QK = 32  # weights per block
Q4_1_BLOCK = 20  # bytes: fp16 d, fp16 m, 16 bytes of nibbles
Q8_0_BLOCK = 34  # bytes: fp16 d, 32 int8


def _as_bytes(blocks) -> np.ndarray:
    if isinstance(blocks, (bytes, bytearray, memoryview)):
        return np.frombuffer(blocks, dtype=np.uint8)
    arr = np.asarray(blocks)
    if arr.dtype != np.uint8:
        if arr.dtype.kind in "iu" and (arr.size == 0 or (arr.min() >= 0 and arr.max() <= 255)):
            arr = arr.astype(np.uint8)
        else:
            raise ValueError(f"blocks must be uint8 bytes, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr).reshape(-1)


def _check_shape(shape, block_bytes, raw: np.ndarray) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        shape = (int(shape),)
    if len(shape) == 0:
        raise ValueError("shape must have at least one dimension")
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    if shape[-1] % QK:
        raise ValueError(f"last dimension {shape[-1]} is not a multiple of {QK}")
    n = int(np.prod(shape, dtype=np.int64))
    need = n // QK * block_bytes
    if raw.size != need:
        raise ValueError(f"{raw.size} bytes do not fit shape {shape}: it needs {need} bytes")
    return shape


def quantize_q4_1(w: np.ndarray) -> np.ndarray:
    """Quantize float weights (..., K), K a multiple of 32, to Q4_1 blocks: uint8 (..., K // 32 * 20)."""
    w = np.asarray(w)
    if w.ndim == 0:
        raise ValueError("need at least one dimension")
    if w.shape[-1] % QK:
        raise ValueError(f"last dimension {w.shape[-1]} is not a multiple of {QK}")
    lead = w.shape[:-1]
    blocks = w.astype(np.float32).reshape(-1, QK)
    nb = blocks.shape[0]

    mx = blocks.max(axis=1, keepdims=True) if nb else np.zeros((0, 1), np.float32)
    mn = blocks.min(axis=1, keepdims=True) if nb else np.zeros((0, 1), np.float32)
    d = (mx - mn) / np.float32(15)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.trunc((blocks - mn) * inv + np.float32(0.5)).astype(np.float32)
    q = np.clip(q, 0, 15).astype(np.uint8)

    out = np.empty((nb, Q4_1_BLOCK), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8)
    out[:, 2:4] = mn.astype(np.float16).view(np.uint8)
    out[:, 4:] = q[:, :16] | (q[:, 16:] << np.uint8(4))
    return out.reshape(*lead, w.shape[-1] // QK * Q4_1_BLOCK)


def _dequant_q4_1_rows(raw2d: np.ndarray) -> np.ndarray:
    """(n_blocks, 20) uint8 -> (n_blocks, 32) float32."""
    d = raw2d[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = raw2d[:, 2:4].copy().view(np.float16).astype(np.float32)
    nib = raw2d[:, 4:]
    q = np.concatenate([nib & np.uint8(0x0F), nib >> np.uint8(4)], axis=1).astype(np.float32)
    return d * q + m


def dequantize_q4_1(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 block bytes (uint8, any shape, n_blocks * 20 bytes) -> float32 array of `shape`."""
    raw = _as_bytes(blocks)
    shape = _check_shape(shape, Q4_1_BLOCK, raw)
    return _dequant_q4_1_rows(raw.reshape(-1, Q4_1_BLOCK)).reshape(shape)


def dequantize_q8_0(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 block bytes (uint8, any shape, n_blocks * 34: fp16 d then 32 int8 q) -> float32 d * q of `shape`."""
    raw = _as_bytes(blocks)
    shape = _check_shape(shape, Q8_0_BLOCK, raw)
    rb = raw.reshape(-1, Q8_0_BLOCK)
    d = rb[:, 0:2].copy().view(np.float16).astype(np.float32)
    q = rb[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(shape)


def matmul_q4_1(x: np.ndarray, blocks: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """x @ W.T for W (N, K) held as Q4_1 blocks: x (..., K) float32 -> (..., N) float32."""
    shape = tuple(shape)
    if len(shape) != 2:
        raise ValueError(f"shape must be 2-D (N, K), got {shape}")
    raw = _as_bytes(blocks)
    n, k = _check_shape(shape, Q4_1_BLOCK, raw)
    x = np.asarray(x)
    if x.ndim == 0 or x.shape[-1] != k:
        raise ValueError(f"x must end in K={k}, got shape {x.shape}")
    x2 = x.reshape(-1, k).astype(np.float32, copy=False)
    rows = raw.reshape(n, k // QK * Q4_1_BLOCK)
    out = np.empty((x2.shape[0], n), dtype=np.float32)

    # slab of rows: a small fraction of W so the fp32 temporaries stay well below N*K*4/2
    row_bytes = max(1, k * 4)
    slab = max(1, min(n // 16, (4 << 20) // row_bytes))
    for r0 in range(0, n, slab):
        r1 = min(n, r0 + slab)
        w = _dequant_q4_1_rows(rows[r0:r1].reshape(-1, Q4_1_BLOCK)).reshape(r1 - r0, k)
        out[:, r0:r1] = x2 @ w.T
        del w
    return out.reshape(*x.shape[:-1], n)


_BYTES_PER_WEIGHT = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "q8_0": Q8_0_BLOCK / QK,
    "q4_1": Q4_1_BLOCK / QK,
}


def bytes_per_weight(fmt: str) -> float:
    """Storage bytes per weight, scales included, for "fp32", "fp16", "bf16", "q8_0", "q4_1"."""
    if not isinstance(fmt, str) or fmt.lower() not in _BYTES_PER_WEIGHT:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(_BYTES_PER_WEIGHT)}")
    return _BYTES_PER_WEIGHT[fmt.lower()]


def _n_params(config) -> int:
    d, hd = config.d_model, config.head_dim
    layer = (
        d * config.n_heads * hd * 2  # Q and O
        + d * config.n_kv_heads * hd * 2  # K and V
        + 3 * d * config.d_ff  # gate, up, down
        + 2 * d
    )  # two norms
    return config.n_layers * layer + d + config.vocab_size * d


def predicted_decode_speedup(config, from_dtype: str, to_fmt: str, batch: int, context_len: int) -> float:
    """Predicted decode speed-up from storing every weight in `to_fmt` instead of `from_dtype`."""
    import torch

    from solutions.roofline import phase_cost

    torch_dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    key = from_dtype.lower() if isinstance(from_dtype, str) else None
    if key not in torch_dtypes:
        raise ValueError(f"from_dtype must be one of fp32, fp16, bf16; got {from_dtype!r}")
    to_bpw = bytes_per_weight(to_fmt)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if context_len < 0:
        raise ValueError(f"context_len must be >= 0, got {context_len}")
    before = phase_cost(config, "decode", batch, 1, context_len, torch_dtypes[key]).bytes
    n = _n_params(config)
    after = before - n * bytes_per_weight(key) + n * to_bpw
    return float(before / after)
