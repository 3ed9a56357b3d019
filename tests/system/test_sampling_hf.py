"""The sampling kata's processors against HuggingFace's own, on the same logits.

Temperature, top-k, min-p, the repetition penalty and the logit bias (HF's SequenceBiasLogitsProcessor
with one-token sequences) must return the same tensor as HF's, ties included; top-p must remove the same
tokens except where the two fp32 sums round apart (a token whose float64 mass-before lies within the
measured fp32 error of p) and in the README's two documented corners (ties, underflow at p = 1). The chain is
checked against a LogitsProcessorList in the order HF's `generate` builds it. The chi-square check that
`sample` draws from the processed distribution is the kata suite's (test_sample_matches_processed_distribution).
"""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from solutions import sampling

V = 49152  # SmolLM2's vocabulary


def logits(seed: int, B: int = 4, vocab: int = V, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(B, vocab, generator=torch.Generator().manual_seed(seed)) * scale  # (B, V)


def tied_logits(seed: int, B: int = 4, vocab: int = 512) -> torch.Tensor:
    """Logits on a grid of 8 values, so most tokens tie with many others."""
    return torch.randint(-4, 4, (B, vocab), generator=torch.Generator().manual_seed(seed)).float() / 2


def none(B: int) -> list[list[int]]:
    return [[] for _ in range(B)]


def dummy_ids(B: int) -> torch.Tensor:
    return torch.zeros(B, 1, dtype=torch.long)  # HF's warpers take input_ids and ignore them


def removed(x: torch.Tensor) -> torch.Tensor:
    return x == float("-inf")


def near_the_top_p_boundary(x: torch.Tensor, p: float) -> torch.Tensor:
    """(B, V) bool: tokens whose exact (float64) mass-before lies within fp32 rounding of p, where one fp32
    sum may land on the other side. The margin is measured on x, per row: the largest error of the fp32
    running sums of the fp32 probabilities, from the top (ours) plus from the bottom (HF's)."""
    probs32, probs64 = x.softmax(dim=-1), x.double().softmax(dim=-1)
    sorted32, order = probs32.sort(dim=-1, descending=True, stable=True)
    sorted64 = probs64.gather(-1, order)
    margin = sum(
        (a.cumsum(dim=-1).double() - b.cumsum(dim=-1)).abs().amax(dim=-1, keepdim=True)
        for a, b in [(sorted32, sorted64), (sorted32.flip(-1), sorted64.flip(-1))]
    )  # (B, 1)
    near = ((sorted64.cumsum(dim=-1) - sorted64) - p).abs() <= margin
    return torch.zeros_like(near).scatter(-1, order, near)


@pytest.mark.parametrize("t", [0.3, 0.7, 1.0, 1.6])
def test_temperature_equals_hf(t):
    """Temperature(t) returns exactly HF's TemperatureLogitsWarper(t)"""
    x = logits(1)
    ours = sampling.Temperature(t)(none(4), none(4), x)
    assert torch.equal(ours, TemperatureLogitsWarper(t)(dummy_ids(4), x)), (
        f"Temperature({t}) differs from HF's"
    )


@pytest.mark.parametrize("k", [1, 2, 7, 50, 511, 512, 4000])
def test_top_k_equals_hf_with_ties(k):
    """TopK(k) returns exactly HF's TopKLogitsWarper(k) (min_tokens_to_keep=1, its default), on logits where
    the k-th largest ties with many tokens: both keep every token tied with it"""
    x = tied_logits(2)
    ours = sampling.TopK(k)(none(4), none(4), x)
    hf = TopKLogitsWarper(k)(dummy_ids(4), x)
    assert torch.equal(ours, hf), (
        f"TopK({k}) on tied logits: {(removed(ours) != removed(hf)).sum()} tokens differ"
    )
    assert (~removed(ours)).sum(-1).min() >= min(k, 512), f"TopK({k}) kept fewer than k tokens"


@pytest.mark.parametrize("p", [1e-9, 0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("vocab", [64, 2048, V])
def test_top_p_equals_hf_away_from_ties(p, vocab):
    """TopP(p) removes the tokens HF's TopPLogitsWarper(p) removes, on continuous logits, but for tokens on the
    boundary within fp32 rounding; a tiny p keeps the top token only in both (HF by min_tokens_to_keep=1)"""
    x = logits(3, vocab=vocab)
    ours = sampling.TopP(p)(none(4), none(4), x)
    hf = TopPLogitsWarper(p)(dummy_ids(4), x)
    differ = removed(ours) != removed(hf)
    unexplained = differ & ~near_the_top_p_boundary(x, p)
    assert not unexplained.any(), (
        f"TopP({p}) over {vocab} tokens: {int(unexplained.sum())} tokens differ from HF's away from the boundary"
    )
    assert torch.equal(ours[~removed(ours)], x[~removed(ours)]), f"TopP({p}) changed a kept logit"
    if p == 1e-9:
        assert ((~removed(ours)).sum(-1) == 1).all() and torch.equal(removed(ours), removed(hf)), (
            "TopP(1e-9): both should keep exactly the most probable token"
        )


def test_top_p_one_keeps_everything_as_hf_does():
    """At p = 1 neither removes anything from logits whose probabilities are all above fp32's underflow"""
    x = logits(4)
    ours = sampling.TopP(1.0)(none(4), none(4), x)
    hf = TopPLogitsWarper(1.0)(dummy_ids(4), x)
    assert not removed(ours).any() and not removed(hf).any(), (
        f"TopP(1.0) removed {int(removed(ours).sum())} tokens (HF: {int(removed(hf).sum())}); both should keep all"
    )


def test_top_p_one_and_underflow_documented_difference():
    """README: at p = 1 HF removes tokens whose fp32 probability underflows to 0; this kata keeps everything"""
    x = torch.tensor([[0.0, -200.0, 1.0, -150.0]])  # exp(-200) and exp(-150) underflow in fp32
    assert (x.softmax(-1)[0, [1, 3]] == 0).all(), "test setup: the two small probabilities should underflow"
    ours = sampling.TopP(1.0)([[]], [[]], x)
    hf = TopPLogitsWarper(1.0)(dummy_ids(1), x)
    assert torch.equal(ours, x), f"TopP(1.0) should keep every logit, got {ours.tolist()}"
    assert removed(hf)[0].tolist() == [False, True, False, True], f"HF's warper changed: {hf.tolist()}"


@pytest.mark.parametrize("vocab", [5, 17, 1000, 4000])
def test_top_p_ties_documented_difference(vocab):
    """README: among tied probabilities at the top-p boundary this kata keeps the lower ids; HF keeps as many
    tied tokens, chosen in torch.sort's (unstable) order, and the same tokens otherwise"""
    x = torch.zeros(1, vocab)
    x[0, 0] = -1.0  # one token below a block of vocab - 1 ties
    ours, hf = sampling.TopP(0.5)([[]], [[]], x), TopPLogitsWarper(0.5)(dummy_ids(1), x)
    kept, hf_kept = (~removed(ours))[0].nonzero()[:, 0].tolist(), (~removed(hf))[0].nonzero()[:, 0].tolist()
    assert len(kept) == len(hf_kept), f"{vocab} tokens: kept {len(kept)} tied tokens, HF {len(hf_kept)}"
    assert kept == list(range(1, len(kept) + 1)), (
        f"{vocab} tokens: the kept tied tokens are not the lowest ids"
    )
    assert 0 not in hf_kept, "HF kept the token below the tie"


@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("make", [logits, tied_logits], ids=["continuous", "tied"])
def test_min_p_equals_hf(min_p, make):
    """MinP(min_p) returns exactly HF's MinPLogitsWarper(min_p) (min_tokens_to_keep=1, its default), ties
    with p_max included"""
    x = make(5)
    ours = sampling.MinP(min_p)(none(4), none(4), x)
    hf = MinPLogitsWarper(min_p)(dummy_ids(4), x)
    assert torch.equal(ours, hf), f"MinP({min_p}): {int((removed(ours) != removed(hf)).sum())} tokens differ"


def ids_with_repeats(seed: int, B: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab // 8, (B, length), generator=g).tolist()  # few distinct ids: many repeats


@pytest.mark.parametrize("penalty", [0.7, 1.2, 2.0])
def test_repetition_penalty_equals_hf(penalty):
    """RepetitionPenalty returns exactly HF's RepetitionPenaltyLogitsProcessor on input_ids = prompt + output,
    with negative, zero and positive logits among the seen tokens"""
    x = logits(6, vocab=256)
    x[:, :8] = 0.0  # zeros stay zeros
    prompts, outputs = ids_with_repeats(7, 4, 12, 256), ids_with_repeats(8, 4, 6, 256)
    input_ids = torch.tensor([p + o for p, o in zip(prompts, outputs)])  # (B, 18): HF's generate's ids
    ours = sampling.RepetitionPenalty(penalty)(prompts, outputs, x)
    hf = RepetitionPenaltyLogitsProcessor(penalty)(input_ids, x)
    assert torch.equal(ours, hf), (
        f"RepetitionPenalty({penalty}) differs from HF's in {int((ours != hf).sum())} logits"
    )


def test_logit_bias_equals_hf_sequence_bias():
    """LogitBias equals HF's SequenceBiasLogitsProcessor with one-token sequences (always applied)"""
    bias = {0: 5.0, 17: -100.0, 300: 0.25, V - 1: -2.5}
    x = logits(9)
    ours = sampling.LogitBias(bias)(none(4), none(4), x)
    hf = SequenceBiasLogitsProcessor([[[t], b] for t, b in bias.items()])(dummy_ids(4), x)
    assert torch.equal(ours, hf), (
        f"LogitBias differs from HF's sequence bias in {int((ours != hf).sum())} logits"
    )


CHAINS = [
    dict(temperature=0.7, top_k=50, top_p=0.9),
    dict(repetition_penalty=1.3, temperature=1.2, min_p=0.05),
    dict(logit_bias={3: 8.0, 40: -2.0}, repetition_penalty=1.5, temperature=0.9),
    dict(
        logit_bias={3: 2.0, 40: -1.0},
        repetition_penalty=1.1,
        temperature=0.8,
        top_k=20,
        top_p=0.95,
        min_p=0.1,
    ),
]


@pytest.mark.parametrize("params", CHAINS, ids=lambda p: ",".join(p))
def test_chain_equals_hf_generate_order(params):
    """make_chain equals the LogitsProcessorList HF's generate builds for the same parameters: sequence bias,
    repetition penalty, then temperature, top-k, top-p, min-p (GenerationMixin._get_logits_processor)"""
    x = logits(10, vocab=2048)
    prompts, outputs = ids_with_repeats(11, 4, 10, 2048), ids_with_repeats(12, 4, 5, 2048)
    for p, o in zip(prompts, outputs):
        p[0], o[0] = 3, 40  # biased tokens that the repetition penalty also sees: their order matters
    hf_list = LogitsProcessorList()
    if "logit_bias" in params:
        hf_list.append(SequenceBiasLogitsProcessor([[[t], b] for t, b in params["logit_bias"].items()]))
    if "repetition_penalty" in params:
        hf_list.append(RepetitionPenaltyLogitsProcessor(params["repetition_penalty"]))
    hf_list.append(TemperatureLogitsWarper(params["temperature"]))
    if "top_k" in params:
        hf_list.append(TopKLogitsWarper(params["top_k"]))
    if "top_p" in params:
        hf_list.append(TopPLogitsWarper(params["top_p"]))
    if "min_p" in params:
        hf_list.append(MinPLogitsWarper(params["min_p"]))
    input_ids = torch.tensor([p + o for p, o in zip(prompts, outputs)])
    chain = sampling.make_chain(**params)
    ours = sampling.apply_chain(chain, prompts, outputs, x)
    hf = hf_list(input_ids, x.clone())
    differ = removed(ours) != removed(hf)
    if "top_p" in params:  # the logits top-p saw: the chain up to it
        upto = next(i for i, proc in enumerate(chain) if isinstance(proc, sampling.TopP))
        differ &= ~near_the_top_p_boundary(
            sampling.apply_chain(chain[:upto], prompts, outputs, x), params["top_p"]
        )
    assert not differ.any(), f"make_chain({params}): {int(differ.sum())} tokens removed differently from HF's"
    kept = ~removed(ours) & ~removed(hf)
    assert torch.allclose(ours[kept], hf[kept], rtol=1e-6, atol=1e-6), (
        f"make_chain({params}): kept logits differ"
    )
