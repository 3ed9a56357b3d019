"""The fused native decode step (solutions.system.kernels.fused_step) against the readable one (solutions/model.py).

Oracle: the same model with `fused_step = None`, which runs model.py's per-op path with the same
Q8_1 products (solutions.system.kernels.q8_1's arithmetic, test_q4_q8_kernel.py). Both quantize every product's
activations bit for bit alike, so they differ only by fp32 summation order (and where that moves
an activation across a rounding boundary, by one int8 step of it): logits agree to a small
fraction of their spread and greedy tokens agree exactly. Tiny models (random weights, Q4_1
matrices, a Q8_0 embedding) cover the contract fast; SmolLM2 itself checks the real thing.
"""

from __future__ import annotations

import json

import gguf
import pytest
import torch

from solutions.generate import generate
from solutions.kv_cache import CacheFullError, KVCache
from solutions.model import project, tiny_model
from solutions.system.kernels import fused_step, streams
from solutions.system.kernels.fused_step import ENV, KV_PREFETCH_ENV, PREFETCH_ENV, FusedStep
from solutions.system.loading.weights import build_model, mode_state, open_gguf, read_config

PROMPT = [5, 17, 200, 3, 99, 42, 7]


@pytest.fixture(autouse=True)
def own_prefetch_file(tmp_path, monkeypatch):
    """Each test measures its prefetch distances afresh, into its own file (not the build's)."""
    monkeypatch.setattr(fused_step, "prefetch_file", lambda: tmp_path / "prefetch.json")
    monkeypatch.setattr(fused_step, "_calibrated", {})
    monkeypatch.setattr(streams, "streams_file", lambda: tmp_path / "streams.json")
    monkeypatch.setattr(streams, "_calibrated", {})


def q8_model(tmp_path, mode: str = "int4-q8x2", **config):
    """A tiny Llama in an int4-q8 mode as the loader builds it, with a Q8_0 embedding (as SmolLM2's)."""
    from test_weights import write_gguf  # pytest puts this folder on sys.path

    path = tmp_path / f"tiny-{mode}.gguf"
    write_gguf(path, tiny_model(3, **config))
    reader = open_gguf(path)
    cfg = read_config(reader)
    state = mode_state(reader, cfg, mode)
    embed = state.pop("embed").numpy()
    state["embed.blocks"] = torch.from_numpy(gguf.quants.quantize(embed, gguf.GGMLQuantizationType.Q8_0))
    return build_model(cfg, state, mode)


def steps(model, n: int, fused: bool, prompt=PROMPT):
    """Prefill, then n greedy decode steps: (logits (n, V), tokens, cache)."""
    saved = model.fused_step
    model.fused_step = saved if fused else None
    try:
        cache = model.new_cache(1, len(prompt) + n)
        token = model.prefill(torch.tensor([prompt]), cache)[:, -1].argmax(-1)
        logits, tokens = [], []
        for _ in range(n):
            out = model.decode_step(token, cache)
            token = out.argmax(-1)
            logits.append(out[0])
            tokens.append(int(token))
        return torch.stack(logits), tokens, cache
    finally:
        model.fused_step = saved


@pytest.mark.parametrize("mode", ["int4-q8x2", "int4-q8"])
def test_fused_step_is_the_readable_step(kernel, tmp_path, mode):
    """Twelve greedy steps: the same tokens, logits within 1% of their spread, and the same keys and
    values left in every layer of the cache, whose length moved on by one a step."""
    model = q8_model(tmp_path, mode)
    assert isinstance(model.fused_step, FusedStep), "the int4-q8 modes come with a fused step"
    fused, tokens, cache = steps(model, 12, fused=True)
    readable, want, cache_want = steps(model, 12, fused=False)
    spread = float(readable.max() - readable.min())
    assert tokens == want, f"fused greedy tokens {tokens} differ from the readable path's {want}"
    err = float((fused - readable).abs().max())
    assert err < 0.01 * spread, f"fused logits off the readable path's by {err:.3g} (spread {spread:.3g})"
    assert cache.length == cache_want.length == len(PROMPT) + 12
    kv_err = float((cache.storage - cache_want.storage).abs().max())
    assert kv_err < 0.01 * float(cache_want.storage.abs().max()), f"cached keys/values differ by {kv_err:.3g}"


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_split_the_step_without_changing_a_bit(kernel, tmp_path, threads):
    """The products and the fused step on `threads` threads (2: this machine's cores; 3: tiles that do
    not divide evenly) give the one-thread results bit for bit: each output row is one thread's.
    (make test runs with one thread per pytest worker, so this is where the split is checked.)"""
    model = q8_model(tmp_path, d_model=128, d_ff=224)  # gate|up: 448 rows, 28 tiles of 16
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(0))
    w = model.layers[0].w_gate_up
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = steps(model, 6, fused=True)[0], project(x, w)
        torch.set_num_threads(threads)
        assert torch.get_num_threads() == threads
        many = steps(model, 6, fused=True)[0], project(x, w)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]), (
        f"the fused step's logits on {threads} threads differ from one thread's"
    )
    assert torch.equal(one[1], many[1]), f"a product on {threads} threads differs from one thread's"


def test_every_instruction_set_takes_the_same_step(kernel, tmp_path):
    """The step compiled for each instruction set this CPU runs (the AVX2 floor included, as a CPU
    without VNNI takes it) gives the readable path's greedy tokens and logits within 1% of their
    spread; a set the CPU lacks is a clear error."""
    model = q8_model(tmp_path)
    readable, want, _ = steps(model, 8, fused=False)
    spread = float(readable.max() - readable.min())
    for isa in kernel.isas:
        model.fused_step = FusedStep.for_model(model, isa=isa)
        fused, tokens, _ = steps(model, 8, fused=True)
        err = float((fused - readable).abs().max())
        assert tokens == want and err < 0.01 * spread, (
            f"{isa}: tokens {tokens} vs {want}, logits off by {err:.3g}"
        )
    with pytest.raises(RuntimeError, match="cannot run the sse9 kernel"):
        FusedStep.for_model(model, isa="sse9")


def test_generate_takes_the_fused_step(kernel, tmp_path):
    """generate() (batch 1, greedy, its all-true mask) runs the fused step and picks the readable
    path's tokens; sampling with a seed repeats them too."""
    model = q8_model(tmp_path)
    calls = 0
    fused = model.fused_step

    def counting(*args):
        nonlocal calls
        out = fused(*args)
        calls += out is not None
        return out

    model.fused_step = counting
    got = generate(model, [PROMPT], max_new_tokens=10)
    model.fused_step = None
    want = generate(model, [PROMPT], max_new_tokens=10)
    assert calls >= 9, f"the fused step ran {calls} times in 10 new tokens"
    assert got.tokens == want.tokens


def test_fused_step_declines_what_it_does_not_take(kernel, tmp_path):
    """Two rows, a padded row, a cache of another class, a full cache or the end of the context go
    to the readable path, which raises what it raises for bad input."""
    model = q8_model(tmp_path)
    step = model.fused_step
    two = model.new_cache(2, 16)
    model.prefill(torch.tensor([PROMPT[:3], PROMPT[3:6]]), two)
    assert step(torch.tensor([1, 2]), two, None) is None
    one = model.new_cache(1, 8)
    model.prefill(torch.tensor([PROMPT[:3]]), one)
    assert step(torch.tensor([1]), one, torch.tensor([[False, True, True, True]])) is None
    assert step(torch.tensor([1]), one, torch.ones(1, 4, dtype=torch.bool)) is not None

    class OtherCache(KVCache):
        pass

    other = OtherCache(model.config.n_layers, 1, model.config.n_kv_heads, model.config.head_dim, 8)
    assert step(torch.tensor([1]), other, None) is None
    full = model.new_cache(1, len(PROMPT))
    model.prefill(torch.tensor([PROMPT]), full)
    assert step(torch.tensor([1]), full, None) is None
    with pytest.raises(CacheFullError):
        model.decode_step(torch.tensor([1]), full)
    assert step(torch.tensor([model.config.vocab_size]), one, None) is None
    with pytest.raises(ValueError, match="token ids"):
        model.decode_step(torch.tensor([model.config.vocab_size]), one)
    assert one.length == 4, "a declined step must leave the cache as it was"


def test_switches_and_prefetch_calibration(kernel, tmp_path, monkeypatch):
    """DOJO_FUSED=0 builds no fused step; the prefetch distances (weights; paged keys and values) are
    measured at load (each candidate timed) unless DOJO_PREFETCH and DOJO_KV_PREFETCH fix them, and a
    bad one is a clear error; the weights' distance does not change a logit (test_paged_step.py
    checks the other's)."""
    monkeypatch.setenv(ENV, "0")
    assert q8_model(tmp_path).fused_step is None
    monkeypatch.delenv(ENV)
    model = q8_model(tmp_path)
    assert (
        set(model.fused_step.prefetch) == {0, 4, 8, 16, 32, 64} and "measured" in model.fused_step.describe()
    )
    assert set(model.fused_step.kv_prefetch) == set(fused_step.KV_PREFETCH_CANDIDATES)
    before, kv_before = kernel.module.prefetch(), kernel.module.kv_prefetch()
    try:
        monkeypatch.setenv(PREFETCH_ENV, "0")
        at0 = steps(q8_model(tmp_path), 4, fused=True)[0]
        monkeypatch.setenv(PREFETCH_ENV, "64")
        monkeypatch.setenv(KV_PREFETCH_ENV, "5")
        fixed = q8_model(tmp_path)
        assert fixed.fused_step.distance == 64 and PREFETCH_ENV in fixed.fused_step.describe()
        assert fixed.fused_step.kv_distance == 5 and KV_PREFETCH_ENV in fixed.fused_step.describe()
        assert torch.equal(steps(fixed, 4, fused=True)[0], at0) and kernel.module.prefetch() == 64
        for env, name in ((PREFETCH_ENV, "DOJO_PREFETCH"), (KV_PREFETCH_ENV, "DOJO_KV_PREFETCH")):
            monkeypatch.setenv(env, "far")
            with pytest.raises(ValueError, match=f"{name}='far' is not a prefetch distance"):
                q8_model(tmp_path)
            monkeypatch.setenv(env, "0")
    finally:
        kernel.module.set_prefetch(before)
        kernel.module.set_kv_prefetch(kv_before)


def read_back(monkeypatch, calibration, build):
    """What `build()` gives as a later process would: `calibration`'s (fused_step's or streams') memory of
    this process cleared and its measuring refused, so its figures must come from the saved file."""
    monkeypatch.setattr(calibration, "_calibrated", {})

    def no_measuring(*args):
        raise AssertionError(
            f"{calibration.__name__} measured again although this machine's figures are saved"
        )

    with monkeypatch.context() as m:
        m.setattr(calibration, "_measure", no_measuring)
        return build()


def test_prefetch_calibration_is_measured_once_per_machine(kernel, tmp_path, monkeypatch):
    """The first load measures every candidate distance and saves them; a later process (this one's
    memory cleared) reads the file instead of measuring; a damaged file is measured again and
    rewritten; a different model shape is measured apart; a measurement cut short by the time
    budget (a busy machine) is used but not saved."""
    monkeypatch.setattr(fused_step, "BUDGET_S", float("inf"))  # this test's machine may be busy itself
    step = q8_model(tmp_path).fused_step
    first, kv_first = step.prefetch, step.kv_prefetch
    saved = fused_step.prefetch_file().read_text()
    assert set(first) == set(fused_step.PREFETCH_CANDIDATES) and all(t > 0 for t in first.values())
    assert set(kv_first) == set(fused_step.KV_PREFETCH_CANDIDATES) and all(t > 0 for t in kv_first.values())
    again = read_back(monkeypatch, fused_step, lambda: q8_model(tmp_path))
    assert again.fused_step.prefetch == first and again.fused_step.kv_prefetch == kv_first
    fused_step.prefetch_file().write_text("{not json")
    monkeypatch.setattr(fused_step, "_calibrated", {})
    assert set(q8_model(tmp_path).fused_step.prefetch) == set(fused_step.PREFETCH_CANDIDATES)
    assert fused_step.prefetch_file().read_text() != "{not json"
    short = q8_model(tmp_path, d_ff=192, max_seq_len=40)  # a context shorter than the KV_POSITIONS timed
    assert set(short.fused_step.kv_prefetch) == set(fused_step.KV_PREFETCH_CANDIDATES)
    assert len(json.loads(fused_step.prefetch_file().read_text())) == 4 and saved  # 2 shapes x 2 distances
    monkeypatch.setattr(fused_step, "BUDGET_S", 0.0)  # as on a machine too busy for three rounds
    q8_model(tmp_path, d_ff=256)
    assert len(json.loads(fused_step.prefetch_file().read_text())) == 4, "a rushed measurement was saved"


def test_stream_calibration_is_measured_once_per_machine(kernel, tmp_path, monkeypatch):
    """The first load times every weight-stream choice at each row count that has one (1-4 rows) and
    sets the fastest; a later process reads the saved file instead; a damaged file is measured
    again; a measurement cut short by the budget is used but not saved; describe() names the choice."""
    monkeypatch.setattr(streams, "BUDGET_S", float("inf"))  # this test's machine may be busy itself
    step = q8_model(tmp_path).fused_step
    first = step.measured_streams
    assert {r: set(t) for r, t in first.items()} == {
        r: set(kernel.module.stream_choices(r)) for r in (1, 2, 3, 4)
    }, f"the calibration measured {first}"
    assert all(t > 0 for by in first.values() for t in by.values())
    assert step.streams == {r: min(t, key=t.get) for r, t in first.items()}, "not the fastest choice kept"
    assert all(kernel.module.streams(r) == p for r, p in step.streams.items()), "the choice was not set"
    assert "weight streams a thread by rows, by calibration: 1:" in step.describe()
    assert read_back(monkeypatch, streams, lambda: q8_model(tmp_path)).fused_step.measured_streams == first
    streams.streams_file().write_text('{"not": "a choice"}')
    monkeypatch.setattr(streams, "_calibrated", {})
    assert set(q8_model(tmp_path).fused_step.measured_streams) == {1, 2, 3, 4}
    assert len(json.loads(streams.streams_file().read_text())) == 2  # the damaged key stays, unread
    monkeypatch.setattr(streams, "BUDGET_S", 0.0)  # as on a machine too busy for three rounds
    q8_model(tmp_path, d_ff=256)
    assert len(json.loads(streams.streams_file().read_text())) == 2, "a rushed measurement was saved"


def test_kv_cache_advance_is_checked():
    """KVCache.advance (for a caller that wrote `storage` itself) refuses a half-written pass and
    running past max_len, and moves every layer's length."""
    cache = KVCache(2, 1, 1, 4, 3)
    cache.advance(2)
    assert cache.length == 2
    with pytest.raises(CacheFullError):
        cache.advance(2)
    cache.update(0, torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))
    with pytest.raises(ValueError, match="half written"):
        cache.advance(1)
    with pytest.raises(ValueError, match="count"):
        KVCache(1, 1, 1, 4, 3).advance(-1)


def test_smollm2_fused_step_is_the_readable_step(kernel, smollm2_mode, smollm2_tokenizer):
    """SmolLM2 in int4-q8x2 on a chat prompt: 24 greedy tokens from the fused step are the readable
    path's, and every logit is within 1% of the readable path's spread."""
    tok, smollm2_q8x2 = smollm2_tokenizer, smollm2_mode("int4-q8x2")
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Name three prime numbers."}]))
    fused, tokens, _ = steps(smollm2_q8x2, 24, fused=True, prompt=prompt)
    readable, want, _ = steps(smollm2_q8x2, 24, fused=False, prompt=prompt)
    assert tokens == want, f"fused: {tok.decode(tokens)!r}\nreadable: {tok.decode(want)!r}"
    spread = float(readable.max() - readable.min())
    err = float((fused - readable).abs().max())
    assert err < 0.01 * spread, f"fused logits off the readable path's by {err:.3g} (spread {spread:.3g})"
