"""A grading run that nothing in a submission can break: inputs checked and never followed, every step
guarded and bounded, copies private, report.json always whole.

Most tests read submissions through dojo.interview.intake (no grading: milliseconds). Two grade the toy kata
(fast): one `dojo grade` run holding every bad input beside honest ones, and one in-process run that watches
the private copies and makes steps fail on purpose.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from dojo.grading import grade
from dojo.grading.confine import bounded
from dojo.interview import intake, takehome

HONEST = (Path(__file__).parent / "toy" / "solutions" / "toy.py").read_text()


def deep_line(terms: int) -> str:
    """A valid line whose expression nests `terms` deep (the AST of a + b + c ... is a left-leaning chain)."""
    return "TABLE_SUM = " + " + ".join(str(i) for i in range(terms)) + "\n"


def notebook(source: str, kata: str | None = None) -> str:
    """A version-4 notebook with one solution cell holding `source` (and `kata` in its metadata)."""
    cell = {
        "cell_type": "code",
        "metadata": {"tags": ["solution"]},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "cells": [cell],
            "metadata": {"dojo": {"kata": kata}} if kata else {},
        }
    )


def folder(root: Path, name: str, files: dict[str, str | bytes] | None = None) -> Path:
    path = root / name
    path.mkdir()
    for file, content in (files or {}).items():
        (path / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def refusal(path: Path, slug: str = "toy") -> str:
    sub = intake.read_submission(path, [slug])
    assert slug not in sub.files, f"{path}: read although it should be refused"
    return sub.errors[slug]


# ---- links ----------------------------------------------------------------------------------------


def test_a_link_to_a_root_only_file_is_refused_unread(tmp_path):
    """toy.py -> a 0600 file elsewhere (an /etc/shadow): refused as a link, its bytes never read"""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRET\n")
    secret.chmod(0o600)
    sub = folder(tmp_path, "sub")
    (sub / "toy.py").symlink_to(secret)
    why = refusal(sub)
    assert "toy.py is a symbolic link" in why and "never through links" in why
    assert "SECRET" not in why


def test_a_link_to_another_submission_is_refused(tmp_path):
    """toy.py -> another candidate's toy.py: refused, not graded as this candidate's work"""
    other = folder(tmp_path, "other", {"toy.py": HONEST})
    sub = folder(tmp_path, "sub")
    (sub / "toy.py").symlink_to(Path("..") / other.name / "toy.py")
    assert "symbolic link" in refusal(sub)


@pytest.mark.parametrize("links", [{"toy.py": "toy.py"}, {"toy.py": "a.py", "a.py": "toy.py"}])
def test_a_link_loop_is_refused(tmp_path, links):
    """a link to itself, or two links naming each other: a clear error, never a hang or silence"""
    sub = folder(tmp_path, "sub")
    for name, target in links.items():
        (sub / name).symlink_to(target)
    assert "toy.py is a symbolic link" in refusal(sub)


def test_a_dangling_link_is_refused(tmp_path):
    sub = folder(tmp_path, "sub")
    (sub / "toy.py").symlink_to("gone.py")
    assert "which does not exist" in refusal(sub)


def test_a_link_to_a_file_beside_it_is_read(tmp_path):
    """toy.py -> mine.py in the same folder: the one link accepted, read as mine.py's bytes"""
    sub = folder(tmp_path, "sub", {"mine.py": HONEST})
    (sub / "toy.py").symlink_to("mine.py")
    read = intake.read_submission(sub, ["toy"])
    assert read.files["toy"].data == HONEST.encode() and read.files["toy"].name == "toy.py"


def test_a_linked_submission_folder_is_refused(tmp_path):
    real = folder(tmp_path, "real", {"toy.py": HONEST})
    (tmp_path / "alias").symlink_to(real)
    sub = intake.read_submission(tmp_path / "alias", ["toy"])
    assert not sub.files and "is a symbolic link" in sub.errors[""]


# ---- what is not a plain, small, decodable file ------------------------------------------------


def test_a_folder_named_like_a_kata_file_is_refused(tmp_path):
    sub = folder(tmp_path, "sub")
    (sub / "toy.py").mkdir()
    assert refusal(sub) == "toy.py is a folder, not a file"


def test_a_fifo_is_refused_without_hanging(tmp_path):
    sub = folder(tmp_path, "sub")
    os.mkfifo(sub / "toy.py")
    assert refusal(sub) == "toy.py is a fifo, not a file"


def test_an_unreadable_file_is_refused(tmp_path, monkeypatch):
    """a file that cannot be opened: its error, named (root reads any mode, so the open is made to fail)"""
    sub = folder(tmp_path, "sub", {"toy.py": HONEST})
    (sub / "toy.py").chmod(0)
    real_open = os.open

    def denied(path, flags, *args, **kw):
        if path == "toy.py" and os.geteuid() == 0:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(intake.os, "open", denied)
    assert refusal(sub) == "toy.py cannot be read: Permission denied"


def test_nul_bytes_are_refused(tmp_path):
    sub = folder(tmp_path, "sub", {"toy.py": b"def add(a, b):\n    return a + b\x00\n"})
    assert "NUL byte (at byte 31)" in refusal(sub)


def test_invalid_utf8_is_refused_and_a_coding_cookie_is_honoured(tmp_path):
    """bytes that are not UTF-8 are refused (naming the line); the same bytes under a latin-1 cookie are read"""
    bad = folder(tmp_path, "bad", {"toy.py": b"# caf\xe9\n" + HONEST.encode()})
    assert refusal(bad) == "toy.py is not valid utf-8 text: byte 0xe9 at line 1 (save it as UTF-8)"
    cookie = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + HONEST.encode()
    assert "café" in intake.python_source("toy.py", cookie)
    assert "toy" in intake.read_submission(folder(tmp_path, "cookie", {"toy.py": cookie}), ["toy"]).files


def test_a_file_over_the_limit_is_refused_unread(tmp_path):
    """a .py over MAX_SOURCE_BYTES (1 MiB) is refused by its size; at the limit it is read"""
    big = folder(tmp_path, "big", {"toy.py": b"#" * (intake.MAX_SOURCE_BYTES + 1)})
    assert "toy.py is 1.0 MiB: kata files over 1 MiB are refused, unread" == refusal(big)
    at = folder(tmp_path, "at", {"toy.py": b"#" * intake.MAX_SOURCE_BYTES})
    assert "toy" in intake.read_submission(at, ["toy"]).files


def test_names_are_exact_and_odd_folder_names_work(tmp_path):
    """a folder named with spaces and accents is read; Toy.py is not toy.py, and the submission says so"""
    odd = folder(tmp_path, "Ana María — take home 1", {"toy.py": HONEST})
    assert intake.read_submission(odd, ["toy"]).files["toy"].data == HONEST.encode()
    near = intake.read_submission(folder(tmp_path, "near", {"Toy.py": HONEST}), ["toy"])
    assert not near.files and "'Toy.py' (not 'toy.py')" in near.errors[""]


# ---- notebooks, private copies, bounded children --------------------------------------------------


def test_a_notebook_that_is_not_json_or_names_no_kata_is_its_error(toy_env, tmp_path):
    """intake: a non-JSON toy.ipynb is toy's error; an answer.ipynb naming no kata is the submission's"""
    bad = tmp_path / "toy.ipynb"
    bad.write_text("not json {")
    prepared = intake.prepare(bad, ["toy"], tmp_path / "private")
    assert "toy.ipynb is not a readable Jupyter notebook" in prepared.refused["toy"][1] and not prepared.ready
    answer = tmp_path / "answer.ipynb"
    answer.write_text(notebook(HONEST))
    prepared = intake.prepare(answer, ["toy"], tmp_path / "private")
    assert prepared.errors == [
        "cannot tell which kata answer.ipynb is for: name it <kata>.ipynb (one of toy)"
    ]
    answer.write_text(notebook(HONEST, kata="toy"))
    assert [r.slug for r in intake.prepare(answer, ["toy"], tmp_path / "private").ready] == ["toy"]


def test_private_copy_is_this_users_alone(tmp_path):
    """a 0700 folder, a 0600 file, never written through a link or over a file"""
    copy = intake.private_copy(tmp_path / "private" / "0", "toy.py", b"x = 1\n")
    assert stat.S_IMODE(copy.parent.stat().st_mode) == 0o700 and stat.S_IMODE(copy.stat().st_mode) == 0o600
    (copy.parent / "link.py").symlink_to(tmp_path / "elsewhere.py")
    with pytest.raises(OSError):
        intake.private_copy(copy.parent, "link.py", b"x")
    assert not (tmp_path / "elsewhere.py").exists()


def test_the_scan_reads_deep_lines_and_a_failing_scan_is_a_finding(toy_env, tmp_path):
    """bounded.scan: 600- and 3000-term lines scan (no RecursionError); out of memory or time, a finding says so"""
    for terms in (600, 3000):
        path = tmp_path / f"toy{terms}.py"
        path.write_text(HONEST + deep_line(terms))
        assert bounded.scan(path, "toy") == []
    dense = tmp_path / "toy.py"
    dense.write_text("x = [" + "a," * 500_000 + "]\n")
    with pytest.raises(bounded.BoundedError, match=r"ran out of memory \(limit 0.25 GiB\)"):
        bounded.call("dojo.grading.scan.integrity:scan", {"path": str(dense), "slug": "toy"}, memory=1 << 28)
    with pytest.raises(bounded.BoundedError, match="took longer than 0.3 s"):
        bounded.call("dojo.grading.scan.integrity:scan", {"path": str(dense), "slug": "toy"}, timeout=0.3)


def test_a_similarity_check_that_cannot_finish_is_listed(toy_env, monkeypatch):
    from dojo import catalog

    monkeypatch.setattr(takehome, "SIMILARITY_TIMEOUT_S", 0.01)
    katas = {k.slug: k for k in catalog.load() if k.has_suite}
    similar = takehome._similar({"toy": {"a": HONEST, "b": HONEST}}, katas)
    assert similar["pairs"] == [] and similar["errors"][0]["kata"] == "toy"
    assert "the similarity check could not finish: took longer than" in similar["errors"][0]["error"]


# ---- whole runs -----------------------------------------------------------------------------------


def test_bad_inputs_beside_honest_ones_each_get_their_error(dojo, tmp_path):
    """one `dojo grade` run over every bad input: no traceback, each its own error naming the file, the
    honest submissions graded as alone, report.json valid with every submission"""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRET\n")
    secret.chmod(0o600)
    honest = folder(tmp_path, "honest", {"toy.py": HONEST})
    odd = folder(tmp_path, "Ana María — 2", {"toy.py": HONEST})
    deep = folder(tmp_path, "deep600", {"toy.py": HONEST + deep_line(600)})
    deeper = folder(tmp_path, "deep3000", {"toy.py": HONEST + deep_line(3000)})
    shadow, stolen, loop, dangling, dir_ = (
        folder(tmp_path, n) for n in ("shadow-link", "stolen", "loop", "dangling", "dir")
    )
    (shadow / "toy.py").symlink_to(secret)
    (stolen / "toy.py").symlink_to(honest / "toy.py")
    (loop / "toy.py").symlink_to("toy.py")
    (dangling / "toy.py").symlink_to("nowhere.py")
    (dir_ / "toy.py").mkdir()
    nul = folder(tmp_path, "nul", {"toy.py": HONEST.encode() + b"\x00"})
    latin = folder(tmp_path, "not-utf8", {"toy.py": HONEST.encode() + b"# \xe9\n"})
    huge = folder(tmp_path, "huge", {"toy.py": b"x = 1\n" * 200_000})
    not_json = tmp_path / "toy.ipynb"
    not_json.write_text("{ not json")
    no_kata = tmp_path / "answer.ipynb"
    no_kata.write_text(notebook(HONEST))
    bad = [shadow, stolen, loop, dangling, dir_, nul, latin, huge, not_json]
    paths = [honest, odd, deep, deeper, *bad, no_kata]
    report = tmp_path / "out" / "report.json"
    out = dojo("grade", *map(str, paths), "--json", str(report), "--jobs", "2", timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    doc = json.loads(report.read_text())
    by_path = {s["path"]: s for s in doc["submissions"]}
    assert list(by_path) == [str(p) for p in paths], "report.json lacks a submission"
    for good in (honest, odd, deep):
        assert by_path[str(good)]["katas"]["toy"]["points"] == 6 and by_path[str(good)]["passed"], good.name
        assert by_path[str(good)]["katas"]["toy"]["path"] == str(good / "toy.py")
    assert "toy" in by_path[str(deeper)]["katas"]  # graded (Python cannot compile it): a result, not a crash
    for path in bad:
        result = by_path[str(path)]["katas"]["toy"]
        assert result["status"] == "error" and result["points"] == 0, path.name
        assert by_path[str(path)]["sandboxed"] is None, (
            f"{path.name}: a refused file said something of the sandbox"
        )
        assert result["message"].startswith("toy."), f"{path.name}: the message does not name the file"
    assert out.stdout.count("error: ") == len(bad) + 1, out.stdout
    assert "could not be graded" not in report.read_text() and "SECRET" not in report.read_text()
    assert "cannot tell which kata answer.ipynb is for" in by_path[str(no_kata)]["errors"][0]
    assert not list(report.parent.glob(".report.json.*")), "a temporary report was left behind"


def test_steps_that_fail_are_their_submissions_errors_and_copies_are_private(toy_env, tmp_path, monkeypatch):
    """a bug while reading one submission or grading another is that one's error; the graded copy and the
    grading folder are private (0700 parents, the copy 0600), and no other uid can read them"""
    honest = folder(tmp_path, "honest", {"toy.py": HONEST})
    boom = folder(tmp_path, "boom", {"toy.py": HONEST + "# BOOM\n"})
    broken = folder(tmp_path, "broken", {"toy.py": HONEST})
    seen: dict[str, object] = {}
    real_prepare, real_grade, real_run = intake.prepare, grade.grade, grade.child.run

    def prepare(path, slugs, private):
        if path.name == "broken":
            raise RuntimeError("a bug in reading")
        return real_prepare(path, slugs, private)

    def grading(slug, target, **kw):
        copy = Path(target) / f"{slug}.py"
        if b"BOOM" in copy.read_bytes():
            raise RuntimeError("a bug in grading")
        seen["copy"] = [stat.S_IMODE(p.stat().st_mode) for p in (copy, copy.parent, copy.parent.parent)]
        seen["copy unreadable"] = _unreadable_by_others(copy)
        return real_grade(slug, target, **kw)

    def run(cmd, cwd, *args, **kw):
        seen["grading folder"] = stat.S_IMODE(Path(cwd).parent.stat().st_mode)
        seen["grading unreadable"] = _unreadable_by_others(Path(cwd) / "tests" / "katas" / "test_toy.py")
        return real_run(cmd, cwd, *args, **kw)

    monkeypatch.setattr(intake, "prepare", prepare)
    monkeypatch.setattr(grade, "grade", grading)
    monkeypatch.setattr(grade.child, "run", run)
    doc = takehome.grade_submissions([honest, boom, broken], jobs=1, timeout=60)
    by_path = {s["path"]: s for s in doc["submissions"]}
    assert by_path[str(honest)]["points"] == 6
    assert (
        by_path[str(boom)]["katas"]["toy"]["message"]
        == "toy.py could not be graded: RuntimeError: a bug in grading"
    )
    assert "a bug in reading" in by_path[str(broken)]["errors"][0]
    assert seen["copy"] == [0o600, 0o700, 0o700] and seen["grading folder"] == 0o700
    assert seen["copy unreadable"] and seen["grading unreadable"]


def _unreadable_by_others(path: Path) -> bool:
    """Whether a uid other than ours (nobody) fails to read `path`; True when not root (it cannot try)."""
    if os.geteuid() != 0:
        return True
    done = subprocess.run(
        ["cat", str(path)], user=65534, group=65534, capture_output=True, stdin=subprocess.DEVNULL
    )
    return done.returncode != 0 and b"Permission denied" in done.stderr
