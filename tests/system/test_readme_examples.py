"""Every kata README's worked examples (and katas/CONFIG.md's), run on the reference, compared doctest-style.

A README's ```python blocks that hold `>>>` lines are its worked examples. They run in order, in one
namespace per README, seeded with the reference module's names (`solutions/<slug>.py`) and `torch`,
`np`, `LlamaConfig` and `tiny_model`; a block fenced as ```` ```python setup ```` (a toy model the
examples use) runs first, as written. What an example prints is compared with the text below it,
doctest-style (`...` matches anything; runs of whitespace are equal), after two README
conventions: a `  # comment` after the output, and a line that starts with `#`, are prose; an
output line `SomeError: message` means the call raises that (doctest's traceback header implied).
So a number in a README that drifts from what the reference computes fails here.

Not checked: numbers in prose outside the blocks (they are checked by hand, or moved into a block).
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dojo import catalog
from dojo.notebook import build as nbbuild
from solutions.model import LlamaConfig, tiny_model

KATAS = Path(__file__).resolve().parents[2] / "katas"
FENCE = re.compile(r"^```python( setup)?[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
ERROR_LINE = re.compile(r"^[A-Z]\w*(Error|Exception): ")
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(readme: str) -> tuple[list[str], list[tuple[int, str]]]:
    """(setup blocks, (0-based line, text) of each example block) of a README, in file order."""
    setup, examples = [], []
    for m in FENCE.finditer(readme):
        if m.group(1):
            setup.append(m.group(2))
        elif re.search(r"^>>> ", m.group(2), re.MULTILINE):
            examples.append((readme.count("\n", 0, m.start(2)), m.group(2)))
    return setup, examples


def as_doctest(block: str) -> str:
    """One example block in doctest's own syntax: comments out of the outputs, tracebacks spelt out.

    Prose lines become blank ones, so that doctest's line numbers stay the README's."""
    out: list[str] = []
    expecting = False  # inside an example's expected output
    for line in block.splitlines():
        if line.startswith((">>> ", "... ")) or line in (">>>", "..."):
            if not line.startswith("..."):
                expecting = True
            out.append(line)
            continue
        if line.startswith("#") or not expecting:
            out.append("")  # prose between examples
            expecting = False
            continue
        line = re.sub(r"\s{2,}#\s.*$", "", line).rstrip()
        if ERROR_LINE.match(line) and (not out or out[-1].startswith((">>> ", "... "))):
            out.append("Traceback (most recent call last):")
        out.append(line)
    return "\n".join(out) + "\n"


def namespace(slug: str) -> dict:
    reference = importlib.import_module(f"solutions.{slug}")
    names = {k: v for k, v in vars(reference).items() if not k.startswith("_")}
    return {**names, "torch": torch, "np": np, "LlamaConfig": LlamaConfig, "tiny_model": tiny_model}


def run_readme(path: Path, slug: str) -> tuple[int, str]:
    """(examples run, the report of every mismatch: empty when all match) for one README."""
    setup, examples = blocks(path.read_text())
    globs = namespace(slug)
    for code in setup:
        exec(compile(code, f"{path} (setup block)", "exec"), globs)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    count = 0
    for lineno, block in examples:  # one namespace: a block may use what an earlier one defined
        test = doctest.DocTestParser().get_doctest(
            as_doctest(block), globs, f"{slug} README", str(path), lineno
        )
        runner.run(test, out=report.append, clear_globs=False)
        globs = test.globs  # DocTest ran on a copy
        count += len(test.examples)
    return count, "".join(report)


SLUGS = sorted(p.parent.name for p in KATAS.glob("*/README.md"))


@pytest.mark.parametrize("slug", SLUGS)
def test_readme_examples_match_the_reference(slug, tmp_path, monkeypatch):
    """README examples: every `>>>` line in the kata's README prints what the reference prints"""
    monkeypatch.chdir(tmp_path)  # an example may save a file (roofline.png)
    torch.manual_seed(0)
    count, report = run_readme(KATAS / slug / "README.md", slug)
    assert count > 0, f"katas/{slug}/README.md has no `>>>` worked examples"
    assert not report, f"katas/{slug}/README.md's worked examples drifted from the reference:\n{report}"


def test_config_page_examples_match_the_model():
    """README examples: katas/CONFIG.md, the LlamaConfig page the prompts share, prints what the model has"""
    count, report = run_readme(KATAS / "CONFIG.md", "model")
    assert count > 0 and not report, f"katas/CONFIG.md's examples drifted from solutions.model:\n{report}"


@pytest.mark.parametrize("slug", ["batching", "int4", "latency", "roofline"])
def test_config_page_reaches_every_prompt_that_reads_a_config(slug):
    """Prompts: a README whose functions take a LlamaConfig links CONFIG.md, and the prompt shown holds it"""
    readme = (KATAS / slug / "README.md").read_text().rstrip("\n")
    assert "](../CONFIG.md)" in readme, (
        f"katas/{slug}/README.md computes from `config` but does not link ../CONFIG.md"
    )
    shown = catalog.get(slug).readme()
    assert shown.startswith(readme) and "| `n_kv_heads` |" in shown[len(readme) :], (
        f"Kata.readme() of {slug}: the prompt does not end with katas/CONFIG.md"
    )
    prompt_cell = nbbuild.build(catalog.get(slug), "")["cells"][0]["source"]
    assert "| `n_kv_heads` |" in "".join(prompt_cell), (
        f"dojo notebook {slug}: the prompt cell lacks katas/CONFIG.md"
    )


def test_dojo_start_prints_the_config_page(tmp_path):
    """Prompts: `dojo start roofline` (not a TTY: plain text) prints LlamaConfig's fields after the prompt"""
    env = {**os.environ, "DOJO_WORKSPACE": str(tmp_path / "workspace")}
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "start", "roofline"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "LlamaConfig: the fields a kata reads" in out.stdout and "n_kv_heads" in out.stdout, (
        f"dojo start roofline did not print katas/CONFIG.md:\n{out.stdout[-2000:]}"
    )


def test_a_planted_wrong_number_fails(tmp_path):
    """README examples: the check catches a number that drifts (a wrong output planted in a copy)"""
    readme = (KATAS / "kv_cache" / "README.md").read_text()
    assert "\n46080\n" in readme, "the planted-number check expects kv_cache's bytes_needed example"
    planted = tmp_path / "README.md"
    planted.write_text(readme.replace("\n46080\n", "\n46081\n"))
    count, report = run_readme(planted, "kv_cache")
    assert count > 0 and "46081" in report and "46080" in report, f"a wrong number went unnoticed:\n{report}"


def test_conventions_comment_and_error_lines():
    """README examples: a trailing `  # comment` and a `#` line are prose; `ValueError: ...` is a raise"""
    block = ">>> f(1)   # source comment\n2        # prose\n# more prose\n>>> g()\nValueError: bad g\n"
    assert as_doctest(block) == (
        ">>> f(1)   # source comment\n2\n\n>>> g()\nTraceback (most recent call last):\nValueError: bad g\n"
    )
