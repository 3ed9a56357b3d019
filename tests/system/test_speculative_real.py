"""Speculative decoding on the real SmolLM2 (solutions.speculative): fp32 verifying the drafts of the
packed weights gives fp32's greedy tokens exactly, and so HuggingFace's (test_generate_hf, test_model).

The draft is `dojo demo`'s: int4 where torch has its fused kernel, else bf16. "List three prime
numbers." is the prompt where int4 alone leaves fp32's answer after "1. 1 / 2. 2"; speculative
decoding must not.
"""

from __future__ import annotations

import pytest

from solutions.generate import generate
from solutions.speculative import speculative_generate
from solutions.system.kernels.weight_modes import int4_available

NEW = 32  # past the point where int4 alone leaves fp32's answer


@pytest.fixture(scope="module")
def draft(smollm2_mode):
    return smollm2_mode("int4" if int4_available() else "bf16")


def test_speculative_greedy_is_fp32_greedy(smollm2, draft, smollm2_tokenizer):
    """fp32 verifying the packed draft's tokens (k = 4, the demo's) gives fp32's greedy tokens, token for
    token, on the prompt where the draft alone goes astray (one prompt: each costs a minute on 2 cores)"""
    tok, question = smollm2_tokenizer, "List three prime numbers."
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
    eos = tok.eos_token_id
    want = generate(smollm2, [prompt], max_new_tokens=NEW, eos_token_id=eos).tokens[0]
    for k in (4,):
        r = speculative_generate(smollm2, draft, prompt, max_new_tokens=NEW, k=k, eos_token_id=eos)
        assert r.tokens == want, (
            f"{question!r}, k={k}: speculative {tok.decode(r.tokens)!r}\nfp32 greedy {tok.decode(want)!r}"
        )
        assert r.acceptance_rate > 0.5, (
            f"{question!r}, k={k}: only {r.accepted} of {r.drafted} drafts accepted"
        )
