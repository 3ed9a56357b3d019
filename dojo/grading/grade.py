"""Grading: run a kata's hidden suite on one implementation, in a guarded subprocess.

`grade(slug, target)` copies to a temporary folder (the *pristine copies*) the kata's suite, the
grading plugin and only the reference modules the suite needs (dojo.grading.view: never the kata's own
reference or its twins), runs pytest there in a child process with a wall-clock timeout, a memory
limit (RLIMIT_AS), a cap on what it may write (RLIMIT_FSIZE) and no core dumps, and reads the
plugin's signed records (dojo.grading.channel), never pytest's text: a forged or repeated record, a test
without an outcome or a process that ended early is an error, never a pass. Whatever the learner's
code does (loops, allocates without bound, exits, segfaults, prints megabytes, raises at import,
edits the tests: reported, and the verdict comes from the copies), the answer is a GradeResult with
a reason, in bounded time. Every grading is scanned by dojo.grading.integrity (findings in the result, the
points untouched). Left out: what the practice loop does with a grade (dojo.practice.check), notebooks
(dojo.notebook grades their extracted .py here and maps the outcomes back to cells).

For take-homes and interviews (`sandboxed=True`: dojo.interview.takehome, dojo.interview.session.submit) the grade is
a security boundary as far as bubblewrap makes it one (dojo.grading.sandbox): no network, no repository or
home folder, every process dies with the grading, a process cap. Where bwrap cannot run, the grading
runs as without it and a note says "NOT sandboxed". What no sandbox stops: code in the test process
can still lie to pytest (patch it, read the suite's oracles out of memory); the integrity scan flags
the code that does, and a person judges it.

A timing test that could not decide on a busy machine is *inconclusive* (dojo.testing): it earns no
points and costs none (its points leave the total), and does not stop a pass. `grade(...,
only=[...])` runs just some tests: dojo.practice.rerun re-runs the ones the last check left inconclusive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import dojo
from dojo import catalog, targets
from dojo.grading import channel, integrity, sandbox, view

DEFAULT_TIMEOUT_S = float(os.environ.get("DOJO_TIMEOUT", "120"))  # the whole suite, start-up included
DEFAULT_TEST_TIMEOUT_S = float(os.environ.get("DOJO_TEST_TIMEOUT", "30"))  # any one test
DEFAULT_MEMORY_LIMIT = int(float(os.environ.get("DOJO_MEMORY_LIMIT") or 3 * 2**30))  # bytes of address space
OUTPUT_LIMIT = 64 * 2**20  # bytes any one file the test process writes may reach (its output included)
OUTPUT_TAIL = 8000  # characters of the test process's own output kept for diagnosis
SANDBOX_NOTE = ("sandboxed (bubblewrap): no network, no repository or home folder, only this kata's suite "
                "and the other katas' reference parts it needs; every process ends with the grading")


@dataclass
class TestResult:
    id: str
    name: str
    property: str  # what the test checks, in the kata's terms (first docstring line)
    points: int
    example: bool  # a README worked example
    outcome: str  # passed | failed | skipped | inconclusive (a timing test the machine was too noisy to decide)
    message: str = ""
    duration: float = 0.0

    __test__ = False  # not a pytest test class


@dataclass
class GradeResult:
    slug: str
    target: str  # as asked: workspace | solutions | katas | a path
    path: str  # the file graded
    tests: list[TestResult]
    points: int  # earned
    total: int  # available
    passed: bool  # every test passed and nothing went wrong
    duration: float  # seconds, wall clock
    started: float  # epoch seconds
    error: str | None = None  # why the run ended abnormally, or could not run
    examples_only: bool = False
    notes: list[str] = field(default_factory=list)  # things the learner should know (tampering ...)
    output: str = ""  # tail of the test process's own output, for diagnosis
    sandboxed: bool = False  # ran inside the bubblewrap sandbox (dojo.grading.sandbox)
    integrity: list[str] = field(default_factory=list)  # dojo.grading.integrity's findings: "bpe.py:3: what"
    digest: str | None = None  # sha256 of the graded file as it was graded (a re-run must see the same file)

    @property
    def inconclusive(self) -> list[TestResult]:
        """Timing tests the machine was too noisy to decide: neither earned nor counted in the total."""
        return [t for t in self.tests if t.outcome == "inconclusive"]

    @property
    def status(self) -> str:
        """Exercism's vocabulary: pass, fail (some test failed), error (the run itself broke).
        Inconclusive tests do not change it: a pass with some inconclusive is a pass."""
        if self.error and not self.tests:
            return "error"
        return "pass" if self.passed else "fail"

    def to_json(self) -> dict:
        """The results.json document: Exercism's version-3 fields plus dojo's points and properties.

        Extension: a test's status may be "inconclusive" besides pass / fail / skip (see `inconclusive`);
        "inconclusive" at the top lists those tests' ids, and `dojo check --rerun-inconclusive` re-runs them.
        """
        failing = [t for t in self.tests if t.outcome in ("failed", "skipped")]
        unsure = self.inconclusive
        message = self.error or (
            f"{len(failing)} of {len(self.tests)} tests failing" if failing else None
        )
        if unsure and not self.error:
            message = (f"{message}; " if message else "") + (
                f"{len(unsure)} inconclusive (the machine was too noisy to decide; not counted)")
        return {
            "version": 3,
            "status": self.status,
            "message": message,
            "kata": self.slug,
            "target": self.target,
            "path": self.path,
            "points": self.points,
            "total": self.total,
            "duration": round(self.duration, 3),
            "started": self.started,
            "examples_only": self.examples_only,
            "notes": self.notes,
            "sandboxed": self.sandboxed,
            "integrity": self.integrity,
            "digest": self.digest,
            "inconclusive": [t.id for t in unsure],
            "tests": [
                {
                    "name": t.property,
                    "status": _STATUS.get(t.outcome, "fail"),
                    "message": t.message or None,
                    **asdict(t),
                }
                for t in self.tests
            ],
        }


_STATUS = {"passed": "pass", "skipped": "skip", "inconclusive": "inconclusive"}


def score(tests: list[TestResult], error: str | None) -> tuple[int, int, bool]:
    """(points earned, points available, passed): skipped and inconclusive tests count for neither;
    passed needs no error, at least one test passed, and every other test passed or inconclusive."""
    counted = [t for t in tests if t.outcome not in ("skipped", "inconclusive")]
    points = sum(t.points for t in counted if t.outcome == "passed")
    total = sum(t.points for t in counted)
    passed = error is None and bool(counted) and all(t.outcome == "passed" for t in counted)
    return points, total, passed


class NoSuite(FileNotFoundError):
    """The kata has no hidden suite yet."""


def grade(
    slug: str,
    target: str = "workspace",
    *,
    examples_only: bool = False,
    timeout: float | None = None,
    test_timeout: float | None = None,
    memory_limit: int | None = None,
    sandboxed: bool = False,
    only: list[str] | None = None,
) -> GradeResult:
    """Run the hidden suite of `slug` on `target` and return what happened.

    target: workspace | solutions | katas | a directory of <slug>.py files | one .py file.
    Raises catalog.UnknownKata, NoSuite, FileNotFoundError (missing implementation; the message says
    how to create it) and ValueError (bad target). Everything the learner's code does is in the result.
    sandboxed: run inside the bubblewrap sandbox (take-homes, interviews); where the machine cannot,
    the run goes as without it and a note says "NOT sandboxed" and why.
    only: test names (TestResult.name, parameters included) to run instead of the whole suite.
    """
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    # a shorter run gets a shorter per-test limit, so one slow test still leaves time for the rest
    test_timeout = min(DEFAULT_TEST_TIMEOUT_S, timeout / 2) if test_timeout is None else test_timeout
    memory_limit = DEFAULT_MEMORY_LIMIT if memory_limit is None else memory_limit
    kata = catalog.get(slug)
    if not kata.has_suite:
        raise NoSuite(f"kata {slug!r} has no tests yet ({kata.suite} is missing)")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix=f"dojo-grade-{slug}-") as tmp_name:
        tmp = Path(tmp_name)
        path = targets.resolve(slug, target)
        digest = _digest(path)
        findings = integrity.scan(path, slug)
        _pristine_copies(tmp, kata)
        why_not = sandbox.unavailable() if sandboxed else None
        graded = path if not sandboxed or why_not else _into_view(path, tmp)
        watched = _guarded(kata)
        before = {p: _digest(p) for p in watched}
        suite = str(tmp / "tests" / "katas" / kata.suite.name)
        cmd = [
            sys.executable, "-m", "pytest", *([f"{suite}::{name}" for name in only] if only else [suite]),
            "-c", str(_write_ini(tmp)), "--rootdir", str(tmp),
            "-p", "dojo.grading.plugin", "-p", "no:cacheprovider", "-q", "--tb=no", "--no-header",
            f"--target={graded}", f"--dojo-test-timeout={test_timeout:g}",
        ] + (["--examples-only"] if examples_only else [])
        env = {
            "PYTHONPATH": str(tmp), "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # only our plugin: faster start, nothing else in the way
        }
        box = None if not sandboxed or why_not else sandbox
        with channel.Receiver() as receiver:
            returncode, timed_out = _run(cmd, tmp, env, timeout, memory_limit, tmp / "output.txt", receiver, box)
            output = _tail(tmp / "output.txt")
            result = _read_results(receiver, returncode, timed_out, timeout, output)
        notes = ["graded with pristine copies of the tests and reference solutions, made before your code ran"]
        if sandboxed:
            notes.append(f"NOT sandboxed: {why_not}" if why_not else SANDBOX_NOTE)
        notes += _tampering(kata, before)
    tests, error = result
    points, total, passed = score(tests, error)
    return GradeResult(
        slug=slug, target=str(target), path=str(path), tests=tests, points=points, total=total, passed=passed,
        duration=time.time() - started, started=started, error=error, examples_only=examples_only,
        notes=notes, output=output, sandboxed=bool(sandboxed and not why_not), integrity=findings, digest=digest,
    )


# ---- the child process -------------------------------------------------------------------------


def _pristine_copies(tmp: Path, kata: catalog.Kata) -> None:
    """Copy under `tmp` what the suite needs and nothing more: the kata's suite and the conftest beside
    it, the reference modules of dojo.grading.view (never the kata's own), and the plugin with the dojo
    modules it and the suite import.
    Readable by every uid: the sandbox may run the child as another one."""
    suites, solutions = targets.suites_dir(), targets.solutions_dir()
    (tmp / "tests" / "katas").mkdir(parents=True)
    for src in [kata.suite, *sorted(suites.glob("conftest.py"))]:
        shutil.copyfile(src, tmp / "tests" / "katas" / src.name)
    if solutions.is_dir():
        (tmp / "solutions").mkdir()
        for name in ["__init__", *view.reference_modules(kata.slug)]:
            if (solutions / f"{name}.py").is_file():
                shutil.copyfile(solutions / f"{name}.py", tmp / "solutions" / f"{name}.py")
    runner = Path(dojo.__file__).resolve().parent
    for name in view.runner_modules(kata.slug):  # "grading.plugin": grading/plugin.py, and each __init__.py above it
        parts = name.split(".")
        module = view.module_file(runner, name).relative_to(runner)
        for rel in [*(Path(*parts[:i], "__init__.py") for i in range(len(parts))), module]:
            (tmp / "dojo" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(runner / rel, tmp / "dojo" / rel)
    _readable(tmp)


def _into_view(path: Path, tmp: Path) -> Path:
    """A copy of the submission inside the grading folder (the sandbox shows nothing else of the disk)."""
    copy = tmp / "submission" / path.name
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    _readable(copy.parent)
    return copy


def _readable(folder: Path) -> None:
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def _guarded(kata: catalog.Kata) -> list[Path]:
    """The files whose change would matter to a learner: the kata's suite, conftest files beside it,
    and the reference solutions (a suite may import any of them)."""
    suites = targets.suites_dir()
    files = [kata.suite, *sorted(suites.glob("conftest.py"))]
    return files + (_files(targets.solutions_dir()) if targets.solutions_dir().is_dir() else [])


def _files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and "mutants" not in p.parts and ".hypothesis" not in p.parts
    )


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _tampering(kata: catalog.Kata, before: dict[Path, str | None]) -> list[str]:
    """Notes on guarded files that changed, appeared or vanished while the learner's code ran.

    Reported, not put back: the verdict came from the pristine copies anyway, and writing a file
    back could undo a real edit someone made meanwhile.
    """
    notes = []
    for path in _guarded(kata):
        if path not in before:
            notes.append(f"{path} appeared while your code was being graded: if your code made it, delete it")
    for path, digest in before.items():
        if _digest(path) != digest:
            notes.append(
                f"{path} changed while your code was being graded (this grade used the pristine copy): "
                f"if your code did that, put it back with `git checkout -- {path}`"
            )
    return notes


def _write_ini(tmp: Path) -> Path:
    ini = tmp / "pytest.ini"
    ini.write_text("[pytest]\nmarkers =\n    slow: loads the real SmolLM2 model\n")
    return ini


# Sets the limits (and, in the sandbox as root, drops to its own uid first: the process cap never
# binds uid 0), then becomes pytest: a launcher instead of preexec_fn, which is unsafe when
# `dojo grade --jobs N` starts children from several threads. Arguments: memory, output,
# processes (0: no cap), uid (-1: keep), then pytest's command line.
_LAUNCH = (
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


def _run(cmd, cwd: Path, env: dict, timeout: float, memory_limit: int, output: Path,
         receiver: channel.Receiver, box=None) -> tuple[int | None, bool]:
    """Run `cmd` (a python command line) in its own session under resource limits, inside the sandbox
    when `box` is dojo.grading.sandbox; (returncode, timed_out). Its output goes to a file, never a pipe that
    could fill up; its results to `receiver`."""
    env = {**env, **receiver.env}
    if box is None:
        prefix, limits, env = [], ["0", "-1"], {**os.environ, **env}
    else:
        uid = box.child_uid()
        prefix = box.bwrap_args(cwd, box.timing_lock(), uid=uid)
        limits, env = [str(box.process_limit()), str(-1 if uid is None else uid)], box.environment(env)
    launch = [*prefix, sys.executable, "-c", _LAUNCH, str(memory_limit), str(OUTPUT_LIMIT), *limits, *cmd[1:]]
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            launch, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, pass_fds=receiver.pass_fds,
        )
        receiver.close_child_ends()
        try:
            code = proc.wait(timeout=timeout)
            return (code if box is None else box.exit_status(code)), False
        except subprocess.TimeoutExpired:
            return None, True
        finally:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and anything it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - OUTPUT_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ---- reading what the plugin wrote -------------------------------------------------------------


def _read_results(receiver: channel.Receiver, returncode, timed_out: bool, timeout: float, output: str):
    """(tests, error) from the plugin's signed records. A clean run has an `end` record whose exit
    status is the process's, and exactly one outcome for every test collected; anything else is an
    error: a forged or repeated record, a missing outcome, or a process that ended early."""
    try:
        records = receiver.records()
    except channel.ChannelError as exc:
        return [], f"the grading results were tampered with ({exc}): not graded"
    collected = next((r["collected"] for r in records if "collected" in r), [])
    started = [r["start"] for r in records if "start" in r]
    rows: dict[str, dict] = {}
    for record in records:
        if "row" in record:
            if record["row"]["id"] in rows:
                return [], f"two outcomes arrived for '{record['row']['property']}': not graded"
            rows[record["row"]["id"]] = record["row"]
    end = next((r["end"] for r in records if "end" in r), None)
    ids = [t["id"] for t in collected]
    if end is not None and not timed_out and end["exitstatus"] == returncode:
        if set(rows) != set(ids):
            missing, extra = len(set(ids) - set(rows)), len(set(rows) - set(ids))
            return [], f"the outcomes do not match the tests collected ({missing} missing, {extra} unknown): not graded"
        if rows:
            return [TestResult(**rows[i]) for i in ids], None
        if returncode == 5:
            return [], "the suite selected no tests" + (" (it has no example tests)" if end.get("examples_only") else "")
        errors = [r["error"] for r in records if "error" in r]
        why = "\n".join(_last_lines(e["message"], 8) for e in errors) or _last_lines(output)
        return [], f"the test suite could not run (pytest exit code {returncode}):\n{why}"
    current = next((t for t in reversed(started) if t not in rows), None)
    current_prop = next((t["property"] for t in collected if t["id"] == current), None)
    reason = _why_stopped(returncode, timed_out, timeout, current_prop)
    if not collected:
        return [], f"{reason}; no test ran.\n{_last_lines(output)}".rstrip()
    tests = []
    for test in collected:
        if test["id"] in rows:
            tests.append(TestResult(**rows[test["id"]]))
        elif test["id"] == current:
            tests.append(TestResult(**test, outcome="failed", message=reason))
        else:
            tests.append(TestResult(**test, outcome="failed", message="not run: the grading run had stopped"))
    return tests, reason


def _why_stopped(returncode, timed_out: bool, timeout: float, current: str | None) -> str:
    during = f" while testing '{current}'" if current else ""
    if timed_out:
        return f"grading stopped after the {timeout:g} s time limit{during}: an infinite loop, or far too slow"
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        why = {
            signal.SIGSEGV: "crashed with a segmentation fault",
            signal.SIGBUS: "crashed with a bus error",
            signal.SIGABRT: "aborted",
            signal.SIGKILL: "was killed (SIGKILL), most likely for using too much memory",
            signal.SIGXFSZ: f"wrote more than {OUTPUT_LIMIT // 2**20} MiB of output and was stopped",
        }.get(sig, f"was killed by {name}")
        return f"the test process {why}{during}"
    return (
        f"the test process exited with code {returncode} before it finished{during}: "
        "does your code call os._exit() or exit the process?"
    )


def _last_lines(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])
