"""The system's token choice through the sampling kata's chain (solutions.system.decoding).

On the tiny random model: greedy through a chain that changes nothing is the generator's greedy, token
for token; seeded sampling through temperature and top-p draws what the generate kata's sampler draws;
a repetition penalty equals a plain loop that re-runs the whole sequence; logprobs come from the
processed distribution. On SmolLM2: greedy with repetition_penalty equals HuggingFace's `generate`,
and the tokenizer's token bytes decode as `decode` does.
"""

from __future__ import annotations

import pytest
import torch

from solutions.generate import generate
from solutions.model import tiny_model
from solutions.sampling import make_chain
from solutions.system.decoding import Chooser, chain_generate, choose_each, describe_chain

PROMPTS = [[5, 9, 11, 3, 5], [17, 2, 40]]
NEW = 12


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=3, vocab_size=64)


def run(model, chain, *, greedy, seed=None, top_logprobs=0, prompts=PROMPTS, new=NEW):
    chooser = Chooser(chain, prompts, greedy=greedy, seed=seed, top_logprobs=top_logprobs)
    with torch.inference_mode():
        return chain_generate(model, prompts, chooser, max_new_tokens=new), chooser


def test_greedy_through_a_neutral_chain_is_generate_greedy(model):
    """Greedy through make_chain() (temperature 1, no penalty) picks generate's greedy tokens, with its scores"""
    with torch.inference_mode():
        want = generate(model, PROMPTS, max_new_tokens=NEW)
    got, _ = run(model, make_chain(), greedy=True)
    assert got.tokens == want.tokens, (
        f"greedy through the chain changed the tokens: {got.tokens} vs {want.tokens}"
    )
    assert got.scores == pytest.approx(want.scores, abs=1e-6)


def test_seeded_sampling_draws_what_generate_draws(model):
    """Temperature 0.7 and top-p 0.9 through the chain, seed 5, draw generate's own seeded samples"""
    with torch.inference_mode():
        want = generate(
            model, PROMPTS, max_new_tokens=NEW, strategy="sample", temperature=0.7, top_p=0.9, seed=5
        )
    got, _ = run(model, make_chain(temperature=0.7, top_p=0.9), greedy=False, seed=5)
    assert got.tokens == want.tokens, (
        f"the chain's draws differ from generate's: {got.tokens} vs {want.tokens}"
    )


def penalised_greedy_oracle(model, prompt: list[int], penalty: float, new: int) -> list[int]:
    """Greedy with HF's repetition penalty, the slow way: the whole sequence re-run every step."""
    seq = list(prompt)
    for _ in range(new):
        logits = model.prefill(torch.tensor([seq]), model.new_cache(1, len(seq)), None)[0, -1].float()
        for token in set(seq):
            z = logits[token]
            logits[token] = z * penalty if z < 0 else z / penalty
        seq.append(int(logits.argmax()))
    return seq[len(prompt) :]


def test_repetition_penalty_greedy_matches_a_plain_loop(model):
    """Greedy with repetition_penalty=1.5 picks what a cache-free loop applying the penalty by hand picks"""
    got, _ = run(model, make_chain(repetition_penalty=1.5), greedy=True)
    with torch.inference_mode():
        want = [penalised_greedy_oracle(model, p, 1.5, NEW) for p in PROMPTS]
    assert got.tokens == want, f"penalised greedy: {got.tokens}, the plain loop: {want}"
    plain, _ = run(model, make_chain(), greedy=True)
    assert got.tokens != plain.tokens, "the penalty changed nothing on these prompts: the test shows nothing"


def test_logprobs_come_from_the_processed_distribution(model):
    """Each step's logprob is the chosen token's under the chain (top-k 3 here), the top list is best first,
    and a token the chain filtered out has logprob -inf"""
    got, chooser = run(model, make_chain(temperature=0.8, top_k=3), greedy=False, seed=1, top_logprobs=4)
    assert len(chooser.steps) == NEW
    for i, step in enumerate(chooser.steps):
        assert step.tokens.tolist() == [row[i] for row in got.tokens]
        top = step.top_logprobs
        assert torch.all(top[:, :-1] >= top[:, 1:]), f"step {i}: top_logprobs not best first: {top}"
        assert torch.isinf(top[:, 3]).all(), f"step {i}: the 4th token survived top-k 3: {top}"
        assert torch.allclose(top[:, :3].exp().sum(-1), torch.ones(2), atol=1e-5), "top-k 3 mass is not 1"
        for row, token in enumerate(step.tokens.tolist()):
            place = step.top_ids[row].tolist().index(token)  # a drawn token is among the 3 kept
            assert step.logprobs[row] == top[row, place], (
                f"step {i}: the drawn token's logprob is not its own"
            )


def test_a_chooser_runs_the_sampling_module_it_is_given(model, tmp_path):
    """With sampling=<a learner's passed kata> (a copy of the reference here) the chooser draws through
    that module's sample: the same tokens as the reference's, and its steps are that module's Sampled"""
    import shutil

    from dojo import ROOT, targets

    shutil.copy(ROOT / "solutions" / "sampling.py", tmp_path / "sampling.py")
    yours = targets.load_module(tmp_path / "sampling.py", "learner_sampling")
    chain = yours.make_chain(temperature=0.9, min_p=0.05)
    chooser = Chooser(chain, PROMPTS, greedy=False, seed=4, sampling=yours)
    with torch.inference_mode():
        got = chain_generate(model, PROMPTS, chooser, max_new_tokens=NEW)
    want, _ = run(model, make_chain(temperature=0.9, min_p=0.05), greedy=False, seed=4)
    assert got.tokens == want.tokens
    assert type(chooser.steps[0]) is yours.Sampled, "the chooser did not draw through the given module"


def test_chooser_is_for_its_prompts(model):
    """A chooser built for other prompts (its penalties would read them) or used before is refused"""
    chooser = Chooser(make_chain(), [[1, 2]], greedy=True)
    with pytest.raises(ValueError, match="built for these prompts"):
        chain_generate(model, PROMPTS, chooser, max_new_tokens=2)


def test_choose_each_is_each_chooser_on_its_row():
    """The engine's batched choice (choose_each) gives every chooser the token and Sampled (logprob,
    alternatives) that calling it alone on its row gives, step after step: three plain greedy rows
    (taken in one argmax, tied rows included), and a penalised, a top_logprobs and a seeded sampling
    row beside them (each alone); only the plain ones are batched."""

    def choosers():
        greedy = [Chooser(make_chain(), [[i, 3]], greedy=True) for i in range(3)]
        return greedy + [
            Chooser(make_chain(frequency_penalty=1.5), [[4, 3]], greedy=True),
            Chooser(make_chain(), [[5]], greedy=True, top_logprobs=3),
            Chooser(make_chain(temperature=0.7), [[6]], greedy=False, seed=9),
        ]

    batched, alone = choosers(), choosers()
    assert [c.plain_greedy() for c in batched] == [True, True, True, False, False, False]
    gen = torch.Generator().manual_seed(5)
    for step in range(6):
        rows = list(torch.randn(6, 50, generator=gen) * 3)
        rows[1] = rows[0].clone()
        rows[1][7] = rows[1][8] = rows[1].max() + 1  # a tie: the lower id, as greedy elsewhere
        got = choose_each(batched, rows)
        want = [int(c(row[None])[0]) for c, row in zip(alone, rows)]
        assert got == want, f"step {step}: choose_each picked {got}, each chooser alone {want}"
        for i, (b, a) in enumerate(zip(batched, alone)):
            for field in ("tokens", "logprobs", "top_ids", "top_logprobs"):
                assert torch.equal(getattr(b.steps[-1], field), getattr(a.steps[-1], field)), (
                    f"step {step}, row {i}: its Sampled.{field} differs from the chooser's own call"
                )
            assert b.outputs == a.outputs


def test_describe_chain_names_each_processor_in_order():
    """The demo's chain line: each processor and its settings, in the order they apply"""
    line = describe_chain(make_chain(temperature=0.7, top_p=0.9, min_p=0.1, repetition_penalty=1.2))
    assert (
        line
        == "RepetitionPenalty(penalty=1.2) -> Temperature(temperature=0.7) -> TopP(p=0.9) -> MinP(min_p=0.1)"
    )


def test_token_bytes_decode_as_decode(smollm2_tokenizer):
    """SmolLM2's token bytes, joined, decode to `decode`'s text (special tokens, multi-byte characters)"""
    table = smollm2_tokenizer.token_bytes()
    assert len(table) == smollm2_tokenizer.vocab_size
    for text in ["Hello, world!", "café ☕ 東京", "<|im_start|>user\nHi<|im_end|>"]:
        ids = smollm2_tokenizer.encode(text)
        assert b"".join(table[i] for i in ids).decode() == smollm2_tokenizer.decode(ids) == text


@pytest.mark.slow
def test_penalised_greedy_matches_hf(smollm2, hf_smollm2, smollm2_tokenizer):
    """Greedy with repetition_penalty=1.2 on SmolLM2 fp32: the same 32 tokens as HF generate(repetition_penalty=1.2)"""
    tok = smollm2_tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "List the days of the week."}]))
    got, _ = run(smollm2, make_chain(repetition_penalty=1.2), greedy=True, prompts=[prompt], new=32)
    with torch.no_grad():
        out = hf_smollm2.generate(
            torch.tensor([prompt]),
            max_new_tokens=32,
            do_sample=False,
            repetition_penalty=1.2,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.eos_token_id,
            temperature=None,
            top_p=None,
            top_k=None,
        )
    want = out[0, len(prompt) :].tolist()
    assert got.tokens[0] == want, f"ours {tok.decode(got.tokens[0])!r}\nHF's {tok.decode(want)!r}"
