"""check_katas's runs: one suite on one target (reference, stub or a mutant), its verdict and its cache.

A `Run` knows its pytest arguments; `violations(run)` says what the run shows wrong with the suite
(the reference fails, a test passes on the stub, a mutant survives, a mutant's later failure says
nothing of its cause: a `Survey`, the mutant run to the end). The cache keeps each run's
rows under a digest of every file its verdict depends on (the plugin, the suite, the target, the
modules the run imported), so an unchanged run is not repeated. Running the forks and planning
which runs a kata needs are dojo.grading.proof.check_katas'.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import dojo
from dojo import catalog, targets
from dojo.grading.proof import mutant
from dojo.grading.suite import causes

TEST_TIMEOUT_S = 60.0
JUDGED_SEED = 20261203  # judge-mode runs' input seed (dojo.seeds): not the public one


@dataclass
class Run:
    slug: str
    kind: str  # reference | stub | mutant
    target: Path
    suite: Path
    order: list[str] | None = None  # node ids, fastest first (for mutants)
    source: Path | None = None  # a mutant's own file, when `target` is the module written from its edits
    broken: str | None = None  # why a mutant's edits do not apply (it is then not run)
    rows: list[dict] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False
    judge: bool = False  # judge mode: the target runs in a worker process, the suite never imports it
    killed_apart: bool = (
        False  # a judge-mode mutant that a candidate_process test kills in its in-process twin
    )

    @property
    def worker_spec(self) -> dict:
        """How the judge starts the worker for this run (dojo.grading.judging.protocol.ENV): a plain child, no sandbox
        (check_katas proves the suites, not the sandbox), seeing the repository's references."""
        from dojo.grading import view

        allowed = ",".join(f"solutions.{m}" for m in view.importable(catalog.get(self.slug)))
        cmd = [
            sys.executable,
            "-m",
            "dojo.grading.judging.worker",
            str(self.target),
            f"dojo_target_{self.slug}",
            allowed,
        ]
        env = {
            **os.environ,
            "PYTHONPATH": str(targets.solutions_dir().parent),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        # the project's own code (reference, stub, mutants), which never writes its cgroup: the judge may trust
        # a root worker's (dojo.grading.judging.peak.untrusted), or the measured test would decide nothing here
        return {
            "cmd": cmd,
            "env": env,
            "cwd": str(targets.solutions_dir().parent),
            "output": os.devnull,
            "project_code": True,
        }

    @property
    def name(self) -> str:
        return (self.source or self.target).stem if self.kind in ("mutant", "survey") else self.kind

    def args(self, results: Path, ini: Path) -> list[str]:
        tests = (
            [f"{self.suite}::{node.split('::', 1)[1]}" for node in self.order]
            if self.order
            else [str(self.suite)]
        )
        return (
            [
                *tests,
                "-c",
                str(ini),
                "--rootdir",
                str(targets.katas_dir().parent),
                "--confcutdir",
                str(self.suite.parent),
                "-p",
                "dojo.grading.suite.plugin",
                "-p",
                "no:cacheprovider",
                "-q",
                "--tb=no",
                "--no-header",
                f"--target={self.target}",
                f"--dojo-results={results}",
                f"--dojo-test-timeout={TEST_TIMEOUT_S:g}",
            ]
            + (["-x"] if self.kind == "mutant" else [])
            + (["--judge", f"--input-seed-file={_seed_file(results)}"] if self.judge else [])
        )


def _seed_file(results: Path) -> Path:
    """A file holding JUDGED_SEED for the judge to read (and delete): judge-mode runs grade the inputs a
    secret seed draws, as take-homes do, and the same ones every time, so that a run's cache holds."""
    path = Path(f"{results}.seed")
    path.write_text(str(JUDGED_SEED))
    return path


@dataclass
class Survey(Run):
    """A mutant's run to the end, in the suite's order, machine tests deselected: what a learner with
    that bug reads, first failure first (kind "survey")."""

    def args(self, results: Path, ini: Path) -> list[str]:
        plain = replace(self, kind="survey", order=None)  # no -x, no fastest-first order
        return Run.args(plain, results, ini) + ["-m", "not machine"]


# ---- verdicts ----------------------------------------------------------------------------------


def violations(run: Run) -> list[str]:
    """What is wrong with the suite, judged by this run (empty: nothing)."""
    graded = [r for r in run.rows if r["outcome"] != "skipped"]
    if run.kind == "reference":
        if run.error or not graded:
            return [f"{run.slug}: the suite does not run on the reference: {run.error or 'no tests ran'}"]
        # inconclusive: a timing test the busy machine could not decide, never a verdict on the suite
        return [
            f"{run.slug}: reference fails '{r['property']}': {r['message'][:300]}"
            for r in graded
            if r["outcome"] not in ("passed", "inconclusive")
        ]
    if run.kind == "stub":
        if not run.target.exists():
            return [f"{run.slug}: no stub at {run.target}"]
        return [
            f"{run.slug}: '{r['property']}' passes on the untouched stub"
            for r in graded
            if r["outcome"] == "passed"
        ]
    if run.kind == "survey":
        return unexplained(run)
    source = run.source or run.target
    if run.broken:
        return [f"{run.slug}: mutant {source.name} does not apply: {run.broken}"]
    killed = bool(run.error) or run.killed_apart or any(r["outcome"] == "failed" for r in graded)
    return (
        []
        if killed
        else [f"{run.slug}: mutant {source.name} survives: no test fails on it ({mutant.bug(source)})"]
    )


def unexplained(run: Run) -> list[str]:
    """A survey's failures after the first that are neither the first's own property (its other cases)
    nor explained by a basic test that failed before them ("probably because ...", a builds_on marker)."""
    failed = [r for r in run.rows if r["outcome"] == "failed"]
    if run.error or not failed:
        return []  # killed or not is the mutant's other runs' verdict
    first = failed[0]
    silent = list(
        dict.fromkeys(
            causes.function_name(r["name"])
            for r in failed[1:]
            if r["property"] != first["property"] and not r["message"].startswith(causes.PREFIX)
        )
    )
    if not silent:
        return []
    return [
        f"{run.slug}: mutant {run.name}.py fails '{first['property']}' ({causes.function_name(first['name'])}) "
        f"first, then {', '.join(silent)} without saying '{causes.PREFIX} ...': mark them builds_on the "
        "basic test their failure rests on, placed above them"
    ]


# ---- the cache ---------------------------------------------------------------------------------


def cache_path() -> Path:
    return Path(
        os.environ.get("DOJO_CHECK_CACHE") or dojo.ROOT / ".pytest_cache" / "dojo" / "check_katas.json"
    )


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"<missing>") + b"\0")
    return h.hexdigest()


def runner_files() -> list[Path]:
    """The runner's files a verdict depends on: what runs inside pytest (suite/), judge mode (judging/),
    the audit hook, the channel and timing lock, and the suites' kit."""
    package = Path(dojo.__file__).resolve().parent
    folders = [package / "grading" / "suite", package / "grading" / "judging"]
    files = [
        package / n
        for n in (
            "grading/confine/audit.py",
            "grading/channel.py",
            "grading/machine_lock.py",
            "grading/freezer.py",
            "targets.py",
            "testing.py",
            "machine.py",
            "fakeclock.py",
        )
    ]
    return sorted(p for f in folders for p in f.glob("*.py")) + files


def _inputs(run: Run, deps: list[str]) -> list[Path]:
    """Every file a run's verdict depends on: the runner's, the suite, the target, and the reference
    modules and suite helpers that the run imported (recorded by the run itself)."""
    return runner_files() + [run.suite, run.target] + [Path(d) for d in deps]


def run_key(run: Run) -> str:
    return f"{run.kind}:{run.suite}:{run.target}" + (":judge" if run.judge else "")


def inputs_digest(run: Run, deps: list[str]) -> str:
    """The sha256 of everything the run's verdict depends on (see _inputs): the cache entry's key."""
    return _digest(_inputs(run, deps))


def cached(run: Run, cache: dict) -> dict | None:
    """The cache entry for `run` if none of its inputs changed since it was stored."""
    entry = cache.get(run_key(run))
    if entry and entry.get("digest") == inputs_digest(run, entry.get("deps", [])):
        return entry
    return None


def load_cache() -> dict:
    try:
        doc = json.loads(cache_path().read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def save_cache(cache: dict) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache))
    tmp.replace(path)
