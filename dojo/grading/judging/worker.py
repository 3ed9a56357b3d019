"""The judge's worker: the one process where judge mode imports and runs the candidate's module.

`python -m dojo.grading.judging.worker FILE MODULE ALLOWED` (the judge starts it inside the sandbox,
with its end of the connection as standard input) puts a socket filter on itself
(dojo.grading.confine.seccomp) and installs the audit hook, then serves the judge's
requests (dojo.grading.judging.remote) on a `Boot` object: import the candidate's file, build
reference parts by recipe ("solutions.model:tiny_model"), files, gradients, the judge's clock. It
imports nothing of the suite: whatever the candidate's code does here reaches the judge only as data.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import sys
import tempfile
import time

from dojo.grading.judging.protocol import BOOT_ID, recipe_target
from dojo.grading.judging.remote import Endpoint


class Boot:
    """What the judge may ask of the worker before it holds any of the candidate's objects."""

    def __init__(self, path: str, name: str) -> None:
        self.path, self.name, self.module = path, name, None
        self.refused: list[dict] = []  # the audit hook's findings (dojo.grading.confine.audit)

    def findings(self) -> list[dict]:
        """What the audit hook refused the candidate's code so far: {event, file, line, what}."""
        return self.refused

    def load(self):
        """The candidate's module, imported once (an error at import is the judge's to report)."""
        if self.module is None:
            spec = importlib.util.spec_from_file_location(self.name, self.path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {os.path.basename(self.path)}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[self.name] = module
            spec.loader.exec_module(module)
            self.module = module
        return self.module

    def build(self, recipe: str, *args, **kwargs):
        """An object built here for the candidate's code to use: `recipe` is "module:name" (a reference
        part such as "solutions.model:tiny_model", or a library's "torch.optim:SGD"), called with the
        arguments."""
        return recipe_target(recipe)(*args, **kwargs)

    def tmpdir(self) -> str:
        """A fresh folder in the worker's own /tmp, for files the candidate's code reads or writes."""
        return tempfile.mkdtemp(prefix="kata-")

    def read_bytes(self, path: str, limit: int) -> bytes:
        """A file the candidate's code wrote, up to `limit` bytes (ValueError past that)."""
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{os.path.basename(path)} is over {limit} bytes")
        return data

    def write_bytes(self, path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)

    def named_grads(self, model) -> list:
        """(name, gradient) of each of a module's parameters: gradients live where backward ran."""
        return [(name, p.grad) for name, p in model.named_parameters()]

    def use_clock(self, clock) -> int:
        """Make time.perf_counter, and each alias of it in the candidate's module, read `clock` (the
        judge's: every read is a call back); returns how many aliases were found."""
        real = _REAL_CLOCK
        module = self.load()
        aliases = [name for name, value in vars(module).items() if value is real]

        def perf_counter() -> float:
            return float(clock())

        time.perf_counter = perf_counter
        for name in aliases:
            setattr(module, name, perf_counter)
        return len(aliases)

    def real_clock(self) -> None:
        """Put the real time.perf_counter back, in the module and its aliases."""
        module = self.load()
        fake = time.perf_counter
        time.perf_counter = _REAL_CLOCK
        for name, value in list(vars(module).items()):
            if value is fake:
                setattr(module, name, _REAL_CLOCK)


_REAL_CLOCK = time.perf_counter


def serve(sock: socket.socket, path: str, name: str, allowed: list[str] | None = None) -> None:
    """Answer the judge on `sock` until it closes the connection. With `allowed` (the reference modules
    the kata may import), the audit hook watches the candidate's code from before its import."""
    from dojo.grading.confine import seccomp

    seccomp.install()  # sockets of AF_UNIX only, for good; the judge reads whether it holds (peak.untrusted)
    endpoint = Endpoint(sock, "worker", trusted=False)
    endpoint.candidate_file = path
    boot = Boot(path, name)
    if allowed is not None:
        from dojo.grading.confine import audit

        audit.install({path}, boot.refused.append, allowed=allowed)
    endpoint._exports[BOOT_ID], endpoint._export_ids[id(boot)] = boot, BOOT_ID
    endpoint.serve()


def main(argv: list[str]) -> None:
    path, name, allowed = argv
    import torch

    torch.set_num_threads(
        1
    )  # tiny models, one core: steady beside other gradings (as the suites' one_thread)
    sock = socket.socket(fileno=os.dup(0))  # the connection came as standard input
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    serve(sock, path, name, [a for a in allowed.split(",") if a])


if __name__ == "__main__":
    main(sys.argv[1:])
