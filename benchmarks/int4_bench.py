"""SmolLM2 decode with packed 4-bit (Q4_1) weights against fp32: what the 6.4x smaller weights buy.

Every matmul weight and the tied embedding are re-quantized to Q4_1 and held packed; `F.linear`
and `F.embedding` reach them through `__torch_function__`, so the reference model runs unchanged.
Three engines, interleaved (A B C A B C ...) so that drift on a shared machine hits all of them:
fp32 (BLAS on fp32 weights), the int4 kata's `matmul_q4_1` (numpy: dequantize a slab, then
BLAS), and PyTorch's fused CPU int4 kernel (`torch._weight_int4pack_mm_for_cpu`, a private op;
the row is dropped if this torch lacks it; its fast path takes bf16 activations). The roofline predicts a ceiling; the measurement
shows that only a kernel that unpacks in registers gets near it. Reported, never asserted.

    python -m benchmarks.int4_bench [--tokens 8] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import statistics

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.decode_bench import PROMPT, ours_decode
from solutions.int4 import (
    bytes_per_weight,
    dequantize_q4_1,
    matmul_q4_1,
    predicted_decode_speedup,
    quantize_q4_1,
)

PACKED = ("wqkv", "wo", "w_gate_up", "w_down")  # per layer; plus the embedding / LM head


class PackedQ4_1:
    """A weight (N, K) held as Q4_1 blocks, accepted by F.linear and F.embedding in place of a Tensor."""

    dtype = torch.float32  # what the model sees (the cache takes its dtype from the embedding)
    device = torch.device("cpu")

    def __init__(self, blocks: np.ndarray, shape: tuple[int, int], kernel: str):
        self.blocks, self.shape, self.kernel = blocks.reshape(shape[0], -1), shape, kernel  # (N, K / 32 * 20)
        if kernel == "torch_int4":
            packed, scales_zeros = to_torch_int4pack(self.blocks, shape)
            self.packed, self.scales_zeros = packed, scales_zeros.to(torch.bfloat16)

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel == "torch_int4":  # its fast path takes bf16 activations (fp32 ones take a slow one)
            x2 = x.reshape(-1, self.shape[1]).to(torch.bfloat16)
            y = torch._weight_int4pack_mm_for_cpu(x2, self.packed, 32, self.scales_zeros).float()
            return y.reshape(*x.shape[:-1], self.shape[0])
        return torch.from_numpy(matmul_q4_1(x.numpy(), self.blocks, self.shape))

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        picked = self.blocks[ids.reshape(-1).numpy()]  # (n, K / 32 * 20)
        return torch.from_numpy(dequantize_q4_1(picked, (picked.shape[0], self.shape[1]))).reshape(*ids.shape, -1)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is F.linear and isinstance(args[1], cls) and len(args) == 2 and not kwargs:
            return args[1].linear(args[0])
        if func is F.embedding and isinstance(args[1], cls):
            return args[1].rows(args[0])
        return NotImplemented


def to_torch_int4pack(blocks: np.ndarray, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_1 blocks as torch's CPU int4 layout: codes packed by torch, and (K/32, N, 2) scale and zero.

    torch computes w = (q - 8) * scale + zero; Q4_1 is w = d * q + m, so scale = d and zero = m + 8d.
    """
    n, k = shape
    b = blocks.reshape(-1, 20)
    d = b[:, 0:2].view(np.float16).astype(np.float32).reshape(n, k // 32)
    m = b[:, 2:4].view(np.float16).astype(np.float32).reshape(n, k // 32)
    q = np.concatenate([b[:, 4:] & 0x0F, b[:, 4:] >> 4], axis=1).reshape(n, k)  # (N, K) codes
    packed = torch._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q.astype(np.int32)), 1)
    scales_zeros = torch.from_numpy(np.stack([d.T, (m + 8 * d).T], axis=-1).copy())  # (K/32, N, 2)
    return packed, scales_zeros


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
    from solutions.weights import load_smollm2

    if threads:
        torch.set_num_threads(threads)
    fp32 = load_smollm2() if fp32_model is None else fp32_model
    engines = {"fp32": fp32, "q4_1 numpy (matmul_q4_1)": pack(fp32, "numpy")}
    if hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        engines["q4_1 torch fused int4 kernel, bf16 x"] = pack(engines["q4_1 numpy (matmul_q4_1)"], "torch_int4")
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
        rows.append({"name": f"SmolLM2 decode, batch 1: {name} vs fp32", "ours": tok_s[name],
                     "peer": tok_s["fp32"], "ratio": tok_s[name] / tok_s["fp32"], "unit": "tok/s",
                     "goal": f"reported; roofline ceiling {predicted:.2f}x", "max_logit_diff": drift,
                     "threads": torch.get_num_threads()})
    rows.append({"name": "bytes per weight, q4_1 vs fp32", "ours": bytes_per_weight("q4_1"),
                 "peer": bytes_per_weight("fp32"), "ratio": bytes_per_weight("fp32") / bytes_per_weight("q4_1"),
                 "unit": "B", "goal": "6.4x smaller, not 8x"})
    return rows


def report(rows: list[dict]) -> str:
    lines = [f"{'row':<66}{'ours':>9}{'peer':>9}{'ratio':>8}  goal"]
    for r in rows:
        drift = f"   (max |logit diff| {r['max_logit_diff']:.3f})" if "max_logit_diff" in r else ""
        lines.append(f"{r['name']:<66}{r['ours']:>9.2f}{r['peer']:>9.2f}{r['ratio']:>7.2f}x  {r['goal']}{drift}")
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
