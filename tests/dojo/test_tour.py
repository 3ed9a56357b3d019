"""dojo.tools.tour's reading of a captured tmux pane (the tour itself runs tmux: `make tour`)."""

from __future__ import annotations

from dojo.tools import tour

PANE = """$ step dojo check kv_cache
TOUR-BEGIN 3
kv_cache · KV cache for autoregressive decoding
  FAIL  0/2 pt  update returns every position cached so far   \n\
Score 0/42 points · 0/26 tests passing · 5.9 s
TOUR-EXIT:1
$ step dojo hint kv_cache
TOUR-BEGIN 4
Hint 2 of 5
"""


def test_a_step_is_read_between_its_begin_and_exit_lines():
    assert tour.exit_status(PANE, 3) == 1
    text = tour.step_text(PANE, 3)
    assert text.splitlines()[0].startswith("kv_cache") and text.endswith("5.9 s")
    assert "TOUR-" not in text and "  \n" not in text  # no markers, no trailing spaces


def test_a_step_still_running_or_not_begun_has_no_status():
    assert tour.exit_status(PANE, 4) is None and tour.step_text(PANE, 4) == "Hint 2 of 5"
    assert tour.exit_status(PANE, 5) is None and tour.step_text(PANE, 5) == ""


def test_phrases_match_across_wrapped_lines_and_report_what_is_missing():
    screen = tour.step_text(PANE, 3)
    assert tour.missing(screen, (r"Score 0/\d+ points", r"\bFAIL\b", "Keep going")) == ["Keep going"]
    assert tour.missing("Score 0/42\n   points", (r"Score 0/42 points",)) == []
    assert tour.present(screen, (r"\bFAIL\b", r"\bpass\b")) == [r"\bFAIL\b"]


def test_a_prompt_is_answered_once_each_time_it_waits():
    ask = "Which points did you cover?"
    screen = f"Question 1\n{ask} (1-4): 1\nQuestion 2\n{ask} (1-5): \n\n"
    assert tour.waiting_at(screen, ask, answered=1)
    assert not tour.waiting_at(screen, ask, answered=2)
    assert not tour.waiting_at(screen + "Scorecard: kv_cache\n", ask, answered=1)


def test_the_tour_walks_the_loop_in_order_on_a_real_kata(tmp_path):
    steps = tour.steps("kv_cache", tmp_path)
    commands = [s.command.split()[:2] for s in steps]
    assert commands[1:4] == [["dojo", "start"], ["dojo", "check"], ["dojo", "hint"]]
    assert ["dojo", "submit"] in commands and commands[-1] == ["dojo", "history"]
    assert steps[2].status == 1  # the untouched stub fails
    assert any(
        "chosen for your first failing property" in e for e in steps[3].expect
    )  # why this hint, not hint 1
    interview = next(s for s in steps if s.command.startswith("dojo interview"))
    assert any("starts from the stub" in e for e in interview.expect) and any(
        "backed up" in e for e in interview.expect
    )


def test_the_tour_answers_one_interview_with_nonsense(tmp_path):
    """the self-marking leg: one `dojo submit` runs with $EDITOR writing nonsense, marks every point, and
    wants the scorecard to call the marks self-assessed, not found in the answer"""
    workspace = tmp_path / "workspace"
    tour._setup(tmp_path, workspace)
    assert tour.NONSENSE in (tmp_path / "nonsense.sh").read_text()
    leg = [
        s for s in tour.steps("kv_cache", workspace) if ("Which points did you cover?", "all") in s.answers
    ]
    assert len(leg) == 1 and str(tmp_path / "nonsense.sh") in leg[0].command
    assert any("self-assessed, not found in the answer" in e for e in leg[0].expect)


def test_the_scheduler_leg_wants_every_failure_to_point_at_tpot(tmp_path):
    """the scheduler leg plants the TPOT bug, and its check fails a FAIL entry that is neither the TPOT test
    nor 'probably because' it"""
    pane = (
        f"  FAIL  0/1 pt  {tour.TPOT} over the tokens after the first\n        Finished 'a': tpot 0.2\n"
        "  FAIL  0/2 pt  Finishing frees a request's blocks\n"
        f"        probably because '{tour.TPOT} over the tokens after the first' failed; fix that first\n"
        "  pass  1/1 pt  one token has no tpot\nScore 1/4 points\n"
    )
    assert tour.present(pane, (tour.ELSEWHERE,)) == []
    unexplained = pane.replace(f"probably because '{tour.TPOT}", "probably because 'blocks")
    assert tour.present(unexplained, (tour.ELSEWHERE,)) == [tour.ELSEWHERE]
    check = next(s for s in tour.steps("kv_cache", tmp_path) if s.command == "dojo check scheduler")
    assert check.status == 1 and tour.ELSEWHERE in check.absent
    assert tour.TPOT_RIGHT in (tour.ROOT / "solutions" / "scheduler.py").read_text()  # the line the leg edits


def test_the_stub_check_wants_one_line_naming_what_is_not_written_yet(tmp_path):
    """the untouched stub's check shows a todo line naming the functions not written yet and no FAIL line;
    a screen with a FAIL line per test (the noise it replaced) fails the step"""
    step = tour.steps("kv_cache", tmp_path)[2]
    pane = (
        "kv_cache · KV cache for autoregressive decoding   (/w/kv_cache.py)\n"
        "  todo  0/42 pt  not written yet: KVCache.__init__ (kv_cache.py:30) — 26 tests wait on\n"
        "                 it\nScore 0/42 points · 0/26 tests passing · 5.9 s\n"
        "Keep going: edit the file and run `dojo check kv_cache` again (`dojo hint kv_cache` if stuck).\n"
    )
    assert tour.missing(pane, step.expect) == [] and tour.present(pane, step.absent) == []
    noisy = pane.replace(
        "  todo  0/42 pt  not written yet", "  FAIL  0/2 pt  update returns every position\n"
    )
    assert tour.missing(noisy, step.expect) and tour.present(noisy, step.absent)
