"""The int4-q8 fused step at 1-8 rows against the tile loop's compute roof: what batching can buy here.

At one row a step reads every weight once for one row; with more rows the same read serves them
all, until the tile loop's integer dot products bound the step. This times the fused step at each
row count on a scratch pool (rows one sequence each, rounds interleaved, medians) and the loop's
roof on this CPU (`roof`: block sums a second on one thread, from independent chains), then prints
each row count's block sums a second against the roof times the threads, and its tokens a second
against one row's. Reported, never asserted. `dojo serve` at 8 clients adds prefills and HTTP.

    python -m benchmarks.batch_roof [--weights int4-q8x2] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def measure(weights: str, rounds: int) -> dict:
    from solutions.system.kernels import streams
    from solutions.system.loading.weights import load_smollm2

    model = load_smollm2(mode=weights)
    step = model.fused_step
    if step is None:
        raise SystemExit(
            f"no fused step for --weights {weights}: it needs the compiled kernel and an int4-q8 mode"
        )
    c, module = model.config, step.kernel.module
    mats = [getattr(layer, n) for layer in model.layers for n in ("wqkv", "wo", "w_gate_up", "w_down")]
    mats.append(model.lm_head.fast)
    passes = 2 if mats[0].residual else 1
    sums_a_row = passes * sum(m.tiles.shape[0] * m.tiles.shape[1] for m in mats)  # block sums per row
    one_step = streams.q4_step(step.decoder, c)  # rows one sequence each, on a scratch pool
    times: dict[int, list[float]] = {rows: [] for rows in range(1, 9)}
    step._settings()
    for round_ in range(rounds + 1):  # round 0 untimed: the first touch of the weights
        for rows, seen in times.items():
            began = time.perf_counter()
            one_step(rows)
            if round_:
                seen.append(time.perf_counter() - began)
    roof = statistics.median(module.roof(step.kernel.isa, 0.2) for _ in range(3))
    return {
        "weights": weights,
        "isa": step.kernel.isa,
        "threads": torch.get_num_threads(),
        "block_sums_a_row": sums_a_row,
        "roof_a_thread": roof,
        "step_s": {rows: statistics.median(seen) for rows, seen in times.items()},
    }


def report(r: dict) -> str:
    roof = r["roof_a_thread"] * r["threads"]
    one = r["step_s"][1]
    lines = [
        f"{r['weights']} on {r['isa']}, {r['threads']} threads: {r['block_sums_a_row'] / 1e6:.2f} M block sums a "
        f"row a step; roof {r['roof_a_thread'] / 1e6:.0f} M a second a thread",
        "rows | step ms | of the roof | tokens/s vs 1 row | the roof's bound on that",
    ]
    for rows, s in r["step_s"].items():
        rate = rows * r["block_sums_a_row"] / s
        floor = rows * r["block_sums_a_row"] / roof  # seconds the dot products alone take at the roof
        lines.append(
            f"{rows} | {s * 1e3:.2f} | {rate / roof:.0%} | {rows * one / s:.2f}x | {rows * one / max(floor, one):.2f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.batch_roof", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--weights", default="int4-q8x2", choices=["int4-q8", "int4-q8x2"])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    print(report(measure(args.weights, args.rounds)))


if __name__ == "__main__":
    main()
