"""Hidden suite for the latency kata: TTFT vs TPOT, their roofline predictions, chunked prefill.

Predictions are checked exactly, against max(FLOPs / peak, bytes / bandwidth) of the reference
`solutions.roofline.phase_cost`, with ceilings the test draws (dojo.seeds). Timing semantics are exact
too: the tiny model's prefill and decode steps charge drawn seconds to a fake clock (dojo.fakeclock),
so what is timed, the warm-up and what is divided by what come out the same on any machine,
however busy. Chunked prefill is compared with one-shot prefill, logits within 1e-5. Those hold
most of the points.

Two tests, marked `machine` (2 points each), run the physics on a SmolLM2-shaped random model at
one thread, the kata's measure_latency interleaved with a plain timing loop, best of several
rounds; they check RATIOS (never absolute times) and end inconclusive, never failed, when the
machine is too noisy or does not show the effect (dojo.machine). The ceilings that feed the
predictions are solutions.roofline's, measured there and then on sizes from this machine: a copy
of 4x the largest reported cache (at least 64 MiB, at most 512 MiB and a quarter of the memory
the process may still use) and a matmul sized to be compute-bound.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from dojo import seeds
from dojo.fakeclock import FakeClock, reading
from dojo.machine import Claim, SideBySide, check_claim, compute_bound_n, streaming_copy_bytes
from dojo.testing import expect_value_error
from solutions.model import LlamaConfig, smollm2_shaped, tiny_model
from solutions.roofline import measure_bandwidth, measure_peak_flops, phase_cost

KATA = "latency"
pytestmark = pytest.mark.usefixtures("one_thread")

SMOL = LlamaConfig.smollm2_135m()
PEAK, BANDWIDTH = 1.5e11, 1.2e10  # FLOP/s, bytes/s: about one core of the machine the kata was written on
TOL = 1e-5  # logits of chunked vs one-shot prefill


def roofline_seconds(
    phase: str, config, seq_len: int, context_len: int, peak: float, bandwidth: float
) -> float:
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
        "(155.8 GFLOP / 1.5e11 FLOP/s: prefill of a long prompt is compute-bound; the time is the larger of "
        "compute time and memory time, not their sum)"
    )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on("test_predict_ttft_long_prompt_is_compute_bound")
def test_predict_tpot_is_the_weight_read(kata):
    """predict_tpot: a decode step on SmolLM2 takes its bytes / bandwidth, about 45 ms at 12 GB/s"""
    got = kata.predict_tpot(SMOL, 0, PEAK, BANDWIDTH)
    want = 538_154_496 / BANDWIDTH  # every weight, one embedding row, K and V of one position
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_tpot(SmolLM2, context_len=0, 1.5e11, 1.2e10) = {got:.6g} s, want {want:.6g} s "
        "(538 MB read / 1.2e10 B/s: decode is bandwidth-bound)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_predict_tpot_is_the_weight_read")
def test_predict_tpot_reads_the_kv_cache(kata):
    """predict_tpot grows with the context: each step also reads K and V of every cached position"""
    r = seeds.rng(700)
    context_len = r.randint(64, SMOL.max_seq_len - 1)
    peak, bandwidth = PEAK * r.uniform(0.5, 4.0), BANDWIDTH * r.uniform(0.25, 2.0)  # decode memory-bound
    got = kata.predict_tpot(SMOL, context_len, peak, bandwidth)
    # every weight, one embedding row, and K and V of every cached position
    want = roofline_seconds("decode", SMOL, 1, context_len, peak, bandwidth)
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_tpot(SmolLM2, context_len={context_len}, peak={peak:g}, bandwidth={bandwidth:g}) = {got:.6g} s, "
        f"want {want:.6g} s: the step reads the whole KV cache as well as the weights"
    )


def drawn_ceilings(r, peak: float, bandwidth: float) -> tuple[float, float]:
    """`peak` and `bandwidth` scaled alike by a factor in [0.25, 4], the ridge moved by at most 10%."""
    scale = r.uniform(0.25, 4.0)
    return peak * scale * r.uniform(0.9, 1.1), bandwidth * scale


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "case, prompt_lens, peak, bandwidth",
    [
        # at 40 tokens FLOP time 72 ms, byte time 45 ms: comparable, so max vs sum shows
        (0, (30, 50), PEAK, BANDWIDTH),
        (1, (1, 3), PEAK, BANDWIDTH),
        (2, (200, 400), 2e10, 5e9),
        (3, (48, 80), 1e12, 1e12),
    ],
)
@pytest.mark.builds_on("test_predict_ttft_long_prompt_is_compute_bound")
def test_predict_ttft_is_the_slower_ceiling(kata, case, prompt_lens, peak, bandwidth):
    """predict_ttft = max(FLOPs / peak, bytes / bandwidth) of the prefill: the slower resource sets the pace"""
    r = seeds.rng(710 + case)
    prompt_len, (peak, bandwidth) = r.randint(*prompt_lens), drawn_ceilings(r, peak, bandwidth)
    got = kata.predict_ttft(SMOL, prompt_len, peak, bandwidth)
    want = roofline_seconds("prefill", SMOL, prompt_len, 0, peak, bandwidth)
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_ttft(SmolLM2, {prompt_len}, peak={peak:g}, bandwidth={bandwidth:g}) = {got:.6g} s, "
        f"want {want:.6g} s = max(FLOPs / peak, bytes / bandwidth) (not their sum, not one of them alone)"
    )


@pytest.mark.points(1)
@pytest.mark.parametrize(
    "case, contexts, peak, bandwidth", [(0, (50, 200), 2e9, 1e11), (1, (1, 20), PEAK, BANDWIDTH)]
)
@pytest.mark.builds_on("test_predict_tpot_reads_the_kv_cache")
def test_predict_tpot_is_the_slower_ceiling(kata, case, contexts, peak, bandwidth):
    """predict_tpot = max(FLOPs / peak, bytes / bandwidth) of one decode step, also on a slow-compute machine"""
    r = seeds.rng(720 + case)
    context_len, (peak, bandwidth) = r.randint(*contexts), drawn_ceilings(r, peak, bandwidth)
    config = LlamaConfig.tiny()
    got = kata.predict_tpot(config, context_len, peak, bandwidth)
    want = roofline_seconds("decode", config, 1, context_len, peak, bandwidth)
    assert got == pytest.approx(want, rel=1e-9), (
        f"predict_tpot(tiny config, {context_len}, peak={peak:g}, bandwidth={bandwidth:g}) = {got:.6g} s, "
        f"want {want:.6g} s"
    )


@pytest.mark.points(1)
def test_predictions_reject_bad_ceilings(kata):
    """Predictions raise ValueError for a ceiling that is zero or negative, or a prompt of 0 tokens"""
    r = seeds.rng(730)
    n, peak, bandwidth = r.randint(1, 2048), *drawn_ceilings(r, PEAK, BANDWIDTH)
    negative_bw, negative_peak = -r.uniform(1.0, 1e11), -r.uniform(1.0, 1e12)
    cases = {
        f"predict_ttft({n} tokens, peak=0)": lambda: kata.predict_ttft(SMOL, n, 0.0, bandwidth),
        f"predict_ttft({n} tokens, bandwidth={negative_bw:g})": lambda: kata.predict_ttft(
            SMOL, n, peak, negative_bw
        ),
        f"predict_tpot(context {n}, bandwidth=0)": lambda: kata.predict_tpot(SMOL, n, peak, 0.0),
        f"predict_tpot(context {n}, peak={negative_peak:g})": lambda: kata.predict_tpot(
            SMOL, n, negative_peak, bandwidth
        ),
        f"predict_ttft(prompt_len=0, peak={peak:g}, bandwidth={bandwidth:g})": lambda: kata.predict_ttft(
            SMOL, 0, peak, bandwidth
        ),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- measuring (timing semantics)


def charged(model, clock: FakeClock, prefill_s: float = 0.0, decode_s: float = 0.0, warm_s: float = 0.0):
    """The model with every prefill / decode_step call logged as (name, ids, cache length before, logits)
    and charged on `clock`: each prefill `prefill_s` seconds and each decode step `decode_s`, but
    `warm_s` for every call of the first run (the calls up to the second prefill)."""
    calls = []
    real_prefill, real_decode = model.prefill, model.decode_step

    def cost(seconds: float) -> float:
        return warm_s if sum(c[0] == "prefill" for c in calls) <= 1 and warm_s else seconds

    def prefill(ids, cache, attention_mask=None):
        length = cache.length
        out = real_prefill(ids, cache, attention_mask)
        calls.append(("prefill", ids.clone(), length, out))
        clock.advance(cost(prefill_s))
        return out

    def decode_step(ids, cache, attention_mask=None):
        length = cache.length
        out = real_decode(ids, cache, attention_mask)
        calls.append(("decode_step", ids.clone(), length, out))
        clock.advance(cost(decode_s))
        return out

    object.__setattr__(model, "prefill", prefill)
    object.__setattr__(model, "decode_step", decode_step)
    return model, calls


PREFILL_S, DECODE_S = 0.08, 0.015


@pytest.mark.example
@pytest.mark.points(3)
def test_ttft_is_prefill_and_tpot_is_one_decode_step(kata):
    """TTFT is the prefill (to the first token); TPOT is the time of one later token, not an average over all"""
    clock = FakeClock()
    model, _ = charged(tiny_model(seed=0), clock, prefill_s=PREFILL_S, decode_s=DECODE_S)
    with reading(clock, kata):
        got = kata.measure_latency(model, 8, 4, repeats=2)
    said = (
        f"prefill takes {PREFILL_S * 1e3:.0f} ms, decode steps {DECODE_S * 1e3:.0f} ms; measure_latency(prompt 8, "
        f"4 new tokens) says TTFT {got.ttft * 1e3:.4g} ms, TPOT {got.tpot * 1e3:.4g} ms"
    )
    assert got.ttft == pytest.approx(PREFILL_S, rel=1e-6), (
        f"{said}: the first token arrives right after the prefill"
    )
    assert got.tpot == pytest.approx(DECODE_S, rel=1e-6), (
        f"{said}: TPOT counts the 3 tokens after the first, one decode step each (a total / 4 would charge the "
        "prefill to every token)"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_ttft_is_prefill_and_tpot_is_one_decode_step")
def test_measure_latency_warms_up_untimed(kata):
    """One untimed warm-up run comes first: a slow first run does not reach the reported times"""
    r = seeds.rng(740)
    prefill_s, decode_s, warm_s = r.uniform(0.02, 0.2), r.uniform(0.005, 0.03), r.uniform(0.5, 2.0)
    prompt_len, new_tokens = r.randint(1, 16), r.randint(2, 6)
    clock = FakeClock()
    model, _ = charged(tiny_model(seed=seeds.seed(741)), clock, prefill_s, decode_s, warm_s)
    with reading(clock, kata):
        got = kata.measure_latency(model, prompt_len, new_tokens, repeats=1)
    assert (got.ttft, got.tpot) == (pytest.approx(prefill_s, rel=1e-6), pytest.approx(decode_s, rel=1e-6)), (
        f"every call of the first run takes {warm_s:.4g} s, later prefills {prefill_s * 1e3:.4g} ms and decode "
        f"steps {decode_s * 1e3:.4g} ms; measure_latency(prompt {prompt_len}, {new_tokens} new tokens, repeats=1) "
        f"says TTFT {got.ttft * 1e3:.4g} ms, TPOT {got.tpot * 1e3:.4g} ms: the warm-up run must not be timed"
    )


@pytest.mark.points(2)
def test_measure_latency_generates_greedily_from_one_prefill(kata):
    """Each run: one prefill of the whole prompt on an empty cache, then new_tokens - 1 greedy decode steps"""
    r = seeds.rng(750)
    prompt_len, new_tokens, repeats = r.randint(1, 12), r.randint(2, 6), r.randint(1, 3)
    model, calls = charged(tiny_model(seed=seeds.seed(751)), FakeClock())
    kata.measure_latency(model, prompt_len, new_tokens, repeats=repeats)
    names = [c[0] for c in calls]
    run = ["prefill"] + ["decode_step"] * (new_tokens - 1)
    assert names == run * (len(names) // new_tokens) and len(names) >= repeats * new_tokens, (
        f"measure_latency(prompt {prompt_len}, {new_tokens} new tokens, repeats={repeats}) called {names}: want "
        f"each run to be {run} (warm-up runs allowed)"
    )
    for i, (name, ids, length, _logits) in enumerate(calls):
        if name == "prefill":
            assert tuple(ids.shape) == (1, prompt_len) and length == 0, (
                f"prefill got ids {tuple(ids.shape)} on a cache holding {length} positions; "
                f"want the whole prompt (1, {prompt_len}) on an empty cache"
            )
            continue
        prev = calls[i - 1][3]
        want = (prev[:, -1] if prev.dim() == 3 else prev).argmax(-1)
        assert tuple(ids.shape) == (1,) and torch.equal(ids, want), (
            f"decode step {i} fed {ids.tolist()}, want the argmax of the previous logits {want.tolist()}"
        )
        want_length = prompt_len + (i % new_tokens) - 1
        assert length == want_length, (
            f"decode step fed on a cache of {length} positions, want {want_length} (prompt {prompt_len} "
            f"+ {i % new_tokens - 1} tokens fed back)"
        )


@pytest.mark.points(1)
def test_measure_latency_rejects_bad_input(kata):
    """measure_latency raises ValueError for an empty prompt, < 2 new tokens, or running past the context"""
    r = seeds.rng(760)
    model = tiny_model(seed=seeds.seed(761), max_seq_len=r.randint(16, 256))
    n = model.config.max_seq_len
    prompt_len, new_tokens = r.randint(1, n // 2), r.randint(2, n // 2)  # fine on their own
    bad_prompt, bad_new, bad_repeats = r.randint(-3, 0), r.randint(-1, 1), r.randint(-2, 0)
    long_prompt = r.randint(1, n - 1)
    past = n - long_prompt + 2 + r.randint(0, 8)  # prompt + past - 1 > n
    cases = {
        f"prompt_len={bad_prompt}": lambda: kata.measure_latency(model, bad_prompt, new_tokens),
        f"new_tokens={bad_new} (no TPOT without a second token)": lambda: kata.measure_latency(
            model, prompt_len, bad_new
        ),
        f"{long_prompt} prompt + {past} new tokens on a {n} context": lambda: kata.measure_latency(
            model, long_prompt, past
        ),
        f"repeats={bad_repeats}": lambda: kata.measure_latency(
            model, prompt_len, new_tokens, repeats=bad_repeats
        ),
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
    model = tiny_model(seed=seeds.seed(770))
    ids = torch.randint(256, (2, 13), generator=seeds.generator(chunk))  # (B, T)
    want = model.prefill(ids, model.new_cache(2, 32))
    cache = model.new_cache(2, 32)
    got = kata.chunked_prefill(model, ids, cache, chunk)
    assert tuple(got.shape) == (2, 13, 256), (
        f"chunked_prefill(13 tokens, chunk={chunk}) returned logits {tuple(got.shape)}, want (2, 13, 256): one row "
        "per prompt token, the last partial chunk included"
    )
    assert max_diff(got, want) <= TOL, (
        f"chunked_prefill(13 tokens, chunk={chunk}) differs from one prefill by {max_diff(got, want):.3g}: "
        "each chunk must attend to the positions cached before it"
    )
    assert cache.length == 13, f"after chunked_prefill of 13 tokens the cache holds {cache.length}"


@pytest.mark.points(2)
@pytest.mark.parametrize("T, chunk", [(13, 4), (12, 4), (3, 8), (7, 1)])
@pytest.mark.builds_on("test_chunked_prefill_equals_one_shot")
def test_chunked_prefill_bounds_each_step(kata, T, chunk):
    """Each model call prefills at most `chunk` tokens, in order: ceil(T / chunk) calls"""
    model, calls = prefill_calls(tiny_model(seed=seeds.seed(771)))
    ids = torch.randint(256, (1, T), generator=seeds.generator(0))
    kata.chunked_prefill(model, ids, model.new_cache(1, 16), chunk)
    sizes = [(shape[1], length) for shape, length in calls]
    want = [(min(chunk, T - lo), lo) for lo in range(0, T, chunk)]
    assert sizes == want, (
        f"chunked_prefill(T={T}, chunk={chunk}) made prefill calls of (tokens, cached before) "
        f"{sizes}, want {want}"
    )
    assert len(want) == math.ceil(T / chunk)


@pytest.mark.points(2)
@pytest.mark.builds_on("test_chunked_prefill_equals_one_shot")
def test_chunked_prefill_appends_to_a_filled_cache(kata):
    """Chunks appended after cached positions match one prefill, and decoding afterwards is unchanged"""
    model = tiny_model(seed=seeds.seed(772))
    ids = torch.randint(256, (1, 19), generator=seeds.generator(3))  # 5 cached + 11 new + 3 decoded
    ref = model.new_cache(1, 32)
    model.prefill(ids[:, :5], ref)
    want = model.prefill(ids[:, 5:16], ref)
    cache = model.new_cache(1, 32)
    model.prefill(ids[:, :5], cache)
    got = kata.chunked_prefill(model, ids[:, 5:16], cache, 3)
    assert max_diff(got, want) <= TOL, (
        f"chunked_prefill(11 tokens after 5 cached, chunk=3) differs from one prefill by {max_diff(got, want):.3g}"
    )
    for t in range(16, 19):
        a, b = model.decode_step(ids[:, t], ref), model.decode_step(ids[:, t], cache)
        assert max_diff(a, b) <= TOL, (
            f"decode step at position {t} after chunked prefill differs by {max_diff(a, b):.3g}"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_chunked_prefill_equals_one_shot", "test_chunked_prefill_appends_to_a_filled_cache"
)
def test_chunked_prefill_with_left_padding(kata):
    """A left-padded batch: each chunk gets the attention mask of everything cached plus itself"""
    model = tiny_model(seed=seeds.seed(773))
    ids = torch.randint(256, (3, 10), generator=seeds.generator(5))
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[0, :4] = False  # row 0: 4 pad positions
    mask[2, :7] = False  # row 2: 7 pad positions, longer than the first chunk
    want = model.prefill(ids, model.new_cache(3, 16), mask)
    got = kata.chunked_prefill(model, ids, model.new_cache(3, 16), 3, attention_mask=mask)
    real = mask[:, :, None].expand_as(want)  # pad positions' logits are not compared
    diff = float((got - want).abs()[real].max())
    assert diff <= TOL, (
        f"chunked_prefill(3 left-padded rows, 10 tokens, chunk=3) differs from one masked prefill "
        f"by {diff:.3g} on real tokens: chunk i needs mask[:, :end of chunk i]"
    )


@pytest.mark.points(1)
def test_chunked_prefill_rejects_bad_chunk(kata):
    """chunk must be a positive int: 0, -2 or 2.5 is a ValueError"""
    r = seeds.rng(780)
    model = tiny_model(seed=seeds.seed(781))
    ids = torch.randint(256, (1, r.randint(1, 8)), generator=seeds.generator(782))  # (1, T)
    for chunk in (0, r.randint(-5, -1), r.randint(1, 4) + r.choice([0.5, 0.25])):
        expect_value_error(
            lambda c=chunk: kata.chunked_prefill(model, ids, model.new_cache(1, 8), c),
            f"chunked_prefill(chunk={chunk!r})",
        )


# --------------------------------------------------------------------------- the physics (machine tests)
# Marked `machine`: run one at a time machine-wide, the kata's timings interleaved with a plain
# timing loop's, best of several rounds, and inconclusive when this machine cannot decide
# (dojo.machine). The thresholds are the README's; whether the machine shows them is measured.

SHORT, LONG, NEW = 16, 192, 5


@pytest.fixture(scope="module")
def smollm2_layers():
    """SmolLM2's layer shapes with random weights (no load): 8 of its 30 layers and an 8192-token vocabulary.

    132 MB in fp32: decode still streams every weight from memory and prefill is still matmul-bound,
    at a quarter of the real model's cost. (The vocabulary is cut because a small-batch matmul on
    the real 113 MB LM head is unusually slow in some BLAS builds, which would blur the picture.)
    """
    return smollm2_shaped(n_layers=8, vocab_size=8192, max_seq_len=512)


def plain_latency(model, prompt_len: int, new_tokens: int) -> dict[str, float]:
    """TTFT and TPOT of one greedy generation after an untimed warm-up one: a plain loop."""
    prompt = torch.randint(model.config.vocab_size, (1, prompt_len), generator=seeds.generator(0))
    cache = model.new_cache(1, max_len=prompt_len + new_tokens - 1)
    for _ in range(2):
        cache.truncate(0)
        start = time.perf_counter()
        token = model.prefill(prompt, cache)[:, -1].argmax(-1)
        first = time.perf_counter()
        for _ in range(new_tokens - 1):
            token = model.decode_step(token, cache).argmax(-1)
        end = time.perf_counter()
    return {"ttft": first - start, "tpot": (end - first) / (new_tokens - 1)}


@pytest.fixture(scope="module")
def bench(kata, smollm2_layers):
    """The kata's measure_latency and a plain loop's at a short and a long prompt, and the ceilings
    (solutions.roofline's measurements, as seconds per copy and per matmul), taken in turn."""
    model = smollm2_layers
    nbytes = streaming_copy_bytes()
    n = compute_bound_n(
        lambda n: measure_peak_flops(n=n, repeats=2), measure_bandwidth(nbytes=nbytes, repeats=2)
    )

    def kata_latency(prompt_len: int) -> dict[str, float]:
        got = kata.measure_latency(model, prompt_len, NEW, repeats=1)
        return {"ttft": got.ttft, "tpot": got.tpot}

    bench = SideBySide(
        {
            "kata short": lambda: kata_latency(SHORT),
            "kata long": lambda: kata_latency(LONG),
            "plain short": lambda: plain_latency(model, SHORT, NEW),
            "plain long": lambda: plain_latency(model, LONG, NEW),
            "copy": lambda: 2 * nbytes / measure_bandwidth(nbytes=nbytes, repeats=1),
            "matmul": lambda: 2 * n**3 / measure_peak_flops(n=n, repeats=1),
        }
    )
    bench.ceilings = lambda: (
        2 * n**3 / bench.best("matmul"),
        2 * nbytes / bench.best("copy"),
    )  # best peak, bandwidth
    return bench


@pytest.mark.machine
@pytest.mark.points(2)
@pytest.mark.builds_on("test_ttft_is_prefill_and_tpot_is_one_decode_step")
def test_ttft_grows_with_the_prompt_while_tpot_stays_flat(kata, bench):
    """Machine: TTFT grows with prompt length (192 vs 16 tokens: >= 2.5x) while TPOT stays nearly flat (<= 1.5x)"""

    def growth(b, side: str) -> tuple[float, float]:  # b: the whole bench, or one round of it
        return tuple(
            b.best(f"{side} long.{what}") / b.best(f"{side} short.{what}") for what in ("ttft", "tpot")
        )

    check_claim(
        bench,
        lambda b: Claim(
            growth(b, "kata"),
            growth(b, "plain"),
            lambda q: q[0] >= 2.5 and q[1] <= 1.5,
            lambda q: (
                f"SmolLM2-shaped model, {SHORT}- vs {LONG}-token prompt: TTFT grew {q[0]:.2f}x (want >= 2.5x: the prefill "
                f"of the whole prompt) and TPOT {q[1]:.2f}x (want <= 1.5x: a decode step reads the same weights)"
            ),
        ),
    )


@pytest.mark.machine
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_predict_ttft_is_the_slower_ceiling",
    "test_predict_tpot_is_the_slower_ceiling",
    "test_ttft_is_prefill_and_tpot_is_one_decode_step",
)
def test_predictions_within_a_factor_of_two(kata, bench, smollm2_layers):
    """Machine: predict_ttft (long prompt) and predict_tpot from measured ceilings are within 2x of measure_latency"""
    config = smollm2_layers.config
    cases = [
        (f"TTFT at {LONG} tokens", "long.ttft", "prefill", LONG),
        (f"TPOT after {SHORT} tokens", "short.tpot", "decode", SHORT),
        (f"TPOT after {LONG} tokens", "long.tpot", "decode", LONG),
    ]

    def predicted(side: str, phase: str, tokens: int) -> float:
        peak, bandwidth = bench.ceilings()
        if side == "plain":
            return roofline_seconds(
                phase,
                config,
                tokens if phase == "prefill" else 1,
                0 if phase == "prefill" else tokens,
                peak,
                bandwidth,
            )
        if phase == "prefill":
            return kata.predict_ttft(config, tokens, peak, bandwidth)
        return kata.predict_tpot(config, tokens, peak, bandwidth)

    def ratios(b, side: str) -> tuple[float, ...]:  # b: the whole bench, or one round of it
        return tuple(
            b.best(f"{side} {key}") / predicted(side, phase, tokens) for _, key, phase, tokens in cases
        )

    def describe(q) -> str:
        peak, bandwidth = bench.ceilings()
        return (
            f"from {peak / 1e9:.3g} GFLOP/s and {bandwidth / 1e9:.3g} GB/s, measured / predicted = "
            + ", ".join(f"{r:.2f}x ({what})" for r, (what, *_) in zip(q, cases))
            + " (want each within 0.5x .. 2x)"
        )

    check_claim(
        bench,
        lambda b: Claim(
            ratios(b, "kata"), ratios(b, "plain"), lambda q: all(0.5 <= r <= 2 for r in q), describe
        ),
    )
