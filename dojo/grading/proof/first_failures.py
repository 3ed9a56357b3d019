"""`python -m dojo.grading.proof.first_failures [--jobs N] [slugs...]`: does each mutant's first failure name its bug?

Runs each kata's suite on every mutant to the end (check_katas' surveys: no -x, the suite's own
order, timing tests left out: they decide nothing about a bug's cause) and prints, per mutant, its
bug (docstring) beside the first failing test and that test's message, for a person to judge.
check_katas proves the later failures point at the first; whether the first names the bug is this.
"""

from __future__ import annotations

import argparse
import sys

from dojo import catalog
from dojo.grading.proof import mutant
from dojo.grading.proof.check_katas import execute, plan
from dojo.grading.proof.suite_runs import Run


def survey_runs(katas: list[catalog.Kata]) -> list[Run]:
    """The reference (execute waits on it) and each runnable mutant's survey, in practice mode."""
    return [r for r in plan(katas) if not r.judge and r.kind in ("reference", "survey")]


def first_failure(rows: list[dict]) -> dict | None:
    """The first failed row, in run order (the suite's order)."""
    return next((r for r in rows if r["outcome"] == "failed"), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dojo.grading.proof.first_failures", description=__doc__.splitlines()[0]
    )
    parser.add_argument("slugs", nargs="*", help="katas (default: all)")
    parser.add_argument("--all", action="store_true", help="list every failure, not only the first")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    args = parser.parse_args(argv)
    katas = [catalog.get(s) for s in args.slugs] if args.slugs else catalog.load()
    runs = survey_runs(katas)
    execute(runs, args.jobs)
    for run in runs:
        if run.kind != "survey":
            continue
        first = first_failure(run.rows)
        print(f"{run.slug}/{run.source.stem}: {mutant.bug(run.source)}")
        if run.error or first is None:
            print(f"    NO FAILURE: {run.error or 'every test passed'}")
            continue
        for row in [r for r in run.rows if r["outcome"] == "failed"] if args.all else [first]:
            lines = row["message"].strip().splitlines()
            print(f"    {row['name']}: {row['property']}\n        {lines[0][:200] if lines else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
