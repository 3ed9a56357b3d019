"""Hidden suite for the batching kata: memory arithmetic, the compute crossover, the measured curve.

Memory and crossover checks are exact: SmolLM2-135M numbers worked out by hand below, and oracles
that count a real model's parameters and loop over batch sizes with the reference roofline.
Timing semantics are checked on the tiny model with a sleep added to every decode step (long
beside the tiny model's own work; sleeps can only overshoot, so a busy CPU cannot fake a pass).
The physics runs on a SmolLM2-shaped random model and is checked as RATIOS measured side by side
(never absolute times), at one thread, with margins that hold on a noisy shared machine.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch

from solutions.kv_cache import KVCache
from solutions.model import Llama, LlamaConfig, smollm2_shaped, tiny_model
from dojo.testing import expect_value_error
from solutions.roofline import arithmetic_intensity, bound, measure_bandwidth, measure_peak_flops, phase_cost

KATA = "batching"
pytestmark = pytest.mark.usefixtures("one_thread")

SMOL = LlamaConfig.smollm2_135m()
GIB = 1 << 30
PEAK, BANDWIDTH = 1.5e11, 1.2e10  # FLOP/s, bytes/s: ridge 12.5 FLOP/byte

# SmolLM2-135M by hand: 134,515,008 parameters (tied embedding once) x 4 bytes.
WEIGHTS_FP32 = 538_060_032
# K and V, 30 layers, 3 KV heads x 64 dims, 4 bytes: 46,080 bytes per position; 2048 positions:
KV_2048_FP32 = 94_371_840
# (2 GiB - weights) // per sequence = 1,609,423,616 // 94,371,840 = 17 (17.05)
MAX_BATCH_2GIB = 17


# --------------------------------------------------------------------------- memory

@pytest.mark.example
@pytest.mark.points(2)
def test_weight_and_kv_bytes_of_smollm2(kata):
    """SmolLM2 in fp32: 538,060,032 bytes of weights; 94,371,840 bytes of KV cache per 2048-token sequence"""
    got = (kata.weight_bytes(SMOL, torch.float32), kata.kv_bytes_per_sequence(SMOL, 2048, torch.float32))
    want = (WEIGHTS_FP32, KV_2048_FP32)
    assert got == want, (f"(weight_bytes, kv_bytes_per_sequence(2048)) of SmolLM2 fp32 = {got}, want {want}: "
                         "134,515,008 parameters (the tied embedding once); K and V x 30 layers x 3 KV heads x 64")
    got16 = (kata.weight_bytes(SMOL, torch.bfloat16), kata.kv_bytes_per_sequence(SMOL, 2048, torch.bfloat16))
    assert got16 == (WEIGHTS_FP32 // 2, KV_2048_FP32 // 2), f"bf16 halves both: got {got16}"


@pytest.mark.example
@pytest.mark.points(3)
def test_max_batch_size_of_smollm2(kata):
    """2 GiB holds SmolLM2's fp32 weights plus 17 sequences of 2048 tokens"""
    got = kata.max_batch_size(SMOL, 2048, 2 * GIB, torch.float32)
    assert got == MAX_BATCH_2GIB, (
        f"max_batch_size(SmolLM2, 2048, 2 GiB, fp32) = {got}, want {MAX_BATCH_2GIB}: "
        f"(2,147,483,648 - {WEIGHTS_FP32:,} weight bytes) // {KV_2048_FP32:,} bytes per sequence")


def oracle_max_batch(config: LlamaConfig, context_len: int, budget: int, dtype: torch.dtype) -> int:
    """Count the parameters of a real (uninitialised) model and ask the reference cache what one row costs."""
    size = torch.empty((), dtype=dtype).element_size()
    weights = sum(p.numel() for p in Llama(config).parameters()) * size
    per_seq = KVCache.bytes_needed(config.n_layers, 1, config.n_kv_heads, config.head_dim, context_len, dtype)
    batch = 0
    while weights + (batch + 1) * per_seq <= budget:
        batch += 1
    return batch


CONFIGS = [
    {},
    {"n_heads": 8, "n_kv_heads": 2, "d_model": 128, "d_ff": 96, "n_layers": 3, "vocab_size": 100},
    {"n_heads": 6, "n_kv_heads": 6, "d_model": 48, "n_layers": 1},
]


@pytest.mark.points(2)
@pytest.mark.parametrize("overrides", CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_max_batch_size_matches_counting(kata, overrides, dtype):
    """Any config: the most sequences whose KV cache fits beside the weights, exactly at the boundary too"""
    config = LlamaConfig.tiny(**overrides)
    size = torch.empty((), dtype=dtype).element_size()
    weights = sum(p.numel() for p in Llama(config).parameters()) * size
    per_seq = KVCache.bytes_needed(config.n_layers, 1, config.n_kv_heads, config.head_dim, 100, dtype)
    for budget in (weights + 3 * per_seq, weights + 3 * per_seq - 1, weights + 7 * per_seq + per_seq // 2):
        got = kata.max_batch_size(config, 100, budget, dtype)
        want = oracle_max_batch(config, 100, budget, dtype)
        assert got == want, (
            f"max_batch_size({overrides or 'tiny'}, context_len=100, budget={budget:,}, {dtype}) = {got}, want {want} "
            f"(weights {weights:,} bytes, {per_seq:,} KV bytes per sequence; a sequence that does not fit whole "
            "does not fit)")


@pytest.mark.points(2)
def test_budget_too_small_for_one_sequence(kata):
    """A budget that cannot hold the weights plus one sequence is a ValueError naming the numbers"""
    budget = WEIGHTS_FP32 + KV_2048_FP32 - 1
    exc = expect_value_error(lambda: kata.max_batch_size(SMOL, 2048, budget, torch.float32),
                             f"max_batch_size(SmolLM2, 2048, budget={budget:,})")
    digits = str(exc).replace(",", "").replace("_", "")
    missing = [f"{n:,}" for n in (budget, KV_2048_FP32) if str(n) not in digits]
    assert not missing, f"the error {str(exc)!r} should name the budget and the bytes one sequence needs: {missing}"
    expect_value_error(lambda: kata.max_batch_size(SMOL, 2048, GIB // 4, torch.float32),
                       "max_batch_size with a budget smaller than the weights alone")


@pytest.mark.points(1)
def test_memory_rejects_bad_context(kata):
    """A context_len of 0, or beyond the model's context, is a ValueError"""
    cases = {
        "max_batch_size(context_len=0)": lambda: kata.max_batch_size(SMOL, 0, 2 * GIB),
        "max_batch_size(context_len=8193)": lambda: kata.max_batch_size(SMOL, 8193, 64 * GIB),
        "kv_bytes_per_sequence(context_len=0)": lambda: kata.kv_bytes_per_sequence(SMOL, 0),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- the crossover

def compute_bound(config, batch: int, context_len: int, peak: float, bandwidth: float, dtype=torch.float32) -> bool:
    cost = phase_cost(config, "decode", batch, 1, context_len, dtype)
    return bound(arithmetic_intensity(cost), peak, bandwidth) == "compute"


def oracle_crossover(config, peak: float, bandwidth: float, context_len: int, dtype=torch.float32,
                     limit: int = 5000) -> int | None:
    """Try every batch from 1 up; None if none up to `limit` is compute-bound."""
    for batch in range(1, limit + 1):
        if compute_bound(config, batch, context_len, peak, bandwidth, dtype):
            return batch
    return None


@pytest.mark.example
@pytest.mark.points(3)
def test_crossover_of_smollm2(kata):
    """On a 12.5 FLOP/byte ridge, SmolLM2 decode (empty cache) turns compute-bound at batch 26"""
    got = kata.crossover_batch(SMOL, PEAK, BANDWIDTH, 0)
    assert got == 26, (f"crossover_batch(SmolLM2, 1.5e11, 1.2e10, context_len=0) = {got}, want 26: the smallest "
                       "batch whose decode step has intensity >= the ridge (batch 25: 12.2 FLOP/byte, 26: 12.7)")


@pytest.mark.points(2)
@pytest.mark.parametrize("overrides, peak, bandwidth, context_len, dtype", [
    ({}, PEAK, BANDWIDTH, 512, torch.float32),  # the KV cache drags it out to 808
    ({}, 989e12, 3.35e12, 0, torch.bfloat16),  # an H100 in bf16: 312
    ({}, 2e11, 4e10, 64, torch.float32),
    (CONFIGS[1], 1e11, 2e10, 10, torch.float32),
])
def test_crossover_matches_trying_every_batch(kata, overrides, peak, bandwidth, context_len, dtype):
    """crossover_batch is the first batch a roofline verdict calls compute-bound"""
    config = LlamaConfig.tiny(**overrides) if overrides else SMOL
    got = kata.crossover_batch(config, peak, bandwidth, context_len, dtype)
    want = oracle_crossover(config, peak, bandwidth, context_len, dtype)
    assert got == want, (f"crossover_batch({overrides or 'SmolLM2'}, peak={peak:g}, bandwidth={bandwidth:g}, "
                         f"context_len={context_len}, {dtype}) = {got}, want {want} (the KV cache each row reads "
                         "counts as bytes)")


@pytest.mark.points(2)
def test_crossover_at_the_ridge_is_compute(kata):
    """A batch whose intensity equals the ridge exactly is already compute-bound"""
    cost = phase_cost(SMOL, "decode", 10, 1, 0)
    peak = arithmetic_intensity(cost)  # bandwidth 1.0: the ridge is exactly batch 10's intensity
    got = kata.crossover_batch(SMOL, peak, 1.0, 0)
    assert got == 10, f"with the ridge set to batch 10's intensity, crossover_batch = {got}, want 10 (at the ridge = compute)"


@pytest.mark.points(2)
def test_long_context_never_crosses(kata):
    """At 2048 tokens of context SmolLM2 decode never becomes compute-bound in fp32: crossover is None"""
    got = kata.crossover_batch(SMOL, PEAK, BANDWIDTH, 2048)
    for batch in (1, 10**3, 10**6):
        assert not compute_bound(SMOL, batch, 2048, PEAK, BANDWIDTH)
    assert got is None, (f"crossover_batch(SmolLM2, ridge 12.5, context_len=2048) = {got}, want None: every row reads "
                         "94 MB of KV cache for 0.41 GFLOP, so intensity never passes ~4.3 FLOP/byte")


# --------------------------------------------------------------------------- measuring (timing semantics)

def slowed(model, prefill_s: float = 0.0, decode_s: float = 0.0):
    """The model with a sleep added to each prefill / decode_step call, and every call logged as
    (name, ids shape, cache length before)."""
    calls = []
    real_prefill, real_decode = model.prefill, model.decode_step

    def prefill(ids, cache, attention_mask=None):
        calls.append(("prefill", tuple(ids.shape), cache.length))
        time.sleep(prefill_s)
        return real_prefill(ids, cache, attention_mask)

    def decode_step(ids, cache, attention_mask=None):
        calls.append(("decode_step", tuple(ids.shape), cache.length))
        time.sleep(decode_s)
        return real_decode(ids, cache, attention_mask)

    object.__setattr__(model, "prefill", prefill)
    object.__setattr__(model, "decode_step", decode_step)
    return model, calls


DECODE_S = 0.02


@pytest.mark.points(3)
def test_decode_step_time_times_one_batched_step(kata):
    """decode_step_time is the median time of ONE decode step of the whole batch on a filled cache"""
    model, calls = slowed(tiny_model(seed=0), prefill_s=0.05, decode_s=DECODE_S)
    got = kata.decode_step_time(model, 4, 9, repeats=3)
    steps = [(shape, length) for name, shape, length in calls if name == "decode_step"]
    assert len(steps) >= 3 and all(s == ((4,), 9) for s in steps), (
        f"decode_step_time(batch 4, context 9, repeats=3) made decode steps of (ids shape, cached positions) "
        f"{steps}: want at least 3 steps of ids (4,) on a cache holding 9 positions")
    assert DECODE_S <= got <= 1.5 * DECODE_S + 0.01, (
        f"each decode step sleeps {DECODE_S * 1e3:.0f} ms, the prefill 50 ms; decode_step_time says "
        f"{got * 1e3:.1f} ms: time one step (not the total of the repeats, not the prefill)")


@pytest.mark.points(2)
def test_throughput_counts_every_row(kata):
    """throughput_curve gives tokens/s per batch size: batch / step time (every row gets a token)"""
    model, _ = slowed(tiny_model(seed=0), decode_s=DECODE_S)
    got = kata.throughput_curve(model, [1, 4], 3, repeats=2)
    assert list(got) == [1, 4], f"throughput_curve(batch_sizes=[1, 4]) keys {list(got)}, want [1, 4]"
    for batch, tokens_per_s in got.items():
        want = batch / DECODE_S
        assert want / 1.6 <= tokens_per_s <= want, (
            f"steps of {DECODE_S * 1e3:.0f} ms at batch {batch}: throughput {tokens_per_s:.1f} tokens/s, want about "
            f"{want:.0f} (a step yields one token per row)")


@pytest.mark.points(1)
def test_measuring_rejects_bad_input(kata):
    """decode_step_time and throughput_curve raise ValueError for impossible sizes"""
    model = tiny_model(seed=0)  # max_seq_len 256
    cases = {
        "decode_step_time(batch_size=0)": lambda: kata.decode_step_time(model, 0, 4),
        "decode_step_time(context_len=-1)": lambda: kata.decode_step_time(model, 1, -1),
        "decode_step_time(context_len=256) on a 256 context": lambda: kata.decode_step_time(model, 1, 256),
        "decode_step_time(repeats=0)": lambda: kata.decode_step_time(model, 1, 4, repeats=0),
        "throughput_curve(batch_sizes=[])": lambda: kata.throughput_curve(model, [], 4),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- the physics (ratio checks)

CONTEXT = 0  # an empty cache: at short contexts the KV cache is tiny beside the weights, and no prefill to wait for
ROUNDS = 6


@pytest.fixture(scope="module")
def smollm2_layers():
    """SmolLM2's layer shapes with random weights (no load): 8 of its 30 layers and an 8192-token vocabulary.

    132 MB in fp32: a decode step still streams every weight from memory, at a quarter of the real
    model's cost. (The vocabulary is cut because a small-batch matmul on the real 113 MB LM head
    is unusually slow in some BLAS builds, which would blur the picture.)
    """
    return smollm2_shaped(n_layers=8, vocab_size=8192, max_seq_len=256)


@pytest.mark.points(3)
def test_batch_of_8_costs_at_most_3_steps(kata, smollm2_layers):
    """Ratio check: a decode step at batch 8 costs at most 3x a step at batch 1 (the weights are read once)"""
    one = eight = float("inf")
    for _ in range(ROUNDS):  # side by side, best of six: contention only ever slows a step down
        one = min(one, kata.decode_step_time(smollm2_layers, 1, CONTEXT, repeats=1))
        eight = min(eight, kata.decode_step_time(smollm2_layers, 8, CONTEXT, repeats=1))
    assert eight <= 3 * one, (
        f"SmolLM2-shaped model: a decode step takes {one * 1e3:.1f} ms at batch 1 and {eight * 1e3:.1f} ms at "
        f"batch 8 ({eight / one:.2f}x): 8 rows should share one read of the weights")


@pytest.mark.points(3)
def test_throughput_rises_until_the_crossover(kata, smollm2_layers):
    """Ratio check: below the crossover, 4x the batch gives at least 1.5x the tokens/s"""
    peak, bandwidth = measure_peak_flops(n=1024, repeats=3), measure_bandwidth(nbytes=64 << 20, repeats=5)
    crossover = oracle_crossover(smollm2_layers.config, peak, bandwidth, CONTEXT)
    batches = [b for b in (1, 4, 16) if crossover is None or b < crossover]
    assert len(batches) >= 2, f"measured ceilings put the crossover at batch {crossover}: too early to see a curve"
    curve = {}
    for _ in range(ROUNDS // 2):  # best of three curves
        for batch, tokens_per_s in kata.throughput_curve(smollm2_layers, batches, CONTEXT, repeats=1).items():
            curve[batch] = max(curve.get(batch, 0.0), tokens_per_s)
    for small, big in itertools.pairwise(batches):
        assert curve[big] >= 1.5 * curve[small], (
            f"SmolLM2-shaped model (crossover at batch {crossover} for {peak / 1e9:.3g} GFLOP/s, "
            f"{bandwidth / 1e9:.3g} GB/s): {curve[small]:.1f} tokens/s at batch {small}, {curve[big]:.1f} at "
            f"batch {big}: memory-bound decode should give nearly {big // small}x the tokens for the same weight read")
