"""Hidden suite for the sampling kata: logits processors, their chain, a seeded draw, logprobs, stop strings.

No model: every test hands the kata logits and id lists drawn through dojo.seeds (edge cases built from
a draw); only the README's worked examples are fixed. Oracles are written plainly here, on Python floats:
each processor's formula, the chain in the prompt's order, the processed distribution, and a stop checker
that decodes the whole stream again after every token. Statistical checks use seeded draws and
chi-square bounds computed below.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from dojo import seeds
from dojo.grading.judging.judge import build
from dojo.testing import banned_uses, expect_value_error

KATA = "sampling"
pytestmark = pytest.mark.usefixtures("one_thread")
INF = math.inf


# ---------------------------------------------------------------------------------------------
# Oracles: one row at a time, Python floats.


def softmax(z: list[float]) -> list[float]:
    top = max(z)
    e = [math.exp(x - top) if x > -INF else 0.0 for x in z]
    return [x / sum(e) for x in e]


def o_top_k(z, k):
    kth = sorted(z, reverse=True)[min(k, len(z)) - 1]
    return [x if x >= kth else -INF for x in z]


def o_top_p(z, p):
    probs, keep, mass = softmax(z), set(), 0.0
    for v in sorted(range(len(z)), key=lambda v: (-probs[v], v)):
        if mass < p:
            keep.add(v)
        mass += probs[v]
    return [x if v in keep else -INF for v, x in enumerate(z)]


def o_min_p(z, m):
    probs = softmax(z)
    return [x if q >= m * max(probs) else -INF for x, q in zip(z, probs)]


def o_repetition(z, prompt, output, penalty):
    seen = set(prompt) | set(output)
    return [(x / penalty if x > 0 else x * penalty) if v in seen else x for v, x in enumerate(z)]


def o_frequency_presence(z, output, presence, frequency):
    count = Counter(output)
    return [x - frequency * count[v] - presence * (count[v] > 0) for v, x in enumerate(z)]


def o_chain(z, prompt, output, p: dict) -> list[float]:
    """The prompt's order: bias, repetition, frequency/presence, temperature, top-k, top-p, min-p."""
    z = list(z)
    for v, b in (p.get("logit_bias") or {}).items():
        z[v] += b
    if p.get("repetition_penalty") is not None:
        z = o_repetition(z, prompt, output, p["repetition_penalty"])
    z = o_frequency_presence(z, output, p.get("presence_penalty", 0.0), p.get("frequency_penalty", 0.0))
    z = [x / p.get("temperature", 1.0) for x in z]
    if p.get("top_k") is not None:
        z = o_top_k(z, p["top_k"])
    if p.get("top_p") is not None:
        z = o_top_p(z, p["top_p"])
    if p.get("min_p") is not None:
        z = o_min_p(z, p["min_p"])
    return z


def decode_complete(data: bytes) -> str:
    """The text of the whole characters in `data` (valid UTF-8 cut anywhere): drop 0-3 bytes at the end."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    raise AssertionError(f"test setup: {data!r} is not UTF-8 cut at its end")


def stop_oracle(token_bytes, stop, tokens) -> tuple[list[tuple[str, bool]], str | None]:
    """(what each feed returns, what finish returns or None after a stop), decoding everything each time."""
    pieces, shown, data = [], 0, b""
    for t in tokens:
        data += token_bytes[t]
        text = decode_complete(data)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            pieces.append((text[shown : min(hits)], True))
            return pieces, None
        hold = max([n for s in stop for n in range(1, len(s)) if text.endswith(s[:n])], default=0)
        pieces.append((text[shown : len(text) - hold], False))
        shown = len(text) - hold
    return pieces, data.decode("utf-8")[shown:]


# ---------------------------------------------------------------------------------------------
# Inputs.


def random_logits(n: int, B: int = 3, V: int = 12, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(B, V, generator=seeds.generator(n)) * scale


def random_ids(n: int, B: int = 3, V: int = 12) -> tuple[list[list[int]], list[list[int]]]:
    """Prompts and outputs with repeats, some tokens in both, some rows' outputs empty."""
    rng = seeds.rng(n)
    prompts = [[rng.randrange(V) for _ in range(rng.randrange(1, 6))] for _ in range(B)]
    outputs = [[rng.randrange(V // 2) for _ in range(rng.choice([0, 3, 8]))] for _ in range(B)]
    return prompts, outputs


def rows(x: torch.Tensor) -> list[list[float]]:
    return x.tolist()


def assert_logits(got: torch.Tensor, want: list[list[float]], what: str) -> None:
    """Same shape, -inf exactly where want has it, the rest within 1e-5 (relative)."""
    assert tuple(got.shape) == (len(want), len(want[0])), (
        f"{what}: shape {tuple(got.shape)}, want {len(want)} x {len(want[0])}"
    )
    for b, (g_row, w_row) in enumerate(zip(got.tolist(), want)):
        removed = [v for v, x in enumerate(w_row) if x == -INF]
        got_removed = [v for v, x in enumerate(g_row) if x == -INF]
        assert got_removed == removed, (
            f"{what}, row {b}: tokens set to -inf {got_removed}, want {removed}\n  logits in {fmt(w_row)}"
        )
        for v, (g, w) in enumerate(zip(g_row, w_row)):
            if w > -INF:
                assert g == pytest.approx(w, rel=1e-5, abs=1e-5), (
                    f"{what}, row {b}, token {v}: got {g}, want {w:.6f}"
                )


def fmt(row) -> str:
    return "[" + ", ".join("-inf" if x == -INF else f"{x:.3f}" for x in row) + "]"


def clear_of(values: list[float], edge: float, margin: float = 1e-4) -> bool:
    """No value within `margin` of a filter's boundary (fp32 and float64 could then disagree)."""
    return all(abs(x - edge) > margin for x in values)


NO = [[]]  # no prompt and no output, one row


# ---------------------------------------------------------------------------------------------
# Each processor on its own.


@pytest.mark.points(1)
def test_temperature_divides_logits(kata):
    """Temperature(t) returns logits / t"""
    x = random_logits(1)
    prompts, outputs = random_ids(1)
    for t in (0.25, 0.7, 1.0, 1.8):
        got = kata.Temperature(t)(prompts, outputs, x)
        assert_logits(got, [[v / t for v in r] for r in rows(x)], f"Temperature({t})")


@pytest.mark.example
@pytest.mark.points(1)
def test_example_top_k_keeps_ties(kata):
    """TopK keeps every token at least as large as the k-th largest logit: a tie with the k-th stays"""
    got = kata.TopK(2)(NO, NO, torch.tensor([[1.0, 3.0, 1.0, 2.0, 2.0]]))
    assert got.tolist() == [[-INF, 3.0, -INF, 2.0, 2.0]], (
        f"TopK(2) on [1, 3, 1, 2, 2]: got {got.tolist()}, want [-inf, 3, -inf, 2, 2] (tokens 3 and 4 tie for 2nd)"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_example_top_k_keeps_ties")
def test_top_k_random(kata):
    """TopK keeps the k largest logits of each row and sets the rest to -inf; k >= V keeps all"""
    x = random_logits(2, V=10)
    prompts, outputs = random_ids(2)
    for k in (1, 3, 9, 10, 40):
        assert_logits(kata.TopK(k)(prompts, outputs, x), [o_top_k(r, k) for r in rows(x)], f"TopK({k})")


def drawn_distribution(r, V: int, gap: float = 0.02) -> list[float]:
    """V probabilities whose sorted values are at least `gap` apart, in a drawn token order."""
    while True:
        w = [r.uniform(1.0, 10.0) for _ in range(V)]
        probs = [x / sum(w) for x in w]
        ranked = sorted(probs)
        if all(b - a > gap for a, b in zip(ranked, ranked[1:])):
            return probs


@pytest.mark.points(2)
def test_top_p_keeps_the_token_that_crosses_p(kata):
    """TopP keeps the smallest set of most probable tokens whose mass reaches p: the token that crosses p stays"""
    r = seeds.rng(100)
    probs = drawn_distribution(r, r.randint(4, 7))
    shift = r.uniform(-5.0, 5.0)  # softmax ignores it
    z = torch.tensor([[math.log(q) + shift for q in probs]])
    ranked = sorted(range(len(probs)), key=lambda v: -probs[v])
    masses = [sum(probs[v] for v in ranked[: i + 1]) for i in range(len(probs))]
    cases = [(r.uniform(lo + 1e-3, hi - 1e-3), i) for i, (lo, hi) in enumerate(zip([0.0, *masses], masses))]
    for p, i in [*cases, (1.0, len(probs) - 1)]:  # p in (mass of i tokens, mass of i + 1]: i + 1 stay
        kept = sorted(ranked[: i + 1])
        got = kata.TopP(p)(NO, NO, z)
        got_kept = [v for v, x in enumerate(got[0].tolist()) if x > -INF]
        assert got_kept == kept, (
            f"TopP({p:.4f}) on probabilities {[round(q, 4) for q in probs]}: kept tokens {got_kept}, want {kept} "
            "(a token stays while the mass of the tokens before it is < p)"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_top_p_keeps_the_token_that_crosses_p")
def test_top_p_ties_go_to_the_lower_id(kata):
    """TopP sorts tied probabilities by token id: among equal tokens the lower ids are kept"""
    r = seeds.rng(101)
    V = r.randint(6, 12)
    tied = sorted(r.sample(range(V), r.randint(3, V - 2)))
    top = r.uniform(-2.0, 2.0)
    z = [top if v in tied else top - r.uniform(0.5, 3.0) for v in range(V)]
    q = softmax(z)[tied[0]]
    j = r.randint(1, len(tied) - 2)  # p falls inside the tie: j + 1 of the tied tokens reach it
    p = r.uniform(j * q + 1e-3, (j + 1) * q - 1e-3)
    got = kata.TopP(p)(NO, NO, torch.tensor([z]))
    kept = [v for v, x in enumerate(got[0].tolist()) if x > -INF]
    want = tied[: j + 1]
    assert kept == want, (
        f"TopP({p:.4f}), tokens {tied} tied at p = {q:.4f}: kept {kept}, want {want} (lower ids first)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_top_p_keeps_the_token_that_crosses_p", "test_top_p_ties_go_to_the_lower_id")
def test_top_p_random(kata):
    """TopP equals the nucleus rule on random logits and p"""
    x = random_logits(3, B=4, V=16)
    prompts, outputs = random_ids(3, B=4)
    rng = seeds.rng(3)
    for _ in range(6):
        p = rng.uniform(0.05, 0.99)
        masses = [sum(sorted(softmax(r), reverse=True)[:i]) for r in rows(x) for i in range(16)]
        if not clear_of(masses, p):
            continue
        assert_logits(kata.TopP(p)(prompts, outputs, x), [o_top_p(r, p) for r in rows(x)], f"TopP({p:.4f})")


@pytest.mark.points(1)
@pytest.mark.builds_on("test_top_p_keeps_the_token_that_crosses_p")
def test_top_p_one_keeps_every_token_of_a_real_vocabulary(kata):
    """TopP(1.0) keeps all 49,152 tokens of SmolLM2's vocabulary, however the probabilities' fp32 sum rounds"""
    x = random_logits(13, B=2, V=49152, scale=3.0)
    got = kata.TopP(1.0)(NO * 2, NO * 2, x)
    removed = [(b, v) for b, v in (got == -INF).nonzero().tolist()]
    assert not removed, (
        f"TopP(1.0) on random logits over 49,152 tokens set {len(removed)} tokens to -inf, e.g. (row, token) "
        f"{removed[:3]}: p = 1 keeps everything (an fp32 running sum of the probabilities can reach 1.0 "
        "before the last tokens)"
    )


@pytest.mark.points(1)
def test_min_p_against_the_top_probability(kata):
    """MinP keeps the tokens whose probability is at least min_p times the top probability"""
    r = seeds.rng(102)
    probs = drawn_distribution(r, r.randint(5, 8))
    top = r.uniform(1.5, 3.0)  # softmax ignores the shift; a positive top logit makes min_p on logits differ
    z = [math.log(q / max(probs)) + top for q in probs]
    ratios = sorted(q / max(probs) for q in probs)
    drawn = [r.uniform(lo + 1e-3, hi - 1e-3) for lo, hi in zip(ratios, ratios[1:])]
    for m in [*r.sample(drawn, min(3, len(drawn))), 0.0, 1.0]:
        kept = [v for v, q in enumerate(probs) if q >= m * max(probs)]
        got = kata.MinP(m)(NO, NO, torch.tensor([z]))
        got_kept = [v for v, x in enumerate(got[0].tolist()) if x > -INF]
        assert got_kept == kept, (
            f"MinP({m:.4f}) on logits {fmt(z)} (probabilities {[round(q, 3) for q in probs]}): kept {got_kept}, "
            f"want {kept}: keep p >= min_p * p_max, on probabilities, not logits"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_min_p_against_the_top_probability")
def test_min_p_random(kata):
    """MinP equals p >= min_p * p_max on random logits"""
    x = random_logits(4, B=4, V=16)
    prompts, outputs = random_ids(4, B=4)
    rng = seeds.rng(4)
    for _ in range(6):
        m = rng.uniform(0.01, 0.9)
        ratios = [q / max(softmax(r)) for r in rows(x) for q in softmax(r)]
        if not clear_of(ratios, m):
            continue
        assert_logits(kata.MinP(m)(prompts, outputs, x), [o_min_p(r, m) for r in rows(x)], f"MinP({m:.4f})")


@pytest.mark.example
@pytest.mark.points(1)
def test_example_repetition_penalty(kata):
    """RepetitionPenalty divides a seen token's positive logit by the penalty and multiplies a negative one"""
    x = torch.tensor([[2.0, -1.0, 0.5, 0.0]])
    got = kata.RepetitionPenalty(2.0)([[0]], [[1, 1, 3]], x).tolist()
    assert got == [[1.0, -2.0, 0.5, 0.0]], (
        f"RepetitionPenalty(2) on [2, -1, .5, 0], prompt [0], output [1, 1, 3]: got {got}, want [1, -2, .5, 0] "
        "(2 / 2 for the prompt's token 0, -1 * 2 for token 1, once however often it appears)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_repetition_penalty")
def test_repetition_penalty_random(kata):
    """RepetitionPenalty applies to every token of the prompt and the output, once each, on random inputs"""
    x = random_logits(5)
    prompts, outputs = random_ids(5)
    for penalty in (1.3, 0.8, 2.5):
        want = [o_repetition(r, p, o, penalty) for r, p, o in zip(rows(x), prompts, outputs)]
        assert_logits(
            kata.RepetitionPenalty(penalty)(prompts, outputs, x),
            want,
            f"RepetitionPenalty({penalty}), prompts {prompts}, outputs {outputs}",
        )


@pytest.mark.example
@pytest.mark.points(1)
def test_example_frequency_presence(kata):
    """FrequencyPresencePenalty subtracts frequency * count + presence for each token of the output"""
    x = torch.tensor([[2.0, -1.0, 0.5, 0.0]])
    got = kata.FrequencyPresencePenalty(presence_penalty=1.0, frequency_penalty=0.5)(
        [[0]], [[1, 1, 3]], x
    ).tolist()
    assert got == [[2.0, -3.0, 0.5, -1.5]], (
        f"presence 1, frequency .5 on [2, -1, .5, 0], prompt [0], output [1, 1, 3]: got {got}, want "
        "[2, -3, .5, -1.5] (token 1: -1 - .5 * 2 - 1; token 3: 0 - .5 - 1; the prompt's token 0 is not penalised)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_frequency_presence")
def test_frequency_presence_random(kata):
    """FrequencyPresencePenalty counts the output only, on random inputs and penalties of both signs"""
    x = random_logits(6)
    prompts, outputs = random_ids(6)
    for presence, frequency in [(0.7, 0.0), (0.0, 0.4), (1.5, -0.3), (-0.5, 1.2)]:
        want = [o_frequency_presence(r, o, presence, frequency) for r, o in zip(rows(x), outputs)]
        assert_logits(
            kata.FrequencyPresencePenalty(presence_penalty=presence, frequency_penalty=frequency)(
                prompts, outputs, x
            ),
            want,
            f"presence {presence}, frequency {frequency}, prompts {prompts}, outputs {outputs}",
        )


@pytest.mark.points(1)
def test_logit_bias_adds(kata):
    """LogitBias adds each token's bias to its logit in every row"""
    x = random_logits(7)
    prompts, outputs = random_ids(7)
    bias = {0: 5.0, 3: -100.0, 11: 0.25}
    want = [[v + bias.get(j, 0.0) for j, v in enumerate(r)] for r in rows(x)]
    assert_logits(kata.LogitBias(bias)(prompts, outputs, x), want, f"LogitBias({bias})")


@pytest.mark.points(1)
@pytest.mark.candidate_process  # whether the caller's tensor changed is seen only where the call ran
def test_processors_leave_their_input(kata):
    """Every processor returns new logits and leaves the caller's tensor as it was"""
    prompts, outputs = random_ids(8)
    for make in (
        lambda: kata.Temperature(0.5),
        lambda: kata.TopK(3),
        lambda: kata.TopP(0.5),
        lambda: kata.MinP(0.3),
        lambda: kata.RepetitionPenalty(1.5),
        lambda: kata.FrequencyPresencePenalty(0.5, 0.5),
        lambda: kata.LogitBias({1: 2.0}),
    ):
        x = random_logits(8)
        before = x.clone()
        processor = make()
        processor(prompts, outputs, x)
        assert torch.equal(x, before), f"{type(processor).__name__} changed the logits it was given, in place"


# ---------------------------------------------------------------------------------------------
# The chain.

BASICS = (
    "test_temperature_divides_logits",
    "test_top_k_random",
    "test_top_p_random",
    "test_min_p_random",
    "test_repetition_penalty_random",
    "test_frequency_presence_random",
    "test_logit_bias_adds",
)


@pytest.mark.example
@pytest.mark.points(1)
@pytest.mark.builds_on("test_top_p_keeps_the_token_that_crosses_p", "test_temperature_divides_logits")
def test_example_temperature_changes_the_nucleus(kata):
    """Temperature applies before top-p: at temperature 0.5 the nucleus of the README's logits is one token"""
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    for t, want in [(1.0, [[2.0, 1.0, -INF, -INF]]), (0.5, [[4.0, -INF, -INF, -INF]])]:
        got = kata.apply_chain(kata.make_chain(temperature=t, top_p=0.8), NO, NO, z).tolist()
        assert got == want, (
            f"make_chain(temperature={t}, top_p=0.8) on [2, 1, .5, -1]: got {got}, want {want} "
            "(temperature first, then the nucleus of the sharpened probabilities)"
        )


@pytest.mark.example
@pytest.mark.points(1)
@pytest.mark.builds_on("test_logit_bias_adds", "test_example_repetition_penalty")
def test_example_bias_before_repetition_penalty(kata):
    """The logit bias applies before the repetition penalty"""
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    got = kata.apply_chain(
        kata.make_chain(logit_bias={1: 3.0}, repetition_penalty=2.0), [[1]], NO, z
    ).tolist()
    assert got == [[2.0, 2.0, 0.5, -1.0]], (
        f"logit_bias {{1: 3}} and repetition_penalty 2, prompt [1], on [2, 1, .5, -1]: got {got}, "
        "want [2, 2, .5, -1] (1 + 3 = 4, then halved)"
    )


CHAINS = [
    dict(temperature=0.6, top_p=0.7),
    dict(temperature=1.7, min_p=0.15),
    dict(top_p=0.6, min_p=0.3),
    dict(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05),
    dict(repetition_penalty=1.4, presence_penalty=0.6, frequency_penalty=0.3, temperature=0.9),
    dict(logit_bias={2: 4.0, 5: -1.5, 7: 2.5}, repetition_penalty=1.8, frequency_penalty=-0.4, top_p=0.8),
    dict(
        logit_bias={1: 1.0},
        repetition_penalty=1.2,
        presence_penalty=0.4,
        temperature=0.7,
        top_k=6,
        top_p=0.85,
        min_p=0.1,
    ),
]


@pytest.mark.points(3)
@pytest.mark.parametrize("params", CHAINS, ids=lambda p: ",".join(p))
@pytest.mark.builds_on(
    *BASICS, "test_example_temperature_changes_the_nucleus", "test_example_bias_before_repetition_penalty"
)
def test_chain_order(kata, params):
    """make_chain applies bias, repetition, frequency/presence, temperature, top-k, top-p, min-p, in that order"""
    for n in range(20, 24):
        x = random_logits(n, B=4)
        prompts, outputs = random_ids(n, B=4)
        want = [o_chain(r, p, o, params) for r, p, o in zip(rows(x), prompts, outputs)]
        got = kata.apply_chain(kata.make_chain(**params), prompts, outputs, x)
        assert_logits(got, want, f"make_chain({params}), prompts {prompts}, outputs {outputs}")


@pytest.mark.points(1)
@pytest.mark.builds_on("test_temperature_divides_logits", "test_top_p_random")
def test_apply_chain_in_list_order(kata):
    """apply_chain runs a chain's processors in list order; an empty chain returns the logits"""
    x = random_logits(9)
    prompts, outputs = random_ids(9)
    want = [o_top_p([v / 0.5 for v in r], 0.6) for r in rows(x)]
    got = kata.apply_chain([kata.Temperature(0.5), kata.TopP(0.6)], prompts, outputs, x)
    assert_logits(got, want, "apply_chain([Temperature(0.5), TopP(0.6)])")
    want = [[v / 0.5 for v in o_top_p(r, 0.6)] for r in rows(x)]
    got = kata.apply_chain([kata.TopP(0.6), kata.Temperature(0.5)], prompts, outputs, x)
    assert_logits(got, want, "apply_chain([TopP(0.6), Temperature(0.5)])")
    assert_logits(kata.apply_chain([], prompts, outputs, x), rows(x), "apply_chain([])")


# ---------------------------------------------------------------------------------------------
# Sampling and logprobs.


def seeded_generator(n: int):
    """A torch.Generator where the kata's code runs (the worker, under judge mode), seeded for draw n."""
    gen = build("torch:Generator")
    gen.manual_seed(seeds.seed(n))
    return gen


def chi2_sf(x: float, df: int) -> float:
    """P(chi2(df) > x), closed form: for even df e^(-x/2) sum_{k<df/2} (x/2)^k / k!; for odd df
    erfc(sqrt(x/2)) + e^(-x/2) sum_{k<(df-1)/2} (x/2)^(k+1/2) / Gamma(k+3/2)."""
    h = x / 2
    if df % 2 == 0:
        return math.exp(-h) * sum(h**k / math.factorial(k) for k in range(df // 2))
    return math.erfc(math.sqrt(h)) + math.exp(-h) * sum(
        h ** (k + 0.5) / math.gamma(k + 1.5) for k in range(df // 2)
    )


def chi2_isf(q: float, df: int) -> float:
    """The x with P(chi2(df) > x) = q, by bisection (isf(1e-6, 1) = 23.93, isf(1e-6, 7) = 40.52, as scipy)."""
    lo, hi = 0.0, 500.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, df) > q else (lo, mid)
    return hi


SAMPLE_LOGITS = [2.0, 1.6, 1.2, 1.2, 0.4, -0.3, -1.0, -2.5]
SAMPLE_CHAINS = [
    dict(),
    dict(temperature=0.6),
    dict(temperature=1.5, top_k=5),
    dict(top_p=0.8),
    dict(temperature=1.3, min_p=0.2),
    dict(logit_bias={7: 3.0, 0: -1.0}, temperature=0.8, top_k=6),
]  # (the penalties loop over rows; the chain-order and logprob tests check them inside sample)
DRAWS = 20_000
# A correct sampler fails one case with probability 1e-7 (the chi-square bound's tail; the rarest tokens are
# pooled into bins until every bin expects >= MIN_EXPECTED draws, where the chi-square approximation holds:
# temperature 0.6 expects 5 of the least likely token), so one test of 6 cases fails with probability < 6e-7 < 1e-6.
# Draws are seeded, so in practice a run is the same every time.
MIN_EXPECTED = 100
TAIL = 1e-7


def expected_bins(want: list[float]) -> list[list[int]]:
    """The kept tokens in bins, rarest pooled together until each bin expects >= MIN_EXPECTED draws."""
    bins, pool = [], []
    for v in sorted((v for v, q in enumerate(want) if q > 0), key=lambda v: want[v]):
        pool.append(v)
        if DRAWS * sum(want[u] for u in pool) >= MIN_EXPECTED:
            bins, pool = [*bins, pool], []
    if pool:  # what is left joins the last (most probable) bin
        bins = [*bins[:-1], bins[-1] + pool] if bins else [pool]
    return bins


@pytest.mark.points(3)
@pytest.mark.parametrize("params", SAMPLE_CHAINS, ids=lambda p: ",".join(p) or "plain")
@pytest.mark.builds_on("test_chain_order")
def test_sample_matches_processed_distribution(kata, params):
    """sample draws from softmax of the processed logits (chi-square over 20,000 seeded draws)"""
    # SAMPLE_LOGITS with the token ids permuted and a shift added, both drawn: the chains hold no penalty,
    # so the processed probabilities are the same set whatever the draw.
    r = seeds.rng(120 + SAMPLE_CHAINS.index(params))
    perm = list(range(len(SAMPLE_LOGITS)))  # token v of SAMPLE_LOGITS is token perm[v] here
    r.shuffle(perm)
    shift = r.uniform(-3.0, 3.0)
    logits = [0.0] * len(SAMPLE_LOGITS)
    for v, z in enumerate(SAMPLE_LOGITS):
        logits[perm[v]] = z + shift
    if "logit_bias" in params:
        params = {**params, "logit_bias": {perm[v]: b for v, b in params["logit_bias"].items()}}
    # every row alike: DRAWS draws of one distribution
    prompt, output = [perm[3], perm[4]], [perm[0], perm[0], perm[1], perm[5]]
    x = torch.tensor([logits]).expand(DRAWS, -1).contiguous()
    r = kata.sample(kata.make_chain(**params), [prompt] * DRAWS, [output] * DRAWS, x, seeded_generator(30))
    counts = Counter(r.tokens.tolist())
    want = softmax(o_chain(logits, prompt, output, params))
    banned = sorted(v for v in counts if want[v] == 0)
    assert not banned, (
        f"make_chain({params}): tokens {banned} were drawn but the chain removes them; counts {dict(counts)}"
    )
    bins = expected_bins(want)
    chi2 = sum(
        (sum(counts[v] for v in b) - DRAWS * sum(want[v] for v in b)) ** 2 / (DRAWS * sum(want[v] for v in b))
        for b in bins
    )
    bound = chi2_isf(TAIL, len(bins) - 1) if len(bins) > 1 else 0.0
    assert chi2 <= bound, (
        f"make_chain({params}) on logits {fmt(logits)}, prompt {prompt}, output {output}: {DRAWS} draws "
        f"counted {[counts[v] for v in range(8)]}, want about {[round(DRAWS * p) for p in want]} "
        f"(chi-square {chi2:.1f} > {bound:.1f})"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_temperature_divides_logits")
def test_sample_is_seeded(kata):
    """The same seed gives the same tokens; other seeds give other tokens"""
    x = random_logits(10, B=64, V=50)
    prompts, outputs = [[]] * 64, [[]] * 64
    chain = kata.make_chain(temperature=1.5)
    a = kata.sample(chain, prompts, outputs, x, seeded_generator(31)).tokens.tolist()
    b = kata.sample(chain, prompts, outputs, x, seeded_generator(31)).tokens.tolist()
    assert a == b, "two draws with generators seeded alike differ"
    c = kata.sample(chain, prompts, outputs, x, seeded_generator(32)).tokens.tolist()
    assert c != a, f"generators seeded differently drew the same 64 tokens {a}"


@pytest.mark.points(1)
@pytest.mark.builds_on("test_temperature_divides_logits")
def test_low_temperature_is_greedy(kata):
    """As temperature -> 0 sampling becomes greedy: at 0.01 every draw is the argmax"""
    x = random_logits(11, B=200, V=20, scale=3.0)
    rowlist = rows(x)
    gaps = [sorted(r)[-1] - sorted(r)[-2] for r in rowlist]
    keep = [b for b, g in enumerate(gaps) if g > 0.3]  # exp(-0.3 / 0.01) = e^-30: never drawn
    x = x[keep]
    r = kata.sample(
        kata.make_chain(temperature=0.01), [[]] * len(keep), [[]] * len(keep), x, seeded_generator(33)
    )
    want = x.argmax(dim=-1).tolist()
    wrong = [b for b, (g, w) in enumerate(zip(r.tokens.tolist(), want)) if g != w]
    assert not wrong, f"temperature 0.01: rows {wrong[:5]} drew a token other than the argmax"


@pytest.mark.example
@pytest.mark.points(1)
@pytest.mark.builds_on("test_top_k_random")
def test_example_sample_logprobs(kata):
    """sample reports logprobs of the processed distribution: after top-k 2 the drawn token's is log(.224 / .833)"""
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    r = kata.sample(
        kata.make_chain(top_k=2), NO, NO, z, build("torch:Generator").manual_seed(0), top_logprobs=3
    )
    got = (
        r.tokens.tolist(),
        [round(v, 4) for v in r.logprobs.tolist()],
        r.top_ids.tolist(),
        [round(v, 4) for v in r.top_logprobs[0].tolist()],
    )
    want = ([1], [-1.3133], [[0, 1, 2]], [-0.3133, -1.3133, -INF])
    assert got == want, (
        f"sample(make_chain(top_k=2), seed 0, top_logprobs=3) on [2, 1, .5, -1]: got {got}, want {want}"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "params",
    [
        dict(temperature=0.5),
        dict(top_k=4, temperature=1.4),
        dict(repetition_penalty=1.6, top_p=0.9),
        dict(min_p=0.2, frequency_penalty=0.7),
    ],
    ids=lambda p: ",".join(p),
)
@pytest.mark.builds_on("test_chain_order", "test_example_sample_logprobs")
def test_logprobs_are_of_the_processed_distribution(kata, params):
    """logprobs and top_logprobs are log_softmax of the processed logits, top ones best first, ties lower id first"""
    x = random_logits(12, B=5, V=12)
    prompts, outputs = random_ids(12, B=5)
    r = kata.sample(kata.make_chain(**params), prompts, outputs, x, seeded_generator(34), top_logprobs=6)
    tokens = r.tokens.tolist()
    for b, (row, p, o) in enumerate(zip(rows(x), prompts, outputs)):
        probs = softmax(o_chain(row, p, o, params))
        logp = [math.log(q) if q > 0 else -INF for q in probs]
        where = f"make_chain({params}), row {b}"
        assert probs[tokens[b]] > 0, f"{where}: drew token {tokens[b]}, which the chain removes"
        assert r.logprobs[b].item() == pytest.approx(logp[tokens[b]], abs=1e-4), (
            f"{where}: drawn token {tokens[b]} has logprob {r.logprobs[b].item():.4f}, want {logp[tokens[b]]:.4f} "
            "(log p after the chain, the distribution it was drawn from; not the raw logits')"
        )
        order = sorted(range(12), key=lambda v: (-logp[v], v))[:6]
        assert r.top_ids[b].tolist() == order, f"{where}: top_ids {r.top_ids[b].tolist()}, want {order}"
        for got, v in zip(r.top_logprobs[b].tolist(), order):
            ok = got == -INF if logp[v] == -INF else got == pytest.approx(logp[v], abs=1e-4)
            assert ok, f"{where}: top logprob of token {v} is {got}, want {logp[v]:.4f}"


# ---------------------------------------------------------------------------------------------
# Stop strings over a token stream.

TOK = [b"Hel", b"lo", b" wor", b"ld", b"!", b"\xe2\x82", b"\xac", b"\n\n", b"\n"]


def feed_all(kata, token_bytes, stop, tokens):
    checker = kata.StopChecker(token_bytes, stop)
    pieces = []
    for t in tokens:
        text, stopped = checker.feed(t)
        pieces.append((text, bool(stopped)))
        if stopped:
            return pieces, None
    return pieces, checker.finish()


LETTERS = "abcdefghijklmnopqrstuvwxyz"
FILLER = "0123456789 .,;-"  # no letter: a stop string of letters never occurs in it


def cut(r, data: bytes, at: tuple[int, ...] = ()) -> tuple[list[bytes], list[int]]:
    """(vocabulary, token ids): `data` cut into tokens of 1-4 bytes at drawn places and at each offset in `at`."""
    cuts, i = set(at), 0
    while i < len(data):
        i += r.randint(1, 4)
        cuts.add(i)
    ends = sorted(c for c in cuts if 0 < c < len(data)) + [len(data)]
    pieces = [data[a:b] for a, b in zip([0, *ends], ends)]
    vocab = sorted(set(pieces))
    r.shuffle(vocab)
    return vocab, [vocab.index(t) for t in pieces]


def filler(r, lo: int = 1, hi: int = 8) -> str:
    return "".join(r.choice(FILLER) for _ in range(r.randint(lo, hi)))


def letters(r, n: int) -> str:
    return "".join(r.sample(LETTERS, n))  # distinct letters: a stop string that cannot overlap itself


@pytest.mark.points(1)
def test_utf8_never_split(kata):
    """With no stop strings, a character split across tokens is shown whole once its last byte arrives"""
    r = seeds.rng(110)
    for _ in range(4):
        chars = [r.choice(ALPHABET) for _ in range(r.randint(3, 20))]
        k = r.randrange(len(chars))
        chars[k] = r.choice(["é", "€", "😀"])  # one character at least is cut inside its bytes
        offset = len("".join(chars[:k]).encode())
        vocab, tokens = cut(r, "".join(chars).encode(), (offset + r.randint(1, len(chars[k].encode()) - 1),))
        pieces, rest = feed_all(kata, vocab, [], tokens)
        want, want_rest = stop_oracle(vocab, [], tokens)
        assert pieces == want and rest == want_rest, (
            f"tokens {[vocab[t] for t in tokens]}: feed returned {pieces}, then finish {rest!r}; want {want}, "
            f"then {want_rest!r} (hold the bytes of an incomplete character; never show U+FFFD for them)"
        )


@pytest.mark.points(1)
def test_stop_prefix_is_held_back(kata):
    """Text that may be the start of a stop string is held back, then shown once it cannot be"""
    r = seeds.rng(111)
    for _ in range(4):
        stop = letters(r, r.randint(3, 6))
        j = r.randint(1, len(stop) - 1)
        head = filler(r) + stop[:j]  # ends with the start of the stop string, which must wait
        text = head + r.choice("!?") + filler(r)  # then a character that rules it out
        vocab, tokens = cut(r, text.encode(), (len(head),))
        pieces, rest = feed_all(kata, vocab, [stop], tokens)
        want, want_rest = stop_oracle(vocab, [stop], tokens)
        assert pieces == want and rest == want_rest, (
            f"stop {stop!r}, tokens {[vocab[t] for t in tokens]}: feed returned {pieces}, finish {rest!r}; want "
            f"{want}, then {want_rest!r}: {stop[:j]!r} waits (it may start {stop!r}), and is shown in full once "
            "the next character rules it out"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_stop_prefix_is_held_back")
def test_stop_string_is_not_shown(kata):
    """A stop string across tokens stops the stream; only the text before it is shown"""
    r = seeds.rng(112)
    for _ in range(4):
        word = letters(r, r.randint(3, 7))
        space = r.randint(1, len(word) - 1)
        stop = word[:space] + " " + word[space:]  # like 'o world': letters at both ends
        head = filler(r)
        vocab, tokens = cut(r, (head + stop + filler(r)).encode(), (len(head) + r.randint(1, len(stop) - 1),))
        pieces, _ = feed_all(kata, vocab, [stop], tokens)
        want, _ = stop_oracle(vocab, [stop], tokens)
        assert pieces == want, (
            f"stop {stop!r}, tokens {[vocab[t] for t in tokens]}: feed returned {pieces}, want {want} "
            f"(the stop text is never shown; {head!r} is all the reader sees)"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_stop_string_is_not_shown")
def test_stop_cuts_at_the_earliest_occurrence(kata):
    """When one token completes two stop strings, the text is cut where the earliest one starts"""
    r = seeds.rng(113)
    w, head = letters(r, 5), filler(r, 0, 6)
    vocab = [(head + w[:2]).encode(), (w[2:] + filler(r, 0, 6)).encode()]
    stops = [w[3:], w[1:3]]  # the second token completes both; the one listed second starts first
    pieces, _ = feed_all(kata, vocab, stops, [0, 1])
    want = stop_oracle(vocab, stops, [0, 1])[0]
    assert pieces == want, (
        f"stops {stops}, tokens {vocab}: feed returned {pieces}, want {want}: "
        f"{stops[1]!r} starts before {stops[0]!r}, though listed second"
    )
    stop = r.choice("!?;")
    token = (letters(r, r.randint(1, 4)) + stop + letters(r, r.randint(1, 4))).encode()
    pieces, _ = feed_all(kata, [token], [stop], [0])
    want = stop_oracle([token], [stop], [0])[0]
    assert pieces == want, f"stop {stop!r}, one token {token!r}: feed returned {pieces}, want {want}"


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_utf8_never_split", "test_stop_prefix_is_held_back", "test_stop_string_is_not_shown"
)
def test_example_stop_checker(kata):
    """The README's streams: a stop string across tokens, a split character, a partial match that fails"""
    got = feed_all(kata, TOK, ["\n\n"], [0, 1, 8, 5, 6, 8, 2, 7])[0]
    want = [
        ("Hel", False),
        ("lo", False),
        ("", False),
        ("", False),
        ("\n€", False),
        ("", False),
        ("\n wor", False),
        ("", True),
    ]
    assert got == want, f"stop '\\n\\n': feed returned {got}, want {want}"
    got = feed_all(kata, TOK, ["world"], [0, 1, 2, 4, 2, 3])[0]
    want = [("Hel", False), ("lo", False), (" ", False), ("wor!", False), (" ", False), ("", True)]
    assert got == want, f"stop 'world': feed returned {got}, want {want}"
    checker = kata.StopChecker(TOK, ["world"])
    got = ([checker.feed(0), checker.feed(2)], checker.finish())
    assert got == ([("Hel", False), (" ", False)], "wor"), f"stop 'world', Hel ' wor', finish: got {got}"


ALPHABET = ["a", "b", " ", "\n", "é", "€", "!", "😀"]
STOPS = [["ab"], ["\n\n"], ["é!", "b a"], ["€€", "a"], ["aa", "aab", "ba "], ["😀b"], ["!", "\n"]]


def random_stream(n: int) -> tuple[list[bytes], list[int]]:
    """A text of ALPHABET's characters cut at random byte positions into tokens (splitting characters)."""
    rng = seeds.rng(n)
    data = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(5, 40))).encode()
    pieces, i = [], 0
    while i < len(data):
        step = rng.randrange(1, 5)
        pieces.append(data[i : i + step])
        i += step
    vocab = sorted(set(pieces))
    return vocab, [vocab.index(p) for p in pieces]


@pytest.mark.points(3)
@pytest.mark.builds_on("test_example_stop_checker", "test_stop_cuts_at_the_earliest_occurrence")
def test_stop_checker_random_streams(kata):
    """StopChecker equals a checker that decodes the whole stream after every token, on random streams"""
    for n in range(40, 80):
        vocab, tokens = random_stream(n)
        stop = STOPS[n % len(STOPS)]
        got = feed_all(kata, vocab, stop, tokens)
        want = stop_oracle(vocab, stop, tokens)
        assert got == want, (
            f"stop {stop}, tokens {[vocab[t] for t in tokens]}:\n  feed returned {got[0]}, finish {got[1]!r}\n"
            f"  want {want[0]}, finish {want[1]!r}"
        )


# ---------------------------------------------------------------------------------------------
# Errors and banned imports.


def bad_top_logprobs(k, r, below: bool):
    """sample with top_logprobs below 0 or above V, on drawn logits of a drawn V."""
    V = r.randint(2, 20)
    x = torch.randn(1, V, generator=seeds.generator(r.randrange(2**31)))
    top = -r.randint(1, 5) if below else V + r.randint(1, 5)
    return k.sample([], NO, NO, x, build("torch:Generator"), top_logprobs=top)


def drawn_stops(r) -> list[str]:
    return ["".join(r.choice(ALPHABET) for _ in range(r.randint(1, 4))) for _ in range(r.randint(1, 3))]


# A valid value of each parameter, drawn, which must not raise: every case also meets the other side of
# its boundary, and no case's calls are the same under every seed.
VALID = {
    "temperature": lambda k, r: k.Temperature(r.uniform(1e-3, 10.0)),
    "top_k": lambda k, r: k.TopK(r.randint(1, 100)),
    "top_p": lambda k, r: k.TopP(r.uniform(1e-3, 1.0)),
    "min_p": lambda k, r: k.MinP(r.uniform(0.0, 1.0)),
    "repetition_penalty": lambda k, r: k.RepetitionPenalty(r.uniform(1e-3, 10.0)),
    "presence_penalty": lambda k, r: k.FrequencyPresencePenalty(presence_penalty=r.uniform(-5.0, 5.0)),
    "frequency_penalty": lambda k, r: k.FrequencyPresencePenalty(frequency_penalty=r.uniform(-5.0, 5.0)),
    "logit_bias": lambda k, r: k.LogitBias({r.randrange(1000): r.uniform(-100.0, 100.0)}),
    "top_logprobs": lambda k, r: k.sample(
        [],
        NO,
        NO,
        random_logits(r.randrange(2**31), B=1),
        build("torch:Generator"),
        top_logprobs=r.randint(0, 12),
    ),
    "stop": lambda k, r: k.StopChecker(TOK, drawn_stops(r)),
}


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "call, name",
    [  # the boundaries themselves (0, nan, inf) stay exact; the values beyond them are drawn
        (lambda k, r: k.Temperature(0.0), "temperature"),
        (lambda k, r: k.Temperature(-r.uniform(1e-3, 10.0)), "temperature"),
        (lambda k, r: k.TopK(0), "top_k"),
        (lambda k, r: k.TopP(0.0), "top_p"),
        (lambda k, r: k.TopP(1.0 + r.uniform(1e-3, 5.0)), "top_p"),
        (lambda k, r: k.MinP(-r.uniform(1e-3, 1.0)), "min_p"),
        (lambda k, r: k.MinP(1.0 + r.uniform(1e-3, 5.0)), "min_p"),
        (lambda k, r: k.RepetitionPenalty(0.0), "repetition_penalty"),
        (
            lambda k, r: k.FrequencyPresencePenalty(
                presence_penalty=math.nan, frequency_penalty=r.uniform(-2.0, 2.0)
            ),
            "presence_penalty",
        ),
        (
            lambda k, r: k.FrequencyPresencePenalty(
                presence_penalty=r.uniform(-2.0, 2.0), frequency_penalty=r.choice([math.inf, -math.inf])
            ),
            "frequency_penalty",
        ),
        (
            lambda k, r: k.LogitBias({r.randrange(50): 1.0, -r.randint(1, 100): r.uniform(-5.0, 5.0)}),
            "logit_bias",
        ),
        (
            lambda k, r: k.LogitBias({r.randrange(50): r.choice([math.inf, -math.inf, math.nan])}),
            "logit_bias",
        ),
        (lambda k, r: k.make_chain(temperature=0.0, top_k=r.randint(1, 50)), "temperature"),
        (
            lambda k, r: k.make_chain(top_p=1.0 + r.uniform(1e-3, 5.0), temperature=r.uniform(0.1, 3.0)),
            "top_p",
        ),
        (lambda k, r: k.make_chain(min_p=-r.uniform(1e-3, 5.0), top_p=r.uniform(0.1, 1.0)), "min_p"),
        (lambda k, r: k.make_chain(top_k=0, min_p=r.uniform(0.0, 1.0)), "top_k"),
        (
            lambda k, r: k.make_chain(repetition_penalty=-r.uniform(1e-3, 5.0), top_k=r.randint(1, 50)),
            "repetition_penalty",
        ),
        (lambda k, r: bad_top_logprobs(k, r, below=True), "top_logprobs"),
        (lambda k, r: bad_top_logprobs(k, r, below=False), "top_logprobs"),
        (lambda k, r: k.StopChecker(TOK, [*drawn_stops(r), ""]), "stop"),
    ],
)
def test_invalid_arguments(kata, call, name, request):
    """Invalid parameters raise ValueError naming the parameter"""
    r = seeds.rng(900 + request.node.callspec.indices["call"])
    try:
        VALID[name](kata, r)
    except ValueError as exc:
        raise AssertionError(f"a valid {name} raised ValueError({str(exc)!r})") from None
    exc = expect_value_error(lambda: call(kata, r), f"a bad {name}")
    assert name in str(exc), f"a bad {name} raised ValueError({str(exc)!r}), which does not name {name}"


@pytest.mark.points(1)
@pytest.mark.builds_on("test_temperature_divides_logits")
def test_written_by_hand(kata, kata_path):
    """works without transformers or vllm"""
    r = seeds.rng(14)
    kata.Temperature(r.uniform(0.1, 5.0))(NO, NO, random_logits(14, B=1, V=r.randint(2, 20)))
    found = banned_uses(kata_path, {"transformers", "vllm"})
    assert not found, f"the processors must be written by hand, not imported; found {found}"
