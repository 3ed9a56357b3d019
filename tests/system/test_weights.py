"""Loading SmolLM2 from GGUF: our dequantization, the config, the Q/K un-permute, and bad files.

Oracles: `gguf.quants.dequantize` (the reference implementation shipped with llama.cpp's Python
package) for the bytes, llama.cpp's converter permute written out below for the Q/K rows, and a
round trip through a tiny GGUF file written here with `gguf.GGUFWriter`.
"""

from __future__ import annotations

from dataclasses import replace

import gguf
import numpy as np
import pytest
import torch

from solutions.model import LlamaConfig, tiny_model
from solutions.system.loading.weights import dequantize, load_smollm2, read_config


@pytest.fixture(scope="module")
def reader(smollm2_reader):
    return smollm2_reader


def converter_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf does to HF's Q/K rows (so RoPE pairs adjacent dims)."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


REAL_TENSORS = ["token_embd.weight", "output_norm.weight"] + [
    f"blk.{i}.{name}.weight"
    for i in (0, 29)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm")
]


@pytest.mark.parametrize("name", REAL_TENSORS)
def test_dequantization_is_bit_exact(reader, name):
    """Our Q4_1 / Q8_0 / F32 dequantization equals gguf.quants.dequantize bit for bit on real tensors."""
    tensor = next(t for t in reader.tensors if t.name == name)
    want = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(tuple(reversed(tensor.shape)))
    got = dequantize(tensor)
    assert got.dtype == np.float32 and got.shape == want.shape, (
        f"{name}: {got.dtype} {got.shape} vs {want.shape}"
    )
    bad = np.flatnonzero(got.view(np.uint32) != want.astype(np.float32).view(np.uint32))
    assert bad.size == 0, (
        f"{name} ({tensor.tensor_type.name}): {bad.size} values differ, first at flat index "
        f"{bad[0]}: {got.flat[bad[0]]!r} vs {want.flat[bad[0]]!r}"
    )


def test_config_from_metadata(reader, smollm2):
    """The GGUF metadata gives SmolLM2-135M's config; the model has 134,515,008 parameters."""
    config = read_config(reader)
    want = LlamaConfig.smollm2_135m()
    assert config.norm_eps == pytest.approx(want.norm_eps, rel=1e-6), f"norm_eps {config.norm_eps}"
    assert replace(config, norm_eps=want.norm_eps) == want, f"config {config}"
    n = sum(p.numel() for p in smollm2.parameters())
    assert n == 134_515_008, f"{n:,} parameters, want 134,515,008"
    assert reader.fields["tokenizer.ggml.eos_token_id"].contents() == 2
    assert reader.fields["tokenizer.ggml.padding_token_id"].contents() == 2  # pad == eos: use the mask


def test_loaded_weights_are_the_file_with_qk_unpermuted(reader, smollm2):
    """Embedding and V are the file's values; Q and K rows are the file's with the converter's permute undone."""
    t = {x.name: x for x in reader.tensors}
    layer = smollm2.layers[7]
    c = smollm2.config
    q, k, v = np.split(layer.wqkv.detach().numpy(), [c.d_model, c.d_model + c.n_kv_heads * c.head_dim])
    assert np.array_equal(smollm2.embed.detach().numpy(), dequantize(t["token_embd.weight"])), "embedding"
    assert np.array_equal(v, dequantize(t["blk.7.attn_v.weight"])), "V projection"
    assert np.array_equal(converter_permute(q, c.n_heads), dequantize(t["blk.7.attn_q.weight"])), "Q rows"
    assert np.array_equal(converter_permute(k, c.n_kv_heads), dequantize(t["blk.7.attn_k.weight"])), "K rows"


def write_gguf(path, model=None, arch: str = "llama", **metadata_overrides) -> None:
    """A GGUF file holding `model` (a Llama, F32, Q/K permuted as llama.cpp's converter does)."""
    model = model or tiny_model(0)
    c = model.config
    meta = {
        "block_count": c.n_layers,
        "context_length": c.max_seq_len,
        "embedding_length": c.d_model,
        "feed_forward_length": c.d_ff,
        "head_count": c.n_heads,
        "head_count_kv": c.n_kv_heads,
        "rope_freq_base": c.rope_theta,
        "layer_norm_rms_eps": c.norm_eps,
        "vocab_size": c.vocab_size,
    }
    meta |= metadata_overrides
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        getattr(writer, f"add_{key}")(value)
    p = {name: w.detach().numpy() for name, w in model.named_parameters()}
    writer.add_tensor("token_embd.weight", p["embed"])
    writer.add_tensor("output_norm.weight", p["norm"])
    for i in range(c.n_layers):
        q, k, v = np.split(p[f"layers.{i}.wqkv"], [c.d_model, c.d_model + c.n_kv_heads * c.head_dim])
        gate, up = np.split(p[f"layers.{i}.w_gate_up"], 2)
        for name, w in [
            ("attn_norm", p[f"layers.{i}.attn_norm"]),
            ("ffn_norm", p[f"layers.{i}.ffn_norm"]),
            ("attn_q", converter_permute(q, c.n_heads)),
            ("attn_k", converter_permute(k, c.n_kv_heads)),
            ("attn_v", v),
            ("attn_output", p[f"layers.{i}.wo"]),
            ("ffn_gate", gate),
            ("ffn_up", up),
            ("ffn_down", p[f"layers.{i}.w_down"]),
        ]:
            writer.add_tensor(f"blk.{i}.{name}.weight", np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_tiny_gguf_round_trip(tmp_path):
    """A tiny model written as GGUF (Q/K permuted, like llama.cpp) loads back to the same logits, with progress."""
    model = tiny_model(3)
    write_gguf(tmp_path / "tiny.gguf", model)
    calls = []
    loaded = load_smollm2(tmp_path / "tiny.gguf", progress=lambda done, total: calls.append((done, total)))
    n = 2 + 9 * model.config.n_layers  # embedding, final norm, 9 tensors per layer
    assert calls == [(i, n) for i in range(1, n + 1)], f"progress called with {calls[:3]}...{calls[-1:]}"
    ids = torch.tensor([[5, 17, 200, 3, 99, 42, 7]])
    got = replace(loaded.config, norm_eps=model.config.norm_eps)  # GGUF stores eps as float32
    assert got == model.config, f"config {loaded.config} != {model.config}"
    worst = (loaded(ids) - model(ids)).abs().max().item()
    assert worst < 1e-6, f"round-tripped logits differ by {worst:.2e}"


def test_missing_file_is_a_clear_error(tmp_path):
    """A path that does not exist raises FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match="nowhere.gguf"):
        load_smollm2(tmp_path / "nowhere.gguf")


def test_truncated_file_is_a_clear_error(tmp_path, smollm2_path):
    """The real file cut in half, or after its header, raises ValueError saying it is truncated."""
    data = smollm2_path.read_bytes()
    for size in (len(data) // 2, 1000, len(data) - 10):
        (tmp_path / "cut.gguf").write_bytes(data[:size])
        with pytest.raises(ValueError, match="truncated"):
            load_smollm2(tmp_path / "cut.gguf")


def test_not_a_gguf_file_is_a_clear_error(tmp_path):
    """A file without the GGUF magic raises ValueError."""
    (tmp_path / "model.gguf").write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(ValueError, match="not a GGUF file"):
        load_smollm2(tmp_path / "model.gguf")


def test_unknown_architecture_is_a_clear_error(tmp_path):
    """A GGUF of another architecture raises ValueError naming it."""
    writer = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="gpt2"):
        load_smollm2(tmp_path / "gpt2.gguf")


def test_inconsistent_dims_are_a_clear_error(tmp_path):
    """Metadata whose heads do not divide d_model, or whose dims disagree with the tensors, raise ValueError."""
    write_gguf(tmp_path / "heads.gguf", head_count=5)
    with pytest.raises(ValueError, match="n_heads"):
        load_smollm2(tmp_path / "heads.gguf")
    write_gguf(tmp_path / "ffn.gguf", feed_forward_length=96)
    with pytest.raises(ValueError, match="ffn_gate|ffn_up|ffn_down"):
        load_smollm2(tmp_path / "ffn.gguf")
