"""Timing tests that never fail correct work: the inconclusive outcome end to end, the machine-wide
timing lock, dojo.machine's verdicts and sizes, and dojo.fakeclock."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from dojo import fakeclock, machine
from dojo.testing import Inconclusive, timing_lock

MACHINE_TEST = '''

from dojo.testing import inconclusive

TOY_NOISY = True  # a constant in the suite, not an environment variable: the sandbox passes none through


@pytest.mark.machine
@pytest.mark.points(3)
def test_timing_claim(kata):
    """a timing claim the machine decides"""
    if TOY_NOISY:
        inconclusive("the timings spread 80%, too noisy to decide")
    assert kata.add(1, 1) == 2
'''


@pytest.fixture
def noisy(dojo, tmp_path):
    """The toy kata with one machine test that is inconclusive while the suite's TOY_NOISY is True, and
    the reference in the workspace."""
    dojo.suite.write_text(dojo.suite.read_text() + MACHINE_TEST)
    dojo.write(dojo.reference.read_text())
    dojo.env.update(DOJO_TIMING_LOCK=str(tmp_path / "timing.lock"))
    return dojo


def test_inconclusive_counts_neither_way(noisy):
    """An inconclusive test earns nothing and costs nothing: the grade passes on the other tests, and says so"""
    out = noisy("check", "toy")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "?     -/3 pt  a timing claim the machine decides" in out.stdout
    assert "inconclusive: the timings spread 80%" in out.stdout
    assert "Score 6/6 points · 4/4 tests passing" in out.stdout and "1 inconclusive" in out.stdout
    assert "--rerun-inconclusive" in out.stdout
    doc = json.loads(noisy.results().read_text())
    assert (doc["status"], doc["points"], doc["total"]) == ("pass", 6, 6)
    assert [t["status"] for t in doc["tests"]].count("inconclusive") == 1
    assert doc["inconclusive"] == [t["id"] for t in doc["tests"] if t["status"] == "inconclusive"]
    assert "1 inconclusive" in doc["message"]
    assert noisy.attempts() == [("toy", "check", 6, 6, 1)]


def test_rerun_inconclusive_merges_into_the_last_check(noisy):
    """`dojo check --rerun-inconclusive` runs only the inconclusive tests and merges their outcome"""
    noisy("check", "toy")
    noisy.suite.write_text(noisy.suite.read_text().replace("TOY_NOISY = True", "TOY_NOISY = False"))
    out = noisy("check", "toy", "--rerun-inconclusive")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Score 9/9 points · 5/5 tests passing" in out.stdout and "re-ran 1 inconclusive" in out.stdout
    doc = json.loads(noisy.results().read_text())
    assert doc["inconclusive"] == [] and (doc["points"], doc["total"]) == (9, 9)
    again = noisy("check", "toy", "--rerun-inconclusive")
    assert again.returncode != 0 and "nothing to re-run" in again.stderr


def test_rerun_inconclusive_refuses_a_changed_file(noisy):
    """A re-run after the file changed would merge two different files' results: a clear error instead"""
    noisy("check", "toy")
    noisy.file().write_text(noisy.file().read_text() + "\n# edited\n")
    out = noisy("check", "toy", "--rerun-inconclusive")
    assert out.returncode != 0 and "changed since the last check" in out.stderr


def test_grade_summary_shows_inconclusive(noisy, tmp_path):
    """`dojo grade`'s summary and JSON report count inconclusive tests apart from the points"""
    folder = tmp_path / "alice"
    folder.mkdir()
    shutil.copy(noisy.reference, folder / "toy.py")
    out = noisy("grade", str(folder), "--json", str(tmp_path / "report.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6/6 (1 inconclusive)" in out.stdout and "timing tests the machine was too noisy" in out.stdout
    sub = json.loads((tmp_path / "report.json").read_text())["submissions"][0]
    assert (
        sub["inconclusive"] == 1
        and sub["passed"]
        and sub["katas"]["toy"]["tests"][-1]["status"] == "inconclusive"
    )


def test_interview_scorecard_shows_inconclusive(noisy):
    """A submission whose timing test is inconclusive: the scorecard counts it apart, and it costs no points"""
    from dojo import KATAS_DIR

    shutil.copy(KATAS_DIR / "BANK.md", noisy.toy / "katas" / "BANK.md")
    env = {**noisy.env, "DOJO_FAKE_NOW": "1800000000"}
    started = subprocess.run(
        [sys.executable, "-m", "dojo", "interview", "toy"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    noisy.write(noisy.reference.read_text())
    env["DOJO_FAKE_NOW"] = "1800000060"
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "submit"],
        env=env,
        input="a\n.\n1\nb\n.\n1\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Tests passed:    4/4 (1 timing tests inconclusive on a busy machine: not counted)" in out.stdout
    assert "Points:          6/6" in out.stdout


# ---- the machine-wide lock ---------------------------------------------------------------------

LOCKED_SUITE = """
import time
import pytest


@pytest.mark.machine
@pytest.mark.parametrize("i", range(3))
def test_timed(i):
    start = time.time()
    time.sleep(0.3)
    with open({log!r}, "a") as f:
        f.write(f"{{start}} {{time.time()}}\\n")
"""


def test_machine_tests_never_overlap_across_processes(tmp_path):
    """Two pytest processes at once: their machine tests take turns under the lock file, never overlapping"""
    log = tmp_path / "intervals.txt"
    suite = tmp_path / "test_locked.py"
    suite.write_text(LOCKED_SUITE.format(log=str(log)))
    env = {**os.environ, "DOJO_TIMING_LOCK": str(tmp_path / "timing.lock")}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "dojo.grading.suite.plugin",
        "-p",
        "no:cacheprovider",
        str(suite),
    ]
    procs = [
        subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    intervals = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(intervals) == 6
    overlaps = [(a, b) for a, b in zip(intervals, intervals[1:]) if b[0] < a[1]]
    assert not overlaps, f"machine tests ran at the same moment: {overlaps}"


def test_lock_is_held_only_around_machine_tests(tmp_path):
    """The plugin takes the lock for a machine test (setup to teardown) and not for any other test"""
    suite = tmp_path / "test_which.py"
    suite.write_text(
        textwrap.dedent("""
        import fcntl, os, pytest
        from dojo.testing import TIMING_LOCK_PATH

        def free():
            fd = os.open(TIMING_LOCK_PATH, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
            finally:
                os.close(fd)

        @pytest.mark.machine
        def test_held():
            assert not free()

        def test_free():
            assert free()
    """)
    )
    env = {**os.environ, "DOJO_TIMING_LOCK": str(tmp_path / "timing.lock")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "dojo.grading.suite.plugin",
            "-p",
            "no:cacheprovider",
            str(suite),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout + out.stderr


def test_lock_gives_up_as_inconclusive(tmp_path):
    """A timing test that cannot get the machine in time is inconclusive; the lock is free again afterwards"""
    path = tmp_path / "timing.lock"
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    started = time.monotonic()
    with pytest.raises(Inconclusive, match="another timing test held the machine"):
        with timing_lock(path, wait_s=0.3):
            pass
    assert 0.3 <= time.monotonic() - started < 5
    os.close(holder)
    with timing_lock(path, wait_s=0.3):
        other = os.open(path, os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)


def test_machine_test_that_cannot_get_the_lock_is_inconclusive(tmp_path):
    """Through the plugin: a machine test whose lock stays held is recorded inconclusive, and never runs"""
    (tmp_path / "conftest.py").write_text("import dojo.testing\ndojo.testing.LOCK_WAIT_S = 0.3\n")
    (tmp_path / "test_waits.py").write_text(
        "import pytest\n\n@pytest.mark.machine\ndef test_waits():\n    raise AssertionError('ran')\n"
    )
    lock, results = tmp_path / "timing.lock", tmp_path / "results.json"
    holder = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "dojo.grading.suite.plugin",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_waits.py"),
            f"--dojo-results={results}",
        ],
        cwd=tmp_path,
        env={**os.environ, "DOJO_TIMING_LOCK": str(lock)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    os.close(holder)
    assert out.returncode == 0, out.stdout + out.stderr
    [row] = json.loads(results.read_text())["tests"]
    assert row["outcome"] == "inconclusive" and "another timing test held the machine" in row["message"]


def test_lock_path_that_cannot_be_opened_names_the_variable(tmp_path):
    """A lock file in a folder that does not exist: a usage error naming the path and DOJO_TIMING_LOCK"""
    with pytest.raises(pytest.UsageError, match="DOJO_TIMING_LOCK"):
        with timing_lock(tmp_path / "missing" / "timing.lock"):
            pass


# ---- dojo.machine ------------------------------------------------------------------------------


def scripted(values: dict[str, list[float]]) -> machine.SideBySide:
    """A bench whose runs return the given seconds, round after round (the last value repeating)."""

    def run(seq: list[float]):
        rest, last = iter(seq), [seq[0]]

        def call() -> float:
            last[0] = next(rest, last[0])
            return last[0]

        return call

    return machine.SideBySide({name: run(seq) for name, seq in values.items()})


def ratio_claim(bench: machine.SideBySide) -> machine.Claim:
    """The claim 'kata b / kata a <= 3', on both sides."""
    return machine.Claim(
        (bench.best("kata b") / bench.best("kata a"),),
        (bench.best("plain b") / bench.best("plain a"),),
        lambda q: q[0] <= 3,
        lambda q: f"b costs {q[0]:.2f}x a",
    )


def test_claim_that_holds_passes():
    """The kata's best timings show the claim: pass"""
    bench = scripted({"kata a": [1.0], "kata b": [2.0], "plain a": [1.0], "plain b": [2.0]})
    assert machine.check_claim(bench, ratio_claim, budget_s=60).kata == (2.0,)


def test_machine_that_does_not_show_the_effect_is_inconclusive():
    """The plain loop misses the claim too: this machine cannot show it, so inconclusive, not a fail"""
    bench = scripted({"kata a": [1.0], "kata b": [4.0], "plain a": [1.0], "plain b": [4.1]})
    with pytest.raises(Inconclusive, match="plain timing loop here shows the same"):
        machine.check_claim(bench, ratio_claim, budget_s=60)


def test_noisy_machine_is_inconclusive():
    """Timings whose median is far above their best: too noisy to call a miss a fail"""
    bench = scripted(
        {"kata a": [1.0, 2.0, 2.0], "kata b": [5.0, 9.0, 9.0], "plain a": [1.0], "plain b": [2.0]}
    )
    with pytest.raises(Inconclusive, match="too noisy"):
        machine.check_claim(bench, ratio_claim, budget_s=60)


def test_quiet_clear_miss_fails():
    """A quiet machine, the plain loop shows the claim, the kata's numbers are far from it: fail"""
    bench = scripted({"kata a": [1.0], "kata b": [5.0], "plain a": [1.0], "plain b": [2.0]})
    with pytest.raises(pytest.fail.Exception, match="b costs 5.00x a; a plain timing loop"):
        machine.check_claim(bench, ratio_claim, budget_s=60)


def test_miss_that_comes_and_goes_is_inconclusive():
    """The kata's best misses the claim, but in some round the plain loop beside it missed it too: the
    miss followed the machine's load, not the code, so inconclusive (a busy roofline run once failed the
    reference on a miss like this)"""
    bench = scripted({"kata a": [1.0], "kata b": [5.0], "plain a": [1.0], "plain b": [2.0, 2.0, 4.0, 2.0]})
    with pytest.raises(Inconclusive, match="only 8 of 9 rounds missed it .* came and went"):
        machine.check_claim(bench, ratio_claim, budget_s=60)


def test_retries_until_a_quiet_round_shows_the_claim():
    """A claim missed in the first rounds is measured again while the budget lasts: a later quiet round passes"""
    bench = scripted({"kata a": [1.0], "kata b": [5.0, 5.0, 5.0, 2.0], "plain a": [1.0], "plain b": [2.0]})
    assert machine.check_claim(bench, ratio_claim, budget_s=60).kata == (2.0,) and bench.rounds == 4


def test_cache_bytes_copes_with_odd_reports(tmp_path):
    """The largest readable cache size; garbage and missing entries are ignored, nothing readable is 0"""
    for name, size in {"index0": "48K", "index2": "2048K", "index3": "480M", "index4": "junk"}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "size").write_text(size + "\n")
    (tmp_path / "index5").mkdir()
    assert machine.cache_bytes(tmp_path) == 480 << 20
    assert machine.cache_bytes(tmp_path / "nowhere") == 0


@pytest.mark.parametrize(
    "cache, usable, want",
    [
        (32 << 20, 64 << 30, 128 << 20),  # 4x a 32 MiB L3
        (480 << 20, 64 << 30, 512 << 20),  # an implausible report: the cap
        (480 << 20, 1 << 30, 256 << 20),  # a quarter of what the process may still use (the grader's limit)
        (0, 64 << 30, 64 << 20),  # nothing reported: the floor
    ],
)
def test_streaming_copy_bytes(monkeypatch, cache, usable, want):
    """4x the largest cache, at least 64 MiB, at most 512 MiB and a quarter of the usable memory"""
    monkeypatch.setattr(machine, "cache_bytes", lambda: cache)
    monkeypatch.setattr(machine, "usable_memory", lambda: usable)
    assert machine.streaming_copy_bytes() == want


def test_usable_memory_respects_the_address_space_limit():
    """Under RLIMIT_AS the headroom left by what is mapped already is what the process may use"""
    code = (
        "import resource; from dojo import machine; "
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); print(machine.usable_memory())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert 0 < int(out.stdout) < 3 << 30


# ---- dojo.fakeclock ----------------------------------------------------------------------------


def test_fake_clock_replaces_and_restores_perf_counter():
    """reading() swaps time.perf_counter and a module's own alias of it, and puts both back, even on error"""
    module = type(sys)("kata_like")
    module.perf_counter = time.perf_counter
    clock = fakeclock.FakeClock(step=0.5)
    with pytest.raises(RuntimeError), fakeclock.reading(clock, module):
        assert (time.perf_counter(), module.perf_counter(), time.perf_counter()) == (1000.0, 1000.5, 1001.0)
        raise RuntimeError
    assert time.perf_counter is fakeclock._REAL and module.perf_counter is fakeclock._REAL
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_budget_bounds_the_rounds():
    """A slow machine: rounds stop when the next would end past the budget, so per-test limits hold"""

    def slow() -> float:
        time.sleep(0.05)
        return 1.0

    bench = machine.SideBySide(
        {"kata a": slow, "kata b": lambda: 5.0, "plain a": lambda: 1.0, "plain b": lambda: 2.0}
    )
    started = time.monotonic()
    with pytest.raises(Inconclusive, match=r"only 2 complete round\(s\) fitted in 0.12 s .* at least 3"):
        machine.check_claim(bench, ratio_claim, rounds=3, budget_s=0.12)
    assert bench.rounds == 2 and time.monotonic() - started < 1


def test_one_round_is_never_a_fail():
    """The budget allowed one round (a loaded machine): a clear miss in it is inconclusive, and says why"""

    def slow() -> float:
        time.sleep(0.05)
        return 1.0

    bench = machine.SideBySide(
        {"kata a": slow, "kata b": lambda: 5.0, "plain a": lambda: 1.0, "plain b": lambda: 2.0}
    )
    with pytest.raises(Inconclusive, match=r"only 1 complete round\(s\)"):
        machine.check_claim(bench, ratio_claim, rounds=3, budget_s=0.01)
    assert bench.rounds == 1


def test_three_steady_rounds_are_enough_to_fail():
    """Even when asked for one round, a miss is measured until MIN_FAIL_ROUNDS rounds show it beside the oracle"""
    bench = scripted({"kata a": [1.0], "kata b": [5.0], "plain a": [1.0], "plain b": [2.0]})
    with pytest.raises(pytest.fail.Exception, match="in each of 3 rounds"):
        machine.check_claim(bench, ratio_claim, rounds=1, budget_s=60)
    assert bench.rounds == machine.MIN_FAIL_ROUNDS


@pytest.mark.parametrize("bad", [0.0, float("nan"), float("inf")])
def test_unmeasurable_spread_is_inconclusive(bad):
    """A time that is zero or not finite gives no spread to weigh a miss against: inconclusive"""
    bench = scripted({"kata a": [1.0], "kata b": [5.0], "plain a": [1.0], "plain b": [2.0, bad, 2.0]})
    with pytest.raises(Inconclusive, match="spread cannot be measured"):
        machine.check_claim(bench, ratio_claim, budget_s=60)


def test_spread_needs_three_samples_of_everything():
    """spread() is None until every quantity has MIN_FAIL_ROUNDS positive samples"""
    bench = scripted({"a": [1.0, 1.2, 1.1]})
    bench.measure(2)
    assert bench.spread() is None
    bench.measure(1)
    assert bench.spread() == pytest.approx(0.1)
