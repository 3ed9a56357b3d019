"""Hidden suite for the mixed_precision kata: autocast train_step, fp32 master weights, a dynamic loss scaler.

The model is the reference tiny Llama (solutions.model.tiny_model); the oracle for one step is
the same step in plain fp32, written here. The model and optimizer that train_step changes are
built where the kata's code runs (dojo.grading.judging.judge.build: in its worker under judge mode), and read
back as data; the oracle is a second model from the same seed, here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dojo import seeds
from dojo.grading.judging.judge import build, named_grads
from dojo.testing import banned_uses
from solutions.model import tiny_model

KATA = "mixed_precision"
pytestmark = pytest.mark.usefixtures("one_thread")


def toy_batch(seed: int = 0, batch: int = 4, length: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token prediction on random ids of the tiny vocabulary (256)."""
    ids = torch.randint(0, 256, (batch, length + 1), generator=seeds.generator(seed))
    return ids[:, :-1], ids[:, 1:]


def fp32_step(model, batch, lr: float) -> None:
    """The oracle: plain fp32 SGD step, no autocast, no scaling."""
    inputs, targets = batch
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def trained_model(seed: int, dtype: torch.dtype | None = None):
    """tiny_model(seed) in training mode, made where the kata's code runs (it changes it in place)."""
    model = build("solutions.model:tiny_model", seed)
    model.train()
    return model if dtype is None else model.to(dtype)


def optimizer_for(model, name: str, **kwargs):
    return build(f"torch.optim:{name}", model.parameters(), **kwargs)


def weights(model) -> list[torch.Tensor]:
    """The model's parameters as plain tensors, in order (read back from wherever the model lives)."""
    return [w.detach() for w in model.state_dict().values()]


def max_update_error(model, oracle, start) -> float:
    """Largest |update - oracle update| relative to the largest oracle update, over all parameters."""
    with torch.no_grad():
        num = max(float((p - q).abs().max()) for p, q in zip(weights(model), weights(oracle)))
        den = max(float((q - s).abs().max()) for q, s in zip(weights(oracle), weights(start)))
    return num / den


def unchanged(model, start) -> bool:
    return all(torch.equal(p, s) for p, s in zip(weights(model), weights(start)))


# ---------------------------------------------------------------- README worked examples


@pytest.mark.example
@pytest.mark.points(2)
def test_example_scaler_policy(kata):
    """Scaler policy: double after growth_interval good steps in a row, halve and reset on overflow."""
    s = kata.DynamicLossScaler(init_scale=8.0, growth_interval=2)
    trace = []
    for overflow in [False, False, False, True, False, False]:
        s.update(found_overflow=overflow)
        trace.append((s.scale, s.good_steps))
    want = [(8.0, 1), (16.0, 0), (16.0, 1), (8.0, 0), (8.0, 1), (16.0, 0)]
    assert trace == want, (
        f"(scale, good_steps) after updates good, good, good, overflow, good, good: got {trace}, want {want}"
    )


@pytest.mark.example
@pytest.mark.candidate_process  # unscale_ divides the caller's own gradient tensors in place
def test_example_scale_and_unscale(kata):
    """scale_loss multiplies by the scale; unscale_ divides gradients in place and reports finiteness."""
    s = kata.DynamicLossScaler(init_scale=1024.0)
    got = s.scale_loss(torch.tensor(0.5))
    assert float(got) == 512.0, f"scale_loss(0.5) at scale 1024: got {float(got)}, want 512.0"
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([2048.0, -1024.0]), None
    assert s.unscale_([a, b]) is True, "unscale_ of finite gradients (and one None) should return True"
    assert a.grad.tolist() == [2.0, -1.0], (
        f"unscale_ at scale 1024 of [2048, -1024]: got {a.grad.tolist()}, want [2.0, -1.0]"
    )
    a.grad = torch.tensor([1.0, float("nan")])
    assert s.unscale_([a]) is False, "unscale_ of a gradient holding NaN should return False"


# ---------------------------------------------------------------- one step against fp32


@pytest.mark.points(3)
@pytest.mark.parametrize("dtype, init_scale", [(torch.bfloat16, None), (torch.float16, 2.0**10)])
@pytest.mark.builds_on("test_example_scale_and_unscale")
def test_one_step_matches_fp32(kata, dtype, init_scale):
    """One autocast step moves the weights as an fp32 step does, within low-precision tolerance."""
    start, oracle, model, batch = tiny_model(0).train(), tiny_model(0).train(), trained_model(0), toy_batch(0)
    scaler = None if init_scale is None else kata.DynamicLossScaler(init_scale=init_scale)
    result = kata.train_step(model, batch, optimizer_for(model, "SGD", lr=0.5), scaler, dtype)
    fp32_step(oracle, batch, lr=0.5)
    assert not result.skipped, (
        f"a {dtype} step at scale {init_scale} was skipped, but its gradients are finite"
    )
    err = max_update_error(model, oracle, start)
    tol = 0.1 if dtype == torch.bfloat16 else 0.02
    assert err < tol, (
        f"{dtype} step differs from the fp32 step by {err:.3g} of the largest update (tolerance {tol})"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_scale_and_unscale")
def test_fp32_gradients_are_unscaled_exactly(kata):
    """With a power-of-two scale, the gradients the optimizer sees equal the unscaled fp32 ones (up to the
    rounding of another summation order in the loss: 1e-6, far below any scale left in)."""
    oracle, model, batch = tiny_model(1).train(), trained_model(1), toy_batch(1)
    kata.train_step(
        model, batch, optimizer_for(model, "SGD", lr=0.0), kata.DynamicLossScaler(2.0**12), torch.float32
    )
    fp32_step(oracle, batch, lr=0.0)
    for (name, grad), q in zip(named_grads(model), oracle.parameters()):
        assert grad is not None and torch.allclose(grad, q.grad, rtol=1e-4, atol=1e-6), (
            f"gradient of {name} after unscaling at scale 4096 differs from the fp32 gradient: "
            f"max |diff| {float((grad - q.grad).abs().max()) if grad is not None else 'no grad'}"
        )


@pytest.mark.points(2)
def test_master_weights_stay_fp32(kata):
    """Parameters and their gradients stay fp32 after bf16 and fp16 steps; autocast makes the copies."""
    for dtype, scaler in [(torch.bfloat16, None), (torch.float16, kata.DynamicLossScaler(2.0**8))]:
        model = trained_model(2)
        kata.train_step(model, toy_batch(2), optimizer_for(model, "Adam", lr=1e-3), scaler, dtype)
        params = dict(model.state_dict())
        bad = [
            (n, params[n].dtype, None if g is None else g.dtype)
            for n, g in named_grads(model)
            if params[n].dtype != torch.float32 or (g is not None and g.dtype != torch.float32)
        ]
        assert not bad, f"after a {dtype} step these parameters (or grads) are not fp32: {bad[:3]}"


# ---------------------------------------------------------------- overflow and growth


@pytest.mark.points(3)
@pytest.mark.builds_on(
    "test_example_scaler_policy",
    "test_example_scale_and_unscale",
    "test_master_weights_stay_fp32",
)
def test_overflowing_step_is_skipped_and_scale_halves(kata, kata_path):
    """An fp16 step whose gradients overflow changes no weight, halves the scale and resets the count."""
    found = banned_uses(
        kata_path, {"GradScaler", "_amp_update_scale_", "_amp_foreach_non_finite_check_and_unscale_"}
    )
    assert not found, (
        f"{kata_path.name} uses torch's own loss scaler; write DynamicLossScaler by hand: {found}"
    )
    start, model = tiny_model(3).train(), trained_model(3)
    optimizer = optimizer_for(model, "SGD", lr=0.1, momentum=0.9)
    scaler = kata.DynamicLossScaler(init_scale=2.0**60, growth_interval=5)  # fp16 tops out at 65504
    scaler.good_steps = 3
    result = kata.train_step(model, toy_batch(3), optimizer, scaler, torch.float16)
    assert result.skipped, "an fp16 step at scale 2**60 overflows, but train_step did not report it skipped"
    assert unchanged(model, start), "an overflowing step changed the weights: the optimizer must not step"
    assert not optimizer.state, (
        "an overflowing step updated the optimizer state (momentum): it must be skipped whole"
    )
    assert scaler.scale == 2.0**59, f"scale after an overflow at 2**60: got {scaler.scale}, want 2**59"
    assert scaler.good_steps == 0, f"good_steps after an overflow: got {scaler.good_steps}, want 0"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_scale_and_unscale", "test_overflowing_step_is_skipped_and_scale_halves")
def test_nan_gradients_are_skipped(kata):
    """A NaN gradient (not only inf) skips the step and halves the scale."""
    start, model = tiny_model(4).train(), trained_model(4)
    state = start.state_dict()
    state["layers.0.w_down"][0, 0] = float("nan")  # in place: start holds the NaN too
    model.load_state_dict(state)
    scaler = kata.DynamicLossScaler(init_scale=4.0)
    result = kata.train_step(model, toy_batch(4), optimizer_for(model, "SGD", lr=0.1), scaler, torch.float32)
    same = all(torch.allclose(p, s, equal_nan=True) for p, s in zip(weights(model), weights(start)))
    assert result.skipped and same, (
        f"a step with NaN gradients: skipped={result.skipped}, weights unchanged={same}"
    )
    assert scaler.scale == 2.0, f"scale after a NaN step at 4.0: got {scaler.scale}, want 2.0"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_scaler_policy", "test_master_weights_stay_fp32")
def test_scale_grows_after_n_good_steps(kata):
    """The scale doubles on exactly the growth_interval-th good train_step, and not before."""
    model = trained_model(5)
    optimizer = optimizer_for(model, "SGD", lr=0.01)
    scaler = kata.DynamicLossScaler(init_scale=2.0**8, growth_interval=3)
    scales = []
    for step in range(4):
        result = kata.train_step(model, toy_batch(10 + step), optimizer, scaler, torch.float16)
        assert not result.skipped, (
            f"step {step} at scale {scales[-1] if scales else 256} was skipped; its gradients are finite"
        )
        scales.append(scaler.scale)
    assert scales == [256.0, 256.0, 512.0, 512.0], (
        f"scale after each of 4 good steps (growth_interval 3): got {scales}, want [256, 256, 512, 512]"
    )


# ---------------------------------------------------------------- training and errors


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.builds_on(
    "test_one_step_matches_fp32",
    "test_master_weights_stay_fp32",
    "test_overflowing_step_is_skipped_and_scale_halves",
)
def test_loss_falls_over_50_steps(kata, dtype):
    """Fifty mixed-precision Adam steps on one batch of a toy task cut the loss by more than half."""
    model, batch = trained_model(6), toy_batch(6, batch=2, length=8)
    optimizer = optimizer_for(model, "Adam", lr=3e-3)
    scaler = (
        kata.DynamicLossScaler(init_scale=2.0**16, growth_interval=10) if dtype == torch.float16 else None
    )
    losses = [kata.train_step(model, batch, optimizer, scaler, dtype).loss for _ in range(50)]
    assert losses[-1] < 0.5 * losses[0], (
        f"{dtype} loss over 50 steps: {losses[0]:.3f} -> {losses[-1]:.3f}, want below half"
    )


def test_bad_arguments_raise(kata):
    """fp16 without a scaler, an unsupported dtype, non-fp32 parameters and a bad scaler raise ValueError."""
    batch = toy_batch(7)
    model = trained_model(7)
    sgd = optimizer_for(model, "SGD", lr=0.1)
    half_model = trained_model(7, torch.bfloat16)
    cases = {
        "fp16 without a scaler": lambda: kata.train_step(model, batch, sgd, None, torch.float16),
        "dtype torch.float64": lambda: kata.train_step(model, batch, sgd, None, torch.float64),
        "bf16 parameters": lambda: kata.train_step(
            half_model, batch, optimizer_for(half_model, "SGD", lr=0.1), None, torch.bfloat16
        ),
        "init_scale 0": lambda: kata.DynamicLossScaler(init_scale=0.0),
        "backoff_factor 2": lambda: kata.DynamicLossScaler(backoff_factor=2.0),
        "growth_interval 0": lambda: kata.DynamicLossScaler(growth_interval=0),
    }
    for label, case in cases.items():
        with pytest.raises(ValueError):
            case()
            pytest.fail(f"{label} did not raise ValueError")
