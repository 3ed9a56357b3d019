"""Grading: run a kata's hidden suite on one implementation, in a guarded subprocess.

`grade(slug, target)` copies the suite, the plugin and the reference modules of dojo.grading.view to a
private folder (the pristine copies), runs pytest there in a limited child (dojo.grading.child) and
reads the plugin's signed records (dojo.grading.outcomes), never pytest's text. Whatever the code does,
the answer is a GradeResult with a reason, in bounded time. Every grading gets the integrity scan;
`sandboxed=True` (take-homes, interviews) adds the sandbox and judge mode (dojo.grading.judging).
Writing results and recording attempts are dojo.practice.check's; notebooks are dojo.notebook's.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dojo
from dojo import catalog, targets
from dojo.grading import channel, child, outcomes, view
from dojo.grading.confine import bounded, sandbox
from dojo.grading.judging import protocol
from dojo.grading.result import GradeResult, TestResult, score

DEFAULT_TIMEOUT_S = float(os.environ.get("DOJO_TIMEOUT", "120"))  # the whole suite, start-up included
DEFAULT_TEST_TIMEOUT_S = float(os.environ.get("DOJO_TEST_TIMEOUT", "30"))  # any one test
DEFAULT_MEMORY_LIMIT = int(float(os.environ.get("DOJO_MEMORY_LIMIT") or 3 * 2**30))  # bytes of address space
SANDBOX_NOTE = (
    "sandboxed (bubblewrap): no network, no repository or home folder, only this kata's suite "
    "and the other katas' reference parts it needs; every process ends with the grading"
)
JUDGE_NOTE = (
    "judge mode: your code ran in its own process; the tests' verdicts were decided in another that "
    "never ran it; tests only your own process can measure are claims not verified, reported apart and "
    "never in the score"
)


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
    judged: bool | None = None,
    only: list[str] | None = None,
    seed: int | None = None,
    public_inputs: bool = False,
) -> GradeResult:
    """Run the hidden suite of `slug` on `target` and return what happened.

    target: workspace | solutions | katas | a directory of <slug>.py files | one .py file.
    Raises catalog.UnknownKata, NoSuite, FileNotFoundError (missing implementation; the message says
    how to create it) and ValueError (bad target). Everything the learner's code does is in the result.
    sandboxed: run the candidate's code inside the bubblewrap sandbox (take-homes, interviews); where the
    machine cannot, the run goes as without it and a note says "NOT sandboxed" and why.
    judged: judge mode (default: as `sandboxed`): the suite runs in a process that never imports the
    candidate's code, which runs in a worker (dojo.grading.judging.judge); tests marked candidate_process then
    run in a second, in-process run, and their points are reported apart.
    only: test names (TestResult.name, parameters included) to run instead of the whole suite.
    seed: judge mode's secret input seed (dojo.seeds): drawn here when None; the result records it, so a
    dispute can replay the same inputs. Outside judge mode the suite's public seeds are used.
    public_inputs: judge with the public seeds all the same (benchmarks compare the two; never a grade).
    """
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    # a shorter run gets a shorter per-test limit, so one slow test still leaves time for the rest
    test_timeout = min(DEFAULT_TEST_TIMEOUT_S, timeout / 2) if test_timeout is None else test_timeout
    memory_limit = DEFAULT_MEMORY_LIMIT if memory_limit is None else memory_limit
    judged = sandboxed if judged is None else judged
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"an input seed is a non-negative integer, not {seed!r}")
    seed = (secrets.randbits(48) if seed is None else seed) if judged and not public_inputs else None
    kata = catalog.get(slug)
    if not kata.has_suite:
        raise NoSuite(f"kata {slug!r} has no tests yet ({kata.suite} is missing)")
    started = time.time()
    # subtle: the grading folder is readable by every uid (the sandbox's child may be another one), so it
    # sits inside a 0700 folder other local users cannot enter; the sandbox binds it alone (its parents
    # there are bwrap's own), so the child never walks through the private one
    with tempfile.TemporaryDirectory(prefix=f"dojo-grade-{slug}-") as private:
        tmp = Path(private) / "grading"
        tmp.mkdir()
        path = targets.resolve(slug, target)
        digest = _digest(path)
        findings = bounded.scan(path, slug)  # integrity.scan in a child limited in memory and time
        _pristine_copies(tmp, kata)
        why_not = sandbox.unavailable() if sandboxed else None
        box = sandbox if sandboxed and not why_not else None
        graded = path if box is None else _into_view(path, tmp)
        watched = _guarded(kata)
        before = {p: _digest(p) for p in watched}
        run = _Run(tmp, kata, examples_only, test_timeout, memory_limit)
        if judged:
            worker = _worker_folder(tmp, kata, path)
            spec = _worker_spec(tmp, worker, kata, path.name, memory_limit, box)
            audit = [f"--audit-allowed={_importable(kata)}"] if box is not None else []
            # the secret seed: outside the grading folder (a sandbox binds that folder alone), read and
            # deleted by the judge before its worker starts
            secret = Path(private) / "input-seed"
            if seed is not None:
                secret.write_text(str(seed))
                secret.chmod(0o600)
            with ThreadPoolExecutor(max_workers=2) as pool:
                # the judge process holds no candidate code: no sandbox needed, its worker has one
                judging = pool.submit(
                    run.suite,
                    path,
                    timeout,
                    only=only,
                    extra=["--judge", *([f"--input-seed-file={secret}"] if seed is not None else [])],
                    env={protocol.ENV: json.dumps(spec), **_recording()},
                )
                # beside it, the tests only the candidate's process can measure (selected by their markers
                # here; the judge's list of them decides below which outcomes count)
                apart = (
                    None
                    if only or not _has_apart_tests(kata)
                    else pool.submit(
                        run.suite,
                        graded,
                        timeout,
                        box=box,
                        extra=[*audit, "-m", "candidate_process or machine"],
                    )
                )
                (tests, error), output = judging.result()
                mine_result = apart.result() if apart is not None else None
            deferred = run.deferred
            if deferred and not error:
                if mine_result is None:  # a re-run of some tests, or markers the scan did not see: now, alone
                    left = max(10.0, timeout - (time.time() - started))
                    mine_result = run.suite(
                        graded, left, only=[t["name"] for t in deferred], box=box, extra=audit
                    )
                (mine, error), more = mine_result
                output += more
                tests = _merged(tests, mine, deferred)
                error = error or _unexpected(mine, deferred)
        else:
            (tests, error), output = run.suite(graded, timeout, only=only, box=box)
        findings += _audit_findings(run.refused, path.name)
        notes = [
            "graded with pristine copies of the tests and reference solutions, made before your code ran"
        ]
        if sandboxed:
            notes.append(f"NOT sandboxed: {why_not}" if why_not else SANDBOX_NOTE)
        if judged:
            notes.append(JUDGE_NOTE)
        notes += _tampering(kata, before)
    # judge mode scores only what the judge decided: what the candidate's process measured is reported apart
    points, total, passed = score([t for t in tests if not (judged and t.candidate_process)], error)
    return GradeResult(
        slug=slug,
        target=str(target),
        path=str(path),
        tests=tests,
        points=points,
        total=total,
        passed=passed,
        duration=time.time() - started,
        started=started,
        error=error,
        examples_only=examples_only,
        notes=notes,
        output=output,
        sandboxed=bool(sandboxed and not why_not),
        integrity=findings,
        digest=digest,
        judged=judged,
        seed=seed,
    )


class _Run:
    """One pytest run of the kata's suite from the grading folder, its outcomes read from the channel."""

    def __init__(self, tmp: Path, kata: catalog.Kata, examples_only: bool, test_timeout: float, memory: int):
        self.tmp, self.kata, self.examples_only = tmp, kata, examples_only
        self.test_timeout, self.memory = test_timeout, memory
        self.ini = _write_ini(tmp)  # once: two runs may start at the same moment
        self.deferred: list[dict] = []
        self.refused: list = []  # the worker's audit findings, as the judge's plugin read them
        self.count = 0

    def suite(self, graded: Path, timeout: float, *, only=None, extra=(), env=None, box=None):
        """((tests, error), output tail) of one run: `box` the sandbox or None, `extra` pytest options."""
        self.count += 1
        suite = str(self.tmp / "tests" / "katas" / self.kata.suite.name)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *([f"{suite}::{name}" for name in only] if only else [suite]),
            "-c",
            str(self.ini),
            "--rootdir",
            str(self.tmp),
            "-p",
            "dojo.grading.suite.plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=no",
            "--no-header",
            f"--target={graded}",
            f"--dojo-test-timeout={self.test_timeout:g}",
            *extra,
        ] + (["--examples-only"] if self.examples_only else [])
        env = {
            "PYTHONPATH": str(self.tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # only our plugin: faster start, nothing else in the way
            **(env or {}),
        }
        log = self.tmp / f"output-{self.count}-{'judge' if '--judge' in extra else 'apart'}.txt"
        with channel.Receiver() as receiver:
            returncode, timed_out = child.run(
                cmd, self.tmp, env, timeout, self.memory, log, receiver, box, hold_s=self.test_timeout
            )
            output = child.tail(log)
            tests, error, records = outcomes.read_results(receiver, returncode, timed_out, timeout, output)
            result = tests, error
        if "--judge" in extra:
            self.deferred = next((r["deferred"] for r in records if "deferred" in r), [])
        self.refused += next((r["audit"] for r in records if "audit" in r), [])
        return result, output


def _recording() -> dict:
    """The judge's call recording (dojo.grading.proof.fixed_inputs), passed on when it is asked for."""
    path = os.environ.get("DOJO_RECORD_CALLS")
    return {"DOJO_RECORD_CALLS": path} if path else {}


def _has_apart_tests(kata: catalog.Kata) -> bool:
    """Whether the suite marks any test as measured in the candidate's process (a cheap look at its text)."""
    try:
        text = kata.suite.read_text()
    except OSError:
        return False
    return "mark.candidate_process" in text or "mark.machine" in text


def _merged(judged: list[TestResult], mine: list[TestResult], deferred: list[dict]) -> list[TestResult]:
    """The judge's outcomes and, for the tests it deferred, the in-process run's, marked as measured in
    the candidate's process; in the suite's order."""
    by_id = {t.id: t for t in mine if t.id in {d["id"] for d in deferred}}
    out = list(judged)
    for d in deferred:
        t = by_id.get(d["id"]) or TestResult(
            **d, outcome="failed", message="not run: the in-process run lost it"
        )
        t.candidate_process = True
        out.append(t)
    return out


def _audit_findings(refused: list, name: str) -> list[str]:
    """The worker's audit refusals as integrity findings, one per line and event:
    "bpe.py:12: inspects stack frames (refused 3 times while it ran: audit event sys._getframe)"."""
    counts: dict[tuple[str, str, str], int] = {}
    for f in refused if isinstance(refused, list) else []:
        if isinstance(f, dict):
            key = (str(f.get("line", "?"))[:12], str(f.get("what", ""))[:300], str(f.get("event", "?"))[:60])
            counts[key] = counts.get(key, 0) + 1
    return [
        f"{name}:{line}: {what} (refused {'once' if n == 1 else f'{n} times'} while it ran: audit event {event})"
        for (line, what, event), n in list(counts.items())[:50]
    ]


def _unexpected(mine: list[TestResult], deferred: list[dict]) -> str | None:
    """An error when the in-process run reported other tests than the ones the judge deferred."""
    if {t.id for t in mine} != {d["id"] for d in deferred}:
        return "the in-process run reported other tests than the judge asked for: not graded"
    return None


# ---- judge mode's worker --------------------------------------------------------------------------

# the wire's modules, and the toy model a suite builds in the worker (dojo.grading.judging.judge.build)
WORKER_MODULES = (
    "grading.judging.protocol",
    "grading.judging.wire",
    "grading.judging.remote",
    "grading.judging.worker",
    "grading.confine.audit",
    "grading.confine.seccomp",
    "toymodel",
)


def _worker_folder(tmp: Path, kata: catalog.Kata, path: Path) -> Path:
    """What the worker may see: the candidate's file, the reference view, the wire's modules and the toy
    model. Never the suite, the plugin or the channel."""
    folder = tmp / "worker"
    (folder / "submission").mkdir(parents=True)
    shutil.copyfile(path, folder / "submission" / path.name)
    _reference_view(folder, kata)
    runner = Path(dojo.__file__).resolve().parent
    for name in WORKER_MODULES:
        _copy_module(runner, name, folder / "dojo")
    _readable(folder)
    return folder


def _importable(kata: catalog.Kata) -> str:
    """The reference modules the candidate's code may import, as the audit hook takes them."""
    return ",".join(f"solutions.{m}" for m in view.importable(kata))


def _worker_spec(tmp: Path, folder: Path, kata: catalog.Kata, name: str, memory: int, box) -> dict:
    """The command, environment and folder the judge starts its worker with (dojo.grading.judging.protocol.ENV)."""
    file = str(folder / "submission" / name)  # (a notebook's extracted code has its own name)
    tail = ["-m", "dojo.grading.judging.worker", file, f"dojo_target_{kata.slug}", _importable(kata)]
    env = {"PYTHONPATH": str(folder), "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
    if box is None:
        cmd = [sys.executable, "-c", child.LAUNCH, str(memory), str(child.OUTPUT_LIMIT), "0", "-1", *tail]
        return {
            "cmd": cmd,
            "env": {**os.environ, **env},
            "cwd": str(folder),
            "output": str(tmp / "worker.txt"),
        }
    uid = box.child_uid()
    prefix = box.bwrap_args(folder, uid=uid)
    limits = [str(box.process_limit()), str(-1 if uid is None else uid)]
    cmd = [*prefix, sys.executable, "-c", child.LAUNCH, str(memory), str(child.OUTPUT_LIMIT), *limits, *tail]
    return {
        "cmd": cmd,
        "env": box.environment(env),
        "cwd": str(folder),
        "output": str(tmp / "worker.txt"),
        "bwrap": True,
    }


# ---- the grading folder ------------------------------------------------------------------------


def _pristine_copies(tmp: Path, kata: catalog.Kata) -> None:
    """Copy under `tmp` what the suite needs and nothing more: the kata's suite and the conftest beside
    it, the reference modules of dojo.grading.view (never the kata's own), and the plugin with the dojo
    modules it and the suite import.
    Readable by every uid: the sandbox may run the child as another one."""
    suites = targets.suites_dir()
    (tmp / "tests" / "katas").mkdir(parents=True)
    for src in [kata.suite, *sorted(suites.glob("conftest.py"))]:
        shutil.copyfile(src, tmp / "tests" / "katas" / src.name)
    _reference_view(tmp, kata)
    runner = Path(dojo.__file__).resolve().parent
    for name in view.runner_modules(kata):
        _copy_module(runner, name, tmp / "dojo")
    _readable(tmp)


def _copy_module(package: Path, name: str, into: Path) -> None:
    """Copy module `name` ("grading.suite.plugin") of the package at `package` into `into`, with every
    __init__.py above it (grading/__init__.py, grading/suite/__init__.py) and the package's own."""
    parts = name.split(".")
    module = view.module_file(package, name).relative_to(package)
    for rel in [*(Path(*parts[:i], "__init__.py") for i in range(len(parts))), module]:
        if (package / rel).is_file():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(package / rel, into / rel)


def _reference_view(folder: Path, kata: catalog.Kata) -> None:
    """folder/solutions/: the reference modules of dojo.grading.view for `kata` (never its own)."""
    solutions = targets.solutions_dir()
    if solutions.is_dir():
        (folder / "solutions").mkdir()
        if (solutions / "__init__.py").is_file():
            shutil.copyfile(solutions / "__init__.py", folder / "solutions" / "__init__.py")
        for name in view.reference_modules(kata):  # "model", "system.kernels.packed_gemm"
            if view.module_file(solutions, name) is not None:
                _copy_module(solutions, name, folder / "solutions")


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
        p
        for p in folder.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and "mutants" not in p.parts
        and ".hypothesis" not in p.parts
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
