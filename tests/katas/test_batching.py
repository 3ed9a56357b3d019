"""Hidden suite for the batching kata: memory arithmetic, the compute crossover, the measured curve.

Memory and crossover checks are exact: SmolLM2-135M numbers worked out by hand below, and oracles
that count a real model's parameters and loop over batch sizes with the reference roofline.
Timing semantics are exact too: the tiny model's calls charge chosen seconds to a fake clock
(dojo.fakeclock), so what is timed, the warm-up, the median and tokens per row are the same on
any machine, however busy. Those hold most of the points.

Two tests, marked `machine` (2 points each), run the physics on a SmolLM2-shaped random model at
one thread, the kata's timings interleaved with a plain timing loop's, best of several rounds;
they check RATIOS (never absolute times) and end inconclusive, never failed, when the machine is
too noisy or does not show the effect (dojo.machine). The crossover comes from ceilings measured
there and then: a copy of 4x the largest reported cache (at least 64 MiB, at most 512 MiB and a
quarter of the memory the process may still use) and a matmul sized to be compute-bound.
"""

from __future__ import annotations

import itertools
import statistics
import time

import pytest
import torch

from dojo import seeds
from dojo.fakeclock import FakeClock, reading
from dojo.machine import Claim, SideBySide, check_claim, compute_bound_n, streaming_copy_bytes
from dojo.testing import expect_value_error, inconclusive
from solutions.kv_cache import KVCache
from solutions.model import Llama, LlamaConfig, smollm2_shaped, tiny_model
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
    assert got == want, (
        f"(weight_bytes, kv_bytes_per_sequence(2048)) of SmolLM2 fp32 = {got}, want {want}: "
        "134,515,008 parameters (the tied embedding once); K and V x 30 layers x 3 KV heads x 64"
    )
    got16 = (kata.weight_bytes(SMOL, torch.bfloat16), kata.kv_bytes_per_sequence(SMOL, 2048, torch.bfloat16))
    assert got16 == (WEIGHTS_FP32 // 2, KV_2048_FP32 // 2), f"bf16 halves both: got {got16}"


@pytest.mark.example
@pytest.mark.points(3)
@pytest.mark.builds_on("test_weight_and_kv_bytes_of_smollm2")
def test_max_batch_size_of_smollm2(kata):
    """2 GiB holds SmolLM2's fp32 weights plus 17 sequences of 2048 tokens"""
    got = kata.max_batch_size(SMOL, 2048, 2 * GIB, torch.float32)
    assert got == MAX_BATCH_2GIB, (
        f"max_batch_size(SmolLM2, 2048, 2 GiB, fp32) = {got}, want {MAX_BATCH_2GIB}: "
        f"(2,147,483,648 - {WEIGHTS_FP32:,} weight bytes) // {KV_2048_FP32:,} bytes per sequence: a sequence that "
        "does not fit whole does not fit"
    )


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
@pytest.mark.parametrize("case", range(len(CONFIGS)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.builds_on("test_weight_and_kv_bytes_of_smollm2", "test_max_batch_size_of_smollm2")
def test_max_batch_size_matches_counting(kata, case, dtype):
    """Any config: the most sequences whose KV cache fits beside the weights, exactly at the boundary too"""
    overrides = CONFIGS[case]
    r = seeds.rng(100 + 2 * case + (dtype == torch.float16))
    config = LlamaConfig.tiny(**{**overrides, "n_layers": r.randint(1, 4)})
    context_len = r.randint(1, config.max_seq_len)
    size = torch.empty((), dtype=dtype).element_size()
    weights = sum(p.numel() for p in Llama(config).parameters()) * size
    per_seq = KVCache.bytes_needed(config.n_layers, 1, config.n_kv_heads, config.head_dim, context_len, dtype)
    k, m = r.randint(2, 9), r.randint(1, 12)
    budgets = (
        weights + k * per_seq,
        weights + k * per_seq - 1,
        weights + m * per_seq + r.randrange(1, per_seq),
    )
    for budget in budgets:
        got = kata.max_batch_size(config, context_len, budget, dtype)
        want = oracle_max_batch(config, context_len, budget, dtype)
        assert got == want, (
            f"max_batch_size({overrides or 'tiny'}, n_layers={config.n_layers}, context_len={context_len}, "
            f"budget={budget:,}, {dtype}) = {got}, want {want} "
            f"(weights {weights:,} bytes, {per_seq:,} KV bytes per sequence; a sequence that does not fit whole "
            "does not fit)"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_weight_and_kv_bytes_of_smollm2", "test_max_batch_size_of_smollm2")
def test_budget_too_small_for_one_sequence(kata):
    """A budget that cannot hold the weights plus one sequence is a ValueError naming the numbers"""
    r = seeds.rng(110)
    context_len = r.randint(1, SMOL.max_seq_len)
    per_seq = KVCache.bytes_needed(
        SMOL.n_layers, 1, SMOL.n_kv_heads, SMOL.head_dim, context_len, torch.float32
    )
    budget = WEIGHTS_FP32 + per_seq - r.randint(1, per_seq)
    exc = expect_value_error(
        lambda: kata.max_batch_size(SMOL, context_len, budget, torch.float32),
        f"max_batch_size(SmolLM2, {context_len}, budget={budget:,})",
    )
    digits = str(exc).replace(",", "").replace("_", "")
    missing = [f"{n:,}" for n in (budget, per_seq) if str(n) not in digits]
    assert not missing, (
        f"the error {str(exc)!r} should name the budget and the bytes one sequence needs: {missing}"
    )
    expect_value_error(
        lambda: kata.max_batch_size(SMOL, context_len, r.randrange(1, WEIGHTS_FP32), torch.float32),
        "max_batch_size with a budget smaller than the weights alone",
    )


@pytest.mark.points(1)
def test_memory_rejects_bad_context(kata):
    """A context_len of 0 or less, or beyond the model's context, is a ValueError"""
    r = seeds.rng(111)
    short, long, short_kv = (
        r.randint(-8, 0),
        r.randint(SMOL.max_seq_len + 1, 4 * SMOL.max_seq_len),
        r.randint(-8, 0),
    )
    cases = {
        f"max_batch_size(context_len={short})": lambda: kata.max_batch_size(SMOL, short, 2 * GIB),
        f"max_batch_size(context_len={long})": lambda: kata.max_batch_size(SMOL, long, 1024 * GIB),
        f"kv_bytes_per_sequence(context_len={short_kv})": lambda: kata.kv_bytes_per_sequence(SMOL, short_kv),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- the crossover


def compute_bound(
    config, batch: int, context_len: int, peak: float, bandwidth: float, dtype=torch.float32
) -> bool:
    cost = phase_cost(config, "decode", batch, 1, context_len, dtype)
    return bound(arithmetic_intensity(cost), peak, bandwidth) == "compute"


def oracle_crossover(
    config, peak: float, bandwidth: float, context_len: int, dtype=torch.float32, limit: int = 5000
) -> int | None:
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
    assert got == 26, (
        f"crossover_batch(SmolLM2, 1.5e11, 1.2e10, context_len=0) = {got}, want 26: the smallest "
        "batch whose decode step has intensity >= the ridge (batch 25: 12.2 FLOP/byte, 26: 12.7)"
    )


@pytest.mark.points(2)
def test_crossover_at_the_ridge_is_compute(kata):
    """A batch whose intensity equals the ridge exactly is already compute-bound"""
    batch = seeds.rng(112).randint(2, 400)
    cost = phase_cost(SMOL, "decode", batch, 1, 0)
    peak = arithmetic_intensity(cost)  # bandwidth 1.0: the ridge is exactly this batch's intensity
    got = kata.crossover_batch(SMOL, peak, 1.0, 0)
    assert got == batch, (
        f"with the ridge set to batch {batch}'s intensity, crossover_batch = {got}, want {batch} "
        "(at the ridge = compute)"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "case, overrides, contexts, dtype",
    [
        (0, {}, (256, 1024), torch.float32),  # the KV cache drags the crossover out
        (1, {}, (0, 0), torch.bfloat16),
        (2, {}, (1, 128), torch.float32),
        (3, CONFIGS[1], (1, 64), torch.float32),
    ],
)
@pytest.mark.builds_on("test_crossover_of_smollm2", "test_crossover_at_the_ridge_is_compute")
def test_crossover_matches_trying_every_batch(kata, case, overrides, contexts, dtype):
    """crossover_batch is the first batch a roofline verdict calls compute-bound"""
    config = LlamaConfig.tiny(**overrides) if overrides else SMOL
    r = seeds.rng(120 + case)
    context_len, target = r.randint(*contexts), r.randint(2, 1500)

    def intensity(batch):
        return arithmetic_intensity(phase_cost(config, "decode", batch, 1, context_len, dtype))

    # a ridge strictly between the intensities of batches target - 1 and target: the crossover is `target`
    lo, hi = intensity(target - 1), intensity(target)
    bandwidth = r.uniform(1e10, 4e12)
    peak = bandwidth * (lo + r.uniform(0.05, 0.95) * (hi - lo))
    got = kata.crossover_batch(config, peak, bandwidth, context_len, dtype)
    want = oracle_crossover(config, peak, bandwidth, context_len, dtype)
    assert got == want, (
        f"crossover_batch({overrides or 'SmolLM2'}, peak={peak:g}, bandwidth={bandwidth:g}, "
        f"context_len={context_len}, {dtype}) = {got}, want {want} (the KV cache each row reads "
        "counts as bytes)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_crossover_of_smollm2", "test_crossover_matches_trying_every_batch")
def test_long_context_never_crosses(kata):
    """At long contexts SmolLM2 decode never becomes compute-bound in fp32: crossover is None"""
    r = seeds.rng(125)
    context_len = r.randint(2048, SMOL.max_seq_len - 1)
    one, two = (phase_cost(SMOL, "decode", b, 1, context_len) for b in (1, 2))
    limit = (two.flops - one.flops) / (two.bytes - one.bytes)  # intensity's limit as the batch grows
    bandwidth = r.uniform(1e10, 4e12)
    peak = bandwidth * limit * r.uniform(1.05, 4.0)
    got = kata.crossover_batch(SMOL, peak, bandwidth, context_len)
    for batch in (1, 10**3, 10**6):
        assert not compute_bound(SMOL, batch, context_len, peak, bandwidth)
    assert got is None, (
        f"crossover_batch(SmolLM2, ridge {peak / bandwidth:.3g}, context_len={context_len}) = {got}, want None: "
        f"every row's KV cache reads cap intensity at ~{limit:.3g} FLOP/byte, left of the ridge"
    )


# --------------------------------------------------------------------------- measuring (timing semantics)


def charged(model, clock: FakeClock, decode_costs: list[float], prefill_s: float = 1.0):
    """The model with every prefill / decode_step call logged as (name, ids shape, cache length before)
    and charged on `clock`: the k-th decode step costs decode_costs[k] seconds (the last one once
    they run out), each prefill `prefill_s`."""
    calls = []
    real_prefill, real_decode = model.prefill, model.decode_step

    def prefill(ids, cache, attention_mask=None):
        calls.append(("prefill", tuple(ids.shape), cache.length))
        clock.advance(prefill_s)
        return real_prefill(ids, cache, attention_mask)

    def decode_step(ids, cache, attention_mask=None):
        k = sum(name == "decode_step" for name, _, _ in calls)
        calls.append(("decode_step", tuple(ids.shape), cache.length))
        clock.advance(decode_costs[min(k, len(decode_costs) - 1)])
        return real_decode(ids, cache, attention_mask)

    object.__setattr__(model, "prefill", prefill)
    object.__setattr__(model, "decode_step", decode_step)
    return model, calls


@pytest.mark.points(3)
def test_decode_step_time_times_one_batched_step(kata):
    """decode_step_time is the median time of ONE decode step of the whole batch on a filled cache, after one warm-up step"""
    r = seeds.rng(130)
    batch, context_len, repeats = r.randint(2, 6), r.randint(1, 40), r.choice([3, 5])
    # a slow warm-up step (0.3-1 s), then distinct timed steps of 5-50 ms; each prefill 1-2 s
    timed = [0.005 + 0.045 * (i + r.random()) / repeats for i in range(repeats)]
    r.shuffle(timed)
    warm_up, prefill_s = r.uniform(0.3, 1.0), r.uniform(1.0, 2.0)
    clock = FakeClock()
    model, calls = charged(tiny_model(seed=seeds.seed(131)), clock, [warm_up, *timed], prefill_s)
    with reading(clock, kata):
        got = kata.decode_step_time(model, batch, context_len, repeats=repeats)
    steps = [(shape, length) for name, shape, length in calls if name == "decode_step"]
    assert steps == [((batch,), context_len)] * (repeats + 1), (
        f"decode_step_time(batch {batch}, context {context_len}, repeats={repeats}) made decode steps of "
        f"(ids shape, cached positions) {steps}: want {repeats + 1} steps (one warm-up, {repeats} timed) of ids "
        f"({batch},) on a cache holding {context_len} positions"
    )
    want = statistics.median(timed)
    assert got == pytest.approx(want, rel=1e-6), (
        f"the warm-up step took {warm_up * 1e3:.4g} ms, the timed steps "
        + ", ".join(f"{t * 1e3:.4g}" for t in timed)
        + f" ms, each prefill {prefill_s:.4g} s; decode_step_time says {got * 1e3:.4g} ms: want the median of "
        f"the timed steps, {want * 1e3:.4g} ms (not their total, not the prefill, not the warm-up)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_decode_step_time_times_one_batched_step")
def test_throughput_counts_every_row(kata):
    """throughput_curve gives tokens/s per batch size: batch / step time (every row gets a token)"""
    r = seeds.rng(135)
    batch_sizes = [1, *sorted(r.sample(range(2, 9), r.randint(1, 2)))]
    decode_s, context_len, repeats = r.uniform(0.005, 0.05), r.randint(1, 20), r.randint(1, 3)
    clock = FakeClock()
    model, _ = charged(tiny_model(seed=seeds.seed(136)), clock, [decode_s])
    with reading(clock, kata):
        got = kata.throughput_curve(model, batch_sizes, context_len, repeats=repeats)
    assert list(got) == batch_sizes, (
        f"throughput_curve(batch_sizes={batch_sizes}) keys {list(got)}, want {batch_sizes}"
    )
    for batch, tokens_per_s in got.items():
        want = batch / decode_s
        assert tokens_per_s == pytest.approx(want, rel=1e-6), (
            f"steps of {decode_s * 1e3:.4g} ms at batch {batch}: throughput {tokens_per_s:.4g} tokens/s, want "
            f"{want:.4g} (a step yields one token per row)"
        )


@pytest.mark.points(1)
def test_measuring_rejects_bad_input(kata):
    """decode_step_time and throughput_curve raise ValueError for impossible sizes"""
    r = seeds.rng(140)
    model = tiny_model(seed=seeds.seed(141), max_seq_len=r.randint(16, 256))
    n = model.config.max_seq_len
    batch, ctx, bad_batch, bad_ctx = r.randint(1, 4), r.randint(0, n - 1), r.randint(-3, 0), r.randint(-5, -1)
    too_long, bad_repeats = r.randint(n, n + 50), r.randint(-2, 0)
    cases = {
        f"decode_step_time(batch_size={bad_batch})": lambda: kata.decode_step_time(model, bad_batch, ctx),
        f"decode_step_time(context_len={bad_ctx})": lambda: kata.decode_step_time(model, batch, bad_ctx),
        f"decode_step_time(context_len={too_long}) on a {n} context": (
            lambda: kata.decode_step_time(model, batch, too_long)
        ),
        f"decode_step_time(repeats={bad_repeats})": (
            lambda: kata.decode_step_time(model, batch, ctx, repeats=bad_repeats)
        ),
        "throughput_curve(batch_sizes=[])": lambda: kata.throughput_curve(model, [], ctx),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- the physics (machine tests)
# Marked `machine`: run one at a time machine-wide, the kata's timings interleaved with a plain
# timing loop's, best of several rounds, and inconclusive when this machine cannot decide
# (dojo.machine). The thresholds are the README's; whether the machine shows them is measured.

CONTEXT = (
    0  # an empty cache: at short contexts the KV cache is tiny beside the weights, and no prefill to wait for
)
CURVE = (1, 4, 16)


@pytest.fixture(scope="module")
def smollm2_layers():
    """SmolLM2's layer shapes with random weights (no load): 8 of its 30 layers and an 8192-token vocabulary.

    132 MB in fp32: a decode step still streams every weight from memory, at a quarter of the real
    model's cost. (The vocabulary is cut because a small-batch matmul on the real 113 MB LM head
    is unusually slow in some BLAS builds, which would blur the picture.)
    """
    return smollm2_shaped(n_layers=8, vocab_size=8192, max_seq_len=256)


def plain_step(model, batch: int) -> float:
    """Seconds of one decode step of `batch` rows on an empty cache, after one untimed warm-up step."""
    ids = torch.randint(model.config.vocab_size, (batch,), generator=seeds.generator(0))
    cache = model.new_cache(batch, max_len=1)
    seconds = []
    for _ in range(2):
        cache.truncate(0)
        start = time.perf_counter()
        model.decode_step(ids, cache)
        seconds.append(time.perf_counter() - start)
    return seconds[-1]


@pytest.fixture(scope="module")
def bench(kata, smollm2_layers):
    """The kata's step times and throughput curve, and plain step times, taken in turn (seconds per step);
    `bench.batches`: the batches of CURVE below the crossover of ceilings measured here and now."""
    nbytes = streaming_copy_bytes()
    bandwidth = measure_bandwidth(nbytes=nbytes, repeats=3)
    peak = measure_peak_flops(
        n=compute_bound_n(lambda n: measure_peak_flops(n=n, repeats=2), bandwidth), repeats=3
    )
    crossover = oracle_crossover(smollm2_layers.config, peak, bandwidth, CONTEXT)
    batches = [b for b in CURVE if crossover is None or b < crossover]
    model = smollm2_layers

    def kata_curve():
        return {
            str(b): b / tps for b, tps in kata.throughput_curve(model, batches, CONTEXT, repeats=1).items()
        }

    bench = SideBySide(
        {
            "kata step 1": lambda: kata.decode_step_time(model, 1, CONTEXT, repeats=1),
            "kata step 8": lambda: kata.decode_step_time(model, 8, CONTEXT, repeats=1),
            "kata curve": kata_curve,
            **{f"plain step {b}": (lambda b=b: plain_step(model, b)) for b in sorted({8, *batches})},
        }
    )
    bench.batches, bench.ceilings = batches, (crossover, peak, bandwidth)
    return bench


@pytest.mark.machine
@pytest.mark.points(2)
@pytest.mark.builds_on("test_decode_step_time_times_one_batched_step")
def test_batch_of_8_costs_at_most_3_steps(kata, bench):
    """Machine: a decode step at batch 8 costs at most 3x a step at batch 1 (the weights are read once)"""

    def claim_of(b):
        return Claim(
            (b.best("kata step 8") / b.best("kata step 1"),),
            (b.best("plain step 8") / b.best("plain step 1"),),
            lambda q: q[0] <= 3,
            lambda q: (
                f"SmolLM2-shaped model: a decode step at batch 8 costs {q[0]:.2f}x a step at batch 1 (want <= 3x: 8 rows "
                "share one read of the weights)"
            ),
        )

    check_claim(bench, claim_of)


@pytest.mark.machine
@pytest.mark.points(2)
@pytest.mark.builds_on("test_throughput_counts_every_row", "test_crossover_matches_trying_every_batch")
def test_throughput_rises_until_the_crossover(kata, bench):
    """Machine: below the crossover, 4x the batch gives at least 1.5x the tokens/s"""
    crossover, peak, bandwidth = bench.ceilings
    if len(bench.batches) < 2:
        inconclusive(
            f"measured ceilings ({peak / 1e9:.3g} GFLOP/s, {bandwidth / 1e9:.3g} GB/s) put the crossover at "
            f"batch {crossover}: too early on this machine to see the curve rise"
        )
    pairs = list(itertools.pairwise(bench.batches))

    def gains(step):  # tokens/s at the bigger batch over tokens/s at the smaller
        return tuple((big / step(big)) / (small / step(small)) for small, big in pairs)

    def claim_of(b):
        return Claim(
            gains(lambda n: b.best(f"kata curve.{n}")),
            gains(lambda n: b.best(f"plain step {n}")),
            lambda q: all(g >= 1.5 for g in q),
            lambda q: (
                f"SmolLM2-shaped model (crossover at batch {crossover} for {peak / 1e9:.3g} GFLOP/s, "
                f"{bandwidth / 1e9:.3g} GB/s): tokens/s grew "
                + ", ".join(f"{g:.2f}x from batch {s} to {t}" for g, (s, t) in zip(q, pairs))
                + " (want >= 1.5x each)"
            ),
        )

    check_claim(bench, claim_of)
