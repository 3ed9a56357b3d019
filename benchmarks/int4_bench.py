"""SmolLM2 decode with the int4 kata's numpy Q4_1 matmul against fp32: what 6.4x smaller weights buy.

Every matmul weight and the tied embedding are re-quantized to Q4_1 and held packed, so the
reference model runs unchanged through `solutions.model.project`; fp32 (BLAS) and `matmul_q4_1`
(numpy: dequantize a slab, then BLAS) run interleaved. Reported, never asserted. Not the int4
weights mode on the GGUF's own blocks: modes_bench times that.

    python -m benchmarks.int4_bench [--tokens 8] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import statistics

import numpy as np
import torch

from benchmarks.decode_bench import PROMPT, ours_decode
from solutions.int4 import (
    bytes_per_weight,
    dequantize_q4_1,
    matmul_q4_1,
    predicted_decode_speedup,
    quantize_q4_1,
)
from solutions.system.kernels.weight_modes import MATRICES, Int4Linear

PACKED = MATRICES  # per layer; plus the embedding / LM head


class PackedQ4_1:
    """A weight (N, K) held as Q4_1 blocks: the model calls `w(x)` for x @ W.T and `w.rows(ids)` to look up."""

    def __init__(self, blocks: np.ndarray, shape: tuple[int, int], kernel: str):
        self.blocks, self.shape, self.kernel = blocks.reshape(shape[0], -1), shape, kernel  # (N, K / 32 * 20)
        self.fused = Int4Linear.from_q4_1(self.blocks, shape) if kernel == "torch_int4" else None
        self.nbytes = self.blocks.nbytes

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused is not None:  # torch's fused kernel, bf16 activations
            return self.fused(x)
        return torch.from_numpy(matmul_q4_1(x.numpy(), self.blocks, self.shape))

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        picked = self.blocks[ids.reshape(-1).numpy()]  # (n, K / 32 * 20)
        return torch.from_numpy(dequantize_q4_1(picked, (picked.shape[0], self.shape[1]))).reshape(
            *ids.shape, -1
        )


def pack(model: torch.nn.Module, kernel: str) -> torch.nn.Module:
    """A copy of `model` whose matmul weights and embedding are PackedQ4_1 (re-packed if already so)."""
    packed = copy.deepcopy(model)
    targets = [(packed, "embed")] + [(layer, name) for layer in packed.layers for name in PACKED]
    for owner, name in targets:
        w = getattr(owner, name)
        if isinstance(w, PackedQ4_1):
            blocks, shape = w.blocks, w.shape
        else:
            blocks, shape = quantize_q4_1(w.detach().numpy()), tuple(w.shape)
        delattr(owner, name)  # drop the fp32 Parameter
        setattr(owner, name, PackedQ4_1(blocks, shape, kernel))
    return packed


def bench(tokens: int = 8, repeats: int = 3, threads: int | None = None, fp32_model=None) -> list[dict]:
    """Rows {name, ours, peer, ratio, unit, goal}: decode tok/s of packed Q4_1 engines vs fp32.

    `fp32_model`: the fp32 SmolLM2 already loaded (`make bench` loads it once for every group)."""
    from solutions.system.loading.weights import load_smollm2

    if threads:
        torch.set_num_threads(threads)
    fp32 = load_smollm2() if fp32_model is None else fp32_model
    engines = {"fp32": fp32, "q4_1 numpy (matmul_q4_1)": pack(fp32, "numpy")}
    timers = {name: ours_decode(m, tokens) for name, m in engines.items()}
    for run in timers.values():
        run()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(repeats):
        for name, run in timers.items():
            times[name].append(run())
    tok_s = {name: tokens / statistics.median(t) for name, t in times.items()}

    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        ref = fp32.forward(ids)[0, -1]
    predicted = predicted_decode_speedup(fp32.config, "fp32", "q4_1", 1, len(PROMPT) + tokens // 2)
    rows = []
    for name, model in engines.items():
        if name == "fp32":
            continue
        with torch.inference_mode():
            drift = float((model.forward(ids)[0, -1] - ref).abs().max())
        rows.append(
            {
                "name": f"SmolLM2 decode, batch 1: {name} vs fp32",
                "ours": tok_s[name],
                "peer": tok_s["fp32"],
                "ratio": tok_s[name] / tok_s["fp32"],
                "unit": "tok/s",
                "goal": f"reported; roofline ceiling {predicted:.2f}x",
                "max_logit_diff": drift,
                "threads": torch.get_num_threads(),
            }
        )
    rows.append(
        {
            "name": "bytes per weight, q4_1 vs fp32",
            "ours": bytes_per_weight("q4_1"),
            "peer": bytes_per_weight("fp32"),
            "ratio": bytes_per_weight("fp32") / bytes_per_weight("q4_1"),
            "unit": "B",
            "goal": "6.4x smaller, not 8x",
        }
    )
    return rows


def report(rows: list[dict]) -> str:
    lines = [f"{'row':<66}{'ours':>9}{'peer':>9}{'ratio':>8}  goal"]
    for r in rows:
        drift = f"   (max |logit diff| {r['max_logit_diff']:.3f})" if "max_logit_diff" in r else ""
        lines.append(
            f"{r['name']:<66}{r['ours']:>9.2f}{r['peer']:>9.2f}{r['ratio']:>7.2f}x  {r['goal']}{drift}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    print(report(bench(args.tokens, args.repeats, args.threads)))


if __name__ == "__main__":
    main()
