"""The row groups of `make bench`: each runs one benchmark module and turns its results into Rows.

The measuring lives in the benchmark modules (bpe_bench, decode_bench, int4_bench,
generate_bench); here are only the sizes (full or --quick), the goals from the issues, and the
conversion to Rows, whose ratio always reads "> 1: ours is better". Two groups are measured here:
grading latency (`dojo check` on the reference, a subprocess per kata) and llama.cpp (only with
--peers, when llama-cpp-python imports). SmolLM2 and HF's copy load once, in `Context.models`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.harness import Goal, Row, medians

# (full, quick) sizes; full sizes keep the whole of `make bench` under 10 minutes on 2 cores.
SIZES = {
    "decode": ({"tokens": 32, "repeats": 3, "prefill": 512}, {"tokens": 8, "repeats": 1, "prefill": 128}),
    "int4": ({"tokens": 8, "repeats": 3}, {"tokens": 4, "repeats": 1}),
    "generate": ({"tokens": 16, "repeats": 3, "recompute_tokens": 256}, {"tokens": 4, "repeats": 1, "recompute_tokens": 16}),
    "llama_cpp": ({"tokens": 32, "repeats": 5}, {"tokens": 8, "repeats": 1}),
}
GRADING_GOAL_S = 10.0  # a kata suite runs in under 10 s on 2 cores (DESIGN.md)
SANDBOX_GOAL_S = 1.5  # sandboxed grading of the reference costs at most this much more (issue 17)


@dataclass
class Context:
    quick: bool
    threads: int
    shared: dict = field(default_factory=dict)  # figures one group hands to a later one

    def size(self, group: str) -> dict:
        return SIZES[group][1 if self.quick else 0]

    def models(self):
        """(ours, hf): SmolLM2 fp32 from the GGUF, ours and HuggingFace transformers', loaded once."""
        if "models" not in self.shared:
            from benchmarks.decode_bench import load_models

            self.shared["models"] = load_models()
        return self.shared["models"]


def bpe(ctx: Context) -> list[Row]:
    from benchmarks import bpe_bench

    rows = []
    for r in bpe_bench.rows(ctx.quick):
        timed = "seconds" in r
        rows.append(Row("bpe", r["name"], r["seconds"] if timed else r["mb_per_s"], "s" if timed else "MB/s",
                        r["peer"], r["peer_seconds"] if timed else r["peer_mb_per_s"], r["ratio"], r["goal"], r["ok"]))
    return rows


def decode(ctx: Context) -> list[Row]:
    from benchmarks import decode_bench

    size = ctx.size("decode")
    r = decode_bench.bench(**size, models=ctx.models())
    ctx.shared["decode"] = r
    ours, hf = r["engines"]["ours"], r["engines"]["hf"]
    ceiling = f"copy {r['copy_GB_s']:.1f} GB/s, {r['bytes_per_token'] / 1e6:.0f} MB/token"
    return [
        Row("decode", f"SmolLM2 decode tok/s, batch 1, fp32 ({size['tokens']} tokens)", ours["decode_tok_s"],
            "tok/s", "transformers fp32", hf["decode_tok_s"], r["decode_speedup"], Goal(">=", 2.5)),
        Row("decode", f"decode share of bandwidth ceiling ({ceiling})", ours["ceiling_share"], "%",
            "transformers fp32", hf["ceiling_share"], ours["ceiling_share"] / hf["ceiling_share"],
            Goal(">=", 0.6, on="ours", unit="%")),
        Row("decode", f"prefill tok/s, {size['prefill']}-token prompt", ours["prefill_tok_s"], "tok/s",
            "transformers fp32", hf["prefill_tok_s"], r["prefill_speedup"]),
    ]


def int4(ctx: Context) -> list[Row]:
    from benchmarks import int4_bench

    ours, _ = ctx.models()
    rows = []
    for r in int4_bench.bench(**ctx.size("int4"), fp32_model=ours):
        note = f"max |logit diff| {r['max_logit_diff']:.3f}" if "max_logit_diff" in r else ""
        rows.append(Row("int4", r["name"], r["ours"], r["unit"], "fp32" if r["unit"] == "B" else "ours fp32",
                        r["peer"], r["ratio"], r["goal"], note=note))
    return rows


def generate(ctx: Context) -> list[Row]:
    from benchmarks import generate_bench

    size = ctx.size("generate")
    ours, hf = ctx.models()
    (step,) = generate_bench.beam_step_cost(ours, hf, size["tokens"], size["repeats"])
    (beam,) = generate_bench.beam_search_vs_hf(ours, hf, size["tokens"], size["repeats"])
    (cache,) = generate_bench.kv_cache_speedup(ours, size["recompute_tokens"])
    return [
        # a cost (beam step / greedy step): lower is better, so the ratio is HF's over ours
        Row("generate", step["metric"], step["ours"], "x", "transformers", step["peer"], step["peer"] / step["ours"],
            Goal("<=", 1.3, on="ours")),
        Row("generate", "the step's matrix products alone, 4 rows / 1 row (F.linear, fp32)",
            step["matmuls_4"] / step["matmuls_1"], "x",
            note=f"{step['matmuls_4'] * 1e3:.1f} vs {step['matmuls_1'] * 1e3:.1f} ms: the beam step can't go below "
                 f"{step['floor']:.2f}x, were all else as cheap for 4 rows as for 1"),
        Row("generate", beam["metric"], beam["ours"], "s", "transformers generate", beam["peer"], beam["ratio"],
            Goal(">", 1)),
        Row("generate", cache["metric"], cache["ours"], "s", "recompute every step", cache["peer"], cache["ratio"],
            Goal(">", 1)),
    ]


def grading(ctx: Context) -> list[Row]:
    """Wall time of `dojo check <slug>` on the reference: dojo.grade.grade in a temporary workspace;
    then the same grading sandboxed (as `dojo grade` runs it), right after, and the extra seconds.
    --quick grades the README examples only."""
    from dojo import catalog
    from dojo.grade import grade

    rows = []
    with tempfile.TemporaryDirectory(prefix="dojo-bench-") as tmp:
        saved = os.environ.get("DOJO_WORKSPACE")
        os.environ["DOJO_WORKSPACE"] = tmp
        try:
            for kata in catalog.load():
                if not kata.has_suite:
                    continue
                result = grade(kata.slug, "solutions", examples_only=ctx.quick)
                note = "" if result.passed else f"did not pass: {result.error or 'a test failed'}"
                rows.append(Row("grading", f"dojo check {kata.slug} (reference, {len(result.tests)} tests)",
                                result.duration, "s", goal=Goal("<=", GRADING_GOAL_S, on="ours", unit=" s"),
                                note=note))
                boxed = grade(kata.slug, "solutions", examples_only=ctx.quick, sandboxed=True)
                why = "" if boxed.sandboxed else next((n for n in boxed.notes if n.startswith("NOT")), "not sandboxed")
                rows.append(Row("grading", f"dojo grade {kata.slug}, sandboxed: extra seconds over dojo check",
                                boxed.duration - result.duration, "s", "dojo check", result.duration,
                                goal=Goal("<=", SANDBOX_GOAL_S, on="ours", unit=" s"), note=why))
        finally:
            if saved is None:
                os.environ.pop("DOJO_WORKSPACE", None)
            else:
                os.environ["DOJO_WORKSPACE"] = saved
    return rows


def llama_cpp_timer(llm, prompt: list[int], n: int) -> Callable[[], float]:
    """Seconds for n greedy decode steps of llama.cpp after the prompt (first token to the n+1-th)."""

    def run() -> float:
        stream = llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True)
        next(stream)  # the prompt's forward and the first token
        start = time.perf_counter()
        for _ in range(n):
            next(stream)
        elapsed = time.perf_counter() - start
        stream.close()
        return elapsed

    return run


def llama_cpp(ctx: Context) -> list[Row]:
    """Our fp32 decode against llama.cpp on the GGUF itself (Q4_1), interleaved, same thread count."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return [Row("llama_cpp", "SmolLM2 decode tok/s, batch 1", None, "tok/s", "llama.cpp Q4_1",
                    note="llama-cpp-python is not installed: `make bench-peers` installs it")]
    from benchmarks.decode_bench import PROMPT, bytes_per_token, copy_bandwidth, ours_decode
    from solutions.weights import find_gguf, open_gguf

    size = ctx.size("llama_cpp")
    path = find_gguf()
    llm = Llama(model_path=str(path), n_ctx=512, n_threads=ctx.threads, n_threads_batch=ctx.threads, verbose=False)
    ours, _ = ctx.models()
    t = medians({"ours": ours_decode(ours, size["tokens"]), "llama.cpp": llama_cpp_timer(llm, PROMPT, size["tokens"])},
                size["repeats"])
    tok_s = {name: size["tokens"] / seconds for name, seconds in t.items()}
    bandwidth = ctx.shared.get("decode", {}).get("copy_GB_s", 0) * 1e9 or copy_bandwidth()
    gguf_bytes = sum(int(tensor.n_bytes) for tensor in open_gguf(path).tensors)
    share = {"ours": tok_s["ours"] * bytes_per_token(ours) / bandwidth, "llama.cpp": tok_s["llama.cpp"] * gguf_bytes / bandwidth}
    return [
        Row("llama_cpp", f"SmolLM2 decode tok/s, batch 1 (ours fp32, {size['tokens']} tokens)", tok_s["ours"], "tok/s",
            "llama.cpp Q4_1", tok_s["llama.cpp"], tok_s["ours"] / tok_s["llama.cpp"]),
        Row("llama_cpp", f"decode share of bandwidth ceiling (llama.cpp reads {gguf_bytes / 1e6:.0f} MB/token)",
            share["ours"], "%", "llama.cpp Q4_1", share["llama.cpp"], share["ours"] / share["llama.cpp"]),
    ]


GROUPS: dict[str, Callable[[Context], list[Row]]] = {
    "bpe": bpe, "grading": grading, "decode": decode, "int4": int4, "generate": generate, "llama_cpp": llama_cpp,
}
PEER_ONLY = ("llama_cpp",)
