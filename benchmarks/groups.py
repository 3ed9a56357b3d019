"""The row groups of `make bench`: each runs one benchmark module and turns its results into Rows.

The measuring lives in the benchmark modules (bpe_bench, decode_bench, int4_bench,
generate_bench, speculative_bench); here are only the sizes (full or --quick), the goals from the issues, and the
conversion to Rows, whose ratio always reads "> 1: ours is better". Two groups are measured here:
grading latency (`dojo check` on the reference, a subprocess per kata) and llama.cpp (only with
--peers, when llama-cpp-python imports). SmolLM2 and HF's copy load once, in `Context.models`;
the other weights modes once, in `Context.modes`.
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
    "modes": ({"tokens": 32, "repeats": 3, "answer": 24}, {"tokens": 4, "repeats": 1, "answer": 4}),
    "generate": (
        {"tokens": 16, "repeats": 3, "recompute_tokens": 256},
        {"tokens": 4, "repeats": 1, "recompute_tokens": 16},
    ),
    "speculative": ({"tokens": 32, "repeats": 3, "k": 4}, {"tokens": 8, "repeats": 1, "k": 4}),
    "llama_cpp": ({"tokens": 32, "repeats": 5}, {"tokens": 8, "repeats": 1}),
    "prefix": ({"tokens": 1500, "rounds": 3}, {"tokens": 300, "rounds": 1}),
}
GRADING_GOAL_S = 10.0  # a kata suite runs in under 10 s on 2 cores (DESIGN.md)
SANDBOX_GOAL_S = 1.5  # sandboxed grading of the reference costs at most this much more
JUDGE_GOAL_S = 2.0  # judge mode costs at most this much more than the sandboxed in-process grading


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

    def modes(self):
        """({mode: model}, tokenizer): every weights mode of ours, the fp32 one shared with models()."""
        if "modes" not in self.shared:
            from benchmarks.modes_bench import load_modes

            self.shared["modes"] = load_modes(self.models()[0])
        return self.shared["modes"]


def bpe(ctx: Context) -> list[Row]:
    from benchmarks import bpe_bench

    rows = []
    for r in bpe_bench.rows(ctx.quick):
        timed = "seconds" in r
        rows.append(
            Row(
                "bpe",
                r["name"],
                r["seconds"] if timed else r["mb_per_s"],
                "s" if timed else "MB/s",
                r["peer"],
                r["peer_seconds"] if timed else r["peer_mb_per_s"],
                r["ratio"],
                r["goal"],
                r["ok"],
            )
        )
    return rows


def decode(ctx: Context) -> list[Row]:
    from benchmarks import decode_bench

    size = ctx.size("decode")
    r = decode_bench.bench(**size, models=ctx.models())
    ctx.shared["decode"] = r
    ours, hf = r["engines"]["ours"], r["engines"]["hf"]
    ceiling = f"copy {r['copy_GB_s']:.1f} GB/s, {r['bytes_per_token'] / 1e6:.0f} MB/token"
    return [
        Row(
            "decode",
            f"SmolLM2 decode tok/s, batch 1, fp32 ({size['tokens']} tokens)",
            ours["decode_tok_s"],
            "tok/s",
            "transformers fp32",
            hf["decode_tok_s"],
            r["decode_speedup"],
        ),
        Row(
            "decode",
            f"decode share of bandwidth ceiling ({ceiling})",
            ours["ceiling_share"],
            "%",
            "transformers fp32",
            hf["ceiling_share"],
            ours["ceiling_share"] / hf["ceiling_share"],
            Goal(">=", 0.7, on="ours", unit="%"),
        ),
        Row(
            "decode",
            f"prefill tok/s, {size['prefill']}-token prompt",
            ours["prefill_tok_s"],
            "tok/s",
            "transformers fp32",
            hf["prefill_tok_s"],
            r["prefill_speedup"],
        ),
    ]


def int4(ctx: Context) -> list[Row]:
    from benchmarks import int4_bench

    ours, _ = ctx.models()
    rows = []
    for r in int4_bench.bench(**ctx.size("int4"), fp32_model=ours):
        note = f"max |logit diff| {r['max_logit_diff']:.3f}" if "max_logit_diff" in r else ""
        rows.append(
            Row(
                "int4",
                r["name"],
                r["ours"],
                r["unit"],
                "fp32" if r["unit"] == "B" else "ours fp32",
                r["peer"],
                r["ratio"],
                r["goal"],
                note=note,
            )
        )
    return rows


def modes(ctx: Context) -> list[Row]:
    """Each weights mode against fp32: agreement, decode speed, where the step's time goes."""
    from benchmarks import modes_bench
    from solutions.system.kernels.weight_modes import describe_mode

    size = ctx.size("modes")
    models, tokenizer = ctx.modes()
    chats = modes_bench.CHATS[:2] if ctx.quick else modes_bench.CHATS
    agree = modes_bench.agreement(models, tokenizer, size["answer"], chats)
    speed = modes_bench.speeds(models, size["tokens"], size["repeats"])
    ctx.shared["mode_speeds"] = speed
    bandwidth = ctx.shared.get("decode", {}).get("copy_GB_s", 0) * 1e9 or _bandwidth()
    rows = []
    for mode, r in agree.items():
        rows.append(
            Row(
                "modes",
                f"{mode} vs fp32 over {len(chats)} "
                f"chats: greedy tokens agreeing (teacher-forced, {r['positions']} tokens)",
                r["agree"],
                "%",
                note=f"max |logit diff| {r['max_logit_diff']:.3f}, {r['top_diff']:.3f} over the mode's "
                f"top 16 a position; free-running, tokens equal to fp32's per chat before the first "
                f"that differs: {r['free']} of {size['answer']}; {describe_mode(mode)}",
            )
        )
    for mode, r in speed.items():
        rest = r["step_s"] - r["products_s"]
        share = f"{r['tok_s'] * r['bytes'] / bandwidth:.0%} of the copy-bandwidth ceiling"
        if getattr(models[mode], "fused_step", None) is not None:  # no dispatch to split off: one native call
            note = (
                f"step {r['step_s'] * 1e3:.1f} ms, one fused native call; its products called one by one "
                f"from Python {r['products_s'] * 1e3:.1f} ms; {share}"
            )
        else:
            note = (
                f"step {r['step_s'] * 1e3:.1f} ms = matrix products {r['products_s'] * 1e3:.1f} ms + the rest "
                f"{rest * 1e3:.1f} ms ({rest / len(models['fp32'].layers) * 1e6:.0f} us a layer: norms, RoPE, "
                f"attention, cache, dispatch); {share}"
            )
        rows.append(
            Row(
                "modes",
                f"SmolLM2 decode tok/s, batch 1, {mode} ({r['bytes'] / 1e6:.0f} MB/token)",
                r["tok_s"],
                "tok/s",
                "ours fp32",
                speed["fp32"]["tok_s"],
                r["tok_s"] / speed["fp32"]["tok_s"],
                note=note,
            )
        )
    return rows


def startup(ctx: Context) -> list[Row]:
    """`dojo demo --max-new-tokens 1 "Hi"` cold (fresh workspace) and warm, per mode; peak RSS above
    `import torch`'s floor against the weights held (the goal: at most 1.5x)."""
    from benchmarks import modes_bench
    from solutions.system.kernels.weight_modes import MODES, default_mode, resident_bytes

    models, _ = ctx.modes()
    rows, floor = [], modes_bench.torch_rss()
    for mode in [default_mode()] if ctx.quick else MODES:
        r = modes_bench.startup(mode, ctx.threads)
        held = resident_bytes(models[mode])
        rows += [
            Row(
                "startup",
                f'dojo demo --weights {mode} --max-new-tokens 1 "Hi", warm (cache built; median of '
                f"{modes_bench.WARM_RUNS})",
                r["warm_s"],
                "s",
                note=f"of which `import torch` {r['torch_s']:.2f} s (a Python that imports it and exits, "
                f"interleaved), not counted: the goal is on the demo's own part, the next row",
            ),
            Row(
                "startup",
                f"dojo demo --weights {mode}'s own part of that warm start-up, above `import torch`",
                r["warm_s"] - r["torch_s"],
                "s",
                goal=Goal("<=", 0.5, on="ours", unit=" s") if mode == default_mode() else None,
                note=f"{r['warm_s']:.2f} s warm minus {r['torch_s']:.2f} s for `import torch` alone, measured "
                "interleaved",
            ),
            Row(
                "startup",
                f'dojo demo --weights {mode} --max-new-tokens 1 "Hi", first run (builds the cache)',
                r["cold_s"],
                "s",
                goal=Goal("<=", 6.0, on="ours", unit=" s") if mode == default_mode() else None,
                note=r["calibration"],
            ),
            Row(
                "startup",
                f"peak RSS of dojo demo --weights {mode} above `import torch`'s own, warm / weights "
                f"held ({held / 1e6:.0f} MB)",
                (r["warm_rss"] - floor) / held,
                "x",
                goal=Goal("<=", 1.5, on="ours"),
                note=f"warm {r['warm_rss'] / 1e6:.0f} MB, first run {r['cold_rss'] / 1e6:.0f} MB; `import torch` "
                f"alone {floor / 1e6:.0f} MB; all of it over the weights, {r['warm_rss'] / held:.2f}x",
            ),
        ]
    return rows


def _bandwidth() -> float:
    from benchmarks.decode_bench import copy_bandwidth

    return copy_bandwidth()


def generate(ctx: Context) -> list[Row]:
    from benchmarks import generate_bench

    size = ctx.size("generate")
    ours, hf = ctx.models()
    (step,) = generate_bench.beam_step_cost(ours, hf, size["tokens"], size["repeats"])
    (beam,) = generate_bench.beam_search_vs_hf(ours, hf, size["tokens"], size["repeats"])
    (cache,) = generate_bench.kv_cache_speedup(ours, size["recompute_tokens"])
    return [
        # a cost (beam step / greedy step): lower is better, so the ratio is HF's over ours
        Row(
            "generate",
            step["metric"],
            step["ours"],
            "x",
            "transformers",
            step["peer"],
            step["peer"] / step["ours"],
            Goal("<=", 1.5, on="ours"),
        ),
        Row(
            "generate",
            "the step's matrix products alone, 4 rows / 1 row (fp32, the product the step itself runs)",
            step["matmuls_4"] / step["matmuls_1"],
            "x",
            note=f"{step['matmuls_4'] * 1e3:.1f} vs {step['matmuls_1'] * 1e3:.1f} ms: the beam step can't go below "
            f"{step['floor']:.2f}x, were all else as cheap for 4 rows as for 1",
        ),
        Row(
            "generate",
            beam["metric"],
            beam["ours"],
            "s",
            "transformers generate",
            beam["peer"],
            beam["ratio"],
            Goal(">", 1),
        ),
        Row(
            "generate",
            cache["metric"],
            cache["ours"],
            "s",
            "recompute every step",
            cache["peer"],
            cache["ratio"],
            Goal(">", 1),
        ),
    ]


def prefix(ctx: Context) -> list[Row]:
    """The serving engine's prefix cache: TTFT of a request repeating a long system prompt vs the first."""
    from benchmarks import prefix_bench
    from solutions.system.kernels.weight_modes import default_mode

    size = ctx.size("prefix")
    models, tokenizer = ctx.modes()
    mode = default_mode() if default_mode() in models else "fp32"
    r = prefix_bench.prefix_ttft(models[mode], tokenizer, tokens=size["tokens"], rounds=size["rounds"])
    return [
        Row(
            "prefix",
            f"serving TTFT, a second request repeating a {r['prompt']}-token prompt's system part / the first "
            f"({mode} weights, one request at a time)",
            r["ratio"],
            "x",
            goal=Goal("<=", 0.5, on="ours"),
            note=f"median of {r['rounds']} rounds: {r['warm']:.2f} s vs {r['cold']:.2f} s; "
            f"{r['cached']} prompt tokens cached",
        )
    ]


def speculative(ctx: Context) -> list[Row]:
    """fp32 verifying `dojo demo`'s draft (weight_modes.draft_mode) against plain fp32: tok/s, alpha and the
    draft acceptance rate, exactness."""
    from benchmarks import speculative_bench
    from solutions.system.kernels.weight_modes import draft_mode

    size = ctx.size("speculative")
    models, tokenizer = ctx.modes()
    draft = draft_mode()
    chats = speculative_bench.CHATS[:2] if ctx.quick else speculative_bench.CHATS
    r = speculative_bench.bench(
        models["fp32"],
        models[draft],
        tokenizer,
        tokens=size["tokens"],
        repeats=size["repeats"],
        k=size["k"],
        chats=chats,
    )
    what = f"SmolLM2 greedy chat answers tok/s, fp32 verifying {draft}'s drafts (k={size['k']}), {r['tokens']} tokens"
    return [
        Row(
            "speculative",
            what,
            r["spec_tok_s"],
            "tok/s",
            "plain fp32",
            r["plain_tok_s"],
            r["spec_tok_s"] / r["plain_tok_s"],
            Goal(">", 1),
            note=f"Leviathan's model predicts {r['predicted']:.2f}x from alpha {r['alpha']:.2f} (accepted / "
            f"(accepted + rejected)) and c {r['c']:.2f} ({draft} step / fp32 step); {r['passes']} fp32 passes",
        ),
        Row(
            "speculative",
            f"{draft} drafts accepted by fp32 (greedy; draft acceptance rate: accepted / drafted)",
            r["acceptance"],
            "%",
            goal="tokens identical to plain fp32's",
            met=r["identical"],
            note=f"speculative tokens identical to plain fp32's: {'yes' if r['identical'] else 'NO'}",
        ),
    ]


def grading(ctx: Context) -> list[Row]:
    """Wall time of `dojo check <slug>` on the reference: dojo.grading.grade.grade in a temporary workspace;
    then the same grading sandboxed in-process, then in judge mode (as `dojo grade` runs it, secret-seeded
    inputs), then judge mode on the suite's public inputs, each right after the other: the extra seconds of
    each over the one before, and the secret inputs' cost as a ratio.
    --quick grades the README examples only."""
    from dojo import catalog
    from dojo.grading.grade import grade

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
                rows.append(
                    Row(
                        "grading",
                        f"dojo check {kata.slug} (reference, {len(result.tests)} tests)",
                        result.duration,
                        "s",
                        goal=Goal("<=", GRADING_GOAL_S, on="ours", unit=" s"),
                        note=note,
                    )
                )
                boxed = grade(kata.slug, "solutions", examples_only=ctx.quick, sandboxed=True, judged=False)
                why = (
                    ""
                    if boxed.sandboxed
                    else next((n for n in boxed.notes if n.startswith("NOT")), "not sandboxed")
                )
                rows.append(
                    Row(
                        "grading",
                        f"dojo grade {kata.slug}, sandboxed in-process: extra seconds over dojo check",
                        boxed.duration - result.duration,
                        "s",
                        "dojo check",
                        result.duration,
                        goal=Goal("<=", SANDBOX_GOAL_S, on="ours", unit=" s"),
                        note=why,
                    )
                )
                judged = grade(kata.slug, "solutions", examples_only=ctx.quick, sandboxed=True)
                apart = judged.candidate_points[1]
                note = "" if judged.passed else f"did not pass: {judged.error or 'a test failed'}"
                note += (
                    f"; {apart} of {judged.total} points measured in the candidate's process" if apart else ""
                )
                rows.append(
                    Row(
                        "grading",
                        f"dojo grade {kata.slug}, judge mode: extra seconds over sandboxed in-process",
                        judged.duration - boxed.duration,
                        "s",
                        "sandboxed in-process",
                        boxed.duration,
                        goal=Goal("<=", JUDGE_GOAL_S, on="ours", unit=" s"),
                        note=note.lstrip("; "),
                    )
                )
                public = grade(
                    kata.slug, "solutions", examples_only=ctx.quick, sandboxed=True, public_inputs=True
                )
                rows.append(
                    Row(
                        "grading",
                        f"dojo grade {kata.slug}, judge mode: extra seconds of secret inputs over public ones",
                        judged.duration - public.duration,
                        "s",
                        "public inputs",
                        public.duration,
                        note=""
                        if public.passed
                        else f"public inputs did not pass: {public.error or 'a test failed'}",
                    )
                )
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


FLOOR = "int4-q8x2 on the AVX2 floor"  # the llama_cpp group's row for the fused step forced onto plain AVX2


def _avx2_floor(model):
    """A shallow copy of an int4-q8x2 model whose batch-1 steps run the kernel's AVX2 code (the floor a
    CPU without VNNI takes), or None where the fused step or AVX2 is missing or AVX2 is already the choice."""
    import copy

    from solutions.system.kernels import native
    from solutions.system.kernels.fused_step import FusedStep

    kernel = native.kernel()
    if model.fused_step is None or kernel is None or kernel.isa == "avx2" or "avx2" not in kernel.isas:
        return None
    floor = copy.copy(model)  # shares every weight; only the step differs
    floor.fused_step = FusedStep.for_model(model, isa="avx2")
    return floor


def llama_cpp(ctx: Context) -> list[Row]:
    """Our fastest mode and fp32 against llama.cpp on the GGUF itself (Q4_1), interleaved, same threads."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return [
            Row(
                "llama_cpp",
                "SmolLM2 decode tok/s, batch 1",
                None,
                "tok/s",
                "llama.cpp Q4_1",
                note="llama-cpp-python is not installed: `make bench-peers` installs it",
            )
        ]
    from benchmarks.decode_bench import PROMPT, ours_decode
    from benchmarks.modes_bench import CHATS, fp32_answers, llama_cpp_agreement
    from solutions.system.kernels.weight_modes import default_mode, weight_bytes
    from solutions.system.loading.weights import find_gguf, open_gguf

    size = ctx.size("llama_cpp")
    path = find_gguf()
    # n_batch=1: llama-cpp-python 0.3.36 built with GGML_NATIVE (AMX) crashed evaluating a
    # multi-token batch of this file; one token at a time only slows its prompt, which is not timed
    llm = Llama(
        model_path=str(path),
        n_ctx=512,
        n_batch=1,
        n_threads=ctx.threads,
        n_threads_batch=ctx.threads,
        verbose=False,
    )
    models, tokenizer = ctx.modes()
    fast = default_mode()
    ours = list(dict.fromkeys([fast, "int4", "int4-q8", "int4-q8x2", "fp32"]))  # the default first, each once
    engines = {m: ours_decode(models[m], size["tokens"]) for m in ours} | {
        "llama.cpp": llama_cpp_timer(llm, PROMPT, size["tokens"])
    }
    floor = _avx2_floor(
        models["int4-q8x2"]
    )  # the fused step as a CPU without VNNI runs it, where this one has VNNI
    if floor is not None:
        engines[FLOOR] = ours_decode(floor, size["tokens"])
        ours.append(FLOOR)
    tok_s = {name: size["tokens"] / seconds for name, seconds in medians(engines, size["repeats"]).items()}
    bandwidth = ctx.shared.get("decode", {}).get("copy_GB_s", 0) * 1e9 or _bandwidth()
    gguf_bytes = sum(int(tensor.n_bytes) for tensor in open_gguf(path).tensors)
    held = {m: models[m] for m in ours if m in models} | {FLOOR: models["int4-q8x2"]}
    share = {m: tok_s[m] * weight_bytes(held[m]) / bandwidth for m in ours}
    rows = []
    for m in ours:
        what = f"ours {m}" + (", the default" if m == fast else "")
        goal = Goal(">=", 1.0) if m == "int4-q8x2" else Goal(">=", 0.9) if m == fast else None
        note = f"bandwidth ceiling share: ours {share[m]:.0%}" + (
            f", llama.cpp {tok_s['llama.cpp'] * gguf_bytes / bandwidth:.0%} ({gguf_bytes / 1e6:.0f} MB/token)"
            if m == fast
            else ""
        )
        rows.append(
            Row(
                "llama_cpp",
                f"SmolLM2 decode tok/s, batch 1 ({what}; {size['tokens']} tokens)",
                tok_s[m],
                "tok/s",
                "llama.cpp Q4_1",
                tok_s["llama.cpp"],
                tok_s[m] / tok_s["llama.cpp"],
                goal,
                note=note,
            )
        )
    chats = CHATS[:2] if ctx.quick else CHATS
    answers = fp32_answers(models["fp32"], tokenizer, ctx.size("modes")["answer"], chats)
    scorer = Llama(
        model_path=str(path),
        n_ctx=512,
        n_batch=1,
        logits_all=True,
        n_threads=ctx.threads,
        n_threads_batch=ctx.threads,
        verbose=False,
    )
    agree = llama_cpp_agreement(scorer, answers)
    rows.append(
        Row(
            "llama_cpp",
            f"llama.cpp Q4_1 vs our fp32 over {len(chats)} chats: greedy tokens agreeing "
            f"(teacher-forced on the same ids, {agree['positions']} tokens)",
            agree["agree"],
            "%",
            note="the modes group measures ours the same way",
        )
    )
    return rows


GROUPS: dict[str, Callable[[Context], list[Row]]] = {
    "bpe": bpe,
    "grading": grading,
    "decode": decode,
    "int4": int4,
    "modes": modes,
    "startup": startup,
    "generate": generate,
    "speculative": speculative,
    "prefix": prefix,
    "llama_cpp": llama_cpp,
}
PEER_ONLY = ("llama_cpp",)
