"""Where a kata's implementation comes from, and loading it by file path.

A *target* names the implementation a hidden suite grades: `solutions` (the reference),
`katas` (the pristine stubs), `workspace` (the learner's copies), a directory holding
`<slug>.py` files (a take-home submission), or one `.py` file (a mutant, or a single answer).
Loading goes by path, so a learner's file is graded even when it is not importable as a package.
Notebook extraction lives in dojo.notebook; this module only sees `.py` files.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from dojo import KATAS_DIR, ROOT

NAMED_TARGETS = ("solutions", "katas", "workspace")


def workspace_dir() -> Path:
    """The learner's workspace: $DOJO_WORKSPACE, or workspace/ at the repository root."""
    return Path(os.environ.get("DOJO_WORKSPACE") or ROOT / "workspace").resolve()


def katas_dir() -> Path:
    """The kata folders and katas.toml: $DOJO_KATAS_DIR (the runner's own tests use a toy one), or katas/."""
    return Path(os.environ.get("DOJO_KATAS_DIR") or KATAS_DIR).resolve()


def solutions_dir() -> Path:
    """The reference solutions: solutions/ beside the katas folder."""
    return katas_dir().parent / "solutions"


def suites_dir() -> Path:
    """The hidden suites (test_<slug>.py) and their mutants: tests/katas/ beside the katas folder."""
    return katas_dir().parent / "tests" / "katas"


def resolve(slug: str, target: str) -> Path:
    """The file that implements `slug` for `target`.

    Raises ValueError when the target is neither a named target nor an existing path, and
    FileNotFoundError (with the command that fixes it) when the file is missing.
    """
    if target == "solutions":
        path = solutions_dir() / f"{slug}.py"
    elif target == "katas":
        path = katas_dir() / slug / f"{slug}.py"
    elif target == "workspace":
        path = workspace_dir() / f"{slug}.py"
        if not path.exists():
            raise FileNotFoundError(
                f"no workspace copy of '{slug}' at {path}: run `dojo start {slug}` first "
                f"(or `dojo notebook {slug}` to solve it in a notebook)"
            )
    else:
        given = Path(target).expanduser()
        if given.is_dir():
            path = given / f"{slug}.py"
        elif given.suffix == ".py" and given.exists():
            path = given
        else:
            raise ValueError(
                f"unknown target {target!r}: use one of {', '.join(NAMED_TARGETS)}, "
                "a directory of kata files, or a .py file"
            )
    if not path.exists():
        raise FileNotFoundError(f"no implementation of '{slug}' at {path}")
    return path.resolve()


def load_module(path: Path, name: str) -> ModuleType:
    """Import the file at `path` as a fresh module called `name` (replacing any earlier one)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
