"""`dojo hint` gives the next unseen hint for the most basic failing property (dojo.practice.hints)."""

from __future__ import annotations

import json

from dojo.practice import hints

HELPS = [["test_add"], ["test_words", "test_split"], ["test_split"], []]


def test_the_first_failing_test_picks_its_hint():
    assert hints.choose(HELPS, set(), ["test_split", "test_add"]) == 2
    assert hints.choose(HELPS, {2}, ["test_split", "test_add"]) == 3


def test_a_failure_no_unseen_hint_helps_with_passes_to_the_next():
    assert hints.choose(HELPS, {2, 3}, ["test_split", "test_add"]) == 1


def test_pick_names_the_failing_test_that_chose():
    assert hints.pick(HELPS, set(), ["test_split", "test_add"]) == (2, "test_split")
    assert hints.pick(HELPS, {2, 3}, ["test_split"]) == (1, None)
    assert hints.pick(HELPS, {1, 2, 3, 4}, []) == (None, None)


def test_without_failures_the_order_of_hints_md():
    assert hints.choose(HELPS, {1}, []) == 2
    assert hints.choose(HELPS, {1, 2, 3, 4}, ["test_add"]) is None


def test_failing_tests_in_suite_order_without_parameters(tmp_path):
    path = tmp_path / "toy.json"
    path.write_text(
        json.dumps(
            {
                "tests": [
                    {"name": "test_a[1]", "status": "pass"},
                    {"name": "test_b[x]", "status": "fail"},
                    {"name": "test_a[2]", "status": "fail"},
                    {"name": "test_b[y]", "status": "fail"},
                ]
            }
        )
    )
    assert hints.failures(path) == [("test_b", "test_b[x]"), ("test_a", "test_a[2]")]  # no property: the name
    assert hints.failures(tmp_path / "missing.json") == []


def test_hint_follows_the_last_check(dojo):
    """after a check where only count_words fails, `dojo hint` gives its hint; --next keeps HINTS.md's order"""
    dojo.write("def add(a, b):\n    return a + b\n\n\ndef count_words(text):\n    return {}\n")
    dojo("check", "toy")
    out = dojo("hint", "toy")
    assert "Hint 2 of 2" in out.stdout and "str.split()" in out.stdout and "Helps:" not in out.stdout
    said = " ".join(out.stdout.split())  # a narrow terminal may wrap the heading
    assert "chosen for your first failing property 'count_words counts repeated words'" in said, out.stdout
    assert "--next` goes in order" in said, out.stdout
    out = dojo("hint", "toy", "--next")
    assert "Hint 1 of 2" in out.stdout and "chosen for" not in out.stdout


def test_every_helps_name_is_a_test_of_its_suite():
    """each name on a kata's Helps lines is a test function of that kata's suite"""
    import ast

    from dojo import catalog

    for kata in catalog.load():
        tests = {n.name for n in ast.parse(kata.suite.read_text()).body if isinstance(n, ast.FunctionDef)}
        for number, names in enumerate(kata.hint_helps(), 1):
            unknown = set(names) - tests
            assert not unknown, f"{kata.slug} hint {number} helps with unknown tests: {sorted(unknown)}"
