"""Running one of our own functions on a submission's data in a limited child process.

`call("module:function", kwargs)` runs it in `python -I` with a cap on address space, no core dumps
and a wall-clock timeout; arguments and return value travel as JSON. Whatever the data makes it do
(recurse deeply, allocate gigabytes, take minutes, crash), the caller gets the value or a
BoundedError, in bounded time. `scan(path, slug)` is the integrity scan run that way: a failure is a
finding, not a crash. No sandbox: the function is ours, only its data is the candidate's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dojo

MEMORY_LIMIT = 1 << 30  # bytes of address space: a 1 MiB file of the densest code scans in ~750 MB
TIMEOUT_S = 60.0  # a 1 MiB file scans in under 10 s here
RECURSION_LIMIT = 50_000
STACK_BYTES = 64 << 20  # the worker thread's stack: room for RECURSION_LIMIT frames of C recursion

# Arguments: memory, the folder holding the dojo package, "module:function". Writes {"value": ...} or
# {"error": [type, message]}; anything else on stdout (or nothing) means the child itself failed.
_CHILD = (
    "import importlib, json, resource, sys, threading\n"
    "memory, root, target = int(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "sys.path.insert(0, root)\n"
    f"sys.setrecursionlimit({RECURSION_LIMIT}); threading.stack_size({STACK_BYTES})\n"
    "kwargs, out = json.load(sys.stdin), {}\n"
    "def work():\n"
    "    try:\n"
    "        module, _, name = target.partition(':')\n"
    "        out['value'] = getattr(importlib.import_module(module), name)(**kwargs)\n"
    "    except BaseException as exc:\n"
    "        out['error'] = [type(exc).__name__, str(exc)[:2000]]\n"
    "worker = threading.Thread(target=work); worker.start(); worker.join()\n"
    "json.dump(out, sys.stdout)\n"
)


class BoundedError(RuntimeError):
    """The function did not return: it raised (`kind` is the exception's type name), ran out of memory or
    time, or the child died. The message says which, in words."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def call(function: str, kwargs: dict, *, memory: int = MEMORY_LIMIT, timeout: float = TIMEOUT_S) -> object:
    """`module:function`(**kwargs) in a child limited to `memory` bytes of address space and `timeout`
    seconds; its JSON return value. Raises BoundedError (see there) and TypeError when kwargs are not JSON."""
    root = str(Path(dojo.__file__).resolve().parent.parent)
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD, str(memory), root, function],
            input=json.dumps(kwargs).encode(),
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise BoundedError(f"took longer than {timeout:g} s") from None
    try:
        out = json.loads(done.stdout)
    except ValueError:
        out = None
    if not isinstance(out, dict) or not ({"value", "error"} & out.keys()):
        if done.returncode < 0:
            raise BoundedError(f"the child process died (signal {-done.returncode})")
        last = (
            done.stderr.decode(errors="replace").strip().splitlines() or [f"exit status {done.returncode}"]
        )[-1]
        if "MemoryError" in last:
            raise BoundedError(f"ran out of memory (limit {memory / 2**30:g} GiB)", "MemoryError")
        raise BoundedError(f"the child process failed: {last}")
    if "error" in out:
        kind, message = out["error"]
        if kind == "MemoryError":
            raise BoundedError(f"ran out of memory (limit {memory / 2**30:g} GiB)", kind)
        if kind == "RecursionError":
            raise BoundedError(f"nested too deeply to read ({message})", kind)
        raise BoundedError(f"{kind}: {message}" if message else kind, kind)
    return out["value"]


def scan(path: Path, slug: str) -> list[str]:
    """dojo.grading.scan.integrity.scan(path, slug) in a bounded child. When it cannot finish, one finding says so
    ("bpe.py: the integrity scan could not finish, ..."): the grading goes on, and a person reads the file."""
    try:
        return list(call("dojo.grading.scan.integrity:scan", {"path": str(path), "slug": slug}))
    except BoundedError as exc:
        return [f"{Path(path).name}: the integrity scan could not finish, {exc}: read this file yourself"]
