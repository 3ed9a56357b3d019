"""Beam search on SmolLM2: our generator against HuggingFace `generate` on the same weights.

For num_beams in {2, 4}, length_penalty in {0, 1, 2} and every early_stopping setting, pairwise (every
pair of two factors' values meets in some case: 9 cases, not the 18 of the full product), both must
return the same sequences (all num_beams of them, best first) with scores within 1e-4. Short plain
prompts keep it quick; "." counts as a second EOS id, so hypotheses end inside the 8 new tokens, the
early-stopping rules matter, and 3 * num_beams candidates are kept per step (two EOS ids). One
batched case checks left padding against HF's.
"""

from __future__ import annotations

import pytest
import torch

from solutions.generate import generate

PAD = 2  # <|im_end|>, SmolLM2's EOS and pad id: HF pads finished rows with it, so cut after the first EOS
MAX_NEW = 8


@pytest.fixture(scope="module")
def eos(smollm2_tokenizer) -> list[int]:
    (period,) = smollm2_tokenizer.encode(".")
    return [PAD, period]


@pytest.fixture(scope="module")
def encode(smollm2_tokenizer):
    return smollm2_tokenizer.encode


def hf_beam_search(hf_model, prompts: list[list[int]], eos: list[int], **kwargs):
    """HF `generate` on left-padded prompts: new tokens of every returned row (cut after EOS), scores."""
    T = max(map(len, prompts))
    ids = torch.full((len(prompts), T), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p) :] = torch.tensor(p)
        mask[i, T - len(p) :] = 1
    with torch.no_grad():
        out = hf_model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=MAX_NEW,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=PAD,
            return_dict_in_generate=True,
            output_scores=True,
            temperature=None,
            top_p=None,
            top_k=None,
            **kwargs,
        )
    rows = []
    for seq in out.sequences[:, T:].tolist():
        ends = [i for i, tok in enumerate(seq) if tok in eos]
        rows.append(seq[: ends[0] + 1] if ends else seq)
    return rows, out.sequences_scores.tolist()


# Pairwise over num_beams {2, 4} x length_penalty {0, 1, 2} x early_stopping {True, False, "never"}: every
# length_penalty meets every early_stopping once, and each num_beams meets each value of both.
PAIRWISE = [
    (4, 0.0, True),
    (2, 0.0, False),
    (2, 0.0, "never"),
    (2, 1.0, True),
    (2, 1.0, False),
    (4, 1.0, "never"),
    (2, 2.0, True),
    (4, 2.0, False),
    (2, 2.0, "never"),
]


def test_the_cases_are_pairwise():
    """The beam cases cover every pair of factor values (a guard on PAIRWISE's hand-written table)"""
    factors = ([2, 4], [0.0, 1.0, 2.0], [True, False, "never"])
    for a in range(3):
        for b in range(a + 1, 3):
            want = {(x, y) for x in factors[a] for y in factors[b]}
            got = {(case[a], case[b]) for case in PAIRWISE}
            assert want <= got, f"factors {a} and {b}: pairs {want - got} are in no case"


@pytest.mark.slow
@pytest.mark.parametrize(("num_beams", "length_penalty", "early_stopping"), PAIRWISE)
def test_beam_search_matches_hf(smollm2, hf_smollm2, encode, eos, num_beams, length_penalty, early_stopping):
    """Beam search gives HF's sequences and scores on SmolLM2"""
    prompt = encode("The capital of France is")
    kwargs = dict(
        num_beams=num_beams,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
        num_return_sequences=num_beams,
    )
    ours = generate(smollm2, [prompt], max_new_tokens=MAX_NEW, eos_token_id=eos, strategy="beam", **kwargs)
    want_tokens, want_scores = hf_beam_search(hf_smollm2, [prompt], eos, **kwargs)
    assert ours.tokens == want_tokens, f"{kwargs}: ours {ours.tokens}, HF {want_tokens}"
    assert ours.scores == pytest.approx(want_scores, abs=1e-4), (
        f"{kwargs}: ours {ours.scores}, HF {want_scores}"
    )


@pytest.mark.slow
def test_batched_beam_search_matches_hf(smollm2, hf_smollm2, encode, eos):
    """Beam search over left-padded prompts of different lengths gives HF's results"""
    prompts = [encode("The capital of France is"), encode("Water boils at"), encode("def add(a, b):")]
    kwargs = dict(num_beams=2, length_penalty=1.0, early_stopping=False, num_return_sequences=2)
    ours = generate(smollm2, prompts, max_new_tokens=MAX_NEW, eos_token_id=eos, strategy="beam", **kwargs)
    want_tokens, want_scores = hf_beam_search(hf_smollm2, prompts, eos, **kwargs)
    assert ours.tokens == want_tokens, f"ours {ours.tokens}, HF {want_tokens}"
    assert ours.scores == pytest.approx(want_scores, abs=1e-4), f"ours {ours.scores}, HF {want_scores}"
