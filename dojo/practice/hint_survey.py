"""`python -m dojo.practice.hint_survey [slugs...]`: the blind check of `dojo hint` against the mutants.

For each mutant, the hint `dojo hint` would give first (dojo.practice.hints, on that mutant's
results from dojo.grading.proof.first_failures' run) beside the mutant's bug, for a person to judge
whether the hint names the concept the mutant broke.
"""

from __future__ import annotations

import sys

from dojo import catalog
from dojo.grading.proof import mutant
from dojo.grading.proof.check_katas import execute
from dojo.grading.proof.first_failures import survey_runs
from dojo.grading.suite.causes import function_name
from dojo.practice import hints


def main(argv: list[str] | None = None) -> int:
    slugs = (argv if argv is not None else sys.argv[1:]) or [k.slug for k in catalog.load()]
    katas = [catalog.get(s) for s in slugs]
    runs = survey_runs(katas)
    execute(runs, 2)
    for run in (r for r in runs if r.kind == "survey"):
        kata = catalog.get(run.slug)
        failing = list(dict.fromkeys(function_name(r["name"]) for r in run.rows if r["outcome"] == "failed"))
        n = hints.choose(kata.hint_helps(), set(), failing)
        first = kata.hints()[n - 1].strip().splitlines()[0] if n else "(no hint)"
        print(f"{run.slug}/{run.source.stem}: {mutant.bug(run.source)}\n    hint {n}: {first[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
