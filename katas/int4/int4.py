"""INT4 weight-only quantization in GGUF's Q4_1 layout, Q8_0 dequantization, and what it buys at decode.

Fill in every function; the prompt is the contract (`dojo start int4` prints it; in a notebook it
is the first cell). numpy only: importing `gguf` (whose quants module does all of this) is not allowed.

Shapes are numpy order, (rows, cols) = (out_features, in_features): the reverse of gguf's
`tensor.shape`. Blocks of 32 weights run along a row.
"""

from __future__ import annotations

import numpy as np


def quantize_q4_1(w: np.ndarray) -> np.ndarray:
    """Quantize float weights (..., K), K a multiple of 32, to Q4_1 blocks: uint8 (..., K // 32 * 20).

    Per block of 32: d = (max - min) / 15 and m = min in fp32; q = trunc((w - min) * (1 / d) + 0.5)
    clipped to 0..15 (q = 0 when d == 0); store fp16 d, fp16 m, then 16 bytes whose low nibbles
    hold q[0:16] and high nibbles q[16:32].
    Raises ValueError when the last dimension is not a multiple of 32.
    """
    raise NotImplementedError


def dequantize_q4_1(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 block bytes (uint8, any shape, n_blocks * 20 bytes) -> float32 array of `shape`.

    Each weight is d * q + m computed in fp32. Raises ValueError when the bytes do not fit `shape`.
    """
    raise NotImplementedError


def dequantize_q8_0(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 block bytes (uint8, any shape, n_blocks * 34: fp16 d then 32 int8 q) -> float32 d * q of `shape`.

    Raises ValueError when the bytes do not fit `shape`.
    """
    raise NotImplementedError


def matmul_q4_1(x: np.ndarray, blocks: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """x @ W.T for W (N, K) held as Q4_1 blocks: x (..., K) float32 -> (..., N) float32.

    Must not build the whole fp32 W at once. Raises ValueError when `shape` is not 2-D, the blocks
    do not fit it, or x's last dimension is not K.
    """
    raise NotImplementedError


def bytes_per_weight(fmt: str) -> float:
    """Storage bytes per weight, scales included, for "fp32", "fp16", "bf16", "q8_0", "q4_1".

    Case-insensitive. Raises ValueError for an unknown format.
    """
    raise NotImplementedError


def predicted_decode_speedup(config, from_dtype: str, to_fmt: str, batch: int, context_len: int) -> float:
    """Predicted decode speed-up from storing every weight in `to_fmt` instead of `from_dtype`.

    Bytes moved by one decode step with weights in from_dtype, over the same with weights in
    to_fmt; the KV cache stays in from_dtype (the prompt says exactly what to count).
    Raises ValueError for a from_dtype that is not fp32/fp16/bf16, an unknown format, batch < 1
    or context_len < 0.
    """
    raise NotImplementedError
