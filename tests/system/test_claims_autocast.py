"""What katas/mixed_precision/README.md and QUESTIONS.md say torch does, checked on this torch (CPU).

CPU autocast, bf16 and fp16 alike: matmuls (matmul, linear, bmm, scaled_dot_product_attention) return the
low-precision dtype; softmax, log_softmax, sum, mean, layer_norm and rms_norm of a low-precision tensor
return that dtype; the losses (cross_entropy, nll_loss, mse_loss) return fp32; the rest of CPU's fp32
list is ops a transformer does not run (pooling, padding, FFT, linear algebra, prod). AMP with Adam keeps
16 bytes per parameter in fp32. bf16 keeps 8 significant bits (7 stored), fp16 11 (10 stored), and a
bf16 weight loses an update under half its spacing. torch's GradScaler refuses a second unscale_ before
update(), and a scheduler stepped after a skipped first step still advances, with torch's warning.
CUDA autocast's lists (softmax, sums and norms in fp32) need a GPU and are not checked here.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

LOW = [torch.bfloat16, torch.float16]


def autocast_matmul() -> torch.Tensor:
    """A (4, 8) matmul of fp32 inputs: called under autocast, a tensor of autocast's dtype."""
    torch.manual_seed(0)
    return torch.randn(4, 8) @ torch.randn(8, 8)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cpu_autocast_runs_matmuls_in_the_low_precision_dtype(dtype):
    """CPU autocast: matmul, linear, bmm and scaled_dot_product_attention of fp32 inputs return `dtype`"""
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=dtype):
        outs = {
            "matmul": x @ w,
            "linear": F.linear(x, w),
            "bmm": torch.bmm(x[None], w[None]),
            "scaled_dot_product_attention": F.scaled_dot_product_attention(x[None], x[None], x[None]),
        }
    for name, out in outs.items():
        assert out.dtype == dtype, f"CPU autocast {name} of fp32 inputs returned {out.dtype}, not {dtype}"


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cpu_autocast_leaves_softmax_sums_and_norms_in_the_input_dtype(dtype):
    """CPU autocast keeps no softmax, sum or norm in fp32: of a `dtype` tensor they return `dtype`
    (of an fp32 tensor, fp32)"""
    ops = {
        "softmax": lambda a: a.softmax(-1),
        "log_softmax": lambda a: a.log_softmax(-1),
        "sum": torch.sum,
        "mean": torch.mean,
        "layer_norm": lambda a: F.layer_norm(a, (8,)),
        "rms_norm": lambda a: F.rms_norm(a, (8,)),
    }
    with torch.autocast("cpu", dtype=dtype):
        y = autocast_matmul()
        assert y.dtype == dtype, f"the autocast matmul gave {y.dtype}"
        for name, op in ops.items():
            assert op(y).dtype == dtype, (
                f"CPU autocast {name} of a {dtype} tensor returned {op(y).dtype}, not {dtype}"
            )
            assert op(y.float()).dtype == torch.float32, f"CPU autocast {name} of an fp32 tensor is not fp32"


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_cpu_autocast_runs_the_losses_in_fp32(dtype):
    """CPU autocast: cross_entropy, nll_loss and mse_loss of `dtype` logits return fp32"""
    targets = torch.tensor([0, 1, 2, 3])
    with torch.autocast("cpu", dtype=dtype):
        y = autocast_matmul()
        losses = {
            "cross_entropy": F.cross_entropy(y, targets),
            "nll_loss": F.nll_loss(y.log_softmax(-1), targets),
            "mse_loss": F.mse_loss(y, torch.zeros_like(y)),
        }
    for name, loss in losses.items():
        assert loss.dtype == torch.float32, (
            f"CPU autocast {name} of {dtype} logits returned {loss.dtype}, not fp32"
        )


def test_cpu_autocast_fp32_list_beyond_the_losses_is_not_a_transformers_ops():
    """CPU's fp32 list also holds 3-D pooling, padding, FFT, linear algebra and prod: from bf16 they return
    fp32 (complex64 for the FFT)"""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.randn(1, 2, 4, 4, 4).bfloat16()
        outs = {
            "max_pool3d": F.max_pool3d(y, 2),
            "replication pad": F.pad(y[0, 0], (1, 1), mode="replicate"),
            "linalg.inv": torch.linalg.inv(y[0, 0, 0] + 4 * torch.eye(4, dtype=torch.bfloat16)),
            "prod": y.prod(),
        }
        spectrum = torch.fft.rfft(y.flatten())
    for name, out in outs.items():
        assert out.dtype == torch.float32, f"CPU autocast {name} of bf16 returned {out.dtype}, not fp32"
    assert spectrum.dtype == torch.complex64, (
        f"CPU autocast rfft of bf16 returned {spectrum.dtype}, not complex64"
    )


def test_amp_adam_holds_16_bytes_per_parameter():
    """Under autocast the fp32 weights get fp32 gradients and Adam's two moments are fp32: 4 + 4 + 8 bytes"""
    model = torch.nn.Linear(8, 8, bias=False)
    optimizer = torch.optim.Adam(model.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(2, 8))
    assert out.dtype == torch.bfloat16, f"the autocast forward gave {out.dtype}"
    out.float().sum().backward()
    optimizer.step()
    w = model.weight
    state = optimizer.state[w]
    per_param = {
        "weight": w.element_size(),
        "grad": w.grad.element_size(),
        "exp_avg": state["exp_avg"].element_size(),
        "exp_avg_sq": state["exp_avg_sq"].element_size(),
    }
    assert per_param == {"weight": 4, "grad": 4, "exp_avg": 4, "exp_avg_sq": 4}, (
        f"bytes per parameter: {per_param}"
    )


def test_precision_bits_stored_and_significant():
    """fp16 stores 10 mantissa bits (11 significant with the implicit one), bf16 7 (8): eps = 2**-stored"""
    assert torch.finfo(torch.float16).eps == 2.0**-10, "fp16 does not store 10 mantissa bits"
    assert torch.finfo(torch.bfloat16).eps == 2.0**-7, "bf16 does not store 7 mantissa bits"


def test_bf16_weight_loses_an_update_under_half_its_spacing():
    """A bf16 weight w plus an update u rounds back to w whenever u < w/512, and never when u > w/256
    (half of bf16's spacing near w lies between w/512 and w/256)"""
    torch.manual_seed(0)
    w = (torch.rand(2000) * 100 + 1e-3).bfloat16()
    small, large = w.float() * (0.99 / 512), w.float() * (1.01 / 256)
    survived = w[(w.float() + small).bfloat16() != w]
    assert survived.numel() == 0, f"w = {survived[0].item()}: an update just under w/512 survived"
    lost = w[(w.float() + large).bfloat16() == w]
    assert lost.numel() == 0, f"w = {lost[0].item()}: an update just over w/256 rounded away"
    one = torch.tensor(1.0)
    assert (one + one / 256).bfloat16() == 1 and (1.5 + torch.tensor(1.5) / 300).bfloat16() != 1.5, (
        "the spacing-dependent middle: at w = 1, w/256 rounds away; at w = 1.5, w/300 survives"
    )


def test_grad_scaler_refuses_a_second_unscale():
    """torch's GradScaler raises on a second unscale_ of one optimizer before update()"""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    scaler.unscale_(optimizer)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(optimizer)


def test_skipped_first_step_still_advances_the_scheduler_with_a_warning():
    """An overflowing first step is skipped (weights and scale change as the scaler says), yet a scheduler
    stepped after it advances the learning rate, and torch warns that the scheduler stepped first"""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    before = model.weight.detach().clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler.scale(model(torch.ones(1, 2)).sum() * 1e38).backward()  # inf once scaled
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    assert torch.equal(model.weight, before), "the overflowing step changed the weights"
    assert scaler.get_scale() == 2.0**15, f"the scale went to {scaler.get_scale()}, not halved"
    assert optimizer.param_groups[0]["lr"] == 0.5, "the scheduler did not advance after the skipped step"
    assert any("lr_scheduler.step()` before `optimizer.step()" in str(w.message) for w in caught), (
        "no warning that the scheduler stepped before the optimizer"
    )


def cuda_fp32_ops() -> set[str]:
    """The ops CUDA autocast runs in fp32: AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE of the
    installed torch's ATen/autocast_mode.h (the lists autocast_mode.cpp registers for CUDA)."""
    import re
    from pathlib import Path

    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    text = header.read_text()
    ops = set()
    for macro in ("AT_FORALL_FP32", "AT_FORALL_FP32_SET_OPT_DTYPE"):
        body = re.search(rf"#define {macro}\(_\)(.*?)(?:\n\s*\n|\n#)", text, re.S)
        assert body, f"{header} has no {macro} list: the claim's source moved"
        ops |= set(re.findall(r"_\((\w+)", body.group(1)))
    return ops


def test_cuda_autocast_keeps_softmax_sums_norms_and_losses_in_fp32_but_not_every_reduction():
    """mixed_precision's and BANK's answers: on CUDA, softmax, sums, norms and the losses run in fp32;
    mean, max, amax and var are on no fp32 list (they keep the input's dtype)."""
    ops = cuda_fp32_ops()
    fp32 = {
        "softmax",
        "log_softmax",
        "sum",
        "prod",
        "cumsum",
        "layer_norm",
        "rms_norm",
        "nll_loss",
        "mse_loss",
    }
    assert fp32 <= ops, f"not on CUDA autocast's fp32 lists: {sorted(fp32 - ops)}"
    kept = {"mean", "max", "amax", "var"} & ops
    assert not kept, f"on CUDA autocast's fp32 lists after all: {sorted(kept)}"
