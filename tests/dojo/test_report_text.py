"""The terminal report carries only what helps: parametrised cases folded by cause, readable case labels, the
pristine-copies note only beside tampering, and lines that wrap inside their column at any width from 60."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dojo.grading.result import GradeResult, TestResult
from dojo.grading.suite import causes
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


STUB = """class PagedKVCache:
    def __init__(self, num_blocks):
        raise NotImplementedError

    def fork(self, parent, child):
        raise NotImplementedError


def merge_partials(parts):
    raise NotImplementedError("merge_partials")
"""


def stub_messages(tmp_path) -> dict[str, str]:
    """What a stub's failures say, made by the grader's own wording: uncaught in the learner's file
    (dojo.grading.suite.failures) and caught by a test that wanted an error (dojo.testing.raised)."""
    import importlib.util

    from dojo.grading.suite.failures import failure_message
    from dojo.testing import expect_value_error

    path = tmp_path / "paged_kv.py"
    path.write_text(STUB)
    spec = importlib.util.spec_from_file_location("stub_paged_kv", path)
    kata = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kata)

    def uncaught(fn, *args) -> str:
        with pytest.raises(NotImplementedError) as info:
            fn(*args)
        return failure_message(info, None, target=str(path))

    with pytest.raises(pytest.fail.Exception) as wanted:
        expect_value_error(lambda: kata.merge_partials([]), "merge_partials([])")
    return {
        "init": uncaught(kata.PagedKVCache, 4),
        "merge": uncaught(kata.merge_partials, []),
        "merge wanted ValueError": str(wanted.value.msg),
    }


def failing(name: str, prop: str, message: str, points: int = 1, case: str = "") -> TestResult:
    return TestResult(f"t::{name}", name, prop, points, False, "failed", message, case=case)


def test_a_stub_report_is_short_and_names_each_unwritten_function_once(tmp_path):
    """an untouched stub: every failure is a NotImplementedError, so the report is one line naming each
    function the tests wait on once, where it raises, and how many tests wait; no FAIL line, no
    "probably because", no failing input"""
    said = stub_messages(tmp_path)
    assert said["init"] == "NotImplementedError: not written yet (at paged_kv.py:3, in PagedKVCache.__init__)"
    tests = [failing(f"test_p{n}", f"property {n}", said["init"], 2) for n in range(6)]
    tests[1] = failing(
        "test_p1", "property 1", f"{causes.PREFIX} 'property 0' failed; fix that first\n{said['init']}"
    )
    tests[2] = failing("test_p2", "property 2", f"{said['init']}\nfailing input: ops=[('add', 0, 1)]")
    tests += [failing(f"test_m[{n}]", "merges", said["merge"], case=f"n={n}") for n in range(3)]
    tests.append(failing("test_bad_input", "bad input is a ValueError", said["merge wanted ValueError"]))
    out = shown(a_result(tests))

    lines = out.splitlines()
    assert len(lines) == 3, f"a stub's report is its heading, one line and the score:\n{out}"
    assert lines[1] == (
        "  todo  0/14 pt  not written yet: PagedKVCache.__init__ (paged_kv.py:3), merge_partials "
        "(paged_kv.py:10) — 10 tests wait on them"
    ), out
    assert "FAIL" not in out and "probably because" not in out and "property" not in out
    assert "failing input" not in out and "NotImplementedError" not in out


def test_a_mixed_report_shows_each_real_failure_whole(tmp_path):
    """beside tests waiting on an unwritten function, a real failure keeps its FAIL line and its whole
    message, and so do a case that passes beside unwritten ones and a library's NotImplementedError"""
    said = stub_messages(tmp_path)
    real = "allocate, share, share, release: refcount 4, num_free 2; want 2, 2\nfailing input: n=3"
    torch_says = (
        "NotImplementedError: \"addmm_impl_cpu_\" not implemented for 'Half' (at paged_kv.py:12, in half)"
    )
    tests = [
        failing("test_refcount", "a shared block is freed by its last release", real, 2),
        failing("test_fork", "fork shares every block", said["init"], 3),
        TestResult("t::test_m[0]", "test_m[0]", "merges", 1, False, "passed", case="n=0"),
        failing("test_m[1]", "merges", said["merge"], case="n=1"),
        failing("test_half", "half precision matches", torch_says),
    ]
    out = shown(a_result(tests))
    assert "  FAIL  0/2 pt  a shared block is freed by its last release\n" in out
    assert f"        {real.splitlines()[0]}\n        failing input: n=3\n" in out, out
    assert "  FAIL  1/2 pt  merges  (2 cases, 1 failing)\n" in out, "a half-passing test set aside"
    assert f"  FAIL  0/1 pt  half precision matches\n        {torch_says}\n" in out, "torch's error set aside"
    assert "fork shares every block" not in out
    assert (
        "  todo  0/3 pt  not written yet: PagedKVCache.__init__ (paged_kv.py:3) — 1 test waits on it\n" in out
    )
