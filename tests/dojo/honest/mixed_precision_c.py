"""Mixed precision, variant B: a hand-written dynamic loss scaler and one autocast training step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch
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
        problems = []
        if init_scale <= 0:
            problems.append(f"init_scale={init_scale} must be > 0")
        if growth_factor <= 1:
            problems.append(f"growth_factor={growth_factor} must be > 1")
        if not 0 < backoff_factor < 1:
            problems.append(f"backoff_factor={backoff_factor} must lie in (0, 1)")
        if growth_interval < 1:
            problems.append(f"growth_interval={growth_interval} must be >= 1")
        if problems:
            raise ValueError("; ".join(problems))
        self._growth = growth_factor
        self._backoff = backoff_factor
        self._interval = growth_interval
        self.scale: float = float(init_scale)
        self.good_steps: int = 0

    def scale_loss(self, loss: Tensor) -> Tensor:
        """The loss times the current scale, to call backward on."""
        return self.scale * loss

    def unscale_(self, params: Iterable[nn.Parameter]) -> bool:
        """Divide every gradient (skip params whose .grad is None) by the scale in place; True when all are finite."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return True
        flags = []
        for g in grads:
            g.detach().div_(self.scale)
            flags.append(torch.isfinite(g).all())
        return bool(torch.stack(flags).all())

    def update(self, found_overflow: bool) -> None:
        """Back off after an overflow; grow after `growth_interval` good steps in a row."""
        if found_overflow:
            self.scale = self.scale * self._backoff
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps == self._interval:
                self.scale = self.scale * self._growth
                self.good_steps = 0


@dataclass
class StepResult:
    loss: float  # the unscaled loss of this batch
    skipped: bool  # True when the gradients overflowed and the optimizer did not step


def _forward_context(model: nn.Module, dtype: torch.dtype):
    if dtype is torch.float32:
        return contextlib.nullcontext()
    device = next(iter(model.parameters()), torch.empty(0)).device.type
    return torch.autocast(device_type=device, dtype=dtype)


def _validate(model: nn.Module, scaler, dtype) -> None:
    if dtype not in {torch.float32, torch.bfloat16, torch.float16}:
        raise ValueError(f"unsupported dtype {dtype}: use torch.float32, torch.bfloat16 or torch.float16")
    if dtype is torch.float16 and scaler is None:
        raise ValueError("float16 without a loss scaler: its gradients underflow")
    for name, p in model.named_parameters():
        if p.dtype is not torch.float32:
            raise ValueError(f"parameter {name} is {p.dtype}; the master weights must be float32")


def train_step(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: DynamicLossScaler | None,
    dtype: torch.dtype,
) -> StepResult:
    """One optimizer step on `batch` = (inputs, targets) with the forward pass autocast to `dtype`."""
    _validate(model, scaler, dtype)
    inputs, targets = batch

    model.zero_grad(set_to_none=True)
    with _forward_context(model, dtype):
        logits = model(inputs)
    # the loss in fp32, outside autocast, over every position flattened into one (N, C) batch
    logits32 = logits.to(torch.float32)
    n_classes = logits32.shape[-1]
    loss = nn.functional.cross_entropy(logits32.reshape(-1, n_classes), targets.reshape(-1), reduction="mean")
    value = float(loss.detach())

    if scaler is None:
        loss.backward()
        optimizer.step()
        return StepResult(loss=value, skipped=False)

    scaler.scale_loss(loss).backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    ok = scaler.unscale_(trainable)
    if ok:
        optimizer.step()
    scaler.update(found_overflow=not ok)
    return StepResult(loss=value, skipped=not ok)
