"""The per-machine layout calibration: it picks the layout that measures fastest, and caches it.

The timings are injected (a fake timer with fixed seconds), so the choice is checked without a
busy machine deciding it; one smoke test runs the real timer. Files go to pytest's tmp_path.
"""

from __future__ import annotations

import json

import pytest
import torch

from solutions.system.kernels import calibration


def fake_timer(seconds: dict[tuple[str, int], float], calls: list | None = None):
    def timer(layout: str, rows: int) -> float:
        if calls is not None:
            calls.append((layout, rows))
        return seconds[layout, rows]

    return timer


# an Intel Xeon with MKL: column-major is as fast at 1 row and much faster at 4 rows, and MKL's
# packed GEMM faster still at 4 rows (no faster at 1)
INTEL = {
    ("row", 1): 19.6e-3,
    ("row", 4): 34.3e-3,
    ("col", 1): 19.6e-3,
    ("col", 4): 27.0e-3,
    ("packed", 1): 19.9e-3,
    ("packed", 4): 20.1e-3,
}
# an AMD EPYC where that layout made a 4-row product 2.4x a 1-row one, row-major far less, and
# packing saves too little to be worth a second copy of the weights
AMD = {
    ("row", 1): 20.0e-3,
    ("row", 4): 26.0e-3,
    ("col", 1): 21.0e-3,
    ("col", 4): 50.0e-3,
    ("packed", 1): 22.0e-3,
    ("packed", 4): 24.5e-3,
}


def test_picks_the_column_major_layout_where_it_wins():
    """Where column-major's 1-row + 4-row time is least (MKL on Intel), the calibration picks it."""
    found = calibration.calibrate(fake_timer(INTEL), repeats=3, candidates=calibration.LAYOUTS)
    assert found.layout == "col", found
    assert found.seconds["col 4"] == INTEL["col", 4]
    assert found.packed_rows == (), "packing was chosen though it was not measured"


def test_packs_the_row_counts_where_mkl_packed_gemm_wins():
    """Packed 4-row products beat column-major's by 26 %: 4 rows are packed, 1 row (slower packed) is not."""
    found = calibration.calibrate(fake_timer(INTEL), repeats=3, candidates=(*calibration.LAYOUTS, "packed"))
    assert (found.layout, found.packed_rows) == ("col", (4,)), found
    assert "4-row products MKL-packed" in found.summary()


def test_a_small_gain_does_not_pack():
    """Packing saves 6 % at 4 rows on the AMD figures, under PACK_GAIN: not worth a copy of the weights."""
    found = calibration.calibrate(fake_timer(AMD), repeats=3, candidates=(*calibration.LAYOUTS, "packed"))
    assert (found.layout, found.packed_rows) == ("row", ()), found


def test_picks_the_row_major_layout_where_it_wins():
    """Where column-major makes 4 rows cost 2.4x one row (the AMD machine), row-major is picked."""
    assert calibration.calibrate(fake_timer(AMD), repeats=3).layout == "row"


def test_every_pair_is_timed_interleaved_after_a_warm_up():
    """Each (layout, rows) pair runs once untimed, then the pairs take turns, repeats times."""
    calls: list = []
    calibration.calibrate(fake_timer(AMD, calls), repeats=2)
    pairs = [(kind, rows) for kind in calibration.kinds() for rows in calibration.ROWS]
    assert calls == pairs * 3, calls


def test_a_busy_moment_does_not_decide():
    """Runs slowed by other work are ignored: each pair counts its fastest run (row is faster,
    but two of its three 1-row runs were slowed down)."""
    runs = iter([1.0] * 4 + [9.0, 1.0, 1.5, 1.5] * 2 + [1.0, 1.0, 1.5, 1.5])  # warm-up, then 3 rounds
    found = calibration.calibrate(lambda layout, rows: next(runs), repeats=3, candidates=calibration.LAYOUTS)
    assert found.layout == "row" and found.seconds["row 1"] == 1.0, found


def test_cached_per_machine(tmp_path, monkeypatch):
    """The choice is measured once per machine key and read back after; another CPU measures again."""
    calls: list = []
    first = calibration.load_or_calibrate(tmp_path, fake_timer(INTEL, calls))
    n = len(calls)
    again = calibration.load_or_calibrate(tmp_path, fake_timer(AMD, calls))
    assert again == first and len(calls) == n, "a cached machine was measured again"
    monkeypatch.setattr(calibration, "cpu_model", lambda: "AMD EPYC 9R14")
    other = calibration.load_or_calibrate(tmp_path, fake_timer(AMD, calls))
    assert other.layout == "row" and other.machine["cpu"] == "AMD EPYC 9R14"
    assert len(json.loads(calibration.calibration_path(tmp_path).read_text())) == 2, "one entry per machine"


def test_packed_rows_are_read_back_and_an_older_calibration_is_measured_again(tmp_path, monkeypatch):
    """The packed row counts survive the JSON file; an entry an older calibration wrote (another
    VERSION in its key, no packed rows) is not trusted: the machine is measured again."""
    monkeypatch.setattr(calibration, "kinds", lambda: (*calibration.LAYOUTS, "packed"))  # with or without MKL
    first = calibration.load_or_calibrate(tmp_path, fake_timer(INTEL))
    assert first.packed_rows == (4,) and calibration.load_or_calibrate(tmp_path, fake_timer(AMD)) == first
    monkeypatch.setattr(calibration, "VERSION", "3")
    calls: list = []
    assert calibration.load_or_calibrate(tmp_path, fake_timer(AMD, calls)).packed_rows == ()
    assert calls, "an older calibration's entry was taken as this one's"


def test_a_damaged_file_is_measured_again_with_a_message(tmp_path):
    """An unreadable calibration file is replaced, and the log says so."""
    calibration.calibration_path(tmp_path).write_text("{not json")
    said: list[str] = []
    found = calibration.load_or_calibrate(tmp_path, fake_timer(INTEL), log=said.append)
    assert found.layout == "col"
    assert any("unreadable" in s for s in said), said
    assert json.loads(calibration.calibration_path(tmp_path).read_text())


def test_apply_layout_keeps_values_and_sets_memory_order():
    """apply_layout changes strides only; an unknown layout is a ValueError."""
    w = torch.arange(12.0).reshape(3, 4)
    col = calibration.apply_layout(w, "col")
    assert torch.equal(col, w) and col.t().is_contiguous()
    row = calibration.apply_layout(col, "row")
    assert torch.equal(row, w) and row.is_contiguous()
    with pytest.raises(ValueError, match="layout"):
        calibration.apply_layout(w, "diagonal")


def test_the_real_timer_measures():
    """The default timer runs SmolLM2's per-layer products and returns positive seconds."""
    timer = calibration.matmul_timer(layers=1)
    assert all(timer(kind, rows) > 0 for kind in calibration.kinds() for rows in calibration.ROWS)
