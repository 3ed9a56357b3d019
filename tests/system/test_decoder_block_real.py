"""The decoder_block kata's reference on SmolLM2's real weights: loaded from the GGUF tensors as the file
holds them (dequantized to fp32, Q/K rows still permuted), it gives the inference system's logits.

This proves the kata's contract on a real checkpoint: the tensor names, shapes and permutation its
README describes are SmolLM2's, and un-permuting with a rotate-half RoPE is the right computation.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from solutions import decoder_block
from solutions.system.loading.weights import dequantize, read_config


@pytest.fixture(scope="module")
def gguf_weights(smollm2_reader):
    """Every SmolLM2 tensor by its GGUF name, fp32 (out, in), exactly as the file orders the rows."""
    return {t.name: torch.from_numpy(dequantize(t)) for t in smollm2_reader.tensors}


@pytest.fixture(scope="module")
def prompt(smollm2_tokenizer):
    text = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    return torch.tensor([smollm2_tokenizer.encode(text)])


def test_reference_block_model_equals_the_system_on_smollm2(smollm2, smollm2_reader, gguf_weights, prompt):
    """decoder_block's Llama on SmolLM2's GGUF tensors: the system model's logits (1e-4 of their spread) and
    the same greedy token at every position, all 30 layers"""
    c = read_config(smollm2_reader)
    config = decoder_block.LlamaConfig(
        **{f: getattr(c, f) for f in decoder_block.LlamaConfig.__dataclass_fields__}
    )
    model = decoder_block.Llama(config)
    model.load(gguf_weights)
    with torch.no_grad():
        got, want = model(prompt), smollm2(prompt)
    spread = float(want.max() - want.min())
    diff = float((got - want).abs().max())
    assert diff <= 1e-4 * spread, f"logits differ by {diff:.2e}, over 1e-4 of their spread {spread:.1f}"
    assert torch.equal(got.argmax(-1), want.argmax(-1)), "greedy tokens differ from the system model's"


def converter_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_skipping_the_unpermute_is_wrong_on_smollm2(smollm2, gguf_weights, prompt):
    """the permutation is real: a model that uses the file's Q/K rows in their order is far off (2 layers)"""
    c = smollm2.config
    config = decoder_block.LlamaConfig(
        **{f: getattr(c, f) for f in decoder_block.LlamaConfig.__dataclass_fields__}
    )
    config = replace(config, n_layers=2)
    skipped = dict(gguf_weights)
    for i in range(2):  # permuted once more, so load's un-permute leaves the file's order
        skipped[f"blk.{i}.attn_q.weight"] = converter_permute(
            gguf_weights[f"blk.{i}.attn_q.weight"], c.n_heads
        )
        skipped[f"blk.{i}.attn_k.weight"] = converter_permute(
            gguf_weights[f"blk.{i}.attn_k.weight"], c.n_kv_heads
        )
    right, wrong = decoder_block.Llama(config), decoder_block.Llama(config)
    right.load(gguf_weights)
    wrong.load(skipped)
    with torch.no_grad():
        good, bad = right(prompt), wrong(prompt)
    assert float((bad - good).abs().max()) > 1e-2 * float(good.max() - good.min()), (
        "logits with the file's Q/K rows left in their order are close to the right ones: is the file permuted?"
    )
