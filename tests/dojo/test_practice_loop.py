"""The practice loop as a learner meets it: welcome, list, start, check, hint, reset, solution, status."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_welcome_suggests_the_first_kata(dojo):
    """`dojo` alone: what the katas are, progress, the next kata and how to start it"""
    out = dojo()
    assert out.returncode == 0, out.stderr
    assert "2 katas" in out.stdout and "0 of 2 passing" in out.stdout
    assert "dojo start toy" in out.stdout
    assert "· serve ·" in out.stdout, "the welcome screen names dojo serve"


def test_welcome_says_how_to_get_dojo_on_the_path_only_when_it_is_not(dojo):
    """`make practice` runs .venv/bin/dojo: when the shell cannot find `dojo`, the welcome says how to
    activate the venv; with dojo on PATH it does not"""
    hint = "source .venv/bin/activate"
    dojo.env["PATH"] = "/usr/bin:/bin"
    assert hint in dojo().stdout, "the welcome does not say how to put dojo on PATH"
    dojo.env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    assert hint not in dojo().stdout, "the welcome says to activate a venv whose dojo is already on PATH"


def test_list_shows_every_kata_with_status(dojo):
    """`dojo list`: number, slug, title, difficulty, minutes and status of each kata, in manifest order"""
    out = dojo("list")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert lines[1].split()[:2] == ["1", "toy"] and "not started" in lines[1] and " 5 " in lines[1]
    assert lines[2].split()[:2] == ["2", "later"] and "no tests yet" in lines[2]


def test_list_shows_a_katas_note_before_its_title(dojo):
    """A manifest entry's optional `note` comes first in its title column; the real manifest marks
    mixed_precision as the training warm-up it is, and no other kata"""
    manifest = dojo.toy / "katas" / "katas.toml"
    manifest.write_text(
        manifest.read_text().replace('slug = "later"\n', 'slug = "later"\nnote = "a preview"\n')
    )
    lines = dojo("list").stdout.splitlines()
    assert "(a preview) A kata whose suite" in next(line for line in lines if " later " in line)
    assert "(" not in next(line for line in lines if " toy " in line).split("Toy:")[0], (
        "a note where none was set"
    )

    real = {k: v for k, v in dojo.env.items() if k != "DOJO_KATAS_DIR"}
    out = subprocess.run(
        [sys.executable, "-m", "dojo", "list"],
        env=real | {"COLUMNS": "200"},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    noted = [line.split()[1] for line in out.stdout.splitlines() if "(training warm-up)" in line]
    assert noted == ["mixed_precision"], f"the training warm-up note is on {noted}:\n{out.stdout}"


def test_start_check_fail_then_pass(dojo):
    """start copies the stub and shows the prompt; check fails on the stub, passes on the reference"""
    out = dojo("start", "toy")
    assert out.returncode == 0, out.stderr
    assert "Implement add(a, b) and count_words(text)." in out.stdout and str(dojo.file()) in out.stdout
    assert "`" not in out.stdout and "## " not in out.stdout, "raw Markdown in the prompt"
    assert dojo.file().read_text() == (dojo.toy / "katas" / "toy" / "toy.py").read_text()

    out = dojo("check")  # the kata in progress
    assert out.returncode == 1
    todo = "todo  0/6 pt  not written yet: add (toy.py:6), count_words (toy.py:11) — 4 tests wait on them"
    assert todo in out.stdout, f"a stub's report is not one line naming what is unwritten:\n{out.stdout}"
    assert "FAIL" not in out.stdout and "add works for negative numbers" not in out.stdout, out.stdout
    assert "Score 0/6 points" in out.stdout
    doc = json.loads(dojo.results().read_text())
    assert doc["status"] == "fail" and doc["points"] == 0 and doc["total"] == 6 and len(doc["tests"]) == 4

    shutil.copy(dojo.reference, dojo.file())
    out = dojo("check", "toy")
    assert out.returncode == 0, out.stdout
    assert "Score 6/6 points" in out.stdout and "FAIL" not in out.stdout
    assert "pristine copies" not in out.stdout, (
        "the note is news only when the learner's code changed something"
    )
    doc = json.loads(dojo.results().read_text())
    assert doc["status"] == "pass" and any("pristine copies" in note for note in doc["notes"])
    assert dojo.attempts() == [("toy", "check", 0, 6, 0), ("toy", "check", 6, 6, 1)]
    assert "passing, best 6/6" in dojo("list").stdout


def test_failure_message_names_the_property_and_input(dojo):
    """a wrong answer shows the suite's own message: the call, what came back, what was wanted"""
    dojo.write("def add(a, b):\n    return a - b\n\ndef count_words(text):\n    return {}\n")
    out = dojo("check", "toy")
    assert "add(-2, -3): got 1, want -5" in out.stdout


def test_examples_only_runs_the_readme_examples(dojo):
    """check --examples-only grades only the README's worked examples, and never counts as a pass"""
    shutil.copy(dojo.reference, dojo.write(""))
    out = dojo("check", "toy", "--examples-only")
    assert out.returncode == 0 and "2/2 tests passing" in out.stdout
    assert dojo.attempts() == [("toy", "examples", 2, 2, 0)]


def test_start_never_overwrites_work_without_force(dojo):
    """start keeps existing work; --force replaces it after a backup"""
    dojo("start", "toy")
    dojo.write("# my work\n")
    out = dojo("start", "toy")
    assert out.returncode == 0 and "kept it" in out.stdout
    assert dojo.file().read_text() == "# my work\n"
    out = dojo("start", "toy", "--force")
    assert out.returncode == 0 and "backed up" in out.stdout
    backups = list((dojo.workspace / ".dojo" / "backups").glob("toy-*.py"))
    assert [b.read_text() for b in backups] == ["# my work\n"]
    assert "raise NotImplementedError" in dojo.file().read_text()


def test_missing_workspace_file_says_run_start(dojo):
    """check on a kata never started tells the user to run `dojo start <slug>`"""
    out = dojo("check", "toy")
    assert out.returncode == 1 and "dojo start toy" in out.stderr


def test_check_without_kata_in_progress(dojo):
    """check with no slug and nothing started says how to start, exit 2"""
    out = dojo("check")
    assert out.returncode == 2 and "dojo start" in out.stderr


def test_kata_without_suite(dojo):
    """a kata listed in the manifest but without a suite yet says so"""
    dojo.write("x = 1\n", slug="later")
    out = dojo("check", "later")
    assert out.returncode == 1 and "no tests yet" in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("start", "nope"),
        ("check", "nope"),
        ("hint", "nope"),
        ("reset", "nope", "--yes"),
        ("solution", "nope"),
        ("watch", "nope"),
    ],
)
def test_unknown_slug_lists_valid_ones(dojo, args):
    """an unknown slug: one line naming the valid slugs, exit 2"""
    out = dojo(*args)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["dojo: unknown kata 'nope': choose one of toy, later"]


def test_hints_one_at_a_time(dojo):
    """hint shows the next unseen hint and records it; --all shows those seen"""
    out = dojo("hint", "toy", "--all")
    assert "No hints seen yet" in out.stdout
    out = dojo("hint", "toy")
    assert "Hint 1 of 2" in out.stdout and "Addition is built in." in out.stdout
    out = dojo("hint", "toy")
    assert "Hint 2 of 2" in out.stdout and "str.split()" in out.stdout
    out = dojo("hint", "toy")
    assert "seen all 2 hints" in out.stdout
    out = dojo("hint", "toy", "--all")
    assert "Hint 1 of 2" in out.stdout and "Hint 2 of 2" in out.stdout


def test_reset_asks_and_keeps_a_backup(dojo):
    """reset refuses without --yes when it cannot ask; with --yes restores the stub and backs up"""
    dojo("start", "toy")
    dojo.write("def add(a, b):\n    return 0\n")
    out = dojo("reset", "toy")
    assert out.returncode == 2 and "--yes" in out.stderr
    assert "return 0" in dojo.file().read_text()
    out = dojo("reset", "toy", "--yes")
    assert out.returncode == 0 and "backed up" in out.stdout
    assert "raise NotImplementedError" in dojo.file().read_text()
    assert any("return 0" in b.read_text() for b in (dojo.workspace / ".dojo" / "backups").iterdir())


def test_solution_only_after_a_pass_or_forced(dojo):
    """solution is locked until the kata passes; --force shows it and records a reveal, once confirmed
    (off a terminal only with --yes); status and list say so afterwards"""
    out = dojo("solution", "toy")
    assert out.returncode == 1 and "--force" in out.stdout and "def add" not in out.stdout
    out = dojo("solution", "toy", "--force")
    assert out.returncode == 2 and "--force --yes" in out.stderr and "count_words" not in out.stdout
    assert "Reference revealed" not in dojo("status").stdout
    out = dojo("solution", "toy", "--force", "--yes")
    assert (
        out.returncode == 0 and "counts[word] = counts.get(word, 0) + 1" in out.stdout
    )  # no markup mangling
    assert "recorded as a reveal" in out.stdout
    import sqlite3

    with sqlite3.connect(dojo.db) as conn:
        assert conn.execute("SELECT kata, kind, detail FROM events WHERE kind='reveal'").fetchall() == [
            ("toy", "reveal", "forced")
        ]
    dojo("start", "toy")
    assert "Reference revealed before a pass" in dojo("status").stdout
    toy_row = next(line for line in dojo("list").stdout.splitlines() if " toy " in line)
    assert "reference revealed before a pass" in toy_row, toy_row
    shutil.copy(dojo.reference, dojo.write(""))
    assert dojo("check", "toy").returncode == 0
    stats = next(line for line in dojo("stats").stdout.splitlines() if line.startswith("toy "))
    assert "reference revealed before a pass" in stats, stats
    out = dojo("solution", "toy")
    assert out.returncode == 0 and "def count_words" in out.stdout and "reveal" not in out.stdout


@pytest.mark.parametrize("answer, shown", [("y", True), ("", False)])
def test_forced_solution_asks_first_on_a_terminal(toy_env, monkeypatch, capsys, answer, shown):
    """on a terminal, --force asks before it shows the reference of an unpassed kata: yes shows it and
    records the reveal; anything else shows nothing and records nothing"""
    import argparse

    from dojo.practice import commands, history

    asked = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or answer)
    code = commands.cmd_solution(argparse.Namespace(slug="toy", force=True, yes=False))
    assert asked and "recorded as a reveal" in asked[0], asked
    assert code == (0 if shown else 1)
    assert ("def count_words" in capsys.readouterr().out) == shown
    assert history.revealed() == ({"toy"} if shown else set())


def test_status_shows_the_kata_in_progress(dojo):
    """status names the kata in progress, its file, last score and hints seen"""
    assert "No kata in progress" in dojo("status").stdout
    dojo("start", "toy")
    dojo("check")
    dojo("hint")
    out = dojo("status")
    assert "In progress: toy" in out.stdout and "Last check: 0/6 points" in out.stdout
    assert "Hints seen: 1 of 2" in out.stdout


def test_watch_regrades_on_save(dojo):
    """watch grades at once, then again on every save of the workspace file"""
    import time

    dojo("start", "toy")
    proc = dojo.popen("watch", "--runs", "2", "--interval", "0.1", "--timeout", "30")
    deadline = time.time() + 30
    while not dojo.results().exists() and time.time() < deadline:
        time.sleep(0.1)
    assert dojo.results().exists(), "watch never graded"
    time.sleep(0.3)
    shutil.copy(dojo.reference, dojo.file())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert out.count("Score ") == 2 and "Score 0/6" in out and "Score 6/6" in out
    assert [a[1] for a in dojo.attempts()] == ["watch", "watch"]


@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 1)])
def test_reset_asks_on_a_terminal(dojo, answer, code):
    """on a terminal, reset asks; 'y' restores the stub, anything else changes nothing"""
    import os
    import pty
    import subprocess
    import sys

    dojo("start", "toy")
    dojo.write("def add(a, b):\n    return 0\n")
    primary, secondary = pty.openpty()
    os.write(primary, f"{answer}\n".encode())
    proc = subprocess.run(
        [sys.executable, "-m", "dojo", "reset", "toy"],
        env=dojo.env,
        stdin=secondary,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    os.close(primary)
    os.close(secondary)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert ("raise NotImplementedError" in dojo.file().read_text()) == (answer == "y")
