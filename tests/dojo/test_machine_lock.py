"""The machine lock service (dojo.grading.machine_lock): the grader holds the timing lock for a child,
releases it whatever the child does, and freezes the other gradings of its process meanwhile; and
the lock file is opened safely (dojo.testing.open_lock). Children here are small scripts speaking
the plugin's side, started as dojo.grading.child starts a grading (the same prefix, fds and env)."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dojo
from dojo import testing
from dojo.grading import freezer, machine_lock

CHILD = """
import sys, time
from dojo.grading import machine_lock
machine_lock.connect()
mode, seconds = sys.argv[1], float(sys.argv[2])
if mode == "hold":
    with machine_lock.timing_lock():
        print("held", flush=True)
        time.sleep(seconds)
elif mode == "keep":  # takes the lock and never says release
    held = machine_lock.timing_lock()  # kept: a dropped generator would say release as it is collected
    held.__enter__()
    print("held", flush=True)
    time.sleep(seconds)
elif mode == "tick":  # reports the longest gap between its own ticks, and the frozen seconds it was told
    end, last, gap = time.monotonic() + seconds, time.monotonic(), 0.0
    print("ticking", flush=True)
    while time.monotonic() < end:
        now = time.monotonic()
        gap, last = max(gap, now - last), now
    print(f"{gap:.3f} {machine_lock.frozen_s():.3f}", flush=True)
"""


@pytest.fixture(autouse=True)
def lock_path(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "timing.lock"
    monkeypatch.setenv("DOJO_TIMING_LOCK", str(path))
    return path


def launch(grading: machine_lock.Grading, *args: str) -> subprocess.Popen:
    env = {**os.environ, **grading.env, "PYTHONPATH": str(Path(dojo.__file__).parent.parent)}
    proc = subprocess.Popen(
        [*grading.prefix, sys.executable, "-c", CHILD, *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=grading.pass_fds,
        start_new_session=True,
    )
    grading.started(proc)
    return proc


def is_held(path: Path) -> bool:
    fd = testing.open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_the_parent_holds_the_lock_for_the_child_until_it_releases(lock_path):
    """A child's acquire makes the parent hold the machine-wide flock; the child's release frees it"""
    with machine_lock.Grading(hold_s=30) as grading:
        proc = launch(grading, "hold", "0.5")
        assert proc.stdout.readline().strip() == "held"
        assert is_held(lock_path)
        assert proc.wait(timeout=30) == 0
        assert wait_until(lambda: not is_held(lock_path))


def test_a_child_that_dies_holding_the_lock_frees_it(lock_path):
    """Killed mid-hold: the parent sees its end close and releases at once"""
    with machine_lock.Grading(hold_s=30) as grading:
        proc = launch(grading, "keep", "60")
        assert proc.stdout.readline().strip() == "held" and is_held(lock_path)
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not is_held(lock_path), 5)


def test_the_parents_timer_ends_a_hold_the_child_never_releases(lock_path, monkeypatch):
    """A child that keeps the lock past 2 x the per-test limit + slack loses it, while still running"""
    monkeypatch.setattr(machine_lock, "HOLD_SLACK_S", 0.5)
    with machine_lock.Grading(hold_s=0.25) as grading:
        proc = launch(grading, "keep", "60")
        assert proc.stdout.readline().strip() == "held" and is_held(lock_path)
        started = time.monotonic()
        assert wait_until(lambda: not is_held(lock_path), 10)
        assert 0.5 < time.monotonic() - started < 5 and proc.poll() is None
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", ["cgroup v2 where this machine allows", "signals"])
def test_other_gradings_are_frozen_while_one_measures_and_told_for_how_long(lock_path, monkeypatch, how):
    """While one child holds the machine, a neighbour that only spins does not run at all; after the thaw
    its deadline and its per-test timer (the ledger) both know how long it was frozen"""
    if how == "signals":
        monkeypatch.setattr(freezer, "_own_cgroup", lambda: None)
    with machine_lock.Grading(hold_s=30) as neighbour_side, machine_lock.Grading(hold_s=30) as holder_side:
        neighbour = launch(neighbour_side, "tick", "4")
        assert neighbour.stdout.readline().strip() == "ticking"
        holder = launch(holder_side, "hold", "1.5")
        assert holder.stdout.readline().strip() == "held"
        assert holder.wait(timeout=30) == 0
        gap, told = map(float, neighbour.stdout.readline().split())
        assert neighbour.wait(timeout=30) == 0
    assert gap >= 1.2, f"the neighbour ran while a timing test measured (longest pause {gap:.2f} s)"
    assert told == pytest.approx(neighbour_side.frozen_s(), abs=0.05) and told >= 1.2


def test_a_busy_machine_answers_inconclusive(lock_path, monkeypatch):
    """Another process holds the flock past LOCK_WAIT_S: the child's test is inconclusive, with the reason"""
    monkeypatch.setattr(testing, "LOCK_WAIT_S", 0.3)
    holder = testing.open_lock(lock_path)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with machine_lock.Grading(hold_s=30) as grading:
            proc = launch(grading, "hold", "0")
            out, _ = proc.communicate(timeout=30)
    finally:
        os.close(holder)
    assert proc.returncode != 0 and "held" not in out


def test_a_symlinked_lock_is_refused_and_nothing_is_chmod_ed(tmp_path):
    """The lock path is a symlink to a private file: refused (never followed), the file keeps its mode"""
    secret = tmp_path / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    link = tmp_path / "timing.lock"
    link.symlink_to(secret)
    with pytest.raises(testing.LockFileError, match="symlink"):
        testing.open_lock(link)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(testing.LockFileError, match="not a regular file"):
        testing.open_lock(fifo)
    with pytest.raises(testing.LockFileError, match="DOJO_TIMING_LOCK"):
        testing.open_lock(tmp_path)  # a folder
    existing = tmp_path / "mine.lock"
    existing.touch(mode=0o600)
    os.close(testing.open_lock(existing))
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600
