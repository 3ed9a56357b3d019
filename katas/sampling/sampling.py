"""Sampling as a server does it: a chain of logits processors, a seeded draw, logprobs, stop strings.

Your task: write each processor (temperature, top-k, top-p, min-p, HF's repetition penalty, OpenAI's
frequency and presence penalties, logit bias), the chain that applies them in a fixed order, `sample`
(a seeded draw from the processed distribution, with logprobs from that same distribution) and
`StopChecker` (a token stream to text that is safe to show). A processor maps
(prompt_ids, output_ids, logits (B, V)) to new logits (B, V), one id list per row.
The prompt is the contract (`dojo start sampling` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

Ids = Sequence[Sequence[int]]  # one list of token ids per row of the logits


class Temperature:
    """logits / temperature. Raises ValueError unless temperature > 0."""

    def __init__(self, temperature: float):
        raise NotImplementedError("Temperature")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("Temperature")


class TopK:
    """Keeps every token whose logit is at least the k-th largest (ties with it stay); the rest -inf.
    Raises ValueError unless k is an int >= 1."""

    def __init__(self, k: int):
        raise NotImplementedError("TopK")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("TopK")


class TopP:
    """Nucleus: the smallest set of most probable tokens whose probability reaches p (the prompt's exact
    rule); the rest -inf. Raises ValueError unless 0 < p <= 1."""

    def __init__(self, p: float):
        raise NotImplementedError("TopP")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("TopP")


class MinP:
    """Keeps the tokens with p >= min_p * p_max; the rest -inf. Raises ValueError unless 0 <= min_p <= 1."""

    def __init__(self, min_p: float):
        raise NotImplementedError("MinP")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("MinP")


class RepetitionPenalty:
    """HF's penalty on each token seen in the prompt or the output: a logit > 0 is divided by the penalty,
    a logit < 0 multiplied by it. Raises ValueError unless penalty > 0."""

    def __init__(self, penalty: float):
        raise NotImplementedError("RepetitionPenalty")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("RepetitionPenalty")


class FrequencyPresencePenalty:
    """OpenAI's penalties over the output only: logit[j] -= frequency_penalty * count[j] +
    presence_penalty * (count[j] > 0). Raises ValueError for a penalty that is not a finite number."""

    def __init__(self, presence_penalty: float = 0.0, frequency_penalty: float = 0.0):
        raise NotImplementedError("FrequencyPresencePenalty")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("FrequencyPresencePenalty")


class LogitBias:
    """OpenAI's logit_bias: bias[token] is added to that token's logit in every row. Raises ValueError for
    a key that is not a token id >= 0 or a value that is not a finite number (and, when called, for a
    token id outside the vocabulary)."""

    def __init__(self, bias: dict[int, float]):
        raise NotImplementedError("LogitBias")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        raise NotImplementedError("LogitBias")


def make_chain(
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    logit_bias: dict[int, float] | None = None,
) -> list:
    """The processors for these parameters, in the prompt's order: logit bias, repetition penalty,
    frequency/presence penalties, temperature, top-k, top-p, min-p. None (or 0.0 for the two OpenAI
    penalties) leaves a processor out. Raises ValueError naming a bad parameter."""
    raise NotImplementedError("make_chain")


def apply_chain(chain: Sequence, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
    """The logits (B, V) after every processor of `chain`, in order; the input tensor is left as it was."""
    raise NotImplementedError("apply_chain")


@dataclass
class Sampled:
    """One draw per row, and logprobs from the distribution each token was drawn from."""

    tokens: Tensor  # (B,) long
    logprobs: Tensor  # (B,) fp32: log p of each drawn token after the chain
    top_ids: Tensor  # (B, n) long: the n most likely tokens after the chain, best first (ties: lower id)
    top_logprobs: Tensor  # (B, n) fp32: their logprobs (-inf for a token the chain filtered out)


def sample(
    chain: Sequence,
    prompt_ids: Ids,
    output_ids: Ids,
    logits: Tensor,
    generator: torch.Generator,
    top_logprobs: int = 0,
) -> Sampled:
    """Apply `chain`, draw one token per row with torch.multinomial(probabilities, 1, generator=generator),
    and report logprobs of the processed distribution: the drawn tokens' and the `top_logprobs` most likely.
    Raises ValueError unless top_logprobs is an int in [0, V]."""
    raise NotImplementedError("sample")


class StopChecker:
    """Incremental detokenisation with stop strings, for one stream.

    `token_bytes[i]` is token i's bytes. `feed(token)` returns (text safe to show now, stopped): text is held
    back while it ends in an incomplete UTF-8 character or in the start of a stop string; once a stop string
    appears, the text before it is returned with stopped=True (the stop text itself is never shown).
    `finish()` ends a stream that did not stop and returns the held text. Raises ValueError for a stop
    string that is empty, or a token id outside [0, len(token_bytes)).
    """

    def __init__(self, token_bytes: Sequence[bytes], stop: Sequence[str] = ()):
        raise NotImplementedError("StopChecker")

    def feed(self, token: int) -> tuple[str, bool]:
        raise NotImplementedError("StopChecker.feed")

    def finish(self) -> str:
        raise NotImplementedError("StopChecker.finish")
