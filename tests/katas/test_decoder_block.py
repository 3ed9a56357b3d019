"""Hidden suite for the decoder_block kata: RMSNorm, RoPE, grouped-query attention, SwiGLU, a Llama block
and the model that stacks them, loaded from GGUF-named tensors.

The parts are checked alone against plain formulas written here. The block is checked against an oracle
that computes as llama.cpp does, straight on the file's permuted Q/K rows with adjacent pairs rotated as
complex numbers, in float64. The whole model is checked against the reference system's tiny Llama
(solutions.model.tiny_model, random weights), whose weights `export` writes out as a GGUF file holds them.
"""

from __future__ import annotations

import ast
import math

import pytest
import torch

from dojo import seeds
from dojo.testing import banned_uses, expect_raises
from solutions.model import tiny_model

KATA = "decoder_block"
pytestmark = pytest.mark.usefixtures("one_thread")
CONFIG_FIELDS = (
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "max_seq_len",
    "rope_theta",
    "norm_eps",
)
BANNED = {
    "scaled_dot_product_attention",
    "MultiheadAttention",
    "RMSNorm",
    "transformers",
    "solutions",
    "gguf",
    "llama_cpp",
}
BASICS = (  # the parts' own tests: a block or model failure after one of these is explained by it
    "test_example_rms_norm",
    "test_rms_norm_formula",
    "test_rms_norm_in_fp32",
    "test_example_rope",
    "test_rope_pairs",
    "test_rope_angles",
    "test_attention_matches_oracle",
    "test_attention_causal",
    "test_attention_gqa_head_sharing",
    "test_attention_scale",
    "test_example_swiglu",
    "test_swiglu_formula",
)
TOL = 1e-4  # of the reference's spread: fp32 agrees to ~5e-7 of it, a wrong pairing or norm misses by >1e-2


# --------------------------------------------------------------------------- helpers


def randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=seeds.generator(seed))


def spread_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| as a fraction of want's spread (max - min)."""
    want = want.double()
    return float((got.double() - want).abs().max() / (want.max() - want.min()).clamp_min(1e-12))


def close(got, want, tol: float = TOL) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and tuple(got.shape) == tuple(want.shape)
        and bool(torch.isfinite(got).all())
        and spread_diff(got, want) <= tol
    )


def what_came(got, want) -> str:
    if not isinstance(got, torch.Tensor):
        return f"got {type(got).__name__}, want a tensor of shape {tuple(want.shape)}"
    if tuple(got.shape) != tuple(want.shape):
        return f"got shape {tuple(got.shape)}, want {tuple(want.shape)}"
    if not torch.isfinite(got).all():
        return "got inf or NaN"
    return f"max |diff| is {spread_diff(got, want):.1e} of the expected values' spread (allowed {TOL:g})"


def permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute, as written there: a checkpoint's Q or K rows
    (per head: i and i + D/2 rotate together) as the GGUF file stores them (2i and 2i + 1 together)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def export(model) -> dict[str, torch.Tensor]:
    """The reference model's weights under their GGUF names, as the file holds them: (out, in) matrices,
    Q with permute(q, n_heads) and K with permute(k, n_kv_heads), as llama.cpp's converter writes them."""
    c, hd = model.config, model.config.head_dim
    w = {"token_embd.weight": model.embed, "output_norm.weight": model.norm}
    for i, layer in enumerate(model.layers):
        q, k, v = layer.wqkv.split([c.n_heads * hd, c.n_kv_heads * hd, c.n_kv_heads * hd])  # rows q | k | v
        gate, up = layer.w_gate_up.chunk(2)  # rows gate | up
        p = f"blk.{i}."
        w |= {
            p + "attn_norm.weight": layer.attn_norm,
            p + "attn_q.weight": permute(q, c.n_heads),
            p + "attn_k.weight": permute(k, c.n_kv_heads),
            p + "attn_v.weight": v,
            p + "attn_output.weight": layer.wo,
            p + "ffn_norm.weight": layer.ffn_norm,
            p + "ffn_gate.weight": gate,
            p + "ffn_up.weight": up,
            p + "ffn_down.weight": layer.w_down,
        }
    return {name: t.detach().clone().contiguous() for name, t in w.items()}


def reference(seed: int, **overrides):
    """The reference system's tiny Llama (vocab 256, d 64, 2 layers, 4 query / 2 KV heads of 16, d_ff 128)."""
    return tiny_model(seeds.seed(seed) % 2**31, **overrides)


def make_config(kata, model):
    return kata.LlamaConfig(**{f: getattr(model.config, f) for f in CONFIG_FIELDS})


def fresh(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies for the candidate's `load`, so nothing it does to them reaches the oracle's."""
    return {name: t.clone() for name, t in weights.items()}


def candidate_model(kata, model, weights=None):
    m = kata.Llama(make_config(kata, model))
    m.load(fresh(export(model) if weights is None else weights))
    return m


def candidate_block(kata, model, layer=0, weights=None):
    block = kata.DecoderBlock(make_config(kata, model))
    block.load(fresh(export(model) if weights is None else weights), layer)
    return block


def ids_for(model, batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=seeds.generator(seed))


# --------------------------------------------------------------------------- oracles, plainly


def oracle_rms_norm(x, weight, eps):
    x = x.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight.double()


def oracle_rope(x, positions, theta):
    """Each pair (i, i + D/2) as a complex number x_i + 1j * x_{i+D/2}, times e^(1j * pos * theta^(-2i/D))."""
    D = x.shape[-1]
    i = torch.arange(D // 2, dtype=torch.float64)
    angle = positions.double()[:, None] * theta ** (-2 * i / D)  # (T, D/2)
    z = torch.complex(x[..., : D // 2].double(), x[..., D // 2 :].double()) * torch.polar(
        torch.ones_like(angle), angle
    )
    return torch.cat([z.real, z.imag], dim=-1)


def oracle_attention(q, k, v):
    """Causal grouped-query attention, one query head and one position at a time."""
    B, Hq, T, D = q.shape
    group = Hq // k.shape[1]
    out = torch.zeros(B, Hq, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(Hq):
            # query head h reads KV head h // group
            kh, vh = k[b, h // group].double(), v[b, h // group].double()
            for t in range(T):
                scores = kh[: t + 1] @ q[b, h, t].double() / math.sqrt(D)  # keys 0..t
                out[b, h, t] = scores.softmax(-1) @ vh[: t + 1]
    return out


def oracle_swiglu(x, w_gate, w_up, w_down):
    x, g, u, d = (t.double() for t in (x, w_gate, w_up, w_down))
    a = x @ g.T
    return (a * torch.sigmoid(a) * (x @ u.T)) @ d.T


def oracle_block(weights, layer, c, x):
    """A decoder block as llama.cpp computes it: the file's Q/K rows as they are, each adjacent pair
    (2i, 2i + 1) of a head rotated as one complex number, float64 throughout."""
    w = {
        name[len(f"blk.{layer}.") :]: t.double()
        for name, t in weights.items()
        if name.startswith(f"blk.{layer}.")
    }
    B, T, _ = x.shape
    D, x = c.head_dim, x.double()
    h = oracle_rms_norm(x, w["attn_norm.weight"], c.norm_eps)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * c.rope_theta ** (-2 * torch.arange(D // 2) / D)
    turn = torch.polar(torch.ones_like(angle), angle)  # (T, D/2)

    def heads(rows, n, rotate):
        y = (h @ rows.T).view(B, T, n, D).transpose(1, 2)  # (B, n, T, D)
        if rotate:
            y = torch.view_as_real(torch.view_as_complex(y.reshape(B, n, T, D // 2, 2).contiguous()) * turn)
        return y.reshape(B, n, T, D)

    q = heads(w["attn_q.weight"], c.n_heads, True)
    k = heads(w["attn_k.weight"], c.n_kv_heads, True)
    v = heads(w["attn_v.weight"], c.n_kv_heads, False)
    y = oracle_attention(q, k, v).transpose(1, 2).reshape(B, T, c.n_heads * D)
    x = x + y @ w["attn_output.weight"].T
    hf = oracle_rms_norm(x, w["ffn_norm.weight"], c.norm_eps)
    return x + oracle_swiglu(hf, w["ffn_gate.weight"], w["ffn_up.weight"], w["ffn_down.weight"])


# --------------------------------------------------------------------------- README examples


@pytest.mark.example
def test_example_rms_norm(kata):
    """rms_norm divides by sqrt(mean(x^2) + eps), eps inside the root"""
    got = kata.rms_norm(torch.tensor([0.003, 0.004]), torch.ones(2), 1e-5)
    want = torch.tensor([0.003, 0.004]) / math.sqrt(1.25e-5 + 1e-5)  # [0.6325, 0.8433]
    assert isinstance(got, torch.Tensor) and torch.allclose(got, want, atol=1e-4), (
        f"rms_norm([0.003, 0.004], ones, eps=1e-5): got {got}, want [0.6325, 0.8433] "
        "(x / sqrt(mean(x^2) + eps): mean(x^2) = 1.25e-5, so eps matters)"
    )


@pytest.mark.example
def test_example_rope(kata):
    """rope rotates dimension 0 into dimension D/2 (pairs (i, i + D/2)), by angle position * 1 for i = 0"""
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]])  # (1, T=2, D=4)
    got = kata.rope(x, torch.tensor([0, 1]), 10000.0)
    want = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [math.cos(1), 0.0, math.sin(1), 0.0]]])
    assert isinstance(got, torch.Tensor) and torch.allclose(got, want, atol=1e-5), (
        f"rope([1, 0, 0, 0] at positions 0 and 1, theta 10000): got {got.tolist()}, want "
        "[[1, 0, 0, 0], [0.5403, 0, 0.8415, 0]]: dimension 0 pairs with dimension D/2 = 2, and pair 0 "
        "turns by position * theta^0 radians"
    )


@pytest.mark.example
def test_example_swiglu(kata):
    """swiglu is (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T"""
    got = kata.swiglu(
        torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 3.0]]), torch.eye(1)
    )
    want = torch.tensor([[6.0 / (1 + math.exp(-1.0))]])  # silu(1) * 6 = 4.3864
    assert isinstance(got, torch.Tensor) and torch.allclose(got, want, atol=1e-5), (
        f"swiglu(x=[1, 2], gate row [1, 0], up row [0, 3], down [[1]]): got {got}, want 4.3864 = silu(1) * 6 "
        "(silu on the gate, times the up projection)"
    )


# --------------------------------------------------------------------------- RMSNorm


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.builds_on("test_example_rms_norm")
def test_rms_norm_formula(kata, seed):
    """RMSNorm: x / sqrt(mean(x^2) + eps) * weight over the last dimension (no mean subtracted)"""
    g = seeds.rng(10 + seed)
    for trial, scale in enumerate([1e-3, 0.05, 1.0, 30.0]):  # at 1e-3, mean(x^2) ~ 1e-6: eps matters
        d = g.choice([4, 7, 16, 64])
        x = randn(2, 3, d, seed=100 * seed + trial, scale=scale) + scale * g.uniform(-2, 2)  # a nonzero mean
        weight = 1.0 + randn(d, seed=100 * seed + trial + 50, scale=0.5)
        eps = g.choice([1e-5, 1e-4, 1e-2])
        got, want = kata.rms_norm(x, weight, eps), oracle_rms_norm(x, weight, eps)
        assert close(got, want, 1e-5), (
            f"rms_norm of a (2, 3, {d}) input of scale {scale:g} (mean {float(x.mean()):.2g}), a non-uniform "
            f"weight, eps {eps:g}: {what_came(got, want)}. Want x / sqrt(mean(x^2) + eps) * weight: eps inside "
            "the square root, no mean subtracted (that is LayerNorm), the weight applied after normalising"
        )


@pytest.mark.builds_on("test_rms_norm_formula")
def test_rms_norm_in_fp32(kata):
    """RMSNorm computes in fp32 whatever the input dtype, and returns the input's dtype"""
    x = randn(2, 64, seed=20, scale=300.0).half()  # x^2 ~ 9e4 overflows fp16 (max 65504)
    weight = torch.ones(64, dtype=torch.float16)
    got = kata.rms_norm(x, weight, 1e-5)
    want = oracle_rms_norm(x, weight, 1e-5)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float16, (
        f"rms_norm of an fp16 input returned {getattr(got, 'dtype', type(got).__name__)}, want float16"
    )
    assert torch.isfinite(got).all() and torch.allclose(got.double(), want, rtol=2e-3, atol=2e-3), (
        "rms_norm of fp16 values ~300: wrong or not finite. x^2 overflows fp16's range (65504): compute the "
        "mean of squares in fp32 (x.float()), then cast the result back to the input dtype"
    )


# --------------------------------------------------------------------------- RoPE


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_rope")
def test_rope_pairs(kata):
    """RoPE rotates dimension i together with i + D/2 (rotate-half), nothing else"""
    g = seeds.rng(35)
    D, T, theta = g.choice([4, 8, 16]), g.randint(2, 6), g.choice([10.0, 10000.0, 100000.0])
    positions = torch.tensor(sorted(g.sample(range(1, 200), T)))  # no position 0: every pair turns
    for i in range(D):
        x = torch.zeros(1, T, D)
        x[..., i] = g.uniform(0.5, 2.0)
        got = kata.rope(x, positions, theta)
        partner = (i + D // 2) % D
        moved = [j for j in range(D) if j not in (i, partner) and float(got[..., j].abs().max()) > 1e-6]
        assert isinstance(got, torch.Tensor) and not moved, (
            f"rope of a one-hot in dimension {i} of D={D}: it leaked into dimensions {moved}; want only "
            f"dimensions {i} and {partner} (pairs (i, i + D/2), the rotate-half pairing, not (2i, 2i + 1))"
        )


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.builds_on("test_rope_pairs")
def test_rope_angles(kata, seed):
    """RoPE turns pair i at position p by p * theta^(-2i/D) radians, for the given positions and theta"""
    g = seeds.rng(30 + seed)
    for trial in range(3):
        D, T = g.choice([4, 16, 64]), g.randint(1, 9)
        theta = g.choice([10.0, 10000.0, 100000.0])
        positions = torch.tensor(sorted(g.sample(range(200), T)))
        x = randn(2, 3, T, D, seed=300 + 10 * seed + trial)
        got, want = kata.rope(x, positions, theta), oracle_rope(x, positions, theta)
        assert close(got, want, 1e-5), (
            f"rope of (2, 3, {T}, {D}) at positions {positions.tolist()}, theta {theta:g}: {what_came(got, want)}. "
            "Want pair (i, i + D/2) turned by position * theta^(-2i/D): the positions given, the theta given"
        )


@pytest.mark.builds_on("test_rope_angles")
def test_rope_is_relative(kata):
    """RoPE scores are relative: rope(q, m) . rope(k, n) depends only on m - n"""
    q, k = randn(1, 1, 1, 16, seed=40), randn(1, 1, 1, 16, seed=41)
    scores = []
    for m in (3, 10, 57):  # the same offset m - n = 3 at three places
        rq = kata.rope(q, torch.tensor([m]), 10000.0)
        rk = kata.rope(k, torch.tensor([m - 3]), 10000.0)
        scores.append(float((rq * rk).sum()))
    assert max(scores) - min(scores) < 1e-4, (
        f"rope(q, m) . rope(k, m - 3) for m = 3, 10, 57: {scores}; a rotation by position makes them equal"
    )


# --------------------------------------------------------------------------- attention


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_matches_oracle(kata, seed):
    """causal grouped-query attention: softmax(q k^T / sqrt(D)) v over keys 0..t, KV head h // group"""
    g = seeds.rng(50 + seed)
    n_kv = g.choice([1, 2, 3])
    n_q, T, D = n_kv * g.choice([1, 2, 3]), g.randint(1, 7), g.choice([4, 8, 16])
    q = randn(2, n_q, T, D, seed=500 + seed)
    k, v = randn(2, n_kv, T, D, seed=510 + seed), randn(2, n_kv, T, D, seed=520 + seed)
    got, want = kata.attention(q, k, v), oracle_attention(q, k, v)
    assert close(got, want, 1e-5), (
        f"attention with {n_q} query heads, {n_kv} KV heads, T={T}, D={D}: {what_came(got, want)}. Want "
        "softmax(q k^T / sqrt(D)) v, position t seeing keys 0..t, query head h reading KV head h // (Hq/Hkv)"
    )


@pytest.mark.builds_on("test_attention_matches_oracle")
def test_attention_causal(kata):
    """causal masking: position t's output does not change when later keys and values do"""
    q, k, v = randn(1, 2, 6, 8, seed=60), randn(1, 2, 6, 8, seed=61), randn(1, 2, 6, 8, seed=62)
    before = kata.attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3:], v2[:, :, 3:] = randn(1, 2, 3, 8, seed=63), randn(1, 2, 3, 8, seed=64)
    after = kata.attention(q, k2, v2)
    diff = float((before[:, :, :3] - after[:, :, :3]).abs().max())
    assert diff < 1e-6, (
        f"changing the keys and values of positions 3..5 changed the outputs at positions 0..2 by {diff:.2e}: "
        "the causal mask must hide every key after the query's own position"
    )
    assert float((before[:, :, 3:] - after[:, :, 3:]).abs().max()) > 1e-3, (
        "positions 3..5 ignored their own keys and values: the causal mask hides too much (keys 0..t are visible)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_attention_matches_oracle")
def test_attention_gqa_head_sharing(kata):
    """grouped-query attention: query heads h*g .. h*g + g - 1 share KV head h (g = Hq / Hkv)"""
    n_q, n_kv, T, D = 6, 2, 3, 4
    q, k = randn(1, n_q, T, D, seed=70), randn(1, n_kv, T, D, seed=71)
    v = torch.arange(n_kv, dtype=torch.float32).view(1, n_kv, 1, 1).expand(1, n_kv, T, D).contiguous()
    # every value of KV head j is j: a query head's output says which KV head it read
    got = kata.attention(q, k, v)
    used = [round(float(got[0, h].mean())) for h in range(n_q)]
    assert used == [0, 0, 0, 1, 1, 1], (
        f"6 query heads over 2 KV heads: query heads read KV heads {used}, want [0, 0, 0, 1, 1, 1] "
        "(repeat_interleave the KV heads, not repeat: repeat gives [0, 1, 0, 1, 0, 1])"
    )


@pytest.mark.builds_on("test_attention_matches_oracle")
def test_attention_scale(kata):
    """attention scales the scores by 1/sqrt(D), the head size"""
    g = seeds.rng(75)
    D, scaled = g.choice([4, 16, 64]), g.uniform(0.5, 2.0)  # the score key 0 should get, once scaled
    q = torch.zeros(1, 1, 2, D)
    q[..., 1, :] = 1.0  # position 1's query: q . k = D * k_entry
    k = torch.zeros(1, 1, 2, D)
    k[..., 0, :] = scaled / math.sqrt(D)  # q . k0 = sqrt(D) * scaled, scaled = q . k0 / sqrt(D); q . k1 = 0
    v = torch.tensor([1.0, 0.0]).view(1, 1, 2, 1).expand(1, 1, 2, D).contiguous()
    got = float(kata.attention(q, k, v)[0, 0, 1, 0])
    want = math.exp(scaled) / (math.exp(scaled) + 1)  # weights softmax([scaled, 0])
    dot = float((q[0, 0, 1] * k[0, 0, 0]).sum())
    assert abs(got - want) < 1e-4, (
        f"scores q.k = [{dot:.4g}, 0] at D = {D} gave weight {got:.4f} on key 0, want {want:.4f} = "
        f"softmax([{dot:.4g}/sqrt({D}), 0]): scale the scores by 1/sqrt(D)"
    )


# --------------------------------------------------------------------------- SwiGLU


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.builds_on("test_example_swiglu")
def test_swiglu_formula(kata, seed):
    """SwiGLU: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, silu on the gate only"""
    d, ff = 8, 20
    x = randn(2, 3, d, seed=80 + seed)
    wg, wu, wd = randn(ff, d, seed=82 + seed), randn(ff, d, seed=84 + seed), randn(d, ff, seed=86 + seed)
    got, want = kata.swiglu(x, wg, wu, wd), oracle_swiglu(x, wg, wu, wd)
    assert close(got, want, 1e-5), (
        f"swiglu of (2, 3, {d}) with d_ff {ff}: {what_came(got, want)}. Want "
        "(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T: silu on the gate, the up projection linear, "
        "weights (out, in) as the file stores them"
    )


# --------------------------------------------------------------------------- the block


@pytest.mark.points(2)
@pytest.mark.builds_on(*BASICS)
def test_block_residuals(kata):
    """the block's residuals: out = h + mlp(norm(h)) with h = x + attn(norm(x)), both added to the raw x"""
    model = reference(0)
    weights = export(model)
    x = randn(2, 5, 64, seed=90)
    zero = dict(weights)
    zero["blk.0.attn_output.weight"] = torch.zeros_like(weights["blk.0.attn_output.weight"])
    zero["blk.0.ffn_down.weight"] = torch.zeros_like(weights["blk.0.ffn_down.weight"])
    got = candidate_block(kata, model, 0, zero).forward(x)
    assert close(got, x, 1e-6), (
        f"a block whose attn_output and ffn_down are zero must return x unchanged; {what_came(got, x)}. "
        "Each sublayer adds to the residual stream: x + attn(norm(x)), not attn(norm(x)) or norm(x) + attn(...)"
    )
    for name in ("blk.0.attn_output.weight", "blk.0.ffn_down.weight"):  # one sublayer on at a time
        one = dict(zero)
        one[name] = weights[name]
        got = candidate_block(kata, model, 0, one).forward(x)
        want = oracle_block(one, 0, model.config, x)
        part = "attention" if "attn" in name else "MLP"
        assert close(got, want), (
            f"a block with only its {part} on (the other sublayer's output projection zero): {what_came(got, want)}. "
            f"Want x + {part}(rms_norm(x)), the residual added to the block's input"
        )


@pytest.mark.points(3)
@pytest.mark.parametrize(
    "overrides",
    [{}, {"n_heads": 8, "n_kv_heads": 2}, {"n_kv_heads": 1}, {"rope_theta": 500.0, "norm_eps": 1e-2}],
    ids=["smollm2-like", "group-4", "one-kv-head", "theta-500-eps-0.01"],
)
@pytest.mark.builds_on("test_block_residuals", "test_rope_angles", "test_attention_gqa_head_sharing", *BASICS)
def test_block_matches_llama_cpp(kata, overrides):
    """a block loaded from GGUF tensors (Q/K rows permuted) equals llama.cpp's computation on them"""
    model = reference(1, **overrides)
    weights = export(model)
    T = 9
    x = randn(2, T, 64, seed=91)
    got = candidate_block(kata, model, 1, weights).forward(x)
    want = oracle_block(weights, 1, model.config, x)
    if close(got, want):
        return
    c = model.config
    where = f"{c.n_heads} query / {c.n_kv_heads} KV heads, theta {c.rope_theta:g}, eps {c.norm_eps:g}"
    if (
        isinstance(got, torch.Tensor)
        and tuple(got.shape) == tuple(want.shape)
        and close(got[:, :1], want[:, :1])
    ):
        pytest.fail(
            f"block {where}: position 0 agrees, later positions differ ({what_came(got, want)}). RoPE in the block "
            "turns the wrong pairs or by the wrong angles: the file's attn_q / attn_k rows pair (2i, 2i + 1), "
            "so un-permute them (K with n_kv_heads heads) before a rotate-half rope, and take theta from the config",
            pytrace=False,
        )
    pytest.fail(f"block {where} loaded from GGUF tensors: {what_came(got, want)}", pytrace=False)


# --------------------------------------------------------------------------- the model


@pytest.mark.builds_on("test_block_residuals", *BASICS)
def test_final_norm_and_tied_head(kata):
    """with every block the identity, logits are rms_norm(token_embd[ids], output_norm) @ token_embd.T"""
    model = reference(2)
    weights = export(model)
    for i in range(model.config.n_layers):
        for name in ("attn_output", "ffn_down"):
            weights[f"blk.{i}.{name}.weight"] = torch.zeros_like(weights[f"blk.{i}.{name}.weight"])
    ids = ids_for(model, 1, 6, seed=92)
    embed = weights["token_embd.weight"]
    want = (
        oracle_rms_norm(embed[ids], weights["output_norm.weight"], model.config.norm_eps) @ embed.double().T
    )
    got = candidate_model(kata, model, weights).forward(ids)
    assert close(got, want), (
        f"logits of a model whose blocks are all the identity: {what_came(got, want)}. Want the embedding, "
        "then the final RMSNorm (output_norm), then the tied LM head: logits = norm(x) @ token_embd.weight.T"
    )


@pytest.mark.points(4)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.builds_on("test_block_matches_llama_cpp", "test_final_norm_and_tied_head", *BASICS)
def test_logits_match_reference_model(kata, seed):
    """the model loaded from GGUF tensors gives the reference Llama's logits and greedy tokens"""
    model = reference(3 + seed)
    ids = ids_for(model, 2, 24, seed=93 + seed)
    with torch.no_grad():
        want = model(ids)
    got = candidate_model(kata, model).forward(ids)
    assert close(got, want), f"logits of the 2-layer Llama on 2 x 24 tokens: {what_came(got, want)}"
    same = bool((got.argmax(-1) == want.argmax(-1)).all())
    assert same, "greedy tokens (argmax of each position's logits) differ from the reference model's"


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "overrides",
    [
        {"n_layers": 3, "n_heads": 8, "n_kv_heads": 4},
        {"rope_theta": 10000.0, "norm_eps": 1e-3, "n_kv_heads": 4},
    ],
    ids=["3-layers-8-heads", "theta-1e4-mha"],
)
@pytest.mark.builds_on("test_logits_match_reference_model", "test_block_matches_llama_cpp", *BASICS)
def test_logits_follow_the_config(kata, overrides):
    """the model reads its shapes, theta and eps from the config it is given"""
    model = reference(5, **overrides)
    ids = ids_for(model, 1, 16, seed=95)
    with torch.no_grad():
        want = model(ids)
    got = candidate_model(kata, model).forward(ids)
    assert close(got, want), f"logits of a Llama with config overrides {overrides}: {what_came(got, want)}"


# --------------------------------------------------------------------------- loading and rules


@pytest.mark.builds_on("test_logits_match_reference_model", *BASICS)
def test_load_names_missing_or_misshapen_tensors(kata):
    """load raises ValueError naming a tensor that is missing or has the wrong shape"""
    model = reference(6)
    cases = {}
    missing = export(model)
    del missing["blk.1.ffn_up.weight"]
    cases["blk.1.ffn_up.weight"] = ("missing", missing)
    wrong = export(model)
    wrong["blk.0.attn_k.weight"] = wrong["blk.0.attn_q.weight"]  # query rows where key rows belong
    cases["blk.0.attn_k.weight"] = ("of shape (64, 64) where (32, 64) belongs", wrong)
    for name, (how, weights) in cases.items():
        m = kata.Llama(make_config(kata, model))
        err = expect_raises(
            ValueError, lambda m=m, weights=weights: m.load(weights), f"load with {name} {how}"
        )
        assert name in str(err), f"load with {name} {how}: the ValueError should name {name}; message: {err}"


def test_no_library_shortcuts(kata, kata_path):
    """written by hand: no fused attention or norm from torch, no transformers, gguf or solutions imports"""
    kata.rms_norm(randn(2, seed=110), torch.ones(2), 1e-5)  # a working file first: an empty one bans nothing
    found = banned_uses(kata_path, BANNED)
    tree = ast.parse(kata_path.read_text())
    found += [
        f"line {n.lineno}: {n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr == "rms_norm"
    ]
    assert not found, f"{kata_path.name} uses a library shortcut: {', '.join(sorted(set(found)))}"
