"""The grading child: one python command line run in its own session under resource limits.

`run` starts it through a small launcher that sets RLIMIT_AS (memory), RLIMIT_FSIZE (output),
no core dumps and, in the sandbox, a process cap and its own uid, then becomes the command; output
goes to a file, never a pipe that could fill; on return its whole process group is killed. Its timing
tests ask dojo.grading.machine_lock for the machine. `tail` reads the end of the output. What the
command is and what its results mean are dojo.grading.grade's and dojo.grading.outcomes'.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dojo.grading import channel, machine_lock

OUTPUT_LIMIT = 64 * 2**20  # bytes any one file the test process writes may reach (its output included)
OUTPUT_TAIL = 8000  # characters of the test process's own output kept for diagnosis


# Sets the limits (and, in the sandbox as root, drops to its own uid first: the process cap never
# binds uid 0), then becomes pytest: a launcher instead of preexec_fn, which is unsafe when
# `dojo grade --jobs N` starts children from several threads. Arguments: memory, output,
# processes (0: no cap), uid (-1: keep), then pytest's command line.
LAUNCH = (
    "import os, resource, sys\n"
    "memory, output, processes, uid = map(int, sys.argv[1:5])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "if uid >= 0:\n"
    "    os.setgroups([]); os.setgid(uid); os.setuid(uid)\n"
    "if processes:\n"
    "    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[5:]])\n"
)


def run(
    cmd,
    cwd: Path,
    env: dict,
    timeout: float,
    memory_limit: int,
    output: Path,
    receiver: channel.Receiver,
    box=None,
    hold_s: float = 60.0,
) -> tuple[int | None, bool]:
    """Run `cmd` (a python command line) in its own session under resource limits, inside the sandbox
    when `box` is dojo.grading.confine.sandbox; (returncode, timed_out). Its output goes to a file, never a pipe that
    could fill up; its results to `receiver`. Its timing tests ask dojo.grading.machine_lock for the
    machine (`hold_s`: the per-test limit), and `timeout` does not count time it spent frozen for others."""
    processes = box.process_limit() if box is not None else 0
    limits = {"memory.max": str(memory_limit), **({"pids.max": str(processes)} if processes else {})}
    with machine_lock.Grading(hold_s, limits) as lock:
        env = {**env, **receiver.env, **lock.env}
        if box is None:
            prefix, limits, env = [], ["0", "-1"], {**os.environ, **env}
        else:
            uid = box.child_uid()
            prefix = box.bwrap_args(cwd, uid=uid)
            limits, env = [str(processes), str(-1 if uid is None else uid)], box.environment(env)
        launch = [
            *lock.prefix,
            *prefix,
            sys.executable,
            "-c",
            LAUNCH,
            str(memory_limit),
            str(OUTPUT_LIMIT),
            *limits,
            *cmd[1:],
        ]
        with open(output, "wb") as out:
            proc = subprocess.Popen(
                launch,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(*receiver.pass_fds, *lock.pass_fds),
            )
            receiver.close_child_ends()
            lock.started(proc)
            try:
                code = lock.wait(proc, timeout)
                return (code if box is None else box.exit_status(code)), False
            except subprocess.TimeoutExpired:
                return None, True
            finally:
                kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and anything it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - OUTPUT_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
