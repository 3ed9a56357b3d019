"""The worker's peak memory over one call, measured by the judge from outside the worker.

`watch()` resets the peak resident set (VmHWM: 5 to /proc/PID/clear_refs) of every process below this
one (the worker, bwrap's around it; `itself` adds this one) and sums how far each rose (`Peak.rise`) and
where each ended (`Peak.top`). A process started, ended or reaped in the block is in `Peak.others`; a
refused reset or read leaves `Peak.unmeasurable`. A rise misses memory held before and reused; `top`
against `resident()` before the candidate's code ran (judge.Worker.resident_at_boot) sees it. Neither
sees data kept by write() in a file (unmapped page cache) or paged out (swap, madvise on its own pages)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Peak:
    """What `watch` saw, once its block is over."""

    rise: int = 0  # bytes: how far the peaks of the processes watched rose, summed
    top: int = 0  # bytes: those peaks after the block, summed (resident memory at its highest, per process)
    others: list[int] = field(default_factory=list)  # pids that started or ended in the block, or reaped one
    unmeasurable: str = ""  # why nothing could be measured ("" when it could)


@contextmanager
def watch(*, itself: bool = False) -> Iterator[Peak]:
    """Measure the block: every process below this one, and this one too with `itself` (practice mode,
    where the candidate's code runs here)."""
    peak = Peak()
    try:
        before = {pid: _reset(pid) for pid in _watched(itself)}
    except OSError as exc:
        peak.unmeasurable = f"the peak memory cannot be reset here ({exc})"
    yield peak
    if peak.unmeasurable:
        return
    after = {}
    for pid in _watched(itself):
        try:
            after[pid] = _read(pid)
        except FileNotFoundError:  # it ended as it was read: counted as ended below
            pass
        except OSError as exc:
            peak.unmeasurable = f"the peak memory cannot be read here ({exc})"
            return
    ended = [pid for pid in before if pid not in after or after[pid][2] == "Z"]  # gone, or a zombie
    reaped = [pid for pid in before if pid in after and after[pid][1] != before[pid][1]]
    peak.others = sorted({*ended, *reaped, *(set(after) - set(before))})
    peak.rise = sum(max(0, after[pid][0] - before[pid][0]) for pid in before if pid in after)
    peak.top = sum(after[pid][0] for pid in before if pid in after)


def resident() -> int:
    """Bytes resident now (VmRSS: anonymous, file-mapped and shared pages) in every process below this one,
    summed. Raises OSError when a process's status cannot be read."""
    total = 0
    for pid in _below(os.getpid()):
        try:
            total += _status(pid, "VmRSS:")
        except FileNotFoundError:  # it ended as it was read
            pass
    return total


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
    """Bytes of one kB line of /proc/PID/status ("VmHWM:", "VmRSS:"); 0 where it has none (a zombie)."""
    with open(f"/proc/{pid}/status") as f:
        kib = [int(line.split()[1]) for line in f if line.startswith(key)]
    return kib[0] * 1024 if kib else 0
