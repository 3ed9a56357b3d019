"""What the attention kata's follow-ups say about mask constants, checked with torch's softmax.

A fully masked row filled with -inf gives NaN. A finite large negative (-1e9, finfo.min) gives no NaN
but a uniform softmax, so the query returns the mean of the hidden values: wrong, and silently so.
finfo.min added to an ordinary score stays finite in fp32; two finfo.min masks added together
overflow to -inf, and in fp16 finfo.min plus a score of -16 already does. -1e9 does not fit in fp16:
masked_fill with it raises an overflow error, and a -1e9 tensor cast to fp16 is -inf.
"""

from __future__ import annotations

import pytest
import torch

SCORES = torch.tensor([[1.0, 2.0, 5.0]])  # one query, three keys, all of them hidden
VALUES = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
FP32_MIN = torch.finfo(torch.float32).min


def attend(scores: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) @ VALUES


@pytest.mark.parametrize("how", ["masked_fill", "added"])
@pytest.mark.parametrize("big_negative", [-1e9, FP32_MIN], ids=["-1e9", "finfo.min"])
def test_finite_mask_on_a_fully_masked_row_averages_the_hidden_values(big_negative, how):
    """a finite large negative on every key of a row: uniform weights, output = mean of the hidden values"""
    hidden = torch.ones_like(SCORES, dtype=torch.bool)
    scores = SCORES.masked_fill(hidden, big_negative) if how == "masked_fill" else SCORES + big_negative
    weights = torch.softmax(scores, dim=-1)
    assert torch.isfinite(weights).all(), f"{how} {big_negative}: the weights hold NaN or inf"
    assert torch.allclose(weights, torch.full_like(weights, 1 / 3)), (
        f"{how} {big_negative}: weights {weights} not uniform"
    )
    out = attend(scores)
    assert torch.allclose(out, VALUES.mean(0, keepdim=True)), (
        f"{how} {big_negative}: output {out} is not the values' mean"
    )


def test_minus_inf_on_a_fully_masked_row_gives_nan():
    """-inf on every key of a row: the softmax is 0/0, NaN"""
    out = attend(SCORES.masked_fill(torch.ones_like(SCORES, dtype=torch.bool), float("-inf")))
    assert torch.isnan(out).all(), f"an all -inf row gave {out}, not NaN"


def test_finfo_min_plus_a_score_stays_finite_in_fp32():
    """fp32: finfo.min + an ordinary negative score rounds back to finfo.min (no overflow)"""
    total = torch.tensor(FP32_MIN) + torch.tensor(-10.0)
    assert torch.isfinite(total) and total == FP32_MIN, f"finfo.min - 10 in fp32 gave {total}"


def test_two_finfo_min_masks_overflow_to_minus_inf_in_fp32():
    """fp32: adding two finfo.min masks (say causal and padding) gives -inf"""
    total = torch.tensor(FP32_MIN) + torch.tensor(FP32_MIN)
    assert total == float("-inf"), f"finfo.min + finfo.min in fp32 gave {total}"


def test_finfo_min_plus_a_score_overflows_in_fp16():
    """fp16: finfo.min + a score of -16 is -inf (finfo.min + -8 is not)"""
    low = torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16)
    assert low + torch.tensor(-16.0, dtype=torch.float16) == float("-inf"), (
        "fp16 finfo.min - 16 did not overflow"
    )
    assert torch.isfinite(low + torch.tensor(-8.0, dtype=torch.float16)), "fp16 finfo.min - 8 overflowed"


def test_minus_1e9_does_not_fit_in_fp16():
    """fp16's largest magnitude is 65504: masked_fill of fp16 scores with -1e9 raises an overflow error,
    and a -1e9 tensor cast to fp16 is -inf"""
    scores = SCORES.half()
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(torch.ones_like(scores, dtype=torch.bool), -1e9)
    assert torch.tensor(-1e9).half() == float("-inf"), "-1e9 cast to fp16 is finite"
