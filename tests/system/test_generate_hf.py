"""Beam search on SmolLM2: our generator against HuggingFace `generate` on the same weights.

For num_beams in {2, 4}, length_penalty in {0, 1, 2} and every early_stopping setting, both must
return the same sequences (all num_beams of them, best first) with scores within 1e-4. The prompt
asks for a short answer so that hypotheses end with EOS inside the 8 new tokens and the
early-stopping rules matter. One batched case checks left padding against HF's.
"""

from __future__ import annotations

import pytest
import torch

from solutions.generate import generate

EOS = 2  # <|im_end|>, also SmolLM2's pad id: HF pads finished rows with it, so cut after the first EOS
MAX_NEW = 8


@pytest.fixture(scope="module")
def chat_ids(smollm2_tokenizer):
    def encode(question: str) -> list[int]:
        prompt = smollm2_tokenizer.apply_chat_template([{"role": "user", "content": question}])
        return smollm2_tokenizer.encode(prompt)
    return encode


def hf_beam_search(hf_model, prompts: list[list[int]], **kwargs) -> tuple[list[list[int]], list[float]]:
    """HF `generate` on left-padded prompts; new tokens of every returned row (cut after EOS), scores."""
    T = max(map(len, prompts))
    ids = torch.full((len(prompts), T), EOS, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(p)
        mask[i, T - len(p):] = 1
    with torch.no_grad():
        out = hf_model.generate(ids, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False,
                                eos_token_id=EOS, pad_token_id=EOS, return_dict_in_generate=True,
                                output_scores=True, temperature=None, top_p=None, top_k=None, **kwargs)
    rows = []
    for seq in out.sequences[:, T:].tolist():
        rows.append(seq[:seq.index(EOS) + 1] if EOS in seq else seq)
    return rows, out.sequences_scores.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_matches_hf(smollm2, hf_smollm2, chat_ids, num_beams, length_penalty, early_stopping):
    """Beam search gives HF's sequences and scores on SmolLM2"""
    prompt = chat_ids("Say yes or no: is water wet?")
    kwargs = dict(num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping,
                  num_return_sequences=num_beams)
    ours = generate(smollm2, [prompt], max_new_tokens=MAX_NEW, eos_token_id=EOS, strategy="beam", **kwargs)
    want_tokens, want_scores = hf_beam_search(hf_smollm2, [prompt], **kwargs)
    assert ours.tokens == want_tokens, f"{kwargs}: ours {ours.tokens}, HF {want_tokens}"
    assert ours.scores == pytest.approx(want_scores, abs=1e-4), f"{kwargs}: ours {ours.scores}, HF {want_scores}"


@pytest.mark.slow
def test_batched_beam_search_matches_hf(smollm2, hf_smollm2, chat_ids):
    """Beam search over left-padded prompts of different lengths gives HF's results"""
    prompts = [chat_ids("Say yes or no: is water wet?"), chat_ids("What is 2+2? Reply with just the number.")]
    kwargs = dict(num_beams=2, length_penalty=1.0, early_stopping=False, num_return_sequences=2)
    ours = generate(smollm2, prompts, max_new_tokens=MAX_NEW, eos_token_id=EOS, strategy="beam", **kwargs)
    want_tokens, want_scores = hf_beam_search(hf_smollm2, prompts, **kwargs)
    assert ours.tokens == want_tokens, f"ours {ours.tokens}, HF {want_tokens}"
    assert ours.scores == pytest.approx(want_scores, abs=1e-4), f"ours {ours.scores}, HF {want_scores}"
