"""OpenMP's wait policy on a busy machine (solutions.system.openmp_wait), on fake /proc/loadavg files."""

from __future__ import annotations

import json
import subprocess
import sys

from dojo import ROOT
from solutions.system.openmp_wait import busy, physical_cores, thread_count


def test_busy_when_other_work_and_our_threads_outnumber_the_cpus():
    """Runnable tasks beside ours plus our threads above the CPUs is busy; alone, or one thread, is not."""
    assert not busy(running=1, threads=2, cpus=2), "only this process runs: the CPUs are ours"
    assert busy(running=2, threads=2, cpus=2), "one other task and 2 threads on 2 CPUs share one"
    assert not busy(running=3, threads=1, cpus=2), "one thread has no peer to wait for"
    assert not busy(running=3, threads=4, cpus=8), "2 others and 4 threads fit in 8 CPUs"


def test_thread_count_reads_omp_num_threads_else_the_physical_cores():
    """OMP_NUM_THREADS's first number is the count; unset or not a positive number, the physical cores."""
    assert thread_count({"OMP_NUM_THREADS": "3"}, physical=8) == 3
    assert thread_count({"OMP_NUM_THREADS": "4,2"}, physical=8) == 4
    for bad in ({}, {"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "many"}):
        assert thread_count(bad, physical=8) == 8, bad


def test_physical_cores_count_hyperthreads_once(tmp_path):
    """CPUs 0-3 as two cores of two hyperthreads each are 2 cores (torch's default thread count); without
    the topology files, each CPU counts."""
    for cpu, siblings in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(siblings + "\n")
    assert physical_cores({0, 1, 2, 3}, tmp_path) == 2
    assert physical_cores({0, 2}, tmp_path) == 1, "CPUs 0 and 2 are one core's two hyperthreads"
    assert physical_cores({0, 1, 2}, tmp_path / "missing") == 3


def in_fresh_python(loadavg: str, tmp_path, environ: dict, torch_first: bool = False) -> tuple[str, dict]:
    """passive_if_busy's sentence and the environment after it, in a Python without torch (this one has it)."""
    path = tmp_path / "loadavg"
    path.write_text(loadavg)
    code = (
        ("import torch\n" if torch_first else "")
        + "import json, sys\nfrom pathlib import Path\nfrom solutions.system.openmp_wait import passive_if_busy\n"
        + f"env = {environ!r}\nsaid = passive_if_busy(env, Path({str(path)!r}))\nprint(json.dumps([said, env]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    said, env = json.loads(done.stdout)
    return said, env


def test_busy_machine_gets_the_passive_policy_and_says_so(tmp_path):
    """500 runnable tasks (more than this machine's cores) beside 2 threads is busy: PASSIVE is set and the
    sentence names it; with this process alone runnable, nothing is set or said."""
    said, env = in_fresh_python("3.90 3.10 2.00 500/620 999\n", tmp_path, {"OMP_NUM_THREADS": "2"})
    assert env.get("OMP_WAIT_POLICY") == "PASSIVE" and "OMP_WAIT_POLICY=PASSIVE" in said, (said, env)
    assert "499 other tasks runnable beside 2 threads" in said, said
    said, env = in_fresh_python("0.10 0.10 0.10 1/120 999\n", tmp_path, {"OMP_NUM_THREADS": "2"})
    assert said == "" and "OMP_WAIT_POLICY" not in env, (said, env)


def test_a_users_policy_torch_loaded_or_an_unreadable_file_change_nothing(tmp_path):
    """A wait policy the user set stays; once torch is imported libgomp has read the policy, so none is
    set; a file without the runnable count sets nothing and raises nothing."""
    busy_file = "3.90 3.10 2.00 500/620 999\n"
    said, env = in_fresh_python(busy_file, tmp_path, {"OMP_NUM_THREADS": "2", "GOMP_SPINCOUNT": "1000"})
    assert said == "" and "OMP_WAIT_POLICY" not in env, (said, env)
    said, env = in_fresh_python(busy_file, tmp_path, {"OMP_NUM_THREADS": "2"}, torch_first=True)
    assert said == "" and "OMP_WAIT_POLICY" not in env, f"set after torch loaded libgomp: {said!r}"
    said, env = in_fresh_python("garbage\n", tmp_path, {"OMP_NUM_THREADS": "2"})
    assert said == "" and "OMP_WAIT_POLICY" not in env, (said, env)
