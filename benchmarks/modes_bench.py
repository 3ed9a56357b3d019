"""The weights modes side by side: agreement with fp32, decode speed, where a step's time goes, start-up.

Agreement: each mode teacher-forced on fp32's greedy chat answers (the share of positions whose
argmax is fp32's token, the largest logit differences) and free-running (tokens equal to fp32's
until the first that differs). Speed: decode tok/s at batch 1, interleaved, and the step's matrix
products alone. Start-up (`dojo demo` cold and warm, peak RSS) is `make bench`'s startup group.

    python -m benchmarks.modes_bench [--tokens 16] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.decode_bench import interleaved, ours_decode
from solutions.generate import generate
from solutions.model import project
from solutions.system.kernels.weight_modes import MODES, step_matrices, weight_bytes

CHATS = [
    "What is the capital of France?",
    "Name three prime numbers.",
    "Write a haiku about the sea.",
    "How do I reverse a list in Python?",
    "Why is the sky blue?",
    "Give me a synonym for happy.",
]
ROOT = Path(__file__).resolve().parent.parent


def load_modes(fp32=None) -> tuple[dict, object]:
    """({mode: model}, tokenizer): every mode built from the GGUF, parsed once (`fp32`: reuse it)."""
    from solutions.system.loading.tokenizer import tokenizer_from_gguf
    from solutions.system.loading.weights import build_model, find_gguf, mode_state, open_gguf, read_config

    reader = open_gguf(find_gguf())
    config = read_config(reader)
    models = {
        m: fp32 if m == "fp32" and fp32 is not None else build_model(config, mode_state(reader, config, m), m)
        for m in MODES
    }
    return models, tokenizer_from_gguf(reader)


def fp32_answers(
    fp32, tokenizer, tokens: int = 24, chats: list[str] = CHATS
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, fp32's greedy answer ids) per chat: what every engine is teacher-forced on."""
    out = []
    for chat in chats:
        prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": chat}]))
        answer = generate(fp32, [prompt], max_new_tokens=tokens, eos_token_id=tokenizer.eos_token_id)
        out.append((prompt, answer.tokens[0]))
    return out


def stepped_logits(model, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """Logits (len(answer), V) that chose each answer token, teacher-forced the way decoding runs:
    the prompt prefilled, then each answer token through decode_step (so a mode's fused batch-1
    step, solutions.system.kernels.fused_step, is what is measured)."""
    cache = model.new_cache(1, len(prompt) + len(answer))
    rows = [model.prefill(torch.tensor([prompt]), cache, last_only=True)[0, -1]]
    for token in answer[:-1]:
        rows.append(model.decode_step(torch.tensor([token]), cache)[0])
    return torch.stack(rows)


def agreement(models: dict, tokenizer, tokens: int = 24, chats: list[str] = CHATS) -> dict[str, dict]:
    """{mode: {"max_logit_diff", "agree", "positions", "free"}} against fp32, teacher-forced on fp32's
    answers through each mode's decode steps (stepped_logits); "free": per chat, how many tokens of
    its own greedy answer equal fp32's before the first that differs (free-running: one flipped
    near-tie changes the rest of the text)."""
    out = {
        m: {"max_logit_diff": 0.0, "top_diff": 0.0, "same": 0, "positions": 0, "free": []}
        for m in models
        if m != "fp32"
    }
    for prompt, answer in fp32_answers(models["fp32"], tokenizer, tokens, chats):
        for mode, r in out.items():
            own = generate(
                models[mode], [prompt], max_new_tokens=tokens, eos_token_id=tokenizer.eos_token_id
            ).tokens[0]
            r["free"].append(
                next((i for i, (a, b) in enumerate(zip(own, answer)) if a != b), min(len(own), len(answer)))
            )
        ids = torch.tensor([prompt + answer])
        with torch.inference_mode():
            ref = models["fp32"](ids)[0, len(prompt) - 1 : -1]  # (answer, V): what chose each answer token
            for mode, r in out.items():
                got = stepped_logits(models[mode], prompt, answer)
                r["max_logit_diff"] = max(r["max_logit_diff"], float((got - ref).abs().max()))
                top = got.topk(16, dim=-1).indices  # the logits greedy and top-k sampling choose among
                r["top_diff"] = max(r["top_diff"], float((got - ref).gather(-1, top).abs().max()))
                r["same"] += int((got.argmax(-1) == ref.argmax(-1)).sum())
                r["positions"] += ref.shape[0]
    return {m: r | {"agree": r["same"] / r["positions"]} for m, r in out.items()}


def llama_cpp_agreement(llm, answers: list[tuple[list[int], list[int]]]) -> dict:
    """{"agree", "positions"}: llama.cpp teacher-forced on the same token ids (fp32_answers), its
    argmax against fp32's greedy token at each answer position. `llm` keeps all logits (logits_all)."""
    import numpy as np

    same = positions = 0
    for prompt, answer in answers:
        llm.reset()
        llm.eval(prompt + answer)
        logits = np.asarray(llm.scores[len(prompt) - 1 : len(prompt) + len(answer) - 1])  # (answer, V)
        same += int((logits.argmax(-1) == np.asarray(answer)).sum())
        positions += len(answer)
    return {"agree": same / positions, "positions": positions}


def products_timer(model, rows: int = 1) -> Callable[[], float]:
    """Seconds for one decode step's matrix products alone: every matrix once (each layer's, then
    the head), on `rows` input rows, through the product the step itself uses: the model's own
    (`project`), or for an fp32 model with the fused step, that step's native fp32 product."""
    from solutions.system.kernels.fused_step import FusedStepF32

    mats = step_matrices(model)
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in mats}
    fused = model.fused_step if isinstance(model.fused_step, FusedStepF32) else None
    if fused is not None:
        native_product, isa = fused.kernel.module.matmul_f32, fused.kernel.isa
        product = lambda x, w: native_product(x, w, isa)  # noqa: E731
    else:
        product = project

    @torch.inference_mode()
    def run() -> float:
        start = time.perf_counter()
        for w in mats:
            product(inputs[w.shape[1]], w)
        return time.perf_counter() - start

    return run


def speeds(models: dict, tokens: int, repeats: int) -> dict[str, dict]:
    """{mode: {"tok_s", "step_s", "products_s", "bytes"}}: decode and its products alone, interleaved."""
    timers = {}
    for mode, m in models.items():
        timers[f"{mode} decode"] = ours_decode(m, tokens)
        timers[f"{mode} products"] = products_timer(m)
    t = interleaved(timers, repeats)
    return {
        mode: {
            "tok_s": tokens / t[f"{mode} decode"],
            "step_s": t[f"{mode} decode"] / tokens,
            "products_s": t[f"{mode} products"],
            "bytes": weight_bytes(m),
        }
        for mode, m in models.items()
    }


def demo_run(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes from its `peak RSS:` line, stdout) of one `dojo demo --verbose`."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    peak = next(
        (float(line.split()[2]) * 1e6 for line in proc.stdout.splitlines() if line.startswith("peak RSS:")), 0
    )
    return wall, int(peak), proc.stdout


def torch_rss() -> int:
    """Peak RSS, bytes, of a Python that only imports torch: the floor under any torch program's."""
    # VmHWM, not ru_maxrss: ru_maxrss survives exec, so it would count this (large) parent's memory
    code = (
        "import torch; print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return int(out.stdout.split()[-1]) * 1024  # kB


WARM_RUNS = 5  # warm starts timed, each beside a bare `import torch`: the medians are quoted


def startup(mode: str, threads: int) -> dict:
    """Cold (a fresh workspace) and warm `dojo demo --max-new-tokens 1 "Hi"`: wall s, peak RSS.
    Warm is the median of WARM_RUNS runs, interleaved with as many of a Python that imports torch and
    exits (`torch_s`, their median): the part of start-up that is torch's own import on this machine."""
    cmd = [
        sys.executable,
        "-m",
        "dojo",
        "demo",
        "--weights",
        mode,
        "--max-new-tokens",
        "1",
        "--verbose",
        "Hi",
    ]
    bare = [sys.executable, "-c", "import os, torch; os._exit(0)"]  # the demo skips torch's teardown too
    with tempfile.TemporaryDirectory(prefix="dojo-start-") as ws:
        env = os.environ | {"DOJO_WORKSPACE": ws, "NO_COLOR": "1", "OMP_NUM_THREADS": str(threads)}
        # warm means Python's bytecode cache too: the first run writes it, as a user's does (where an environment
        # sets PYTHONDONTWRITEBYTECODE, every warm run compiled the ~35 dojo and solutions modules again, ~0.06 s)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cold = demo_run(cmd, env)
        warm, torch_s = [], []
        for _ in range(WARM_RUNS):
            warm.append(demo_run(cmd, env))
            start = time.perf_counter()
            subprocess.run(bare, env=env, check=True, timeout=600)
            torch_s.append(time.perf_counter() - start)
    calibration = next(
        (
            line.strip()
            for line in cold[2].splitlines()
            if "by calibration" in line or "decode steps:" in line
        ),
        "",
    )
    return {
        "cold_s": cold[0],
        "warm_s": statistics.median(w[0] for w in warm),
        "torch_s": statistics.median(torch_s),
        "cold_rss": cold[1],
        "warm_rss": max(w[1] for w in warm),
        "calibration": calibration,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models, tok = load_modes()
    for mode, r in agreement(models, tok).items():
        print(
            f"{mode}: max |logit diff| {r['max_logit_diff']:.3f}, greedy agreement {r['agree']:.1%}, "
            f"free-running equal to fp32 for {r['free']} tokens"
        )
    for mode, r in speeds(models, args.tokens, args.repeats).items():
        rest = r["step_s"] - r["products_s"]
        print(
            f"{mode}: {r['tok_s']:.1f} tok/s; step {r['step_s'] * 1e3:.1f} ms = products "
            f"{r['products_s'] * 1e3:.1f} ms + the rest {rest * 1e3:.1f} ms ({rest / 30 * 1e6:.0f} us a layer)"
        )


if __name__ == "__main__":
    main()
