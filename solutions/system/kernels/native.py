"""The one compiled piece: the Q4_1 x Q8_1 kernel and the fused decode steps of csrc/, built at setup.

`make setup` runs `python -m solutions.system.kernels.native`, which compiles the sources into
build/native/ under a name that hashes them, so a run only loads the build of exactly its sources.
`kernel()` imports it and picks the fastest instruction set this CPU runs (DOJO_Q8_ISA names
another). Where none can run here, `kernel()` is None and `why_not()` says why (no build, no AVX2,
...); callers then take the readable path, solutions.system.kernels.q8_1. Not here: run-time builds, wheels.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = [CSRC / "q4_1_q8_1.cpp", *sorted(CSRC.glob("*.h"))]  # the one translation unit first
BUILD_DIR = ROOT / "build" / "native"
ISA_ENV = "DOJO_Q8_ISA"
# torch picks the C++ standard. -fopenmp: at::parallel_for is inline OpenMP, serial without it (the module
# then shares torch's own libgomp.so.1, loaded first). -ffp-contract=off: no multiply-add is fused
# unless the source says so, so the quantizers round as solutions/system/kernels/q8_1.py does. GCC 12 warns "may be
# used uninitialized" inside its own AVX-512 headers.
FUSED_ENV = "DOJO_FUSED"  # "0": never take a fused step (solutions.system.kernels.fused_step)
COMPILE_FLAGS = ["-O3", "-fopenmp", "-ffp-contract=off", "-Wno-maybe-uninitialized"]


@dataclass(frozen=True)
class Kernel:
    """The loaded extension and the instruction set its products run on."""

    module: object
    isa: str
    isas: tuple[str, ...]  # every set this CPU runs, fastest first

    def matmul(self, x, tiles, n: int, isa: str | None = None, residual: bool = False):
        """x (M, K) fp32 @ W.T for W (n, K) as Q4_1 tiles (solutions.system.kernels.q8_1.repack): (M, n) fp32, x
        quantized to Q8_1 (with `residual`, plus the second int8 pass: solutions.system.kernels.q8_1). Raises
        RuntimeError for bad shapes or dtypes, or an instruction set this CPU lacks."""
        return self.module.matmul(x, tiles, n, isa or self.isa, residual)


def module_name() -> str:
    """The extension's module name: a hash of its sources and flags, so each edit is a new build."""
    digest = hashlib.blake2b(
        b"".join(p.read_bytes() for p in SOURCES) + " ".join(COMPILE_FLAGS).encode(), digest_size=6
    ).hexdigest()
    return f"dojo_q4_1_q8_1_{digest}"


def built_path() -> Path | None:
    """The compiled module for the current sources, or None when it has not been built."""
    name = module_name()
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (path := BUILD_DIR / f"{name}{suffix}").is_file():
            return path
    return None


@cache
def _load() -> tuple[Kernel | None, str]:
    if os.uname().machine not in ("x86_64", "AMD64"):
        return None, f"the kernel is written for x86-64; this is {os.uname().machine}"
    path = built_path()
    if path is None:
        stale = sorted(BUILD_DIR.glob("dojo_q4_1_q8_1_*")) if BUILD_DIR.is_dir() else []
        return None, (
            "the build is of other sources: `make setup` (or `python -m solutions.system.kernels.native`) rebuilds it"
            if stale
            else "it is not built: `make setup` (or `python -m solutions.system.kernels.native`) builds it"
        )
    import torch  # noqa: F401  (the module links against libtorch, which importing torch loads)

    try:
        spec = importlib.util.spec_from_file_location(module_name(), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as exc:
        return None, f"its build {path.name} does not load: {exc}"
    isas = tuple(module.isas())
    if not isas:
        return None, "this CPU lacks AVX2 and FMA, the kernel's floor"
    forced = os.environ.get(ISA_ENV)
    if forced and forced not in isas:
        return None, f"{ISA_ENV}={forced} but this CPU runs only {', '.join(isas)}"
    return Kernel(module, forced or isas[0], isas), ""


def kernel() -> Kernel | None:
    """The kernel on this machine's best instruction set (or DOJO_Q8_ISA's), or None: see why_not()."""
    return _load()[0]


def fused_enabled() -> bool:
    """Whether decode steps may run fused here (solutions.system.kernels.fused_step): the kernel is built and runs on
    this CPU, and DOJO_FUSED is not "0" (the readable path only, for comparing the two)."""
    return kernel() is not None and os.environ.get(FUSED_ENV) != "0"


def why_not() -> str:
    """Why kernel() is None, in a sentence; "" when it is not."""
    return _load()[1]


def describe() -> str:
    """Which path Q4_1 x Q8_1 products take here, and why, in a few words."""
    k = kernel()
    if k is None:
        return f"the readable torch path (solutions.system.kernels.q8_1), because {why_not()}"
    return f"the compiled kernel on {k.isa}" + (f" (forced by {ISA_ENV})" if os.environ.get(ISA_ENV) else "")


def build() -> Path:
    """Compile the sources into BUILD_DIR (removing builds of older sources); the module's path.
    Raises what the compiler's failure raises (setuptools' CompileError, SystemExit from setup)."""
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    name = module_name()
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    for old in BUILD_DIR.glob("dojo_q4_1_q8_1_*"):
        old.unlink()
    ext = CppExtension(
        name, [str(SOURCES[0])], extra_compile_args=COMPILE_FLAGS, extra_link_args=["-fopenmp"]
    )
    cwd = os.getcwd()
    try:
        os.chdir(BUILD_DIR)  # away from the repository's pyproject.toml, which setuptools would read
        setup(
            name=name,
            ext_modules=[ext],
            cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
            script_args=[
                "-q",
                "build_ext",
                "--build-lib",
                str(BUILD_DIR),
                "--build-temp",
                str(BUILD_DIR / "tmp"),
            ],
        )
    finally:
        os.chdir(cwd)
    path = built_path()
    if path is None:
        raise RuntimeError(f"the build finished but left no {name} module in {BUILD_DIR}")
    return path


def main() -> int:
    """`python -m solutions.system.kernels.native`: build the kernel and say what this machine will run."""
    print(f"building {SOURCES[0].name} into {BUILD_DIR} (a minute with one compiler)...", flush=True)
    path = build()
    _load.cache_clear()
    print(f"built {path.name}; Q4_1 x Q8_1 products here run {describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
