"""`dojo roofline`: measure this machine's ceilings and place SmolLM2's prefill and decode under them.

It measures copy bandwidth and matmul peak (solutions.roofline) before and after timing the model's
prefill and one decode step, keeps the higher of each, prints a table and saves the plot under the
workspace. Each weights mode (`--weights`) adds its decode step, credited with its own weight bytes,
and its speed beside fp32's. On a CUDA GPU the fp32 phases run there too. Before measuring it says how
long it will take: one short pass of each model, scaled by the roofline at the ceilings just measured.
The numbers come from `solutions.roofline`; this module chooses sizes, estimates, formats and prints.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dojo.tools.roofline_progress import Counted, duration, phases, plan, probe

if TYPE_CHECKING:  # torch loads only when the command runs: `dojo` itself starts fast
    from solutions.roofline import Cost, Measurement

FAR_BELOW = 0.25  # a phase under this share of its attainable roof is bound by neither ceiling
PROBE_TOKENS = 128  # the estimate's prefill probe: a quarter of the default prompt, long enough to scale from


@dataclass(frozen=True)
class Ceilings:
    """What one device can do: copy bandwidth (bytes/s) and matmul peak (FLOP/s), and how measured."""

    device: str  # "cpu", "cuda"
    name: str  # what to call it in the report: "cpu (2 threads)", "cuda (NVIDIA H200)"
    bandwidth: float
    peak_flops: float
    copy_bytes: int
    matmul_n: int

    @property
    def ridge(self) -> float:
        from solutions import roofline

        return roofline.ridge_point(self.peak_flops, self.bandwidth)


def measure_ceilings(
    device: str,
    copy_bytes: int | None,
    matmul_n: int,
    repeats: int,
    advance: Callable[[int, int], object] = lambda done, total: None,
) -> Ceilings:
    """Both ceilings of `device`; `advance(done, 2)` after each."""
    import torch

    from solutions import roofline

    if copy_bytes is None:
        llc = roofline.last_level_cache_bytes() if device == "cpu" else 0
        copy_bytes = 4 * llc if llc else 1 << 30  # the contract's default, made visible
    bandwidth = roofline.measure_bandwidth(copy_bytes, repeats, device=device)
    advance(1, 2)
    peak = roofline.measure_peak_flops(matmul_n, torch.float32, repeats, device=device)
    advance(2, 2)
    threads = torch.get_num_threads()
    name = (
        f"cpu ({threads} thread{'s' * (threads != 1)})"
        if device == "cpu"
        else f"{device} ({torch.cuda.get_device_name(device)})"
    )
    return Ceilings(device, name, bandwidth, peak, copy_bytes, matmul_n)


def best_of(before: Ceilings, after: Ceilings) -> tuple[Ceilings, str]:
    """The higher of two measurements of each ceiling (others using the machine only ever lower
    them), and a warning when they disagree by more than 20% ("" when they agree)."""
    best = replace(
        before,
        bandwidth=max(before.bandwidth, after.bandwidth),
        peak_flops=max(before.peak_flops, after.peak_flops),
    )
    moved = [
        f"{what} {_si(a, unit)} then {_si(b, unit)}"
        for what, a, b, unit in (
            ("bandwidth", before.bandwidth, after.bandwidth, "B/s"),
            ("peak", before.peak_flops, after.peak_flops, "FLOP/s"),
        )
        if min(a, b) < 0.8 * max(a, b)
    ]
    note = f"  note: the machine is busy ({'; '.join(moved)}); the best of each is shown" if moved else ""
    return best, note


def mode_decode(
    model, mode: str, fp32_weight_bytes: int, prompt_tokens: int, batch: int, repeats: int
) -> Measurement:
    """One decode step of a `mode` model, credited with fp32's FLOPs and its own weight bytes
    (phase_cost counts fp32 weights; the KV cache stays fp32 in every mode)."""
    from solutions import roofline

    m = roofline.measure_phase(model, "decode", batch, 1, prompt_tokens, repeats)
    return replace(m, cost=pass_cost(model, fp32_weight_bytes, "decode", batch, 1, prompt_tokens))


def pass_cost(model, fp32_weight_bytes: int, phase: str, batch: int, seq_len: int, context_len: int) -> Cost:
    """phase_cost of one pass of `model`, its weights counted at their own bytes (a packed mode's are fewer)."""
    from solutions import roofline
    from solutions.roofline import Cost
    from solutions.system.kernels.weight_modes import weight_bytes

    fp32 = roofline.phase_cost(model.config, phase, batch, seq_len, context_len)
    return Cost(fp32.flops, fp32.bytes - fp32_weight_bytes + weight_bytes(model))


def estimate(
    models: dict, c: Ceilings, fp32_weight_bytes: int, batch: int, n: int, repeats: int, advance
) -> dict[tuple[str, str], list[float]]:
    """`plan` of each phase the run will measure, keyed (mode, "prefill" | "decode"): fp32's two and
    each other model's decode, from a `probe` of each model; `advance(done, total)` after each probe."""
    tokens = min(PROBE_TOKENS, n)
    plans = {}
    for done, (mode, model) in enumerate(models.items(), start=1):
        prefill_s, decode_s = probe(model, batch, tokens)
        costs = [
            pass_cost(model, fp32_weight_bytes, *shape)
            for shape in (
                ("prefill", batch, tokens, 0),
                ("prefill", batch, n, 0),
                ("decode", batch, 1, tokens),
                ("decode", batch, 1, n),
            )
        ]
        for kind in ("prefill", "decode") if mode == "fp32" else ("decode",):
            plans[mode, kind] = plan(kind, repeats, (prefill_s, *costs[:2]), (decode_s, *costs[2:]), c)
        advance(done, len(models))
    return plans


def mode_lines(fp32: Measurement, modes: dict[str, Measurement]) -> list[str]:
    """Per packed mode: how many times fewer bytes a decode step moves, and how much faster (or slower)
    it ran, read the way it goes ("1.72x slower", never "0.58x faster")."""
    return [
        f"  {mode}: decode moves {fp32.cost.bytes / m.cost.bytes:.2f}x fewer bytes than fp32 and ran "
        f"{_faster(fp32.seconds / m.seconds)} ({1 / m.seconds:.3g} vs {1 / fp32.seconds:.3g} steps/s)"
        for mode, m in modes.items()
    ]


def _faster(ratio: float) -> str:
    """2.5 -> "2.50x faster"; 0.58 -> "1.72x slower"; "as fast (1.00x)" when it rounds to 1 either way:
    never a factor below 1."""
    if f"{ratio:.2f}" == f"{1 / ratio:.2f}" == "1.00":
        return "as fast (1.00x)"
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def verdict(share: float, intensity: float, c: Ceilings) -> str:
    """What bounds a phase that reached `share` of its attainable FLOP/s: the ceiling on its side of the
    ridge, or neither when it ran far below that roof (under FAR_BELOW of it)."""
    from solutions import roofline

    if share < FAR_BELOW:
        return "below both ceilings: dispatch or a busy machine bounds it"
    return roofline.bound(intensity, c.peak_flops, c.bandwidth) + "-bound"


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def table(ceilings: Ceilings, phases: list[Measurement], labels: list[str], batch: int) -> list[str]:
    """The report's lines: ceilings, one row per phase, then decode's tokens/s against its ceiling."""
    from solutions import roofline

    c = ceilings
    lines = [
        c.name,
        f"  bandwidth {_si(c.bandwidth, 'B/s'):>14}   copy of {c.copy_bytes / 2**20:.0f} MiB, read + written",
        f"  peak      {_si(c.peak_flops, 'FLOP/s'):>14}   fp32 matmul, n = {c.matmul_n}",
        f"  ridge     {c.ridge:>9.3g} FLOP/byte",
        "",
        f"  {'phase':<28}{'FLOP/byte':>10}{'achieved':>16}{'attainable':>16}{'share':>7}{'moved':>14}  verdict",
    ]
    for label, m in zip(labels, phases):
        roof = roofline.attainable(m.intensity, c.peak_flops, c.bandwidth)
        share = m.flops_per_s / roof
        lines.append(
            f"  {label:<28}{m.intensity:>10.3g}{_si(m.flops_per_s, 'FLOP/s'):>16}"
            f"{_si(roof, 'FLOP/s'):>16}{share:>7.0%}{_si(m.bytes_per_s, 'B/s'):>14}"
            f"  {verdict(share, m.intensity, c)}"
        )
    decode = phases[-1]
    lines.append(
        f"  decode: {batch / decode.seconds:.3g} tokens/s; the bandwidth ceiling allows "
        f"{batch * c.bandwidth / decode.cost.bytes:.3g} ({decode.cost.bytes / 1e6:.1f} MB per step)"
    )
    return lines


def plot(points: dict[str, tuple[float, float]], ceilings: Ceilings, path: Path) -> None:
    """solutions.roofline's plot, its labels moved off the markers, saved to `path`."""
    from dojo.tools.labels import place_labels
    from solutions import roofline

    fig = roofline.plot_roofline(points, ceilings.peak_flops, ceilings.bandwidth, path)
    place_labels(fig)
    fig.savefig(path)


def folder_bytes(path: Path) -> int:
    """The bytes of every file under `path` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "roofline",
        help="measure this machine's ceilings and place SmolLM2's prefill and decode on them",
        description="Measure copy bandwidth and matmul peak, time SmolLM2's prefill and one decode step "
        "after it, print where each sits under the roof, and save the plot under the workspace "
        "(roofline/roofline-<device>.png). On a CUDA GPU, the GPU is measured too.",
    )
    p.add_argument(
        "--random-weights",
        action="store_true",
        help="SmolLM2-shaped random weights: nothing to load, identical cost (fp32 only)",
    )
    p.add_argument(
        "--weights",
        default=None,
        metavar="MODES",
        help="comma-separated weights modes to place: fp32, bf16, int4, int4-q8, int4-q8x2 (default: all that this "
        "torch runs; fp32 is always measured, as the baseline)",
    )
    p.add_argument("--prompt-tokens", type=int, default=512, help="prefill length; decode runs after it")
    p.add_argument("--batch", type=int, default=1, help="rows per pass (default 1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument(
        "--copy-mib", type=int, default=None, help="MiB per copied array (default: 4x the last-level cache)"
    )
    p.add_argument("--matmul-n", type=int, default=2048, help="size of the square matmul (default 2048)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per measurement; the median is kept")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from dojo.targets import workspace_dir
    from solutions import roofline
    from solutions.model import LlamaConfig, smollm2_shaped

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    copy_bytes = None if args.copy_mib is None else args.copy_mib << 20
    shape = LlamaConfig.smollm2_135m()  # reject bad sizes before minutes of measuring
    roofline.phase_cost(shape, "decode", args.batch, 1, args.prompt_tokens)
    roofline.phase_cost(shape, "prefill", args.batch, args.prompt_tokens, 0)
    from solutions.system.kernels.weight_modes import MODES, check_mode, int4_available, weight_bytes

    wanted = (
        MODES
        if args.weights is None
        else [check_mode(m.strip()) for m in args.weights.split(",") if m.strip()]
    )
    modes = ["fp32"] + [m for m in MODES if m != "fp32" and m in wanted and (m != "int4" or int4_available())]
    if args.random_weights:
        modes = ["fp32"]
    started = time.perf_counter()
    with phases() as phase:
        if args.random_weights:
            models, what = {"fp32": phase("random weights", smollm2_shaped)}, "random weights"
        else:
            import solutions.system

            cache_dir = workspace_dir() / "cache" / "smollm2"
            if not folder_bytes(cache_dir):
                print(
                    f"first run: building the weights cache in {cache_dir} (several hundred MB; later runs reuse it)",
                    flush=True,
                )
            models = {
                m: phase(
                    f"loading SmolLM2-135M ({m})",
                    lambda advance, m=m: (
                        solutions.system.load(m, cache_dir, log=print, progress=advance).model
                    ),
                    counted=True,
                )
                for m in modes
            }
            print(
                f"weights cache: {cache_dir}, {folder_bytes(cache_dir) / 1e6:.0f} MB on disk "
                "(kept for the next run; delete the folder to free the space)"
            )
            what = "real weights"
        print(
            f"SmolLM2-135M, {', '.join(modes)}, {what}; batch {args.batch}; median of {args.repeats} after a warm-up\n"
        )
        n = args.prompt_tokens
        labels = [f"prefill {n} tokens, fp32", f"decode after {n}, fp32"]
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        out_dir = workspace_dir() / "roofline"
        out_dir.mkdir(parents=True, exist_ok=True)
        fp32_bytes = weight_bytes(models["fp32"])
        for device in devices:
            model = models["fp32"].to(device)
            timed = {"fp32": model} | (
                {m: models[m] for m in modes if m != "fp32"} if device == "cpu" else {}
            )
            clock = time.perf_counter()
            before = phase(
                f"ceilings ({device})",
                lambda advance: measure_ceilings(device, copy_bytes, args.matmul_n, args.repeats, advance),
                counted=True,
            )
            ceilings_s = time.perf_counter() - clock
            plans = phase(
                f"estimating the time ({device})",
                lambda advance: estimate(timed, before, fp32_bytes, args.batch, n, args.repeats, advance),
                counted=True,
            )
            total = ceilings_s + sum(map(sum, plans.values()))
            print(
                f"{device}: about {duration(total)} to measure {len(plans)} phases ({args.repeats + 1} passes "
                "each, the warm-up included) and the ceilings again; estimated from one "
                f"{min(PROBE_TOKENS, n)}-token prefill and one decode step of each mode, scaled by the roofline "
                "at the ceilings just measured"
            )

            def measured(name: str, mode: str, kind: str, work: Callable) -> Measurement:
                steps = plans[mode, kind]
                return phase(
                    name, lambda advance: work(Counted(timed[mode], steps, advance)), True, sum(steps)
                )

            phases_ = [
                measured(
                    f"prefill {n} tokens (fp32, {device})",
                    "fp32",
                    "prefill",
                    lambda m: roofline.measure_phase(m, "prefill", args.batch, n, 0, args.repeats),
                ),
                measured(
                    f"decode after {n} (fp32, {device})",
                    "fp32",
                    "decode",
                    lambda m: roofline.measure_phase(m, "decode", args.batch, 1, n, args.repeats),
                ),
            ]
            packed = {
                mode: measured(
                    f"decode after {n} ({mode}, {device})",
                    mode,
                    "decode",
                    lambda m, mode=mode: mode_decode(m, mode, fp32_bytes, n, args.batch, args.repeats),
                )
                for mode in timed
                if mode != "fp32"
            }
            after = phase(
                f"ceilings again ({device})",
                lambda advance: measure_ceilings(
                    device,
                    copy_bytes,
                    args.matmul_n,
                    args.repeats,
                    lambda done, steps: advance(ceilings_s * done / steps, ceilings_s),
                ),
                True,
                ceilings_s,
            )
            ceilings, note = best_of(before, after)
            extra = [f"decode after {n}, {m}" for m in packed]
            print("\n".join(table(ceilings, phases_, labels, args.batch) + ([note] if note else [])))
            if packed:
                print("\n".join(table(ceilings, list(packed.values()), extra, args.batch)[6:-1]))
                print("\n".join(mode_lines(phases_[-1], packed)))
            points = {
                label: (m.intensity, m.flops_per_s)
                for label, m in zip(labels + extra, phases_ + list(packed.values()))
            }
            path = out_dir / f"roofline-{device}.png"
            phase(f"plot ({device})", lambda: plot(points, ceilings, path))
            print(f"  plot: {path}")
            print(f"  measured in {duration(time.perf_counter() - clock)} (estimated {duration(total)})\n")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0
