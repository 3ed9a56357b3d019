"""The int4 reference's dequantizers on every quantized tensor of the real SmolLM2 GGUF.

Bit-exact against gguf.quants.dequantize, tensor by tensor: 210 Q4_1 matrices and the Q8_0
embedding. This is the dequantizer solutions/system/loading/weights.py loads SmolLM2 with.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize as gguf_dequantize

from solutions.int4 import dequantize_q4_1, dequantize_q8_0


@pytest.fixture(scope="module")
def reader(smollm2_reader):
    return smollm2_reader  # a solutions.system.loading.gguf_file.GGUFFile


def test_every_quantized_tensor_is_bit_exact(reader):
    """Every Q4_1 and Q8_0 tensor of SmolLM2 dequantizes bit-exactly as gguf.quants does."""
    ours = {QT.Q4_1: dequantize_q4_1, QT.Q8_0: dequantize_q8_0}
    seen = {QT.Q4_1: 0, QT.Q8_0: 0}
    for t in reader.tensors:
        if t.tensor_type not in ours:
            continue
        shape = tuple(int(s) for s in reversed(t.shape))  # numpy order: gguf lists ne0 (columns) first
        got, want = ours[t.tensor_type](t.data, shape), gguf_dequantize(t.data, t.tensor_type)
        assert got.shape == want.shape == shape, (
            f"{t.name}: shape {got.shape}, gguf {want.shape}, expected {shape}"
        )
        assert got.dtype == np.float32, f"{t.name}: dtype {got.dtype}"
        same = got.view(np.uint32) == want.view(np.uint32)
        if not same.all():
            idx = tuple(int(i) for i in np.argwhere(~same)[0])
            pytest.fail(
                f"{t.name} ({t.tensor_type.name}) differs at {idx}: ours {got[idx]!r}, gguf {want[idx]!r}"
            )
        seen[t.tensor_type] += 1
    assert seen == {QT.Q4_1: 210, QT.Q8_0: 1}, f"expected 210 Q4_1 tensors and 1 Q8_0, checked {seen}"


def test_quantize_round_trips_real_blocks(reader):
    """Re-quantizing a dequantized SmolLM2 Q4_1 matrix reproduces it within half a step per weight."""
    from solutions.int4 import quantize_q4_1

    t = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    shape = tuple(int(s) for s in reversed(t.shape))
    w = dequantize_q4_1(t.data, shape)
    back = dequantize_q4_1(quantize_q4_1(w), shape)
    blocks = w.reshape(-1, 32)
    step = (blocks.max(1) - blocks.min(1)) / 15
    err = np.abs(back - w).reshape(-1, 32).max(1)
    assert np.all(err <= step * 0.51 + np.abs(blocks).max(1) * 2.0**-10), f"worst block error {err.max():.3g}"


@pytest.mark.parametrize("kernel, tol", [("numpy", 1e-4), ("torch_int4", 0.05)])
def test_packed_model_decodes_like_its_dequantized_weights(kernel, tol):
    """The benchmark's packed Q4_1 model gives the logits of an fp32 model holding the same Q4_1 weights."""
    import torch

    from benchmarks.int4_bench import PACKED, pack
    from solutions.int4 import quantize_q4_1
    from solutions.model import tiny_model

    if kernel == "torch_int4" and not hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        pytest.skip("this torch has no CPU int4 kernel")
    ref = tiny_model(0)
    with torch.no_grad():  # round the reference's weights through Q4_1, as pack() does
        for owner, name in [(ref, "embed")] + [(layer, n) for layer in ref.layers for n in PACKED]:
            w = getattr(owner, name)
            w.copy_(torch.from_numpy(dequantize_q4_1(quantize_q4_1(w.numpy()), tuple(w.shape))))
    packed = pack(ref, kernel)
    ids = torch.tensor([[1, 5, 9, 200, 3]])
    with torch.inference_mode():
        want, got = ref.forward(ids), packed.forward(ids)
        cache = packed.new_cache(1, 8)
        packed.prefill(ids[:, :4], cache)
        step = packed.decode_step(ids[:, 4], cache)
    scale = float(want.abs().max())
    drift = float((got - want).abs().max())
    assert drift < tol * scale, f"{kernel}: packed logits differ by {drift:.3g} (scale {scale:.3g})"
    assert torch.allclose(step, got[:, -1], atol=tol * scale), (
        f"{kernel}: cached decode differs from the full forward"
    )
