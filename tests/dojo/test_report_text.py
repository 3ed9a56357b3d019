"""The terminal report carries only what helps: parametrised cases folded by cause, readable case labels, the
pristine-copies note only beside tampering, and lines that wrap inside their column at any width from 60."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dojo.grading.result import GradeResult, TestResult
from dojo.practice import report

PROPERTY = "load raises ValueError naming the line of a malformed file"
PRISTINE = "graded with pristine copies of the tests and reference solutions, made before your code ran"
FILES = [
    ("bpe v2\npattern null\n", 1),
    ("bpe v1\npatern null\n", 2),
    ("bpe v1\npattern null\nmerge 97 98\nmerge 97 x\n", 4),
    ("bpe v1\npattern null\nmerge 97 98\nmerge 97 300\n", 4),
    ("bpe v1\npattern null\nspecial 300 <|endoftext|>\n", 3),
    ('bpe v1\npattern "(unclosed"\n', 2),
    ("bpe v1\npattern null\nmerge 97 98\nmerge 97\n", 4),
    ("bpe v1\npattern null\n\nmerge 97 98\n  \nmerge 97 x\n", 6),
]


def malformed(content: str, line: int, message: str | None = None) -> TestResult:
    raw = f"test_malformed_file[{content.encode('unicode_escape').decode()}-{line}]"  # pytest's id
    message = message or (
        f"load of a file with a bad line {line}: {content!r}: not written yet "
        "(NotImplementedError), want ValueError"
    )
    return TestResult(
        f"tests/katas/test_bpe.py::{raw}",
        raw,
        PROPERTY,
        2,
        False,
        "failed",
        message,
        case=f"content={repr(content)[:31]}…, line={line}",
    )


def a_result(tests: list[TestResult], notes: list[str] | None = None) -> GradeResult:
    earned = sum(t.points for t in tests if t.outcome == "passed")
    return GradeResult(
        slug="bpe",
        target="workspace",
        path="/home/learner/decode-dojo/workspace/bpe.py",
        tests=tests,
        points=earned,
        total=sum(t.points for t in tests),
        passed=False,
        duration=2.5,
        started=0.0,
        notes=[PRISTINE] if notes is None else notes,
    )


def shown(result: GradeResult, width: int | None = None) -> str:
    con = report.console() if width is None else Console(file=io.StringIO(), width=width, color_system=None)
    if width is None:
        con.file = io.StringIO()
    report.show_result(result, con, title="Byte-level BPE tokenizer: train, encode, decode")
    return con.file.getvalue()


def test_cases_failing_alike_fold_into_one_block():
    """8 malformed files all raising NotImplementedError in load: one line for the property, one for the cause"""
    out = shown(a_result([malformed(c, n) for c, n in FILES]))
    assert out.count(PROPERTY) == 1
    assert f"FAIL  0/16 pt  {PROPERTY}  (8 cases)" in out
    assert "all 8 cases: not written yet (NotImplementedError), want ValueError" in out
    assert len(out.splitlines()) == 4  # heading, block, cause, score


def test_different_causes_stay_apart_and_name_their_cases():
    """cases failing for different reasons each show their message, led by their readable case"""
    tests = [malformed(c, n) for c, n in FILES[:3]]
    tests[1] = malformed(
        *FILES[1], message="load of 'bpe v1\\npatern null\\n': the error should name line 2, got 'bad'"
    )
    tests.append(TestResult("t::x", "test_malformed_file[ok-1]", PROPERTY, 2, False, "passed", case="ok"))
    out = shown(a_result(tests))
    assert f"FAIL  2/8 pt  {PROPERTY}  (4 cases, 3 failing)" in out
    assert (
        "2 of 4 cases (content='bpe v2\\npattern null\\n'…, line=1, content='bpe v1\\npattern null\\nm" in out
    )
    assert "content='bpe v1\\npatern null\\n'…, line=2: load of 'bpe v1" in out


def test_raw_pytest_ids_are_never_shown():
    """a parametrised case is its property and a readable label; pytest's id (escapes, dashes) never appears"""
    out = shown(a_result([malformed(*FILES[2], message="got 3, want 4")]))
    assert f"{PROPERTY}  (content=" in out
    assert "[bpe v1" not in out and "merge 97 x\\n-4]" not in out


def test_passing_cases_fold_into_one_line():
    """every case passing: one line with the points of all of them"""
    tests = [
        TestResult(
            f"t::s[{n}]",
            f"test_seed[{n}]",
            "update returns every position so far",
            1,
            False,
            "passed",
            case=f"seed={n}",
        )
        for n in range(3)
    ]
    out = shown(a_result(tests))
    assert "pass  3/3 pt  update returns every position so far  (3 cases)" in out and "seed=" not in out


def test_pristine_note_only_when_something_was_changed():
    """the pristine-copies note is news only when the learner's code changed a guarded file"""
    tests = [malformed(*FILES[0])]
    assert "pristine" not in shown(a_result(tests))
    tampered = "/repo/tests/katas/test_bpe.py changed while your code was being graded (this grade used the pristine copy)"
    out = shown(a_result(tests, notes=[PRISTINE, tampered]))
    assert f"Note: {PRISTINE}" in out and f"Note: {tampered}" in out


@pytest.mark.parametrize("width", [60, 80, 120])
def test_lines_wrap_inside_their_column(width):
    """at 60, 80 and 120 columns no line is wider than the terminal, and a wrapped line continues under its
    own column: a property under the property, a message under the message"""
    long_message = (
        "encode('the quick brown fox jumps over the lazy dog'): got [256, 257, 32, 258], "
        "want [256, 257, 259] (the earliest-learned pair merges first)"
    )
    tests = [
        malformed(*FILES[0], message=long_message),
        TestResult(
            "t::b",
            "test_b",
            "encode merges the earliest-learned pair first, not the longest vocabulary "
            "match, at every step of every chunk",
            3,
            False,
            "failed",
            long_message,
        ),
    ]
    out = shown(a_result(tests, notes=[PRISTINE, "x changed while your code was being graded " * 3]), width)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    block = lines.index(next(line for line in lines if "encode merges the earliest" in line))
    column = lines[block].index("encode merges")
    assert lines[block + 1].startswith(" " * column) and lines[block + 1][column] != " "
    message = [line for line in lines[block + 1 :] if line.startswith("        encode('the quick")][0]
    after = lines[lines.index(message) + 1]
    assert after.startswith(" " * 8) and after[8] != " " and after.strip() in long_message
    assert [line for line in lines if line.startswith("Note: ")] and all(
        line.startswith(("Note: ", "Score ", "      ", "  ", "bpe")) for line in lines
    )


def test_plain_output_never_wraps():
    """in a pipe (tests, files) a report line stays one line whatever its length"""
    message = "x" * 300
    out = shown(a_result([TestResult("t::a", "test_a", "p", 1, False, "failed", message)]))
    assert f"        {message}\n" in out


def test_a_property_wrapped_over_two_lines_is_not_cut():
    """a test's property is its docstring's first paragraph whole: a sentence the docstring wraps over two
    lines reads to its end, not to the first line break ("... not the draft's (chi-square per")"""
    from types import SimpleNamespace

    from dojo.grading.suite.plugin import property_of

    def test_sampled():
        """Sampled output follows the target's distribution, not the draft's (chi-square per
        previous token over 3000 tokens)

        Details a report does not show."""

    item = SimpleNamespace(function=test_sampled, name="test_sampled")
    assert property_of(item) == (
        "Sampled output follows the target's distribution, not the draft's (chi-square per previous token "
        "over 3000 tokens)"
    )
    assert property_of(SimpleNamespace(function=None, name="test_no_doc_here")) == "no doc here"


def test_working_shows_a_spinner_and_the_time_on_a_terminal_and_a_line_elsewhere():
    """a long grading says it is under way: on a terminal a spinner beside the words and the time elapsed
    (erased when it ends); in a pipe one plain line before it, nothing drawn"""
    import time

    terminal = Console(file=io.StringIO(), force_terminal=True, width=80, highlight=False)
    with report.working(terminal, "Grading toy [full suite]"):
        time.sleep(0.3)
    drawn = terminal.file.getvalue()
    assert "Grading toy [full suite]" in drawn and "0:00:00" in drawn, repr(drawn)
    assert any(frame in drawn for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"), f"no spinner frame in {drawn!r}"

    pipe = report.console()  # stdout under pytest is no terminal: plain text
    pipe.file = io.StringIO()
    with report.working(pipe, "Grading toy [full suite]"):
        pass
    assert pipe.file.getvalue() == "Grading toy [full suite] ...\n"
