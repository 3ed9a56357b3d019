"""A failure points at its cause: the builds_on marker (dojo.grading.suite.causes), on the toy suite and on
the kata suites."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dojo.grading.suite import causes

SUITES = sorted((Path(__file__).parents[1] / "katas").glob("test_*.py"))
BROKEN_WORDS = "def add(a, b):\n    return a + b\n\n\ndef count_words(text):\n    return {}\n"


def rows(dojo, source: str, tmp_path: Path) -> dict[str, dict]:
    target, results = tmp_path / "toy.py", tmp_path / "results.json"
    target.write_text(source)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(dojo.suite),
            "-q",
            "-p",
            "dojo.grading.suite.plugin",
            "-p",
            "no:cacheprovider",
            f"--target={target}",
            f"--dojo-results={results}",
        ],
        env=dojo.env,
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return {row["name"]: row for row in json.loads(results.read_text())["tests"]}


def test_a_failure_after_its_failed_basis_names_it_first(dojo, tmp_path):
    """a builds_on test whose named basic test failed starts with 'probably because ...', its own message below"""
    got = rows(dojo, BROKEN_WORDS, tmp_path)
    basic, composite = got["test_count_words_example"], got["test_count_words_whitespace"]
    assert basic["outcome"] == composite["outcome"] == "failed"
    assert not basic["message"].startswith("probably")
    first, rest = composite["message"].split("\n", 1)
    assert first == "probably because 'count_words counts repeated words' failed; fix that first"
    assert "count_words('a  b\\n')" in rest


def test_no_prefix_when_the_basis_passed(dojo, tmp_path):
    """a builds_on test whose basic test passed keeps its own message alone"""
    split_on_space = BROKEN_WORDS.replace(
        "return {}",
        "out = {}\n    for w in text.split(' '):\n        out[w] = out.get(w, 0) + 1\n    return out",
    )
    got = rows(dojo, split_on_space, tmp_path)
    assert got["test_count_words_example"]["outcome"] == "passed"
    assert got["test_count_words_whitespace"]["message"].startswith("count_words(")


def test_function_name_drops_parameters():
    assert causes.function_name("test_half[fp16]") == "test_half"
    assert causes.function_name("test_plain") == "test_plain"


@pytest.mark.parametrize("suite", SUITES, ids=lambda p: p.stem)
def test_every_basis_exists_and_comes_earlier(suite):
    """each builds_on name is a test of the same suite, defined above the test that names it (a name may come
    from a module-level tuple of names: `builds_on(*BASICS)`)"""
    tree = ast.parse(suite.read_text())
    where = {node.name: node.lineno for node in tree.body if isinstance(node, ast.FunctionDef)}
    tuples = {
        target.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == causes.MARKER:
                names = [
                    n
                    for arg in deco.args
                    for n in (
                        tuples[arg.value.id] if isinstance(arg, ast.Starred) else [ast.literal_eval(arg)]
                    )
                ]
                for name in names:
                    assert name in where, (
                        f"{suite.name}: {node.name} builds on {name}, which is no test there"
                    )
                    assert where[name] < node.lineno, (
                        f"{suite.name}: {node.name} builds on {name}, defined below it"
                    )
