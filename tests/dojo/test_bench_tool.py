"""`dojo bench batching|latency`: the commands run end to end at small sizes; the table's arithmetic."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dojo import ROOT
from dojo.tools.bench import Ceilings, batching_rows, batching_table
from solutions.model import LlamaConfig
from solutions.roofline import phase_cost

SMALL = [
    "--layers",
    "1",
    "--vocab",
    "512",
    "--repeats",
    "1",
    "--threads",
    "1",
    "--matmul-n",
    "64",
    "--copy-mib",
    "4",
]


def bench(tmp_path, *args: str) -> str:
    env = {**os.environ, "DOJO_WORKSPACE": str(tmp_path), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "dojo", "bench", *args, *SMALL],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def assert_png(out: str, path) -> None:
    assert f"plot: {path}" in out, out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"


@pytest.mark.parametrize(
    "what, args, wants",
    [
        (
            "batching",
            ["--batch-sizes", "1,2", "--context", "4"],
            [
                "1 layers, vocab 512",
                "1 thread;",
                "tokens/s",
                "roofline tok/s",
                # a verdict per row; which one depends on the ceilings measured here (a 4 MiB copy
                # that stays in cache can put even batch 1 of this tiny model right of the ridge)
                "-bound",
                "compute-bound from:",
                "KV cache per sequence",
            ],
        ),
        (
            "latency",
            ["--prompts", "4,8", "--new-tokens", "2"],
            ["TTFT ms", "TPOT ms", "2 new tokens per request", "ridge"],
        ),
    ],
)
def test_bench_prints_a_table_and_saves_the_plot(tmp_path, what, args, wants):
    """dojo bench <what> at small sizes: a table with one row per point, and a PNG under the workspace"""
    out = bench(tmp_path, what, *args)
    for want in wants:
        assert want in out, f"{want!r} missing from:\n{out}"
    rows = [line.split() for line in out.splitlines() if line.strip().split(" ")[0].isdigit()]
    assert [r[0] for r in rows] == (["1", "2"] if what == "batching" else ["4", "8"]), out
    assert_png(out, tmp_path / "bench" / f"{what}.png")


def test_bench_needs_a_what():
    """dojo bench without saying what to measure is a usage error"""
    done = subprocess.run(
        [sys.executable, "-m", "dojo", "bench"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "WHAT" in done.stderr, done.stderr


def test_batching_rows_follow_the_roofline():
    """Each row's roofline tokens/s is batch / max(FLOPs / peak, bytes / bandwidth); verdicts flip at the ridge"""
    smol = LlamaConfig.smollm2_135m()
    ceilings = Ceilings(peak_flops=1.5e11, bandwidth=1.2e10)  # crossover at batch 26 on an empty cache
    rows = batching_rows(smol, {1: 20.0, 25: 400.0, 26: 410.0}, 0, ceilings)
    cost = phase_cost(smol, "decode", 1, 1, 0)
    assert rows[0]["predicted"] == pytest.approx(1.2e10 / cost.bytes)
    assert [r["bound"] for r in rows] == ["memory", "memory", "compute"]
    assert rows[1]["step_ms"] == pytest.approx(25 / 400 * 1e3)
    lines = batching_table(rows)
    assert lines[2].split()[3] == "20.00", lines  # 400 tokens/s at batch 25 = 20x batch 1's per-row rate
