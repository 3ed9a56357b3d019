"""Freezing one grading's processes while another grading's timing test measures.

A `Group` is every process one grading child starts: `freeze()` stops them all, threads included,
`thaw()` lets them go on, `close()` kills what is left. `new_group()` makes a cgroup v2 group where
this process may create one (cgroup.freeze, cgroup.kill), else a signal group (SIGSTOP and SIGCONT
to every descendant found in /proc). Deciding when to freeze is dojo.grading.machine_lock's.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path

SETTLE_S = 2.0  # longest wait for a cgroup to report frozen or empty
# the launcher: enter the cgroups (argv[1] of them: their cgroup.procs files follow), then become the command
_ENTER = (
    "import os, sys\nn = int(sys.argv[1])\nfor procs in sys.argv[2:2 + n]:\n    open(procs, 'w').write('0')\n"
    "os.execvp(sys.argv[2 + n], sys.argv[2 + n:])\n"
)


class Group:
    """Processes by descent: signals. Subclassed for cgroups."""

    def __init__(self) -> None:
        self._root: int | None = None
        self._stopped: set[int] = set()

    @property
    def prefix(self) -> list[str]:
        """Command-line words to put before the child's command (none: the child is found by descent)."""
        return []

    def attach(self, pid: int) -> None:
        self._root = pid

    def freeze(self) -> None:
        for _ in range(50):  # each pass stops what the last one missed; a stopped process forks no more
            new = _descendants(self._root) - self._stopped if self._root else set()
            if not new:
                return
            for pid in new:
                _signal(pid, signal.SIGSTOP)
            self._stopped |= new

    def thaw(self) -> None:
        for pid in self._stopped | (_descendants(self._root) if self._root else set()):
            _signal(pid, signal.SIGCONT)
        self._stopped.clear()

    def close(self) -> None:
        self.thaw()  # the caller kills the process group; stopped strays would otherwise linger


class Cgroup(Group):
    """Processes by cgroup v2 membership."""

    def __init__(self, parent: Path, cpu_v1: Path | None = None) -> None:
        super().__init__()
        name = f"dojo-grading-{os.getpid()}-{secrets.token_hex(4)}"
        self.path = parent / name
        self.path.mkdir()
        if not (self.path / "cgroup.freeze").exists():
            self.path.rmdir()
            raise OSError(f"{self.path} has no cgroup.freeze (kernel before 5.2)")
        self.cpu = None  # a cgroup v1 cpu group beside it, where v1 holds the cpu controller
        if cpu_v1 is not None:
            try:
                (cpu_v1 / name).mkdir()
                self.cpu = cpu_v1 / name
            except OSError:
                pass

    @property
    def prefix(self) -> list[str]:
        joined = [self.path] + ([self.cpu] if self.cpu else [])
        return [
            sys.executable,
            "-I",
            "-S",
            "-c",
            _ENTER,
            str(len(joined)),
            *(str(p / "cgroup.procs") for p in joined),
        ]

    def limit(self, values: dict[str, str]) -> list[str]:
        """Write each controller file whose controller the group has; the names written."""
        offered = (self.path / "cgroup.controllers").read_text().split()
        done = []
        for name, value in values.items():
            if name.split(".")[0] in offered:
                (self.path / name).write_text(value)
                done.append(name)
        return done

    def freeze(self) -> None:
        (self.path / "cgroup.freeze").write_text("1")
        self._settle(lambda: "frozen 1" in (self.path / "cgroup.events").read_text().splitlines())

    def thaw(self) -> None:
        (self.path / "cgroup.freeze").write_text("0")

    def close(self) -> None:
        try:
            if (self.path / "cgroup.kill").exists():
                (self.path / "cgroup.kill").write_text("1")
            else:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    _signal(int(pid), signal.SIGKILL)
            self.thaw()
            self._settle(lambda: not (self.path / "cgroup.procs").read_text().strip())
            self.path.rmdir()
            if self.cpu is not None:
                self._settle(lambda: not (self.cpu / "cgroup.procs").read_text().strip())
                self.cpu.rmdir()
        except OSError:
            pass  # an empty cgroup left behind costs nothing; the grading's verdict is unaffected

    @staticmethod
    def _settle(done) -> None:
        deadline = time.monotonic() + SETTLE_S
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)


def new_group(limits: dict[str, str] | None = None) -> Group:
    """A cgroup v2 group where this process can make one (with `limits` written where the controller is
    offered, e.g. {"memory.max": "3221225472"}), else a signal group. Never raises."""
    parent = _own_cgroup()
    if parent is not None:
        try:
            group = Cgroup(parent, _own_cgroup_v1("cpu"))
        except OSError:
            return Group()
        try:
            group.limit(limits or {})
        except OSError:
            pass  # a controller that refuses a value: the rlimits still hold
        return group
    return Group()


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 folder, if it may create children there."""
    try:
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
        mount = next(fields[1] for fields in mounts if len(fields) > 2 and fields[2] == "cgroup2")
        own = next(
            line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")
        )
    except (OSError, StopIteration):
        return None
    folder = Path(mount) / own.lstrip("/")
    return folder if os.access(folder, os.W_OK) and (folder / "cgroup.procs").exists() else None


def _own_cgroup_v1(controller: str) -> Path | None:
    """This process's folder in a cgroup v1 hierarchy holding `controller`, if it may create children there."""
    try:
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
        mount = next(
            f[1] for f in mounts if len(f) > 3 and f[2] == "cgroup" and controller in f[3].split(",")
        )
        own = next(
            line.split(":", 2)[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if controller in line.split(":")[1].split(",")
        )
    except (OSError, StopIteration, IndexError):
        return None
    folder = Path(mount) / own.lstrip("/")
    return folder if os.access(folder, os.W_OK) and (folder / "cgroup.procs").exists() else None


def _descendants(root: int) -> set[int]:
    """`root` and every process below it, from /proc (a process gone mid-read is skipped)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
