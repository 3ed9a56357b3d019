"""The worker's peak memory over one call, measured by the judge from outside the worker.

`watch()` resets the peak resident set (VmHWM: 5 to /proc/PID/clear_refs) of every process below this
one (the worker, bwrap's around it; `itself` adds this one) and sums how far each rose (`Peak.rise`). A
process started, ended or reaped in the block is in `Peak.others`; a refused reset or read leaves
`Peak.unmeasurable`. Resident sets miss memory kept out of them (shared memory, files, swap), so the judge
also puts the worker in a memory cgroup of its own at boot (`adopt`, cgroup v1, as root): `Peak.charged`
is all charged to it since, at its highest in the block; none where the charge cannot be trusted (uid 0, or
no socket filter: `untrusted`) or none can be made, a sentence saying why instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_V1 = Path("/sys/fs/cgroup/memory")


@dataclass
class Peak:
    """What `watch` saw, once its block is over."""

    rise: int = 0  # bytes: how far the peaks of the processes watched rose, summed
    others: list[int] = field(default_factory=list)  # pids that started or ended in the block, or reaped one
    unmeasurable: str = ""  # why nothing could be measured ("" when it could)
    charged: int | None = None  # bytes charged to the worker's cgroup since it booted, at their highest


class Group:
    """A memory cgroup (v1) made for the worker's processes: what they are charged from their move on
    (anonymous, page cache, shared memory and tmpfs they touch; with swap where the kernel counts it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        swap = path / "memory.memsw.max_usage_in_bytes"
        self.prefix = "memory.memsw." if swap.exists() else "memory."

    def usage(self) -> int:
        return int((self.path / f"{self.prefix}usage_in_bytes").read_text())

    def reset_peak(self) -> None:
        (self.path / f"{self.prefix}max_usage_in_bytes").write_text("0")  # the peak becomes the usage now

    def peak(self) -> int:
        return int((self.path / f"{self.prefix}max_usage_in_bytes").read_text())

    def close(self) -> None:
        """Hand any process left back to the parent cgroup, then remove this one (retried for a second
        while processes still end in it: bwrap's die with their parent, after it)."""
        for _ in range(50):
            try:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    (self.path.parent / "cgroup.procs").write_text(pid)
                self.path.rmdir()
                return
            except FileNotFoundError:
                return  # gone already
            except OSError:
                time.sleep(0.02)  # still busy; after that the kernel keeps an empty cgroup, harmless


def adopt(root: int, name: str) -> Group | str:
    """A new memory cgroup `name` beside this process's own, holding process `root` and every process
    below it (their children follow); or why none could be made (no cgroup v1 memory controller, not
    root, ...)."""
    try:
        own = next(
            line.split(":", 2)[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.split(":", 2)[1] == "memory"
        )
    except (OSError, StopIteration, IndexError):
        return "no cgroup v1 memory controller here"
    path = CGROUP_V1 / own.strip("/") / name
    _sweep(path.parent)
    try:
        path.mkdir()
        group = Group(path)
        for pid in [root, *_below(root)]:
            (path / "cgroup.procs").write_text(str(pid))
        group.usage()
    except OSError as exc:
        try:
            path.rmdir()
        except OSError:
            pass
        return f"a memory cgroup for the worker cannot be made here ({exc.strerror or exc})"
    return group


@contextmanager
def watch(*, itself: bool = False, group: Group | None = None) -> Iterator[Peak]:
    """Measure the block: every process below this one, and this one too with `itself` (practice mode,
    where the candidate's code runs here); with `group`, the worker's cgroup's peak charge too."""
    peak = Peak()
    before, vanished = {}, set()  # vanished: ended between the listing and its reset (a process churning)
    try:
        for pid in _watched(itself):
            try:
                before[pid] = _reset(pid)
            except (FileNotFoundError, ProcessLookupError):
                vanished.add(pid)
        if group is not None:
            group.reset_peak()
    except OSError as exc:  # a refusal, not a process gone
        peak.unmeasurable = f"the peak memory cannot be reset here ({exc})"
    yield peak
    if peak.unmeasurable:
        return
    after = {}
    for pid in _watched(itself):
        try:
            after[pid] = _read(pid)
        except (FileNotFoundError, ProcessLookupError):  # it ended as it was read: counted as ended below
            vanished.add(pid)
        except OSError as exc:
            peak.unmeasurable = f"the peak memory cannot be read here ({exc})"
            return
    ended = [pid for pid in before if pid not in after or after[pid][2] == "Z"]  # gone, or a zombie
    reaped = [pid for pid in before if pid in after and after[pid][1] != before[pid][1]]
    peak.others = sorted({*ended, *reaped, *(set(after) - set(before)), *vanished})
    peak.rise = sum(max(0, after[pid][0] - before[pid][0]) for pid in before if pid in after)
    if group is not None:
        try:
            peak.charged = group.peak()
        except OSError as exc:
            peak.unmeasurable = f"the worker's cgroup cannot be read ({exc})"


def untrusted(root: int) -> str:
    """Why the charge of the worker at `root` cannot be trusted, or "" when it can. Read from the process that
    runs its code (one with no process below it, so not bwrap's around it): uid 0 (real, effective, saved or
    filesystem: root owns the cgroup's files) or any capability could reset the charge it is measured by, and
    without the socket filter (dojo.grading.confine.seccomp, Seccomp: 2) TCP and UDP buffers, charged to no
    cgroup v1 group, could hold what it keeps. For the judge, at boot, before any of the candidate's code has
    run; what that code starts later keeps its uid (the sandbox sets no_new_privs) and the filter."""
    tree = [root, *_below(root)]
    try:
        parents = {_stat(pid)[1] for pid in tree}
        for pid in (pid for pid in tree if pid not in parents):
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            if "0" in status["Uid"].split():
                return "the worker runs as root outside the sandbox, so it could reset the charge it is measured by"
            if int(status["CapPrm"], 16):
                return "the worker holds capabilities, so it could reset the charge it is measured by"
            if status.get("Seccomp", "").strip() != "2":
                return (
                    "the worker has no socket filter (dojo.grading.confine.seccomp), so TCP and UDP buffers, "
                    "which no cgroup v1 memory group is charged, could hold what it keeps"
                )
    except (OSError, KeyError, ValueError) as exc:
        return f"the worker's credentials cannot be read ({exc})"
    return ""


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups that judges no longer running left here (a judge killed, or one whose worker
    ended with it: "dojo-worker-PID-N", PID the judge's), so they do not pile up on a grading machine."""
    for old in parent.glob("dojo-worker-*-*"):
        owner = old.name.split("-")[2]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            try:
                old.rmdir()  # refused while a process is still in it
            except OSError:
                pass


def _watched(itself: bool) -> list[int]:
    me = os.getpid()
    return [me, *_below(me)] if itself else _below(me)


def _below(root: int) -> list[int]:
    """Every process descended from `root` (threads are not processes), from one pass over /proc."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parent[int(name)] = _stat(int(name))[1]
            except OSError:  # it ended while the list was read
                pass
    found, todo = [], [root]
    while todo:
        up = todo.pop()
        kids = [pid for pid, ppid in parent.items() if ppid == up]
        found += kids
        todo += kids
    return found


def _stat(pid: int) -> tuple[str, int, int]:
    """(state, parent pid, page faults of its reaped children) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[1]), int(fields[8]) + int(fields[10])  # state, ppid, ..., cminflt, cmajflt


def _reset(pid: int) -> tuple[int, int, str]:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # the peak resident set becomes the current one
    return _read(pid)


def _read(pid: int) -> tuple[int, int, str]:
    """(peak resident bytes, its reaped children's page faults, its state) of a process (a zombie: no peak)."""
    state, _, reaped_faults = _stat(pid)
    return _status(pid, "VmHWM:"), reaped_faults, state


def _status(pid: int, key: str) -> int:
    """Bytes of one kB line of /proc/PID/status ("VmHWM:"); 0 where it has none (a zombie)."""
    with open(f"/proc/{pid}/status") as f:
        kib = [int(line.split()[1]) for line in f if line.startswith(key)]
    return kib[0] * 1024 if kib else 0
