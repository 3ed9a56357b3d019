"""Fixtures the hidden kata suites share. Grading copies this file with the suites."""

from __future__ import annotations

import pytest
import torch

from dojo.grading.judging.judge import KataFolder


@pytest.fixture(scope="module")
def one_thread():
    """Torch at one thread for a suite: the same for every implementation, and steady on a shared
    machine, where tiny models lose far more to thread hand-offs than they gain from a second core."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def kata_dir(tmp_path) -> KataFolder:
    """A folder the kata's code can read and write (in its own process under judge mode): pass
    kata_dir.path(name) to it; write and read its files with kata_dir.write_text / read_bytes."""
    return KataFolder(tmp_path)
