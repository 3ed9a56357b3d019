"""Hidden suite for the latency kata: TTFT vs TPOT, their roofline predictions, chunked prefill.

Predictions are checked exactly, against max(FLOPs / peak, bytes / bandwidth) of the reference
`solutions.roofline.phase_cost`, with ceilings the test chooses. Timing semantics are checked on
the tiny model with a sleep added to every prefill and decode step (sleeps are long beside the
tiny model's own work and immune to a busy CPU: they can only overshoot). Chunked prefill is
compared with one-shot prefill, logits within 1e-5.
The physics runs on a SmolLM2-shaped random model and is checked as RATIOS measured side by
side (never absolute times), at one thread, with margins that hold on a noisy shared machine.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from solutions.model import LlamaConfig, smollm2_shaped, tiny_model
from dojo.testing import expect_value_error
from solutions.roofline import measure_bandwidth, measure_peak_flops, phase_cost

KATA = "latency"
pytestmark = pytest.mark.usefixtures("one_thread")

SMOL = LlamaConfig.smollm2_135m()
PEAK, BANDWIDTH = 1.5e11, 1.2e10  # FLOP/s, bytes/s: about one core of the machine the kata was written on
TOL = 1e-5  # logits of chunked vs one-shot prefill


def roofline_seconds(phase: str, config, seq_len: int, context_len: int, peak: float, bandwidth: float) -> float:
    """The oracle: a pass takes as long as the slower of its arithmetic and its memory traffic."""
    cost = phase_cost(config, phase, 1, seq_len, context_len)
    return max(cost.flops / peak, cost.bytes / bandwidth)


# --------------------------------------------------------------------------- predictions

@pytest.mark.example
@pytest.mark.points(2)
def test_predict_ttft_long_prompt_is_compute_bound(kata):
    """predict_ttft: a 512-token prompt on SmolLM2 takes its FLOPs / peak, about 1.04 s at 150 GFLOP/s"""
    got = kata.predict_ttft(SMOL, 512, PEAK, BANDWIDTH)
    want = 155_826_782_208 / PEAK  # prefill FLOPs of 512 tokens; its 586 MB take only 0.049 s
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_ttft(SmolLM2, 512, 1.5e11, 1.2e10) = {got:.6g} s, want {want:.6g} s "
        "(155.8 GFLOP / 1.5e11 FLOP/s: prefill of a long prompt is compute-bound)")


@pytest.mark.example
@pytest.mark.points(2)
def test_predict_tpot_is_the_weight_read(kata):
    """predict_tpot: a decode step on SmolLM2 takes its bytes / bandwidth, about 45 ms at 12 GB/s"""
    got = kata.predict_tpot(SMOL, 0, PEAK, BANDWIDTH)
    want = 538_154_496 / BANDWIDTH  # every weight, one embedding row, K and V of one position
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_tpot(SmolLM2, context_len=0, 1.5e11, 1.2e10) = {got:.6g} s, want {want:.6g} s "
        "(538 MB read / 1.2e10 B/s: decode is bandwidth-bound)")


@pytest.mark.points(2)
def test_predict_tpot_reads_the_kv_cache(kata):
    """predict_tpot grows with the context: each step also reads K and V of every cached position"""
    got = kata.predict_tpot(SMOL, 512, PEAK, BANDWIDTH)
    want = 561_747_456 / BANDWIDTH  # + 513 positions x 46,080 bytes of K and V read, one written
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_tpot(SmolLM2, context_len=512) = {got:.6g} s, want {want:.6g} s: "
        "the step reads the whole KV cache as well as the weights")


@pytest.mark.points(2)
@pytest.mark.parametrize("prompt_len, peak, bandwidth", [
    (40, PEAK, BANDWIDTH),  # FLOP time 72 ms, byte time 45 ms: comparable, so max vs sum shows
    (1, PEAK, BANDWIDTH),
    (300, 2e10, 5e9),
    (64, 1e12, 1e12),
])
def test_predict_ttft_is_the_slower_ceiling(kata, prompt_len, peak, bandwidth):
    """predict_ttft = max(FLOPs / peak, bytes / bandwidth) of the prefill: the slower resource sets the pace"""
    got = kata.predict_ttft(SMOL, prompt_len, peak, bandwidth)
    want = roofline_seconds("prefill", SMOL, prompt_len, 0, peak, bandwidth)
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_ttft(SmolLM2, {prompt_len}, peak={peak:g}, bandwidth={bandwidth:g}) = {got:.6g} s, "
        f"want {want:.6g} s = max(FLOPs / peak, bytes / bandwidth) (not their sum, not one of them alone)")


@pytest.mark.points(1)
@pytest.mark.parametrize("context_len, peak, bandwidth", [(100, 2e9, 1e11), (7, PEAK, BANDWIDTH)])
def test_predict_tpot_is_the_slower_ceiling(kata, context_len, peak, bandwidth):
    """predict_tpot = max(FLOPs / peak, bytes / bandwidth) of one decode step, also on a slow-compute machine"""
    config = LlamaConfig.tiny()
    got = kata.predict_tpot(config, context_len, peak, bandwidth)
    want = roofline_seconds("decode", config, 1, context_len, peak, bandwidth)
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_tpot(tiny config, {context_len}, peak={peak:g}, bandwidth={bandwidth:g}) = {got:.6g} s, "
        f"want {want:.6g} s")


@pytest.mark.points(1)
def test_predictions_reject_bad_ceilings(kata):
    """Predictions raise ValueError for a ceiling that is zero or negative, or a prompt of 0 tokens"""
    cases = {
        "predict_ttft(peak=0)": lambda: kata.predict_ttft(SMOL, 8, 0.0, BANDWIDTH),
        "predict_ttft(bandwidth=-1)": lambda: kata.predict_ttft(SMOL, 8, PEAK, -1.0),
        "predict_tpot(bandwidth=0)": lambda: kata.predict_tpot(SMOL, 8, PEAK, 0.0),
        "predict_ttft(prompt_len=0)": lambda: kata.predict_ttft(SMOL, 0, PEAK, BANDWIDTH),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- measuring (timing semantics)

def slowed(model, prefill_s: float = 0.0, decode_s: float = 0.0):
    """The model with a sleep added to each prefill / decode_step call, and every call logged as
    (name, ids, cache length before, logits)."""
    calls = []
    real_prefill, real_decode = model.prefill, model.decode_step

    def prefill(ids, cache, attention_mask=None):
        length = cache.length
        time.sleep(prefill_s)
        out = real_prefill(ids, cache, attention_mask)
        calls.append(("prefill", ids.clone(), length, out))
        return out

    def decode_step(ids, cache, attention_mask=None):
        length = cache.length
        time.sleep(decode_s)
        out = real_decode(ids, cache, attention_mask)
        calls.append(("decode_step", ids.clone(), length, out))
        return out

    object.__setattr__(model, "prefill", prefill)
    object.__setattr__(model, "decode_step", decode_step)
    return model, calls


PREFILL_S, DECODE_S = 0.08, 0.015


@pytest.mark.example
@pytest.mark.points(3)
def test_ttft_is_prefill_and_tpot_is_one_decode_step(kata):
    """TTFT is the prefill (to the first token); TPOT is the time of one later token, not an average over all"""
    model, _ = slowed(tiny_model(seed=0), prefill_s=PREFILL_S, decode_s=DECODE_S)
    got = kata.measure_latency(model, 8, 4, repeats=2)
    assert PREFILL_S <= got.ttft <= 1.5 * PREFILL_S + 0.02, (
        f"prefill sleeps {PREFILL_S * 1e3:.0f} ms, decode steps {DECODE_S * 1e3:.0f} ms; measure_latency(prompt 8, "
        f"4 new tokens) says TTFT {got.ttft * 1e3:.1f} ms: the first token arrives right after the prefill")
    assert DECODE_S <= got.tpot <= 1.3 * DECODE_S + 0.008, (
        f"prefill sleeps {PREFILL_S * 1e3:.0f} ms, decode steps {DECODE_S * 1e3:.0f} ms; measure_latency(prompt 8, "
        f"4 new tokens) says TPOT {got.tpot * 1e3:.1f} ms: TPOT counts the 3 tokens after the first, one decode "
        "step each (a total / 4 would charge the prefill to every token)")


@pytest.mark.points(2)
def test_measure_latency_generates_greedily_from_one_prefill(kata):
    """Each run: one prefill of the whole prompt on an empty cache, then new_tokens - 1 greedy decode steps"""
    model, calls = slowed(tiny_model(seed=1))
    kata.measure_latency(model, 6, 5, repeats=2)
    names = [c[0] for c in calls]
    run = ["prefill"] + ["decode_step"] * 4
    assert names == run * (len(names) // 5) and len(names) >= 10, (
        f"measure_latency(prompt 6, 5 new tokens, repeats=2) called {names}: want each run to be "
        f"{run} (warm-up runs allowed)")
    for i, (name, ids, length, logits) in enumerate(calls):
        if name == "prefill":
            assert tuple(ids.shape) == (1, 6) and length == 0, (
                f"prefill got ids {tuple(ids.shape)} on a cache holding {length} positions; "
                "want the whole prompt (1, 6) on an empty cache")
            continue
        prev = calls[i - 1][3]
        want = (prev[:, -1] if prev.dim() == 3 else prev).argmax(-1)
        assert tuple(ids.shape) == (1,) and torch.equal(ids, want), (
            f"decode step {i} fed {ids.tolist()}, want the argmax of the previous logits {want.tolist()}")
        assert length == 6 + (i % 5) - 1, f"decode step fed on a cache of {length} positions"


@pytest.mark.points(1)
def test_measure_latency_rejects_bad_input(kata):
    """measure_latency raises ValueError for an empty prompt, < 2 new tokens, or running past the context"""
    model = tiny_model(seed=0)  # max_seq_len 256
    cases = {
        "prompt_len=0": lambda: kata.measure_latency(model, 0, 4),
        "new_tokens=1 (no TPOT without a second token)": lambda: kata.measure_latency(model, 8, 1),
        "250 prompt + 8 new tokens on a 256 context": lambda: kata.measure_latency(model, 250, 8),
        "repeats=0": lambda: kata.measure_latency(model, 8, 4, repeats=0),
    }
    for what, fn in cases.items():
        expect_value_error(fn, f"measure_latency with {what}")


# --------------------------------------------------------------------------- chunked prefill

def prefill_calls(model):
    """The model with every prefill call's (ids shape, cache length before) logged."""
    calls = []
    real = model.prefill

    def prefill(ids, cache, attention_mask=None):
        calls.append((tuple(ids.shape), cache.length))
        return real(ids, cache, attention_mask)

    object.__setattr__(model, "prefill", prefill)
    return model, calls


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@pytest.mark.example
@pytest.mark.points(3)
@pytest.mark.parametrize("chunk", [1, 4, 5, 13, 32])
def test_chunked_prefill_equals_one_shot(kata, chunk):
    """Chunked prefill gives the logits of one prefill of the whole prompt (within 1e-5)"""
    model = tiny_model(seed=0)
    ids = torch.randint(256, (2, 13), generator=torch.Generator().manual_seed(chunk))  # (B, T)
    want = model.prefill(ids, model.new_cache(2, 32))
    cache = model.new_cache(2, 32)
    got = kata.chunked_prefill(model, ids, cache, chunk)
    assert tuple(got.shape) == (2, 13, 256), f"chunked_prefill(13 tokens, chunk={chunk}) logits {tuple(got.shape)}"
    assert max_diff(got, want) <= TOL, (
        f"chunked_prefill(13 tokens, chunk={chunk}) differs from one prefill by {max_diff(got, want):.3g}: "
        "each chunk must attend to the positions cached before it")
    assert cache.length == 13, f"after chunked_prefill of 13 tokens the cache holds {cache.length}"


@pytest.mark.points(2)
@pytest.mark.parametrize("T, chunk", [(13, 4), (12, 4), (3, 8), (7, 1)])
def test_chunked_prefill_bounds_each_step(kata, T, chunk):
    """Each model call prefills at most `chunk` tokens, in order: ceil(T / chunk) calls"""
    model, calls = prefill_calls(tiny_model(seed=0))
    ids = torch.randint(256, (1, T), generator=torch.Generator().manual_seed(0))
    kata.chunked_prefill(model, ids, model.new_cache(1, 16), chunk)
    sizes = [(shape[1], length) for shape, length in calls]
    want = [(min(chunk, T - lo), lo) for lo in range(0, T, chunk)]
    assert sizes == want, (f"chunked_prefill(T={T}, chunk={chunk}) made prefill calls of (tokens, cached before) "
                           f"{sizes}, want {want}")
    assert len(want) == math.ceil(T / chunk)


@pytest.mark.points(2)
def test_chunked_prefill_appends_to_a_filled_cache(kata):
    """Chunks appended after cached positions match one prefill, and decoding afterwards is unchanged"""
    model = tiny_model(seed=2)
    ids = torch.randint(256, (1, 19), generator=torch.Generator().manual_seed(3))  # 5 cached + 11 new + 3 decoded
    ref = model.new_cache(1, 32)
    model.prefill(ids[:, :5], ref)
    want = model.prefill(ids[:, 5:16], ref)
    cache = model.new_cache(1, 32)
    model.prefill(ids[:, :5], cache)
    got = kata.chunked_prefill(model, ids[:, 5:16], cache, 3)
    assert max_diff(got, want) <= TOL, (
        f"chunked_prefill(11 tokens after 5 cached, chunk=3) differs from one prefill by {max_diff(got, want):.3g}")
    for t in range(16, 19):
        a, b = model.decode_step(ids[:, t], ref), model.decode_step(ids[:, t], cache)
        assert max_diff(a, b) <= TOL, f"decode step at position {t} after chunked prefill differs by {max_diff(a, b):.3g}"


@pytest.mark.points(2)
def test_chunked_prefill_with_left_padding(kata):
    """A left-padded batch: each chunk gets the attention mask of everything cached plus itself"""
    model = tiny_model(seed=4)
    ids = torch.randint(256, (3, 10), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[0, :4] = False  # row 0: 4 pad positions
    mask[2, :7] = False  # row 2: 7 pad positions, longer than the first chunk
    want = model.prefill(ids, model.new_cache(3, 16), mask)
    got = kata.chunked_prefill(model, ids, model.new_cache(3, 16), 3, attention_mask=mask)
    real = mask[:, :, None].expand_as(want)  # pad positions' logits are not compared
    diff = float((got - want).abs()[real].max())
    assert diff <= TOL, (f"chunked_prefill(3 left-padded rows, 10 tokens, chunk=3) differs from one masked prefill "
                         f"by {diff:.3g} on real tokens: chunk i needs mask[:, :end of chunk i]")


@pytest.mark.points(1)
def test_chunked_prefill_rejects_bad_chunk(kata):
    """chunk must be a positive int: 0, -2 or 2.5 is a ValueError"""
    model = tiny_model(seed=0)
    ids = torch.zeros(1, 4, dtype=torch.long)
    for chunk in (0, -2, 2.5):
        expect_value_error(lambda c=chunk: kata.chunked_prefill(model, ids, model.new_cache(1, 8), c),
                           f"chunked_prefill(chunk={chunk!r})")


# --------------------------------------------------------------------------- the physics (ratio checks)

SHORT, LONG, NEW = 16, 192, 5


@pytest.fixture(scope="module")
def smollm2_layers():
    """SmolLM2's layer shapes with random weights (no load): 8 of its 30 layers and an 8192-token vocabulary.

    132 MB in fp32: decode still streams every weight from memory and prefill is still matmul-bound,
    at a quarter of the real model's cost. (The vocabulary is cut because a small-batch matmul on
    the real 113 MB LM head is unusually slow in some BLAS builds, which would blur the picture.)
    """
    return smollm2_shaped(n_layers=8, vocab_size=8192, max_seq_len=512)


@pytest.fixture(scope="module")
def measured(kata, smollm2_layers):
    """The kata's measure_latency at a short and a long prompt, between two measurements of the ceilings."""
    ceilings = [(measure_peak_flops(n=1024, repeats=3), measure_bandwidth(nbytes=64 << 20, repeats=5))]
    short = kata.measure_latency(smollm2_layers, SHORT, NEW, repeats=3)
    long = kata.measure_latency(smollm2_layers, LONG, NEW, repeats=3)
    ceilings.append((measure_peak_flops(n=1024, repeats=3), measure_bandwidth(nbytes=64 << 20, repeats=5)))
    # the slower of the two: the model ran between them, through the same contention
    peak = min(p for p, _ in ceilings)
    bandwidth = min(b for _, b in ceilings)
    return short, long, peak, bandwidth


@pytest.mark.points(3)
def test_ttft_grows_with_the_prompt_while_tpot_stays_flat(measured):
    """Ratio check: TTFT grows with prompt length (192 vs 16 tokens: >= 2.5x) while TPOT stays nearly flat (<= 1.5x)"""
    short, long, _, _ = measured
    ttft_ratio, tpot_ratio = long.ttft / short.ttft, long.tpot / short.tpot
    assert ttft_ratio >= 2.5, (
        f"SmolLM2-shaped model: TTFT {short.ttft * 1e3:.1f} ms at a {SHORT}-token prompt, {long.ttft * 1e3:.1f} ms "
        f"at {LONG} tokens, only {ttft_ratio:.2f}x: TTFT must include the prefill of the whole prompt")
    assert tpot_ratio <= 1.5, (
        f"SmolLM2-shaped model: TPOT {short.tpot * 1e3:.1f} ms after a {SHORT}-token prompt, "
        f"{long.tpot * 1e3:.1f} ms after {LONG} tokens ({tpot_ratio:.2f}x): a decode step reads the same weights "
        "whatever the prompt, so TPOT must not carry the prefill")


@pytest.mark.points(3)
def test_predictions_within_a_factor_of_two(kata, measured, smollm2_layers):
    """Ratio check: predict_ttft (long prompt) and predict_tpot from measured ceilings are within 2x of measure_latency"""
    short, long, peak, bandwidth = measured
    config = smollm2_layers.config
    pairs = {
        f"TTFT at {LONG} tokens": (long.ttft, kata.predict_ttft(config, LONG, peak, bandwidth)),
        f"TPOT after {SHORT} tokens": (short.tpot, kata.predict_tpot(config, SHORT, peak, bandwidth)),
        f"TPOT after {LONG} tokens": (long.tpot, kata.predict_tpot(config, LONG, peak, bandwidth)),
    }
    for what, (got, predicted) in pairs.items():
        ratio = got / predicted
        assert 0.5 <= ratio <= 2.0, (
            f"{what}: measured {got * 1e3:.1f} ms, predicted {predicted * 1e3:.1f} ms ({ratio:.2f}x) from "
            f"{peak / 1e9:.3g} GFLOP/s and {bandwidth / 1e9:.3g} GB/s: more than a factor of 2 apart")
