"""A KV-cache-backed generator: greedy, sampling and beam search.

Left-pads the prompts into one batch, prefills once, then decodes one token per row per step.
Beam search follows HuggingFace transformers (>= 4.50).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class GenerationResult:
    """New tokens, scores and timings of one `generate` call."""

    tokens: list[list[int]]
    scores: list[float]
    prefill_seconds: float  # prompt forward pass up to the first chosen token(s)
    decode_seconds: float  # every later step
    tokens_generated: int  # new tokens across all returned sequences


_NEG = -1.0e9


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


def _eos_list(eos_token_id) -> list[int]:
    if eos_token_id is None:
        return []
    if isinstance(eos_token_id, int):
        return [int(eos_token_id)]
    return [int(e) for e in eos_token_id]


def _validate(
    model,
    prompts,
    max_new_tokens,
    strategy,
    temperature,
    top_k,
    top_p,
    num_beams,
    early_stopping,
    num_return_sequences,
) -> None:
    if strategy not in ("greedy", "sample", "beam"):
        raise ValueError(f"strategy must be 'greedy', 'sample' or 'beam', got {strategy!r}")
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if num_beams > 1 and strategy != "beam":
        raise ValueError(f"num_beams={num_beams} > 1 requires strategy='beam' (got strategy={strategy!r})")
    if not 1 <= num_return_sequences <= num_beams:
        raise ValueError(
            f"num_return_sequences must be in [1, num_beams={num_beams}], got {num_return_sequences}"
        )
    if strategy == "sample" and not temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not (0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if not (
        early_stopping is True
        or early_stopping is False
        or (isinstance(early_stopping, str) and early_stopping == "never")
    ):
        raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompts:
        raise ValueError("prompts must be a non-empty list of token id lists")
    vocab = model.config.vocab_size
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompts[{i}] is empty")
        for t in p:
            if not 0 <= int(t) < vocab:
                raise ValueError(f"prompts[{i}] holds token id {t} outside [0, {vocab})")
    longest = max(len(p) for p in prompts)
    if longest + max_new_tokens > model.config.max_seq_len:
        raise ValueError(
            f"longest prompt ({longest}) + max_new_tokens ({max_new_tokens}) exceeds "
            f"max_seq_len={model.config.max_seq_len}"
        )


# --------------------------------------------------------------------------------------------
# batching helpers
# --------------------------------------------------------------------------------------------


def _left_pad(prompts: list[list[int]], repeat: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(B*repeat, T) ids and bool mask, each prompt repeated `repeat` times consecutively."""
    longest = max(len(p) for p in prompts)
    rows = len(prompts) * repeat
    ids = torch.zeros(rows, longest, dtype=torch.long)
    mask = torch.zeros(rows, longest, dtype=torch.bool)
    for i, p in enumerate(prompts):
        for j in range(repeat):
            r = i * repeat + j
            ids[r, longest - len(p) :] = torch.tensor([int(t) for t in p], dtype=torch.long)
            mask[r, longest - len(p) :] = True
    return ids, mask


def _filter_and_sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, gen: torch.Generator
) -> torch.Tensor:
    x = logits.float() / temperature
    if top_k is not None and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p is not None:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep_sorted = before < top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


# --------------------------------------------------------------------------------------------
# greedy / sampling
# --------------------------------------------------------------------------------------------


def _generate_simple(
    model, prompts, max_new_tokens, eos, sample, temperature, top_k, top_p, seed, length_penalty, on_token
) -> GenerationResult:
    ids, mask = _left_pad(prompts)
    batch, prompt_len = ids.shape
    cache = model.new_cache(batch, prompt_len + max_new_tokens)

    gen = None
    out: list[list[int]] = [[] for _ in range(batch)]
    logp_sum = [0.0] * batch
    done = [False] * batch
    eos_set = set(eos)

    t0 = time.perf_counter()
    with torch.no_grad():
        logits = model.prefill(ids, cache, attention_mask=mask)[:, -1, :]
        if sample:
            gen = torch.Generator(device=logits.device)
            if seed is None:
                gen.seed()
            else:
                gen.manual_seed(int(seed))
        t_first = None
        step = 0
        while True:
            logits = logits.float()
            if sample:
                nxt = _filter_and_sample(logits, temperature, top_k, top_p, gen)
            else:
                nxt = torch.argmax(logits, dim=-1)
            logp = torch.log_softmax(logits, dim=-1).gather(-1, nxt[:, None]).squeeze(-1)
            nxt_list = nxt.tolist()
            logp_list = logp.tolist()
            for r in range(batch):
                if done[r]:
                    continue
                tok = nxt_list[r]
                out[r].append(tok)
                logp_sum[r] += logp_list[r]
                if on_token is not None:
                    on_token(r, tok)
                if tok in eos_set:
                    done[r] = True
            step += 1
            if t_first is None:
                t_first = time.perf_counter()
            if step >= max_new_tokens or all(done):
                break
            feed = torch.tensor([out[r][-1] for r in range(batch)], dtype=torch.long, device=ids.device)
            mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.bool)], dim=1)
            logits = model.decode_step(feed, cache, attention_mask=mask)
    t_end = time.perf_counter()

    scores = [logp_sum[r] / (len(out[r]) ** length_penalty) for r in range(batch)]
    return GenerationResult(
        tokens=out,
        scores=scores,
        prefill_seconds=t_first - t0,
        decode_seconds=t_end - t_first,
        tokens_generated=sum(len(t) for t in out),
    )


# --------------------------------------------------------------------------------------------
# beam search (HF >= 4.50 vectorised semantics)
# --------------------------------------------------------------------------------------------


def _generate_beam(
    model,
    prompts,
    max_new_tokens,
    eos,
    num_beams,
    length_penalty,
    early_stopping,
    num_return_sequences,
    on_token,
) -> GenerationResult:
    n_prompts = len(prompts)
    nb = num_beams
    ids, mask = _left_pad(prompts, repeat=nb)
    rows, prompt_len = ids.shape
    cache = model.new_cache(rows, prompt_len + max_new_tokens)
    vocab = model.config.vocab_size
    width = max(2, 1 + len(eos)) * nb
    eos_t = torch.tensor(eos, dtype=torch.long) if eos else None

    # running beams
    running_scores = torch.full((n_prompts, nb), _NEG, dtype=torch.float32)
    running_scores[:, 0] = 0.0
    running_seqs = torch.zeros(n_prompts, nb, max_new_tokens, dtype=torch.long)
    # finished hypotheses (per prompt, num_beams slots)
    fin_scores = torch.full((n_prompts, nb), _NEG, dtype=torch.float32)
    fin_seqs = torch.zeros(n_prompts, nb, max_new_tokens, dtype=torch.long)
    fin_len = torch.zeros(n_prompts, nb, dtype=torch.long)
    fin_flag = torch.zeros(n_prompts, nb, dtype=torch.bool)
    heuristic_open = torch.ones(n_prompts, 1, dtype=torch.bool)
    top_nb_mask = torch.zeros(width, dtype=torch.bool)
    top_nb_mask[:nb] = True

    t0 = time.perf_counter()
    t_first = None
    with torch.no_grad():
        logits = model.prefill(ids, cache, attention_mask=mask)[:, -1, :]
        for step in range(1, max_new_tokens + 1):
            logp = torch.log_softmax(logits.float(), dim=-1).cpu()  # (rows, V)
            logp = logp.view(n_prompts, nb, vocab) + running_scores[:, :, None]
            flat = logp.view(n_prompts, nb * vocab)
            cand_scores, cand_idx = torch.topk(flat, width, dim=-1)  # (P, width)
            cand_beam = cand_idx // vocab
            cand_tok = cand_idx % vocab
            cand_seqs = torch.gather(
                running_seqs, 1, cand_beam[:, :, None].expand(-1, -1, max_new_tokens)
            ).clone()
            cand_seqs[:, :, step - 1] = cand_tok

            ends = torch.zeros_like(cand_tok, dtype=torch.bool)
            if eos_t is not None:
                ends |= torch.isin(cand_tok, eos_t)
            if step == max_new_tokens:
                ends[:] = True

            # next running beams: best nb candidates that did not end
            run_cand = cand_scores + ends.float() * _NEG
            nxt = torch.topk(run_cand, nb, dim=-1).indices
            new_running_scores = torch.gather(run_cand, 1, nxt)
            new_running_seqs = torch.gather(cand_seqs, 1, nxt[:, :, None].expand(-1, -1, max_new_tokens))
            parent = torch.gather(cand_beam, 1, nxt)

            # finished hypotheses
            just_done = ends & top_nb_mask[None, :]
            hyp = cand_scores / (float(step) ** length_penalty)
            prompt_full = fin_flag.all(dim=-1, keepdim=True) & (early_stopping is True)
            hyp = hyp + prompt_full.float() * _NEG
            hyp = hyp + (~heuristic_open).float() * _NEG
            hyp = hyp + (~just_done).float() * _NEG
            merged_scores = torch.cat([fin_scores, hyp], dim=1)
            merged_seqs = torch.cat([fin_seqs, cand_seqs], dim=1)
            merged_len = torch.cat([fin_len, torch.full_like(cand_tok, step)], dim=1)
            merged_flag = torch.cat([fin_flag, just_done], dim=1)
            keep = torch.topk(merged_scores, nb, dim=-1).indices
            fin_scores = torch.gather(merged_scores, 1, keep)
            fin_seqs = torch.gather(merged_seqs, 1, keep[:, :, None].expand(-1, -1, max_new_tokens))
            fin_len = torch.gather(merged_len, 1, keep)
            fin_flag = torch.gather(merged_flag, 1, keep)

            running_scores, running_seqs = new_running_scores, new_running_seqs
            base = (torch.arange(n_prompts) * nb)[:, None]
            cache.reorder((base + parent).reshape(-1).to(ids.device))

            if t_first is None:
                t_first = time.perf_counter()

            # early-stop heuristic (after this step: L = step new tokens)
            if early_stopping == "never" and length_penalty > 0.0:
                hyp_len = max_new_tokens
            else:
                hyp_len = step
            best_running = running_scores[:, :1] / (float(hyp_len) ** length_penalty)
            worst_fin = torch.where(
                fin_flag, fin_scores.min(dim=1, keepdim=True).values, torch.full_like(fin_scores, _NEG)
            )
            heuristic_open = heuristic_open & (best_running > worst_fin).any(dim=-1, keepdim=True)

            still_improvable = bool(heuristic_open.any())
            open_prompt = not (bool(fin_flag.all()) and early_stopping is True)
            can_continue = not bool(ends.all())
            if not (still_improvable and open_prompt and can_continue) or step == max_new_tokens:
                break

            feed = running_seqs[:, :, step - 1].reshape(-1).to(ids.device)
            mask = torch.cat([mask, torch.ones(rows, 1, dtype=torch.bool)], dim=1)
            logits = model.decode_step(feed, cache, attention_mask=mask)

    tokens: list[list[int]] = []
    scores: list[float] = []
    for i in range(n_prompts):
        for j in range(num_return_sequences):
            n = int(fin_len[i, j])
            tokens.append(fin_seqs[i, j, :n].tolist())
            scores.append(float(fin_scores[i, j]))
    if on_token is not None:
        for r, seq in enumerate(tokens):
            for tok in seq:
                on_token(r, tok)
    t_end = time.perf_counter()
    return GenerationResult(
        tokens=tokens,
        scores=scores,
        prefill_seconds=t_first - t0,
        decode_seconds=t_end - t_first,
        tokens_generated=sum(len(t) for t in tokens),
    )


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


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
    _validate(
        model,
        prompts,
        max_new_tokens,
        strategy,
        temperature,
        top_k,
        top_p,
        num_beams,
        early_stopping,
        num_return_sequences,
    )
    eos = _eos_list(eos_token_id)
    if strategy == "beam" and num_beams > 1:
        return _generate_beam(
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
    return _generate_simple(
        model,
        prompts,
        max_new_tokens,
        eos,
        strategy == "sample",
        temperature,
        top_k,
        top_p,
        seed,
        length_penalty,
        on_token,
    )
