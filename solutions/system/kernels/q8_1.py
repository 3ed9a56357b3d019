"""Q4_1 weights times Q8_1 activations, written plainly: the readable reference of the compiled kernel.

As llama.cpp does, each 32-block of activations is quantized to int8 (da = max|x| / 127), so a
block's dot product with a Q4_1 block w = d q + m is d da * sum(q qa) + m sa: one integer dot
product and two scalars. This file does that arithmetic with torch ops, exact in fp32: the path the
tests trust, and the far slower fallback where solutions.system.kernels.native has no kernel.
`repack` and `unpack` convert to and from the kernel's tiled layout. Not here: Q8_1's storage format.
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 32  # weights (and activations) per block
BLOCK_BYTES = 20  # a Q4_1 block: fp16 d, fp16 m, 16 bytes of codes
LO_STEPS = 254  # the residual pass's scale is d / 254
TILE = 16  # output rows a tile interleaves: one 512-bit register holds a 4-byte group of each
TILE_BLOCK_BYTES = TILE * BLOCK_BYTES  # 320: 16 d's, 16 m's, then 4 groups of 16 rows x 4 code bytes


def quantize_q8_1(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x (M, K) fp32 as Q8_1: q (M, K) int8, d and s (M, K / 32) fp32.

    Per 32-block, d = max|x| / 127, q = x * (1 / d) rounded half to even (0 for an all-zero
    block), s = d * sum(q): in fp32, step by step as the compiled kernel does, so the two agree
    bit for bit. Raises ValueError unless x is 2-D fp32 with K a multiple of 32."""
    if x.dim() != 2 or x.dtype != torch.float32 or x.shape[1] % BLOCK:
        raise ValueError(
            f"x must be (M, K) fp32 with K a multiple of {BLOCK}; got {tuple(x.shape)} {x.dtype}"
        )
    m, k = x.shape
    xb = x.reshape(m, k // BLOCK, BLOCK)  # (M, blocks, 32)
    d = xb.abs().amax(-1) / 127  # (M, blocks)
    q = _steps(xb, d)  # (M, blocks, 32), each in -127..127
    return q.to(torch.int8).reshape(m, k), d, d * q.sum(-1)


def quantize_q8_1_residual(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x (M, K) fp32 as Q8_1 plus a second int8 pass on what the first leaves: q, lo (M, K) int8,
    d and s (M, K / 32). lo counts r = x - d q in steps of d / 254 (|r| <= d / 2 fits in 127 of
    them), so x ~ (d / 254) (254 q + lo): about 15 bits where Q8_1 has 8. s = d sum(q) + (d / 254) sum(lo).
    Raises ValueError as quantize_q8_1."""
    q, d, _ = quantize_q8_1(x)
    m, k = x.shape
    q = q.reshape(m, k // BLOCK, BLOCK).float()  # (M, blocks, 32)
    d_lo = d / LO_STEPS
    lo = _steps(x.reshape(m, k // BLOCK, BLOCK) - d[..., None] * q, d_lo)
    s = d * q.sum(-1) + d_lo * lo.sum(-1)
    return q.to(torch.int8).reshape(m, k), lo.to(torch.int8).reshape(m, k), d, s


def _steps(x: Tensor, step: Tensor) -> Tensor:
    """round-half-even(x * (1 / step)) clamped to -127..127, as fp32 (0 where step is 0): x (M, blocks, 32)."""
    inv = torch.where(step != 0, 1 / step, torch.zeros_like(step))
    return (x * inv[..., None]).round().clamp(-127, 127)


def unpack_q4_1(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Q4_1 blocks (N, K / 32 * 20) uint8 as codes (N, K / 32, 32) uint8 in 0..15, and d, m (N, K / 32)
    fp32. Byte j of a block's codes holds weight j in its low nibble, weight j + 16 in its high one.
    Raises ValueError for a tensor that is not rows of whole blocks."""
    if blocks.dim() != 2 or blocks.dtype != torch.uint8 or blocks.shape[1] % BLOCK_BYTES:
        raise ValueError(
            f"Q4_1 blocks must be (N, K / 32 * {BLOCK_BYTES}) uint8; got {tuple(blocks.shape)} {blocks.dtype}"
        )
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, BLOCK_BYTES)  # (N, blocks, 20)
    d = b[..., 0:2].contiguous().view(torch.float16).float()[..., 0]  # (N, blocks)
    m = b[..., 2:4].contiguous().view(torch.float16).float()[..., 0]
    codes = torch.cat([b[..., 4:] & 0x0F, b[..., 4:] >> 4], dim=-1)  # (N, blocks, 32)
    return codes, d, m


def matmul(x: Tensor, blocks: Tensor, residual: bool = False) -> Tensor:
    """x (M, K) fp32 @ W.T for W (N, K) as Q4_1 blocks (N, K / 32 * 20): (M, N) fp32, with x
    quantized to Q8_1 first, as llama.cpp computes it; `residual`: with the second int8 pass
    (quantize_q8_1_residual). Raises ValueError for mismatched shapes."""
    codes, dw, mw = unpack_q4_1(blocks)  # (N, nb, 32), (N, nb), (N, nb)
    if x.dim() != 2 or x.shape[1] != codes.shape[1] * BLOCK:
        raise ValueError(f"x must be (M, {codes.shape[1] * BLOCK}) for this weight; got {tuple(x.shape)}")
    m = x.shape[0]
    if residual:
        qa, lo, da, sa = quantize_q8_1_residual(x)
        unit = da / LO_STEPS  # the integer sums below count steps of d / 254
        qa = LO_STEPS * qa.reshape(m, -1, BLOCK).float() + lo.reshape(m, -1, BLOCK).float()  # (M, nb, 32)
    else:
        qa, unit, sa = quantize_q8_1(x)  # (M, K), (M, nb), (M, nb)
        qa = qa.reshape(m, -1, BLOCK).float()
    dots = torch.einsum("mbj,nbj->mnb", qa, codes.float())  # (M, N, nb): exact integer sums
    return (dots * dw[None] * unit[:, None]).sum(-1) + (mw[None] * sa[:, None]).sum(-1)


def repack(blocks: Tensor) -> Tensor:
    """Q4_1 blocks (N, K / 32 * 20) in the kernel's tiled order: (ceil(N / 16), K / 32, 320) uint8.

    Tile t holds rows 16t..16t+15 (zero blocks pad the last one). For each block b, its 320 bytes
    are the 16 rows' d (fp16, 32 bytes), their m (32 bytes), then 4 groups g of 64 bytes: for
    each row, code bytes 4g..4g+3 of its block (weights 4g..4g+3 in the low nibbles, 16+4g..
    16+4g+3 in the high ones). A pure permutation of the file's bytes: `unpack` is its inverse.
    Raises ValueError for a tensor that is not rows of whole blocks."""
    if (
        blocks.dim() != 2
        or blocks.dtype != torch.uint8
        or blocks.shape[1] % BLOCK_BYTES
        or not blocks.shape[1]
    ):
        raise ValueError(
            f"Q4_1 blocks must be (N, K / 32 * {BLOCK_BYTES}) uint8; got {tuple(blocks.shape)} {blocks.dtype}"
        )
    n, nb = blocks.shape[0], blocks.shape[1] // BLOCK_BYTES
    tiles = -(-n // TILE)
    padded = torch.zeros(tiles * TILE, nb, BLOCK_BYTES, dtype=torch.uint8)
    padded[:n] = blocks.reshape(n, nb, BLOCK_BYTES)
    b = padded.reshape(tiles, TILE, nb, BLOCK_BYTES).transpose(1, 2)  # (T, nb, 16 rows, 20)
    d = b[..., 0:2].reshape(tiles, nb, 2 * TILE)
    m = b[..., 2:4].reshape(tiles, nb, 2 * TILE)
    codes = b[..., 4:].reshape(tiles, nb, TILE, 4, 4).transpose(2, 3).reshape(tiles, nb, 4 * TILE * 4)
    return torch.cat([d, m, codes], dim=-1).contiguous()  # (T, nb, 320)


def unpack(tiles: Tensor, n: int) -> Tensor:
    """The inverse of `repack`: the first n rows as Q4_1 blocks (N, K / 32 * 20) uint8.
    Raises ValueError for a tensor that is not tiles, or n past its rows."""
    if tiles.dim() != 3 or tiles.dtype != torch.uint8 or tiles.shape[2] != TILE_BLOCK_BYTES:
        raise ValueError(
            f"tiles must be (N / 16, K / 32, {TILE_BLOCK_BYTES}) uint8; got "
            f"{tuple(tiles.shape)} {tiles.dtype}"
        )
    t, nb = tiles.shape[0], tiles.shape[1]
    if not (t - 1) * TILE < n <= t * TILE:
        raise ValueError(f"{t} tiles hold {(t - 1) * TILE + 1}..{t * TILE} rows, not {n}")
    d = tiles[..., 0:32].reshape(t, nb, TILE, 2)
    m = tiles[..., 32:64].reshape(t, nb, TILE, 2)
    codes = tiles[..., 64:].reshape(t, nb, 4, TILE, 4).transpose(2, 3).reshape(t, nb, TILE, 16)
    b = torch.cat([d, m, codes], dim=-1).transpose(1, 2)  # (T, 16 rows, nb, 20)
    return b.reshape(t * TILE, nb * BLOCK_BYTES)[:n].contiguous()
