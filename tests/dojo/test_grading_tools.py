"""Take-home grading, the kata checker, the catalog's parsing and the CLI's plugin loading."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import types

import pytest

from dojo import catalog, cli


def test_grade_submissions_writes_one_report(dojo, tmp_path):
    """grade PATH...: every kata file in each submission, per-test JSON, a summary table"""
    good, bad, empty = (tmp_path / n for n in ("good", "bad", "empty"))
    for folder in (good, bad, empty):
        folder.mkdir()
    shutil.copy(dojo.reference, good / "toy.py")
    shutil.copy(dojo.toy / "katas" / "toy" / "toy.py", bad / "toy.py")
    out = dojo(
        "grade", str(good), str(bad), str(empty), "--json", str(tmp_path / "report.json"), "--jobs", "2"
    )
    assert out.returncode == 1, out.stdout + out.stderr  # one submission fails
    doc = json.loads((tmp_path / "report.json").read_text())
    by_path = {s["path"]: s for s in doc["submissions"]}
    assert by_path[str(good)]["katas"]["toy"]["status"] == "pass" and by_path[str(good)]["points"] == 6
    assert by_path[str(bad)]["katas"]["toy"]["points"] == 0
    assert len(by_path[str(bad)]["katas"]["toy"]["tests"]) == 4
    assert by_path[str(empty)]["katas"] == {}
    assert "6/6" in out.stdout and "no kata files" in out.stdout
    assert not dojo.db.exists()  # a grader's runs are not the grader's own practice


def test_a_bad_path_is_its_own_error_and_the_others_are_graded(dojo, tmp_path):
    """a PATH that is a plain file, one that does not exist, and one given twice each get their own error
    in the summary and report.json; the good submission beside them is graded; the exit status is 1"""
    good = tmp_path / "good"
    good.mkdir()
    (good / "toy.py").write_text(dojo.reference.read_text())
    missing, report = tmp_path / "nowhere", tmp_path / "report.json"
    out = dojo("grade", str(dojo.reference), str(missing), str(good), str(good), "--json", str(report))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    subs = json.loads(report.read_text())["submissions"]
    assert [s["path"] for s in subs] == [str(dojo.reference), str(missing), str(good), str(good)]
    plain, gone, graded, twice = subs
    assert graded["katas"]["toy"]["points"] == 6 and graded["passed"], "the good submission was not graded"
    assert "is not a folder" in plain["errors"][0] and not plain["katas"]
    assert "cannot be read" in gone["errors"][0] and not gone["katas"]
    assert "given twice" in twice["errors"][0] and not twice["katas"]
    for why in ("is not a folder", "cannot be read", "given twice"):
        assert why in out.stdout, f"the summary does not say {why!r}"


def test_check_katas_passes_on_a_sound_kata(dojo):
    """check_katas: reference passes, stub fails every test, each mutant is killed, in both modes: exit 0, a table"""
    out = dojo("--jobs", "2", module="dojo.grading.proof.check_katas")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok 4/4 pass" in out.stdout and "ok 4/4 fail" in out.stdout and "ok 1/1" in out.stdout
    again = dojo(module="dojo.grading.proof.check_katas")
    assert "(0 run, 7 cached)" in again.stdout  # 3 runs in each mode, and the mutant's survey


def test_check_katas_flags_a_later_failure_that_names_no_cause(dojo):
    """check_katas runs each mutant to the end: a failure after the first that is neither the first's
    property nor "probably because ..." (its builds_on marker gone) is a violation naming the test"""
    (dojo.toy / "tests" / "katas" / "mutants" / "toy" / "no_words.py").write_text(
        '"""Counts no words."""\n\nEDITS = [("return counts", "return {}")]\n'
    )
    out = dojo(module="dojo.grading.proof.check_katas")
    assert out.returncode == 0, out.stdout + out.stderr  # the whitespace test builds on the example
    dojo.suite.write_text(
        dojo.suite.read_text().replace('@pytest.mark.builds_on("test_count_words_example")\n', "")
    )
    out = dojo(module="dojo.grading.proof.check_katas")
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        "VIOLATION toy: mutant no_words.py fails 'count_words counts repeated words' (test_count_words_example) "
        "first, then test_count_words_whitespace without saying 'probably because ...'" in out.stdout
    ), out.stdout
    assert "BAD 1/2" in out.stdout, out.stdout  # the failures explained column: split_on_space's are


def test_check_katas_flags_a_surviving_mutant_and_a_passing_stub(dojo):
    """check_katas exits 1 and names the violation when a mutant survives or a stub passes a test"""
    mutants = dojo.toy / "tests" / "katas" / "mutants" / "toy"
    shutil.copy(dojo.reference, mutants / "harmless.py")
    stub = dojo.toy / "katas" / "toy" / "toy.py"
    stub.write_text(
        stub.read_text().replace('    """a + b."""\n    raise NotImplementedError', "    return a + b")
    )
    out = dojo("--no-cache", module="dojo.grading.proof.check_katas")
    assert out.returncode == 1
    assert "VIOLATION toy: mutant harmless.py survives" in out.stdout
    assert "VIOLATION toy: 'add(2, 3) is 5' passes on the untouched stub" in out.stdout


def test_check_katas_runs_mutants_written_as_edits(dojo):
    """An EDITS mutant is the reference with its edits: killed when it breaks the kata, a survivor
    when it does not, and a violation naming the edit when its text is no longer in the reference"""
    mutants = dojo.toy / "tests" / "katas" / "mutants" / "toy"
    (mutants / "split_on_space.py").unlink()
    (mutants / "single_spaces.py").write_text(
        '"""Splits on single spaces."""\n\nEDITS = [("text.split()", \'text.split(" ")\')]\n'
    )
    (mutants / "renamed.py").write_text(
        '"""Renames a local."""\n\nEDITS = [("counts", "tally")]\n'
    )  # 3 places
    (mutants / "stale.py").write_text(
        '"""Edits a line the reference no longer has."""\n\nEDITS = [("a - b", "a * b")]\n'
    )
    out = dojo("--no-cache", module="dojo.grading.proof.check_katas")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ok 4/4 pass" in out.stdout and "BAD 1/3" in out.stdout, out.stdout
    assert "single_spaces.py" not in out.stdout, "the EDITS mutant that breaks count_words must be killed"
    assert (
        "VIOLATION toy: mutant renamed.py does not apply: renamed.py: edit 1 ('counts'...) occurs"
        in out.stdout
    )
    assert (
        "VIOLATION toy: mutant stale.py does not apply: stale.py: edit 1 ('a - b'...) no longer occurs"
        in out.stdout
    )

    (mutants / "renamed.py").write_text(
        '"""Renames a local."""\n\nEDITS = [("return counts", "return dict(counts)")]\n'
    )
    out = dojo(module="dojo.grading.proof.check_katas")
    assert (
        "VIOLATION toy: mutant renamed.py survives: no test fails on it (Renames a local.)" in out.stdout
    ), out.stdout


def test_mutant_edits_apply_exactly_once_and_diff_reads_back():
    """dojo.grading.proof.mutant: each old text must occur once; a no-op edit is refused; EDITS must be literal pairs"""
    from dojo.grading.proof import mutant

    assert mutant.apply("a = 1\nb = 2\n", [("a = 1", "a = 0"), ("a = 0\nb", "a = 0\nc")]) == "a = 0\nc = 2\n"
    with pytest.raises(ValueError, match="edit 1 .* occurs 2 times"):
        mutant.apply("x x", [("x", "y")])
    with pytest.raises(ValueError, match="edit 1 changes nothing"):
        mutant.apply("x", [("x", "x")])


def test_edits_must_be_literal_pairs(tmp_path):
    from dojo.grading.proof import mutant

    bad = tmp_path / "bad.py"
    for body in ("EDITS = [make()]", "EDITS = []", "EDITS = [('a', 'b', 'c')]", "EDITS = 'ab'"):
        bad.write_text(body + "\n")
        with pytest.raises(ValueError, match="EDITS must be"):
            mutant.edits_of(bad)
    bad.write_text('"""a whole module"""\nx = 1\n')
    assert mutant.edits_of(bad) is None


def test_catalog_parses_hints_and_questions(dojo, monkeypatch):
    """HINTS.md splits at '## Hint N'; QUESTIONS.md gives question, model answer and rubric bullets"""
    monkeypatch.setenv("DOJO_KATAS_DIR", dojo.env["DOJO_KATAS_DIR"])
    kata = catalog.get("toy")
    assert kata.hints() == [
        "Addition is built in.",
        "`str.split()` with no argument splits on any whitespace.",
    ]
    (q,) = kata.questions()
    assert q.question == "What does count_words do with punctuation?"
    assert q.answer.startswith("It keeps it")
    assert q.rubric == ["says punctuation is kept", "suggests a regex to strip it"]
    with pytest.raises(catalog.UnknownKata, match="choose one of toy, later"):
        catalog.get("nope")


def test_real_manifest_is_well_formed():
    """katas/katas.toml: unique slugs, difficulties 1..5, prerequisites that exist and come earlier"""
    katas = catalog.load()
    slugs = [k.slug for k in katas]
    assert len(set(slugs)) == len(slugs)
    for kata in katas:
        assert 1 <= kata.difficulty <= 5 and kata.minutes > 0
        for pre in kata.prerequisites:
            assert pre in slugs[: slugs.index(kata.slug)], (
                f"{kata.slug} needs {pre}, which is not listed before it"
            )


def test_plugins_load_and_missing_ones_are_skipped(monkeypatch, tmp_path):
    """PLUGINS: a listed module adds its commands; one not written yet is skipped; a broken one is an error"""
    module = types.ModuleType("dojo_fake_plugin")
    module.register = lambda sub: sub.add_parser("fake").set_defaults(func=lambda args: 7)
    monkeypatch.setitem(sys.modules, "dojo_fake_plugin", module)
    monkeypatch.setattr(cli, "PLUGINS", ("dojo_fake_plugin", "dojo_not_written_yet"))
    assert cli.main(["fake"]) == 7

    (tmp_path / "dojo_broken_plugin.py").write_text("import dojo_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "PLUGINS", ("dojo_broken_plugin",))
    with pytest.raises(ModuleNotFoundError, match="dojo_missing_dependency"):
        cli.build_parser()
    assert cli.main(["status"]) == 0  # built-in commands do not load plugins at all


def test_commands_names_each_plugins_commands():
    """cli.COMMANDS (which module a command loads alone) is exactly what each plugin registers"""
    import argparse

    for name in cli.PLUGINS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        registered = set(sub.choices)
        assert registered == {c for c, m in cli.COMMANDS.items() if m == name}, (
            f"{name} registers {registered}"
        )
    assert set(cli.COMMANDS.values()) <= set(cli.PLUGINS) and not set(cli.COMMANDS) & set(cli.BUILTIN)


def test_a_plugin_command_imports_only_its_plugin():
    """`dojo demo` builds its parser without the practice loop, the grader or pytest (start-up time)"""
    code = (
        "import sys; from dojo import cli\ntry: cli.main(['demo', '--help'])\n"
        "except SystemExit: print('MODULES', *sorted(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage: dojo demo" in out.stdout, out.stderr[-2000:]
    imported = set(out.stdout.split("MODULES")[-1].split())
    for heavy in (
        "pytest",
        "dojo.grading.grade",
        "dojo.practice.commands",
        "dojo.tools.serve",
        "rich.progress",
        "torch",
    ):
        assert heavy not in imported, f"`dojo demo --help` imported {heavy}"
    assert "dojo.tools.demo" in imported


def test_console_script_is_installed():
    """the `dojo` console script exists beside this interpreter"""
    from pathlib import Path

    assert (Path(sys.executable).parent / "dojo").exists()


def test_the_suite_cache_digests_runner_files_that_exist():
    """check_katas's cache key covers the plugin, the judge's files and the audit hook, at their paths:
    a listed file that does not exist would be digested as missing, and its edits would go unseen."""
    from dojo.grading.proof import suite_runs

    files = suite_runs.runner_files()
    missing = [str(p) for p in files if not p.is_file()]
    assert not missing, f"the cache key names files that do not exist: {missing}"
    names = {p.name for p in files}
    assert {"plugin.py", "judge.py", "worker.py", "wire.py", "remote.py", "audit.py"} <= names, sorted(names)
