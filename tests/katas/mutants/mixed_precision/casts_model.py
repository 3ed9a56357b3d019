"""Casts the model itself to the low-precision dtype instead of autocasting: the fp32 master weights are gone.

Mutant of solutions/mixed_precision.py for the mixed_precision suite.
"""

EDITS = [
    (
        r"""    with torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
        logits = model(inputs)  # (..., C) in dtype""",
        r"""    model.to(dtype)
    logits = model(inputs)  # (..., C) in dtype""",
    ),
]
