"""Releasing the pages of a memory-mapped tensor (solutions.system.loading.mapped_pages), on a small safetensors file."""

from __future__ import annotations

import mmap
import re
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from solutions.system.loading.mapped_pages import page_range, release


def test_page_range_keeps_only_whole_pages():
    """Pages a tensor shares with its neighbours at either end are never released."""
    assert page_range(4096 + 10, 3 * 4096, page=4096) == (8192, 8192)
    assert page_range(8192, 8192, page=4096) == (8192, 8192)
    assert page_range(100, 4000, page=4096) == (4096, 0)


def resident_file_kb() -> int:
    return int(re.search(r"RssFile:\s+(\d+)", open("/proc/self/status").read()).group(1))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="release does nothing off Linux")
def test_released_pages_leave_resident_memory_and_keep_their_values(tmp_path):
    """After release, the mapped tensor's pages are no longer resident, and reading it again
    faults them back in from the file with the same values."""
    want = torch.arange(4 << 20, dtype=torch.int32)  # 16 MiB
    save_file({"w": want}, str(tmp_path / "w.safetensors"))
    with safe_open(str(tmp_path / "w.safetensors"), framework="pt") as f:
        w = f.get_tensor("w")
    assert int(w.sum()) == int(want.sum())  # touch every page
    before = resident_file_kb()
    released = release(w)
    assert released >= w.numel() * 4 - 2 * mmap.PAGESIZE
    assert before - resident_file_kb() >= released // 1024 // 2, "the pages are still resident"
    assert torch.equal(w, want), "released pages came back with other values"
