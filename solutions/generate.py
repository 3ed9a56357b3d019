"""A KV-cache-backed generator: greedy, sampling and beam search.

The prompts are left-padded into one batch and prefilled once; every later step feeds one token
per row through `decode_step`, so all rows (and, in beam search, all beams of all prompts) share
one forward pass per step and each weight is read once per step, not once per row. Beam search
follows HuggingFace transformers >= 4.50 exactly. Not here: repetition penalties, min-length,
stop strings, sampling inside beam search (the system's penalties run the sampling kata's chain
through `_generate_choosing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

STRATEGIES = ("greedy", "sample", "beam")


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
    decode_step; the cache has reorder). `on_token(row, token)` is called as tokens are chosen
    (greedy, sample) or, for beam search, once the search ends, for each returned sequence.
    A strategy of "beam" with num_beams=1 is greedy search, as in HuggingFace.
    Raises ValueError, naming the argument, for any invalid argument.
    """
    eos = _check_arguments(
        model,
        prompts,
        max_new_tokens,
        eos_token_id,
        strategy,
        temperature,
        top_k,
        top_p,
        num_beams,
        early_stopping,
        num_return_sequences,
    )
    if strategy == "beam" and num_beams > 1:
        return _beam_search(
            model,
            prompts,
            max_new_tokens,
            eos,
            num_beams,
            length_penalty,
            early_stopping,
            num_return_sequences,
            on_token,
        )
    sampler = None
    if strategy == "sample":
        gen = torch.Generator()  # our own generator: the global RNG is never touched
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(seed)

        def sampler(logits: Tensor) -> Tensor:
            probs = _filtered_probs(logits, temperature, top_k, top_p)  # (B, V)
            return torch.multinomial(probs, 1, generator=gen)[:, 0]

    return _greedy_or_sample(model, prompts, max_new_tokens, eos, length_penalty, sampler, on_token)


def _filtered_probs(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """Sampling distribution (B, V): fp32 logits / temperature, then top-k, then top-p.

    top-k keeps every token whose logit is at least the k-th largest (ties with it stay);
    top-p keeps the most probable tokens while the mass before them is below top_p.
    """
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # the most probable token always has 0
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before >= top_p)
        probs = probs.masked_fill(drop, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)


def _prefill_last(model, ids: Tensor, cache, mask: Tensor | None) -> Tensor:
    """The prompt's last-position logits (B, V), all a generator needs. A model that says it can
    (`prefill_last_only`, as solutions.model.Llama) runs its LM head on that position alone: for
    SmolLM2 and a 31-token prompt, 31 x 49,152 logits are never made (the demo peaks ~18 MB lower)."""
    if getattr(model, "prefill_last_only", False):
        return model.prefill(ids, cache, mask, last_only=True)[:, -1]
    return model.prefill(ids, cache, mask)[:, -1]


def _greedy_or_sample(model, prompts, max_new_tokens, eos, length_penalty, sampler, on_token):
    ids, mask = _left_pad(prompts, 1)
    B, T = ids.shape
    cache = model.new_cache(B, T + max_new_tokens)
    tokens: list[list[int]] = [[] for _ in range(B)]
    logp_sums = [0.0] * B
    finished = [False] * B
    start = time.perf_counter()
    logits = _prefill_last(model, ids, cache, mask)  # (B, V)
    for step in range(max_new_tokens):
        next_ids = logits.float().argmax(dim=-1) if sampler is None else sampler(logits)  # (B,)
        logp = F.log_softmax(logits.float(), dim=-1).gather(1, next_ids[:, None])[:, 0]  # (B,)
        for row, (tok, lp) in enumerate(zip(next_ids.tolist(), logp.tolist())):
            if finished[row]:
                continue  # a finished row rides along in the batch; its output stops growing
            tokens[row].append(tok)
            logp_sums[row] += lp
            finished[row] = tok in eos
            if on_token is not None:
                on_token(row, tok)
        if step == 0:
            prefill_seconds = time.perf_counter() - start
        if all(finished) or step == max_new_tokens - 1:
            break
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
        logits = model.decode_step(next_ids, cache, mask)  # (B, V)
    decode_seconds = time.perf_counter() - start - prefill_seconds
    scores = [s / len(t) ** length_penalty for s, t in zip(logp_sums, tokens)]
    return GenerationResult(tokens, scores, prefill_seconds, decode_seconds, sum(map(len, tokens)))


def _beam_search(
    model,
    prompts,
    max_new_tokens,
    eos,
    num_beams,
    length_penalty,
    early_stopping,
    num_return_sequences,
    on_token,
):
    B, nb = len(prompts), num_beams
    ids, mask = _left_pad(prompts, nb)  # row b * nb + j is beam j of prompt b
    T = ids.shape[1]
    cache = model.new_cache(B * nb, T + max_new_tokens)
    n_candidates = max(2, 1 + len(eos)) * nb  # enough that nb candidates without EOS always remain
    eos_ids = torch.tensor(eos, dtype=torch.long)
    row_base = torch.arange(B)[:, None] * nb  # (B, 1)

    # All beams hold the same prompt at first, so only beam 0 may extend it (HF uses -1e9 for -inf).
    running_scores = torch.full((B, nb), float("-inf"))
    running_scores[:, 0] = 0.0
    running_tokens = torch.zeros((B, nb, 0), dtype=torch.long)  # (B, nb, step)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]  # best first, <= nb each
    settled = [False] * B  # no running beam can beat this prompt's finished hypotheses any more

    start = time.perf_counter()
    logits = _prefill_last(model, ids, cache, mask)  # (B * nb, V)
    for step in range(max_new_tokens):
        V = logits.shape[-1]
        logp = F.log_softmax(logits.float(), dim=-1).view(B, nb, V) + running_scores[:, :, None]
        cand_scores, cand = logp.view(B, nb * V).topk(n_candidates, dim=-1)  # (B, 2nb), best first
        cand_beam, cand_token = cand // V, cand % V
        ends = torch.isin(cand_token, eos_ids) | (step == max_new_tokens - 1)  # (B, 2nb)

        # An ending candidate finishes a hypothesis only if it ranks among the top nb.
        penalised = (cand_scores[:, :nb] / (step + 1) ** length_penalty).tolist()
        for b in range(B):
            if settled[b] or (early_stopping is True and len(finished[b]) == nb):
                continue
            for j in range(nb):
                if ends[b, j]:
                    seq = running_tokens[b, cand_beam[b, j]].tolist() + [int(cand_token[b, j])]
                    finished[b].append((penalised[b][j], seq))
            finished[b] = sorted(finished[b], key=lambda h: h[0], reverse=True)[:nb]

        # The best nb candidates that did not end go on; each row's cache follows its parent beam.
        running_scores, go_on = cand_scores.masked_fill(ends, float("-inf")).topk(nb, dim=-1)  # (B, nb)
        parent = cand_beam.gather(1, go_on)  # (B, nb)
        running_tokens = torch.cat(
            [
                running_tokens.gather(1, parent[:, :, None].expand(-1, -1, step)),
                cand_token.gather(1, go_on)[:, :, None],
            ],
            dim=2,
        )
        if step == 0:
            prefill_seconds = time.perf_counter() - start

        # early_stopping: True stops a prompt once it has nb finished hypotheses; False and
        # "never" stop it once the best running beam cannot beat the worst finished one, judged
        # at the current length (False, or "never" with length_penalty <= 0) or at max_new_tokens.
        length = max_new_tokens if early_stopping == "never" and length_penalty > 0 else step + 1
        best_possible = (running_scores[:, 0] / length**length_penalty).tolist()
        for b in range(B):
            if len(finished[b]) == nb and best_possible[b] <= finished[b][-1][0]:
                settled[b] = True
        full = [len(f) == nb for f in finished]
        if all(settled) or (early_stopping is True and all(full)) or step == max_new_tokens - 1:
            break
        cache.reorder((row_base + parent).view(-1))  # in every layer, row i now holds its parent's past
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(B * nb, 1)], dim=1)
        logits = model.decode_step(running_tokens[:, :, -1].reshape(-1), cache, mask)  # (B * nb, V)
    decode_seconds = time.perf_counter() - start - prefill_seconds

    tokens, scores = [], []
    for b in range(B):
        for score, seq in finished[b][:num_return_sequences]:
            tokens.append(seq)
            scores.append(score)
    if on_token is not None:
        for row, seq in enumerate(tokens):
            for tok in seq:
                on_token(row, tok)
    return GenerationResult(tokens, scores, prefill_seconds, decode_seconds, sum(map(len, tokens)))


def _left_pad(prompts: list[list[int]], copies: int) -> tuple[Tensor, Tensor | None]:
    """ids (len(prompts) * copies, T) left-padded with 0, and a mask (None when nothing is padded)."""
    T = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts) * copies, T), dtype=torch.long)
    mask = torch.zeros((len(prompts) * copies, T), dtype=torch.bool)
    for i, p in enumerate(prompts):
        rows = slice(i * copies, (i + 1) * copies)
        ids[rows, T - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[rows, T - len(p) :] = True
    return ids, None if bool(mask.all()) else mask


def _check_arguments(
    model,
    prompts,
    max_new_tokens,
    eos_token_id,
    strategy,
    temperature,
    top_k,
    top_p,
    num_beams,
    early_stopping,
    num_return_sequences,
) -> list[int]:
    """Raise ValueError naming the first bad argument; return the EOS ids as a list."""
    vocab, context = model.config.vocab_size, model.config.max_seq_len
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of token-id lists")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompts[{i}] is empty: every prompt needs at least one token")
        if any(not isinstance(t, int) or not 0 <= t < vocab for t in p):
            raise ValueError(f"prompts[{i}] holds a token id outside [0, {vocab})")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    longest = max(len(p) for p in prompts)
    if longest + max_new_tokens > context:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} after a {longest}-token prompt exceeds the "
            f"cache: the model's context holds {context} tokens"
        )
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError(f"num_beams must be an int >= 1, got {num_beams!r}")
    if num_beams > 1 and strategy != "beam":
        raise ValueError(f"num_beams={num_beams} needs strategy='beam', got strategy={strategy!r}")
    if not isinstance(num_return_sequences, int) or not 1 <= num_return_sequences <= num_beams:
        raise ValueError(
            f"num_return_sequences must be in [1, num_beams={num_beams}], got {num_return_sequences!r}"
        )
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
    if strategy == "sample" and not temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p!r}")
    if eos_token_id is None:
        eos = []
    else:
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    if any(not isinstance(e, int) or not 0 <= e < vocab for e in eos):
        raise ValueError(f"eos_token_id must be token ids in [0, {vocab}), got {eos_token_id!r}")
    return eos


def _generate_choosing(
    model,
    prompts: list[list[int]],
    choose: Callable[[Tensor], Tensor],
    *,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    on_token: Callable[[int, int], None] | None = None,
) -> GenerationResult:
    """The greedy loop with each step's tokens picked by `choose(logits (B, V)) -> (B,)`: how the system
    (solutions/system/decoding.py) runs the sampling kata's chain. Not part of the kata's API.
    Raises ValueError as `generate` does."""
    eos = _check_arguments(
        model, prompts, max_new_tokens, eos_token_id, "greedy", 1.0, None, None, 1, True, 1
    )
    return _greedy_or_sample(model, prompts, max_new_tokens, eos, 1.0, choose, on_token)
