"""Dequantizes the whole weight matrix before multiplying, holding 6.4x the packed bytes in fp32 at once.

Mutant of solutions/int4.py with that one bug. The reference says:
INT4 weight-only quantization in GGUF's Q4_1 layout, Q8_0 dequantization, and what it buys at decode.

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

EDITS = [
    (
        r"""    slab = max(1, (1 << 16) // k)  # rows per slab: 2**16 floats, 256 KB of fp32""",
        r"""    slab = n  # everything at once""",
    ),
]
