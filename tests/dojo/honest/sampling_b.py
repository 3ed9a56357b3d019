"""Sampling as a server does it: a chain of logits processors, a seeded draw, logprobs, stop strings."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

Ids = Sequence[Sequence[int]]  # one list of token ids per row of the logits


# ----------------------------------------------------------------------------- validation helpers


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _check_finite(name: str, x) -> float:
    if not _is_real(x) or not math.isfinite(float(x)):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def _as_fp32(logits: Tensor) -> Tensor:
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        raise ValueError("logits must be a (B, V) tensor")
    return logits.to(torch.float32)


def _check_rows(name: str, ids: Ids, batch: int) -> None:
    if len(ids) != batch:
        raise ValueError(f"{name} has {len(ids)} rows, logits have {batch}")


def _ids_tensor(row: Sequence[int], vocab: int, device, name: str) -> Tensor:
    t = torch.as_tensor(list(row), dtype=torch.long, device=device)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab):
        raise ValueError(f"{name} holds a token id outside [0, {vocab})")
    return t


# ----------------------------------------------------------------------------- processors


class Temperature:
    """logits / temperature. Raises ValueError unless temperature > 0."""

    def __init__(self, temperature: float):
        if not _is_real(temperature) or not float(temperature) > 0 or math.isnan(float(temperature)):
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature = float(temperature)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        return _as_fp32(logits) / self.temperature

    def __repr__(self) -> str:
        return f"Temperature({self.temperature})"


class TopK:
    """Keeps every token whose logit is at least the k-th largest (ties with it stay); the rest -inf."""

    def __init__(self, k: int):
        if not _is_int(k) or k < 1:
            raise ValueError(f"top_k must be an int >= 1, got {k!r}")
        self.k = int(k)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_fp32(logits)
        vocab = x.shape[-1]
        if self.k >= vocab:
            return x.clone()
        kth = torch.topk(x, self.k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest value
        return x.masked_fill(x < kth, float("-inf"))

    def __repr__(self) -> str:
        return f"TopK({self.k})"


class TopP:
    """Nucleus: a token stays when the probability mass of the tokens before it (sorted by probability,
    highest first, ties lower id first) is < p. p = 1 keeps everything."""

    def __init__(self, p: float):
        if not _is_real(p) or not (0.0 < float(p) <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {p!r}")
        self.p = float(p)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_fp32(logits)
        if self.p >= 1.0:
            return x.clone()
        probs = torch.softmax(x, dim=-1)
        # stable descending sort: equal probabilities keep ascending id order
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        # mass strictly before each token, accumulated in fp64 so rounding does not creep in
        before = torch.cumsum(sorted_probs.to(torch.float64), dim=-1) - sorted_probs.to(torch.float64)
        keep_sorted = before < self.p
        keep_sorted[:, 0] = True  # the most probable token always stays
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        return x.masked_fill(~keep, float("-inf"))

    def __repr__(self) -> str:
        return f"TopP({self.p})"


class MinP:
    """Keeps the tokens with p >= min_p * p_max; the rest -inf."""

    def __init__(self, min_p: float):
        if not _is_real(min_p) or not (0.0 <= float(min_p) <= 1.0):
            raise ValueError(f"min_p must be in [0, 1], got {min_p!r}")
        self.min_p = float(min_p)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_fp32(logits)
        if self.min_p == 0.0:
            return x.clone()
        probs = torch.softmax(x, dim=-1)
        p_max = probs.max(dim=-1, keepdim=True).values
        keep = probs >= self.min_p * p_max
        # the argmax always stays (guards against rounding when min_p == 1)
        keep.scatter_(-1, probs.argmax(dim=-1, keepdim=True), True)
        return x.masked_fill(~keep, float("-inf"))

    def __repr__(self) -> str:
        return f"MinP({self.min_p})"


class RepetitionPenalty:
    """HF's penalty on each distinct token seen in the prompt or the output: a logit > 0 is divided by
    the penalty, a logit < 0 multiplied by it (0 stays 0)."""

    def __init__(self, penalty: float):
        if not _is_real(penalty) or not float(penalty) > 0 or not math.isfinite(float(penalty)):
            raise ValueError(f"repetition_penalty must be > 0, got {penalty!r}")
        self.penalty = float(penalty)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_fp32(logits)
        batch, vocab = x.shape
        _check_rows("prompt_ids", prompt_ids, batch)
        _check_rows("output_ids", output_ids, batch)
        out = x.clone()
        for b in range(batch):
            ids = torch.cat(
                [
                    _ids_tensor(prompt_ids[b], vocab, x.device, "prompt_ids"),
                    _ids_tensor(output_ids[b], vocab, x.device, "output_ids"),
                ]
            ).unique()
            if ids.numel() == 0:
                continue
            vals = x[b, ids]
            out[b, ids] = torch.where(
                vals > 0, vals / self.penalty, torch.where(vals < 0, vals * self.penalty, vals)
            )
        return out

    def __repr__(self) -> str:
        return f"RepetitionPenalty({self.penalty})"


class FrequencyPresencePenalty:
    """OpenAI's penalties over the output only: logit[j] -= frequency_penalty * count[j] +
    presence_penalty * (count[j] > 0)."""

    def __init__(self, presence_penalty: float = 0.0, frequency_penalty: float = 0.0):
        self.presence_penalty = _check_finite("presence_penalty", presence_penalty)
        self.frequency_penalty = _check_finite("frequency_penalty", frequency_penalty)

    def __call__(self, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
        x = _as_fp32(logits)
        batch, vocab = x.shape
        _check_rows("output_ids", output_ids, batch)
        counts = torch.zeros((batch, vocab), dtype=torch.float32, device=x.device)
        for b in range(batch):
            ids = _ids_tensor(output_ids[b], vocab, x.device, "output_ids")
            if ids.numel():
                counts[b] = torch.bincount(ids, minlength=vocab).to(torch.float32)
        penalty = self.frequency_penalty * counts + self.presence_penalty * (counts > 0).to(torch.float32)
        return x - penalty

    def __repr__(self) -> str:
        return (
            f"FrequencyPresencePenalty(presence_penalty={self.presence_penalty}, "
            f"frequency_penalty={self.frequency_penalty})"
        )


class LogitBias:
    """OpenAI's logit_bias: bias[token] is added to that token's logit in every row."""

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
        x = _as_fp32(logits)
        vocab = x.shape[-1]
        out = x.clone()
        if not self.bias:
            return out
        ids = torch.tensor(list(self.bias.keys()), dtype=torch.long, device=x.device)
        if int(ids.max()) >= vocab:
            raise ValueError(f"logit_bias holds a token id outside [0, {vocab})")
        vals = torch.tensor(list(self.bias.values()), dtype=torch.float32, device=x.device)
        out[:, ids] += vals
        return out

    def __repr__(self) -> str:
        return f"LogitBias({self.bias})"


# ----------------------------------------------------------------------------- chain


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
    """Processors in the order: logit bias, repetition penalty, frequency/presence penalties,
    temperature, top-k, top-p, min-p."""
    # Build everything first so that every parameter is validated, whatever is left out.
    temp = Temperature(temperature)
    chain: list = []
    if logit_bias:
        chain.append(LogitBias(logit_bias))
    elif logit_bias is not None and not isinstance(logit_bias, dict):
        LogitBias(logit_bias)  # raises
    if repetition_penalty is not None:
        chain.append(RepetitionPenalty(repetition_penalty))
    fpp = FrequencyPresencePenalty(presence_penalty=presence_penalty, frequency_penalty=frequency_penalty)
    if fpp.presence_penalty != 0.0 or fpp.frequency_penalty != 0.0:
        chain.append(fpp)
    chain.append(temp)
    if top_k is not None:
        chain.append(TopK(top_k))
    if top_p is not None:
        chain.append(TopP(top_p))
    if min_p is not None:
        chain.append(MinP(min_p))
    return chain


def apply_chain(chain: Sequence, prompt_ids: Ids, output_ids: Ids, logits: Tensor) -> Tensor:
    """The logits (B, V) after every processor of `chain`, in order; the input is left as it was."""
    x = _as_fp32(logits).clone()
    for proc in chain:
        x = proc(prompt_ids, output_ids, x)
    return x


# ----------------------------------------------------------------------------- sampling


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
    """Apply `chain`, draw one token per row, report logprobs of the processed distribution."""
    x = _as_fp32(logits)
    vocab = x.shape[-1]
    if not _is_int(top_logprobs) or not (0 <= top_logprobs <= vocab):
        raise ValueError(f"top_logprobs must be an int in [0, {vocab}], got {top_logprobs!r}")
    processed = apply_chain(chain, prompt_ids, output_ids, x)
    logp = torch.log_softmax(processed, dim=-1)
    probs = torch.softmax(processed, dim=-1)
    tokens = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
    drawn = logp.gather(-1, tokens).squeeze(-1)
    n = int(top_logprobs)
    # stable descending sort: ties (including the -inf of filtered tokens) keep ascending id order
    sorted_lp, order = torch.sort(logp, dim=-1, descending=True, stable=True)
    return Sampled(
        tokens=tokens.squeeze(-1).to(torch.long),
        logprobs=drawn.to(torch.float32),
        top_ids=order[:, :n].to(torch.long).contiguous(),
        top_logprobs=sorted_lp[:, :n].to(torch.float32).contiguous(),
    )


# ----------------------------------------------------------------------------- stop strings


def _complete_prefix_len(buf: bytes | bytearray) -> int:
    """Length of the longest prefix of `buf` that does not end inside a started multi-byte character."""
    n = len(buf)
    for i in range(1, min(4, n) + 1):
        b = buf[n - i]
        if b & 0xC0 == 0x80:  # continuation byte: keep looking for its lead
            continue
        if b >> 5 == 0b110:
            need = 2
        elif b >> 4 == 0b1110:
            need = 3
        elif b >> 3 == 0b11110:
            need = 4
        else:
            need = 1
        return n - i if need > i else n
    return n


class StopChecker:
    """Incremental detokenisation with stop strings, for one stream."""

    def __init__(self, token_bytes: Sequence[bytes], stop: Sequence[str] = ()):
        if isinstance(stop, str):
            stop = [stop]
        stops = list(stop)
        for s in stops:
            if not isinstance(s, str):
                raise ValueError(f"stop strings must be str, got {s!r}")
            if s == "":
                raise ValueError("stop strings must not be empty")
        self.token_bytes = [bytes(t) for t in token_bytes]
        self.stop = stops
        self._max_hold = max((len(s) for s in stops), default=1) - 1
        self._pending = bytearray()  # bytes of an incomplete trailing character
        self._held = ""  # decoded text not shown yet
        self._stopped = False
        self._finished = False

    def feed(self, token: int) -> tuple[str, bool]:
        if self._stopped or self._finished:
            return "", self._stopped
        if not _is_int(token) or not (0 <= token < len(self.token_bytes)):
            raise ValueError(f"token id {token!r} outside [0, {len(self.token_bytes)})")
        self._pending += self.token_bytes[token]
        cut = _complete_prefix_len(self._pending)
        if cut:
            self._held += bytes(self._pending[:cut]).decode("utf-8", errors="replace")
            del self._pending[:cut]
        held = self._held

        # earliest stop occurrence in the unshown text (none can start in the shown text)
        first = -1
        for s in self.stop:
            i = held.find(s)
            if i != -1 and (first == -1 or i < first):
                first = i
        if first != -1:
            self._stopped = True
            self._held = ""
            self._pending.clear()
            return held[:first], True

        # hold back the longest end that is a proper prefix of some stop string
        keep = 0
        for length in range(min(len(held), self._max_hold), 0, -1):
            tail = held[-length:]
            if any(len(s) > length and s.startswith(tail) for s in self.stop):
                keep = length
                break
        shown = held[: len(held) - keep]
        self._held = held[len(held) - keep :]
        return shown, False

    def finish(self) -> str:
        if self._stopped or self._finished:
            return ""
        self._finished = True
        out = self._held + bytes(self._pending).decode("utf-8", errors="replace")
        self._held = ""
        self._pending.clear()
        return out
