"""Hidden suite for the speculative kata: draft k tokens, verify them in one target pass.

Models used: bigram toys (dojo.toymodel: the next token depends only on the last one; the README's
worked examples and the sampled-distribution tests), and the reference tiny Llama with random weights as the target, a
perturbed copy of it as the draft (real KV caches to roll back). Oracles are written plainly here:
greedy decoding without a cache, speculative greedy decoding without a cache (its drafted, accepted
and rounds), the analytic distributions the rejection rule must reproduce, and the formulas. Weights,
prompts, tables and seeds are drawn from dojo.seeds; chi-square bounds at the 1 - 1e-6 quantile.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from dojo import seeds
from dojo.grading.judging.judge import build
from dojo.testing import expect_raises, raised
from dojo.toymodel import BigramModel
from solutions.model import tiny_model

KATA = "speculative"
pytestmark = pytest.mark.usefixtures("one_thread")

# scipy.stats.chi2.isf(1e-6, df) for df = 1..8 (computed with mpmath's regularized gamma)
CHI2_1E6 = {1: 23.93, 2: 27.63, 3: 30.66, 4: 33.38, 5: 35.89, 6: 38.26, 7: 40.52, 8: 42.70}


# ---------------------------------------------------------------------------------------------
# Models that follow the protocol of the kata README.


def bigram(probs: list[list[float]]):
    """A bigram toy (dojo.toymodel) made where the kata's code runs: no round trip per call under judge mode."""
    return build(f"{BigramModel.__module__}:{BigramModel.__name__}", probs)


TARGET = [[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.5, 0.1, 0.1, 0.3], [0.2, 0.2, 0.2, 0.4]]
DRAFT = [[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.3, 0.1, 0.1, 0.5], [0.2, 0.2, 0.2, 0.4]]


class Recorder:
    """Wraps a model; logs every forward pass as (name, kind, tokens fed)."""

    def __init__(self, model, name, events):
        self.model, self.config, self.name, self.events = model, model.config, name, events

    def new_cache(self, batch_size, max_len=None):
        return self.model.new_cache(batch_size, max_len)

    def prefill(self, ids, cache, attention_mask=None):
        self.events.append((self.name, "prefill", ids.shape[1]))
        return self.model.prefill(ids, cache)

    def decode_step(self, ids, cache, attention_mask=None):
        self.events.append((self.name, "decode", 1))
        return self.model.decode_step(ids, cache)


def draft_of(model, noise: float, seed: int):
    """A copy of `model` with Gaussian noise on every weight: a draft that agrees with it often."""
    draft = tiny_model(1, vocab_size=model.config.vocab_size)
    draft.load_state_dict(model.state_dict())
    gen = seeds.generator(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn(p.shape, generator=gen))
    return draft


@pytest.fixture(scope="module")
def target():
    return tiny_model(seeds.seed(1), vocab_size=VOCAB)


@pytest.fixture(scope="module")
def draft(target):
    return draft_of(target, 0.3, 5)


VOCAB = 64  # the tiny Llamas' vocabulary
MARGIN = 1e-3  # the least lead of an argmax over its runner-up that the suite compares tokens on


# ---------------------------------------------------------------------------------------------
# Oracles: slow and plain, no cache.


def argmax(logits, gaps: list[float] | None = None) -> int:
    """The argmax (ties to the lowest id); notes in `gaps` how far it leads the runner-up."""
    row = logits.tolist()
    if gaps is not None:
        top = sorted(row)[-2:]
        gaps.append(top[1] - top[0])
    return max(range(len(row)), key=lambda v: (row[v], -v))


def greedy_oracle(model, prompt, max_new_tokens, gaps=None):
    seq = []
    for _ in range(max_new_tokens):
        seq.append(argmax(model.forward(torch.tensor([prompt + seq]))[0, -1], gaps))
    return seq


def speculative_greedy_oracle(target, draft, prompt, max_new_tokens, k, gaps=None):
    """The README's rounds with full forward passes: (tokens, drafted, accepted, rounds). `gaps` gets the
    lead of every argmax that decides them (each draft's, the target's up to its own token)."""
    new, drafted, accepted, rounds = [], 0, 0, 0
    while len(new) < max_new_tokens:
        n = min(k, max_new_tokens - len(new) - 1)
        drafts = []
        for _ in range(n):
            drafts.append(argmax(draft.forward(torch.tensor([prompt + new + drafts]))[0, -1], gaps))
        logits = target.forward(torch.tensor([prompt + new + drafts]))[0, -(n + 1) :]
        best = [argmax(row) for row in logits]
        a = 0
        while a < n and drafts[a] == best[a]:
            a += 1
        for row in logits[: a + 1]:
            argmax(row, gaps)
        new += drafts[:a] + [best[a]]
        drafted, accepted, rounds = drafted + n, accepted + a, rounds + 1
    return new, drafted, accepted, rounds


def clear_prompt(r, oracle, also=lambda result: True):
    """(prompt, oracle's result): a random prompt of 1-6 ids on which `oracle(prompt, gaps)` decides every
    argmax by at least MARGIN (cached and uncached logits differ by ~5e-6: a nearer tie could go either
    way, the README's caveat) and whose result passes `also`."""
    for _ in range(100):
        prompt = [r.randrange(VOCAB) for _ in range(r.randint(1, 6))]
        gaps = []
        result = oracle(prompt, gaps)
        if min(gaps, default=MARGIN) >= MARGIN and also(result):
            return prompt, result
    raise AssertionError("100 random prompts, none clear of near-ties: the suite's models are degenerate")


def chi_square(counts: list[int], probs: list[float]) -> tuple[float, int]:
    """(statistic, degrees of freedom) of counts against probs, over the cells with p > 0."""
    n = sum(counts)
    cells = [(c, n * p) for c, p in zip(counts, probs) if p > 0]
    return sum((c - e) ** 2 / e for c, e in cells), len(cells) - 1


def seeded_generator(seed: int):
    """A torch.Generator where the kata's code runs (the worker, under judge mode)."""
    gen = build("torch:Generator")
    gen.manual_seed(seeds.seed(seed))
    return gen


# ---------------------------------------------------------------------------------------------
# Rolling back: a cache keeps only what was kept.


class CacheKeeper:
    """Wraps a model; keeps every cache it makes and the tokens each holds, to check them against `kept`
    (the prompt, then each token as on_token streams it)."""

    def __init__(self, model, name: str, kept: list[int]):
        self.model, self.config, self.name, self.kept = model, model.config, name, kept
        self.caches, self.held = [], {}
        self.stale = None  # the first cached position found holding a token that was not kept there

    def new_cache(self, batch_size, max_len=None):
        self.caches.append(self.model.new_cache(batch_size, max_len))
        self.held[id(self.caches[-1])] = []
        return self.caches[-1]

    def _feed(self, ids, cache) -> None:
        """Before a pass: compare what `cache` holds (the first cache.length tokens fed to it) with the
        kept tokens, then note the tokens this pass feeds."""
        held = self.held.get(id(cache))
        if held is None:
            return
        held = held[: cache.length]
        wrong = next((j for j, (h, want) in enumerate(zip(held, self.kept)) if h != want), None)
        if wrong is not None and self.stale is None:
            self.stale = (
                f"the {self.name}'s cache ({cache.length} positions) still held token {held[wrong]} at position "
                f"{wrong}, where token {self.kept[wrong]} was kept"
            )
        self.held[id(cache)] = held + [int(x) for x in ids[0].tolist()]

    def prefill(self, ids, cache, attention_mask=None):
        self._feed(ids, cache)
        return self.model.prefill(ids, cache)

    def decode_step(self, ids, cache, attention_mask=None):
        self._feed(ids.view(1, -1), cache)
        return self.model.decode_step(ids, cache)


@pytest.mark.points(2)
def test_caches_are_rolled_back_to_the_kept_tokens(kata, target, draft):
    """Rejected drafts leave both caches: at the end the target's holds the prompt and every kept token but the last, the draft's no more"""
    rng = seeds.rng(400)
    max_new_tokens, k = rng.randint(8, 14), rng.randint(2, 4)
    prompt, _ = clear_prompt(  # one where the target rejects a draft
        rng,
        lambda p, gaps: speculative_greedy_oracle(target, draft, p, max_new_tokens, k, gaps),
        lambda result: result[2] < result[1],
    )
    streamed = list(prompt)
    t, d = CacheKeeper(target, "target", streamed), CacheKeeper(draft, "draft", streamed)
    try:
        r = kata.speculative_generate(
            t, d, prompt, max_new_tokens=max_new_tokens, k=k, on_token=streamed.append
        )
    except Exception as exc:
        stale = t.stale or d.stale
        if stale is None:
            raise
        pytest.fail(
            f"prompt of {len(prompt)}, k={k}: {stale}: a rejected draft stayed cached (truncate both caches to the "
            f"kept tokens after each round); the run then {raised(exc)}",
            pytrace=False,
        )
    kept = len(prompt) + len(r.tokens) - 1  # the last token is never fed
    got = (t.caches[-1].length, d.caches[-1].length)
    assert r.accepted < r.drafted and got[0] == kept and got[1] <= kept, (
        f"prompt of {len(prompt)}, {len(r.tokens)} tokens kept, {r.drafted - r.accepted} drafts rejected: the caches "
        f"hold (target, draft) {got} positions; want the target's {kept} and the draft's at most {kept} "
        "(truncate after each round)"
    )


# ---------------------------------------------------------------------------------------------
# Worked examples (README).


@pytest.mark.example
@pytest.mark.points(1)
def test_example_acceptance_probability(kata):
    """A draft token is accepted with probability sum(min(p, q))"""
    got = kata.acceptance_probability(torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.0, 0.5, 0.5, 0.0]))
    assert got == pytest.approx(0.5, abs=1e-6), f"p = [.5, .5, 0, 0], q = [0, .5, .5, 0]: got {got}, want 0.5"


@pytest.mark.example
@pytest.mark.points(2)
def test_example_verify_residual_and_bonus(kata):
    """A draft the target never produces is rejected and replaced from max(0, p - q); a matching draft
    is accepted and the bonus token comes from the last row of p"""
    p, q = torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.0, 0.5, 0.5, 0.0])
    accepted, nxt = kata.verify(
        torch.tensor([[2]]), q[None, None], torch.stack([p, torch.full((4,), 0.25)])[None]
    )
    assert (accepted.tolist(), nxt.tolist()) == ([0], [0]), (
        f"draft 2 with p(2) = 0: want accepted [0] and next token [0] (the residual [.5, 0, 0, 0]), "
        f"got {accepted.tolist()} and {nxt.tolist()}"
    )
    accepted, nxt = kata.verify(
        torch.tensor([[1]]), p[None, None], torch.stack([p, torch.tensor([0.0, 0.0, 0.0, 1.0])])[None]
    )
    assert (accepted.tolist(), nxt.tolist()) == ([1], [3]), (
        f"q = p: want accepted [1] and bonus token [3] (p after it is [0, 0, 0, 1]), "
        f"got {accepted.tolist()} and {nxt.tolist()}"
    )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on("test_caches_are_rolled_back_to_the_kept_tokens")
def test_example_greedy_bigram(kata):
    """Greedy speculative decoding on the README's toys: the target's tokens in 3 target passes"""
    r = kata.speculative_generate(bigram(TARGET), bigram(DRAFT), [0], max_new_tokens=7, k=3)
    got = (r.tokens, r.drafted, r.accepted, r.rounds)
    want = ([1, 2, 0, 1, 2, 0, 1], 6, 4, 3)
    assert got == want, f"(tokens, drafted, accepted, rounds) from [0], k=3, 7 tokens: got {got}, want {want}"
    assert r.acceptance_rate == pytest.approx(4 / 6), f"acceptance_rate: got {r.acceptance_rate}, want 4/6"


@pytest.mark.example
@pytest.mark.points(1)
def test_example_expected_speedup(kata):
    """alpha 0.8, k 4, c 0.1: 3.3616 tokens per round, a 2.4011x speed-up"""
    got = (kata.expected_tokens_per_round(0.8, 4), kata.expected_speedup(0.8, 4, 0.1))
    assert got == pytest.approx((3.3616, 2.4011), abs=1e-4), (
        f"(expected_tokens_per_round(0.8, 4), expected_speedup(0.8, 4, 0.1)): got {got}, want (3.3616, 2.4011)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_expected_speedup")
def test_expected_speedup_formula(kata):
    """Tokens per round are 1 + alpha + ... + alpha^k; the speed-up divides them by k c + 1"""
    r = seeds.rng(401)
    alphas = (0.0, r.uniform(0.05, 0.5), r.uniform(0.5, 0.9), r.uniform(0.95, 0.999), 1.0)
    for alpha in alphas:
        for k in (1, r.randint(2, 4), r.randint(5, 9)):
            tokens = sum(alpha**i for i in range(k + 1))
            got = kata.expected_tokens_per_round(alpha, k)
            assert got == pytest.approx(tokens, rel=1e-9), (
                f"expected_tokens_per_round({alpha}, {k}): got {got}, want 1 + alpha + ... + alpha^k = {tokens}"
            )
            for c in (0.0, r.uniform(0.01, 0.1), r.uniform(0.2, 1.0)):
                got = kata.expected_speedup(alpha, k, c)
                assert got == pytest.approx(tokens / (k * c + 1), rel=1e-9), (
                    f"expected_speedup({alpha}, {k}, {c}): got {got}, want {tokens / (k * c + 1)}"
                )


# ---------------------------------------------------------------------------------------------
# Greedy: exact.


@pytest.mark.points(3)
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.builds_on("test_example_greedy_bigram", "test_caches_are_rolled_back_to_the_kept_tokens")
def test_greedy_equals_target_greedy(kata, target, draft, k):
    """Greedy speculative output is token for token the target's greedy output"""
    r = seeds.rng(410 + k)
    for _ in range(3):
        n = r.randint(8, 14)
        prompt, want = clear_prompt(r, lambda p, gaps, n=n: greedy_oracle(target, p, n, gaps))
        got = kata.speculative_generate(target, draft, prompt, max_new_tokens=n, k=k).tokens
        assert got == want, (
            f"k={k}, prompt {prompt}, {n} tokens: got {got}, the target's greedy output is {want}"
        )


@pytest.mark.points(2)
@pytest.mark.parametrize("max_new_tokens, k", [(12, 3), (13, 3), (10, 4)])
@pytest.mark.builds_on("test_example_greedy_bigram", "test_greedy_equals_target_greedy")
def test_draft_equal_to_target_accepts_everything(kata, target, max_new_tokens, k):
    """A draft identical to the target has every draft accepted, k + 1 tokens per round (the bonus)"""
    twin = draft_of(target, 0.0, 0)
    prompt, tokens = clear_prompt(
        seeds.rng(420 + max_new_tokens), lambda p, gaps: greedy_oracle(target, p, max_new_tokens, gaps)
    )
    r = kata.speculative_generate(target, twin, prompt, max_new_tokens=max_new_tokens, k=k)
    rounds = math.ceil(max_new_tokens / (k + 1))
    want = (max_new_tokens - rounds, max_new_tokens - rounds, rounds)
    got = (r.drafted, r.accepted, r.rounds)
    assert r.tokens == tokens and got == want, (
        f"draft == target, k={k}, {max_new_tokens} tokens: (drafted, accepted, rounds) {got}, want {want} "
        f"(every round but a short last one yields k + 1 tokens)"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.builds_on(
    "test_example_greedy_bigram",
    "test_greedy_equals_target_greedy",
    "test_draft_equal_to_target_accepts_everything",
)
def test_greedy_rounds_follow_the_rules(kata, target, draft, k):
    """drafted, accepted and rounds equal a plain no-cache run of the README's rounds"""
    r = seeds.rng(430 + k)
    for _ in range(3):
        n = r.randint(10, 16)
        prompt, want = clear_prompt(
            r, lambda p, gaps, n=n: speculative_greedy_oracle(target, draft, p, n, k, gaps)
        )
        got = kata.speculative_generate(target, draft, prompt, max_new_tokens=n, k=k)
        got = (got.tokens, got.drafted, got.accepted, got.rounds)
        assert got == want, (
            f"k={k}, prompt {prompt}, {n} tokens: (tokens, drafted, accepted, rounds) {got}, want {want}"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_greedy_bigram", "test_greedy_equals_target_greedy")
def test_one_target_pass_per_round(kata, target, draft):
    """The target runs one forward pass per round, over the drafts and the tokens its cache lacks"""
    events = []
    rng = seeds.rng(440)
    k, max_new_tokens = rng.randint(2, 4), rng.randint(10, 16)
    prompt, tokens = clear_prompt(rng, lambda p, gaps: greedy_oracle(target, p, max_new_tokens, gaps))
    r = kata.speculative_generate(
        Recorder(target, "target", events),
        Recorder(draft, "draft", events),
        prompt,
        max_new_tokens=max_new_tokens,
        k=k,
    )
    passes = [e for e in events if e[0] == "target"]
    assert len(passes) == r.rounds, f"{len(passes)} target forward passes for {r.rounds} rounds: {passes}"
    fed = sum(n for _, _, n in passes)
    # the prompt, each draft once, each round's own token but the last
    want = len(prompt) + r.drafted + r.rounds - 1
    assert fed == want, (
        f"the target was fed {fed} tokens over {r.rounds} rounds, want {want}: the prompt, "
        f"each draft once and each round's own token once (positions rolled back, not recomputed)"
    )
    assert r.tokens == tokens, (
        f"prompt {prompt}, k={k}: got {r.tokens}, the target's greedy output is {tokens}"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_example_greedy_bigram", "test_greedy_equals_target_greedy")
def test_eos_and_streaming(kata, target, draft):
    """An EOS ends the output (kept as its last token); on_token streams every kept token in order"""
    twin = draft_of(target, 0.0, 0)  # every draft accepted: rounds of k + 1 tokens, so an EOS lands mid-round

    def cuts(tokens):  # where an EOS could cut the output: the first 4 positions of an id first seen there
        return [i for i in range(1, len(tokens)) if tokens[i] not in tokens[:i]][:4]

    prompt, _ = clear_prompt(  # one whose output has a cut inside one of the twin's rounds of 4 (k = 3)
        seeds.rng(450),
        lambda p, gaps: greedy_oracle(target, p, 16, gaps),
        lambda tokens: any(i % 4 != 3 for i in cuts(tokens)),
    )
    for name, d in (("the draft", draft), ("a draft equal to the target", twin)):
        free = kata.speculative_generate(target, d, prompt, max_new_tokens=16, k=3).tokens
        assert len(free) == 16, f"without an EOS the output has max_new_tokens=16 tokens, got {len(free)}"
        for cut in cuts(free):
            streamed = []
            r = kata.speculative_generate(
                target,
                d,
                prompt,
                max_new_tokens=16,
                k=3,
                eos_token_id=free[cut],
                on_token=streamed.append,
            )
            assert r.tokens == free[: cut + 1], (
                f"with {name}, k=3, greedy gives {free}; with eos_token_id={free[cut]} want {free[: cut + 1]} "
                f"(nothing after the EOS, even in its round), got {r.tokens}"
            )
            assert streamed == r.tokens, (
                f"eos_token_id={free[cut]}: on_token streamed {streamed}, the result holds {r.tokens}"
            )


# ---------------------------------------------------------------------------------------------
# Sampling: the target's distribution, exactly.

VERIFY_P = [
    [0.40, 0.30, 0.15, 0.10, 0.05],
    [0.05, 0.10, 0.20, 0.25, 0.40],
    [0.20, 0.20, 0.20, 0.20, 0.20],
    [0.10, 0.60, 0.10, 0.10, 0.10],
]
VERIFY_Q = [[0.10, 0.20, 0.30, 0.30, 0.10], [0.30, 0.30, 0.20, 0.10, 0.10], [0.05, 0.45, 0.05, 0.40, 0.05]]


def verify_outcomes(kata, rows: int, seed: int):
    """verify on `rows` rows of VERIFY_P / VERIFY_Q, drafts drawn from q here: (accepted, next) lists."""
    gen = seeds.generator(seed)
    q, p = torch.tensor(VERIFY_Q), torch.tensor(VERIFY_P)
    drafts = torch.stack(
        [torch.multinomial(q[j], rows, replacement=True, generator=gen) for j in range(3)], 1
    )
    accepted, nxt = kata.verify(
        drafts, q.expand(rows, 3, 5).clone(), p.expand(rows, 4, 5).clone(), seeded_generator(seed + 1)
    )
    return drafts.tolist(), accepted.tolist(), nxt.tolist()


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_acceptance_probability")
def test_verify_accepts_with_probability_min_p_q(kata):
    """The number of accepted drafts follows the product of per-position acceptance probabilities"""
    _, accepted, _ = verify_outcomes(kata, 20000, 21)
    beta = [sum(min(a, b) for a, b in zip(p, q)) for p, q in zip(VERIFY_P, VERIFY_Q)]
    probs = [math.prod(beta[:n]) * (1 - beta[n]) for n in range(3)] + [math.prod(beta)]
    counts = [accepted.count(n) for n in range(4)]
    stat, df = chi_square(counts, probs)
    assert stat <= CHI2_1E6[df], (
        f"accepted drafts (0..3) over 20000 rows: counts {counts}, expected {[round(20000 * x) for x in probs]} "
        f"(each draft accepted with probability sum(min(p, q)) = {[round(b, 3) for b in beta]}; "
        f"chi-square {stat:.1f} > {CHI2_1E6[df]})"
    )


@pytest.mark.points(4)
@pytest.mark.builds_on(
    "test_example_verify_residual_and_bonus",
    "test_verify_accepts_with_probability_min_p_q",
)
def test_verify_emits_the_target_distribution(kata):
    """Each token verify emits is distributed as p at its position (chi-square, 20,000 rows)"""
    drafts, accepted, nxt = verify_outcomes(kata, 20000, 11)
    for j, p in enumerate(VERIFY_P):
        counts = [0] * 5
        for d, a, t in zip(drafts, accepted, nxt):
            if a > j:
                counts[d[j]] += 1
            elif a == j:
                counts[t] += 1
        stat, df = chi_square(counts, p)
        assert stat <= CHI2_1E6[df], (
            f"tokens emitted at position {j} (q there {VERIFY_Q[j] if j < 3 else 'none: the bonus'}) should "
            f"follow p = {p}: counts {counts} over {sum(counts)} rows, expected "
            f"{[round(sum(counts) * x) for x in p]} (chi-square {stat:.1f} > {CHI2_1E6[df]})"
        )


SAMPLE_TARGET = [
    [0.10, 0.50, 0.20, 0.20],
    [0.40, 0.10, 0.30, 0.20],
    [0.25, 0.25, 0.25, 0.25],
    [0.60, 0.05, 0.05, 0.30],
]
SAMPLE_DRAFT = [
    [0.30, 0.30, 0.30, 0.10],
    [0.10, 0.40, 0.30, 0.20],
    [0.10, 0.40, 0.10, 0.40],
    [0.30, 0.05, 0.35, 0.30],
]


def sample_tables(n: int) -> tuple[list[list[float]], list[list[float]], int]:
    """(target, draft, start token): SAMPLE_TARGET and SAMPLE_DRAFT with their token ids permuted alike and
    every entry scaled by a factor in [0.8, 1.25] (rows renormalised), drawn from seeds.rng(n)."""
    r = seeds.rng(n)
    perm = r.sample(range(4), 4)  # old id -> new id

    def moved(table):
        new = [[0.0] * 4 for _ in range(4)]
        for a in range(4):
            row = [x * r.uniform(0.8, 1.25) for x in table[a]]
            for b in range(4):
                new[perm[a]][perm[b]] = row[b] / sum(row)
        return new

    return moved(SAMPLE_TARGET), moved(SAMPLE_DRAFT), r.randrange(4)


@pytest.mark.points(3)
@pytest.mark.builds_on("test_greedy_equals_target_greedy", "test_verify_emits_the_target_distribution")
def test_sampled_tokens_follow_the_target(kata):
    """Sampled speculative output follows the target's distribution, not the draft's (chi-square per
    previous token over 3000 tokens)"""
    target, draft, start = sample_tables(460)
    r = kata.speculative_generate(
        bigram(target),
        bigram(draft),
        [start],
        max_new_tokens=3000,
        k=3,
        temperature=1.0,
        seed=seeds.seed(461),
    )
    assert len(r.tokens) == 3000, f"3000 tokens asked, {len(r.tokens)} returned"
    seq = [start] + r.tokens
    for prev, p in enumerate(target):
        counts = [0] * 4
        for a, b in zip(seq, seq[1:]):
            if a == prev:
                counts[b] += 1
        stat, df = chi_square(counts, p)
        assert stat <= CHI2_1E6[df], (
            f"tokens after {prev} should follow the target's {[round(x, 3) for x in p]} (the draft's is "
            f"{[round(x, 3) for x in draft[prev]]}): counts "
            f"{counts}, expected {[round(sum(counts) * x) for x in p]} (chi-square {stat:.1f} > {CHI2_1E6[df]})"
        )
    assert 0 < r.accepted < r.drafted, (
        f"accepted {r.accepted} of {r.drafted} drafts: some, not all, should pass"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on(
    "test_greedy_equals_target_greedy",
    "test_verify_emits_the_target_distribution",
    "test_sampled_tokens_follow_the_target",
)
def test_temperature_sharpens_both_models(kata):
    """At temperature 0.5 the output follows softmax(log p / 0.5), the target's sharpened distribution"""
    target, draft, start = sample_tables(470)
    r = kata.speculative_generate(
        bigram(target),
        bigram(draft),
        [start],
        max_new_tokens=2000,
        k=2,
        temperature=0.5,
        seed=seeds.seed(471),
    )
    seq = [start] + r.tokens
    for prev, row in enumerate(target):
        sharp = [x * x / sum(y * y for y in row) for x in row]
        counts = [sum(1 for a, b in zip(seq, seq[1:]) if a == prev and b == v) for v in range(4)]
        stat, df = chi_square(counts, sharp)
        assert stat <= CHI2_1E6[df], (
            f"temperature 0.5, tokens after {prev}: counts {counts}, expected {[round(sum(counts) * x) for x in sharp]} "
            f"from softmax(log p / 0.5) = {[round(x, 3) for x in sharp]} (chi-square {stat:.1f} > {CHI2_1E6[df]})"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_greedy_equals_target_greedy")
def test_sampling_reproducible_with_seed(kata, target, draft):
    """The same seed gives the same tokens; other seeds give other tokens"""
    r = seeds.rng(480)
    prompt = [r.randrange(VOCAB) for _ in range(r.randint(1, 6))]
    kwargs = dict(max_new_tokens=12, k=r.randint(2, 4), temperature=r.uniform(0.8, 1.5))
    s, *other_seeds = r.sample(range(2**32), 3)
    a = kata.speculative_generate(target, draft, prompt, seed=s, **kwargs).tokens
    b = kata.speculative_generate(target, draft, prompt, seed=s, **kwargs).tokens
    assert a == b, f"two runs with seed={s} differ: {a} vs {b}"
    others = [kata.speculative_generate(target, draft, prompt, seed=o, **kwargs).tokens for o in other_seeds]
    assert any(o != a for o in others), (
        f"seeds {s}, {other_seeds[0]}, {other_seeds[1]} all sampled the same tokens {a}"
    )


# ---------------------------------------------------------------------------------------------
# Errors.


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "bad, name",
    [  # each kind of bad value; the test draws it
        (dict(max_new_tokens="< 1"), "max_new_tokens"),
        (dict(max_new_tokens="past the context"), "max_new_tokens"),
        (dict(k="< 1"), "k"),
        (dict(temperature="< 0"), "temperature"),
        (dict(prompt="empty"), "prompt"),
        (dict(prompt="an id past the vocabulary"), "prompt"),
        (dict(draft_vocab="another size"), "vocab_size"),
    ],
)
def test_invalid_arguments(kata, target, draft, bad, name):
    """Invalid arguments raise ValueError naming the argument"""
    r = seeds.rng(490)
    prompt = [r.randrange(VOCAB) for _ in range(r.randint(1, 5))]
    context = target.config.max_seq_len
    ids = [r.randrange(VOCAB) for _ in range(r.randint(0, 3))]
    drawn = {
        "< 1": r.randint(-3, 0),
        "past the context": context - len(prompt) + r.randint(1, 64),
        "< 0": -r.uniform(0.05, 2.0),
        "empty": [],
        "an id past the vocabulary": ids[:1] + [VOCAB + r.randrange(64)] + ids[1:],
        "another size": r.choice([16, 32, 48, 65, 96]),
    }
    bad = {key: drawn[kind] for key, kind in bad.items()}
    kwargs = dict(prompt=prompt, max_new_tokens=r.randint(1, 8), k=r.randint(1, 5)) | bad
    prompt = kwargs.pop("prompt")
    other = (
        tiny_model(seeds.seed(2), vocab_size=kwargs.pop("draft_vocab")) if "draft_vocab" in kwargs else draft
    )
    what = (
        f"speculative_generate with a draft of vocab_size {bad['draft_vocab']} for a target of {VOCAB}"
        if "draft_vocab" in bad
        else f"speculative_generate(..., {', '.join(f'{k}={v!r}' for k, v in bad.items())})"
    )
    error = expect_raises(
        ValueError, lambda: kata.speculative_generate(target, other, prompt, **kwargs), what
    )
    assert re.search(rf"\b{name}\b", str(error)), (
        f"{what} raised ValueError({str(error)!r}) not naming {name}"
    )


@pytest.mark.points(1)
@pytest.mark.parametrize(
    "call, name",
    [
        ("verify-q", "draft_probs"),
        ("verify-p", "target_probs"),
        ("alpha", "alpha"),
        ("k", "k"),
        ("c", "c"),
        ("pq", "p|q"),
    ],
)
def test_invalid_formula_and_verify_inputs(kata, call, name):
    """verify's mismatched shapes and the formulas' out-of-range inputs raise ValueError naming them"""
    r = seeds.rng(500)
    gen = seeds.generator(501)
    B, k, V = r.randint(1, 3), r.randint(2, 5), r.randint(3, 8)
    drafts = torch.randint(V, (B, k), generator=gen)  # (B, k)
    q = torch.rand(B, k, V, generator=gen).softmax(-1)  # (B, k, V)
    p = torch.rand(B, k + 1, V, generator=gen).softmax(-1)  # (B, k + 1, V)
    short_q, short_p = r.randint(1, k - 1), r.randint(1, k)
    alpha, k_ok, c = r.uniform(0.05, 0.95), r.randint(1, 6), r.uniform(0.01, 0.5)
    too_big, k_bad, c_bad = r.uniform(1.01, 3.0), r.randint(-3, 0), -r.uniform(0.01, 1.0)
    Vp, Vq = r.sample(range(2, 9), 2)
    calls = {
        "verify-q": lambda: kata.verify(drafts, q[:, :short_q], p),
        "verify-p": lambda: kata.verify(drafts, q, p[:, :short_p]),
        "alpha": lambda: kata.expected_speedup(too_big, k_ok, c),
        "k": lambda: kata.expected_tokens_per_round(alpha, k_bad),
        "c": lambda: kata.expected_speedup(alpha, k_ok, c_bad),
        "pq": lambda: kata.acceptance_probability(torch.full((Vp,), 1 / Vp), torch.full((Vq,), 1 / Vq)),
    }
    what = {
        "verify-q": f"verify with draft_probs {(B, short_q, V)} for draft_tokens {(B, k)}",
        "verify-p": f"verify with target_probs {(B, short_p, V)} for draft_tokens {(B, k)}: want {(B, k + 1, V)}",
        "alpha": f"expected_speedup(alpha={too_big}, k={k_ok}, c={c})",
        "k": f"expected_tokens_per_round(alpha={alpha}, k={k_bad})",
        "c": f"expected_speedup(alpha={alpha}, k={k_ok}, c={c_bad})",
        "pq": f"acceptance_probability of p with {Vp} entries and q with {Vq}",
    }
    error = expect_raises(ValueError, calls[call], what[call])
    assert re.search(rf"\b({name})\b", str(error)), (
        f"{what[call]}: ValueError({str(error)!r}) does not name {name}"
    )
