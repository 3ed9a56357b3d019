"""Steps the optimizer even when the gradients overflowed: one inf step destroys the weights.

Mutant of solutions/mixed_precision.py with that one bug. The reference says:
Mixed-precision training: autocast matmuls, fp32 master weights, and a dynamic loss scaler.

The forward pass runs under `torch.autocast`, which casts matmul inputs to bf16 or fp16 on the fly
while the parameters, their gradients and the optimizer state stay fp32 (the "master weights").
fp16 has a narrow exponent range, so small gradients underflow to zero: the loss is multiplied by
a large scale before backward and the gradients divided by it after. The scale is found
dynamically: a step whose gradients hold an inf or NaN is skipped and the scale halved; after
`growth_interval` good steps in a row it doubles. bf16 has fp32's exponent range and needs none.

Left out: gradient clipping (it would go between unscale_ and the optimizer step), gradient
accumulation, fp16 optimizer state, and per-optimizer scaler bookkeeping (torch.amp.GradScaler).
"""

EDITS = [
    (
        r"""    if finite:
        optimizer.step()""",
        r"""    optimizer.step()""",
    ),
]
