"""Sampling as a server does it: a chain of logits processors, a seeded draw, logprobs, stop strings.

Each processor maps (prompt ids, output ids, logits (B, V)) to new logits; `make_chain` puts them in one
fixed order (bias, penalties, temperature, then the filters) and `sample` draws from the processed
distribution, reporting logprobs from that same distribution. `StopChecker` turns a token stream into
text that is safe to show: whole UTF-8 characters, never the start of a stop string. Not here: beam
search, grammars, n > 1, speculative sampling.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

Ids = Sequence[Sequence[int]]  # one list of token ids per row of the logits


def _rows(prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
    """The logits as fp32 (B, V), checked against one prompt and one output list per row."""
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        raise ValueError(f"logits must be a (B, V) tensor, got {getattr(logits, 'shape', type(logits))}")
    B = logits.shape[0]
    if len(prompt_ids) != B or len(output_ids) != B:
        raise ValueError(
            f"prompt_ids and output_ids need one list per row: {B} rows, got {len(prompt_ids)} and "
            f"{len(output_ids)}"
        )
    return logits.float()


def _number(name: str, value, ok: bool, want: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok:
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return float(value)


class Temperature:
    """logits / temperature: below 1 sharpens the distribution, above 1 flattens it."""

    def __init__(self, temperature: float):
        ok = isinstance(temperature, (int, float)) and temperature > 0
        self.temperature = _number("temperature", temperature, ok, "> 0 (greedy is the argmax, not 0)")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        return _rows(prompt_ids, output_ids, logits) / self.temperature


class TopK:
    """Keeps every token whose logit is at least the k-th largest (ties with it stay); the rest -inf."""

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"top_k must be an int >= 1, got {k!r}")
        self.k = k

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        logits = _rows(prompt_ids, output_ids, logits)
        if self.k >= logits.shape[-1]:
            return logits.clone()
        kth = logits.topk(self.k, dim=-1).values[:, -1:]  # (B, 1)
        return logits.masked_fill(logits < kth, float("-inf"))


class TopP:
    """Nucleus: the smallest set of most probable tokens whose probability reaches p; the rest -inf.

    Tokens sorted by probability, ties lower id first; a token stays while the mass before it is < p,
    so the most probable token always stays and the token that crosses p stays too.
    """

    def __init__(self, p: float):
        ok = isinstance(p, (int, float)) and 0 < p <= 1
        self.p = _number("top_p", p, ok, "in (0, 1]")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        logits = _rows(prompt_ids, output_ids, logits)
        if self.p == 1.0:  # subtle: an fp32 running sum of 49,152 probabilities can reach 1 before the tail
            return logits.clone()
        probs = logits.softmax(dim=-1)
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)  # (B, V)
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, mass_before >= self.p)
        return logits.masked_fill(drop, float("-inf"))


class MinP:
    """Keeps the tokens with p >= min_p * p_max (probabilities of these logits); the rest -inf."""

    def __init__(self, min_p: float):
        ok = isinstance(min_p, (int, float)) and 0 <= min_p <= 1
        self.min_p = _number("min_p", min_p, ok, "in [0, 1]")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        logits = _rows(prompt_ids, output_ids, logits)
        probs = logits.softmax(dim=-1)
        floor = self.min_p * probs.amax(dim=-1, keepdim=True)  # (B, 1)
        return logits.masked_fill(probs < floor, float("-inf"))


class RepetitionPenalty:
    """HF's multiplicative penalty on every token seen in the prompt or the output (once per token):
    a positive logit is divided by the penalty, a negative one multiplied, so both move down for > 1."""

    def __init__(self, penalty: float):
        ok = isinstance(penalty, (int, float)) and penalty > 0
        self.penalty = _number("repetition_penalty", penalty, ok, "> 0 (1 is no penalty)")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        logits = _rows(prompt_ids, output_ids, logits).clone()
        for row, (prompt, output) in enumerate(zip(prompt_ids, output_ids)):
            seen = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.long)
            z = logits[row, seen]
            logits[row, seen] = torch.where(z < 0, z * self.penalty, z / self.penalty)
        return logits


class FrequencyPresencePenalty:
    """OpenAI's additive penalties over the output only (never the prompt):
    logit[j] -= frequency_penalty * count[j] + presence_penalty * (count[j] > 0)."""

    def __init__(self, presence_penalty: float = 0.0, frequency_penalty: float = 0.0):
        self.presence = _number("presence_penalty", presence_penalty, True, "a finite number")
        self.frequency = _number("frequency_penalty", frequency_penalty, True, "a finite number")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        logits = _rows(prompt_ids, output_ids, logits).clone()
        for row, output in enumerate(output_ids):
            counts = Counter(output)
            if not counts:
                continue
            ids = torch.tensor(list(counts), dtype=torch.long)
            n = torch.tensor(list(counts.values()), dtype=torch.float32)
            logits[row, ids] -= self.frequency * n + self.presence
        return logits


class LogitBias:
    """OpenAI's logit_bias: bias[token] is added to that token's logit, in every row."""

    def __init__(self, bias: dict[int, float]):
        if not isinstance(bias, dict):
            raise ValueError(f"logit_bias must be a dict {{token id: bias}}, got {type(bias).__name__}")
        for token, value in bias.items():
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise ValueError(f"logit_bias keys must be token ids >= 0, got {token!r}")
            _number(f"logit_bias[{token}]", value, True, "a finite number")
        self.bias = {token: float(value) for token, value in bias.items()}

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        logits = _rows(prompt_ids, output_ids, logits).clone()
        if self.bias and max(self.bias) >= logits.shape[-1]:
            raise ValueError(f"logit_bias names token {max(self.bias)}, outside [0, {logits.shape[-1]})")
        for token, value in self.bias.items():
            logits[:, token] += value
        return logits


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
    """The processors for these parameters, in the order they apply:
    logit bias, repetition penalty, frequency/presence penalties, temperature, top-k, top-p, min-p.

    Edits to the model's scores (bias, penalties) come first, so temperature scales them with the rest and
    the filters see them; temperature comes before the filters that read probabilities (top-p, min-p).
    Parameters left at their neutral value add no processor. Raises ValueError naming a bad parameter.
    """
    chain: list = []
    if logit_bias:
        chain.append(LogitBias(logit_bias))
    if repetition_penalty is not None:
        chain.append(RepetitionPenalty(repetition_penalty))
    if presence_penalty or frequency_penalty:
        chain.append(FrequencyPresencePenalty(presence_penalty, frequency_penalty))
    chain.append(Temperature(temperature))  # checks temperature even at 1.0, where it changes nothing
    if top_k is not None:
        chain.append(TopK(top_k))
    if top_p is not None:
        chain.append(TopP(top_p))
    if min_p is not None:
        chain.append(MinP(min_p))
    return chain


def apply_chain(chain: Sequence, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
    """The logits after every processor of `chain`, in order (fp32 (B, V); the input is left as it was)."""
    logits = _rows(prompt_ids, output_ids, logits)
    for processor in chain:
        logits = processor(prompt_ids, output_ids, logits)
    return logits


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
    """Apply `chain`, draw one token per row with torch.multinomial(softmax, 1, generator=generator), and
    report logprobs (log_softmax of the processed logits) for the drawn tokens and the `top_logprobs`
    most likely. Raises ValueError for a bad top_logprobs or logits shape."""
    logits = apply_chain(chain, prompt_ids, output_ids, logits)  # (B, V)
    V = logits.shape[-1]
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= V:
        raise ValueError(f"top_logprobs must be an int in [0, {V}], got {top_logprobs!r}")
    logp = logits.log_softmax(dim=-1)  # (B, V)
    tokens = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]  # (B,)
    if top_logprobs:
        sorted_logp, order = logp.sort(dim=-1, descending=True, stable=True)  # ties: lower id first
    else:  # no alternatives asked for: skip sorting the whole vocabulary
        sorted_logp, order = logp.new_empty(logp.shape[0], 0), torch.empty(logp.shape[0], 0, dtype=torch.long)
    return Sampled(
        tokens=tokens,
        logprobs=logp.gather(1, tokens[:, None])[:, 0],
        top_ids=order[:, :top_logprobs],
        top_logprobs=sorted_logp[:, :top_logprobs],
    )


class StopChecker:
    """Incremental detokenisation with stop strings, for one stream.

    `token_bytes[i]` is token i's bytes. `feed(token)` returns (text safe to show now, stopped). Text is
    held back while it ends in an incomplete UTF-8 character or in a prefix of a stop string; once a stop
    string appears, the text before it is released and the stream has stopped (the stop text is never shown).
    """

    def __init__(self, token_bytes: Sequence[bytes], stop: Sequence[str] = ()):
        if isinstance(stop, str) or any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}")
        self.token_bytes, self.stop = token_bytes, list(stop)
        self.pending = b""  # the bytes of an incomplete UTF-8 character at the end
        self.text = ""  # decoded, not yet shown
        self.stopped = False

    def feed(self, token: int) -> tuple[str, bool]:
        if self.stopped:
            raise RuntimeError("the stream has stopped: a stop string was found")
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < len(self.token_bytes):
            raise ValueError(f"token must be an id in [0, {len(self.token_bytes)}), got {token!r}")
        data = self.pending + self.token_bytes[token]
        complete = _complete_prefix(data)
        self.pending = data[complete:]
        self.text += data[:complete].decode("utf-8", errors="replace")
        starts = [i for i in (self.text.find(s) for s in self.stop) if i >= 0]
        if starts:  # earlier feeds held any partial match, so the first occurrence is still in `text`
            self.stopped = True
            shown, self.text, self.pending = self.text[: min(starts)], "", b""
            return shown, True
        hold = max((_overlap(self.text, s) for s in self.stop), default=0)
        shown, self.text = self.text[: len(self.text) - hold], self.text[len(self.text) - hold :]
        return shown, False

    def finish(self) -> str:
        """The stream ended without a stop string (EOS or the token limit): the held text, an incomplete
        character at the end as U+FFFD. After a stop, ''."""
        shown = self.text + self.pending.decode("utf-8", errors="replace")
        self.text, self.pending = "", b""
        return shown


def _complete_prefix(data: bytes) -> int:
    """How many leading bytes of `data` end on a UTF-8 character boundary: a trailing lead byte whose
    continuation bytes have not all arrived is held back (at most 3 bytes)."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for its lead
            continue
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return len(data) - back if need > back else len(data)
    return len(data)


def _overlap(text: str, stop: str) -> int:
    """The length of the longest suffix of `text` that is a proper prefix of `stop`."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0
