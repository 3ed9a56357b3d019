"""Speculative decoding: a draft proposes, the target verifies in one prefill per round.

Written from the prompt: per-row rejection sampling in plain Python over small tensors, a loop that
tracks how many tokens each model has consumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class SpeculativeResult:
    """New tokens of one `speculative_generate` call, and how the drafts fared."""

    tokens: list[int]
    drafted: int
    accepted: int
    rounds: int

    @property
    def acceptance_rate(self) -> float:
        if self.drafted == 0:
            return 0.0
        return self.accepted / self.drafted


def acceptance_probability(p: Tensor, q: Tensor) -> float:
    if p.ndim != 1:
        raise ValueError("p must be 1-D")
    if q.shape != p.shape:
        raise ValueError(f"q has shape {tuple(q.shape)}, p has {tuple(p.shape)}")
    total = 0.0
    for a, b in zip(p.tolist(), q.tolist()):
        total += min(a, b)
    return total


def _draw(weights: Tensor, generator) -> int:
    return int(torch.multinomial(weights, 1, generator=generator).item())


def verify(
    draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    if draft_tokens.ndim != 2:
        raise ValueError("draft_tokens must be 2-D (B, k)")
    rows, k = draft_tokens.shape
    if draft_probs.ndim != 3 or draft_probs.shape[0] != rows or draft_probs.shape[1] != k:
        raise ValueError(f"draft_probs should be ({rows}, {k}, V); got {tuple(draft_probs.shape)}")
    vocab = draft_probs.shape[2]
    if tuple(target_probs.shape) != (rows, k + 1, vocab):
        raise ValueError(
            f"target_probs should be ({rows}, {k + 1}, {vocab}); got {tuple(target_probs.shape)}"
        )
    n_acc, nxt = [], []
    for b in range(rows):
        j = 0
        while j < k:
            x = int(draft_tokens[b, j])
            px, qx = float(target_probs[b, j, x]), float(draft_probs[b, j, x])
            u = float(torch.rand((), generator=generator))
            if not u * qx < px:
                break
            j += 1
        if j == k:
            token = _draw(target_probs[b, k].double(), generator)
        else:
            left = torch.clamp(target_probs[b, j].double() - draft_probs[b, j].double(), min=0.0)
            token = _draw(left if left.sum() > 0 else target_probs[b, j].double(), generator)
        n_acc.append(j)
        nxt.append(token)
    return torch.tensor(n_acc, dtype=torch.long), torch.tensor(nxt, dtype=torch.long)


def _rate_ok(alpha, k):
    if alpha < 0 or alpha > 1:
        raise ValueError(f"alpha={alpha} is not a probability")
    if type(k) is not int or k < 1:
        raise ValueError(f"k={k} must be a positive integer")


def expected_tokens_per_round(alpha: float, k: int) -> float:
    _rate_ok(alpha, k)
    return float(sum(alpha**i for i in range(k + 1)))


def expected_speedup(alpha: float, k: int, c: float) -> float:
    _rate_ok(alpha, k)
    if c < 0:
        raise ValueError(f"c={c} cannot be negative")
    return expected_tokens_per_round(alpha, k) / (1 + k * c)


def _distribution(logits: Tensor, temperature: float) -> Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


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
    V = target.config.vocab_size
    if draft.config.vocab_size != V:
        raise ValueError("target and draft vocab_size differ")
    if not prompt or any(t < 0 or t >= V for t in prompt):
        raise ValueError("prompt must be non-empty with ids in range")
    if type(max_new_tokens) is not int or max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if len(prompt) + max_new_tokens > min(target.config.max_seq_len, draft.config.max_seq_len):
        raise ValueError("max_new_tokens too large for the context")
    if type(k) is not int or k < 1:
        raise ValueError("k must be >= 1")
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    stops = (
        set()
        if eos_token_id is None
        else ({eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id))
    )

    g = None
    if temperature > 0:
        g = torch.Generator()
        if seed is not None:
            g.manual_seed(seed)
    size = len(prompt) + max_new_tokens
    tc, dc = target.new_cache(1, size), draft.new_cache(1, size)
    history = list(prompt)
    out: list[int] = []
    stats = {"drafted": 0, "accepted": 0, "rounds": 0}

    while len(out) < max_new_tokens:
        budget = min(k, max_new_tokens - len(out) - 1)
        proposal, qs = [], []
        if budget > 0:
            missing = history[dc.length :]
            last = draft.prefill(torch.tensor([missing], dtype=torch.long), dc)[0, -1]
            for i in range(budget):
                if g is None:
                    tok = int(torch.argmax(last))
                else:
                    qdist = _distribution(last, temperature)
                    qs.append(qdist)
                    tok = _draw(qdist, g)
                proposal.append(tok)
                if i + 1 < budget:
                    last = draft.decode_step(torch.tensor([tok], dtype=torch.long), dc)[0]
        feed = history[tc.length :] + proposal
        scores = target.prefill(torch.tensor([feed], dtype=torch.long), tc)[0]
        scores = scores[len(feed) - budget - 1 :]
        stats["rounds"] += 1
        if g is None:
            n = 0
            for i in range(budget):
                if int(torch.argmax(scores[i])) != proposal[i]:
                    break
                n += 1
            extra = int(torch.argmax(scores[n]))
        else:
            ps = _distribution(scores, temperature)
            qstack = torch.stack(qs) if qs else torch.zeros(0, V)
            a, t = verify(
                torch.tensor([proposal], dtype=torch.long).view(1, budget),
                qstack.unsqueeze(0),
                ps.unsqueeze(0),
                g,
            )
            n, extra = int(a[0]), int(t[0])
        stats["drafted"] += budget
        stats["accepted"] += n
        base = len(history)
        tc.truncate(base + n)
        if dc.length > base + n:
            dc.truncate(base + n)
        done = False
        for tok in proposal[:n] + [extra]:
            history.append(tok)
            out.append(tok)
            if on_token:
                on_token(tok)
            if tok in stops:
                done = True
                break
        if done:
            break
    return SpeculativeResult(out, stats["drafted"], stats["accepted"], stats["rounds"])
