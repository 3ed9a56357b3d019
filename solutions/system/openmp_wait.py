"""OpenMP's wait policy for one run: threads sleep between parallel regions, not spin, on a busy machine.

libgomp's threads spin a while after each parallel region, waiting for the next. Where other processes
hold the cores, a spinning thread takes the time slice its peer needs to finish its share, and every
region waits out the scheduler: a 31-token int4 prefill took 1-3 s instead of 0.1 s (2 threads, load 4
on 2 cores). `passive_if_busy()` then sets OMP_WAIT_POLICY=PASSIVE; on an idle machine spinning is the
faster choice (int4 decode 95-100 tokens/s against passive's 50-60 here), so it is left alone. Not here:
the thread count, or overriding a policy the user set.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path

POLICY_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # either set: the user chose, we leave it
# reads of the runnable count, 1 ms apart, the largest kept (one read missed a busy machine in 1 of 5 runs)
SAMPLES = 5


def busy(running: int, threads: int, cpus: int) -> bool:
    """Whether `threads` OpenMP threads would share `cpus` (logical CPUs) with other work: `running` is the
    kernel's count of runnable tasks now (/proc/loadavg's fourth field), this process's one thread among them."""
    return threads > 1 and (running - 1) + threads > cpus


def runnable(loadavg: Path) -> int:
    """The kernel's count of runnable tasks at this instant, the reader among them: the number before the
    "/" in /proc/loadavg's fourth field ("0.52 0.58 0.59 2/180 4242")."""
    return int(loadavg.read_text().split()[3].split("/")[0])


def thread_count(environ: MutableMapping[str, str], physical: int) -> int:
    """The threads torch's OpenMP will run: OMP_NUM_THREADS's first number where it is one, else the
    `physical` cores (torch's default: MKL's count, one thread a core, not one per hyperthread)."""
    first = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else physical


def physical_cores(cpus: set[int], topology: Path = Path("/sys/devices/system/cpu")) -> int:
    """The cores under `cpus` (logical CPU ids), hyperthreads of one core counted once; len(cpus) where
    the topology cannot be read."""
    siblings = set()
    for cpu in cpus:
        try:
            siblings.add((topology / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return len(siblings)


def passive_if_busy(
    environ: MutableMapping[str, str] = os.environ, loadavg: Path = Path("/proc/loadavg")
) -> str:
    """Set OMP_WAIT_POLICY=PASSIVE in `environ` when, at this instant, the runnable tasks beside this
    process and its threads outnumber the CPUs it may run on; a sentence saying so, else "". Does nothing
    once torch is imported (libgomp reads the policy when it loads), where the user set a policy, or where
    `loadavg` cannot be read (not Linux). The count is the largest of SAMPLES snapshots over ~5 ms: it
    can still err either way."""
    if "torch" in sys.modules or any(name in environ for name in POLICY_ENV):
        return ""
    running = 0
    for _ in range(SAMPLES):
        try:
            running = max(running, runnable(loadavg))
        except (OSError, IndexError, ValueError):
            return ""
        time.sleep(0.001)
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    threads = thread_count(environ, physical_cores(cpus))
    if not busy(running, threads, len(cpus)):
        return ""
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return (
        f"OpenMP threads sleep between parallel regions (OMP_WAIT_POLICY=PASSIVE): {running - 1} other "
        f"task{'s' if running != 2 else ''} runnable beside {threads} threads on {len(cpus)} CPUs"
    )
