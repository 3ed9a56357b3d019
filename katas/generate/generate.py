"""A KV-cache-backed generator: greedy, sampling and beam search.

Your task: left-pad the prompts into one batch, prefill once, then produce one token per row per
step with `model.decode_step`. Greedy takes the argmax, sampling draws from the temperature /
top-k / top-p filtered distribution with a seeded `torch.Generator`, and beam search follows
HuggingFace transformers (>= 4.50) exactly, reordering the KV cache as beams change parents.
The prompt is the contract (`dojo start generate` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class GenerationResult:
    """New tokens, scores and timings of one `generate` call.

    `tokens[i * num_return_sequences + j]` is the j-th best sequence for prompt i (only new
    tokens; a finished sequence ends with its EOS). `scores` are aligned with `tokens`:
    sum(log p) / len(tokens) ** length_penalty, log p taken from the model's fp32 log-softmax.
    """

    tokens: list[list[int]]
    scores: list[float]
    prefill_seconds: float  # prompt forward pass up to the first chosen token(s)
    decode_seconds: float  # every later step
    tokens_generated: int  # new tokens across all returned sequences


def generate(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    strategy: str = "greedy",
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    num_beams: int = 1,
    length_penalty: float = 1.0,
    early_stopping: bool | str = True,
    num_return_sequences: int = 1,
    on_token: Callable[[int, int], None] | None = None,
) -> GenerationResult:
    """Continue each prompt by up to `max_new_tokens` tokens.

    `model` follows the model protocol (config.vocab_size, config.max_seq_len, new_cache, prefill,
    decode_step; the cache has reorder). `strategy` is "greedy", "sample" or "beam".
    `on_token(row, token)` is called as tokens are chosen (greedy, sample) or, for beam search,
    once the search ends, for each returned sequence. A strategy of "beam" with num_beams=1 is
    greedy search, as in HuggingFace.
    Raises ValueError, naming the argument, for any invalid argument (the prompt's "Errors").
    """
    raise NotImplementedError("generate")
