"""`dojo demo`: the chat answer streamed on the real SmolLM2, and `--mine` choosing whose parts run."""

from __future__ import annotations

import argparse
import contextlib
import io
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


def test_mine_runs_your_passed_decoder_block_where_it_can(ws):
    """A passed decoder_block's Llama (the reference standing in) replaces the system's model; --speculative
    (which needs a KV cache) or another --weights mode keeps the reference, saying why; your attention
    beside it goes unused, and the notes say so"""
    for slug in ("decoder_block", "attention"):
        shutil.copy(ROOT / "solutions" / f"{slug}.py", ws / f"{slug}.py")
        record_pass(slug)
    parts = demo.choose_parts(mine=True)
    assert parts.llama_cls.__module__ == "dojo_demo_decoder_block", parts.notes
    demo.keep_block_where_it_runs(args(speculative=False, weights=None), parts)
    assert parts.llama_cls is not None and "decoder_block" in parts.mine
    assert any("attention: yours unused" in n for n in parts.notes), parts.notes
    for clash, why in (
        (dict(speculative=True, weights=None), "needs a KV cache"),
        (dict(speculative=False, weights="int4"), "yours is fp32"),
    ):
        parts = demo.choose_parts(mine=True)
        demo.keep_block_where_it_runs(args(**clash), parts)
        assert parts.llama_cls is None and "decoder_block" not in parts.mine, clash
        assert any(n.startswith("decoder_block: reference") and why in n for n in parts.notes), parts.notes


@pytest.mark.slow
def test_demo_mine_answers_with_your_decoder_block(ws):
    """`dojo demo --mine` with decoder_block passed (the reference as the learner's file) says first that your
    Llama runs, forward-only in fp32, and answers "Hi" as fp32 greedy does ("Hello!")"""
    shutil.copy(ROOT / "solutions" / "decoder_block.py", ws / "decoder_block.py")
    record_pass("decoder_block")
    dojo = Path(sys.executable).with_name("dojo")
    cmd = [str(dojo)] if dojo.exists() else [sys.executable, "-m", "dojo"]
    env = os.environ | {"DOJO_WORKSPACE": str(ws), "NO_COLOR": "1"}
    done = subprocess.run(
        [*cmd, "demo", "--mine", "--max-new-tokens", "3", "Hi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == demo.BLOCK_LINE, f"the first line should say your block runs:\n{done.stdout}"
    assert "your katas in this run: decoder_block" in done.stdout, done.stdout
    assert "Hello!" in done.stdout, f"fp32 greedy answers 'Hello!':\n{done.stdout}"


def test_mine_runs_your_passed_sampling_kata(ws):
    """A passed sampling kata (the reference standing in) is the module whose chain, draw and StopChecker
    the demo runs; without it, the reference's"""
    import solutions.sampling

    assert demo.sampling_module(demo.choose_parts(mine=False)) is solutions.sampling
    shutil.copy(ROOT / "solutions" / "sampling.py", ws / "sampling.py")
    record_pass("sampling")
    parts = demo.choose_parts(mine=True)
    assert "sampling" in parts.mine, parts.notes
    yours = demo.sampling_module(parts)
    assert yours.__name__ == "dojo_demo_sampling" and yours is not solutions.sampling
    stream = demo.TextStream([b"", b"a"], eos=0, write=print, sampling=yours)
    assert type(stream.checker) is yours.StopChecker, "the stream does not use your StopChecker"


def args(**kw) -> argparse.Namespace:
    base = dict(sample=False, temperature=0.7, top_p=0.9, top_k=None, seed=None, beams=1, max_new_tokens=16)
    chain = dict(min_p=None, repetition_penalty=None, presence_penalty=0.0, frequency_penalty=0.0)
    return argparse.Namespace(**(base | chain | dict(stop=None, top_logprobs=0) | kw))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dojo")
    demo.register(parser.add_subparsers())
    return parser.parse_args(["demo", *argv, "Hi"])


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
    # greedy through the chain (a penalty, logprobs) cannot be speculative: fp32 alone unless --weights
    assert demo.plan(full(repetition_penalty=1.2)) == demo.Plan("fp32")
    assert demo.plan(full(top_logprobs=2, mine=True)) == demo.Plan("fp32")
    assert demo.plan(full(presence_penalty=0.5, weights="int4")) == demo.Plan("int4")
    assert demo.plan(full(sample=True, repetition_penalty=1.2)) == demo.Plan(default_mode())
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
    token_bytes = [b"", b"caf", b"\xc3", b"\xa9!"]
    shown = []
    stream = demo.TextStream(token_bytes, eos=0, write=shown.append)
    for tok in (1, 2, 3, 0):
        stream(0, tok)
    stream.finish()
    assert shown == ["caf", "\u00e9!"], shown
    assert stream.tokens == 4 and stream.stopped_at is None


def test_stream_stops_at_a_stop_string_across_tokens():
    """--stop: a stop string split over three tokens is never printed, the text before it is, and the
    stream raises StopStringFound at the token that completes it (so generation ends there)"""
    token_bytes = [b"", b"Hello! ", b"How", b" ca", b"n I", b" help"]
    shown = []
    stream = demo.TextStream(token_bytes, eos=0, write=shown.append, stop=["How can I"])
    for tok in (1, 2, 3):
        stream(0, tok)
    with pytest.raises(demo.StopStringFound):
        stream(0, 4)
    assert "".join(shown) == "Hello! ", shown
    assert stream.tokens == 4 and stream.stopped_at is not None
    with pytest.raises(demo.StopStringFound):  # a generator that swallowed it is stopped again
        stream(0, 5)


def test_stream_releases_a_false_start_at_the_end():
    """Text held back as a possible stop string's start is printed when the answer ends without it"""
    shown = []
    stream = demo.TextStream([b"", b"It was How"], eos=0, write=shown.append, stop=["How can I"])
    stream(0, 1)
    assert "".join(shown) == "It was ", shown
    stream.finish()
    assert "".join(shown) == "It was How", shown


def test_new_options_check_their_values():
    """Bad values of the sampling options are argparse errors that say what the option must be"""
    good = parse("--sample", "--min-p", "0.1", "--repetition-penalty", "1.2", "--stop", "a", "--stop", "b")
    assert (good.min_p, good.repetition_penalty, good.stop, good.top_logprobs) == (0.1, 1.2, ["a", "b"], 0)
    for argv, says in [
        (("--min-p", "1.5"), "--min-p: must be in [0, 1]"),
        (("--repetition-penalty", "0"), "--repetition-penalty: must be > 0"),
        (("--presence-penalty", "nan"), "--presence-penalty: must be a number"),
        (("--frequency-penalty", "x"), "--frequency-penalty: must be a number"),
        (("--top-logprobs", "21"), "--top-logprobs: must be an int in [1, 20]"),
        (("--top-logprobs", "1.5"), "--top-logprobs: must be an int"),
        (("--temperature", "0"), "--temperature: must be > 0"),
        (("--top-p", "0"), "--top-p: must be in (0, 1]"),
        (("--stop", ""), "--stop: must not be empty"),
    ]:
        err = parse_error(argv)
        assert says in err, f"{argv}: expected {says!r} in:\n{err}"


def parse_error(argv) -> str:
    """What argparse writes to stderr when it refuses `argv`."""
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf), pytest.raises(SystemExit):
        parse(*argv)
    return buf.getvalue()


def test_options_that_cannot_work_are_errors():
    """--min-p without --sample, and a penalty, --stop or --top-logprobs with --beams, say why they clash"""
    with pytest.raises(ValueError, match="--min-p .* needs --sample"):
        demo.generation_kwargs(args(min_p=0.1))
    for extra in (dict(repetition_penalty=1.2), dict(stop=["x"]), dict(top_logprobs=2)):
        with pytest.raises(ValueError, match="--beams takes no"):
            demo.generation_kwargs(args(beams=2, **extra))
    with pytest.raises(ValueError, match="--speculative keeps fp32's plain argmax"):
        demo.plan(args(speculative=True, weights=None, mine=False, repetition_penalty=1.2))


def test_the_chain_picks_the_tokens_for_penalties_and_sampling():
    """Sampling, a penalty, --min-p and --top-logprobs go through the sampling kata's chain; plain greedy
    and beams do not; your passed generate keeps plain sampling and gives way for the rest. make_chain
    gets the penalties always and temperature and the filters only when sampling"""
    reference, yours = demo.Parts(), demo.Parts(mine=["generate"])
    assert demo.uses_chain(args(sample=True), reference) and not demo.uses_chain(args(), reference)
    assert demo.uses_chain(args(repetition_penalty=1.2), reference)
    assert demo.uses_chain(args(top_logprobs=3), reference)
    assert not demo.uses_chain(args(beams=4), reference)
    assert not demo.uses_chain(args(sample=True), yours)
    assert demo.uses_chain(args(sample=True, min_p=0.1), yours)
    assert demo.chain_kwargs(args(presence_penalty=0.5)) == dict(
        repetition_penalty=None, presence_penalty=0.5, frequency_penalty=0.0
    )
    sampled = demo.chain_kwargs(args(sample=True, min_p=0.1, top_k=40))
    assert sampled | dict(temperature=0.7, top_p=0.9, min_p=0.1, top_k=40) == sampled


def test_chain_line_names_the_processors_and_the_choice():
    """The chain line: processors in order then a seeded draw; greedy names no temperature of 1"""
    from solutions.sampling import make_chain

    sampled = demo.chain_line(make_chain(temperature=0.7, top_k=5), args(sample=True, seed=3))
    assert sampled == "tokens: Temperature(temperature=0.7) -> TopK(k=5), then a draw (seed 3)", sampled
    assert demo.chain_line(make_chain(), args()) == "tokens: the argmax"
    greedy = demo.chain_line(make_chain(presence_penalty=0.5), args(presence_penalty=0.5))
    assert greedy == "tokens: FrequencyPresencePenalty(presence=0.5, frequency=0), then the argmax", greedy


def test_logprob_lines_show_the_token_and_its_alternatives():
    """--top-logprobs: one line per token, its text and logprob, then the N most likely with theirs"""
    import torch

    from solutions.sampling import Sampled

    step = Sampled(
        torch.tensor([5]),
        torch.tensor([-0.25]),
        torch.tensor([[5, 7]]),
        torch.tensor([[-0.25, float("-inf")]]),
    )
    lines = demo.logprob_lines([step], {5: "Hi", 7: " there"}.__getitem__)
    assert lines == ["  'Hi'             -0.250   top: 'Hi' -0.250, ' there' -inf"], lines
    assert (
        "top:"
        not in demo.logprob_lines(
            [Sampled(step.tokens, step.logprobs, step.top_ids[:, :0], step.top_logprobs[:, :0])], str
        )[0]
    )


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
    tokenizer (no "cached" line for them); sampling through the chain with --min-p, --repetition-penalty and
    --top-logprobs names the chain and prints each token's alternatives; --stop ends the greedy answer
    before the stop string; an unknown mode is a clear error"""
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

    sampled = demo(
        "--sample",
        "--seed",
        "1",
        "--min-p",
        "0.1",
        "--repetition-penalty",
        "1.2",
        "--top-logprobs",
        "2",
        new=6,
    )
    assert sampled.returncode == 0, sampled.stdout + sampled.stderr
    chain = "RepetitionPenalty(penalty=1.2) -> Temperature(temperature=0.7) -> TopP(p=0.9) -> MinP(min_p=0.1)"
    assert f"tokens: {chain}, then a draw (seed 1)" in sampled.stdout, sampled.stdout
    rows = [line for line in sampled.stdout.splitlines() if "   top: " in line]
    assert len(rows) == 6 and all(row.count(", ") >= 1 for row in rows), (
        f"--top-logprobs 2 should print 6 token lines with 2 alternatives each:\n{sampled.stdout}"
    )

    stopped = demo("--stop", "assist", new=16)  # the greedy answer is "Hello! How can I assist you today?"
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert (
        "Hello! How can I" in stopped.stdout and "assist" not in stopped.stdout.split("prompt tokens:")[0]
    ), f"--stop assist should end the answer before 'assist' and not print it:\n{stopped.stdout}"
    assert "stop: a stop string ended the answer after" in stopped.stdout, stopped.stdout

    bad = demo("--weights", "int3")
    assert (
        bad.returncode != 0
        and "int3" in bad.stdout + bad.stderr
        and "fp32, bf16, int4" in bad.stdout + bad.stderr
    )
