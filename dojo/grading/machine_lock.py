"""The machine lock service: the grader holds the timing lock for a child's timing test, and freezes
every other grading of its process while that test measures.

A grading child gets a socket (DOJO_MACHINE_LOCK, read and dropped by the plugin before candidate
code is imported). Its plugin asks "acquire"; the parent (`Grading`) queues it behind this process's
other gradings, takes the machine-wide flock, freezes the others (dojo.grading.freezer) and answers
"granted", or "busy <why>" (the test is then inconclusive). A hold ends on "release", on the parent's
timer or when the child goes. Practice runs take the flock in the test process (dojo.testing).
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from dojo import testing, timing_lock_path
from dojo.grading import freezer

ENV = "DOJO_MACHINE_LOCK"
HOLD_SLACK_S = 10.0  # beyond twice the per-test limit: the teardown and the messages' way


class _Arbiter:
    """This process's gradings, the queue for the lock and who holds it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._gradings: set[Grading] = set()
        self._queue: deque[Grading] = deque()
        self._holder: Grading | None = None
        self._fd: int | None = None

    def register(self, grading: Grading) -> None:
        with self._cond:
            self._gradings.add(grading)
            if self._holder is not None:  # started while another measures: it waits, frozen
                grading.freeze()

    def unregister(self, grading: Grading) -> None:
        self.release(grading)
        with self._cond:
            self._gradings.discard(grading)
            grading.thaw()
            self._cond.notify_all()

    def acquire(self, grading: Grading, wait_s: float) -> str | None:
        """Hold the lock for `grading`: None, or why not within `wait_s` seconds."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._queue.append(grading)
            try:
                while self._holder is not None or self._queue[0] is not grading:
                    if time.monotonic() >= deadline or grading.closed:
                        return f"another grading's timing test held the machine for over {wait_s:g} s"
                    self._cond.wait(0.5)
                try:
                    fd = testing.open_lock(timing_lock_path())
                except testing.LockFileError as exc:
                    return str(exc)
                while not _flock(fd):  # another process's timing test
                    if time.monotonic() >= deadline or grading.closed:
                        os.close(fd)
                        return f"another timing test held the machine ({timing_lock_path()}) for over {wait_s:g} s"
                    self._cond.wait(0.05)
                self._fd, self._holder = fd, grading
                for other in self._gradings - {grading}:
                    other.freeze()
                return None
            finally:
                self._queue.remove(grading)
                self._cond.notify_all()

    def release(self, grading: Grading) -> None:
        with self._cond:
            if self._holder is not grading:
                return
            for other in self._gradings - {grading}:
                other.thaw()
            os.close(self._fd)  # closing drops the flock
            self._fd, self._holder = None, None
            self._cond.notify_all()


def _flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


ARBITER = _Arbiter()


class Grading:
    """The parent's side for one grading child: `prefix`, `env` and `pass_fds` for its launch, then
    `started(proc)`, `wait(proc, timeout)`, and `close()` (or use it as a context manager).

    hold_s: the child's per-test limit; a hold ends by itself after 2 x hold_s + HOLD_SLACK_S.
    limits: cgroup v2 controller values for the child's group, where offered (dojo.grading.freezer)."""

    def __init__(self, hold_s: float, limits: dict[str, str] | None = None) -> None:
        self.hold_s, self.closed = hold_s, False
        self._sock, self._child_sock = socket.socketpair()
        with tempfile.TemporaryFile() as ledger:  # the child reads the frozen seconds; only we write
            self._ledger = os.dup(ledger.fileno())
            self._child_ledger = os.open(f"/proc/self/fd/{self._ledger}", os.O_RDONLY)
        self._group = freezer.new_group(limits)
        self._frozen_total, self._frozen_since = 0.0, None
        self._thread: threading.Thread | None = None

    @property
    def prefix(self) -> list[str]:
        return self._group.prefix

    @property
    def env(self) -> dict[str, str]:
        return {ENV: f"{self._child_sock.fileno()}:{self._child_ledger}"}

    @property
    def pass_fds(self) -> tuple[int, int]:
        return self._child_sock.fileno(), self._child_ledger

    def started(self, proc: subprocess.Popen) -> None:
        """After Popen: keep none of the child's ends, and serve its requests."""
        self._child_sock.close()
        os.close(self._child_ledger)
        self._child_ledger = -1  # never closed twice: another grading's thread may reuse the number
        self._group.attach(proc.pid)
        ARBITER.register(self)
        self._thread = threading.Thread(target=self._serve, name=f"machine-lock-{proc.pid}", daemon=True)
        self._thread.start()

    def wait(self, proc: subprocess.Popen, timeout: float) -> int:
        """proc.wait, with `timeout` moved on by the time this grading spent frozen. Raises
        subprocess.TimeoutExpired."""
        start = time.monotonic()
        while True:
            left = start + timeout + self.frozen_s() - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            try:
                return proc.wait(timeout=min(left, 0.5))
            except subprocess.TimeoutExpired:
                continue

    def frozen_s(self) -> float:
        since = self._frozen_since
        return self._frozen_total + (time.monotonic() - since if since is not None else 0.0)

    def freeze(self) -> None:  # the arbiter's, under its lock
        if self._frozen_since is None and not self.closed:
            self._frozen_since = time.monotonic()
            try:
                self._group.freeze()
            except OSError:
                pass  # its cgroup is gone: the child ended

    def thaw(self) -> None:  # the arbiter's, under its lock: the ledger first, so the child reads it awake
        if self._frozen_since is not None:
            self._frozen_total += time.monotonic() - self._frozen_since
            self._frozen_since = None
            try:
                os.pwrite(self._ledger, f"{self._frozen_total:.6f}".ljust(32).encode(), 0)
                self._group.thaw()
            except OSError:
                pass  # its cgroup or ledger is gone: the child ended

    def close(self) -> None:
        """The child has ended (or is being killed): drop any hold, thaw, kill what is left."""
        self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=testing.LOCK_WAIT_S + 5)
        ARBITER.unregister(self)
        self._group.close()
        self._sock.close()
        self._child_sock.close()
        for fd in (self._ledger, self._child_ledger):
            if fd >= 0:
                os.close(fd)
        self._ledger = self._child_ledger = -1

    def __enter__(self) -> Grading:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _serve(self) -> None:
        """Answer the child: acquire -> granted | busy <why>; release. Ends, releasing, at EOF or close."""
        buffer, until = b"", None
        try:
            while True:
                self._sock.settimeout(None if until is None else max(0.0, until - time.monotonic()))
                try:
                    data = self._sock.recv(256)
                except TimeoutError:  # the hold's timer: released whatever the child says
                    ARBITER.release(self)
                    until = None
                    continue
                if not data or self.closed:
                    return
                buffer = (buffer + data)[-256:]
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line == b"acquire" and until is None:
                        why = ARBITER.acquire(self, testing.LOCK_WAIT_S)
                        until = time.monotonic() + 2 * self.hold_s + HOLD_SLACK_S if why is None else None
                        self._sock.settimeout(1.0)  # a child that does not read its answers is not waited for
                        self._sock.sendall(b"granted\n" if why is None else f"busy {why}\n".encode())
                    elif line == b"release" and until is not None:
                        ARBITER.release(self)
                        until = None
        except OSError:
            return  # the socket closed or the child stopped reading
        finally:
            ARBITER.release(self)


# ---- the child's side (the plugin) -------------------------------------------------------------

_client: Client | None = None


class Client:
    """The plugin's end: `hold()` around a machine test, `frozen_s()` for its per-test timer."""

    def __init__(self, sock: socket.socket, ledger_fd: int) -> None:
        self._sock, self._ledger = sock, ledger_fd

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the machine for the block. Raises Inconclusive when the grader answers busy."""
        self._sock.sendall(b"acquire\n")
        reply = b""
        while not reply.endswith(b"\n"):
            data = self._sock.recv(512)
            if not data:
                testing.inconclusive("the grader's timing lock service went away")
            reply += data
        answer = reply.decode(errors="replace").strip()
        if answer != "granted":
            testing.inconclusive(answer.removeprefix("busy "))
        try:
            yield
        finally:
            try:
                self._sock.sendall(b"release\n")
            except OSError:
                pass  # the parent's timer or its end of the session released it already

    def frozen_s(self) -> float:
        try:
            return float(os.pread(self._ledger, 32, 0) or 0)
        except (OSError, ValueError):
            return 0.0


def connect() -> None:
    """Take DOJO_MACHINE_LOCK out of the environment (before candidate code is imported) and keep its
    descriptors from the processes the test starts. Without the variable nothing changes."""
    global _client
    value = os.environ.pop(ENV, None)
    if _client is not None or not value:
        return
    sock_fd, ledger_fd = (int(part) for part in value.split(":"))
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    os.set_inheritable(ledger_fd, False)
    _client = Client(sock, ledger_fd)


def timing_lock() -> AbstractContextManager[None]:
    """The hold around a machine test: the parent's service in a grading, the flock in practice runs."""
    return _client.hold() if _client is not None else testing.timing_lock()


def frozen_s() -> float:
    """Seconds this grading has spent frozen for other gradings' timing tests (0 outside a grading)."""
    return _client.frozen_s() if _client is not None else 0.0
