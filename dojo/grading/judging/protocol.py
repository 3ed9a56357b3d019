"""What the judge and its worker both know, owned by neither: the boot reference, the worker's
environment variable, and how a recipe names a callable."""

from __future__ import annotations

import importlib

BOOT_ID = 0  # the Boot object's reference number, known to both sides
ENV = "DOJO_JUDGE_WORKER"  # JSON: {"cmd": [...], "env": {...}, "cwd": "...", "output": "..."}


def recipe_target(recipe: str):
    """The callable a recipe "package.module:name" names; ValueError for anything else."""
    module_name, _, attr = recipe.partition(":")
    if not module_name or not all(
        part.isidentifier() for part in [*module_name.split("."), *attr.split(".")]
    ):
        raise ValueError(f"not a recipe (want 'module:name'): {recipe!r}")
    target = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target
