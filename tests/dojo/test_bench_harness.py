"""The `make bench` harness: medians, interleaving, goals, the report files and the docs page's table.

Fake engines, fake clocks and fake groups only: nothing here loads a model or times real work.
"""

from __future__ import annotations

import json

import pytest

import benchmarks.__main__ as bench_main
from benchmarks import groups, report
from benchmarks.harness import Goal, Row, interleaved, median, medians


class FakeClock:
    """Advances by `step` each time it is read, so a timed call lasts `step` seconds."""

    def __init__(self, step: float = 1.0):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_median_of_odd_and_even_counts():
    """The figure is the median of the repeats: the middle one, or the mean of the middle two."""
    assert median([3.0, 1.0, 2.0]) == 2.0, "median of 1, 2, 3 should be 2"
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5, "median of 1, 2, 3, 4 should be 2.5"
    assert median([1.0, 1.0, 100.0]) == 1.0, "one slow outlier must not move the median"


def test_median_of_nothing_is_an_error():
    """A median of no measurements raises ValueError instead of reporting a figure."""
    with pytest.raises(ValueError, match="no measurements"):
        median([])


def test_engines_run_interleaved_after_warmup():
    """Engines run A B A B ...: one warm-up round each, then `repeats` rounds, never A A B B."""
    log = []
    engines = {"A": lambda: log.append("A"), "B": lambda: log.append("B")}
    times = interleaved(engines, repeats=3, warmup=1, clock=FakeClock())
    assert log == ["A", "B"] * 4, f"run order should be A B x 4 (1 warm-up + 3 repeats), got {log}"
    assert {k: len(v) for k, v in times.items()} == {"A": 3, "B": 3}, "warm-up runs must not be timed"


def test_interleaving_spreads_drift_over_both_engines():
    """A machine that slows down over time slows both engines alike when they alternate."""
    clock = FakeClock()
    slowdown = iter(range(1, 100))

    def drifting():  # each run takes longer than the last, whichever engine it is
        clock.step = float(next(slowdown))

    t = medians({"A": drifting, "B": drifting}, repeats=5, warmup=0, clock=clock)
    # runs last 1, 2, 3, ... s: A gets 1 3 5 7 9, B 2 4 6 8 10 (run A A A B B B, B would look 2.7x slower)
    assert t == {"A": 5.0, "B": 6.0}, f"identical engines under drift should come out alike, got {t}"


def test_an_engine_may_report_its_own_seconds():
    """An engine returning a number (e.g. decode steps without the prefill) is timed by that number."""
    t = medians({"own": lambda: 0.25, "timed": lambda: None}, repeats=3, clock=FakeClock(step=2.0))
    assert t == {"own": 0.25, "timed": 2.0}, f"own timing 0.25 and clock timing 2.0 expected, got {t}"


def test_repeats_below_one_is_an_error():
    """Zero repeats would give no figure: ValueError."""
    with pytest.raises(ValueError, match="repeats"):
        interleaved({"A": lambda: None}, repeats=0)


@pytest.mark.parametrize(
    ("goal", "ratio", "ours", "want"),
    [
        (Goal(">=", 2.5), 2.5, 1.0, True),  # inclusive: exactly the goal meets it
        (Goal(">=", 2.5), 2.49, 1.0, False),
        (Goal(">", 1), 1.0, 1.0, False),
        (Goal("<=", 1.3, on="ours"), 0.1, 1.31, False),  # a cost: on our figure, not the ratio
        (Goal("<=", 1.3, on="ours"), 9.0, 1.2, True),
        (Goal(">=", 0.6, on="ours", unit="%"), 1.0, 0.59, False),
    ],
)
def test_goal_is_met_by_the_named_figure(goal, ratio, ours, want):
    """A goal compares the row's ratio (or its own figure) with the threshold using its operator."""
    row = Row("g", "what", ours, "x", "peer", 1.0, ratio, goal)
    assert row.met is want, f"{goal} with ratio {ratio}, ours {ours}: met should be {want}, got {row.met}"


def test_goal_without_a_figure_is_undecided():
    """A row with no figure (an engine not installed) neither meets nor misses its goal."""
    assert Row("g", "w", None, "tok/s", goal=Goal(">=", 0.6, on="ours")).met is None, "no figure: met is None"


def test_goal_rejects_unknown_operator_and_target():
    """Goals are validated: an unknown operator or target is a ValueError."""
    with pytest.raises(ValueError, match="op"):
        Goal("=>", 1)
    with pytest.raises(ValueError, match="ratio"):
        Goal(">=", 1, on="peer")


def test_goal_reads_as_text():
    """Goals print as the docs page shows them."""
    assert str(Goal(">=", 2.5)) == ">= 2.5x", str(Goal(">=", 2.5))
    assert str(Goal(">=", 0.6, on="ours", unit="%")) == "ours >= 60%", str(
        Goal(">=", 0.6, on="ours", unit="%")
    )


def test_text_goal_keeps_the_verdict_given():
    """A helper's goal written as text keeps the verdict it came with; JSON shows goals as text."""
    row = Row("bpe", "train", 0.2, "s", "tokenizers", 0.4, 2.0, ">= 1x", True)
    assert row.met is True and row.to_json()["goal"] == ">= 1x", row.to_json()
    assert Row("d", "w", 1.0, "x", goal=Goal(">", 1), ratio=2.0).to_json()["goal"] == "> 1x"


PAGE = "# Title\n\nintro\n\n## Benchmarks\n\nprose\n\n<!-- bench:start -->\nold table\n<!-- bench:end -->\n\n## Next\ntail\n"


def test_page_rewrite_touches_only_the_marked_block():
    """Only the text between the bench markers changes; everything else stays byte for byte."""
    out = report.rewrite_between_markers(PAGE, "new table")
    assert out == PAGE.replace("old table", "new table"), f"unexpected rewrite:\n{out}"
    assert report.rewrite_between_markers(out, "new table") == out, "rewriting twice must change nothing"


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all",
        "<!-- bench:end -->\nx\n<!-- bench:start -->",
        PAGE + PAGE,
    ],
)
def test_page_without_one_ordered_marker_pair_is_an_error(text):
    """Missing, reversed or doubled markers: ValueError, and nothing is guessed."""
    with pytest.raises(ValueError, match="bench:start"):
        report.rewrite_between_markers(text, "table")


FACTS = {
    "cpu": "Fake CPU",
    "cores": 2,
    "threads": 2,
    "ram_gib": 8.0,
    "load_average_at_start": [0.5, 0.4, 0.3],
    "versions": {"torch": "9", "numpy": "9", "transformers": "9"},
    "started": "2026-01-01T00:00:00Z",
    "command": "python -m benchmarks",
}


def test_update_page_writes_the_table_and_machine(tmp_path):
    """--update-docs puts every row, the command and the machine between the markers."""
    path = tmp_path / "benchmarks.md"
    path.write_text(PAGE)
    rows = [
        Row("decode", "decode tok/s", 20.0, "tok/s", "transformers fp32", 5.0, 4.0, Goal(">=", 2.5)),
        Row("grading", "dojo check a|b", 3.0, "s", goal=Goal("<=", 10, on="ours", unit=" s")),
    ]
    report.update_page(path, rows, FACTS, seconds=300)
    text = path.read_text()
    assert "| decode tok/s | 20.0 tok/s | transformers fp32 | 5.00 tok/s | 4.00x | >= 2.5x | yes |" in text, (
        text
    )
    assert "dojo check a\\|b" in text, "a | inside a cell must be escaped"
    assert "python -m benchmarks" in text and "Fake CPU" in text and "5.0 min" in text, text
    assert text.endswith("## Next\ntail\n") and "old table" not in text, text


def test_json_report_has_rows_and_machine_facts(tmp_path):
    """Results go to <timestamp>.json and latest.json, with the machine facts beside the rows."""
    path = report.write_json([Row("g", "w", 1.0, "s")], FACTS, tmp_path, extra={"seconds": 1.0})
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert path.exists() and json.loads(path.read_text()) == latest, "timestamped file and latest.json differ"
    assert latest["machine"]["cpu"] == "Fake CPU" and latest["rows"][0]["what"] == "w", latest


def test_machine_facts_name_what_the_figures_depend_on():
    """Machine facts: CPU, cores, RAM, load average and library versions."""
    facts = report.machine_facts(threads=2)
    for key in ("cpu", "cores", "ram_gib", "load_average_at_start", "versions", "threads"):
        assert key in facts, f"machine facts lack {key}: {facts}"
    assert {"torch", "numpy", "transformers"} <= set(facts["versions"]), facts["versions"]


def test_figures_are_formatted_with_their_units():
    """Shares as percents, ratios with x, other figures with their unit."""
    assert report.fmt(0.634, "%") == "63%" and report.fmt(2.5, "x") == "2.50x", "percent / ratio formats"
    assert report.fmt(4388.93, "x") == "4,389x", "large ratios without decimals"
    assert report.fmt(12.345, "tok/s") == "12.3 tok/s" and report.fmt(None, "s") == "-", "unit formats"


def test_llama_cpp_timer_times_n_steps_after_the_first_token():
    """The llama.cpp timer skips the prompt's forward (first token) and times n more tokens."""
    drawn = []

    class FakeLlama:
        def generate(self, tokens, **kwargs):
            assert kwargs["top_k"] == 1 and kwargs["temp"] == 0.0, f"greedy expected, got {kwargs}"
            while True:
                drawn.append(1)
                yield 7

    groups.llama_cpp_timer(FakeLlama(), [1, 2, 3], 5)()
    assert len(drawn) == 6, f"5 timed steps after the first token means 6 tokens drawn, got {len(drawn)}"


@pytest.fixture
def fake_run(monkeypatch, tmp_path):
    """`python -m benchmarks` with fake groups, results under tmp_path and no torch threads set."""
    calls = []

    def good(ctx):
        calls.append(("good", ctx.quick))
        return [Row("good", "fast thing", 1.0, "s", "peer", 2.0, 2.0, Goal(">", 1))]

    def broken(ctx):
        calls.append(("broken", ctx.quick))
        raise RuntimeError("model file missing")

    def peer(ctx):
        calls.append(("peer", ctx.quick))
        return []

    monkeypatch.setattr(groups, "GROUPS", {"good": good, "broken": broken, "peer": peer})
    monkeypatch.setattr(groups, "PEER_ONLY", ("peer",))
    monkeypatch.setattr(bench_main, "fix_threads", lambda n: n or 2)
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    return calls


def test_a_broken_group_is_reported_and_the_rest_still_run(fake_run, tmp_path, capsys):
    """One group raising gives an error row and exit status 1; the other groups' rows still print."""
    assert bench_main.main(["--quick"]) == 1, "a group that raised must fail the run"
    out = capsys.readouterr().out
    assert "fast thing" in out and "model file missing" in out, out
    assert fake_run == [("good", True), ("broken", True)], (
        f"peer-only groups run only with --peers: {fake_run}"
    )
    doc = json.loads((tmp_path / "latest.json").read_text())
    assert [r["group"] for r in doc["rows"]] == ["good", "broken"] and "group_seconds" in doc, doc


def test_only_and_peers_select_groups(fake_run):
    """--only runs the named groups; --peers adds the peer-only ones."""
    assert bench_main.main(["--only", "good"]) == 0
    bench_main.main(["--peers", "--only", "good", "--only", "peer"])
    assert [name for name, _ in fake_run] == ["good", "good", "peer"], fake_run
