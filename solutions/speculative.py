"""Speculative decoding: a cheap draft model proposes k tokens, the target verifies them in one pass.

Decode at batch 1 is bandwidth-bound, so a target pass over k + 1 tokens costs about one token's.
Each round the draft proposes k tokens, the target scores them in one `prefill`, and the longest
acceptable prefix is kept plus one token of the target's own; both caches are truncated. Greedy
keeps the drafts equal to the target's argmax (its greedy output, up to floating point); sampling
uses Leviathan et al.'s rejection rule, so each token is distributed as the target alone samples it.
Not here: batches of prompts, tree drafts, top-k / top-p filters, adapting k.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class SpeculativeResult:
    """New tokens of one `speculative_generate` call, and how the drafts fared."""

    tokens: list[int]  # new tokens; an EOS, when one came, is the last
    drafted: int  # draft tokens proposed, over all rounds
    accepted: int  # draft tokens the target kept
    rounds: int  # target forward passes, one per round

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0.0 when nothing was drafted): the draft acceptance rate. Leviathan's alpha on
        average at k = 1, below it for k > 1: the drafts after a rejection count but are never tested."""
        return self.accepted / self.drafted if self.drafted else 0.0


def acceptance_probability(p: Tensor, q: Tensor) -> float:
    """P(a draft token x ~ q is accepted) = sum over x of min(p(x), q(x)) = 1 - total variation(p, q).

    Raises ValueError unless p and q are 1-D distributions of the same size.
    """
    if p.dim() != 1 or p.shape != q.shape:
        raise ValueError(f"p and q must be 1-D of the same size, got {tuple(p.shape)} and {tuple(q.shape)}")
    return float(torch.minimum(p.double(), q.double()).sum())


def verify(
    draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """One round of rejection sampling for B independent rows.

    draft_tokens (B, k) long, drawn from draft_probs (B, k, V) = q; target_probs (B, k + 1, V) = p,
    p[:, j] the target's distribution for the position of draft_tokens[:, j] (p[:, k]: the one after).
    Returns accepted (B,) in [0, k] and next_token (B,): row b keeps draft_tokens[b, :accepted[b]],
    then next_token[b]. Raises ValueError for mismatched shapes.
    """
    if draft_tokens.dim() != 2:
        raise ValueError(f"draft_tokens must be (B, k), got {tuple(draft_tokens.shape)}")
    B, k = draft_tokens.shape
    if draft_probs.dim() != 3 or draft_probs.shape[:2] != (B, k):
        raise ValueError(f"draft_probs must be (B, k, V) = ({B}, {k}, V), got {tuple(draft_probs.shape)}")
    V = draft_probs.shape[2]
    if target_probs.shape != (B, k + 1, V):
        raise ValueError(
            f"target_probs must be (B, k + 1, V) = {(B, k + 1, V)}, got {tuple(target_probs.shape)}"
        )
    p, q = target_probs.float(), draft_probs.float()
    pick = draft_tokens[..., None]  # (B, k, 1)
    ratio = p[:, :k].gather(-1, pick)[..., 0] / q.gather(-1, pick)[..., 0]  # (B, k)
    u = torch.rand(B, k, generator=generator)
    ok = (u < ratio).long()  # (B, k)
    accepted = ok.cumprod(-1).sum(-1)  # (B,): the length of the accepted prefix
    rows = torch.arange(B)
    p_next = p[rows, accepted]  # (B, V): p at the first rejected position, or the bonus position
    q_next = torch.cat([q, q.new_zeros(B, 1, V)], dim=1)[rows, accepted]  # (B, V): zeros at the bonus
    residual = (p_next - q_next).clamp(min=0)  # the bonus position: p itself
    # subtle: p == q at a rejection leaves no residual mass, but a rejection then has probability 0
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p_next, residual)
    next_token = torch.multinomial(residual, 1, generator=generator)[:, 0]
    return accepted, next_token


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E[tokens per target pass] = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha).

    Assumes each draft token is accepted with probability alpha, independently. Raises ValueError
    for alpha outside [0, 1] or k < 1.
    """
    _check_rate(alpha, k)
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan's expected speed-up over plain target decoding: tokens per round / (k c + 1).

    A round costs k draft steps (c each, in target steps) and one target pass (1, as one step).
    Raises ValueError for alpha outside [0, 1], k < 1 or c < 0.
    """
    _check_rate(alpha, k)
    if not c >= 0:
        raise ValueError(f"c (a draft step's cost over a target step's) must be >= 0, got {c!r}")
    return expected_tokens_per_round(alpha, k) / (k * c + 1)


def _check_rate(alpha: float, k: int) -> None:
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha (the acceptance rate) must be in [0, 1], got {alpha!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (draft tokens per round) must be an int >= 1, got {k!r}")


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
    """Continue `prompt` by up to `max_new_tokens` tokens, `draft` proposing and `target` verifying.

    Both models follow the model protocol (config, new_cache, prefill, decode_step; the cache has
    length and truncate) and share one vocabulary. temperature 0 is greedy: the output is the
    target's greedy output. temperature > 0 samples from softmax(logits / temperature) with a
    torch.Generator seeded with `seed`. `on_token(token)` is called for each new token as it is kept.
    Raises ValueError, naming the argument, for an invalid argument.
    """
    eos = _check_arguments(target, draft, prompt, max_new_tokens, k, temperature, eos_token_id)
    gen = None
    if temperature > 0:
        gen = torch.Generator()  # our own: the global RNG is never touched
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(seed)
    room = len(prompt) + max_new_tokens
    target_cache, draft_cache = target.new_cache(1, room), draft.new_cache(1, room)
    seq = list(prompt)  # every kept token; each cache holds a prefix of it
    new: list[int] = []
    drafted = accepted_total = rounds = 0
    while len(new) < max_new_tokens:
        n_draft = min(k, max_new_tokens - len(new) - 1)  # nothing drafted past the end
        drafts, q_rows = _draft(draft, draft_cache, seq, n_draft, temperature, gen)
        fed = seq[target_cache.length :] + drafts
        logits = target.prefill(torch.tensor([fed]), target_cache)[0, -(n_draft + 1) :]  # (n_draft + 1, V)
        rounds += 1
        if gen is None:
            best = logits.argmax(-1)  # (n_draft + 1,): first index of the maximum
            accepted = 0
            while accepted < n_draft and drafts[accepted] == int(best[accepted]):
                accepted += 1
            next_token = int(best[accepted])
        else:
            p = torch.softmax(logits.float() / temperature, -1)
            q = torch.stack(q_rows) if q_rows else p.new_zeros(0, p.shape[-1])
            n, t = verify(torch.tensor([drafts], dtype=torch.long), q[None], p[None], gen)
            accepted, next_token = int(n[0]), int(t[0])
        drafted += n_draft
        accepted_total += accepted
        kept = len(seq) + accepted  # positions both caches may keep: all but next_token
        target_cache.truncate(kept)
        draft_cache.truncate(min(kept, draft_cache.length))
        for token in drafts[:accepted] + [next_token]:
            seq.append(token)
            new.append(token)
            if on_token is not None:
                on_token(token)
            if token in eos:
                return SpeculativeResult(new, drafted, accepted_total, rounds)
    return SpeculativeResult(new, drafted, accepted_total, rounds)


def _draft(
    draft, cache, seq: list[int], n: int, temperature: float, gen: torch.Generator | None
) -> tuple[list[int], list[Tensor]]:
    """n tokens from the draft model after `seq`, and (sampling) the distribution each came from."""
    tokens: list[int] = []
    probs: list[Tensor] = []
    if n == 0:
        return tokens, probs
    logits = draft.prefill(torch.tensor([seq[cache.length :]]), cache)[0, -1]  # catch up: 1+ tokens
    while True:
        if gen is None:
            tokens.append(int(logits.argmax()))
        else:
            q = torch.softmax(logits.float() / temperature, -1)  # (V,)
            probs.append(q)
            tokens.append(int(torch.multinomial(q, 1, generator=gen)))
        if len(tokens) == n:  # the last draft is never fed to the draft model
            return tokens, probs
        logits = draft.decode_step(torch.tensor([tokens[-1]]), cache)[0]


def _check_arguments(target, draft, prompt, max_new_tokens, k, temperature, eos_token_id) -> list[int]:
    """Raise ValueError naming the first bad argument; return the EOS ids as a list."""
    vocab = target.config.vocab_size
    if draft.config.vocab_size != vocab:
        raise ValueError(
            f"draft's vocab_size {draft.config.vocab_size} differs from the target's {vocab}: "
            "the draft must propose tokens of the target's vocabulary"
        )
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise ValueError("prompt must be a non-empty list of token ids")
    if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in prompt):
        raise ValueError(f"prompt holds a token id outside [0, {vocab})")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    context = min(target.config.max_seq_len, draft.config.max_seq_len)
    if len(prompt) + max_new_tokens > context:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} after a {len(prompt)}-token prompt exceeds "
            f"the context of {context} tokens"
        )
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (draft tokens per round) must be an int >= 1, got {k!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
    eos = (
        []
        if eos_token_id is None
        else [eos_token_id]
        if isinstance(eos_token_id, int)
        else list(eos_token_id)
    )
    if any(isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < vocab for e in eos):
        raise ValueError(f"eos_token_id must be token ids in [0, {vocab}), got {eos_token_id!r}")
    return eos
