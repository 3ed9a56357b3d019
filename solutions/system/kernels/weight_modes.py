"""Weights modes: SmolLM2's matrices held as fp32, bf16 or packed 4-bit, behind one call `w(x)`.

fp32 (BLAS), bf16 (oneDNN's prepacked layout where torch has it), int4 (the GGUF's Q4_1 blocks in
torch's fused int4 kernel), and int4-q8 / int4-q8x2 (the same blocks times int8 activations, as
llama.cpp multiplies them, through solutions.system.kernels.native). The packed modes' tied LM head
recomputes its top 16 logits exactly (`RescoredHead`). The residual stream, norms, attention and KV
cache stay fp32 in every mode. Not here: fp16, int8 weights, CUDA kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

MODES = ("fp32", "bf16", "int4", "int4-q8", "int4-q8x2")
Q4_1_MODES = ("int4", "int4-q8", "int4-q8x2")  # the modes built from the GGUF's Q4_1 blocks
Q8_MODES = ("int4-q8", "int4-q8x2")  # the modes whose products quantize activations to int8
GROUP = 32  # weights per Q4_1 block, and the int4 kernel's group size


def check_mode(mode: str) -> str:
    """`mode` if it is one of MODES; ValueError naming the choices otherwise."""
    if mode not in MODES:
        raise ValueError(f"unknown weights mode {mode!r}: choose one of {', '.join(MODES)}")
    return mode


def default_mode() -> str:
    """The fastest mode this machine runs: int4-q8x2 where the compiled kernel loads (its batch-1
    step is native, solutions.system.kernels.fused_step), else int4 where torch has its kernel, else fp32. Not
    token-identical to fp32: teacher-forced they pick fp32's greedy token at about 100% of
    positions, but free-running text can part after a flipped near-tie (`make bench`'s mode rows
    measure both)."""
    from solutions.system.kernels import native

    if native.kernel() is not None:
        return "int4-q8x2"
    return "int4" if int4_available() else "fp32"


def draft_mode() -> str:
    """The mode that drafts for fp32 in speculative decoding: the default mode where it is a packed
    one (int4-q8x2 with the compiled kernel, else int4), else bf16."""
    mode = default_mode()
    return "bf16" if mode == "fp32" else mode


def describe_mode(mode: str) -> str:
    """What a mode runs on this machine, in a few words."""
    check_mode(mode)
    if mode == "fp32":
        from solutions.system.kernels import native

        if native.fused_enabled():
            return "fp32 matrices; decode steps of 1-8 rows in the fused native step, prefill through BLAS"
        return "fp32 matrices, BLAS"
    if mode == "bf16":
        return f"bf16 through {'oneDNN, prepacked' if bf16_kernel() == 'onednn' else 'plain F.linear'}"
    if mode == "int4":
        return "Q4_1 matrices through torch's fused int4 kernel, LM head too, with its top 16 logits exact"
    from solutions.system.kernels import native

    acts = (
        "int8 (Q8_1) activations" if mode == "int4-q8" else "activations in two int8 passes (Q8_1 + residual)"
    )
    return f"Q4_1 matrices x {acts} through {native.describe()}; LM head too, top 16 exact"


def bf16_kernel() -> str:
    """Which bf16 product this torch offers: "onednn" (prepacked, the CPU's BF16 instructions where
    it has them, emulated where not) or "aten" (plain F.linear in bf16)."""
    ok = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    return "onednn" if ok and torch.ops.mkldnn._is_mkldnn_bf16_supported() else "aten"


def int4_available() -> bool:
    """Whether this torch has the fused CPU int4 kernel (a private op, present since 2.4)."""
    return hasattr(torch, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch, "_convert_weight_to_int4pack_for_cpu"
    )


class BF16Linear:
    """A (N, K) weight in bfloat16: `w(x)` is x @ w.T for fp32 x (..., K), returned in fp32.

    With `lookup`, the plain matrix is kept for `rows` (the tied embedding); otherwise only
    oneDNN's blocked copy is (its reorder reads the plain one once)."""

    def __init__(self, weight: Tensor, lookup: bool = False):
        weight = weight.to(torch.bfloat16).contiguous()  # (N, K)
        self.shape = tuple(weight.shape)
        self.kernel = bf16_kernel()
        self._packed = (
            torch.ops.mkldnn._reorder_linear_weight(weight, 1) if self.kernel == "onednn" else weight
        )
        self.weight = weight if lookup or self.kernel == "aten" else None

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 2

    def rows(self, ids: Tensor) -> Tensor:
        """Embedding lookup: rows `ids` (...) of the matrix as fp32 (..., K)."""
        if self.weight is None:
            raise ValueError("this bf16 weight was packed for products only (lookup=False)")
        return F.embedding(ids, self.weight).float()

    def __call__(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.shape[1]).to(torch.bfloat16)  # (M, K)
        if self.kernel == "onednn":
            y = torch.ops.mkldnn._linear_pointwise(x2, self._packed, None, "none", [], "")
        else:
            y = F.linear(x2, self._packed)
        return y.float().reshape(*x.shape[:-1], self.shape[0])


def q4_1_to_int4pack(blocks: np.ndarray, shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Q4_1 blocks of a (N, K) weight as the int4 kernel's operands: the codes packed by torch
    (uint8), and scales and zeros (K / 32, N, 2) in bf16 (scale = d, zero = m + 8 d)."""
    n, k = shape
    b = np.ascontiguousarray(blocks).reshape(-1, 20)  # one row per block: d, m (fp16), 16 code bytes
    d = b[:, 0:2].view(np.float16).astype(np.float32).reshape(n, k // GROUP)
    m = b[:, 2:4].view(np.float16).astype(np.float32).reshape(n, k // GROUP)
    q = np.concatenate([b[:, 4:] & 0x0F, b[:, 4:] >> 4], axis=1).reshape(n, k)  # (N, K) codes 0..15
    packed = torch._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q.astype(np.int32)), 1)
    scales_zeros = torch.from_numpy(np.stack([d.T, (m + 8 * d).T], axis=-1))  # (K/32, N, 2)
    return packed, scales_zeros.to(torch.bfloat16).contiguous()  # the kernel reads it densely


class Int4Linear:
    """A (N, K) weight as packed int4 codes with per-32 scales and zeros: `w(x)` is x @ w.T, fp32 out."""

    def __init__(self, packed: Tensor, scales_zeros: Tensor):
        self.packed, self.scales_zeros = packed, scales_zeros  # (N, K/2) uint8, (K/32, N, 2) bf16
        self.shape = (int(scales_zeros.shape[1]), int(scales_zeros.shape[0]) * GROUP)

    @classmethod
    def from_q4_1(cls, blocks: np.ndarray, shape: tuple[int, int]) -> Int4Linear:
        return cls(*q4_1_to_int4pack(blocks, shape))

    @property
    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size() + self.scales_zeros.numel() * 2

    def __call__(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.shape[1]).to(torch.bfloat16)  # (M, K); the kernel's fast path is bf16
        y = torch._weight_int4pack_mm_for_cpu(x2, self.packed, GROUP, self.scales_zeros)  # (M, N)
        return y.float().reshape(*x.shape[:-1], self.shape[0])


class Q4Q8Linear:
    """A (N, K) weight as the GGUF's own Q4_1 blocks in the kernel's tiled order (solutions.system.kernels.q8_1.repack:
    (ceil(N / 16), K / 32, 320) uint8): `w(x)` is x @ w.T with x quantized to Q8_1 per row
    (`residual`: plus the second int8 pass), fp32 out; the compiled kernel where there is one, else
    solutions.system.kernels.q8_1 on the blocks unpacked once."""

    def __init__(self, tiles: Tensor, n: int, residual: bool = False):
        from solutions.system.kernels import native
        from solutions.system.kernels.q8_1 import BLOCK, TILE, TILE_BLOCK_BYTES

        if tiles.dim() != 3 or tiles.dtype != torch.uint8 or tiles.shape[2] != TILE_BLOCK_BYTES:
            raise ValueError(
                f"Q4_1 tiles must be (N / 16, K / 32, {TILE_BLOCK_BYTES}) uint8; got "
                f"{tuple(tiles.shape)} {tiles.dtype}"
            )
        if not (tiles.shape[0] - 1) * TILE < n <= tiles.shape[0] * TILE:
            raise ValueError(f"{tiles.shape[0]} tiles cannot hold {n} rows")
        self.tiles = tiles
        self.shape = (int(n), int(tiles.shape[1]) * BLOCK)
        self.kernel = native.kernel()
        self.residual = residual
        self._blocks = None  # the readable path's (N, K / 32 * 20), unpacked on first use

    @classmethod
    def from_blocks(cls, blocks: Tensor, residual: bool = False) -> Q4Q8Linear:
        """From Q4_1 blocks as the file holds them, (N, K / 32 * 20) uint8."""
        from solutions.system.kernels.q8_1 import repack

        return cls(repack(blocks), blocks.shape[0], residual)

    @property
    def nbytes(self) -> int:
        return self.tiles.numel()

    def __call__(self, x: Tensor) -> Tensor:
        from solutions.system.kernels import q8_1

        x2 = x.reshape(-1, self.shape[1]).float()  # (M, K)
        if self.kernel is None:
            if self._blocks is None:
                self._blocks = q8_1.unpack(self.tiles, self.shape[0])
            y = q8_1.matmul(x2, self._blocks, self.residual)
        else:
            y = self.kernel.matmul(x2, self.tiles, self.shape[0], residual=self.residual)
        return y.reshape(*x.shape[:-1], self.shape[0])


class Q8Rows:
    """An embedding table held as Q8_0 blocks: `rows(ids)` dequantizes only the rows looked up.

    Each weight is d * q (d fp16, q int8), computed in fp32 as solutions.int4.dequantize_q8_0 does."""

    def __init__(self, blocks: Tensor, shape: tuple[int, int]):
        self.blocks = blocks.reshape(shape[0], -1)  # (V, d / 32 * 34) uint8
        self.shape = (int(shape[0]), int(shape[1]))

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def rows(self, ids: Tensor) -> Tensor:
        b = self.blocks[ids.reshape(-1)].reshape(-1, 34)  # (n * blocks per row, 34)
        d = b[:, :2].contiguous().view(torch.float16).float()  # (n_blocks, 1)
        q = b[:, 2:].contiguous().view(torch.int8).float()  # (n_blocks, 32)
        return (q * d).reshape(*ids.shape, self.shape[1])


class RescoredHead:
    """The LM head as a fast product whose top `k` logits per row are recomputed exactly, in
    fp32, from the embedding's own rows: greedy search then picks fp32's token whenever fp32's
    best is among the fast head's top k. The other logits are the fast head's."""

    def __init__(self, fast: Callable[[Tensor], Tensor], rows: Callable[[Tensor], Tensor], k: int = 16):
        self.fast, self.rows, self.k = fast, rows, k
        self.shape = fast.shape

    @property
    def nbytes(self) -> int:
        return self.fast.nbytes  # plus k rows per token: nothing beside the matrix

    def __call__(self, x: Tensor) -> Tensor:
        logits = self.fast(x)  # (..., V)
        top = logits.topk(self.k, dim=-1).indices  # (..., k)
        exact = (self.rows(top) @ x.unsqueeze(-1)).squeeze(-1)  # (..., k, d) @ (..., d, 1) -> (..., k)
        return logits.scatter_(-1, top, exact)


def step_matrices(model) -> list:
    """The matrices one decode step multiplies by, in order: each layer's MATRICES, then the LM
    head (the tied embedding where the mode holds no head apart). Tensors or packed weights."""
    head = model.lm_head if model.lm_head is not None else model.embed
    return [getattr(layer, name) for layer in model.layers for name in MATRICES] + [head]


def weight_bytes(model) -> int:
    """Bytes one decode step reads: every matrix once (the LM head included), the norms, and
    nothing for an embedding table held apart from the head (a lookup reads one row)."""
    norms = [model.norm] + [n for layer in model.layers for n in (layer.attn_norm, layer.ffn_norm)]
    return sum(map(_nbytes, step_matrices(model))) + sum(map(_nbytes, norms))


def resident_bytes(model) -> int:
    """Bytes of every weight held, embedding table and head both counted when they are apart."""
    extra = _nbytes(model.embed) if model.lm_head is not None else 0
    return weight_bytes(model) + extra


MATRICES = ("wqkv", "wo", "w_gate_up", "w_down")  # per layer, in the order the forward pass reads them


def _nbytes(w) -> int:
    return w.numel() * w.element_size() if isinstance(w, Tensor) else w.nbytes
