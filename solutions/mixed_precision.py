"""Mixed-precision training: autocast matmuls, fp32 master weights, and a dynamic loss scaler.

The forward pass runs under `torch.autocast` (bf16 or fp16 matmuls) while the parameters, their
gradients and the optimizer state stay fp32. fp16's narrow exponent range makes small gradients
underflow, so the loss is scaled up before backward and the gradients down after: a step with an
inf or NaN is skipped and the scale halved, `growth_interval` good steps double it. bf16 needs none.
Not here: gradient clipping, accumulation, fp16 optimizer state, torch.amp.GradScaler's bookkeeping.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AUTOCAST_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # float32 = no autocast


class DynamicLossScaler:
    """Scales the loss up for backward and the gradients down after; adapts the scale to overflows.

    Policy (torch.amp.GradScaler's defaults): start at `init_scale`; on a step whose unscaled
    gradients hold an inf or NaN, multiply the scale by `backoff_factor` and reset the count of
    good steps; after every `growth_interval` consecutive good steps, multiply it by
    `growth_factor` and reset the count. Powers of two keep scaling and unscaling exact.
    Raises ValueError for init_scale <= 0, growth_factor <= 1, backoff_factor outside (0, 1), or
    growth_interval < 1.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        if not (init_scale > 0 and math.isfinite(init_scale)):
            raise ValueError(f"init_scale must be a positive finite number, got {init_scale}")
        if not growth_factor > 1:
            raise ValueError(f"growth_factor must be > 1 (the scale grows), got {growth_factor}")
        if not 0 < backoff_factor < 1:
            raise ValueError(f"backoff_factor must lie in (0, 1) (the scale shrinks), got {backoff_factor}")
        if growth_interval < 1:
            raise ValueError(f"growth_interval must be at least 1 step, got {growth_interval}")
        self.scale = float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.good_steps = 0  # consecutive finite steps since the last growth or overflow

    def scale_loss(self, loss: Tensor) -> Tensor:
        """The loss times the current scale, to call backward on."""
        return loss * self.scale

    def unscale_(self, params: Iterable[nn.Parameter]) -> bool:
        """Divide every gradient by the scale in place; True when all of them are finite."""
        finite = True
        for p in params:
            if p.grad is None:
                continue
            p.grad.div_(self.scale)
            finite = finite and bool(torch.isfinite(p.grad).all())
        return finite

    def update(self, found_overflow: bool) -> None:
        """Back off after an overflow; grow after `growth_interval` good steps in a row."""
        if found_overflow:
            self.scale *= self.backoff_factor
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0


@dataclass
class StepResult:
    loss: float  # the unscaled loss of this batch
    skipped: bool  # True when the gradients overflowed and the optimizer did not step


def train_step(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: DynamicLossScaler | None,
    dtype: torch.dtype,
) -> StepResult:
    """One optimizer step on `batch` = (inputs, targets) with the forward pass autocast to `dtype`.

    `model(inputs)` gives logits (..., C) and targets (...) are class ids; the loss is the mean
    cross-entropy, computed in fp32. dtype float32 runs without autocast. With a scaler the loss is
    scaled for backward, the gradients unscaled, and the step skipped if any is inf or NaN.
    Raises ValueError for a dtype other than float32 / bfloat16 / float16, for fp16 without a
    scaler (its gradients underflow), and for parameters that are not fp32 (the master weights).
    """
    if dtype not in AUTOCAST_DTYPES:
        raise ValueError(f"dtype must be one of {AUTOCAST_DTYPES}, got {dtype}")
    if dtype == torch.float16 and scaler is None:
        raise ValueError(
            "fp16 training needs a DynamicLossScaler: small gradients underflow to zero without one"
        )
    params = [p for p in model.parameters() if p.requires_grad]
    bad = [name for name, p in model.named_parameters() if p.dtype != torch.float32]
    if bad:
        raise ValueError(
            f"master weights must stay fp32 (autocast makes the low-precision copies); not fp32: {bad[:3]}"
        )
    inputs, targets = batch

    optimizer.zero_grad(set_to_none=True)
    device_type = params[0].device.type if params else "cpu"
    with torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
        logits = model(inputs)  # (..., C) in dtype
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))  # fp32

    if scaler is None:
        loss.backward()
        optimizer.step()
        return StepResult(loss.item(), skipped=False)
    scaler.scale_loss(loss).backward()  # gradients land in the fp32 .grad of each master weight
    finite = scaler.unscale_(params)
    if finite:
        optimizer.step()
    scaler.update(found_overflow=not finite)
    return StepResult(loss.item(), skipped=not finite)
