"""`dojo demo`: the chat answer streamed on the real SmolLM2, and `--mine` choosing whose parts run."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dojo import ROOT
from dojo.practice import history
from dojo.tools import demo
from solutions.system.kernels import native


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv("DOJO_WORKSPACE", str(tmp_path))
    return tmp_path


def record_pass(slug: str) -> None:
    now = time.time()
    history.record_attempt(
        slug,
        mode="check",
        target="workspace",
        started=now,
        ended=now,
        points=10,
        total=10,
        passed=True,
        tests=5,
        failed=0,
    )


def test_mine_without_passes_runs_the_reference(ws):
    """--mine with nothing passed uses every reference part and says why"""
    (ws / "kv_cache.py").write_text("class KVCache: ...\n")  # started, never passed
    parts = demo.choose_parts(mine=True)
    assert parts.mine == [] and parts.attention_fn is None and parts.cache_cls is None
    assert any("kv_cache" in n and "not passed" in n for n in parts.notes), parts.notes
    assert any("attention" in n and "no attention.py" in n for n in parts.notes), parts.notes


def test_mine_swaps_in_passed_katas(ws):
    """--mine loads the learner's passed attention, kv_cache and generate from the workspace"""
    for slug in ("attention", "kv_cache", "generate"):
        shutil.copy(ROOT / "solutions" / f"{slug}.py", ws / f"{slug}.py")
        record_pass(slug)
    parts = demo.choose_parts(mine=True)
    assert parts.mine == ["attention", "kv_cache", "generate"], parts.notes
    assert parts.cache_cls.__module__ == "dojo_demo_kv_cache"
    assert parts.generate.__module__ == "dojo_demo_generate"


def test_mine_falls_back_when_a_passed_file_breaks(ws):
    """A passed kata whose file no longer imports falls back to the reference, with the error"""
    (ws / "generate.py").write_text("raise RuntimeError('half-edited')\n")
    record_pass("generate")
    parts = demo.choose_parts(mine=True)
    assert "generate" not in parts.mine and parts.generate.__module__ == "solutions.generate"
    assert any("half-edited" in n for n in parts.notes), parts.notes


def args(**kw) -> argparse.Namespace:
    base = dict(sample=False, temperature=0.7, top_p=0.9, top_k=None, seed=None, beams=1, max_new_tokens=16)
    return argparse.Namespace(**(base | kw))


def test_options_map_to_generate():
    """--sample, --beams and --max-new-tokens become generate() arguments; clashing options are errors"""
    assert demo.generation_kwargs(args()) == dict(max_new_tokens=16)
    assert demo.generation_kwargs(args(beams=4)) == dict(max_new_tokens=16, strategy="beam", num_beams=4)
    assert demo.generation_kwargs(args(sample=True, seed=3))["strategy"] == "sample"
    with pytest.raises(ValueError, match="--beams"):
        demo.generation_kwargs(args(sample=True, beams=2))


def test_plan_speculative_for_greedy_by_default():
    """Greedy with no --weights runs fp32 verifying the default packed mode's drafts (int4-q8x2 with the
    compiled kernel, else int4); --weights runs a mode alone; --speculative clashes with --sample,
    --beams and a non-fp32 --weights"""
    from solutions.system.kernels import native
    from solutions.system.kernels.weight_modes import default_mode, draft_mode, int4_available

    def full(**kw):
        return args(**(dict(speculative=False, weights=None, mine=False) | kw))

    draft = "int4-q8x2" if native.kernel() else "int4" if int4_available() else "bf16"
    assert draft_mode() == draft
    assert demo.plan(full()) == (demo.Plan("fp32", draft) if draft != "bf16" else demo.Plan(default_mode()))
    assert demo.plan(full(speculative=True)) == demo.Plan("fp32", draft)
    assert demo.plan(full(weights="int4")) == demo.Plan("int4")
    assert demo.plan(full(sample=True)) == demo.Plan(default_mode())
    assert demo.plan(full(mine=True)) == demo.Plan(default_mode())
    assert demo.plan(full(beams=4)) == demo.Plan("fp32")  # beam search: fp32 unless --weights
    assert demo.plan(full(beams=4, weights="int4")) == demo.Plan("int4")
    for clash in (dict(sample=True), dict(beams=2), dict(weights="int4")):
        with pytest.raises(ValueError, match="--speculative"):
            demo.plan(full(speculative=True, **clash))


def test_beam_line_says_which_mode_ran():
    """With --beams the demo says how many beams ran on which weights"""
    assert demo.beam_line(4, demo.Plan("fp32")).startswith("beam search: 4 beams on fp32 weights")


def test_speculative_line_says_how_the_drafts_fared():
    """The speculative report: drafts accepted of drafted, target passes for the tokens, whose text it is"""
    from solutions.speculative import SpeculativeResult

    line = demo.speculative_line(demo.Plan("fp32", "int4"), SpeculativeResult(list(range(9)), 8, 6, 3))
    assert line == (
        "speculative: fp32 verified int4's drafts (k=4): 6 of 8 accepted (75%), 3 fp32 passes for "
        "9 tokens; the text is fp32's greedy text"
    ), line
    assert "1 fp32 pass for 1 token;" in demo.speculative_line(
        demo.Plan("fp32", "int4"), SpeculativeResult([5], 0, 0, 1)
    )


def test_stream_holds_back_split_characters():
    """Streaming prints text only once a multi-byte character is complete, and never the EOS"""
    pieces = {1: b"caf", 2: b"\xc3", 3: b"\xa9!"}

    class Bytes:
        def decode(self, ids):
            return b"".join(pieces[i] for i in ids).decode("utf-8", errors="replace")

    shown = []
    stream = demo.TextStream(Bytes(), eos=0, write=shown.append)
    for tok in (1, 2, 3, 0):
        stream(0, tok)
    assert shown == ["caf", "\u00e9!"], shown


def test_decode_line_without_decode_steps_shows_no_nan():
    """One new token means no decode step to time: tokens/s reads "-", never nan; otherwise steps / seconds"""
    assert demo.decode_line(1, 1, 0.0) == "decode: 1 new token (0 decode steps in 0.00 s): - tokens/s"
    assert "nan" not in demo.decode_line(1, 4, 0.0) and "4 beams" in demo.decode_line(1, 4, 0.0)
    assert demo.decode_line(9, 1, 0.5) == "decode: 9 new tokens (8 decode steps in 0.50 s): 16.0 tokens/s"
    assert demo.decode_line(2, 1, 0.25).endswith("(1 decode step in 0.25 s): 4.0 tokens/s")


@pytest.mark.slow
def test_demo_on_smollm2(tmp_path):
    """One workspace, three `dojo demo` runs (each builds caches a fresh workspace lacks, so they share one):
    `--weights fp32 --verbose` says the mode, its decode step (the fused native step where the kernel is
    built, else the BLAS layout's calibration), start-up times and peak RSS, and caches the weights; then the default plan (fp32 verifying int4's drafts) answers the capital question, naming
    Paris, with prompt tokens, time to first token and tokens/s, mapping the cached fp32 weights and
    tokenizer (no "cached" line for them); an unknown mode is a clear error"""
    dojo = Path(sys.executable).with_name("dojo")
    cmd = [str(dojo)] if dojo.exists() else [sys.executable, "-m", "dojo"]
    env = os.environ | {"DOJO_WORKSPACE": str(tmp_path), "NO_COLOR": "1"}

    def demo(*extra, question="Hi", new=4):
        return subprocess.run(
            [*cmd, "demo", *extra, "--max-new-tokens", str(new), question],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    first = demo("--weights", "fp32", "--verbose")
    assert first.returncode == 0, first.stdout + first.stderr
    fused = native.fused_enabled()
    how = "decode steps: fused native fp32 step" if fused else "by calibration"
    for want in ("weights: fp32", how, "start-up:", "peak RSS:", "cached the fp32 weights"):
        assert want in first.stdout, f"{want!r} missing:\n{first.stdout}"
    assert (tmp_path / "cache" / "smollm2" / "calibration.json").exists() != fused, (
        "calibrated only without the step"
    )

    answer = demo("--verbose", question="What is the capital of France?", new=8)
    assert answer.returncode == 0, (
        f"dojo demo failed ({answer.returncode}):\n{answer.stdout}\n{answer.stderr}"
    )
    assert "Paris" in answer.stdout, f"the greedy answer should name Paris:\n{answer.stdout}"
    for line in ("prompt tokens:", "time to first token:", "tokens/s"):
        assert line in answer.stdout, f"the report lacks {line!r}:\n{answer.stdout}"
    for rebuilt in ("cached the fp32 weights", "cached the tokenizer"):
        assert rebuilt not in answer.stdout, (
            f"a second run should map the cache, not say {rebuilt!r}:\n{answer.stdout}"
        )

    bad = demo("--weights", "int3")
    assert (
        bad.returncode != 0
        and "int3" in bad.stdout + bad.stderr
        and "fp32, bf16, int4" in bad.stdout + bad.stderr
    )
