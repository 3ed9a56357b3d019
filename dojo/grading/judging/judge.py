"""Judge mode, the judge's side: the candidate's module as a proxy onto a worker process.

The suite runs in a process that never imports, runs or unpickles anything of the candidate's.
`kata_module(name)` gives it a `KataModule` whose attribute reads and calls travel to the worker
(started from $DOJO_JUDGE_WORKER) and come back as plain data or proxies (dojo.grading.judging.remote).
`lend` gives the candidate's code a fresh copy of a torch module; `build`, `KataFolder` and
`reading_clock` do in the worker what a suite does in-process, so one suite serves both modes. A
broken worker fails the running test; the next gets a fresh one. The sandbox and limits are the grader's.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from dojo.grading.judging import peak, wire
from dojo.grading.judging.protocol import BOOT_ID, ENV, recipe_target
from dojo.grading.judging.remote import BoundaryError, Endpoint, Proxy


class Worker:
    """The sandboxed worker process and the judge's end of its connection."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.endpoint: Endpoint | None = None
        self.starts = 0
        self.memory: peak.Group | str = "the worker has not booted"  # its cgroup, or why none is trusted

    def start(self) -> None:
        if "fd" in self.spec and not self.starts:  # a worker forked before this process ran (check_katas)
            self.proc = _Forked(self.spec["pid"])
            self.endpoint = Endpoint(socket.socket(fileno=self.spec["fd"]), "judge", trusted=True, lend=lend)
            self.starts += 1
            return
        mine, theirs = socket.socketpair()
        with open(self.spec["output"], "ab") as out:
            self.proc = subprocess.Popen(
                self.spec["cmd"],
                stdin=theirs,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.spec["env"],
                cwd=self.spec["cwd"],
                start_new_session=True,
            )
        theirs.close()
        self.endpoint = Endpoint(mine, "judge", trusted=True, lend=lend)
        self.starts += 1

    def boot(self) -> Proxy:
        if self.endpoint is None or self.endpoint.broken:
            self.stop()
            self.start()
            proxy = Proxy(self.endpoint, wire.Ref("worker", BOOT_ID, "worker"))
            proxy.findings()  # a round trip: it has imported torch and serves; none of the candidate's code ran
            # a cgroup the worker could write (its charge reset, as its clear_refs), or one its socket buffers
            # escape, measures nothing; only check_katas runs the project's own code as root outside the
            # sandbox (spec "project_code")
            why = "" if self.spec.get("project_code") else peak.untrusted(self.proc.pid)
            self.memory = why or peak.adopt(
                self.proc.pid, f"dojo-worker-{os.getpid()}-{self.starts}"
            )  # (peak._sweep)
        return Proxy(self.endpoint, wire.Ref("worker", BOOT_ID, "worker"))

    def why_broken(self) -> str:
        """The endpoint's reason, with how the process ended when it has."""
        why = self.endpoint.broken if self.endpoint else "no worker"
        code = self.proc.poll() if self.proc else None
        if code is None and self.proc is not None and "went away" in (why or ""):
            try:  # it closed the connection as it ended: give its exit a moment to be seen
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if code is not None and self.spec.get("bwrap") and 128 < code < 128 + 65:
            code = -(code - 128)  # bwrap reports a child killed by signal N as 128 + N
        if code is not None and code < 0:
            sig = -code
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
            what = {
                signal.SIGSEGV: "crashed with a segmentation fault",
                signal.SIGBUS: "crashed with a bus error",
                signal.SIGABRT: "aborted",
                signal.SIGKILL: "was killed (SIGKILL), most likely for using too much memory",
            }.get(sig)
            why = f"your code's process {what or f'was killed by {name}'}"
        elif code is not None:
            why = f"your code's process exited with code {code}"
        return why

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        if self.endpoint is not None:
            self.endpoint.sock.close()
        if isinstance(self.memory, peak.Group):
            self.memory.close()
        self.memory = "the worker has stopped"
        self.proc = self.endpoint = None


def lend(obj):
    """What the judge lends the candidate's code for `obj`: a copy of a torch module (the suite's model
    may be its oracle too: load_state_dict, to() or apply() on the copy leave the oracle as it was), the
    object itself otherwise (a fake clock is meant to be shared; it only moves forward)."""
    return copy.deepcopy(obj) if isinstance(obj, torch.nn.Module) else obj


class _Forked:
    """A worker forked by whoever started this process (Popen's poll/wait/pid for it)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if timeout is not None:  # (a forked worker: poll until it ends or the time is up)
            import time

            deadline = time.monotonic() + timeout
            while self.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(str(self.pid), timeout)
                time.sleep(0.02)
            return self.returncode
        try:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            pass
        return self.returncode


_worker: Worker | None = None


def active() -> bool:
    """Whether this process judges (the grader named a worker)."""
    return ENV in os.environ or _worker is not None


def worker() -> Worker:
    global _worker
    if _worker is None:
        spec = json.loads(os.environ.pop(ENV))
        _worker = Worker(spec)
    return _worker


class KataModule:
    """The candidate's module, seen from the judge: every attribute is asked of the worker's copy."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Proxy | None = None
        self._endpoint: Endpoint | None = None

    def _current(self) -> Proxy:
        w = worker()
        if (
            self._module is None
            or w.endpoint is None
            or w.endpoint.broken
            or w.endpoint is not self._endpoint
        ):
            boot = w.boot()
            self._module, self._endpoint = boot.load(), w.endpoint
        return self._module

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._current(), name)

    def __repr__(self) -> str:
        return f"<your module {self._name} (judged from outside its process)>"

    @contextmanager
    def reading_clock(self, clock) -> Iterator[None]:
        """The worker's time.perf_counter (and the module's aliases of it) read `clock`, here, for the block:
        every read is a call back, so the suite's charged costs never leave this process."""
        boot = worker().boot()
        boot.use_clock(clock)
        try:
            yield
        finally:
            if not worker().endpoint.broken:
                boot.real_clock()


def kata_module(name: str) -> KataModule:
    """The candidate's module as the suite sees it in judge mode; raises what its import raised."""
    module = KataModule(name)
    module._current()
    return module


def started() -> bool:
    return _worker is not None and _worker.starts > 0


def audit_findings() -> list:
    """The worker's audit refusals ({event, file, line, what}), or [] when it cannot say (gone, or lying:
    only plain data comes back, and it counts for nothing but a finding)."""
    try:
        found = worker().boot().findings()
    except Exception:  # noqa: BLE001 - a worker that died or lies has no findings to give
        return []
    return found if isinstance(found, list) else []


def is_remote(obj) -> bool:
    return isinstance(obj, (KataModule, Proxy))


def build(recipe: str, *args, **kwargs):
    """An object made where the candidate's code runs, for it to own (a model it trains, an optimizer):
    in the worker under judge mode, here otherwise. `recipe` is "module:name", such as
    "solutions.model:tiny_model" or "torch.optim:SGD"; arguments may be the worker's proxies."""
    if active():
        return worker().boot().build(recipe, *args, **kwargs)
    return recipe_target(recipe)(*args, **kwargs)


def named_grads(model) -> list:
    """[(name, parameter gradient)] of a module, wherever it lives (gradients stay where backward ran)."""
    if is_remote(model):
        return worker().boot().named_grads(model)
    return [(name, p.grad) for name, p in model.named_parameters()]


class KataFolder:
    """A folder the kata's code can read and write: a local one in practice, one in the worker's own
    /tmp under judge mode (the judge's folders are not in the sandbox). The suite reads and writes its
    files only through this."""

    LIMIT = 64 * 2**20  # bytes of one file read back

    def __init__(self, local: Path) -> None:
        self.remote = active()
        self.root = Path(worker().boot().tmpdir()) if self.remote else local

    def path(self, name: str) -> Path:
        """Where the kata's code should find or put `name` (a path in its own process)."""
        return self.root / name

    def write_text(self, name: str, text: str) -> None:
        data = text.encode("utf-8")
        if self.remote:
            worker().boot().write_bytes(str(self.path(name)), data)
        else:
            self.path(name).write_bytes(data)

    def read_bytes(self, name: str) -> bytes:
        """The file's bytes; FileNotFoundError when the kata's code wrote none."""
        if self.remote:
            data = worker().boot().read_bytes(str(self.path(name)), self.LIMIT)
            if type(data) is not bytes:
                raise TypeError("the worker sent no bytes for a file")
            return data
        return self.path(name).read_bytes()


def describe_failure(exc: BaseException) -> str | None:
    """What a failure from the boundary means to a candidate, or None when it is not one."""
    if isinstance(exc, BoundaryError) and _worker is not None:
        return _worker.why_broken()
    return None
