"""A cache-free model behind the generator's model protocol, and SmolLM2 loaded into one from the GGUF.

`dojo demo --mine` runs the learner's decoder_block `Llama` (forward(ids (B, T)) -> logits (B, T, V), fp32,
no KV cache) through `ForwardOnly`: its "cache" keeps the ids so far, and every step runs the forward on all
of them, so a token costs a whole-sequence pass. `load_forward_only` fills such a Llama from the GGUF's
tensors by their own names, dequantized to fp32, Q/K rows as the file holds them (the kata's `load`
un-permutes). Not here: padding masks (one prompt, or beams of one prompt), speed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor


@dataclass
class SeenIds:
    """All a cache-free model needs to remember: the ids so far, (B, T)."""

    ids: Tensor

    def reorder(self, rows: Tensor) -> None:
        """Row i now holds row rows[i]'s past (beam search)."""
        self.ids = self.ids[rows]


class ForwardOnly:
    """The model protocol (config, new_cache, prefill, decode_step) over `model(ids) -> logits (B, T, V)`."""

    def __init__(self, model, config):
        self.model, self.config = model, config  # config: vocab_size, max_seq_len (the generator checks them)

    def new_cache(self, batch: int, max_len: int) -> SeenIds:
        return SeenIds(torch.zeros((batch, 0), dtype=torch.long))

    def prefill(self, ids: Tensor, cache: SeenIds, mask: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) of the prompt ids (B, T). ValueError for a padding mask: this model has none."""
        _no_padding(mask)
        cache.ids = ids
        return self.model(ids).float()

    def decode_step(self, ids: Tensor, cache: SeenIds, mask: Tensor | None = None) -> Tensor:
        """Logits (B, V) after appending ids (B,): the whole sequence runs again."""
        _no_padding(mask)
        cache.ids = torch.cat([cache.ids, ids[:, None]], dim=1)  # (B, T + 1)
        return self.model(cache.ids)[:, -1].float()


def _no_padding(mask: Tensor | None) -> None:
    if mask is not None and not bool(mask.all()):
        raise ValueError("a forward-only model takes no padding mask: give prompts of one length")


def load_forward_only(llama_cls: type, gguf: str | Path | None = None):
    """(ForwardOnly over `llama_cls(config)` loaded with SmolLM2's GGUF tensors, the tokenizer). The config
    is built by the LlamaConfig of `llama_cls`'s own module, from the file's metadata. Raises what
    solutions.system.loading.weights raises for a missing or bad file, and whatever `llama_cls` raises."""
    from solutions.system.loading.tokenizer import tokenizer_from_gguf
    from solutions.system.loading.weights import dequantize, find_gguf, open_gguf, read_config

    reader = open_gguf(Path(gguf) if gguf is not None else find_gguf())
    config_cls = sys.modules[llama_cls.__module__].LlamaConfig
    ours = read_config(reader)
    config = config_cls(**{f: getattr(ours, f) for f in config_cls.__dataclass_fields__ if hasattr(ours, f)})
    model = llama_cls(config)
    model.load({t.name: torch.from_numpy(dequantize(t)) for t in reader.tensors})
    return ForwardOnly(model, config), tokenizer_from_gguf(reader)
