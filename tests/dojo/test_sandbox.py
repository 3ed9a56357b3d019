"""The take-home sandbox, tried the way a cheating candidate would: each route to the reference fails,
a daemon dies with the grading, a fork loop stops at the cap, the network, repository and home
folder are not there; and the reference itself still passes, sandboxed, with no finding.

Gradings of the toy kata (fast) go through dojo.grading.grade in this process; two use real katas (bpe, and
attention's fast twin). Where bwrap cannot run these tests skip with the reason, unless
DOJO_REQUIRE_SANDBOX=1 (set by .ci/run), where they fail.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

import dojo as dojo_package
from dojo.grading import grade
from dojo.grading.confine import sandbox


def submit(toy, source: str, **kw) -> grade.GradeResult:
    """Grade `source` as a take-home toy.py, sandboxed."""
    folder = toy.toy.parent / "submission"
    folder.mkdir(exist_ok=True)
    (folder / "toy.py").write_text(source)
    return grade.grade("toy", str(folder), sandboxed=True, timeout=60, **kw)


STUBS = "def count_words(text):\n    return {}\n"


def got(result: grade.GradeResult, prop: str) -> str:
    """What the submission returned in the test named `prop` (its failure message's 'got ...')."""
    message = next(t.message for t in result.tests if t.property == prop)
    return re.search(r"got (.*?), want", message).group(1)


ROUTES = {
    "plain import": "from solutions.toy import *\n",
    "importlib, computed name": "import importlib\nm = importlib.import_module('sol' + 'utions.toy')\n"
    "add, count_words = m.add, m.count_words\n",
    "exec through sys.path": "import os, sys\nfor p in sys.path:\n    f = os.path.join(p, 'solutions', 'toy.py')\n"
    "    if os.path.exists(f):\n        exec(open(f).read())\n",
    "exec through .pth files": "import glob, site\nfor sp in site.getsitepackages():\n"
    "    for pth in glob.glob(sp + '/*.pth'):\n        for line in open(pth):\n"
    "            f = line.strip() + '/solutions/toy.py'\n            try:\n"
    "                exec(open(f).read())\n            except OSError:\n                pass\n",
    "find in a shell": "import subprocess\nout = subprocess.run(['find', '/', '-name', 'toy.py', '-path', '*solutions*'],"
    " capture_output=True, text=True).stdout.split()\nexec(open(out[0]).read())\n",
}


@pytest.mark.parametrize("route", ROUTES)
def test_a_route_to_the_reference_fails_and_is_flagged(toy, route):
    """each route to the toy reference fails in the sandbox, and the scan names it"""
    source = ROUTES[route]
    if route == "exec through sys.path":  # the reference at its real path too, as a candidate who knows it
        source += f"exec(open({str(toy.reference)!r}).read())\n"
    result = submit(toy, source)
    assert result.sandboxed and result.points == 0, f"{route}: {result.points} points\n{result.output}"
    assert result.integrity, f"{route}: no integrity finding"


def test_patching_pytest_passes_but_is_flagged(toy):
    """a submission that patches pytest's test call scores (code in the test process can lie to
    pytest), and the scan flags the import that did it"""
    result = submit(toy, "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n")
    assert any("_pytest" in f for f in result.integrity), result.integrity


def test_a_setsid_daemon_dies_with_the_grading(toy):
    """a double-forked setsid daemon is gone when grading returns (it would outlive it unsandboxed)"""
    marker = f"{time.time() % 1000:.6f}"[:-1] + "7"  # a sleep length no other process uses
    result = submit(
        toy,
        (
            "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n    os._exit(0)\n"
            "def add(a, b):\n    return a + b\n" + STUBS
        ),
    )
    assert result.sandboxed and result.tests
    time.sleep(0.2)
    alive = [p for p in Path("/proc").glob("[0-9]*") if marker.encode() in _cmdline(p)]
    assert not alive, f"the daemon outlived the grading: pids {[p.name for p in alive]}"


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_a_fork_loop_stops_at_the_cap(toy):
    """forking 300 sleepers stops at the process cap (in-process, where no audit hook refuses the fork);
    in judge mode the worker's audit hook refuses the first fork"""
    source = (
        "import os, time\nforked = 0\ntry:\n    for _ in range(300):\n        if os.fork() == 0:\n"
        "            time.sleep(5)\n            os._exit(0)\n        forked += 1\nexcept OSError:\n    pass\n"
        "def add(a, b):\n    return -forked\n" + STUBS
    )
    forked = -int(got(submit(toy, source, judged=False), "add(2, 3) is 5"))
    assert 0 < forked < min(300, sandbox.process_limit()), (
        f"forked {forked} of 300 (cap {sandbox.process_limit()})"
    )
    judged = submit(toy, source)
    assert judged.points == 0 and any("os.fork" in f for f in judged.integrity), judged.integrity


def test_no_network_repository_or_home(toy, tmp_path):
    """inside: only the loopback interface; the repository and a file in the home folder are absent"""
    home = Path.home() / f".dojo-sandbox-test-{os.getpid()}"
    home.write_text("secret")
    try:
        result = submit(
            toy,
            (
                "import os\n"
                "def add(a, b):\n    return len(open('/proc/net/dev').read().splitlines()) - 2\n"
                f"def count_words(text):\n    return [os.path.exists(p) for p in ({str(dojo_package.ROOT / 'README.md')!r}, "
                f"{str(home)!r}, {str(tmp_path)!r})]\n"
            ),
        )
    finally:
        home.unlink()
    assert got(result, "add(2, 3) is 5") == "1", "interfaces other than loopback"
    assert got(result, "count_words counts repeated words") == "[False, False, False]"


def test_ending_early_or_forging_results_is_an_error(toy):
    """os._exit(0) mid-run, or unsigned records written at exit to the results channel: never a pass.
    In judge mode the exit ends only the worker: the test fails saying so; in-process it is an error."""
    early = submit(toy, "import os\ndef add(a, b):\n    os._exit(0)\n" + STUBS)
    failed = next(t for t in early.tests if t.property == "add(2, 3) is 5")
    assert early.status == "fail" and failed.outcome == "failed", early.to_json()
    assert "exited with code 0" in failed.message, failed.message
    early = submit(toy, "import os\ndef add(a, b):\n    os._exit(0)\n" + STUBS, judged=False)
    assert early.status != "pass" and early.error, early.to_json()
    forged = submit(
        toy,
        judged=False,
        source=(
            "import atexit, json, os\nenv = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
            "fd = int(next(e for e in env if e.startswith(b'DOJO_CHANNEL=')).split(b'=')[1].split(b':')[0])\n"
            "def forge():\n    for seq, rec in enumerate([{'end': {'exitstatus': 0, 'examples_only': False}}]):\n"
            "        os.write(fd, json.dumps({'seq': 99, 'record': rec, 'mac': '0' * 64}).encode() + b'\\n')\n"
            "atexit.register(forge)\n" + "def add(a, b):\n    return a + b\n" + STUBS
        ),
    )
    assert forged.status == "error" and "tampered" in forged.error and forged.points == 0, forged.to_json()


def test_the_reference_passes_sandboxed_with_no_finding(toy):
    """the toy reference, sandboxed: full marks, no finding, and the report says it was sandboxed"""
    result = submit(toy, toy.reference.read_text())
    assert result.passed and result.sandboxed and not result.integrity, result.to_json()
    assert any(n.startswith("sandboxed") for n in result.notes)


def test_without_bwrap_the_report_says_not_sandboxed(dojo, monkeypatch):
    """DOJO_SANDBOX=0 (as on a machine without bwrap): graded as before, and plainly not sandboxed"""
    monkeypatch.setenv("DOJO_KATAS_DIR", dojo.env["DOJO_KATAS_DIR"])
    monkeypatch.setenv("DOJO_SANDBOX", "0")
    sandbox.unavailable.cache_clear()
    try:
        result = grade.grade("toy", "solutions", sandboxed=True)
    finally:
        sandbox.unavailable.cache_clear()
    assert result.passed and not result.sandboxed
    assert "NOT sandboxed: DOJO_SANDBOX=0 is set" in result.notes
    assert result.to_json()["sandboxed"] is False


def test_real_katas_hide_their_reference_and_its_twin(toy, monkeypatch):
    """bpe: `from solutions.bpe import *` scores nothing; attention: its fast twin cannot be imported"""
    monkeypatch.delenv("DOJO_KATAS_DIR")
    folder = toy.toy.parent / "real"
    folder.mkdir()
    (folder / "bpe.py").write_text("from solutions.bpe import *\n")
    (folder / "attention.py").write_text("from solutions.system.kernels.attention_fast import *\n")
    for slug in ("bpe", "attention"):
        result = grade.grade(slug, str(folder), sandboxed=True)
        assert result.sandboxed and result.points == 0, f"{slug}: {result.points}/{result.total}"
        message = result.tests[
            0
        ].message  # judge mode refuses the import; without the audit hook it is not found
        assert ("ModuleNotFoundError" in message or "refused" in message) and result.integrity, message


def test_the_timing_lock_is_not_in_the_sandbox(toy, monkeypatch, tmp_path):
    """the machine-wide timing lock is nowhere in the submission's view: it can neither see nor hold it"""
    lock = tmp_path / "timing.lock"
    monkeypatch.setenv("DOJO_TIMING_LOCK", str(lock))
    lock.touch()
    result = submit(
        toy,
        (
            "import os\n"
            "def add(a, b):\n    return 'visible' if os.path.exists(os.environ['DOJO_TIMING_LOCK']) else 'hidden'\n"
            + STUBS
        ),
    )
    assert got(result, "add(2, 3) is 5") == "hidden", result.tests[0].message


def test_grade_summary_says_not_sandboxed_and_lists_findings(dojo, tmp_path):
    """`dojo grade` without a sandbox: the sandboxed column says NO and a line says why; findings are listed"""
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "toy.py").write_text("import atexit\n" + dojo.reference.read_text())
    dojo.env["DOJO_SANDBOX"] = "0"
    out = dojo("grade", str(folder), "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 finding" in out.stdout and " NO" in out.stdout
    assert f"{folder} toy: NOT sandboxed: DOJO_SANDBOX=0 is set" in out.stdout
    assert f"integrity: {folder} toy: toy.py:1: imports atexit (runs code as the process ends)" in out.stdout


def test_a_crash_inside_reads_as_it_does_outside(toy):
    """a segfault in the sandbox is named as one (bwrap's 128 + signal is read back as the signal)"""
    result = submit(toy, "import faulthandler\ndef add(a, b):\n    faulthandler._sigsegv()\n" + STUBS)
    failed = next(t for t in result.tests if t.property == "add(2, 3) is 5")
    assert result.status == "fail" and "segmentation fault" in failed.message, failed.message
    result = submit(toy, "import ctypes\ndef add(a, b):\n    return ctypes.string_at(0)\n" + STUBS)
    failed = next(t for t in result.tests if t.property == "add(2, 3) is 5")  # judge mode's audit hook
    assert "ctypes.string_at" in failed.message and "refused" in failed.message, failed.message
    result = submit(
        toy, "import ctypes\ndef add(a, b):\n    return ctypes.string_at(0)\n" + STUBS, judged=False
    )
    assert result.status == "fail" and "segmentation fault" in result.error, result.error
