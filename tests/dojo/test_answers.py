"""Answers to follow-up questions: typed over several lines, shown rendered, blank ones earn nothing.

The reading itself is tested in-process (dojo.interview.answer with a scripted stdin or a scripted
$EDITOR); the interview's use of it through `python -m dojo submit` in the toy workspace.
"""

from __future__ import annotations

import io
import shutil
import sqlite3
import sys

import pytest
from test_interview import T0, run, solve

from dojo import KATAS_DIR, catalog
from dojo.interview import answer, ask, bank, evidence, session
from dojo.practice import report


@pytest.fixture
def dojo(dojo):
    shutil.copy(KATAS_DIR / "BANK.md", dojo.toy / "katas" / "BANK.md")
    return dojo


def test_lines_end_at_a_dot_or_end_of_input(monkeypatch, capsys):
    """a plain answer is every line up to one holding only '.', or to end of input; nothing at all is EOFError"""
    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\n\n- a point\n.\nnext\n"))
    assert answer.read_answer("Q?", way="lines") == "first line\n\n- a point"
    assert "a line with only '.'" in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO("cut short\n"))
    assert answer.read_answer("Q?", way="lines") == "cut short"
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(EOFError):
        answer.read_answer("Q?", way="lines")


def test_editor_buffer(tmp_path, monkeypatch):
    """with $EDITOR set, the answer is what the editor saved, minus the question lines dojo wrote there"""
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys\nopen(sys.argv[1], 'a').write('My answer:\\n\\n# a heading of mine\\n**bold**\\n')\n"
    )
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
    assert answer.how(interactive=True) == "editor"
    assert (
        answer.read_answer("Why bytes?\nSecond line.", way="editor")
        == "My answer:\n\n# a heading of mine\n**bold**"
    )
    monkeypatch.setenv("EDITOR", f"{sys.executable} -c 'raise SystemExit(3)'")
    with pytest.raises(RuntimeError, match="exited with status 3"):
        answer.read_answer("Q?", way="editor")


def test_which_reader(monkeypatch):
    """a pipe reads lines; a terminal uses $EDITOR when set, else prompt_toolkit (installed here)"""
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", "vi")
    assert answer.how(interactive=False) == "lines"
    monkeypatch.delenv("EDITOR")
    assert answer.how(interactive=True) == "prompt_toolkit"


def test_model_answer_is_rendered_markdown():
    """a model answer prints as rendered Markdown: kv_cache's '**46 080 bytes in fp32**' loses its stars"""
    q = catalog.get("kv_cache").questions()[0]
    out = report.console()
    out.file = io.StringIO()
    ask.show_model_answer(out, q.answer, q.rubric)
    text = out.file.getvalue()
    assert "46 080 bytes in fp32" in text and "**" not in text and "`" not in text
    assert "  1. Writes the formula" in text


def test_blank_answer_earns_nothing(toy_env):
    """a blank answer stored with every rubric point marked covers none of them"""
    s, _ = session.begin(catalog.get("toy"))
    session.record_answer(s, 1, "   \n", [1, 2])
    session.record_answer(s, 2, "bytes", [1])
    assert {n: a["covered"] for n, a in session.answered(s).items()} == {1: [], 2: [1]}
    card = session.scorecard(session.get(s.id))
    assert card["rubric_covered"] == 1 and card["blank_answers"] == 1


def test_interview_takes_multi_line_answers(dojo):
    """submit: a two-line Markdown answer is stored whole and shown rendered; a blank answer is not marked,
    and the scorecard says it earned nothing"""
    run(dojo, "interview", "toy")
    solve(dojo)
    out = run(dojo, "submit", at=T0 + 60, stdin="It is **kept**:\n- cat, and cat differ\n.\nall\n.\nall\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "Your answer.\nIt is kept:" in out.stdout
        and "**" not in out.stdout.split("Question 1")[1].split("Model")[0]
    )
    assert "No answer given: it covers none of the rubric points." in out.stdout
    assert (
        "Rubric coverage: 1/8 (1 blank answer(s): no points, whatever was marked; 1 marked point(s)"
        " self-assessed, not found in the answer: no credit)"
        in out.stdout  # "regex" is nowhere in the answer
    )
    with sqlite3.connect(dojo.db) as conn:
        stored = conn.execute(
            "SELECT number, answer, covered FROM session_answers ORDER BY number"
        ).fetchall()
    assert stored == [(1, "It is **kept**:\n- cat, and cat differ", "[1, 2]"), (2, "", "[]")]


NONSENSE = "banana banana the GPU is purple, 42 requests because giraffes."
QUESTIONS = [q for k in catalog.load() for q in k.questions()] + [e.question for e in bank.bank()]


def test_nonsense_marked_all_finds_nothing():
    """the nonsense answer marked "all" on kv_cache's bytes-per-token question (5 points): every point
    self-assessed, no evidence of any in the answer"""
    q = catalog.get("kv_cache").questions()[0]
    points = session.marked(q.rubric, NONSENSE, list(range(1, len(q.rubric) + 1)))
    assert [p["found"] for p in points] == [[]] * 5


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.question[:50])
def test_model_answer_marked_all_keeps_its_marks(q):
    """every question's own model answer, marked "all", holds evidence for all its points but at most one"""
    points = session.marked(q.rubric, q.answer, list(range(1, len(q.rubric) + 1)))
    unfound = [p["point"] for p in points if not p["found"]]
    assert len(unfound) <= 1, f"the model answer shows no evidence of {unfound}"


def test_an_answer_with_the_key_terms_scores_them():
    """key terms and numbers are found whatever their case, punctuation, inflection or unit: kv_cache's
    points 2 and 3 are found in an answer that writes their numbers differently, point 5 is not"""
    rubric = catalog.get("kv_cache").questions()[0].rubric
    given = "SmolLM2: 46,080 bytes a token in FP32. The 7B: 512 KiB per token, 2 GiB a 4096-token sequence."
    points = session.marked(rubric, given, [2, 3, 5])
    assert [bool(p["found"]) for p in points] == [True, True, False]  # 2 of the 3 marks earn a point
    assert "46 080 B" in points[0]["found"] and {"0.5 MiB", "4k"} <= set(points[1]["found"])


@pytest.mark.parametrize(
    ("point", "given", "term"),
    [
        ("Blocks + a per-sequence block table, like a KV cache", "the kv-cache's blocks", "KV"),
        ("Blocks + a per-sequence block table, like a KV cache", "one kvcache", "kvcache"),
        ("Merges replace left to right", "merging goes leftwards", "Merges"),
        ("Quantizing the cache as a capacity lever", "quantise the KV_cache", "Quantizing"),
        ("TTFT grows with prompt length", "time to first token", "time to first token"),
        ("Costs 23 040 bytes in fp16", "23040 B", "23 040 bytes"),
        ("~2 GiB per sequence", "2147483648 bytes", "2 GiB"),
        ("3x for SmolLM2", "three times: 3 x", "3x"),
    ],
)
def test_matcher_is_case_punctuation_and_unit_insensitive(point, given, term):
    """a term is found in its other spellings: case, hyphens and underscores, inflections, British -ise,
    an acronym spelled out, thousands grouped or not, a size in another unit"""
    assert term in evidence.found(point, given), [t.text for t in evidence.terms(point)]


@pytest.mark.parametrize(
    ("point", "given"),
    [
        ("Gets SmolLM2 right: 46 080 B/token fp32", "46 081 is close but no"),
        ("Uses a heap", "heat"),
        ("Q4_1 scales", "1"),  # no number 1 in an identifier
    ],
)
def test_matcher_finds_only_the_terms(point, given):
    """a near number, a near word and a digit inside an identifier are not evidence"""
    assert evidence.found(point, given) == []


def test_echoing_the_question_is_no_evidence():
    """a term the question itself holds ("GPU" in a question about GPUs) is not found in an answer that
    repeats it; the point's other terms still are"""
    point = "Knows TP > n_kv_heads replicates KV heads, so the per-GPU saving stops there"
    question = "Llama-2-70B runs tensor-parallel over 8 GPUs. How much KV memory does each GPU hold?"
    assert "GPU" in evidence.found(point, "the GPU is purple")
    assert evidence.found(point, "the GPU is purple", question) == []
    assert "replicates" in evidence.found(point, "each GPU replicates the 8 KV heads", question)
