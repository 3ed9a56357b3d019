"""MKL's packed GEMM for the 4-row products of a beam step (solutions.system.kernels.packed_gemm): its products
on a tiny model, and the beam search it serves on SmolLM2 against HuggingFace's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solutions.generate import generate
from solutions.model import tiny_model
from solutions.system.kernels import packed_gemm

pytestmark = pytest.mark.skipif(not packed_gemm.available(), reason="this torch has no MKL")  # x86 wheels do


def test_packing_is_lazy_and_gives_plain_products():
    """enable() only marks the matrices; the first 4-row forward packs them, its logits are the
    unpacked model's up to rounding (MKL blocks the sums another way), and 1-row products never pack."""
    plain, packed = tiny_model(seed=3), tiny_model(seed=3)
    assert packed_gemm.enable(packed, [4]) == len(packed_gemm.matrices(packed))
    w = packed.layers[0].wqkv
    assert w.packs == {4: None}, "enable() packed eagerly"
    ids = torch.tensor([[5], [6], [7], [8]])
    with torch.no_grad():
        torch.testing.assert_close(packed(ids[:1]), plain(ids[:1]), rtol=0, atol=0)
        assert w.packs[4] is None, "a 1-row product packed for 4 rows"
        torch.testing.assert_close(packed(ids), plain(ids), rtol=1e-4, atol=1e-5)
    assert w.packs[4] is not None, "a 4-row product did not go through the packed weight"


def test_a_pack_refuses_another_row_count_and_bad_weights():
    w = torch.randn(8, 16)
    p = packed_gemm.pack(w, 4)
    x = torch.randn(4, 16)
    torch.testing.assert_close(packed_gemm.linear(x, w, p, 4), F.linear(x, w), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="packed for 4 rows; the input has 2"):
        packed_gemm.linear(x[:2], w, p, 4)
    with pytest.raises(ValueError, match="fp32"):
        packed_gemm.pack(w.to(torch.bfloat16), 4)
    with pytest.raises(ValueError, match="rows"):
        packed_gemm.pack(w, 0)


def test_nothing_marked_without_row_counts():
    model = tiny_model()
    assert packed_gemm.enable(model, []) == 0
    assert not hasattr(model.layers[0].wqkv, "packs")


@pytest.fixture
def packed_smollm2(smollm2):
    """The session's SmolLM2 with its 4-row products through MKL's packed GEMM, as the calibration
    sets it up where packing wins (where there is no fused fp32 step: it is set aside here, so the
    readable path's products run); unpacked again afterwards, for the other tests."""
    marked = packed_gemm.matrices(smollm2)
    assert packed_gemm.enable(smollm2, [4]) == len(marked) > 0
    fused, smollm2.fused_step = smollm2.fused_step, None
    yield smollm2
    smollm2.fused_step = fused
    for w in marked:
        del w.packs


@pytest.mark.slow
def test_beam_search_with_packed_products_matches_hf(packed_smollm2, hf_smollm2, smollm2_tokenizer):
    """4 beams with every 4-row product from MKL's packed layout give HF's sequences and scores
    (the same case as test_generate_hf.py's, there on plain products)."""
    from test_generate_hf import hf_beam_search  # pytest puts this folder on sys.path

    eos = [smollm2_tokenizer.eos_token_id, *smollm2_tokenizer.encode(".")]
    prompt = smollm2_tokenizer.encode("The capital of France is")
    kwargs = dict(num_beams=4, length_penalty=1.0, early_stopping=False, num_return_sequences=4)
    ours = generate(packed_smollm2, [prompt], max_new_tokens=8, eos_token_id=eos, strategy="beam", **kwargs)
    assert packed_smollm2.layers[0].wqkv.packs[4] is not None, (
        "the 4-row steps did not use the packed weights"
    )
    want_tokens, want_scores = hf_beam_search(hf_smollm2, [prompt], eos, **kwargs)
    assert ours.tokens == want_tokens, f"ours {ours.tokens}, HF {want_tokens}"
    assert ours.scores == pytest.approx(want_scores, abs=1e-4), f"ours {ours.scores}, HF {want_scores}"
