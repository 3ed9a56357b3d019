"""Mixed-precision training: autocast matmuls, fp32 master weights, and a dynamic loss scaler (variant A)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DynamicLossScaler:
    """Scales the loss up for backward and the gradients down after; adapts the scale to overflows."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        if not (init_scale > 0) or math.isinf(init_scale):
            raise ValueError(f"init_scale must be a positive finite number, got {init_scale}")
        if not (growth_factor > 1):
            raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
        if not (0 < backoff_factor < 1):
            raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if not (growth_interval >= 1):
            raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.scale: float = float(init_scale)  # current loss scale
        self.good_steps: int = 0  # consecutive finite steps since the last growth or overflow

    def scale_loss(self, loss: Tensor) -> Tensor:
        """The loss times the current scale, to call backward on."""
        return loss * self.scale

    def unscale_(self, params: Iterable[nn.Parameter]) -> bool:
        """Divide every gradient (skip params whose .grad is None) by the scale in place; True when all are finite."""
        all_finite = True
        with torch.no_grad():
            for p in params:
                g = p.grad
                if g is None:
                    continue
                g.div_(self.scale)
                if all_finite and not bool(torch.isfinite(g).all()):
                    all_finite = False
        return all_finite

    def update(self, found_overflow: bool) -> None:
        """Back off after an overflow; grow after `growth_interval` good steps in a row."""
        if found_overflow:
            self.scale *= self.backoff_factor
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0


@dataclass
class StepResult:
    loss: float  # the unscaled loss of this batch
    skipped: bool  # True when the gradients overflowed and the optimizer did not step


_ALLOWED = (torch.float32, torch.bfloat16, torch.float16)


def train_step(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: DynamicLossScaler | None,
    dtype: torch.dtype,
) -> StepResult:
    """One optimizer step on `batch` = (inputs, targets) with the forward pass autocast to `dtype`."""
    if dtype not in _ALLOWED:
        raise ValueError(f"dtype must be one of {_ALLOWED}, got {dtype}")
    if dtype == torch.float16 and scaler is None:
        raise ValueError("fp16 training needs a loss scaler: small gradients underflow in fp16")
    params = list(model.parameters())
    bad = [p.dtype for p in params if p.dtype != torch.float32]
    if bad:
        raise ValueError(f"master weights must be fp32; found parameters of dtype {bad[0]}")
    device_type = params[0].device.type if params else "cpu"

    inputs, targets = batch
    optimizer.zero_grad()

    if dtype == torch.float32:
        logits = model(inputs)
    else:
        with torch.autocast(device_type=device_type, dtype=dtype):
            logits = model(inputs)
    n_classes = logits.shape[-1]
    loss = F.cross_entropy(logits.float().reshape(-1, n_classes), targets.reshape(-1))

    if scaler is None:
        loss.backward()
        optimizer.step()
        return StepResult(loss=loss.item(), skipped=False)

    scaler.scale_loss(loss).backward()
    finite = scaler.unscale_([p for p in model.parameters() if p.requires_grad])
    if finite:
        optimizer.step()
    scaler.update(found_overflow=not finite)
    return StepResult(loss=loss.item(), skipped=not finite)
