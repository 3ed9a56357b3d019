"""decode-dojo: the practice loop, grading harness and progress tracking around the katas."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KATAS_DIR = ROOT / "katas"
SOLUTIONS_DIR = ROOT / "solutions"
TESTS_DIR = ROOT / "tests"

__all__ = ["ROOT", "KATAS_DIR", "SOLUTIONS_DIR", "TESTS_DIR"]
