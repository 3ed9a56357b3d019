"""The prompts as a learner gets them: stubs that point to what a learner has, one text per rule.

A learner works in workspace/ with a copy of the stub and the prompt that `dojo start` prints (or a
notebook's first cell); katas/<slug>/README.md is not there. These tests read the stubs and READMEs
as text. The worked examples' numbers are tests/system/test_readme_examples.py's job.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from dojo.testing import banned_uses

ROOT = Path(__file__).resolve().parents[2]
KATAS = ROOT / "katas"
SLUGS = sorted(p.parent.name for p in KATAS.glob("*/README.md"))


@pytest.mark.parametrize("slug", SLUGS)
def test_stub_points_to_the_prompt_not_a_path_the_workspace_lacks(slug):
    """Stubs: the docstrings send a learner to `dojo start <slug>` / the notebook, never to README.md"""
    text = " ".join((KATAS / slug / f"{slug}.py").read_text().split())
    assert not re.search(r"README|katas/", text), f"katas/{slug}/{slug}.py names a file the workspace lacks"
    assert f"`dojo start {slug}` prints" in text, f"katas/{slug}/{slug}.py does not say where the prompt is"


def test_int4_stub_and_readme_give_one_rounding_rule():
    """int4: the stub, the README and the reference state llama.cpp's rounding in the same words"""
    rule = "q = trunc((w - min) * (1 / d) + 0.5)"
    for path in (KATAS / "int4" / "int4.py", KATAS / "int4" / "README.md", ROOT / "solutions" / "int4.py"):
        assert rule in path.read_text(), f"{path.relative_to(ROOT)} does not state {rule}"
        assert "(w - min) / d" not in path.read_text(), f"{path.relative_to(ROOT)} also states (w - min) / d"


def attention_banned_names() -> set[str]:
    spec = importlib.util.spec_from_file_location(
        "attention_suite", ROOT / "tests" / "katas" / "test_attention.py"
    )
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    return suite.BANNED


def test_attention_stub_docstrings_do_not_trip_the_banned_check(tmp_path):
    """attention: the stub names the banned kernels in its docstrings; the suite's source check ignores them"""
    banned = attention_banned_names()
    stub = KATAS / "attention" / "attention.py"
    assert "scaled_dot_product_attention" in stub.read_text() and "nn.MultiheadAttention" in stub.read_text()
    assert banned_uses(stub, banned) == [], (
        "the attention suite's banned check trips over the stub's own text"
    )
    planted = tmp_path / "attention.py"  # the check still works: a real call in the same file is found
    planted.write_text(
        stub.read_text() + "\n\ndef cheat(q, k, v):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
    )
    assert banned_uses(planted, banned) == [
        f"line {len(stub.read_text().splitlines()) + 4}: scaled_dot_product_attention"
    ]
