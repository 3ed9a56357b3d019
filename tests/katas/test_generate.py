"""Hidden suite for the generate kata: greedy, sampling and beam search on a KV cache.

Models used: a bigram toy (next token depends only on the last one; the README's worked
examples, and outside them with its token ids renamed by a seeded permutation), the reference tiny
Llama with seeded random weights (a real KV cache to reorder), and the same with a 4-token
vocabulary, small enough to enumerate every output. Prompts are seeded draws. Oracles are written
plainly here: a no-cache greedy loop, a list-based beam search with the HuggingFace semantics,
an exhaustive search, and the filtered sampling distribution.
"""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from dojo import seeds
from solutions.kv_cache import KVCache
from solutions.model import tiny_model

KATA = "generate"
pytestmark = pytest.mark.usefixtures("one_thread")
EOS = 0


# ---------------------------------------------------------------------------------------------
# Models that follow the protocol of the kata README.


class BigramModel:
    """Next-token probabilities depend only on the previous token: probs[prev][next]."""

    def __init__(self, probs: list[list[float]]):
        self.table = torch.tensor(probs, dtype=torch.float32).log()  # (V, V) logits
        self.config = SimpleNamespace(vocab_size=len(probs), max_seq_len=64)

    def new_cache(self, batch_size, max_len=None):
        return SimpleNamespace(length=0, reorder=lambda index: None)

    def prefill(self, ids, cache, attention_mask=None):
        cache.length += ids.shape[1]
        return self.table[ids]  # (B, T, V)

    def decode_step(self, ids, cache, attention_mask=None):
        cache.length += 1
        return self.table[ids]  # (B, V)

    def forward(self, ids):
        return self.table[ids]  # (B, T, V)


def permuted(probs: list[list[float]], perm: list[int]) -> list[list[float]]:
    """The same bigram with token t renamed perm[t]: every property of a search on it is kept."""
    out = [[0.0] * len(probs) for _ in probs]
    for a, row in enumerate(probs):
        for b, p in enumerate(row):
            out[perm[a]][perm[b]] = p
    return out


BIGRAM = [
    [0.25, 0.25, 0.25, 0.25],  # after 0 (EOS)
    [0.10, 0.05, 0.50, 0.35],  # after 1
    [0.20, 0.30, 0.10, 0.40],  # after 2
    [0.90, 0.04, 0.03, 0.03],
]  # after 3


class EosBiased:
    """A Llama with `bias` added to its EOS logit, so that hypotheses often end early."""

    def __init__(self, model, bias: float):
        self.model, self.config = model, model.config
        self.bias = torch.zeros(model.config.vocab_size)
        self.bias[EOS] = bias

    def new_cache(self, batch_size, max_len=None):
        return self.model.new_cache(batch_size, max_len)

    def prefill(self, ids, cache, attention_mask=None):
        return self.model.prefill(ids, cache, attention_mask) + self.bias

    def decode_step(self, ids, cache, attention_mask=None):
        return self.model.decode_step(ids, cache, attention_mask) + self.bias

    def forward(self, ids):
        with torch.no_grad():
            return self.model.forward(ids) + self.bias


def flat_llama(seed: int, vocab_size: int, eos_bias: float, **config) -> EosBiased:
    """A tiny Llama whose distribution is flattened (beams change places often) and EOS-prone."""
    model = tiny_model(seed, vocab_size=vocab_size, **config)
    with torch.no_grad():
        model.norm.mul_(0.5)
    return EosBiased(model, eos_bias)


@pytest.fixture(scope="module")
def llama():
    return flat_llama(seeds.seed(0), 24, 2.0)


@pytest.fixture(scope="module")
def plain_llama():
    return tiny_model(seeds.seed(1), vocab_size=64)


def draw_prompts(draw, vocab: int = 24, count: int = 3) -> list[list[int]]:
    """`count` prompts of distinct lengths (so that left-padding matters) over the whole vocabulary."""
    return [[draw.randrange(vocab) for _ in range(n)] for n in draw.sample(range(1, 7), count)]


# ---------------------------------------------------------------------------------------------
# Oracles: slow and plain, no cache.


def next_logprobs(model, seqs: list[list[int]]) -> list[list[float]]:
    """log p(next | seq) for each sequence, from a full forward pass with no cache."""
    logits = model.forward(torch.tensor(seqs))[:, -1]  # sequences of one length: one batch
    return torch.log_softmax(logits.float(), -1).tolist()


def greedy_oracle(model, prompt, max_new_tokens, eos=()):
    seq = []
    for _ in range(max_new_tokens):
        logp = next_logprobs(model, [prompt + seq])[0]
        seq.append(max(range(len(logp)), key=lambda v: (logp[v], -v)))
        if seq[-1] in eos:
            break
    return seq


def beam_oracle(model, prompt, max_new_tokens, eos, num_beams, length_penalty, early_stopping, parents=None):
    """HuggingFace (>= 4.50) beam search for one prompt with Python lists; finished, best first.
    `parents`, if a list, gets for each decode step the parent of every beam fed to it (the cache's reorder)."""
    nb = num_beams
    running = [(0.0, [])] + [(-math.inf, [])] * (nb - 1)  # (sum log p, tokens)
    finished = []  # (score, tokens)
    settled = False
    for step in range(max_new_tokens):
        logps = next_logprobs(model, [prompt + toks for _, toks in running])
        cands = [(score + lp, b, v) for b, (score, _) in enumerate(running) for v, lp in enumerate(logps[b])]
        cands = sorted(cands, key=lambda c: -c[0])[: max(2, 1 + len(eos)) * nb]
        last = step == max_new_tokens - 1
        if not settled and not (early_stopping is True and len(finished) == nb):
            for score, b, v in cands[:nb]:  # only the top nb candidates may finish
                if v in eos or last:
                    finished.append((score / (step + 1) ** length_penalty, running[b][1] + [v]))
            finished = sorted(finished, key=lambda h: -h[0])[:nb]
        if last:
            break
        kept = [(score, b, v) for score, b, v in cands if v not in eos][:nb]
        running = [(score, running[b][1] + [v]) for score, b, v in kept]
        length = max_new_tokens if early_stopping == "never" and length_penalty > 0 else step + 1
        if len(finished) == nb and running[0][0] / length**length_penalty <= finished[-1][0]:
            settled = True
        if settled or (early_stopping is True and len(finished) == nb):
            break
        if parents is not None:
            parents.append([b for _, b, _ in kept])
    return finished


def sequence_logprob(model, prompt, tokens) -> float:
    logits = model.forward(torch.tensor([prompt + tokens]))[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float(), -1)
    return float(logp[torch.arange(len(tokens)), torch.tensor(tokens)].sum())


def sampling_oracle(logits: list[float], temperature, top_k, top_p) -> list[float]:
    """Temperature, then top-k (ties with the k-th kept), then top-p (keep while mass before < p)."""
    z = [x / temperature for x in logits]
    if top_k is not None:
        kth = sorted(z, reverse=True)[min(top_k, len(z)) - 1]
        z = [x if x >= kth else -math.inf for x in z]
    e = [math.exp(x - max(z)) for x in z]
    p = [x / sum(e) for x in e]
    if top_p is not None:
        keep, mass = set(), 0.0
        for v in sorted(range(len(p)), key=lambda v: (-p[v], v)):
            if mass < top_p:
                keep.add(v)
            mass += p[v]
        p = [x if v in keep else 0.0 for v, x in enumerate(p)]
    return [x / sum(p) for x in p]


# ---------------------------------------------------------------------------------------------
# Worked examples (README): greedy here; the beam-search examples follow the beam basics.


@pytest.mark.example
@pytest.mark.points(1)
def test_example_greedy_bigram(kata):
    """Greedy picks the most probable next token until EOS"""
    r = kata.generate(BigramModel(BIGRAM), [[1]], max_new_tokens=4, eos_token_id=0)
    assert r.tokens == [[2, 3, 0]], f"greedy from [1] on the README bigram: got {r.tokens}, want [[2, 3, 0]]"
    assert r.scores[0] == pytest.approx(math.log(0.5 * 0.4 * 0.9) / 3, abs=1e-4), (
        f"greedy score is sum(log p) / 3 tokens: got {r.scores[0]}, want {math.log(0.18) / 3:.4f}"
    )


# ---------------------------------------------------------------------------------------------
# Greedy and sampling.


@pytest.mark.points(2)
def test_greedy_equals_no_cache_loop(kata, plain_llama):
    """Greedy with the KV cache equals a greedy loop that recomputes everything"""
    for prompt in draw_prompts(seeds.rng(10), 64, count=2):
        got = kata.generate(plain_llama, [prompt], max_new_tokens=10).tokens[0]
        want = greedy_oracle(plain_llama, prompt, 10)
        assert got == want, f"greedy from prompt {prompt}: got {got}, want {want}"


@pytest.mark.points(1)
def test_greedy_tie_takes_lowest_index(kata):
    """Greedy breaks a tie by taking the lowest token id"""
    draw = seeds.rng(11)
    vocab = draw.randint(4, 8)
    tied = sorted(draw.sample(range(vocab), draw.randint(2, vocab - 1)))
    weights = [3.0 if v in tied else draw.choice([1.0, 2.0]) for v in range(vocab)]
    model = BigramModel([[w / sum(weights) for w in weights]] * vocab)
    prompt, n = draw_prompts(draw, vocab, count=1)[0], draw.randint(2, 4)
    got = kata.generate(model, [prompt], max_new_tokens=n).tokens
    want = [[tied[0]] * n]
    p = 3.0 / sum(weights)
    assert got == want, f"tokens {', '.join(map(str, tied))} tie at p={p:.3g}: got {got}, want {want}"


@pytest.mark.points(2)
def test_batched_equals_unbatched(kata, llama):
    """Greedy: prompts of different lengths batched together give each prompt's solo result"""
    prompts = draw_prompts(seeds.rng(12))
    batched = kata.generate(llama, prompts, max_new_tokens=6, eos_token_id=EOS)
    solo = [kata.generate(llama, [p], max_new_tokens=6, eos_token_id=EOS) for p in prompts]
    solo_tokens, solo_scores = [t for r in solo for t in r.tokens], [s for r in solo for s in r.scores]
    assert batched.tokens == solo_tokens, (
        f"greedy on prompts {prompts}: batched {batched.tokens}, one by one {solo_tokens}"
    )
    assert batched.scores == pytest.approx(solo_scores, abs=1e-4), (
        f"greedy: batched scores {batched.scores}, one by one {solo_scores}"
    )


def first_new_token(seq: list[int]) -> int | None:
    """Position of the first token that differs from every earlier one (greedy output repeats)."""
    return next((k for k in range(1, len(seq)) if seq[k] not in seq[:k]), None)


def prompts_with_new_token(llama, draw, count: int, max_new_tokens: int) -> list[list[int]]:
    """Drawn prompts whose first row's greedy output (the oracle's) has a first new token after its
    first, found in no other row: a token that can serve as an EOS of the first row alone."""
    while True:
        prompts = draw_prompts(draw, count=count)
        free = [greedy_oracle(llama, p, max_new_tokens) for p in prompts]
        k = first_new_token(free[0])
        if k is not None and all(free[0][k] not in row for row in free[1:]):
            return prompts


@pytest.mark.points(1)
@pytest.mark.builds_on("test_batched_equals_unbatched")
def test_finished_rows_stop_growing(kata, llama):
    """A row stops at its EOS (kept as its last token) while the others go on"""
    prompts = prompts_with_new_token(llama, seeds.rng(13), 3, 8)
    free = kata.generate(llama, prompts, max_new_tokens=8).tokens
    k = first_new_token(free[0])
    eos = None if k is None else free[0][k]
    assert eos is not None and all(eos not in row for row in free[1:]), (
        f"greedy on prompts {prompts} gives {free}: no token of row 0 can end it alone, yet the no-cache "
        "greedy loop gives one"
    )
    got = kata.generate(llama, prompts, max_new_tokens=8, eos_token_id=eos).tokens
    want = [free[0][: k + 1]] + free[1:]
    assert got == want, f"greedy gives {free}; with eos_token_id={eos} want {want}, got {got}"


@pytest.mark.points(1)
def test_several_eos_ids(kata, llama):
    """eos_token_id may be a list: any of them ends a sequence"""
    draw = seeds.rng(14)
    prompt = prompts_with_new_token(llama, draw, 1, 6)[0]
    first = kata.generate(llama, [prompt], max_new_tokens=6).tokens[0]
    k = first_new_token(first)
    assert k is not None, (
        f"greedy from {prompt} gives {first}, yet the no-cache greedy loop gives a new token"
    )
    eos = draw.sample([v for v in range(24) if v not in first], 1) + [first[k]]
    draw.shuffle(eos)
    got = kata.generate(llama, [prompt], max_new_tokens=6, eos_token_id=eos).tokens[0]
    assert got == first[: k + 1], (
        f"greedy gives {first}; with eos_token_id={eos} want {first[: k + 1]}, got {got}"
    )


# Two tokens tie at ranks 3 and 4: top-k keeps both, and two of the top-p cases cut between them.
SAMPLE_LOGITS = [2.0, 1.6, 1.2, 1.2, 0.4, -0.3, -1.0, -2.5]
# df = 1..7, p = 1e-6: the seed is drawn, so a correct sampler must almost never fail; a wrong filter
# or order moves hundreds of draws and fails by far.
CHI2_CRITICAL = [23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52]
SAMPLING_CASES = [
    (1.0, None, None),
    (0.5, None, None),
    (1.0, 3, None),
    (1.0, None, 0.7),
    (2.0, None, 0.5),
    (0.7, 4, 0.9),
]


@pytest.mark.points(3)
@pytest.mark.parametrize("temperature, top_k, top_p", SAMPLING_CASES)
def test_sampling_matches_filtered_distribution(kata, temperature, top_k, top_p):
    """Sampled tokens follow softmax(logits / temperature) after top-k then top-p"""
    draw = seeds.rng(20 + SAMPLING_CASES.index((temperature, top_k, top_p)))
    perm = draw.sample(range(len(SAMPLE_LOGITS)), len(SAMPLE_LOGITS))  # token perm[i] gets logit i
    logits = [0.0] * len(SAMPLE_LOGITS)
    for i, v in enumerate(perm):
        logits[v] = SAMPLE_LOGITS[i]
    model = BigramModel([torch.tensor(logits).softmax(-1).tolist()] * len(logits))
    n = 4000  # one batch of n identical prompts: n independent first tokens from one seeded call
    r = kata.generate(
        model,
        [[draw.randrange(len(logits))]] * n,
        max_new_tokens=1,
        strategy="sample",
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=draw.randrange(2**31),
    )
    counts = [0] * len(logits)
    for toks in r.tokens:
        counts[toks[0]] += 1
    want = sampling_oracle(logits, temperature, top_k, top_p)
    where = f"logits {logits}, temperature={temperature}, top_k={top_k}, top_p={top_p}"
    banned = [v for v, p in enumerate(want) if p == 0 and counts[v]]
    assert not banned, f"{where}: filtered-out tokens {banned} were drawn; counts {counts}"
    bins = [[v] for v in sorted((v for v, p in enumerate(want) if p > 0), key=lambda v: -want[v])]
    while len(bins) > 1 and n * sum(want[v] for v in bins[-1]) < 5:  # pool the rarest tokens
        bins[-2:] = [bins[-2] + bins[-1]]
    expected = [n * sum(want[v] for v in b) for b in bins]
    chi2 = sum((sum(counts[v] for v in b) - e) ** 2 / e for b, e in zip(bins, expected))
    critical = CHI2_CRITICAL[len(bins) - 2] if len(bins) > 1 else 0.0
    assert chi2 <= critical, (
        f"{where}: {n} draws give counts {counts}, expected "
        f"{[round(n * p) for p in want]} (chi-square {chi2:.1f} > {critical})"
    )


@pytest.mark.points(1)
def test_sampling_reproducible_with_seed(kata, plain_llama):
    """The same seed gives the same tokens; other seeds give other tokens"""
    draw = seeds.rng(26)
    prompts, (s, s1, s2) = draw_prompts(draw, 64), draw.sample(range(2**31), 3)
    kwargs = dict(max_new_tokens=12, strategy="sample", temperature=1.5)
    a = kata.generate(plain_llama, prompts, seed=s, **kwargs).tokens
    b = kata.generate(plain_llama, prompts, seed=s, **kwargs).tokens
    assert a == b, f"two runs with seed={s} differ: {a} vs {b}"
    others = [kata.generate(plain_llama, prompts, seed=t, **kwargs).tokens for t in (s1, s2)]
    assert any(o != a for o in others), f"seeds {s}, {s1}, {s2} all sampled the same tokens {a}"


# ---------------------------------------------------------------------------------------------
# Beam search: the basic properties, each checked on its own.


@pytest.mark.points(1)
def test_one_beam_equals_greedy(kata, llama):
    """strategy='beam' with num_beams=1 gives the greedy result"""
    prompts = draw_prompts(seeds.rng(30))
    for es in (True, False, "never"):
        beam = kata.generate(
            llama,
            prompts,
            max_new_tokens=6,
            eos_token_id=EOS,
            strategy="beam",
            num_beams=1,
            early_stopping=es,
        ).tokens
        greedy = kata.generate(llama, prompts, max_new_tokens=6, eos_token_id=EOS).tokens
        assert beam == greedy, f"num_beams=1, early_stopping={es}: got {beam}, greedy gives {greedy}"


def renamed_bigram(draw, probs):
    """The bigram with its tokens renamed by a drawn permutation t (token i becomes t[i]), t, and a
    drawn prompt that ends in t[1] (a bigram reads only the last token)."""
    t = draw.sample(range(len(probs)), len(probs))
    prefix = [draw.randrange(len(probs)) for _ in range(draw.randint(0, 3))]
    return BigramModel(permuted(probs, t)), t, prefix + [t[1]]


@pytest.mark.points(1)
def test_first_step_expands_one_beam(kata):
    """Beam search starts from one live beam per prompt: the first step's beams are its best distinct tokens"""
    model, t, prompt = renamed_bigram(seeds.rng(31), BIGRAM)
    kwargs = dict(strategy="beam", num_beams=2, length_penalty=0.0)
    r = kata.generate(model, [prompt], max_new_tokens=1, eos_token_id=t[0], num_return_sequences=2, **kwargs)
    want = [toks for _, toks in beam_oracle(model, prompt, 1, (t[0],), 2, 0.0, True)]
    assert r.tokens == want, (
        f"one step of 2 beams from {prompt} (p = .5 for {t[2]}, .35 for {t[3]}): got {r.tokens}, want "
        f"{want}; at the start only one beam is live (the others score -inf), else "
        "every beam picks the same token"
    )


@pytest.mark.points(1)
def test_eos_outside_top_beams_does_not_finish(kata):
    """An EOS ranked below the top num_beams candidates does not finish a hypothesis"""
    model, t, prompt = renamed_bigram(seeds.rng(32), BIGRAM)
    r = kata.generate(
        model,
        [prompt],
        max_new_tokens=4,
        eos_token_id=t[0],
        strategy="beam",
        num_beams=2,
        length_penalty=-1.0,
        early_stopping="never",
        num_return_sequences=2,
    )
    assert [t[0]] not in r.tokens, (
        f"from {prompt}, EOS {t[0]} (p=0.1) ranks 3rd of the first 4 candidates and must not "
        f"finish [{t[0]}], yet the output holds it: {r.tokens}"
    )


REFILL_BIGRAM = [
    [0.2, 0.2, 0.2, 0.2, 0.2],  # after 0 (EOS)
    [0.005, 0.03, 0.5, 0.45, 0.015],  # after 1
    [0.5, 0.04, 0.03, 0.03, 0.4],  # after 2
    [0.1, 0.5, 0.05, 0.05, 0.3],  # after 3
    [0.9, 0.025, 0.025, 0.025, 0.025],
]  # after 4


@pytest.mark.points(1)
@pytest.mark.builds_on("test_first_step_expands_one_beam")
def test_beam_that_ends_is_replaced(kata):
    """A beam whose best candidate is EOS is replaced: num_beams beams keep running (rank 2 * num_beams candidates)"""
    model, t, prompt = renamed_bigram(seeds.rng(33), REFILL_BIGRAM)
    kwargs = dict(strategy="beam", num_beams=2, length_penalty=0.0)
    r = kata.generate(model, [prompt], max_new_tokens=3, eos_token_id=t[0], num_return_sequences=2, **kwargs)
    want = [toks for _, toks in beam_oracle(model, prompt, 3, (t[0],), 2, 0.0, True)]
    a, b, c, d = ([t[i] for i in seq] for seq in ([2, 0], [3, 1], [2, 4], [3, 1, 2]))
    assert r.tokens == want, (
        f"2 beams from {prompt}, 3 new tokens, length_penalty 0: got {r.tokens}, want {want}. At step 2 the "
        f"candidates are {a} (p .25), {b} (.225), {c} (.2): {a} finishes, and {b} and {c} both run on "
        f"(num_beams beams without EOS remain); {want[1]} (.18) then beats {d} (.1125)"
    )


class Recorder:
    """Wraps a model; logs every forward (kind, rows) and every cache reorder."""

    def __init__(self, model, events):
        self.model, self.config, self.events = model, model.config, events

    def new_cache(self, batch_size, max_len=None):
        cache = self.model.new_cache(batch_size, max_len)
        reorder = cache.reorder

        def logged_reorder(index):
            self.events.append(("reorder", len(index)))
            reorder(index)

        cache.reorder = logged_reorder
        return cache

    def prefill(self, ids, cache, attention_mask=None):
        self.events.append(("prefill", ids.shape[0]))
        return self.model.prefill(ids, cache, attention_mask)

    def decode_step(self, ids, cache, attention_mask=None):
        self.events.append(("decode", ids.shape[0]))
        return self.model.decode_step(ids, cache, attention_mask)


@pytest.mark.points(2)
def test_one_batched_forward_per_step(kata, llama):
    """All beams of all prompts advance in one forward pass per step, the cache reordered each step"""
    draw = seeds.rng(34)
    prompts, nb, n = draw_prompts(draw, count=draw.randint(2, 4)), draw.randint(2, 4), draw.randint(3, 6)
    events = []
    r = kata.generate(Recorder(llama, events), prompts, max_new_tokens=n, strategy="beam", num_beams=nb)
    rows = len(prompts) * nb
    forwards = [e for e in events if e[0] in ("prefill", "decode")]
    decodes = [e for e in events if e[0] == "decode"]
    assert forwards[0][0] == "prefill" and all(k == rows for _, k in forwards), (
        f"{len(prompts)} prompts x {nb} beams should run as {rows} rows per forward; forwards were {forwards}"
    )
    assert len(decodes) == n - 1, f"{n} new tokens need 1 prefill + {n - 1} decode steps, got {forwards}"
    between = [events[i + 1][0] for i, e in enumerate(events[:-1]) if e[0] in ("prefill", "decode")]
    assert between[: n - 1] == ["reorder"] * (n - 1), (
        f"the cache must be reordered before every decode step: {events}"
    )
    assert len(r.tokens) == len(prompts)


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_one_batched_forward_per_step",
    "test_first_step_expands_one_beam",
    "test_eos_outside_top_beams_does_not_finish",
)
def test_beams_continue_from_their_parents_cache(kata):
    """Each beam continues from its own parent's keys and values (the cache follows the beams)"""
    kept = []

    class Spy(KVCache):
        def reorder(self, index):
            kept.append(index.tolist())
            super().reorder(index)

    model = EosBiased(tiny_model(seeds.seed(0), vocab_size=24, cache_cls=Spy), 2.0)
    with torch.no_grad():
        model.model.norm.mul_(0.5)
    draw = seeds.rng(35)
    while True:  # a prompt whose beams change parents in the oracle: else a wrong cache goes unseen
        prompt, parents = draw_prompts(draw, count=1)[0], []
        beam_oracle(model, prompt, 7, (EOS,), 3, 0.0, "never", parents)
        if any(ix != sorted(ix) for ix in parents):
            break
    r = kata.generate(
        model,
        [prompt],
        max_new_tokens=7,
        eos_token_id=EOS,
        strategy="beam",
        num_beams=3,
        length_penalty=0.0,
        early_stopping="never",
        num_return_sequences=3,
    )
    want = beam_oracle(model, prompt, 7, (EOS,), 3, 0.0, "never")
    assert kept, "cache.reorder was never called: each beam must continue from its parent's keys and values"
    swaps = [ix for ix in kept if ix != sorted(ix)]
    assert r.tokens == [t for _, t in want], (
        f"prompt {prompt}, 3 beams: got {r.tokens}, want {[t for _, t in want]}; reorder indices were {kept}: "
        "after a reorder, row i must hold the keys and values of its parent beam"
    )
    assert swaps, (
        f"the beams never changed parents (reorder indices {kept}): this test needs a swap to check anything"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_beams_continue_from_their_parents_cache", "test_batched_equals_unbatched")
def test_beam_scores_are_length_penalised_logprobs(kata, llama):
    """A beam's score is sum(log p) / (new tokens incl. EOS) ** length_penalty"""
    prompts = draw_prompts(seeds.rng(36))
    for lp in (0.0, 1.0, 2.0, -0.5):
        r = kata.generate(
            llama,
            prompts,
            max_new_tokens=6,
            eos_token_id=EOS,
            strategy="beam",
            num_beams=3,
            length_penalty=lp,
            num_return_sequences=3,
        )
        for row, (toks, score) in enumerate(zip(r.tokens, r.scores)):
            want = sequence_logprob(llama, prompts[row // 3], toks) / len(toks) ** lp
            assert score == pytest.approx(want, abs=1e-4), (
                f"length_penalty={lp}, prompt {prompts[row // 3]}, output {toks}: score {score}, want {want}"
            )
        assert r.scores[:3] == sorted(r.scores[:3], reverse=True), f"returned best first: {r.scores[:3]}"


@pytest.mark.points(1)
@pytest.mark.builds_on("test_first_step_expands_one_beam")
def test_num_return_sequences(kata, llama):
    """num_return_sequences returns that many distinct hypotheses per prompt, best first"""
    prompts = draw_prompts(seeds.rng(37))
    r = kata.generate(
        llama,
        prompts,
        max_new_tokens=5,
        eos_token_id=EOS,
        strategy="beam",
        num_beams=4,
        num_return_sequences=3,
    )
    assert len(r.tokens) == len(r.scores) == 9, f"3 prompts x 3 sequences: got {len(r.tokens)} rows"
    for i in range(3):
        toks, scores = r.tokens[3 * i : 3 * i + 3], r.scores[3 * i : 3 * i + 3]
        assert len({tuple(t) for t in toks}) == 3, f"prompt {prompts[i]}: repeated hypotheses {toks}"
        assert scores == sorted(scores, reverse=True), f"prompt {prompts[i]}: not best first {scores}"


@pytest.mark.points(1)
@pytest.mark.builds_on("test_beam_scores_are_length_penalised_logprobs", "test_first_step_expands_one_beam")
def test_negative_length_penalty_favours_short(kata, llama):
    """A negative length_penalty favours short outputs, a positive one long outputs"""
    draw = seeds.rng(38)
    while True:  # prompts on which the oracle's best outputs differ in length: else nothing is shown
        prompts = draw_prompts(draw)
        short, long = (
            [len(beam_oracle(llama, p, 7, (EOS,), 3, lp, True)[0][1]) for p in prompts] for lp in (-2, 2)
        )
        if all(s <= n for s, n in zip(short, long)) and sum(short) < sum(long):
            break
    kwargs = dict(max_new_tokens=7, eos_token_id=EOS, strategy="beam", num_beams=3)
    short = [len(t) for t in kata.generate(llama, prompts, length_penalty=-2.0, **kwargs).tokens]
    long = [len(t) for t in kata.generate(llama, prompts, length_penalty=2.0, **kwargs).tokens]
    assert all(s <= n for s, n in zip(short, long)) and sum(short) < sum(long), (
        f"best output lengths: length_penalty=-2 gives {short}, +2 gives {long}"
    )


# ---------------------------------------------------------------------------------------------
# Beam search as a whole: the README's examples, then oracles (each failure here says which basic
# property failed first).


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on("test_first_step_expands_one_beam", "test_eos_outside_top_beams_does_not_finish")
def test_example_beam_finds_more_probable(kata):
    """Beam search finds a more probable sequence than greedy (length_penalty=0)"""
    r = kata.generate(
        BigramModel(BIGRAM),
        [[1]],
        max_new_tokens=4,
        eos_token_id=0,
        strategy="beam",
        num_beams=2,
        length_penalty=0.0,
        num_return_sequences=2,
    )
    assert r.tokens == [[3, 0], [2, 3, 0]], (
        f"beam search, 2 beams, length_penalty 0 from [1]: got {r.tokens}, want [[3, 0], [2, 3, 0]]"
    )
    want = [math.log(0.35 * 0.9), math.log(0.5 * 0.4 * 0.9)]
    assert r.scores == pytest.approx(want, abs=1e-4), (
        f"beam scores are raw sum(log p): got {r.scores}, want {want}"
    )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_first_step_expands_one_beam",
    "test_beam_that_ends_is_replaced",
    "test_beam_scores_are_length_penalised_logprobs",
    "test_eos_outside_top_beams_does_not_finish",
)
def test_example_early_stopping_false_keeps_searching(kata):
    """early_stopping=False keeps searching after num_beams hypotheses finish"""
    got = {}
    for es in (True, False):
        r = kata.generate(
            BigramModel(BIGRAM),
            [[1]],
            max_new_tokens=4,
            eos_token_id=0,
            strategy="beam",
            num_beams=2,
            length_penalty=2.0,
            early_stopping=es,
            num_return_sequences=2,
        )
        got[es] = r.tokens
    want = {True: [[2, 3, 0], [3, 0]], False: [[2, 3, 0], [2, 1, 3, 0]]}
    assert got == want, f"2 beams, length_penalty 2 from [1], by early_stopping: got {got}, want {want}"


ES_BIGRAM = [
    [0.03, 0.09, 0.25, 0.63],  # after 0 (EOS)
    [0.38, 0.14, 0.25, 0.23],  # after 1
    [0.10, 0.70, 0.03, 0.17],  # after 2
    [0.44, 0.42, 0.12, 0.02],
]  # after 3 (no tie: the order among equal scores is not graded)


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_first_step_expands_one_beam",
    "test_beam_that_ends_is_replaced",
    "test_beam_scores_are_length_penalised_logprobs",
    "test_example_early_stopping_false_keeps_searching",
)
def test_example_early_stopping_modes(kata):
    """early_stopping True, False and "never" stop at different points"""
    got = {}
    for es in (True, False, "never"):
        got[es] = kata.generate(
            BigramModel(ES_BIGRAM),
            [[1]],
            max_new_tokens=5,
            eos_token_id=0,
            strategy="beam",
            num_beams=2,
            length_penalty=1.0,
            early_stopping=es,
        ).tokens[0]
    want = {True: [0], False: [2, 1, 0], "never": [2, 1, 2, 1, 0]}
    assert got == want, (
        f"best output from [1] with 2 beams, length_penalty 1, by early_stopping: got {got}, want {want}"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_batched_equals_unbatched", "test_beam_scores_are_length_penalised_logprobs")
def test_batched_beams_equal_unbatched(kata, llama):
    """Beam search: prompts of different lengths batched together give each prompt's solo result"""
    prompts = draw_prompts(seeds.rng(39))
    kwargs = dict(strategy="beam", num_beams=3, num_return_sequences=2)
    batched = kata.generate(llama, prompts, max_new_tokens=6, eos_token_id=EOS, **kwargs)
    solo = [kata.generate(llama, [p], max_new_tokens=6, eos_token_id=EOS, **kwargs) for p in prompts]
    solo_tokens, solo_scores = [t for r in solo for t in r.tokens], [s for r in solo for s in r.scores]
    assert batched.tokens == solo_tokens, (
        f"{kwargs} on prompts {prompts}: batched {batched.tokens}, one by one {solo_tokens}"
    )
    assert batched.scores == pytest.approx(solo_scores, abs=1e-4), (
        f"{kwargs}: batched scores {batched.scores}, one by one {solo_scores}"
    )


@pytest.mark.points(4)
@pytest.mark.parametrize("num_beams", [2, 3])
@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.builds_on(
    "test_first_step_expands_one_beam",
    "test_beam_that_ends_is_replaced",
    "test_eos_outside_top_beams_does_not_finish",
    "test_beams_continue_from_their_parents_cache",
    "test_beam_scores_are_length_penalised_logprobs",
    "test_example_early_stopping_false_keeps_searching",
    "test_example_early_stopping_modes",
)
def test_beam_search_equals_plain_implementation(kata, llama, num_beams, early_stopping):
    """Beam search equals a plain list-based beam search with the HuggingFace semantics"""
    prompts = draw_prompts(seeds.rng(40 + 3 * num_beams + [True, False, "never"].index(early_stopping)))
    for length_penalty in (0.0, 1.0, 2.0, -1.0):
        r = kata.generate(
            llama,
            prompts,
            max_new_tokens=7,
            eos_token_id=EOS,
            strategy="beam",
            num_beams=num_beams,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            num_return_sequences=num_beams,
        )
        for i, p in enumerate(prompts):
            want = beam_oracle(llama, p, 7, (EOS,), num_beams, length_penalty, early_stopping)
            rows = slice(i * num_beams, (i + 1) * num_beams)
            got_toks, got_scores = r.tokens[rows], r.scores[rows]
            where = (
                f"prompt {p}, num_beams={num_beams}, length_penalty={length_penalty}, "
                f"early_stopping={early_stopping!r}, EOS={EOS}"
            )
            assert got_toks == [t for _, t in want], f"{where}: got {got_toks}, want {[t for _, t in want]}"
            assert got_scores == pytest.approx([s for s, _ in want], abs=1e-4), (
                f"{where}: scores {got_scores}, want {[round(s, 5) for s, _ in want]}"
            )


@pytest.mark.points(2)
@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
@pytest.mark.builds_on(
    "test_first_step_expands_one_beam",
    "test_beam_that_ends_is_replaced",
    "test_beam_scores_are_length_penalised_logprobs",
)
def test_beam_search_exhaustive_on_tiny_vocabulary(kata, length_penalty):
    """With enough beams and early_stopping='never', beam search finds the best of all outputs"""
    model = flat_llama(seeds.seed(3), 4, 0.5, d_model=32, n_heads=2, n_kv_heads=1, d_ff=64)
    max_new, V = 3, 4
    outputs = [
        list(s)
        for n in range(1, max_new + 1)
        for s in itertools.product(range(V), repeat=n)
        if EOS not in s[:-1] and (n == max_new or s[-1] == EOS)
    ]
    draw = seeds.rng(55 + int(length_penalty))
    while True:  # a prompt whose best output is clear of the runner-up (else rounding may pick either)
        prompt = [draw.randrange(V) for _ in range(draw.randint(1, 4))]
        scored = sorted(
            ((sequence_logprob(model, prompt, s) / len(s) ** length_penalty, s) for s in outputs),
            reverse=True,
        )
        if scored[0][0] - scored[1][0] > 1e-3:
            break
    best_score, best = scored[0]
    r = kata.generate(
        model,
        [prompt],
        max_new_tokens=max_new,
        eos_token_id=EOS,
        strategy="beam",
        num_beams=36,
        length_penalty=length_penalty,
        early_stopping="never",
    )
    assert r.tokens[0] == best, (
        f"4-token vocabulary, prompt {prompt}, length_penalty={length_penalty}: "
        f"got {r.tokens[0]}, the best of all {len(outputs)} outputs is {best}"
    )
    assert r.scores[0] == pytest.approx(best_score, abs=1e-4), f"score {r.scores[0]}, want {best_score}"


# ---------------------------------------------------------------------------------------------
# Streaming, timings and arguments.


@pytest.mark.points(1)
def test_on_token_streams(kata, llama):
    """on_token(row, token) is called for each new token as it is produced"""
    prompts = draw_prompts(seeds.rng(50), count=seeds.rng(51).randint(2, 4))
    events = []
    model = Recorder(llama, events)
    r = kata.generate(
        model, prompts, max_new_tokens=4, on_token=lambda row, tok: events.append(("token", row, tok))
    )
    streamed = [[e[2] for e in events if e[0] == "token" and e[1] == row] for row in range(len(prompts))]
    assert streamed == r.tokens, f"streamed tokens {streamed} differ from the result {r.tokens}"
    kinds = [e[0] for e in events]
    first_decode = kinds.index("decode")
    assert kinds[:first_decode].count("token") == len(prompts), (
        f"each row's first token should be streamed before the first decode step; events {kinds}"
    )


@pytest.mark.points(1)
def test_result_timings(kata, llama):
    """The result reports prefill and decode seconds and the number of tokens generated"""
    r = kata.generate(llama, draw_prompts(seeds.rng(52)), max_new_tokens=5, eos_token_id=EOS)
    assert r.tokens_generated == sum(map(len, r.tokens)), (
        f"tokens_generated {r.tokens_generated}, but the sequences hold {sum(map(len, r.tokens))}"
    )
    assert r.prefill_seconds > 0 and r.decode_seconds > 0, (
        f"timings must be positive: prefill {r.prefill_seconds}, decode {r.decode_seconds}"
    )


def bad_arguments(draw, prompt: list[int], context: int) -> list[tuple[dict, str]]:
    """One drawn invalid argument per case, with the name its ValueError must give."""
    nb = draw.randint(2, 4)
    empty = draw_prompts(draw, count=2)
    empty.insert(draw.randint(0, 2), [])
    return [
        (dict(num_beams=draw.randint(-2, 0), strategy="beam"), "num_beams"),
        (
            dict(num_beams=nb, strategy="beam", num_return_sequences=nb + draw.randint(1, 3)),
            "num_return_sequences",
        ),
        (dict(strategy="sample", temperature=draw.choice([0.0, -draw.uniform(0.1, 2.0)])), "temperature"),
        (dict(strategy="sample", top_p=draw.choice([0.0, -draw.uniform(0.01, 1.0)])), "top_p"),
        (dict(strategy="sample", top_p=1.0 + draw.uniform(0.01, 1.0)), "top_p"),
        (dict(strategy="sample", top_k=draw.randint(-2, 0)), "top_k"),
        (dict(strategy=draw.choice(["nucleus", "contrastive", "typical", "topk", "mirostat"])), "strategy"),
        (
            dict(strategy="beam", num_beams=nb, early_stopping=draw.choice(["sometimes", "always", "auto"])),
            "early_stopping",
        ),
        (dict(max_new_tokens=draw.randint(-2, 0)), "max_new_tokens"),
        (dict(max_new_tokens=context - len(prompt) + draw.randint(1, 64)), "max_new_tokens"),
        (dict(prompts=empty), "prompts"),
    ]


BAD_ARGUMENT_NAMES = [name for _, name in bad_arguments(seeds.rng(0), [0], 1)]


@pytest.mark.points(2)
@pytest.mark.parametrize("case, name", list(enumerate(BAD_ARGUMENT_NAMES)))
def test_invalid_arguments(kata, plain_llama, case, name):
    """Invalid arguments raise ValueError naming the argument"""
    draw = seeds.rng(60 + case)
    prompt = draw_prompts(draw, 64, count=1)[0]
    bad = bad_arguments(draw, prompt, plain_llama.config.max_seq_len)[case][0]
    kwargs = dict(prompts=[prompt], max_new_tokens=draw.randint(1, 8)) | bad
    prompts = kwargs.pop("prompts")
    with pytest.raises(ValueError) as info:
        kata.generate(plain_llama, prompts, **kwargs)
    assert name in str(info.value), (
        f"generate(..., {bad}) raised ValueError({str(info.value)!r}) not naming {name}"
    )
