"""The speculative bench's alpha: estimated as accepted / (accepted + rejected), beside accepted / drafted.

Leviathan's model: each draft the target tests is accepted with probability alpha, independently, and a
round stops testing at its first rejection. Simulated here with seeded generators, alpha = 0.8, k = 4:
the estimate must find 0.8, while accepted / drafted tends to alpha (1 - alpha^k) / (k (1 - alpha)) = 0.59.
"""

from __future__ import annotations

import random

import pytest
import torch

from benchmarks.speculative_bench import Watched, estimate_alpha, rejections
from dojo.toymodel import BigramModel
from solutions.speculative import speculative_generate

ALPHA, K = 0.8, 4
DRAFTED_SHARE = ALPHA * (1 - ALPHA**K) / (K * (1 - ALPHA))  # what accepted / drafted tends to: 0.5904


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Torch at one thread: thousands of tiny calls lose far more to thread hand-offs than they gain."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_drafted_share_of_the_example():
    """alpha (1 - alpha^k) / (k (1 - alpha)) is 0.59 for alpha = 0.8 and k = 4"""
    assert DRAFTED_SHARE == pytest.approx(0.5904)


def test_estimate_finds_alpha_where_accepted_over_drafted_does_not():
    """20,000 simulated rounds of k = 4 i.i.d. trials: the estimate is within 0.01 of 0.8, accepted / drafted
    within 0.01 of 0.59"""
    rng = random.Random(7)
    accepted = rejected = drafted = 0
    for _ in range(20_000):
        drafted += K
        for _ in range(K):
            if rng.random() >= ALPHA:
                rejected += 1  # the round's first rejection: the drafts after it are never tested
                break
            accepted += 1
    assert estimate_alpha(accepted, rejected) == pytest.approx(ALPHA, abs=0.01)
    assert accepted / drafted == pytest.approx(DRAFTED_SHARE, abs=0.01)


def test_rejections_are_counted_from_the_target_passes():
    """speculative_generate sampling from bigram toys whose drafts are accepted with probability 0.8 each,
    independently (every row the same, sum(min(p, q)) = 0.8): the rounds' rejections, read from the target's
    passes, give an estimate within 0.03 of 0.8; accepted / drafted stays near 0.59"""
    p = [0.2, 0.2, 0.2, 0.2, 0.2]
    q = [0.4, 0.2, 0.2, 0.2, 0.0]  # min(p, q) sums to 0.8
    target = Watched(BigramModel([p] * 5))
    r = speculative_generate(
        target, BigramModel([q] * 5), [0], max_new_tokens=3000, k=K, temperature=1.0, seed=3
    )
    assert len(target.passes) == r.rounds, "one target pass a round"
    rejected = rejections(target.passes, 1, r.accepted)
    assert rejected <= r.rounds
    assert estimate_alpha(r.accepted, rejected) == pytest.approx(ALPHA, abs=0.03)
    assert r.acceptance_rate == pytest.approx(DRAFTED_SHARE, abs=0.03)


def test_rejections_of_the_kata_readme_example():
    """The kata README's greedy example (k = 3, 7 tokens): two rounds stop at a rejected draft, the last drafts
    nothing; 4 accepted of 6 tested"""
    target_probs = [[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.5, 0.1, 0.1, 0.3], [0.2, 0.2, 0.2, 0.4]]
    draft_probs = [[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.3, 0.1, 0.1, 0.5], [0.2, 0.2, 0.2, 0.4]]
    target = Watched(BigramModel(target_probs))
    r = speculative_generate(target, BigramModel(draft_probs), [0], max_new_tokens=7, k=3)
    assert (r.tokens, r.drafted, r.accepted, r.rounds) == ([1, 2, 0, 1, 2, 0, 1], 6, 4, 3)
    assert rejections(target.passes, 1, r.accepted) == 2
    assert estimate_alpha(r.accepted, 2) == pytest.approx(4 / 6)


def test_all_accepted_is_alpha_one_and_nothing_tested_is_an_error():
    """A draft equal to the target is never rejected: alpha 1; with no tested draft there is no estimate"""
    probs = [[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.5, 0.1, 0.1, 0.3], [0.2, 0.2, 0.2, 0.4]]
    target = Watched(BigramModel(probs))
    r = speculative_generate(target, BigramModel(probs), [0], max_new_tokens=11, k=4)
    assert rejections(target.passes, 1, r.accepted) == 0 and estimate_alpha(r.accepted, 0) == 1.0
    with pytest.raises(ValueError, match="no draft was tested"):
        estimate_alpha(0, 0)


def test_watched_passes_the_protocol_through():
    """Watched logs (cache length before, tokens fed) per prefill and returns the model's own logits"""
    model = BigramModel([[0.5, 0.5], [0.5, 0.5]])
    watched = Watched(model)
    cache = watched.new_cache(1, 8)
    logits = watched.prefill(torch.tensor([[0, 1, 0]]), cache)
    assert torch.equal(logits, model.prefill(torch.tensor([[0, 1, 0]]), model.new_cache(1, 8)))
    watched.decode_step(torch.tensor([1]), cache)
    watched.prefill(torch.tensor([[1]]), cache)
    assert watched.passes == [(0, 3), (4, 1)] and cache.length == 5
