"""dojo.grading.judging.peak: the judge reads how far one call raised a worker's peak memory, from outside it.

The "worker" here is a plain child python that does one thing when told (touch 100 MB, nothing, or start
a process) while this process watches; each property is read from the Peak that `watch` gives. Then the
same through the judge's real worker, with and without bwrap, and the plugin's side: a `measured` test
that cannot measure ends inconclusive, any other fails.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dojo import ROOT, catalog
from dojo.grading import grade
from dojo.grading.confine import sandbox
from dojo.grading.judging import judge, peak

MB = 2**20
# the child starts, says so, waits for a line, does `action`, says so, and waits for a second line before it exits
CHILD = """
import os, sys, time
{before}print("ready", flush=True)
sys.stdin.readline()
{action}
print("done", flush=True)
sys.stdin.readline()
"""
ACTIONS = {
    "nothing": "pass",
    "touch 100 MB": 'held = b"\\1" * (100 * 2**20)  # every page written: resident',
    # written into shared memory, then the pages dropped from the process: the data stays in RAM, unseen by VmHWM
    "shared 100 MB, dropped": (  # a MiB at a time, each MiB's pages dropped once written
        "import mmap\nm = mmap.mmap(-1, 100 * 2**20, flags=mmap.MAP_SHARED)\n"
        "for at in range(0, 100 * 2**20, 2**20):\n"
        "    for i in range(at, at + 2**20, 4096): m[i] = 1\n"
        "    m.madvise(mmap.MADV_DONTNEED, at, 2**20)"
    ),
    "fork, reap": "pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)",
    "fork, leave running": "pid = os.fork()\nif pid == 0: time.sleep(30); os._exit(0)",
    # a helper started before the block (HELPER) ends in it, unreaped: a zombie whose peak is gone
    "helper ends": "os.kill(helper, 9); time.sleep(0.2)",
}
HELPER = "helper = os.fork()\nif helper == 0: time.sleep(30); os._exit(0)\n"


def watched(action: str, adopt: bool = False, **kw) -> tuple[peak.Peak, int]:
    """(what watch saw while a child did `action`, the child's pid); with `adopt`, the child in a memory cgroup
    of its own first (peak.adopt), watched with it."""
    source = CHILD.format(action=ACTIONS[action], before=HELPER if action == "helper ends" else "")
    child = subprocess.Popen(
        [sys.executable, "-c", source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group ends with it, a process it left running included
    )
    group = None
    try:
        assert child.stdout.readline().strip() == "ready", "the child did not start"
        if adopt:
            group = peak.adopt(child.pid, f"dojo-test-{os.getpid()}")
            assert isinstance(group, peak.Group), f"no memory cgroup for the child: {group}"
            kw["group"] = group
        with peak.watch(**kw) as seen:
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done", f"the child failed to {action}"
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=30)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group has ended
            pass
        child.wait()
        if group is not None:
            group.close()
    return seen, child.pid


def test_shared_memory_dropped_from_the_process_is_charged_to_its_cgroup():
    """100 MB written into a shared mapping whose pages the child then drops (madvise DONTNEED): its peak
    resident set barely rises, but its memory cgroup is charged at least 95 MiB; the cgroup is gone after."""
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup for the worker needs root (the judge then says inconclusive)")
    seen, _ = watched("shared 100 MB, dropped", adopt=True)
    assert not seen.unmeasurable, seen.unmeasurable
    assert seen.charged is not None and seen.charged >= 95 * MB, (
        f"100 MB kept in shared memory; the cgroup's peak charge was {(seen.charged or 0) / MB:.1f} MiB"
    )
    assert seen.rise < 16 * MB, f"the pages were dropped, yet the rise was {seen.rise / MB:.1f} MiB"
    assert not list(peak.CGROUP_V1.glob(f"**/dojo-test-{os.getpid()}")), "the test's cgroup was left behind"


def test_no_cgroup_says_why(tmp_path, monkeypatch):
    """Where no memory cgroup can be made, adopt returns a sentence saying so (the measured test then ends
    inconclusive), and leaves nothing behind."""
    monkeypatch.setattr(peak, "CGROUP_V1", tmp_path / "no-such-hierarchy")
    why = peak.adopt(os.getpid(), "dojo-test-nowhere")
    assert isinstance(why, str) and "cgroup" in why, why
    assert not (tmp_path / "no-such-hierarchy").exists()


def test_a_worker_that_touches_100_mb_rises_by_100_mb():
    """100 MB written by the watched process during the block is a rise of at least 95 MiB."""
    seen, _ = watched("touch 100 MB")
    assert not seen.unmeasurable, f"the peak could not be measured here: {seen.unmeasurable}"
    assert seen.rise >= 95 * MB, (
        f"a child wrote 100 MB during the block; the rise was {seen.rise / MB:.1f} MiB"
    )
    assert not seen.others, f"the child started no process, but watch says {seen.others}"


def test_a_worker_that_allocates_nothing_barely_rises():
    """A watched process that allocates nothing during the block rises by under 2 MiB."""
    seen, _ = watched("nothing")
    assert not seen.unmeasurable, f"the peak could not be measured here: {seen.unmeasurable}"
    assert seen.rise < 2 * MB, (
        f"the child did nothing during the block; the rise was {seen.rise / MB:.1f} MiB"
    )


@pytest.mark.parametrize("action", ["fork, reap", "fork, leave running", "helper ends"])
def test_a_process_started_or_ended_during_the_block_is_detected(action):
    """A process the worker starts during the block is in `others`, whether it was reaped or still runs;
    so is one started before that ends in it."""
    seen, pid = watched(action)
    assert not seen.unmeasurable, f"the peak could not be measured here: {seen.unmeasurable}"
    assert seen.others, f"the child ({action}): a process started or ended, but watch saw none"
    if action == "fork, reap":
        assert seen.others == [pid], (
            f"the child reaped its own: its pid {pid} should be named, got {seen.others}"
        )


def test_itself_measures_this_process():
    """With itself=True, memory this process touches in the block is a rise. The 64 MB are a fresh
    anonymous mapping, each page written: a bytes object of that size may reuse heap pages that
    earlier tests left resident (after the kata suites in one process, the rise was 0)."""
    with peak.watch(itself=True) as seen:
        held = mmap.mmap(-1, 64 * MB)
        for at in range(0, 64 * MB, mmap.PAGESIZE):
            held[at] = 1
    assert not seen.unmeasurable, f"the peak could not be measured here: {seen.unmeasurable}"
    assert seen.rise >= 60 * MB, f"this process wrote 64 MB; the rise was {seen.rise / MB:.1f} MiB"
    held.close()


def test_a_refused_reset_is_unmeasurable_never_a_rise(monkeypatch):
    """Where the reset is refused, watch says why and reports no rise and no process started."""

    def refused(pid):
        raise PermissionError(13, "Permission denied", f"/proc/{pid}/clear_refs")

    monkeypatch.setattr(peak, "_reset", refused)
    seen, _ = watched("touch 100 MB")
    assert "cannot be reset" in seen.unmeasurable, f"a refused reset should say so, got {seen.unmeasurable!r}"
    assert seen.rise == 0 and not seen.others, f"nothing is decided after a refused reset, got {seen}"


WORKER_CODE = """
def touch(mb):
    held = b"\\1" * (mb * 2**20)
    return len(held)


def nothing(mb):
    return 0
"""


@contextmanager
def judges_worker(tmp_path, name: str, code: str, boxed: bool) -> Iterator[tuple[judge.Worker, object]]:
    """(the judge's worker, booted, as grade starts it: inside bwrap or not; the candidate's module of `code`
    as the judge sees it), for the block."""
    if boxed and sandbox.unavailable():
        pytest.skip(f"no sandbox on this machine: {sandbox.unavailable()}")
    root = tmp_path / name
    root.mkdir()
    (root / "candidate.py").write_text(code)
    for folder in (tmp_path, root):
        folder.chmod(0o755)  # the sandbox's uid reads the worker's folder
    kata = catalog.get("flash_attention")  # any kata: the worker's reference view is not used here
    folder = grade._worker_folder(root, kata, root / "candidate.py")
    spec = grade._worker_spec(root, folder, kata, "candidate.py", 3 * 2**30, sandbox if boxed else None)
    worker = judge.Worker(spec)
    try:
        yield worker, worker.boot().load()
    finally:
        worker.stop()


@pytest.mark.parametrize("boxed", [False, True], ids=["plain", "bwrap"])
def test_the_judges_worker_is_measured_from_the_judge(tmp_path, boxed):
    """The judge's worker (grade's own command, inside bwrap or not) that touches 100 MB in a call rises by
    at least 95 MiB, seen from the judge; a call that touches nothing, by under 2 MiB."""
    with judges_worker(tmp_path, "candidate", WORKER_CODE, boxed) as (_, module):
        module.nothing(0)
        with peak.watch() as idle:
            module.nothing(100)
        with peak.watch() as busy:
            module.touch(100)
    for seen in (idle, busy):
        assert not seen.unmeasurable and not seen.others, f"the worker could not be measured: {seen}"
    assert busy.rise >= 95 * MB, f"the worker wrote 100 MB in a call; the judge saw {busy.rise / MB:.1f} MiB"
    assert idle.rise < 2 * MB, f"the worker touched nothing in a call; the judge saw {idle.rise / MB:.1f} MiB"


def test_the_charge_counts_memory_touched_at_the_candidates_import(tmp_path):
    """The sandboxed worker's cgroup is made before the candidate's module is imported: a module that
    touches 100 MB at import and nothing in the call is charged >= 95 MiB during the call (with no rise);
    one that touches nothing, under 16 MiB."""
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup for the worker needs root (the judge then says inconclusive)")
    charged = {}
    for name, code in (
        ("candidate", WORKER_CODE),
        ("hoarder", 'HELD = b"\\1" * (100 * 2**20)\n' + WORKER_CODE),
    ):
        with judges_worker(tmp_path, name, code, True) as (worker, module):
            module.nothing(0)
            assert isinstance(worker.memory, peak.Group), f"{name}: the worker has no cgroup: {worker.memory}"
            with peak.watch(group=worker.memory) as seen:
                module.nothing(0)
        assert not seen.unmeasurable and not seen.others, f"{name}: the worker could not be measured: {seen}"
        assert seen.rise < 2 * MB, (
            f"{name} touched nothing in the call; the rise was {seen.rise / MB:.1f} MiB"
        )
        charged[name] = seen.charged / MB
    assert charged["hoarder"] >= 95, (
        f"a module that touched 100 MB at import was charged {charged['hoarder']:.1f} MiB"
    )
    assert charged["candidate"] < 16, (
        f"a module that touched nothing was charged {charged['candidate']:.1f} MiB"
    )


def test_a_root_worker_outside_the_sandbox_gets_no_cgroup(tmp_path):
    """As root without the sandbox the worker runs as uid 0, which could write its own cgroup's files (and
    reset the charge it is measured by): the judge makes none and says why, so the measured test ends
    inconclusive; a candidate's code never runs before the decision."""
    if os.geteuid() != 0:
        pytest.skip("only root's worker runs as uid 0")
    with judges_worker(tmp_path, "candidate", WORKER_CODE, False) as (worker, _):
        why = worker.memory
    assert isinstance(why, str) and "root" in why and "reset" in why, (
        f"a root worker's cgroup was trusted: {why}"
    )
    assert not list(peak.CGROUP_V1.glob(f"**/dojo-worker-{os.getpid()}-*")), "a cgroup was made all the same"


# a process that forks one child, which drops to an unused uid (and puts the socket filter on itself, or not):
# bwrap's shape (root above, the worker below)
DROPPED = """
import os, sys, time
if os.fork() == 0:
    if FILTERED:  # before the uid drops: that uid cannot read this interpreter's library (under /root)
        from dojo.grading.confine import seccomp
        assert seccomp.install() == ""
    os.setgroups([]); os.setgid(2**20 + 4321); os.setuid(2**20 + 4321)
    print("ready", flush=True)
    time.sleep(30)
    os._exit(0)
time.sleep(30)
"""


@pytest.mark.parametrize(
    "drops,filtered,want",
    [(False, True, "root"), (True, True, ""), (True, False, "socket filter")],
    ids=["root", "dropped", "dropped-unfiltered"],
)
def test_untrusted_reads_the_process_that_runs_the_code(drops, filtered, want):
    """untrusted says why where the deepest process (the one that runs the worker's code) is uid 0 or has no
    socket filter, and is "" where it dropped to another uid and holds the filter, whatever runs as root
    above it (bwrap)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a process cannot drop to another uid otherwise")
    if drops:
        code = f"FILTERED = {filtered}\n{DROPPED}"
    else:
        code = "from dojo.grading.confine import seccomp\nseccomp.install()\n"
        code += 'print("ready", flush=True)\nimport time\ntime.sleep(30)'
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT
    )
    try:
        assert child.stdout.readline().strip() == "ready", "the child did not start"
        why = peak.untrusted(child.pid)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    if want:
        assert want in why, f"uid 0: {not drops}, filtered: {filtered}; yet untrusted says {why!r}"
    else:
        assert why == "", f"the worker dropped to uid {2**20 + 4321} and holds the filter, yet: {why}"


MEASURED_SUITE = """
import pytest
from dojo.testing import inconclusive

KATA = "toy"


@pytest.mark.measured
def test_measured():
    \"""measured\"""
    inconclusive("the peak memory cannot be reset here")


def test_unmarked():
    \"""unmarked\"""
    inconclusive("the peak memory cannot be reset here")
"""


def test_only_a_measured_test_may_end_inconclusive(tmp_path):
    """The grading plugin reports a measured test's own Inconclusive as inconclusive; an unmarked test's
    Inconclusive is a failure, as every other skip."""
    (tmp_path / "test_suite.py").write_text(MEASURED_SUITE)
    cmd = [sys.executable, "-m", "pytest", "test_suite.py", "-q", "-p", "no:cacheprovider"]
    cmd += ["-p", "dojo.grading.suite.plugin", "--dojo-results", "out.json"]
    subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=120)
    rows = {t["name"]: t["outcome"] for t in json.loads((tmp_path / "out.json").read_text())["tests"]}
    assert rows == {"test_measured": "inconclusive", "test_unmarked": "failed"}, rows


def test_cgroups_left_by_judges_no_longer_running_are_swept(tmp_path, monkeypatch):
    """adopt removes the empty dojo-worker-PID-N cgroups of judges that have ended (PID not running), and
    keeps a live judge's and any other cgroup."""
    hierarchy = tmp_path / "memory"
    own = hierarchy / "own"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name in (f"dojo-worker-{dead.pid}-1", f"dojo-worker-{os.getpid()}-1", "someone-else"):
        (own / name).mkdir(parents=True)
    monkeypatch.setattr(peak, "CGROUP_V1", hierarchy)
    real = peak.Path

    def cgroup_file(path):  # /proc/self/cgroup says this process's memory cgroup is "/own"
        return tmp_path / "cgroup" if str(path) == "/proc/self/cgroup" else real(path)

    (tmp_path / "cgroup").write_text("4:memory:/own\n")
    monkeypatch.setattr(peak, "Path", cgroup_file)
    peak.adopt(os.getpid(), "dojo-test-sweep")  # not a real cgroup folder: it cannot take a process
    left = sorted(p.name for p in own.iterdir())
    assert f"dojo-worker-{dead.pid}-1" not in left, f"an ended judge's cgroup was kept: {left}"
    assert f"dojo-worker-{os.getpid()}-1" in left and "someone-else" in left, left
