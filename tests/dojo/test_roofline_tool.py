"""`dojo roofline`: the command runs end to end at small sizes, and its table says what it measured."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from dojo import ROOT
from dojo.tools.roofline import Ceilings, best_of, table
from solutions.model import LlamaConfig
from solutions.roofline import Measurement, phase_cost


def test_roofline_command_prints_the_table_and_saves_the_plot(tmp_path):
    """dojo roofline --random-weights: an estimate before measuring, ceilings, both phases with verdicts, a PNG
    under the workspace, and the time taken beside the estimate"""
    env = {**os.environ, "DOJO_WORKSPACE": str(tmp_path), "NO_COLOR": "1"}
    cmd = [
        sys.executable,
        "-m",
        "dojo",
        "roofline",
        "--random-weights",
        "--prompt-tokens",
        "8",
        "--copy-mib",
        "8",
        "--matmul-n",
        "128",
        "--repeats",
        "1",
        "--threads",
        "1",
    ]
    done = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    out = done.stdout
    for want in (
        "bandwidth",
        "peak",
        "ridge",
        "prefill 8 tokens, fp32",
        "decode after 8, fp32",
        "cpu (1 thread)",
        "copy of 8 MiB",
        "n = 128",
        "tokens/s",
    ):
        assert want in out, f"{want!r} missing from:\n{out}"
    estimate = next(line for line in out.splitlines() if line.startswith("cpu: about "))
    assert "to measure 2 phases (2 passes each" in estimate and "8-token prefill" in estimate, estimate
    assert re.search(r"measured in \d+ s \(estimated \d+ s\)", out), out
    rows = [line for line in out.splitlines() if line.startswith(("  prefill 8", "  decode after 8"))]
    assert len(rows) == 2 and all(
        row.endswith(("memory-bound", "compute-bound", "a busy machine bounds it")) for row in rows
    ), rows
    plot = tmp_path / "roofline" / "roofline-cpu.png"
    assert f"plot: {plot}" in out, out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{plot} is not a PNG"


def test_table_shares_and_verdicts():
    """The table divides achieved by attainable FLOP/s and names the bound side of the ridge"""
    smol = LlamaConfig.smollm2_135m()
    ceilings = Ceilings(
        "cpu", "cpu (2 threads)", bandwidth=1e10, peak_flops=1e11, copy_bytes=1 << 30, matmul_n=2048
    )
    prefill_cost = phase_cost(smol, "prefill", 1, 512, 0)
    decode_cost = phase_cost(smol, "decode", 1, 1, 512)
    prefill = Measurement("prefill", prefill_cost.flops / 5e10, prefill_cost)  # half the peak
    decode = Measurement("decode", decode_cost.bytes / 5e9, decode_cost)  # half the bandwidth
    lines = table(ceilings, [prefill, decode], ["prefill 512", "decode after 512"], batch=1)
    rows = {
        " ".join(line.split()[:2]): line for line in lines if line.startswith(("  prefill", "  decode after"))
    }
    assert "50%" in rows["prefill 512"] and rows["prefill 512"].endswith("compute-bound"), rows
    assert "50%" in rows["decode after"] and rows["decode after"].endswith("memory-bound"), rows
    assert "ridge" in lines[3] and "10 FLOP/byte" in lines[3], lines[3]
    tokens = next(line for line in lines if "tokens/s" in line)
    assert tokens.split()[1] == f"{5e9 / decode_cost.bytes:.3g}", tokens  # half the ceiling's tokens/s


def test_a_phase_far_below_its_roof_is_bound_by_neither_ceiling():
    """a phase under a quarter of its attainable roof is not called memory-bound (or compute-bound): the
    table says it is below both ceilings and what bounds it instead"""
    smol = LlamaConfig.smollm2_135m()
    ceilings = Ceilings("cpu", "cpu", bandwidth=1e10, peak_flops=1e11, copy_bytes=1 << 30, matmul_n=2048)
    cost = phase_cost(smol, "decode", 1, 1, 512)
    rows = {}
    for share in (0.02, 0.24, 0.26):
        (line,) = table(ceilings, [Measurement("decode", cost.bytes / (share * 1e10), cost)], ["d"], 1)[6:7]
        rows[share] = line
    assert rows[0.02].endswith("below both ceilings: dispatch or a busy machine bounds it"), rows[0.02]
    assert "below both" in rows[0.24] and rows[0.26].endswith("memory-bound"), rows


def test_best_of_keeps_the_higher_ceiling_and_warns_when_they_moved():
    """Two measurements of the ceilings: keep the higher of each; warn only if they differ by over 20%"""
    before = Ceilings(
        "cpu", "cpu (1 thread)", bandwidth=4e9, peak_flops=1e11, copy_bytes=1 << 20, matmul_n=64
    )
    after = Ceilings(
        "cpu", "cpu (1 thread)", bandwidth=1e10, peak_flops=0.9e11, copy_bytes=1 << 20, matmul_n=64
    )
    best, note = best_of(before, after)
    assert (best.bandwidth, best.peak_flops) == (1e10, 1e11), best
    assert "busy" in note and "bandwidth 4 GB/s then 10 GB/s" in note and "peak" not in note, note
    assert best_of(before, before)[1] == "", "identical measurements need no warning"


def test_mode_lines_put_the_speed_up_beside_the_bytes_ratio():
    """Each packed mode's line says how many times fewer bytes its decode moved and how much faster it ran"""
    from dojo.tools.roofline import mode_lines
    from solutions.roofline import Cost

    fp32 = Measurement("decode", 0.030, Cost(270_000_000, 540_000_000))
    int4 = Measurement("decode", 0.012, Cost(270_000_000, 125_000_000))
    (line,) = mode_lines(fp32, {"int4": int4})
    assert "int4" in line and "4.32x fewer bytes" in line and "2.50x faster" in line, line


def test_a_slower_mode_says_slower_not_a_fraction_faster():
    """a mode that took longer than fp32 reads "1.39x slower", never "0.72x faster" (a factor below 1)"""
    from dojo.tools.roofline import mode_lines
    from solutions.roofline import Cost

    fp32 = Measurement("decode", 0.030, Cost(270_000_000, 540_000_000))
    int4 = Measurement("decode", 0.030 / 0.72, Cost(270_000_000, 125_000_000))
    (line,) = mode_lines(fp32, {"int4": int4})
    assert "ran 1.39x slower" in line and "faster" not in line, line
    (same,) = mode_lines(fp32, {"int4": Measurement("decode", 0.0301, int4.cost)})
    assert "ran as fast (1.00x)" in same, same


def test_plan_scales_the_probe_by_the_roofline():
    """a pass is estimated as the probe's seconds times the ratio of their roofline times: 16x the FLOPs of a
    compute-bound probe take 16x as long, and a bandwidth-bound pass scales with its bytes; a decode phase
    is one context prefill then 1 + repeats steps"""
    from dojo.tools.roofline_progress import plan
    from solutions.roofline import Cost

    c = Ceilings("cpu", "cpu", bandwidth=1e10, peak_flops=1e11, copy_bytes=1 << 20, matmul_n=64)
    prefill = (
        0.5,
        Cost(10**11, 10**9),
        Cost(16 * 10**11, 10**9),
    )  # compute-bound both: 1 s then 16 s of roof
    decode = (0.02, Cost(10**8, 5 * 10**8), Cost(10**8, 10**9))  # bandwidth-bound both: 0.05 s then 0.1 s
    assert plan("prefill", 2, prefill, decode, c) == [8.0, 8.0, 8.0]
    assert plan("decode", 2, prefill, decode, c) == pytest.approx([8.0, 0.04, 0.04, 0.04])


def test_a_measured_phase_moves_its_bar_pass_by_pass():
    """measure_phase through Counted: the bar advances after every pass (the context prefill, the warm-up and
    each timed step), by each pass's estimate, and ends at the plan's total"""
    from dojo.tools.roofline_progress import Counted
    from solutions import roofline
    from solutions.model import tiny_model

    seen = []
    steps = [3.0, 0.5, 0.5, 0.5]  # the context prefill, a warm-up step, two timed steps
    m = roofline.measure_phase(
        Counted(tiny_model(0), steps, lambda d, t: seen.append((d, t))), "decode", 1, 1, 4, 2
    )
    assert m.phase == "decode" and m.seconds > 0
    assert seen == [(3.0, 4.5), (3.5, 4.5), (4.0, 4.5), (4.5, 4.5)], seen


def test_mode_decode_credits_the_modes_own_weight_bytes():
    """A packed model's decode is credited with fp32's FLOPs and its own weight bytes, not fp32's"""
    from dojo.tools.roofline import mode_decode
    from solutions.model import tiny_model
    from solutions.system.kernels.weight_modes import BF16Linear, weight_bytes

    fp32 = tiny_model(0)
    packed = tiny_model(0)
    for layer in packed.layers:
        for name in ("wqkv", "wo", "w_gate_up", "w_down"):
            w = getattr(layer, name).detach()
            delattr(layer, name)
            setattr(layer, name, BF16Linear(w))
    m = mode_decode(packed, "bf16", weight_bytes(fp32), 4, 1, 1)
    want = phase_cost(fp32.config, "decode", 1, 1, 4)
    assert m.cost.flops == want.flops
    assert m.cost.bytes == want.bytes - weight_bytes(fp32) + weight_bytes(packed) < want.bytes


def test_plot_labels_clear_the_markers_and_name_the_mode(tmp_path):
    """Crowded decode points (fp32, bf16, int4 a factor 2 apart): after place_labels no label covers a
    marker or another label, and every label is still there"""
    from dojo.tools.labels import overlaps, place_labels
    from dojo.tools.roofline import plot

    points = {
        "prefill 512 tokens, fp32": (250.0, 9e10),
        "decode after 512, fp32": (0.52, 7e9),
        "decode after 512, bf16": (1.04, 6.5e9),
        "decode after 512, int4": (2.6, 1.6e10),
    }
    from solutions.roofline import plot_roofline

    crowded = plot_roofline(points, 1.5e11, 2e10, tmp_path / "before.png")
    assert overlaps(crowded), "the test's points should collide before the labels are placed"
    place_labels(crowded)
    assert overlaps(crowded) == []
    assert {t.get_text() for t in crowded.axes[0].texts} >= set(points)
    ceilings = Ceilings("cpu", "cpu", bandwidth=2e10, peak_flops=1.5e11, copy_bytes=1 << 20, matmul_n=64)
    plot(points, ceilings, tmp_path / "after.png")
    assert (tmp_path / "after.png").read_bytes()[:4] == b"\x89PNG"


def test_folder_bytes_counts_every_file(tmp_path):
    """the cache's size on disk is the sum of its files, nested ones included; 0 for no folder"""
    from dojo.tools.roofline import folder_bytes

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"0" * 1000)
    (tmp_path / "y.bin").write_bytes(b"0" * 24)
    assert folder_bytes(tmp_path) == 1024 and folder_bytes(tmp_path / "missing") == 0
