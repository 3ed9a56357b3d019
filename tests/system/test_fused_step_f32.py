"""The fused fp32 decode step (solutions.system.kernels.fused_step.FusedStepF32) against the readable one.

Oracle: the same model with `fused_step = None`, which runs solutions/model.py's per-op path (torch's
BLAS products, norms and attention). No quantization on either side, so they differ only by fp32
summation order: logits agree to ~1e-5 of their spread, and greedy tokens and beam search's
sequences agree exactly. The product alone (`matmul_f32`) is held to F.linear on shapes that do not
divide the kernel's registers or threads evenly. Tiny models cover the contract fast; SmolLM2 checks
the real thing, and tests/system/test_generate_hf.py holds its text to HuggingFace's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_fused_step import read_back  # pytest puts this folder on sys.path

from solutions.generate import generate
from solutions.kv_cache import KVCache
from solutions.model import tiny_model
from solutions.system.kernels import fused_step, streams
from solutions.system.kernels.fused_step import ENV, FusedStepF32

PROMPT = [5, 17, 200, 3, 99, 42, 7]


@pytest.fixture(autouse=True)
def own_streams_file(tmp_path, monkeypatch):
    """Each test measures its weight streams afresh, into its own file (not the build's)."""
    monkeypatch.setattr(streams, "streams_file", lambda: tmp_path / "streams.json")
    monkeypatch.setattr(streams, "_calibrated", {})


def column_major(model):
    """The model with every matrix and the embedding stored column-major, as solutions.system.kernels.calibration
    may lay them out for BLAS (the transpose of a contiguous (K, N))."""
    with torch.no_grad():
        for layer in model.layers:
            for name in ("wqkv", "wo", "w_gate_up", "w_down"):
                w = getattr(layer, name)
                setattr(layer, name, torch.nn.Parameter(w.detach().t().contiguous().t(), requires_grad=False))
        model.embed = torch.nn.Parameter(model.embed.detach().t().contiguous().t(), requires_grad=False)
    return model


def fused_model(layout: str = "row", **config):
    model = tiny_model(3, **config)
    if layout == "col":
        column_major(model)
    model.fused_step = FusedStepF32.for_model(model)
    return model


def steps(model, n: int, fused: bool, rows: int = 1, prompt=PROMPT):
    """Prefill `rows` copies of the prompt (each row's last token moved, so rows differ), then n greedy
    steps: (logits (n, rows, V), tokens (n, rows), cache)."""
    saved = model.fused_step
    model.fused_step = saved if fused else None
    try:
        ids = torch.tensor([prompt] * rows)
        ids[:, -1] = (ids[:, -1] + torch.arange(rows) * 11) % model.config.vocab_size
        cache = model.new_cache(rows, len(prompt) + n)
        token = model.prefill(ids, cache)[:, -1].argmax(-1)
        logits, tokens = [], []
        for _ in range(n):
            out = model.decode_step(token, cache)
            token = out.argmax(-1)
            logits.append(out)
            tokens.append(token.tolist())
        return torch.stack(logits), tokens, cache
    finally:
        model.fused_step = saved


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_fused_step_is_the_readable_step(kernel, layout, rows):
    """Ten greedy steps of `rows` rows: the same tokens, logits within 1e-4 of their spread, the same
    keys and values in every row and layer of the cache, whose length moved on by one a step."""
    model = fused_model(layout)
    assert isinstance(model.fused_step, FusedStepF32), (
        f"an fp32 model ({layout}-major) comes with a fused step"
    )
    fused, tokens, cache = steps(model, 10, fused=True, rows=rows)
    readable, want, cache_want = steps(model, 10, fused=False, rows=rows)
    spread = float(readable.max() - readable.min())
    assert tokens == want, f"fused greedy tokens {tokens} differ from the readable path's {want}"
    err = float((fused - readable).abs().max())
    assert err < 1e-4 * spread, f"fused logits off the readable path's by {err:.3g} (spread {spread:.3g})"
    assert cache.length == cache_want.length == len(PROMPT) + 10
    kv_err = float((cache.storage - cache_want.storage).abs().max())
    assert kv_err < 1e-4 * float(cache_want.storage.abs().max()), f"cached keys/values differ by {kv_err:.3g}"


@pytest.mark.parametrize("layout", ["row", "col"])
def test_product_is_f_linear(kernel, layout):
    """x (M, K) @ W.T for every M the step takes (1-8) and shapes whose K is not a multiple of 8 (the
    register width), whose N leaves a remainder after the kernel's four streams a thread, and rows of
    one; on every instruction set this CPU runs. Within fp32 summation order of F.linear."""
    g = torch.Generator().manual_seed(0)
    for n, k in [(1, 1), (7, 13), (37, 64), (130, 97), (301, 576), (1000, 24)]:
        w = torch.randn(n, k, generator=g)
        w = w.t().contiguous().t() if layout == "col" else w
        for m in range(1, 9):
            x = torch.randn(m, k, generator=g)
            want = F.linear(x, w)
            for isa in kernel.isas:
                got = kernel.module.matmul_f32(x, w, isa)
                err = float((got - want).abs().max())
                assert err < 1e-5 * k**0.5 * float(want.abs().max() + 1), (
                    f"{isa}, {layout}-major ({n}, {k}) with {m} rows: off F.linear by {err:.3g}"
                )


def test_weight_streams_change_no_fp32_result(kernel):
    """The fp32 product's weight streams a thread (1, 2 or 4, measured at load: solutions.system.kernels.streams)
    only order the weight rows: at every row count 1-8, on every instruction set, each choice gives the
    one-stream product bit for bit, row-major and column-major (which ignores it); a bad choice is refused."""
    g = torch.Generator().manual_seed(1)
    before = {rows: kernel.module.streams(rows, True) for rows in range(1, 9)}
    try:
        for w in (torch.randn(301, 96, generator=g), torch.randn(96, 301, generator=g).t()):
            for rows in range(1, 9):
                x = torch.randn(rows, 96, generator=g)
                assert kernel.module.stream_choices(rows, True) == [1, 2, 4]
                for isa in kernel.isas:
                    kernel.module.set_streams(rows, 1, True)
                    one = kernel.module.matmul_f32(x, w, isa)
                    for choice in (2, 4):
                        kernel.module.set_streams(rows, choice, True)
                        assert torch.equal(kernel.module.matmul_f32(x, w, isa), one), (
                            f"{isa}, {rows} rows: {choice} weight streams change the fp32 product"
                        )
        with pytest.raises(RuntimeError, match="the fp32 product over 3 rows reads 1, 2 or 4 streams"):
            kernel.module.set_streams(3, 3, True)
    finally:
        for rows, choice in before.items():
            kernel.module.set_streams(rows, choice, True)


def test_fp32_streams_are_measured_at_load(kernel, monkeypatch):
    """Building the fp32 step times every stream choice at every row count 1-8, keeps the fastest and
    sets it, and saves the timings (read back, not measured, by the next build); describe() names it."""
    monkeypatch.setattr(fused_step, "STREAMS_F32_BUDGET_S", float("inf"))  # the machine may be busy
    step = fused_model().fused_step
    assert {r: set(t) for r, t in step.measured_streams.items()} == {r: {1, 2, 4} for r in range(1, 9)}
    assert step.streams == {r: min(t, key=t.get) for r, t in step.measured_streams.items()}
    assert all(kernel.module.streams(r, True) == p for r, p in step.streams.items()), "the choice was not set"
    assert "weight streams a thread by rows, by calibration: 1:" in step.describe()
    assert read_back(monkeypatch, streams, fused_model).fused_step.measured_streams == step.measured_streams


def test_product_refuses_what_it_cannot_take(kernel):
    """Bad input to the product is a clear error, not a wrong answer."""
    mm = kernel.module.matmul_f32
    w = torch.randn(8, 16)
    with pytest.raises(RuntimeError, match="1..8 rows"):
        mm(torch.randn(9, 16), w, kernel.isa)
    with pytest.raises(RuntimeError, match=r"w must be fp32 \(N, 16\)"):
        mm(torch.randn(2, 16), torch.randn(8, 15), kernel.isa)
    with pytest.raises(RuntimeError, match="row-major or the transpose"):
        mm(torch.randn(2, 16), torch.randn(8, 32)[:, ::2], kernel.isa)
    with pytest.raises(RuntimeError, match="cannot run the sse9 kernel"):
        mm(torch.randn(2, 16), w, "sse9")


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_split_the_step_without_changing_a_bit(kernel, threads):
    """The fused step on `threads` threads gives the one-thread logits bit for bit (each output is one
    thread's sum), at one row and at four."""
    model = fused_model(d_model=96, n_heads=6, n_kv_heads=2, d_ff=200)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [steps(model, 5, fused=True, rows=r)[0] for r in (1, 4)]
        torch.set_num_threads(threads)
        many = [steps(model, 5, fused=True, rows=r)[0] for r in (1, 4)]
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, many):
        assert torch.equal(a, b), f"the fp32 fused step on {threads} threads differs from one thread's"


def test_every_instruction_set_takes_the_same_step(kernel):
    """The step compiled for each instruction set this CPU runs (the AVX2 floor included) gives the
    readable path's tokens; a set the CPU lacks is a clear error."""
    model = fused_model()
    readable, want, _ = steps(model, 6, fused=False, rows=3)
    spread = float(readable.max() - readable.min())
    for isa in kernel.isas:
        model.fused_step = FusedStepF32.for_model(model, isa=isa)
        fused, tokens, _ = steps(model, 6, fused=True, rows=3)
        err = float((fused - readable).abs().max())
        assert tokens == want and err < 1e-4 * spread, (
            f"{isa}: tokens {tokens} vs {want}, logits off by {err:.3g}"
        )
    with pytest.raises(RuntimeError, match="cannot run the sse9 kernel"):
        FusedStepF32.for_model(model, isa="sse9")


def test_generate_takes_the_fused_step_greedy_and_beam(kernel, monkeypatch):
    """generate(), greedy and 4-beam, calls the fused step for its decode steps and returns the
    readable path's sequences and scores."""
    model = fused_model()
    calls = []
    real = model.fused_step

    def counting(ids, cache, mask):
        out = real(ids, cache, mask)
        calls.append((ids.shape[0], out is not None))
        return out

    for kwargs in ({}, dict(strategy="beam", num_beams=4)):
        model.fused_step = counting
        got = generate(model, [PROMPT], max_new_tokens=8, **kwargs)
        model.fused_step = None
        want = generate(model, [PROMPT], max_new_tokens=8, **kwargs)
        rows = kwargs.get("num_beams", 1)
        assert got.tokens == want.tokens, (
            f"{kwargs or 'greedy'}: fused {got.tokens} vs readable {want.tokens}"
        )
        assert got.scores == pytest.approx(want.scores, abs=1e-5)
        assert calls and all(c == (rows, True) for c in calls), (
            f"{kwargs or 'greedy'}: fused step calls {calls}"
        )
        calls.clear()


def test_fused_step_declines_what_it_does_not_take(kernel):
    """More than 8 rows, a padded mask, another cache class, a half-written cache, a token outside the
    vocabulary: the fused step returns None (the readable path then runs, and raises where it should)."""
    model = fused_model()
    step = model.fused_step

    def cache(rows=1):
        c = model.new_cache(rows, 16)
        model.prefill(torch.tensor([PROMPT] * rows), c)
        return c

    assert step(torch.zeros(9, dtype=torch.long), cache(9), None) is None
    assert step(torch.zeros(2, dtype=torch.long), cache(1), None) is None, "a cache of another batch size"
    mask = torch.ones(2, len(PROMPT) + 1, dtype=torch.bool)
    mask[1, 0] = False
    assert step(torch.zeros(2, dtype=torch.long), cache(2), mask) is None
    assert step(torch.tensor([model.config.vocab_size]), cache(), None) is None
    assert step(torch.tensor([[1]]), cache(), None) is None
    half = cache()
    half.update(0, torch.zeros(1, 2, 1, 16), torch.zeros(1, 2, 1, 16))
    assert step(torch.tensor([1]), half, None) is None

    class OtherCache(KVCache):
        pass

    other = OtherCache(2, 1, 2, 16, 16)
    assert step(torch.tensor([1]), other, None) is None
    with pytest.raises(ValueError, match="token ids must lie in"):
        model.decode_step(torch.tensor([model.config.vocab_size]), cache())


@pytest.mark.parametrize("layout", ["row", "col"])
def test_a_few_tokens_prefill_in_one_call_as_the_steps_do(kernel, layout):
    """prefill of 1-8 tokens of one row runs in one native call (speculative decoding's verification)
    and gives, bit for bit, the logits and cache of feeding the tokens one step at a time; against the
    readable path, within fp32 rounding; then decoding goes on from the cache it left."""
    model = fused_model(layout)
    for start in (0, 3):
        for T in (1, 2, 5, 8):
            ids = torch.tensor([PROMPT[:start] + [(7 * i + 1) % 256 for i in range(T)]])
            chunked = model.new_cache(1, 24)
            if start:
                model.prefill(ids[:, :start], chunked)
            assert chunked.length == start
            got = model.prefill(ids[:, start:], chunked)  # (1, T, V)
            assert got.shape == (1, T, model.config.vocab_size) and chunked.length == start + T
            stepped = model.new_cache(1, 24)
            if start:
                model.prefill(ids[:, :start], stepped)
            want = torch.stack([model.decode_step(ids[:, i], stepped)[0] for i in range(start, start + T)])[
                None
            ]
            assert torch.equal(got, want), (
                f"{T} tokens after {start}: the chunk differs from one step at a time"
            )
            assert torch.equal(chunked.storage, stepped.storage)
            saved, model.fused_step = model.fused_step, None
            readable_cache = model.new_cache(1, 24)
            if start:
                model.prefill(ids[:, :start], readable_cache)
            readable = model.prefill(ids[:, start:], readable_cache)
            model.fused_step = saved
            spread = float(readable.max() - readable.min())
            assert float((got - readable).abs().max()) < 1e-4 * spread
            last = model.prefill(torch.tensor([[4]]), chunked, last_only=True)
            assert last.shape == (1, 1, model.config.vocab_size)


def test_prefill_declines_what_it_does_not_take(kernel):
    """More than 8 tokens, two rows, a padded mask, too little room: the readable path runs (and raises
    where it should, naming the problem)."""
    from solutions.kv_cache import CacheFullError

    model = fused_model()
    chunk = model.fused_step.prefill
    ids = torch.tensor([list(range(1, 10))])
    assert chunk(ids, model.new_cache(1, 16), None) is None, "9 tokens"
    assert chunk(torch.tensor([[1, 2], [3, 4]]), model.new_cache(2, 16), None) is None, "two rows"
    mask = torch.tensor([[False, True, True]])
    assert chunk(torch.tensor([[1, 2, 3]]), model.new_cache(1, 16), mask) is None, "padding"
    assert chunk(torch.tensor([[1, 2, 3]]), model.new_cache(1, 2), None) is None, "room for 2"
    assert chunk(torch.tensor([[1, 256]]), model.new_cache(1, 4), None) is None, (
        "a token outside the vocabulary"
    )
    with pytest.raises(CacheFullError):
        model.prefill(torch.tensor([[1, 2, 3]]), model.new_cache(1, 2))
    with pytest.raises(ValueError, match="token ids must lie in"):
        model.prefill(torch.tensor([[1, 256]]), model.new_cache(1, 4))


def test_a_replaced_weight_or_a_copy_never_runs_stale_weights(kernel):
    """The native step points into the tensors the model held when it was built. A weight replaced
    since (assigned anew, or its .data swapped) makes it decline, so the readable path runs on the new
    weight; a write into a weight in place is read as made; a deep copy of the model (new tensors)
    gets no fused step and runs the readable path, alike."""
    import copy

    model = fused_model()
    ids = torch.tensor([3])

    def step(m):
        cache = m.new_cache(1, 16)
        m.prefill(torch.tensor([PROMPT]), cache)
        return m.decode_step(ids, cache)

    def readable(m):
        saved, m.fused_step = m.fused_step, None
        try:
            return step(m)
        finally:
            m.fused_step = saved

    copied = copy.deepcopy(model)
    assert copied.fused_step is None, "a copy's fused step would read the original's weights"
    assert torch.allclose(step(copied), step(model), atol=1e-5)
    with torch.no_grad():
        model.layers[1].wo.mul_(0.5)  # in place: the step reads it
    assert model.fused_step.current()
    assert torch.allclose(step(model), readable(model), atol=1e-5)
    model.layers[0].w_down = torch.nn.Parameter(model.layers[0].w_down.detach() * 2, requires_grad=False)
    assert not model.fused_step.current(), "a replaced weight must make the step decline"
    assert torch.allclose(step(model), readable(model), atol=1e-5)
    model.fused_step = FusedStepF32.for_model(model)
    model.norm.data = model.norm.detach() * 0.9  # .data swapped, as .to() does
    assert not model.fused_step.current()
    assert torch.allclose(step(model), readable(model), atol=1e-5)


def test_switched_off_and_other_models(kernel, monkeypatch):
    """DOJO_FUSED=0 and models the step does not read (an untied head, another attention) get none."""
    monkeypatch.setenv(ENV, "0")
    assert FusedStepF32.for_model(tiny_model(0)) is None
    monkeypatch.delenv(ENV)
    assert FusedStepF32.for_model(tiny_model(0)) is not None
    from solutions.attention import attention

    assert FusedStepF32.for_model(tiny_model(0, attention_fn=attention)) is None
    untied = tiny_model(0)
    untied.lm_head = untied.embed.detach().clone()
    assert FusedStepF32.for_model(untied) is None


def test_smollm2_fused_step_is_the_readable_step(kernel, smollm2, smollm2_tokenizer):
    """SmolLM2 fp32 on a chat prompt: 24 greedy tokens from the fused step are the readable path's,
    every logit within 1e-4 of the spread, and a 4-beam search gives the same beams."""
    tok = smollm2_tokenizer
    assert isinstance(smollm2.fused_step, FusedStepF32), "fp32 SmolLM2 comes with the fused step"
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Name three prime numbers."}]))
    fused, tokens, _ = steps(smollm2, 24, fused=True, prompt=prompt)
    readable, want, _ = steps(smollm2, 24, fused=False, prompt=prompt)
    assert tokens == want, f"fused: {tok.decode(sum(tokens, []))!r}\nreadable: {tok.decode(sum(want, []))!r}"
    spread = float(readable.max() - readable.min())
    err = float((fused - readable).abs().max())
    assert err < 1e-4 * spread, f"fused logits off the readable path's by {err:.3g} (spread {spread:.3g})"
    saved = smollm2.fused_step
    try:
        beams = generate(smollm2, [prompt], max_new_tokens=12, strategy="beam", num_beams=4)
        smollm2.fused_step = None
        want_beams = generate(smollm2, [prompt], max_new_tokens=12, strategy="beam", num_beams=4)
    finally:
        smollm2.fused_step = saved
    assert beams.tokens == want_beams.tokens
    assert beams.scores == pytest.approx(want_beams.scores, abs=1e-4)
