"""`dojo bench <what>`: measure a curve on the reference model, print it as a table, plot it to a PNG.

`batching`: decode tokens/s against batch size, beside the roofline's prediction. `latency`: time to
first token and time per output token against prompt length, beside predict_ttft / predict_tpot.
`serve`: dojo.tools.serve_bench. The model is SmolLM2-shaped with random weights; plots go to
bench/<what>.png under the workspace. The numbers come from `solutions.*`; this module chooses sizes,
formats and plots.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from dojo.tools import serve_bench


@dataclass(frozen=True)
class Ceilings:
    peak_flops: float  # FLOP/s, fp32 matmul
    bandwidth: float  # bytes/s, copy (read + written)


def shaped_model(args: argparse.Namespace):
    """SmolLM2's shapes with random weights; fewer layers or a smaller vocabulary if asked."""
    from solutions.model import smollm2_shaped

    sizes = {"n_layers": args.layers, "vocab_size": args.vocab}
    return smollm2_shaped(**{name: size for name, size in sizes.items() if size is not None})


def measure_ceilings(matmul_n: int, copy_bytes: int, repeats: int) -> Ceilings:
    from solutions import roofline

    return Ceilings(
        roofline.measure_peak_flops(matmul_n, repeats=repeats),
        roofline.measure_bandwidth(copy_bytes, repeats),
    )


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"want positive integers, got {text!r}")
    return values


def _finish(fig, ax, xs: list[int], xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    """Log-log axes ticked at the measured x values (plain numbers), labels, grid and legend; save."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path)
    return path


# --------------------------------------------------------------------------- batching


def batching_rows(config, curve: dict[int, float], context_len: int, ceilings: Ceilings) -> list[dict]:
    """Per batch: measured tokens/s, the roofline's tokens/s and its verdict."""
    from solutions.roofline import arithmetic_intensity, bound, phase_cost

    rows = []
    for batch, tokens_per_s in curve.items():
        cost = phase_cost(config, "decode", batch, 1, context_len)
        seconds = max(cost.flops / ceilings.peak_flops, cost.bytes / ceilings.bandwidth)
        rows.append(
            {
                "batch": batch,
                "measured": tokens_per_s,
                "step_ms": batch / tokens_per_s * 1e3,
                "predicted": batch / seconds,
                "bound": bound(arithmetic_intensity(cost), ceilings.peak_flops, ceilings.bandwidth),
            }
        )
    return rows


def batching_table(rows: list[dict]) -> list[str]:
    base = rows[0]["measured"]  # tokens/s at the first (smallest) batch size
    speedup = f"x batch {rows[0]['batch']}"
    lines = [f"  {'batch':>6}{'step ms':>10}{'tokens/s':>11}{speedup:>11}{'roofline tok/s':>16}  verdict"]
    for r in rows:
        lines.append(
            f"  {r['batch']:>6}{r['step_ms']:>10.1f}{r['measured']:>11.1f}"
            f"{r['measured'] / base:>11.2f}{r['predicted']:>16.1f}  {r['bound']}-bound"
        )
    return lines


def plot_batching(rows: list[dict], crossover: int | None, path: Path, title: str) -> Path:
    from matplotlib.figure import Figure  # no pyplot: no global state, renders with Agg

    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot()
    batches = [r["batch"] for r in rows]
    ax.plot(batches, [r["measured"] for r in rows], "o-", label="measured")
    ax.plot(batches, [r["predicted"] for r in rows], "--", color="gray", label="roofline")
    if crossover is not None and crossover <= 2 * max(batches):
        ax.axvline(crossover, color="red", alpha=0.5, label=f"compute-bound from batch {crossover}")
    return _finish(fig, ax, batches, "batch size", "decode tokens/s", title, path)


def run_batching(args: argparse.Namespace) -> int:
    from solutions.batching import crossover_batch, kv_bytes_per_sequence, max_batch_size, throughput_curve

    model = shaped_model(args)
    c = model.config
    ceilings = measure_ceilings(args.matmul_n, args.copy_mib << 20, args.repeats)
    curve = throughput_curve(model, args.batch_sizes, args.context, repeats=args.repeats)
    rows = batching_rows(c, curve, args.context, ceilings)
    crossover = crossover_batch(c, ceilings.peak_flops, ceilings.bandwidth, args.context)
    print(_header(args, c, ceilings, f"decode after {args.context} cached tokens"))
    print("\n".join(batching_table(rows)))
    where = f"batch {crossover}" if crossover is not None else "never, at this context"
    print(f"  compute-bound from: {where}")
    per_seq = kv_bytes_per_sequence(c, max(args.context, 1))
    budget = int(args.memory_gib * 2**30)
    try:
        fits = f"{max_batch_size(c, max(args.context, 1), budget)} sequences"
    except ValueError:
        fits = "not one sequence"
    print(f"  KV cache per sequence: {per_seq / 1e6:.2f} MB; {args.memory_gib:g} GiB holds {fits}")
    path = plot_batching(
        rows,
        crossover,
        _out(args, "batching"),
        f"decode throughput, {c.n_layers} layers, context {args.context}",
    )
    print(f"  plot: {path}")
    return 0


# --------------------------------------------------------------------------- latency


def plot_latency(rows: list[dict], path: Path, title: str) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot()
    prompts = [r["prompt"] for r in rows]
    for key, color in (("ttft", "tab:blue"), ("tpot", "tab:orange")):
        ax.plot(prompts, [r[key] * 1e3 for r in rows], "o-", color=color, label=f"{key.upper()} measured")
        ax.plot(
            prompts,
            [r[f"{key}_predicted"] * 1e3 for r in rows],
            "--",
            color=color,
            label=f"{key.upper()} roofline",
        )
    return _finish(fig, ax, prompts, "prompt tokens", "milliseconds", title, path)


def run_latency(args: argparse.Namespace) -> int:
    from solutions.latency import measure_latency, predict_tpot, predict_ttft

    model = shaped_model(args)
    c = model.config
    ceilings = measure_ceilings(args.matmul_n, args.copy_mib << 20, args.repeats)
    rows = []
    for prompt in args.prompts:
        got = measure_latency(model, prompt, args.new_tokens, repeats=args.repeats)
        rows.append(
            {
                "prompt": prompt,
                "ttft": got.ttft,
                "tpot": got.tpot,
                "ttft_predicted": predict_ttft(c, prompt, ceilings.peak_flops, ceilings.bandwidth),
                "tpot_predicted": predict_tpot(c, prompt, ceilings.peak_flops, ceilings.bandwidth),
            }
        )
    print(_header(args, c, ceilings, f"{args.new_tokens} new tokens per request"))
    print(f"  {'prompt':>7}{'TTFT ms':>10}{'roofline':>10}{'TPOT ms':>10}{'roofline':>10}")
    for r in rows:
        print(
            f"  {r['prompt']:>7}{r['ttft'] * 1e3:>10.1f}{r['ttft_predicted'] * 1e3:>10.1f}"
            f"{r['tpot'] * 1e3:>10.1f}{r['tpot_predicted'] * 1e3:>10.1f}"
        )
    path = plot_latency(rows, _out(args, "latency"), f"TTFT and TPOT, {c.n_layers} layers")
    print(f"  plot: {path}")
    return 0


# --------------------------------------------------------------------------- the command


def _header(args: argparse.Namespace, config, ceilings: Ceilings, what: str) -> str:
    import torch

    threads = torch.get_num_threads()
    return (
        f"SmolLM2-shaped, random weights: {config.n_layers} layers, vocab {config.vocab_size}, fp32; "
        f"{threads} thread{'s' * (threads != 1)}; {what}; median of {args.repeats} after a warm-up\n"
        f"  ceilings: {ceilings.peak_flops / 1e9:.3g} GFLOP/s (matmul n = {args.matmul_n}), "
        f"{ceilings.bandwidth / 1e9:.3g} GB/s (copy of {args.copy_mib} MiB); ridge "
        f"{ceilings.peak_flops / ceilings.bandwidth:.3g} FLOP/byte"
    )


def _out(args: argparse.Namespace, name: str) -> Path:
    from dojo.targets import workspace_dir

    folder = workspace_dir() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.png"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", type=int, default=None, help="layers of the SmolLM2-shaped model (default 30)")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 49152)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per point; the median is kept")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--matmul-n", type=int, default=1024, help="square matmul for the peak (default 1024)")
    p.add_argument("--copy-mib", type=int, default=256, help="MiB per copied array for the bandwidth")


def register(subparsers) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="measure a curve on the reference model and plot it",
        description="Measure a curve on a SmolLM2-shaped model, print a table, "
        "save a PNG under the workspace (bench/<what>.png).",
    )
    what = bench.add_subparsers(title="what", metavar="WHAT", dest="what", required=True)
    p = what.add_parser("batching", help="decode tokens/s against batch size, and the compute crossover")
    _common(p)
    p.add_argument(
        "--batch-sizes",
        type=_int_list,
        default=[1, 2, 4, 8, 16, 32, 64],
        help="comma-separated (default 1,2,4,8,16,32,64)",
    )
    p.add_argument("--context", type=int, default=16, help="cached tokens per row (default 16)")
    p.add_argument("--memory-gib", type=float, default=16.0, help="memory budget for the max-batch line")
    p.set_defaults(func=_run(run_batching))
    p = what.add_parser("latency", help="TTFT and TPOT against prompt length, beside the roofline")
    _common(p)
    p.add_argument(
        "--prompts",
        type=_int_list,
        default=[16, 64, 256, 512],
        help="prompt lengths, comma-separated (default 16,64,256,512)",
    )
    p.add_argument("--new-tokens", type=int, default=8, help="tokens generated per request (default 8)")
    p.set_defaults(func=_run(run_latency))
    serve_bench.register(what, _int_list)


def _run(bench):
    def run(args: argparse.Namespace) -> int:
        import torch

        if args.threads is not None:
            torch.set_num_threads(args.threads)
        return bench(args)

    return run
