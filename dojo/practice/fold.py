"""Folding a report's parametrised tests: one block per test function, one line per cause of failure.

`fold(tests)` groups the cases of one test function; a group's failures are clustered by message
*modulo the parameters* (quoted text and numbers masked), so 8 cases that all raise
NotImplementedError read as one cause. Printing is dojo.practice.report's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dojo.grading.result import TestResult

_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\b\d+(?:\.\d+)?(?:e-?\d+)?\b")


@dataclass
class Cause:
    """Failing cases of one test function whose messages agree modulo the parameters."""

    who: str  # "seed=2" | "all 8 cases" | "3 of 8 cases (seed=0, seed=1, seed=4)"
    message: str  # what they have in common, or the first case's message
    outcome: str  # failed | inconclusive


@dataclass
class Block:
    """One test function in the report: its cases folded."""

    tests: list[TestResult]
    causes: list[Cause] = field(default_factory=list)

    @property
    def first(self) -> TestResult:
        return self.tests[0]

    @property
    def outcome(self) -> str:
        """The worst outcome among the cases: failed, then inconclusive, skipped, passed."""
        for worst in ("failed", "inconclusive", "skipped"):
            if any(t.outcome == worst for t in self.tests):
                return worst
        return "passed"

    @property
    def earned(self) -> int:
        return sum(t.points for t in self.tests if t.outcome == "passed")

    @property
    def points(self) -> int:
        return sum(t.points for t in self.tests)

    @property
    def label(self) -> str:
        """What the block covers beside its property: one case's label, or how many cases."""
        if len(self.tests) == 1:
            return self.first.case
        failing = sum(t.outcome == "failed" for t in self.tests)
        return f"{len(self.tests)} cases" + (f", {failing} failing" if 0 < failing < len(self.tests) else "")


def fold(tests: list[TestResult]) -> list[Block]:
    """The tests as blocks, in order: the cases of one parametrised test function together."""
    blocks: list[Block] = []
    for test in tests:
        if blocks and _function(blocks[-1].first) == _function(test) and "[" in test.name:
            blocks[-1].tests.append(test)
        else:
            blocks.append(Block([test]))
    for block in blocks:
        block.causes = _causes(block.tests)
    return blocks


def _function(test: TestResult) -> str:
    return test.name.split("[", 1)[0]


def _causes(tests: list[TestResult]) -> list[Cause]:
    shown = [t for t in tests if t.outcome in ("failed", "inconclusive") and t.message.strip()]
    clusters: dict[tuple[str, str], list[TestResult]] = {}
    for test in shown:
        clusters.setdefault((test.outcome, _LITERAL.sub("…", test.message.strip())), []).append(test)
    causes = []
    for cases in clusters.values():
        messages = [t.message.strip() for t in cases]
        if len(cases) == 1:
            causes.append(Cause(_case(cases[0], tests), messages[0], cases[0].outcome))
            continue
        who = (
            f"all {len(cases)} cases"
            if len(cases) == len(tests)
            else f"{len(cases)} of {len(tests)} cases ({', '.join(_case(t, tests) for t in cases)})"
        )
        common = _common_tail(messages)
        if len(set(messages)) == 1 or len(common.split()) >= 3:
            causes.append(Cause(who, common, cases[0].outcome))
        else:
            causes.append(Cause(f"{who} alike, e.g. {_case(cases[0], tests)}", messages[0], cases[0].outcome))
    return causes


def _case(test: TestResult, group: list[TestResult]) -> str:
    """A case's readable label; when the row has none (an older results file), its place in the group."""
    return test.case or (f"case {group.index(test) + 1}" if len(group) > 1 else "")


def _common_tail(messages: list[str]) -> str:
    """The end the messages share, from a clause boundary (after ": "): the whole message if all are equal."""
    tail = messages[0]
    for message in messages[1:]:
        n = 0
        while n < min(len(tail), len(message)) and tail[-1 - n] == message[-1 - n]:
            n += 1
        tail = tail[len(tail) - n :]
    if any(tail == m for m in messages):
        return tail
    cut = tail.find(": ")
    return tail[cut + 2 :] if cut >= 0 else ""
