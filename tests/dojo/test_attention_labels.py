"""The attention suite's failure message labels the index it shows with one name per dimension
(it printed "(b, h, i, d) = (0, 0, 0)" for the module's 3-dimensional output)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from dojo import ROOT


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location(
        "attention_suite", ROOT / "tests" / "katas" / "test_attention.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("shape", [(2, 5, 16), (1, 2, 3, 4), (6,)])
def test_label_names_every_index(suite, shape):
    """as many names in the label as numbers in the index"""
    with pytest.raises(AssertionError) as failed:
        suite.close(torch.zeros(shape), torch.ones(shape), "demo")
    message = str(failed.value)
    label, index = message.split(" = ")[0].split(" at ")[1], message.split(" = ")[1].split(" got")[0]
    if label != "index":
        assert label.count(",") == index.count(","), message
