"""What a prompt leaves open, its hidden suite must accept: variants of the reference that pass.

A README that says "either passes" or "not graded" makes a promise about the suite. Each variant
below is the reference with a few exact-text edits (dojo.grading.proof.mutant's format) that takes the other
branch of such a sentence; the kata's whole suite must pass on it. (check_katas proves the
opposite direction: each known bug fails.) Left out: latitude a test cannot show (wording of
messages, speed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dojo.grading.proof.mutant import apply

ROOT = Path(__file__).resolve().parents[2]

VARIANTS = {
    # kv_cache README: layers writing out of order, or with unequal T_new, "a cache may allow or refuse".
    "kv_cache strict layer order and T_new": (
        "kv_cache",
        [
            (
                "        end = start + shape[2]\n",
                "        if layer > 0 and self._lens[layer - 1] != start + shape[2]:\n"
                "            raise ValueError(f'layer {layer} must write after layer {layer - 1}, the same T_new')\n"
                "        end = start + shape[2]\n",
            )
        ],
    ),
    # generate README: beams may start at HF's -1e9 instead of -inf.
    "generate beams start at -1e9": (
        "generate",
        [
            (
                '    running_scores = torch.full((B, nb), float("-inf"))\n',
                "    running_scores = torch.full((B, nb), -1e9)\n",
            )
        ],
    ),
    # generate README: any order among candidates with exactly equal scores.
    "generate ties: lower (beam, token) first": (
        "generate",
        [
            (
                "        cand_scores, cand = logp.view(B, nb * V).topk(n_candidates, dim=-1)",
                "        cand_scores, cand = (t[:, :n_candidates] for t in"
                " logp.view(B, nb * V).sort(dim=-1, descending=True, stable=True))",
            )
        ],
    ),
    "generate ties: higher (beam, token) first": (
        "generate",
        [
            (
                "        cand_scores, cand = logp.view(B, nb * V).topk(n_candidates, dim=-1)",
                "        cand_scores, cand = (t[:, :n_candidates] for t in"
                " logp.view(B, nb * V).flip(-1).sort(dim=-1, descending=True, stable=True))\n"
                "        cand = nb * V - 1 - cand",
            )
        ],
    ),
    # paged_kv README: which free block `allocate` returns is the cache's choice (here the lowest id).
    "paged_kv allocates the lowest free block": (
        "paged_kv",
        [
            (
                "        block = self._free.pop()\n",
                "        block = min(self._free)\n        self._free.remove(block)\n",
            )
        ],
    ),
    # paged_kv README: forking in the middle of a forward pass is the cache's choice (here allowed).
    "paged_kv forks between layers": (
        "paged_kv",
        [
            (
                """        if max(parent.lens) != parent.tokens:
            raise ValueError(f"cannot fork sequence {parent_id} between the layers of a forward pass")
""",
                "",
            )
        ],
    ),
    # mixed_precision README: the optimizer's param_groups give the same list as the trainable parameters.
    "mixed_precision unscales the optimizer's parameters": (
        "mixed_precision",
        [
            (
                "    finite = scaler.unscale_(params)",
                '    finite = scaler.unscale_([p for group in optimizer.param_groups for p in group["params"]])',
            )
        ],
    ),
    # scheduler README: the order of the chunks inside prefills, decodes and preempted is free, and add may
    # refuse an arrival earlier than the previous one.
    "scheduler lists in reverse, arrivals checked": (
        "scheduler",
        [
            (
                "        self._plan = StepPlan(prefills, decodes, preempted)\n",
                "        self._plan = StepPlan(prefills[::-1], decodes[::-1], preempted[::-1])\n",
            ),
            (
                '        if request_id in self._requests:\n            raise ValueError(f"request {request_id!r} is already pending")\n',
                '        if request_id in self._requests:\n            raise ValueError(f"request {request_id!r} is already pending")\n'
                "        if arrival < getattr(self, '_last_arrival', arrival):\n            raise ValueError('arrivals go back in time')\n"
                "        self._last_arrival = arrival\n",
            ),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_suite_accepts_what_the_prompt_leaves_open(name, tmp_path):
    """Prompt latitude: a variant the README allows passes the kata's whole hidden suite"""
    slug, edits = VARIANTS[name]
    reference = ROOT / "solutions" / f"{slug}.py"
    (tmp_path / f"{slug}.py").write_text(apply(reference.read_text(), edits, name))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"tests/katas/test_{slug}.py",
            "--target",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, (
        f"the {slug} suite fails a variant its README allows ({name}):\n{out.stdout[-3000:]}"
    )
