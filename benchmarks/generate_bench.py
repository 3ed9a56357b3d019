"""The generator on SmolLM2: beam-step cost, beam search against HuggingFace, KV cache against recompute.

A 4-beam step against a greedy one (goal: at most 1.5x), beside the step's matrix products alone at
4 rows and 1; beam search end to end against HF `generate`; greedy with the KV cache against
recomputing the whole sequence every step (the same tokens, checked). Engines run interleaved after
a warm-up, medians reported; each function returns rows for `make bench`.

    python -m benchmarks.generate_bench [--tokens 16] [--repeats 3] [--recompute-tokens 256] [--threads N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator

import torch

from benchmarks.decode_bench import PROMPT, interleaved, load_models
from benchmarks.modes_bench import products_timer
from solutions.generate import generate


def ours_timer(model, n: int, num_beams: int) -> Callable[[], float]:
    """Seconds for our generate() to produce n tokens per beam (no EOS, so every step runs)."""
    kwargs = dict(strategy="beam", num_beams=num_beams) if num_beams > 1 else {}

    def run() -> float:
        start = time.perf_counter()
        generate(model, [PROMPT], max_new_tokens=n, **kwargs)
        return time.perf_counter() - start

    return run


def hf_generate(hf, n: int, num_beams: int, **kwargs) -> None:
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            min_new_tokens=n,
            num_beams=num_beams,
            do_sample=False,
            pad_token_id=2,
            temperature=None,
            top_p=None,
            top_k=None,
            **kwargs,
        )


def hf_timer(hf, n: int, num_beams: int) -> Callable[[], float]:
    """Seconds for HF generate() to produce exactly n tokens per beam on the same prompt."""

    def run() -> float:
        start = time.perf_counter()
        hf_generate(hf, n, num_beams)
        return time.perf_counter() - start

    return run


def ours_step(model, n: int, num_beams: int) -> Callable[[], float]:
    """Seconds per decode step of our generate(): its decode time over the n - 1 steps after prefill."""
    kwargs = dict(strategy="beam", num_beams=num_beams) if num_beams > 1 else {}
    return lambda: generate(model, [PROMPT], max_new_tokens=n, **kwargs).decode_seconds / (n - 1)


def hf_step(hf, n: int, num_beams: int) -> Callable[[], float]:
    """Seconds per decode step of HF generate(), clocked by a stopping criterion HF calls once per step."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Clock(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            times.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def run() -> float:
        times.clear()
        hf_generate(hf, n, num_beams, stopping_criteria=StoppingCriteriaList([Clock()]))
        return (times[-1] - times[0]) / (len(times) - 1)

    times: list[float] = []
    return run


def beam_step_cost(ours, hf, tokens: int = 16, repeats: int = 3) -> list[dict]:
    """One 4-beam step over one greedy step, ours and HF's; goal <= 1.5 for ours.

    Also the step's matrix products alone at 4 rows and at 1 (the model's own products): the
    step can't cost less than `floor`, its ratio were everything else as cheap for 4 rows as for 1.
    """
    t = interleaved(
        {
            "ours 1": ours_step(ours, tokens, 1),
            "ours 4": ours_step(ours, tokens, 4),
            "hf 1": hf_step(hf, tokens, 1),
            "hf 4": hf_step(hf, tokens, 4),
            "matmuls 1": products_timer(ours, 1),
            "matmuls 4": products_timer(ours, 4),
        },
        repeats,
    )
    mine, theirs = t["ours 4"] / t["ours 1"], t["hf 4"] / t["hf 1"]
    floor = (t["ours 1"] + t["matmuls 4"] - t["matmuls 1"]) / t["ours 1"]
    return [
        dict(
            metric="beam step (4 beams) / greedy step",
            ours=mine,
            peer=theirs,
            peer_name="transformers",
            ratio=mine / theirs,
            goal="ours <= 1.5",
            unit="x",
            matmuls_1=t["matmuls 1"],
            matmuls_4=t["matmuls 4"],
            floor=floor,
        )
    ]


def beam_search_vs_hf(ours, hf, tokens: int = 16, repeats: int = 3) -> list[dict]:
    """Beam search (4 beams, `tokens` new tokens) end to end, seconds; goal: faster than HF."""
    t = interleaved({"ours": ours_timer(ours, tokens, 4), "hf": hf_timer(hf, tokens, 4)}, repeats)
    return [
        dict(
            metric=f"beam search, 4 beams, {tokens} tokens",
            ours=t["ours"],
            peer=t["hf"],
            peer_name="transformers",
            ratio=t["hf"] / t["ours"],
            goal="speed-up > 1",
            unit="s",
        )
    ]


@torch.inference_mode()
def recompute_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Greedy without a cache: the whole sequence through `model.forward` for every new token."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(model.forward(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(prompt) :]


def kv_cache_speedup(ours, tokens: int = 256) -> list[dict]:
    """Greedy with the KV cache against recompute, `tokens` new tokens, one run each (recompute is slow)."""
    start = time.perf_counter()
    cached = generate(ours, [PROMPT], max_new_tokens=tokens).tokens[0]
    t_cache = time.perf_counter() - start
    start = time.perf_counter()
    recomputed = recompute_greedy(ours, PROMPT, tokens)
    t_recompute = time.perf_counter() - start
    if cached != recomputed:
        raise AssertionError(f"cached and recomputed greedy tokens differ: {cached} vs {recomputed}")
    return [
        dict(
            metric=f"greedy {tokens} tokens: KV cache vs recompute",
            ours=t_cache,
            peer=t_recompute,
            peer_name="recompute",
            ratio=t_recompute / t_cache,
            goal="speed-up > 1",
            unit="s",
        )
    ]


def bench(tokens: int = 16, repeats: int = 3, recompute_tokens: int = 256) -> Iterator[dict]:
    """Every row of this file, each yielded as soon as it is measured."""
    ours, hf = load_models()
    yield from beam_step_cost(ours, hf, tokens, repeats)
    yield from beam_search_vs_hf(ours, hf, tokens, repeats)
    yield from kv_cache_speedup(ours, recompute_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recompute-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{'metric':<46}{'ours':>10}{'peer':>10}  {'peer name':<14}{'ratio':>8}  goal")
    for row in bench(args.tokens, args.repeats, args.recompute_tokens):
        print(
            f"{row['metric']:<46}{row['ours']:>10.3f}{row['peer']:>10.3f}  {row['peer_name']:<14}"
            f"{row['ratio']:>8.2f}  {row['goal']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
