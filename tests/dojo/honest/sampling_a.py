"""Sampling as a server does it: a chain of logits processors, a seeded draw, logprobs, stop strings.

Your task: write each processor (temperature, top-k, top-p, min-p, HF's repetition penalty, OpenAI's
frequency and presence penalties, logit bias), the chain that applies them in a fixed order, `sample`
(a seeded draw from the processed distribution, with logprobs from that same distribution) and
`StopChecker` (a token stream to text that is safe to show). A processor maps
(prompt_ids, output_ids, logits (B, V)) to new logits (B, V), one id list per row.
The prompt is the contract (`dojo start sampling` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

import codecs
import math
import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

Ids = Sequence[Sequence[int]]  # one list of token ids per row of the logits

_NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------------


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _finite_real(x, name: str) -> float:
    if not _is_real(x) or not math.isfinite(float(x)):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def _as_logits(logits: Tensor) -> Tensor:
    """A new fp32 (B, V) copy of the logits (the input is never modified)."""
    if not isinstance(logits, Tensor):
        raise ValueError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, V), got {tuple(logits.shape)}")
    return logits.to(torch.float32, copy=True)


def _check_rows(ids: Ids, batch: int, name: str) -> None:
    if len(ids) != batch:
        raise ValueError(f"{name} has {len(ids)} rows but the logits have {batch}")


def _counts(ids: Ids, batch: int, vocab: int, device: torch.device, name: str) -> Tensor:
    """(B, V) int64: how many times each token appears in each row of `ids`."""
    _check_rows(ids, batch, name)
    flat: list[int] = []
    for b, row in enumerate(ids):
        off = b * vocab
        for t in row:
            t = operator.index(t)
            if not 0 <= t < vocab:
                raise ValueError(f"{name}[{b}] holds token id {t}, outside [0, {vocab})")
            flat.append(off + t)
    idx = torch.tensor(flat, dtype=torch.long, device=device)
    return torch.bincount(idx, minlength=batch * vocab).view(batch, vocab)


def _acc_dtype(device: torch.device) -> torch.dtype:
    # Accumulate / compare probabilities in float64 where the device has it (MPS does not).
    return torch.float32 if device.type == "mps" else torch.float64


# --------------------------------------------------------------------------------------------------
# processors
# --------------------------------------------------------------------------------------------------


class Temperature:
    """logits / temperature. Raises ValueError unless temperature > 0."""

    def __init__(self, temperature: float):
        if not _is_real(temperature) or not (float(temperature) > 0) or not math.isfinite(float(temperature)):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
        self.temperature = float(temperature)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        return x.div_(self.temperature)

    def __repr__(self) -> str:
        return f"Temperature({self.temperature})"


class TopK:
    """Keeps every token whose logit is at least the k-th largest (ties with it stay); the rest -inf.
    Raises ValueError unless k is an int >= 1."""

    def __init__(self, k: int):
        if not _is_int(k) or k < 1:
            raise ValueError(f"top_k must be an int >= 1, got {k!r}")
        self.k = int(k)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        vocab = x.shape[-1]
        if self.k >= vocab or x.numel() == 0:
            return x
        kth = torch.topk(x, self.k, dim=-1).values[:, -1:]  # (B, 1), the k-th largest logit
        return x.masked_fill_(x < kth, _NEG_INF)

    def __repr__(self) -> str:
        return f"TopK({self.k})"


class TopP:
    """Nucleus: the smallest set of most probable tokens whose probability reaches p (the prompt's exact
    rule); the rest -inf. Raises ValueError unless 0 < p <= 1."""

    def __init__(self, p: float):
        if not _is_real(p) or not (0.0 < float(p) <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {p!r}")
        self.p = float(p)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        if self.p >= 1.0 or x.numel() == 0:
            return x  # p = 1 keeps everything (no rounding of the running mass can remove a token)
        probs = torch.softmax(x, dim=-1)
        # Highest probability first; a stable sort keeps tied tokens in id order (lower id first).
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass = torch.cumsum(sorted_probs.to(_acc_dtype(x.device)), dim=-1)
        before = torch.zeros_like(mass)
        before[:, 1:] = mass[:, :-1]  # probability mass of the tokens before each one
        keep_sorted = before < self.p  # the first token always has mass 0 before it
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        return x.masked_fill_(~keep, _NEG_INF)

    def __repr__(self) -> str:
        return f"TopP({self.p})"


class MinP:
    """Keeps the tokens with p >= min_p * p_max; the rest -inf. Raises ValueError unless 0 <= min_p <= 1."""

    def __init__(self, min_p: float):
        if not _is_real(min_p) or not (0.0 <= float(min_p) <= 1.0):
            raise ValueError(f"min_p must be in [0, 1], got {min_p!r}")
        self.min_p = float(min_p)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        if self.min_p == 0.0 or x.numel() == 0:
            return x
        probs = torch.softmax(x, dim=-1).to(_acc_dtype(x.device))
        p_max = probs.amax(dim=-1, keepdim=True)
        # The argmax always stays: p_max >= min_p * p_max for min_p <= 1.
        return x.masked_fill_(probs < self.min_p * p_max, _NEG_INF)

    def __repr__(self) -> str:
        return f"MinP({self.min_p})"


class RepetitionPenalty:
    """HF's penalty on each token seen in the prompt or the output: a logit > 0 is divided by the penalty,
    a logit < 0 multiplied by it. Raises ValueError unless penalty > 0."""

    def __init__(self, penalty: float):
        if not _is_real(penalty) or not (float(penalty) > 0) or not math.isfinite(float(penalty)):
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {penalty!r}")
        self.penalty = float(penalty)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        batch, vocab = x.shape
        seen = _counts(prompt_ids, batch, vocab, x.device, "prompt_ids") > 0
        seen |= _counts(output_ids, batch, vocab, x.device, "output_ids") > 0
        # Once per token, however often it appears; 0 / penalty = 0 so 0 stays 0.
        penalised = torch.where(x < 0, x * self.penalty, x / self.penalty)
        return torch.where(seen, penalised, x)

    def __repr__(self) -> str:
        return f"RepetitionPenalty({self.penalty})"


class FrequencyPresencePenalty:
    """OpenAI's penalties over the output only: logit[j] -= frequency_penalty * count[j] +
    presence_penalty * (count[j] > 0). Raises ValueError for a penalty that is not a finite number."""

    def __init__(self, presence_penalty: float = 0.0, frequency_penalty: float = 0.0):
        self.presence_penalty = _finite_real(presence_penalty, "presence_penalty")
        self.frequency_penalty = _finite_real(frequency_penalty, "frequency_penalty")

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        batch, vocab = x.shape
        _check_rows(prompt_ids, batch, "prompt_ids")  # the prompt does not count
        count = _counts(output_ids, batch, vocab, x.device, "output_ids")
        seen = count > 0
        amount = self.frequency_penalty * count.to(torch.float32) + self.presence_penalty * seen.to(
            torch.float32
        )
        # Only tokens that appeared are touched (an unseen token's logit stays exactly as it was).
        return torch.where(seen, x - amount, x)

    def __repr__(self) -> str:
        return (
            f"FrequencyPresencePenalty(presence_penalty={self.presence_penalty}, "
            f"frequency_penalty={self.frequency_penalty})"
        )


class LogitBias:
    """OpenAI's logit_bias: bias[token] is added to that token's logit in every row. Raises ValueError for
    a key that is not a token id >= 0 or a value that is not a finite number (and, when called, for a
    token id outside the vocabulary)."""

    def __init__(self, bias: dict[int, float]):
        if not isinstance(bias, dict):
            raise ValueError(f"logit_bias must be a dict {{token id: bias}}, got {type(bias).__name__}")
        clean: dict[int, float] = {}
        for tok, val in bias.items():
            if not _is_int(tok) or tok < 0:
                raise ValueError(f"logit_bias key must be an int token id >= 0, got {tok!r}")
            if not _is_real(val) or not math.isfinite(float(val)):
                raise ValueError(f"logit_bias value for token {tok} must be a finite number, got {val!r}")
            clean[int(tok)] = float(val)
        self.bias = clean

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_logits(logits)
        vocab = x.shape[-1]
        if not self.bias:
            return x
        ids = list(self.bias)
        bad = [t for t in ids if t >= vocab]
        if bad:
            raise ValueError(f"logit_bias token id {bad[0]} is outside the vocabulary [0, {vocab})")
        idx = torch.tensor(ids, dtype=torch.long, device=x.device)
        val = torch.tensor([self.bias[t] for t in ids], dtype=torch.float32, device=x.device)
        x[:, idx] += val
        return x

    def __repr__(self) -> str:
        return f"LogitBias({self.bias})"


# --------------------------------------------------------------------------------------------------
# the chain
# --------------------------------------------------------------------------------------------------


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
    # Build (and so validate) everything first, then assemble in the fixed order.
    bias = LogitBias(logit_bias) if logit_bias is not None and len(logit_bias) > 0 else None
    rep = RepetitionPenalty(repetition_penalty) if repetition_penalty is not None else None
    pp = 0.0 if presence_penalty is None else presence_penalty
    fp = 0.0 if frequency_penalty is None else frequency_penalty
    pen = FrequencyPresencePenalty(presence_penalty=pp, frequency_penalty=fp)
    if pen.presence_penalty == 0.0 and pen.frequency_penalty == 0.0:
        pen = None
    temp = Temperature(temperature)
    tk = TopK(top_k) if top_k is not None else None
    tp = TopP(top_p) if top_p is not None else None
    mp = MinP(min_p) if min_p is not None else None
    return [p for p in (bias, rep, pen, temp, tk, tp, mp) if p is not None]


def apply_chain(chain: Sequence, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
    """The logits (B, V) after every processor of `chain`, in order; the input tensor is left as it was."""
    x = _as_logits(logits)  # a copy: an empty chain still returns a new fp32 tensor
    for proc in chain:
        x = proc(prompt_ids, output_ids, x)
    return x


# --------------------------------------------------------------------------------------------------
# sampling
# --------------------------------------------------------------------------------------------------


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
    x = _as_logits(logits)
    vocab = x.shape[-1]
    if not _is_int(top_logprobs) or not 0 <= top_logprobs <= vocab:
        raise ValueError(f"top_logprobs must be an int in [0, {vocab}], got {top_logprobs!r}")
    n = int(top_logprobs)

    processed = apply_chain(chain, prompt_ids, output_ids, x)
    probs = torch.softmax(processed, dim=-1)
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    logp = torch.log_softmax(processed, dim=-1)
    token_logprobs = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if n > 0:
        # Stable descending sort: best first, ties (including -inf ties) lower id first.
        top_lp, top_ids = torch.sort(logp, dim=-1, descending=True, stable=True)
        top_lp, top_ids = top_lp[:, :n].contiguous(), top_ids[:, :n].contiguous()
    else:
        top_lp = logp.new_empty((logp.shape[0], 0))
        top_ids = torch.empty((logp.shape[0], 0), dtype=torch.long, device=logp.device)
    return Sampled(tokens=tokens, logprobs=token_logprobs, top_ids=top_ids, top_logprobs=top_lp)


# --------------------------------------------------------------------------------------------------
# stop strings
# --------------------------------------------------------------------------------------------------


class StopChecker:
    """Incremental detokenisation with stop strings, for one stream.

    `token_bytes[i]` is token i's bytes. `feed(token)` returns (text safe to show now, stopped): text is held
    back while it ends in an incomplete UTF-8 character or in the start of a stop string; once a stop string
    appears, the text before it is returned with stopped=True (the stop text itself is never shown).
    `finish()` ends a stream that did not stop and returns the held text. Raises ValueError for a stop
    string that is empty, or a token id outside [0, len(token_bytes)).
    """

    def __init__(self, token_bytes: Sequence[bytes], stop: Sequence[str] = ()):
        if stop is None:
            stop = ()
        if isinstance(stop, str):  # OpenAI accepts a single string as well as a list
            stop = (stop,)
        stops: list[str] = []
        for s in stop:
            if not isinstance(s, str):
                raise ValueError(f"stop: stop strings must be str, got {type(s).__name__}")
            if s == "":
                raise ValueError("stop: a stop string must not be empty")
            if s not in stops:
                stops.append(s)
        self._token_bytes = token_bytes
        self._stops = stops
        # Held back from the end of the text when it is a proper prefix of some stop string.
        self._prefixes = {s[:k] for s in stops for k in range(1, len(s))}
        self._max_prefix = max((len(s) - 1 for s in stops), default=0)
        # The incremental decoder keeps the bytes of an unfinished character until the rest arrives.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # decoded text not shown yet (only ever a possible stop-string start)
        self._stopped = False
        self._finished = False

    def _held_len(self, text: str) -> int:
        """Length of the longest end of `text` that is a proper prefix of some stop string."""
        for k in range(min(self._max_prefix, len(text)), 0, -1):
            if text[-k:] in self._prefixes:
                return k
        return 0

    def feed(self, token: int) -> tuple[str, bool]:
        if self._stopped:
            return "", True
        if self._finished:
            raise RuntimeError("feed() after finish()")
        tok = operator.index(token)
        if not 0 <= tok < len(self._token_bytes):
            raise ValueError(f"token id {tok} is outside [0, {len(self._token_bytes)})")
        new = self._decoder.decode(bytes(self._token_bytes[tok]))
        if not new:
            return "", False
        old_len = len(self._pending)
        text = self._pending + new

        # Any occurrence is new (none was in the text before), so it ends in `new`; everything before
        # self._pending was already shown and can't be the start of one (it was never a stop prefix).
        first = -1
        for s in self._stops:
            i = text.find(s, max(0, old_len - len(s) + 1))
            if i != -1 and (first == -1 or i < first):
                first = i
        if first != -1:
            self._stopped = True
            self._pending = ""
            return text[:first], True

        held = self._held_len(text)
        cut = len(text) - held
        self._pending = text[cut:]
        return text[:cut], False

    def finish(self) -> str:
        if self._stopped or self._finished:
            return ""
        self._finished = True
        # An unfinished character at the very end becomes U+FFFD.
        text = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        first = -1
        for s in self._stops:  # only reachable with a stop string containing U+FFFD
            i = text.find(s)
            if i != -1 and (first == -1 or i < first):
                first = i
        if first != -1:
            self._stopped = True
            return text[:first]
        return text
