"""How many of a suite's judged points a file could earn by looking its answers up: the fixed-input share.

The reference is graded twice in judge mode with two different secret seeds while the judge records a
digest of every call it sends to the worker ($DOJO_RECORD_CALLS, dojo.grading.judging.remote). A test
whose calls are the same under both seeds gives the worker nothing the public suite does not: a file that
hard-codes the public suite's answers can pass it. Those tests' points over the judged total bound what
such a file scores. `python -m dojo.grading.proof.fixed_inputs [slug ...]` prints the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from dojo import catalog

LIMIT = 0.20  # the most a hard-coding file may score in judge mode


@dataclass
class Share:
    slug: str
    total: int  # judged points
    fixed: int  # points of tests whose inputs the seed does not change
    tests: list[str]  # those tests
    error: str | None = None

    @property
    def fraction(self) -> float:
        return self.fixed / self.total if self.total else 0.0


def _calls(slug: str, seed: int, record: Path):
    """(result, {test: Counter of call digests}) of the reference judged with `seed`."""
    from dojo.grading import grade

    record.write_text("")
    before = os.environ.get("DOJO_RECORD_CALLS")
    os.environ["DOJO_RECORD_CALLS"] = str(record)
    try:
        result = grade.grade(slug, "solutions", judged=True, sandboxed=False, seed=seed)
    finally:
        if before is None:
            os.environ.pop("DOJO_RECORD_CALLS", None)
        else:
            os.environ["DOJO_RECORD_CALLS"] = before
    calls: dict[str, Counter] = {}
    for line in record.read_text().splitlines():
        test, _, digest = line.partition("\t")
        calls.setdefault(test, Counter())[digest] += 1
    return result, calls


def share(slug: str, seeds: tuple[int, int] = (1, 2)) -> Share:
    """The fixed-input share of `slug`'s judged points (the reference graded under two seeds)."""
    with tempfile.TemporaryDirectory(prefix="dojo-fixed-") as tmp:
        first, calls_a = _calls(slug, seeds[0], Path(tmp) / "a")
        second, calls_b = _calls(slug, seeds[1], Path(tmp) / "b")
    judged = [t for t in first.tests if not t.candidate_process]
    error = first.error or second.error
    if not error and first.points != first.total:
        error = f"the reference scored {first.points}/{first.total} under seed {seeds[0]}"
    fixed = [t for t in judged if calls_a.get(t.name, Counter()) == calls_b.get(t.name, Counter())]
    return Share(
        slug, sum(t.points for t in judged), sum(t.points for t in fixed), [t.name for t in fixed], error
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dojo.grading.proof.fixed_inputs", description=__doc__)
    parser.add_argument("slugs", nargs="*", help="katas (default: every kata with a suite)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the fixed-input tests")
    args = parser.parse_args(argv)
    slugs = args.slugs or [k.slug for k in catalog.load() if k.has_suite]
    worst = 0
    print(f"{'kata':<16} {'judged':>7} {'fixed':>6} {'share':>6}")
    for slug in slugs:
        s = share(slug)
        bad = s.error or s.fraction > LIMIT
        worst |= bool(bad)
        print(
            f"{slug:<16} {s.total:>7} {s.fixed:>6} {s.fraction:>6.0%}" + (f"  {s.error}" if s.error else "")
        )
        if args.verbose or s.fraction > LIMIT:
            for name in s.tests:
                print(f"    fixed: {name}")
    print(f"limit {LIMIT:.0%}: " + ("over it, or an error, above" if worst else "every kata within it"))
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
