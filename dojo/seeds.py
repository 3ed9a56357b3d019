"""Seeds for a suite's random inputs: the public ones in practice, secret ones in a judged grading.

A suite draws every random input through `generator(n)`, `rng(n)` or `hypothesis_settings(...)`. In practice
these are seeded with `n` itself, so a run is the same every time. In judge mode the grader hands the judge
process a secret (`use_secret`, from the plugin) and every seed becomes a hash of the secret and `n`: the
inputs the candidate is graded on are not the ones the public suite shows. Why: docs/design/grading.md.
"""

from __future__ import annotations

import hashlib
import random

import torch

_secret: int | None = None


def use_secret(secret: int) -> None:
    """Draw every seed from `secret` from now on (the judge process, before the suite is collected)."""
    global _secret
    if isinstance(secret, bool) or not isinstance(secret, int) or secret < 0:
        raise ValueError(f"an input seed is a non-negative integer, not {secret!r}")
    _secret = secret
    try:  # hypothesis's own seed, for tests that do not derandomize (hypothesis_settings below)
        from hypothesis import core
    except ImportError:
        return
    core.global_force_seed = seed(0x48595054)


def secret_in_use() -> bool:
    return _secret is not None


def seed(n: int) -> int:
    """The seed a suite's draw number `n` gets: `n` in practice, a hash of the secret and `n` when judged."""
    if _secret is None:
        return n
    digest = hashlib.blake2b(f"{_secret}:{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # torch takes seeds below 2**63


def generator(n: int = 0) -> torch.Generator:
    """A CPU torch.Generator for draw number `n`."""
    return torch.Generator().manual_seed(seed(n))


def rng(n: int = 0) -> random.Random:
    """A random.Random for draw number `n`."""
    return random.Random(seed(n))


def hypothesis_settings(**kwargs):
    """hypothesis.settings for a suite: derandomized in practice (the same examples every run); when judged,
    drawn from the secret, with no example database (nothing written or read that could carry inputs over)."""
    from hypothesis import settings

    if _secret is None:
        return settings(derandomize=True, **kwargs)
    return settings(derandomize=False, database=None, **kwargs)
