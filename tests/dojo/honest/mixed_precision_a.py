"""An independent mixed-precision kata solution, written from the kata's README and stub only: a
false-positive fixture for the similarity measure (tests/dojo/test_similarity.py); it passes the
hidden suite."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LOW_PRECISION = (torch.bfloat16, torch.float16)


class DynamicLossScaler:
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        problems = []
        if not init_scale > 0:
            problems.append(f"init_scale must be > 0 (got {init_scale})")
        if not growth_factor > 1:
            problems.append(f"growth_factor must be > 1 (got {growth_factor})")
        if not 0 < backoff_factor < 1:
            problems.append(f"backoff_factor must lie in (0, 1) (got {backoff_factor})")
        if growth_interval < 1:
            problems.append(f"growth_interval must be >= 1 (got {growth_interval})")
        if problems:
            raise ValueError("; ".join(problems))
        self.scale: float = float(init_scale)
        self.good_steps: int = 0
        self.growth, self.backoff, self.interval = growth_factor, backoff_factor, growth_interval

    def scale_loss(self, loss: Tensor) -> Tensor:
        return loss * self.scale

    def unscale_(self, params: Iterable[nn.Parameter]) -> bool:
        finite = True
        inverse = 1.0 / self.scale
        for p in params:
            if p.grad is None:
                continue
            p.grad.mul_(inverse)
            finite = finite and bool(torch.isfinite(p.grad).all())
        return finite

    def update(self, found_overflow: bool) -> None:
        if found_overflow:
            self.scale = self.scale * self.backoff
            self.good_steps = 0
            return
        self.good_steps = self.good_steps + 1
        if self.good_steps == self.interval:
            self.scale = self.scale * self.growth
            self.good_steps = 0


@dataclass
class StepResult:
    loss: float
    skipped: bool


def train_step(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: DynamicLossScaler | None,
    dtype: torch.dtype,
) -> StepResult:
    if dtype != torch.float32 and dtype not in LOW_PRECISION:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, not {dtype}")
    if dtype == torch.float16 and scaler is None:
        raise ValueError("float16 training needs a loss scaler: small gradients underflow")
    trainable = [p for p in model.parameters() if p.requires_grad]
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("the master weights must be float32")
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    device = trainable[0].device.type if trainable else "cpu"
    with torch.autocast(device, dtype=dtype, enabled=dtype in LOW_PRECISION):
        logits = model(inputs)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
    if scaler is None:
        loss.backward()
        optimizer.step()
        return StepResult(loss=loss.item(), skipped=False)
    scaler.scale_loss(loss).backward()
    ok = scaler.unscale_(trainable)
    if ok:
        optimizer.step()
    scaler.update(found_overflow=not ok)
    return StepResult(loss=loss.item(), skipped=not ok)
