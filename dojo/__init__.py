"""decode-dojo: the practice loop, grading harness and progress tracking around the katas."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KATAS_DIR = ROOT / "katas"
SOLUTIONS_DIR = ROOT / "solutions"
TESTS_DIR = ROOT / "tests"


def timing_lock_path() -> Path:
    """The machine-wide lock file every timing test holds ($DOJO_TIMING_LOCK, or /tmp/decode-dojo-timing.lock):
    one definition for the suites (dojo.testing) and the grader that holds it for a sandboxed child
    (dojo.grading.machine_lock)."""
    return Path(os.environ.get("DOJO_TIMING_LOCK") or "/tmp/decode-dojo-timing.lock")


__all__ = ["ROOT", "KATAS_DIR", "SOLUTIONS_DIR", "TESTS_DIR", "timing_lock_path"]
