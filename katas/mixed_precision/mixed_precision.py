"""Mixed-precision training: autocast matmuls, fp32 master weights, and a dynamic loss scaler.

Fill in the scaler and `train_step`; the prompt is the contract (`dojo start mixed_precision`
prints it; in a notebook it is the first cell). Write the scaler yourself: torch.amp.GradScaler
(and its private helpers) are not allowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn


class DynamicLossScaler:
    """Scales the loss up for backward and the gradients down after; adapts the scale to overflows.

    Policy: start at `init_scale`; on a step whose unscaled gradients hold an inf or NaN, multiply
    the scale by `backoff_factor` and reset the count of good steps; after every `growth_interval`
    consecutive good steps, multiply it by `growth_factor` and reset the count.
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
        self.scale: float = init_scale  # current loss scale
        self.good_steps: int = 0  # consecutive finite steps since the last growth or overflow
        raise NotImplementedError

    def scale_loss(self, loss: Tensor) -> Tensor:
        """The loss times the current scale, to call backward on."""
        raise NotImplementedError

    def unscale_(self, params: Iterable[nn.Parameter]) -> bool:
        """Divide every gradient (skip params whose .grad is None) by the scale in place; True when all are finite."""
        raise NotImplementedError

    def update(self, found_overflow: bool) -> None:
        """Back off after an overflow; grow after `growth_interval` good steps in a row."""
        raise NotImplementedError


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
    scaler, and for parameters that are not fp32.
    """
    raise NotImplementedError
