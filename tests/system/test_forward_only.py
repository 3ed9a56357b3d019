"""A cache-free model behind the generator (solutions.system.loading.forward_only), as `dojo demo --mine` runs
the learner's decoder_block.

On a tiny decoder_block Llama with random GGUF-named weights: greedy and beam search through `ForwardOnly`
equal plain loops over the model's own forward; a padding mask is refused. On SmolLM2: the decoder_block
reference loaded by `load_forward_only` answers greedily as the system's fp32 model does.
"""

from __future__ import annotations

import pytest
import torch

from solutions import decoder_block
from solutions.generate import generate
from solutions.system.loading.forward_only import ForwardOnly, load_forward_only

CONFIG = decoder_block.LlamaConfig(
    vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64
)


def random_weights(c: decoder_block.LlamaConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """GGUF-named tensors of the right shapes, (out, in), random (norm weights near 1)."""
    gen = torch.Generator().manual_seed(seed)
    hd = c.head_dim
    shapes = {"token_embd.weight": (c.vocab_size, c.d_model), "output_norm.weight": (c.d_model,)}
    for i in range(c.n_layers):
        p = f"blk.{i}."
        shapes |= {
            p + "attn_norm.weight": (c.d_model,),
            p + "attn_q.weight": (c.n_heads * hd, c.d_model),
            p + "attn_k.weight": (c.n_kv_heads * hd, c.d_model),
            p + "attn_v.weight": (c.n_kv_heads * hd, c.d_model),
            p + "attn_output.weight": (c.d_model, c.n_heads * hd),
            p + "ffn_norm.weight": (c.d_model,),
            p + "ffn_gate.weight": (c.d_ff, c.d_model),
            p + "ffn_up.weight": (c.d_ff, c.d_model),
            p + "ffn_down.weight": (c.d_model, c.d_ff),
        }
    return {
        name: 1 + 0.1 * torch.randn(shape, generator=gen)
        if len(shape) == 1
        else torch.randn(shape, generator=gen)
        for name, shape in shapes.items()
    }


@pytest.fixture(scope="module")
def llama():
    model = decoder_block.Llama(CONFIG)
    model.load(random_weights(CONFIG))
    return model


def test_greedy_through_forward_only_is_the_argmax_of_the_forward(llama):
    """generate's greedy on ForwardOnly(llama) appends, step by step, the argmax of llama(all ids so far)"""
    prompt = [3, 17, 5, 40]
    with torch.no_grad():
        got = generate(ForwardOnly(llama, CONFIG), [prompt], max_new_tokens=10).tokens[0]
        seq = list(prompt)
        for _ in range(10):
            seq.append(int(llama(torch.tensor([seq]))[0, -1].argmax()))
    assert got == seq[len(prompt) :], f"ForwardOnly's greedy {got}, the plain loop's {seq[len(prompt) :]}"


def test_beam_search_through_forward_only_scores_its_sequences(llama):
    """Beam search reorders ForwardOnly's ids with its beams: each returned sequence's score is its own
    sum of log p over new tokens / length, recomputed from llama's forward"""
    prompt = [9, 2, 33]
    with torch.no_grad():
        result = generate(
            ForwardOnly(llama, CONFIG),
            [prompt],
            max_new_tokens=6,
            strategy="beam",
            num_beams=3,
            num_return_sequences=3,
        )
        for seq, score in zip(result.tokens, result.scores):
            logp = llama(torch.tensor([prompt + seq])).log_softmax(-1)[0]  # (T, V)
            total = sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(seq))
            assert score == pytest.approx(total / len(seq), abs=1e-4), (
                f"beam {seq}: score {score}, its own log p {total / len(seq)}: a beam kept another's past"
            )
    assert len({tuple(s) for s in result.tokens}) == 3, f"three beams, not three sequences: {result.tokens}"


def test_padding_is_refused(llama):
    """Prompts of different lengths need a padding mask, which a forward-only model cannot take"""
    with pytest.raises(ValueError, match="no padding mask"):
        generate(ForwardOnly(llama, CONFIG), [[1, 2, 3], [4]], max_new_tokens=2)


@pytest.mark.slow
def test_reference_block_through_load_forward_only_answers_as_the_system(smollm2, smollm2_path):
    """decoder_block's Llama loaded from the GGUF by load_forward_only: the system fp32 model's 8 greedy tokens"""
    model, tokenizer = load_forward_only(decoder_block.Llama, smollm2_path)
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}]))
    with torch.inference_mode():
        got = generate(model, [prompt], max_new_tokens=8, eos_token_id=tokenizer.eos_token_id).tokens[0]
        want = generate(smollm2, [prompt], max_new_tokens=8, eos_token_id=tokenizer.eos_token_id).tokens[0]
    assert got == want, (
        f"the block model says {tokenizer.decode(got)!r}, the system {tokenizer.decode(want)!r}"
    )
