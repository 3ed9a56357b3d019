"""Speculative decoding with greedy as the zero-temperature case of rejection sampling.

Written from the prompt. Greedy turns both models' logits into one-hot distributions, so that one
`verify` serves both modes: a one-hot draft is accepted exactly when it is the target's argmax, and
the residual of two one-hots is the target's argmax.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class SpeculativeResult:
    tokens: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted > 0 else 0.0


def acceptance_probability(p: Tensor, q: Tensor) -> float:
    if p.dim() != 1 or q.dim() != 1 or p.numel() != q.numel():
        raise ValueError(f"p {list(p.shape)} and q {list(q.shape)} must be vectors of equal length")
    return (p.double() - (p.double() - q.double()).relu()).sum().item()


def verify(
    draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    B, k = draft_tokens.shape
    if list(draft_probs.shape[:2]) != [B, k] or draft_probs.dim() != 3:
        raise ValueError(f"draft_probs: expected (B={B}, k={k}, V), got {list(draft_probs.shape)}")
    V = draft_probs.shape[-1]
    if list(target_probs.shape) != [B, k + 1, V]:
        raise ValueError(f"target_probs: expected ({B}, {k + 1}, {V}), got {list(target_probs.shape)}")
    idx = draft_tokens.unsqueeze(-1)
    p_x = torch.take_along_dim(target_probs[:, :k], idx, -1).squeeze(-1)  # (B, k)
    q_x = torch.take_along_dim(draft_probs, idx, -1).squeeze(-1)
    coins = torch.rand((B, k), generator=generator)
    rejected = coins * q_x >= p_x  # (B, k)
    first_reject = torch.full((B,), k)
    for j in reversed(range(k)):  # the earliest rejection wins
        first_reject[rejected[:, j]] = j
    extended_q = F.pad(draft_probs, (0, 0, 0, 1))  # (B, k + 1, V): zeros after the last draft
    pick = first_reject.view(B, 1, 1).expand(B, 1, V)
    p_j = target_probs.gather(1, pick).squeeze(1).double()
    q_j = extended_q.gather(1, pick).squeeze(1).double()
    weights = (p_j - q_j).clamp_min(0)
    no_mass = weights.sum(-1) == 0
    weights[no_mass] = p_j[no_mass]
    following = torch.multinomial(weights, 1, generator=generator).view(B)
    return first_reject.long(), following


def expected_tokens_per_round(alpha: float, k: int) -> float:
    _check(alpha, k, 0.0)
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    _check(alpha, k, c)
    return expected_tokens_per_round(alpha, k) / (k * c + 1.0)


def _check(alpha, k, c):
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must lie in [0, 1]: {alpha}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1: {k}")
    if c < 0:
        raise ValueError(f"c must be >= 0: {c}")


class _Side:
    """One model with its cache and a way to turn logits into the distribution used for verification."""

    def __init__(self, model, size: int, temperature: float):
        self.model, self.cache, self.temperature = model, model.new_cache(1, size), temperature

    def feed(self, tokens: list[int]) -> Tensor:
        if len(tokens) == 1:
            return self.model.decode_step(torch.tensor(tokens), self.cache)  # (1, V): one row
        return self.model.prefill(torch.tensor([tokens]), self.cache)[0]  # (T, V)

    def dist(self, logits: Tensor) -> Tensor:
        if self.temperature == 0:
            return F.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        return (logits.float() / self.temperature).softmax(-1)

    def rollback(self, length: int) -> None:
        self.cache.truncate(min(length, self.cache.length))


def speculative_generate(
    target,
    draft,
    prompt: list[int],
    *,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    eos_token_id: int | list[int] | None = None,
    on_token: Callable[[int], None] | None = None,
) -> SpeculativeResult:
    vocab = target.config.vocab_size
    if vocab != draft.config.vocab_size:
        raise ValueError(f"vocab_size mismatch: target {vocab}, draft {draft.config.vocab_size}")
    if len(prompt) == 0 or min(prompt) < 0 or max(prompt) >= vocab:
        raise ValueError("prompt is empty or holds an id outside the vocabulary")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    limit = min(target.config.max_seq_len, draft.config.max_seq_len)
    if len(prompt) + max_new_tokens > limit:
        raise ValueError(f"max_new_tokens: {len(prompt)} + {max_new_tokens} > context {limit}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())
    rng = torch.Generator()
    if seed is None:
        rng.seed()
    else:
        rng.manual_seed(seed)

    size = len(prompt) + max_new_tokens
    big, small = _Side(target, size, temperature), _Side(draft, size, temperature)
    context = list(prompt)
    res = SpeculativeResult()
    while len(res.tokens) < max_new_tokens:
        n = min(k, max_new_tokens - len(res.tokens) - 1)
        guesses: list[int] = []
        q_rows: list[Tensor] = []
        if n:
            logits = small.feed(context[small.cache.length :])[-1]
            while True:
                q = small.dist(logits)
                q_rows.append(q)
                guesses.append(int(torch.multinomial(q, 1, generator=rng)))
                if len(guesses) == n:
                    break
                logits = small.feed(guesses[-1:])[-1]
        fed = context[big.cache.length :] + guesses
        p = big.dist(big.model.prefill(torch.tensor([fed]), big.cache)[0, len(fed) - n - 1 :])
        res.rounds += 1
        q = torch.stack(q_rows) if q_rows else p.new_zeros((0, vocab))
        acc, nxt = verify(torch.tensor([guesses], dtype=torch.long).reshape(1, n), q[None], p[None], rng)
        taken = int(acc[0])
        res.drafted += n
        res.accepted += taken
        big.rollback(len(context) + taken)
        small.rollback(len(context) + taken)
        for tok in guesses[:taken] + [int(nxt[0])]:
            context.append(tok)
            res.tokens.append(tok)
            if on_token is not None:
                on_token(tok)
            if tok in eos:
                return res
    return res
