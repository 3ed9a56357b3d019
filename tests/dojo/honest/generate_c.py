"""Generation loop around a KV-cached model: greedy, seeded sampling, HF-style beam search."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

import torch


@dataclass
class GenerationResult:
    """New tokens, scores and timings of one `generate` call."""

    tokens: list[list[int]]
    scores: list[float]
    prefill_seconds: float  # prompt forward pass up to the first chosen token(s)
    decode_seconds: float  # every later step
    tokens_generated: int  # new tokens across all returned sequences


STRATEGIES = ("greedy", "sample", "beam")


def _check_args(
    model,
    prompts,
    *,
    max_new_tokens,
    strategy,
    temperature,
    top_k,
    top_p,
    num_beams,
    early_stopping,
    num_return_sequences,
):
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError(f"num_beams must be an int >= 1 (got {num_beams!r})")
    if num_beams > 1 and strategy != "beam":
        raise ValueError(
            f"num_beams > 1 needs strategy='beam' (got strategy={strategy!r}, num_beams={num_beams})"
        )
    if not (1 <= num_return_sequences <= num_beams):
        raise ValueError(f"num_return_sequences={num_return_sequences} must lie in [1, num_beams]")
    if strategy == "sample" and temperature <= 0:
        raise ValueError(f"temperature must be positive for sampling (got {temperature})")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 (got {top_k})")
    if top_p is not None and (top_p <= 0 or top_p > 1):
        raise ValueError(f"top_p must be in (0, 1] (got {top_p})")
    if early_stopping is not True and early_stopping is not False and early_stopping != "never":
        raise ValueError(f"early_stopping must be True, False or 'never' (got {early_stopping!r})")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1 (got {max_new_tokens})")
    if len(prompts) == 0:
        raise ValueError("prompts is empty")
    V = model.config.vocab_size
    for p in prompts:
        if len(p) == 0:
            raise ValueError("prompts contains an empty prompt")
        if any(not (0 <= tok < V) for tok in p):
            raise ValueError(f"prompts contains a token id outside [0, {V})")
    need = max(map(len, prompts)) + max_new_tokens
    if need > model.config.max_seq_len:
        raise ValueError(
            f"max_new_tokens too large: longest prompt + max_new_tokens = {need} > "
            f"max_seq_len {model.config.max_seq_len}"
        )


class _Batch:
    """Left-padded ids and the growing HF-style attention mask for a batch of rows."""

    def __init__(self, prompts: list[list[int]], copies: int):
        width = max(len(p) for p in prompts)
        self.rows = [p for p in prompts for _ in range(copies)]
        self.width = width
        padded = [[0] * (width - len(p)) + list(p) for p in self.rows]
        real = [[False] * (width - len(p)) + [True] * len(p) for p in self.rows]
        self.ids = torch.tensor(padded, dtype=torch.long)
        self.mask = torch.tensor(real, dtype=torch.bool)

    def grow(self) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
        return self.mask


# ---------------------------------------------------------------------------------------------
# token choice for greedy / sampling
# ---------------------------------------------------------------------------------------------


def _sample_distribution(logits: torch.Tensor, temperature: float, top_k, top_p) -> torch.Tensor:
    """Filtered, renormalised probabilities, (B, V)."""
    scaled = logits.to(torch.float32) / temperature
    if top_k is not None:
        k = min(int(top_k), scaled.size(-1))
        threshold = scaled.topk(k, dim=-1).values[:, -1:]
        scaled = torch.where(scaled >= threshold, scaled, torch.full_like(scaled, -math.inf))
    probs = scaled.softmax(dim=-1)
    if top_p is not None:
        # descending probability, ties broken by lower token id first
        vals, idx = probs.sort(dim=-1, descending=True, stable=True)
        mass_before = vals.cumsum(dim=-1) - vals
        drop_sorted = mass_before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.empty_like(drop_sorted)
        drop.scatter_(1, idx, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)


def _decode_simple(
    model,
    prompts,
    max_new_tokens,
    eos_ids,
    *,
    sample,
    temperature,
    top_k,
    top_p,
    seed,
    length_penalty,
    on_token,
):
    batch = _Batch(prompts, 1)
    B = len(batch.rows)
    cache = model.new_cache(B, batch.width + max_new_tokens)
    rng = torch.Generator()
    if seed is not None:
        rng.manual_seed(seed)
    else:
        rng.seed()

    seqs = [[] for _ in range(B)]
    logps = [0.0] * B
    alive = [True] * B

    start = perf_counter()
    first = None
    with torch.no_grad():
        logits = model.prefill(batch.ids, cache, attention_mask=batch.mask)[:, -1]
        for step in range(max_new_tokens):
            logits = logits.float()
            if sample:
                probs = _sample_distribution(logits, temperature, top_k, top_p)
                if probs.device != rng.device:
                    probs = probs.to(rng.device)
                choice = torch.multinomial(probs, 1, generator=rng)[:, 0].to(logits.device)
            else:
                choice = logits.argmax(dim=-1)
            lp = logits.log_softmax(dim=-1).gather(1, choice[:, None])[:, 0]
            for r, (tok, lp_r) in enumerate(zip(choice.tolist(), lp.tolist())):
                if not alive[r]:
                    continue
                seqs[r].append(tok)
                logps[r] += lp_r
                if on_token is not None:
                    on_token(r, tok)
                if tok in eos_ids:
                    alive[r] = False
            if first is None:
                first = perf_counter()
            if not any(alive) or step + 1 == max_new_tokens:
                break
            feed = torch.tensor([s[-1] for s in seqs], dtype=torch.long, device=logits.device)
            logits = model.decode_step(feed, cache, attention_mask=batch.grow().to(logits.device))
    end = perf_counter()
    scores = [logps[r] / len(seqs[r]) ** length_penalty for r in range(B)]
    return GenerationResult(seqs, scores, first - start, end - first, sum(map(len, seqs)))


# ---------------------------------------------------------------------------------------------
# beam search: one plain bookkeeping object per prompt, the logits batched for all
# ---------------------------------------------------------------------------------------------


@dataclass
class _PromptBeams:
    num_beams: int
    length_penalty: float
    early_stopping: bool | str
    max_new_tokens: int
    beams: list[tuple[float, list[int]]] = field(default_factory=list)  # (sum log p, tokens)
    finished: list[tuple[float, list[int]]] = field(default_factory=list)  # (score, tokens), best first
    done: bool = False

    def full(self) -> bool:
        return len(self.finished) >= self.num_beams

    def offer(self, score: float, tokens: list[int]) -> None:
        self.finished.append((score, tokens))
        self.finished.sort(key=lambda h: -h[0])  # stable: earlier entries win ties
        del self.finished[self.num_beams :]

    def update_done(self, cur_len: int) -> None:
        if self.done or not self.full():
            return
        if self.early_stopping is True:
            self.done = True
            return
        if self.early_stopping == "never" and self.length_penalty > 0:
            L = self.max_new_tokens
        else:
            L = cur_len
        best_running = self.beams[0][0] / (L**self.length_penalty)
        if best_running <= self.finished[-1][0]:
            self.done = True


def _decode_beam(
    model,
    prompts,
    max_new_tokens,
    eos_ids,
    *,
    num_beams,
    length_penalty,
    early_stopping,
    num_return_sequences,
    on_token,
):
    nb = num_beams
    batch = _Batch(prompts, nb)
    R = len(batch.rows)
    V = model.config.vocab_size
    n_cand = max(2, 1 + len(eos_ids)) * nb
    cache = model.new_cache(R, batch.width + max_new_tokens)
    states = [_PromptBeams(nb, length_penalty, early_stopping, max_new_tokens) for _ in prompts]
    start_scores = torch.full((len(prompts), nb), -math.inf)
    start_scores[:, 0] = 0.0
    for st in states:
        st.beams = [(0.0 if j == 0 else -math.inf, []) for j in range(nb)]

    start = perf_counter()
    first = None
    with torch.no_grad():
        logits = model.prefill(batch.ids, cache, attention_mask=batch.mask)[:, -1]
        running = start_scores
        for step in range(1, max_new_tokens + 1):
            logp = logits.float().log_softmax(dim=-1).cpu().view(len(prompts), nb, V)
            total = (logp + running[:, :, None]).view(len(prompts), nb * V)
            top_scores, top_idx = total.topk(n_cand, dim=-1)
            last = step == max_new_tokens

            parents, next_tokens, next_running = [], [], []
            for p, st in enumerate(states):
                candidates = []
                for rank in range(n_cand):
                    flat = int(top_idx[p, rank])
                    beam, tok = divmod(flat, V)
                    score = float(top_scores[p, rank])
                    seq = st.beams[beam][1] + [tok]
                    ends = last or tok in eos_ids
                    if ends:
                        if rank < nb and not st.done:
                            st.offer(score / (step**length_penalty), seq)
                    else:
                        candidates.append((beam, tok, score, seq))
                chosen = candidates[:nb]
                if len(chosen) < nb:  # only at the last step: every candidate ended
                    pad = [(0, 0, -math.inf, st.beams[0][1] + [0])] * (nb - len(chosen))
                    chosen = chosen + pad
                st.beams = [(score, seq) for _, _, score, seq in chosen]
                parents.extend(p * nb + beam for beam, _, _, _ in chosen)
                next_tokens.extend(tok for _, tok, _, _ in chosen)
                next_running.append([score for _, _, score, _ in chosen])

            cache.reorder(torch.tensor(parents, dtype=torch.long, device=logits.device))
            if first is None:
                first = perf_counter()
            for st in states:
                st.update_done(step)
            if last or all(st.done for st in states):
                break
            running = torch.tensor(next_running, dtype=torch.float32)
            feed = torch.tensor(next_tokens, dtype=torch.long, device=logits.device)
            logits = model.decode_step(feed, cache, attention_mask=batch.grow().to(logits.device))

    tokens, scores = [], []
    for st in states:
        for score, seq in st.finished[:num_return_sequences]:
            tokens.append(seq)
            scores.append(score)
    if on_token is not None:
        for row, seq in enumerate(tokens):
            for tok in seq:
                on_token(row, tok)
    end = perf_counter()
    return GenerationResult(tokens, scores, first - start, end - first, sum(map(len, tokens)))


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
    """Continue each prompt by up to `max_new_tokens` tokens."""
    _check_args(
        model,
        prompts,
        max_new_tokens=max_new_tokens,
        strategy=strategy,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        num_beams=num_beams,
        early_stopping=early_stopping,
        num_return_sequences=num_return_sequences,
    )
    if eos_token_id is None:
        eos_ids: frozenset[int] = frozenset()
    elif isinstance(eos_token_id, int):
        eos_ids = frozenset([eos_token_id])
    else:
        eos_ids = frozenset(int(e) for e in eos_token_id)

    if strategy == "beam" and num_beams > 1:
        return _decode_beam(
            model,
            prompts,
            max_new_tokens,
            eos_ids,
            num_beams=num_beams,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            num_return_sequences=num_return_sequences,
            on_token=on_token,
        )
    return _decode_simple(
        model,
        prompts,
        max_new_tokens,
        eos_ids,
        sample=strategy == "sample",
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        length_penalty=length_penalty,
        on_token=on_token,
    )
