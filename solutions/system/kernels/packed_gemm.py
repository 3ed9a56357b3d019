"""MKL's packed GEMM for one row count: the fp32 product a 4-beam step uses where it is faster.

`pack(w, M)` copies an fp32 weight into MKL's blocked layout for products with exactly M input rows,
and `linear` multiplies from it. It is MKL's sgemm either way, so results match F.linear's up to
rounding. Packing is lazy: `enable(model, rows)` marks each fp32 matrix, and its first product with
that many rows packs it, so a greedy-only run pays nothing. Whether packing wins is for
solutions.system.kernels.calibration to measure. Not here: torches without MKL, bf16 and int4.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def available() -> bool:
    """Whether this torch has MKL's packed GEMM ops (x86 builds with MKL do)."""
    return (
        torch.backends.mkl.is_available()
        and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
        and hasattr(torch.ops.mkl, "_mkl_linear")
    )


def pack(w: Tensor, rows: int) -> Tensor:
    """w (N, K) fp32 in MKL's packed layout for products with `rows` input rows."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if w.dim() != 2 or w.dtype != torch.float32:
        raise ValueError(f"packed GEMM takes a 2-D fp32 weight; got {tuple(w.shape)} {w.dtype}")
    return torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), rows)


def linear(x: Tensor, w: Tensor, packed: Tensor, rows: int) -> Tensor:
    """x (..., K) @ w.T from `packed` (pack(w, rows)); x must hold `rows` rows in all."""
    x2 = x.reshape(-1, w.shape[1])  # (rows, K)
    if x2.shape[0] != rows:
        raise ValueError(f"this weight was packed for {rows} rows; the input has {x2.shape[0]}")
    return torch.ops.mkl._mkl_linear(x2, packed, w, None, rows).reshape(*x.shape[:-1], w.shape[0])


def matrices(model) -> list[Tensor]:
    """The fp32 matrices a forward pass multiplies by: each layer's, then the head."""
    from solutions.system.kernels.weight_modes import step_matrices

    return [w for w in step_matrices(model) if isinstance(w, Tensor)]


def enable(model, rows: Iterable[int]) -> int:
    """Mark the model's fp32 matrices to be packed, on first use, for products with `rows` rows.
    Returns how many matrices were marked (0 without MKL, or when `rows` is empty)."""
    rows = sorted(set(rows))
    if not rows or not available():
        return 0
    marked = matrices(model)
    for w in marked:
        w.packs = {r: None for r in rows}
    return len(marked)


def project(x: Tensor, w: Tensor) -> Tensor | None:
    """x @ w.T through w's pack for x's row count (packing it now if it is the first such
    product); None when w has no pack for that many rows, or none at all (not enabled)."""
    packs = getattr(w, "packs", None)
    if not packs:
        return None
    rows = x.numel() // x.shape[-1]
    if rows not in packs:
        return None
    if packs[rows] is None:
        packs[rows] = pack(w, rows)
    return linear(x, w, packs[rows], rows)
