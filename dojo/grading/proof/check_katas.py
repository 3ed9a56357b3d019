"""`python -m dojo.grading.proof.check_katas [--jobs N] [slugs...]`: prove every kata's suite is a fair judge.

For each kata in katas.toml that has a suite, in-process and in judge mode: the suite passes on the
reference (solutions), every graded test fails on the stub (katas), every mutant in
tests/katas/mutants/<slug>/ fails at least one test, and (run to the end) each of its later failures
is its first's property or says "probably because". Optional tests are graded tests here: the proof
holds them to the same rules, and a mutant they kill is killed. Prints a table; exits 1 on any violation.
Runs fork this warm process, N at a time, cached while their inputs are unchanged (--no-cache runs
all; dojo.grading.proof.suite_runs). It proves the suites, not the sandbox.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from dojo import catalog, targets
from dojo.grading.judging.protocol import ENV as judge_env
from dojo.grading.proof import mutant
from dojo.grading.proof.suite_runs import (
    Run,
    Survey,
    cache_path,
    cached,
    inputs_digest,
    load_cache,
    run_key,
    save_cache,
    violations,
)

RUN_TIMEOUT_S = 300.0


# ---- running: forks of a warm process ----------------------------------------------------------


def _warm_up(suites: set[Path]) -> None:
    """Import once the heavy libraries the suites use (directly, or through solutions/), so each forked
    run starts in milliseconds. Reference modules themselves are left to each run."""
    import pytest  # noqa: F401

    import dojo.grading.suite.plugin
    import dojo.testing  # noqa: F401

    used = set()
    for suite in suites:
        try:
            tree = ast.parse(suite.read_text())
        except (OSError, SyntaxError):
            continue  # its run will say what is wrong
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                used |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                used.add(node.module.split(".")[0])
    if "solutions" in used:
        used |= {"numpy", "torch"}
    for name in ("numpy", "torch", "hypothesis"):
        if name in used:
            try:
                __import__(name)
            except ImportError:
                pass


def _child(run: Run, results: Path, ini: Path, log: Path, threads: int) -> None:
    """In the forked child: run pytest on one target and exit; never returns."""
    code = 99
    try:
        os.setpgid(0, 0)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
        if run.judge:
            os.environ[judge_env] = json.dumps({**run.worker_spec, **_fork_worker(run)})
        import pytest

        code = int(pytest.main(run.args(results, ini)))
        roots = (str(targets.solutions_dir()) + os.sep, str(targets.suites_dir()) + os.sep)
        deps = sorted(
            {
                str(Path(f).resolve())
                for m in list(sys.modules.values())
                if (f := getattr(m, "__file__", None)) and str(Path(f).resolve()).startswith(roots)
            }
        )
        Path(f"{results}.deps").write_text(json.dumps(deps))
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _fork_worker(run: Run) -> dict:
    """Fork this warm process (torch imported, nothing run yet) as the judge's first worker: no interpreter
    start per run. {"fd", "pid"} for dojo.grading.judging.judge; a restart execs the spec's command instead."""
    import socket

    from dojo.grading.judging import worker

    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            mine.close()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.setpgid(0, 0)
            spec = run.worker_spec
            worker.serve(
                theirs,
                str(run.target),
                f"dojo_target_{run.slug}",
                [a for a in spec["cmd"][-1].split(",") if a],
            )
        finally:
            os._exit(0)
    theirs.close()
    os.set_inheritable(mine.fileno(), True)
    return {"fd": mine.detach(), "pid": pid}


def execute(runs: list[Run], jobs: int, *, use_cache: bool = True, timeout: float = RUN_TIMEOUT_S) -> None:
    """Fill in rows/error/seconds of every run: references first, each kata's other runs after its
    reference (ordered by its timings), `jobs` at a time."""
    cache = load_cache() if use_cache else {}
    refs = {(r.slug, r.judge): r for r in runs if r.kind == "reference"}
    waiting = {
        key: [r for r in runs if (r.slug, r.judge) == key and r.kind != "reference" and not r.broken]
        for key in refs
    }
    ready: list[Run] = list(refs.values())
    running: dict[int, tuple[Run, Path, float, str, Path]] = {}  # pid -> run, results, start, key, log
    threads = max(1, (os.cpu_count() or 1) // max(1, jobs))
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    warm = False
    with tempfile.TemporaryDirectory(prefix="dojo-check-katas-") as tmp_name:
        tmp = Path(tmp_name)
        ini = tmp / "pytest.ini"
        ini.write_text("[pytest]\nmarkers =\n    slow: loads the real SmolLM2 model\n")

        def finished(run: Run) -> None:
            if run.kind == "reference":
                # machine and candidate-process tests last: their module fixtures (a machine's ceilings,
                # timed under the machine-wide lock) cost seconds that a call's duration does not show
                order = sorted(run.rows, key=lambda r: (bool(r.get("candidate_process")), r["duration"]))
                for other in waiting.get((run.slug, run.judge), []):
                    if other.kind == "mutant" and order and not run.error:
                        other.order = [r["id"] for r in order]
                    ready.append(other)

        n = 0
        while ready or running:
            while ready and len(running) < jobs:
                run = ready.pop(0)
                key = run_key(run)
                hit = cached(run, cache) if use_cache else None
                if hit:
                    run.rows, run.error, run.seconds, run.cached = hit["rows"], hit["error"], 0.0, True
                    finished(run)
                    continue
                if not warm:
                    _warm_up({r.suite for r in runs})  # only when something has to run
                    warm = True
                n += 1
                results, log = tmp / f"{n}.json", tmp / f"{n}.log"
                pid = os.fork()
                if pid == 0:
                    _child(run, results, ini, log, threads)
                running[pid] = (run, results, time.monotonic(), key, log)
            if not running:
                continue
            pid, status = _wait_any(running, timeout)
            run, results, started, key, log = running.pop(pid)
            run.seconds = time.monotonic() - started
            _collect(run, results, status, log, timeout)
            if run.error is None:
                try:
                    deps = json.loads(Path(f"{results}.deps").read_text())
                except (OSError, ValueError):
                    deps = None
                if deps is not None and not any(
                    r["outcome"] == "inconclusive" for r in run.rows
                ):  # re-run those
                    cache[key] = {
                        "digest": inputs_digest(run, deps),
                        "deps": deps,
                        "rows": run.rows,
                        "error": None,
                    }
            finished(run)
    if use_cache:
        save_cache(cache)


def _wait_any(running: dict, timeout: float) -> tuple[int, int | None]:
    """Wait for any child; kill (and report as None status) one that ran past `timeout`."""
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid in running:
            return pid, status
        now = time.monotonic()
        for pid, (_, _, started, _, _) in running.items():
            if now - started > timeout:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                return pid, None
        time.sleep(0.02)


def _collect(run: Run, results: Path, status: int | None, log: Path, timeout: float) -> None:
    try:
        doc = json.loads(results.read_text())
        run.rows = doc["tests"]
    except (OSError, ValueError, KeyError):
        doc = None
    if status is None:
        run.error = f"ran past {timeout:g} s and was stopped"
    elif doc is None:
        code = os.waitstatus_to_exitcode(status)
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        run.error = f"pytest ended without results (exit {code})" + (
            "".join(f"\n    {line}" for line in tail)
        )
    elif not run.rows and doc.get("exitstatus") not in (0, 1):
        errors = "\n".join(e["message"] for e in doc.get("errors", []))
        tail = (errors or (log.read_text(errors="replace") if log.exists() else "")).strip().splitlines()[-8:]
        run.error = f"pytest exit {doc.get('exitstatus')}" + ("".join(f"\n    {line}" for line in tail))


# ---- planning and the table --------------------------------------------------------------------


def plan(katas: list[catalog.Kata]) -> list[Run]:
    """Every run, in both modes (in-process as practice runs it, and judge mode as take-homes do):
    reference, stub, then the mutants (an edits mutant is written out beside the cache); and each
    mutant's survey, in-process (the run to the end that shows whether its failures point at the first)."""
    written = cache_path().parent / "mutants"
    runs = []
    for kata in katas:
        if not kata.has_suite:
            continue
        targets_ = [("reference", kata.reference, None, None), ("stub", kata.stub, None, None)]
        for m in kata.mutants:
            try:
                targets_.append(
                    ("mutant", mutant.materialize(m, kata.reference, written / kata.slug), m, None)
                )
            except (SyntaxError, ValueError) as exc:
                targets_.append(("mutant", m, m, str(exc)))
        for judged in (False, True):
            runs += [
                Run(kata.slug, kind, target, kata.suite, source=source, broken=broken, judge=judged)
                for kind, target, source, broken in targets_
            ]
        runs += [
            Survey(kata.slug, "survey", target, kata.suite, source=source)
            for kind, target, source, broken in targets_
            if kind == "mutant" and not broken
        ]
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dojo.grading.proof.check_katas", description=__doc__.splitlines()[0]
    )
    parser.add_argument("slugs", nargs="*", help="katas to check (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    parser.add_argument("--no-cache", action="store_true", help="re-run everything, even unchanged runs")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds one run may take")
    args = parser.parse_args(argv)
    try:
        katas = [catalog.get(s) for s in args.slugs] if args.slugs else catalog.load()
    except catalog.UnknownKata as exc:
        print(f"check_katas: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    runs = plan(katas)
    execute(runs, args.jobs, use_cache=not args.no_cache, timeout=args.timeout)
    _killed_apart(runs)
    problems = [v for run in runs for v in violations(run)]
    _print_table(katas, runs, time.monotonic() - started)
    for problem in problems:
        print(f"VIOLATION {problem}")
    print(
        f"{len(problems)} violation{'s' if len(problems) != 1 else ''} in {len(katas)} katas"
        if problems
        else "all katas OK"
    )
    return 1 if problems else 0


def _killed_apart(runs: list[Run]) -> None:
    """A judge-mode mutant that only a candidate_process test kills is killed all the same: a take-home
    grading runs those tests apart, in the candidate's process (the in-process twin run shows it)."""
    practice = {(r.slug, r.kind, str(r.target)): r for r in runs if not r.judge}
    for run in runs:
        twin = practice.get((run.slug, run.kind, str(run.target)))
        if run.judge and run.kind == "mutant" and twin is not None:
            run.killed_apart = any(r["outcome"] == "failed" and r.get("candidate_process") for r in twin.rows)


def _print_table(katas: list[catalog.Kata], runs: list[Run], seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("kata", "tests", "reference", "stub", "mutants killed", "failures explained", "seconds"):
        table.add_column(column)
    for kata, judged in [(k, j) for k in katas for j in (False, True)]:
        mine = [r for r in runs if r.slug == kata.slug and r.judge == judged]
        name = f"{kata.slug} (judge)" if judged else kata.slug
        if not mine:
            if not judged:
                table.add_row(kata.slug, "-", "no suite yet", "-", "-", "-", "-")
            continue
        ref = next(r for r in mine if r.kind == "reference")
        stub = next(r for r in mine if r.kind == "stub")
        mutants = [r for r in mine if r.kind == "mutant"]
        graded = [r for r in ref.rows if r["outcome"] != "skipped"]
        ok_ref = sum(r["outcome"] == "passed" for r in graded)
        unsure = sum(r["outcome"] == "inconclusive" for r in graded)
        stub_rows = [r for r in stub.rows if r["outcome"] != "skipped"]
        failing = sum(r["outcome"] == "failed" for r in stub_rows)
        killed = sum(not violations(m) for m in mutants)
        surveys = [r for r in mine if r.kind == "survey"]  # in-process only
        explained = sum(not violations(s) for s in surveys)
        optional = sum(bool(r.get("optional")) for r in graded)
        table.add_row(
            name,
            f"{len(graded)}" + (f" ({optional} optional)" if optional else ""),
            ("ok " if not violations(ref) else "BAD ")
            + f"{ok_ref}/{len(graded)} pass"
            + (f" ({unsure} inconclusive)" if unsure else ""),
            ("ok " if not violations(stub) else "BAD ") + f"{failing}/{len(stub_rows)} fail",
            ("ok " if killed == len(mutants) else "BAD ") + f"{killed}/{len(mutants)}" if mutants else "none",
            ("ok " if explained == len(surveys) else "BAD ") + f"{explained}/{len(surveys)}"
            if surveys
            else "-",
            f"{sum(r.seconds for r in mine):.1f}" + (" (cached)" if all(r.cached for r in mine) else ""),
        )
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    console.print(table, markup=False)
    fresh = sum(not r.cached for r in runs)
    console.print(
        f"{len(runs)} runs ({fresh} run, {len(runs) - fresh} cached) in {seconds:.1f} s", markup=False
    )


if __name__ == "__main__":
    sys.exit(main())
