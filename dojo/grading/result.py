"""What a grading returns: one TestResult per test, the GradeResult around them, and the score.

`GradeResult.to_json()` is the results.json document (Exercism's version 3 plus dojo's points,
properties, integrity findings and the "inconclusive" extension). `score` counts points: skipped
and inconclusive tests count for neither side, optional tests (`optional_points`) are graded apart.
It runs nothing (dojo.grading.grade) and writes no file (dojo.practice.report.write_results).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class TestResult:
    id: str
    name: str
    property: str  # what the test checks, in the kata's terms (first docstring line)
    points: int
    example: bool  # a README worked example
    outcome: (
        str  # passed | failed | skipped | inconclusive (a timing test the machine was too noisy to decide)
    )
    message: str = ""
    duration: float = 0.0
    candidate_process: bool = (
        False  # measured inside the candidate's process (judge mode cannot vouch for it)
    )
    case: str = ""  # a parametrised test's case in words ("seed=2"), for the report; "" when not parametrised
    optional: bool = False  # an optional part's test: its points are graded apart, never needed to pass

    __test__ = False  # not a pytest test class


@dataclass
class GradeResult:
    slug: str
    target: str  # as asked: workspace | solutions | katas | a path
    path: str  # the file graded
    tests: list[TestResult]
    points: int  # earned
    total: int  # available
    passed: bool  # every required (not optional) test passed and nothing went wrong
    duration: float  # seconds, wall clock
    started: float  # epoch seconds
    error: str | None = None  # why the run ended abnormally, or could not run
    examples_only: bool = False
    notes: list[str] = field(default_factory=list)  # things the learner should know (tampering ...)
    output: str = ""  # tail of the test process's own output, for diagnosis
    sandboxed: bool = False  # ran inside the bubblewrap sandbox (dojo.grading.confine.sandbox)
    integrity: list[str] = field(
        default_factory=list
    )  # dojo.grading.scan.integrity's findings: "bpe.py:3: what"
    digest: str | None = None  # sha256 of the graded file as it was graded (a re-run must see the same file)
    judged: bool = False  # judge mode: the verdict was decided in a process the candidate's code never ran in
    seed: int | None = None  # judge mode's secret input seed (dojo.seeds); `dojo grade --seed` replays it

    @property
    def candidate_points(self) -> tuple[int, int]:
        """(earned, available) points of the tests measured in the candidate's own process."""
        mine = [t for t in self.tests if t.candidate_process and t.outcome != "inconclusive"]
        return sum(t.points for t in mine if t.outcome == "passed"), sum(t.points for t in mine)

    @property
    def optional_points(self) -> tuple[int, int]:
        """(earned, available) points of the optional tests, outside points, total and passed. In judge mode
        only those the judge decided: one measured in the candidate's process is in candidate_points alone."""
        mine = [
            t
            for t in self.tests
            if t.optional
            and t.outcome not in ("skipped", "inconclusive")
            and not (self.judged and t.candidate_process)
        ]
        return sum(t.points for t in mine if t.outcome == "passed"), sum(t.points for t in mine)

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
        required = [t for t in self.tests if not t.optional]
        failing = [t for t in required if t.outcome in ("failed", "skipped")]
        unsure = self.inconclusive
        message = self.error or (f"{len(failing)} of {len(required)} tests failing" if failing else None)
        extra, available = self.optional_points
        if available and not self.error:
            message = (f"{message}; " if message else "") + (
                f"optional part {extra}/{available} points (graded apart, not needed to pass)"
            )
        if unsure and not self.error:
            message = (f"{message}; " if message else "") + (
                f"{len(unsure)} inconclusive (the machine was too noisy to decide; not counted)"
            )
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
            "judged": self.judged,
            "seed": self.seed,
            # points measured in the candidate's process: judge mode cannot vouch for these, so under it they
            # are claims not verified, outside points and total
            "candidate_process_points": dict(zip(("points", "total"), self.candidate_points)),
            # the optional part's tests (@pytest.mark.optional): outside points, total and status
            "optional_points": dict(zip(("points", "total"), self.optional_points)),
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
    """(points earned, points available, passed) of the required tests: optional ones count for neither
    (GradeResult.optional_points), nor do skipped and inconclusive ones; passed needs no error, at least
    one required test passed, and every other required test passed or inconclusive."""
    counted = [t for t in tests if not t.optional and t.outcome not in ("skipped", "inconclusive")]
    points = sum(t.points for t in counted if t.outcome == "passed")
    total = sum(t.points for t in counted)
    passed = error is None and bool(counted) and all(t.outcome == "passed" for t in counted)
    return points, total, passed
