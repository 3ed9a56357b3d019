"""The runner's own tests: they drive `python -m dojo` as a subprocess against a toy kata.

Each test gets a private copy of tests/dojo/toy/ (a katas folder, its reference, suite and mutant)
and an empty workspace, through DOJO_KATAS_DIR and DOJO_WORKSPACE, so no test touches the real
katas or another test's files. The toy tree itself is never collected as tests.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

collect_ignore = ["toy"]

TOY = Path(__file__).parent / "toy"


class Dojo:
    """A sandbox: toy catalog + workspace, and a way to run the CLI in it."""

    def __init__(self, root: Path):
        self.toy = root / "toy"
        shutil.copytree(TOY, self.toy, ignore=shutil.ignore_patterns("__pycache__"))
        self.workspace = root / "workspace"
        self.env = {
            **os.environ,
            "DOJO_KATAS_DIR": str(self.toy / "katas"),
            "DOJO_WORKSPACE": str(self.workspace),
            "DOJO_MEMORY_LIMIT": str(1 << 30),  # a runaway allocation fails fast
            "DOJO_CHECK_CACHE": str(root / "check-cache.json"),
            "NO_COLOR": "1",
        }

    @property
    def reference(self) -> Path:
        return self.toy / "solutions" / "toy.py"

    @property
    def suite(self) -> Path:
        return self.toy / "tests" / "katas" / "test_toy.py"

    @property
    def db(self) -> Path:
        return self.workspace / ".dojo" / "progress.sqlite"

    def file(self, slug: str = "toy") -> Path:
        return self.workspace / f"{slug}.py"

    def results(self, slug: str = "toy") -> Path:
        return self.workspace / "results" / f"{slug}.json"

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "dojo", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            **kw,
        )

    def __call__(self, *args: str, timeout: float = 60, module: str = "dojo") -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )

    def write(self, source: str, slug: str = "toy") -> Path:
        path = self.file(slug)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        return path

    def attempts(self) -> list[tuple]:
        with sqlite3.connect(self.db) as conn:
            return conn.execute(
                "SELECT kata, mode, points, total, passed FROM attempts ORDER BY id"
            ).fetchall()


@pytest.fixture
def dojo(tmp_path: Path) -> Dojo:
    return Dojo(tmp_path)


@pytest.fixture
def toy_env(dojo, monkeypatch):
    """The toy catalog and the sandbox workspace for in-process calls too."""
    monkeypatch.setenv("DOJO_KATAS_DIR", dojo.env["DOJO_KATAS_DIR"])
    monkeypatch.setenv("DOJO_WORKSPACE", dojo.env["DOJO_WORKSPACE"])
    dojo.workspace.mkdir(parents=True, exist_ok=True)
    return dojo


@pytest.fixture
def toy(dojo, monkeypatch):
    """The toy catalog for in-process sandboxed gradings (test_sandbox, test_judge): skipped with the reason
    where bwrap cannot run, failed instead under DOJO_REQUIRE_SANDBOX=1 (.ci/run)."""
    from dojo.grading.confine import sandbox

    why = sandbox.unavailable()
    if why:
        if os.environ.get("DOJO_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"DOJO_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {why}")
        pytest.skip(f"no sandbox on this machine: {why}")
    monkeypatch.setenv("DOJO_KATAS_DIR", dojo.env["DOJO_KATAS_DIR"])
    return dojo
