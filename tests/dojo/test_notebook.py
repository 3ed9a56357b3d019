"""Notebook mode: notebooks run in a real Jupyter kernel (nbclient) and graded by the same hidden suites.

Two tests start a kernel (the one the notebooks name, "decode-dojo": this venv's python); the rest
drive `python -m dojo` or call dojo.notebook / dojo.notebook.extract in process, on the toy kata.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient import NotebookClient
from nbformat import v4

from dojo import catalog
from dojo.notebook import build as nbbuild
from dojo.notebook import extract as nbextract
from dojo.notebook import grading as notebook
from dojo.notebook.extract import NotebookError

ANSI = re.compile(r"\x1b\[")


def make_nb(*cells: tuple[str, str], slug: str | None = "toy") -> nbformat.NotebookNode:
    """A notebook from (kind, source) pairs; kind: "md", "code" or "solution" (a code cell tagged solution)."""
    nb = v4.new_notebook()
    if slug:
        nb.metadata["dojo"] = {"kata": slug}
    for kind, source in cells:
        if kind == "md":
            nb.cells.append(v4.new_markdown_cell(source))
        else:
            nb.cells.append(
                v4.new_code_cell(source, metadata={"tags": ["solution"]} if kind == "solution" else {})
            )
    return nb


def save(nb, path: Path) -> Path:
    nbformat.write(nb, path)
    return path


def run_in_kernel(nb, folder: Path, env: dict) -> nbformat.NotebookNode:
    """Execute `nb` in the kernel its metadata names, started in `folder` with `env`."""
    name = nb.metadata["kernelspec"]["name"]
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        pytest.fail(f"no Jupyter kernel {name!r}: `make setup` installs it")
    assert Path(spec.argv[0]).parent == Path(sys.executable).parent, (
        f"kernel {name!r} runs {spec.argv[0]}, not this venv's python {sys.executable}: run `make setup`"
    )
    client = NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(folder)}})
    return client.execute(env=env)


def outputs(cell) -> tuple[str, str]:
    """(plain text, html) of everything a cell showed."""
    text, html = [], []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            text.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            text.append(out.data.get("text/plain", ""))
            html.append(out.data.get("text/html", ""))
        elif out.output_type == "error":
            text.append("\n".join(out.traceback))
    return "\n".join(text), "\n".join(html)


def failure_lines(text: str) -> list[str]:
    """The per-test lines of a report (pass/FAIL/todo lines and the failure messages under them)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("pass", "FAIL", "todo")))
    end = next(i for i, line in enumerate(lines) if line.startswith("Score "))
    return lines[start:end]


# ---- in a real kernel --------------------------------------------------------------------------


def test_reference_notebook_passes_in_a_kernel(tmp_path):
    """The rendered reference notebook of the bpe kata runs in the venv's kernel and its last cell shows a full score"""
    kata = catalog.get("bpe")
    nb = nbformat.from_dict(nbbuild.build(kata, kata.reference.read_text(), reference=True))
    scratch = next(c for c in nb.cells if c.get("id") == "scratch")
    scratch.source = "import sys\nprint(sys.prefix)"
    save(nb, tmp_path / "bpe.ipynb")
    env = {**os.environ, "DOJO_WORKSPACE": str(tmp_path / "workspace")}
    done = run_in_kernel(nb, tmp_path, env)

    printed, _ = outputs(next(c for c in done.cells if c.get("id") == "scratch"))
    assert printed.strip() == sys.prefix, (
        f"the kernel runs python from {printed.strip()}, not this venv ({sys.prefix})"
    )
    text, html = outputs(done.cells[-1])
    score = re.search(r"Score (\d+)/(\d+) points", text)
    assert score and score.group(1) == score.group(2) and int(score.group(2)) > 0, (
        f"no full score in:\n{text}"
    )
    assert "All tests pass" in text, text
    assert "dojo-report" in html and "Score" in html, "the grading cell shows no HTML report"
    for cell in done.cells:
        assert not ANSI.search(json.dumps(cell.get("outputs", []))), (
            f"raw terminal codes in cell {cell.get('id')}"
        )
    assert not (tmp_path / "workspace" / ".dojo").exists(), "the reference notebook recorded an attempt"


def test_blank_notebook_fails_in_a_kernel_like_the_py_path(toy_env):
    """A fresh notebook graded in the kernel fails with the .py path's messages, naming cells; magics elsewhere are fine"""
    dojo = toy_env
    made = dojo("notebook", "toy")
    assert made.returncode == 0, made.stderr
    path = dojo.workspace / "toy.ipynb"
    nb = nbformat.read(path, as_version=4)
    scratch = next(c for c in nb.cells if c.get("id") == "scratch")
    scratch.source = "%time x = 1\n!echo shell-ok\nimport os"
    # untagged cells: a cell magic whose body is not Python, and a changed add() run but never saved in the solution
    nb.cells.insert(-1, v4.new_code_cell("%%writefile scratch.txt\nnot python {"))
    nb.cells.insert(-1, v4.new_code_cell("def add(a, b):\n    return a + b"))
    save(nb, path)
    done = run_in_kernel(nb, dojo.workspace, dojo.env)
    text, html = outputs(done.cells[-1])

    assert "Score 0/6 points" in text and "0/6 points" in html, text
    assert "which is not tagged 'solution', and redefined add" in text, (
        f"no warning about the scratch add():\n{text}"
    )
    assert not ANSI.search(json.dumps([c.get("outputs", []) for c in done.cells]))
    assert dojo.attempts() == [("toy", "check", 0, 6, 0)], "the grading cell did not record the attempt"
    # the same suite on the stub as a .py file
    dojo("start", "toy")
    as_py = dojo("check", "toy")
    assert as_py.returncode == 1, as_py.stderr
    want = [
        re.sub(r"\((at )?toy\.py:(\d+)", r"(\1cell 3, line \2", line) for line in failure_lines(as_py.stdout)
    ]
    assert failure_lines(text) == want, f"notebook report:\n{text}\n.py report:\n{as_py.stdout}"


# ---- the command line --------------------------------------------------------------------------


def test_notebook_command_keeps_work_unless_forced(toy_env):
    """dojo notebook never overwrites a notebook holding work without --force, and backs it up then"""
    dojo = toy_env
    path = dojo.workspace / "toy.ipynb"
    assert dojo("notebook", "toy").returncode == 0
    nb = nbformat.read(path, as_version=4)
    assert next(c.metadata.get("tags") for c in nb.cells if c.cell_type == "code") == ["solution"]
    assert nb.cells[2].source.strip() == (dojo.toy / "katas" / "toy" / "toy.py").read_text().strip()
    assert nb.metadata["kernelspec"]["name"] == "decode-dojo" and nb.metadata["dojo"]["kata"] == "toy"

    nb.cells[2].source = "def add(a, b):\n    return a + b\n"
    save(nb, path)
    kept = dojo("notebook", "toy")
    assert kept.returncode == 0 and "kept it" in kept.stdout, kept.stdout
    assert "return a + b" in nbformat.read(path, as_version=4).cells[2].source, (
        "work was overwritten without --force"
    )

    forced = dojo("notebook", "toy", "--force")
    assert forced.returncode == 0, forced.stderr
    backups = list((dojo.workspace / ".dojo" / "backups").glob("toy-*.ipynb"))
    assert len(backups) == 1 and "return a + b" in backups[0].read_text(), (
        "the replaced notebook was not backed up"
    )
    assert "NotImplementedError" in nbformat.read(path, as_version=4).cells[2].source


def test_check_and_grade_a_notebook_with_the_reference(toy_env):
    """dojo check --notebook and dojo grade PATH.ipynb pass a notebook holding the reference, split over two cells"""
    dojo = toy_env
    reference = dojo.reference.read_text()
    first, second = reference.split("\n\n\ndef count_words")
    nb = make_nb(
        ("md", "# my attempt"),
        ("code", "%matplotlib inline\n!pip --version\nfrom toy import *"),
        ("solution", first),
        ("code", "%%bash\necho not python"),
        ("solution", "def count_words" + second),
        ("code", "add(1, 2)?"),
    )
    path = save(nb, dojo.workspace / "attempt.ipynb")
    checked = dojo("check", "--notebook", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Score 6/6 points" in checked.stdout and str(path) in checked.stdout
    assert checked.stdout.startswith("Graded attempt.ipynb as saved at "), "no saved-version line first"
    results = json.loads((dojo.workspace / "results" / "toy.json").read_text())
    assert results["status"] == "pass" and results["path"] == str(path)
    assert dojo.attempts()[-1] == ("toy", "check", 6, 6, 1)

    graded = dojo("grade", str(path), "--json", str(dojo.workspace / "report.json"))
    assert graded.returncode == 0, graded.stdout + graded.stderr
    doc = json.loads((dojo.workspace / "report.json").read_text())
    assert doc["submissions"][0]["katas"]["toy"]["points"] == 6


def test_grade_a_folder_of_notebooks(toy_env, tmp_path):
    """dojo grade FOLDER grades <slug>.ipynb where the folder has no <slug>.py, and prefers the .py"""
    dojo = toy_env
    reference = dojo.reference.read_text()
    notebooks, both = tmp_path / "notebooks", tmp_path / "both"
    notebooks.mkdir()
    both.mkdir()
    save(make_nb(("solution", reference)), notebooks / "toy.ipynb")
    save(make_nb(("solution", reference)), both / "toy.ipynb")
    shutil.copy(dojo.toy / "katas" / "toy" / "toy.py", both / "toy.py")  # the untouched stub
    graded = dojo("grade", str(notebooks), str(both), "--json", str(tmp_path / "report.json"))
    assert graded.returncode == 1, graded.stdout + graded.stderr  # the stub fails
    by_path = {s["path"]: s for s in json.loads((tmp_path / "report.json").read_text())["submissions"]}
    assert by_path[str(notebooks)]["katas"]["toy"]["points"] == 6, "a folder's notebook was not graded"
    assert by_path[str(both)]["katas"]["toy"]["points"] == 0, (
        "with toy.py beside toy.ipynb, the .py is graded"
    )


def test_syntax_error_names_the_cell(toy_env):
    """A syntax error in a solution cell fails the check with a message naming the cell and line (and a missing
    notebook says how to make one)"""
    dojo = toy_env
    missing = dojo("check", "toy", "--notebook")
    assert missing.returncode == 1 and "dojo notebook toy" in missing.stderr, missing.stderr
    save(
        make_nb(("md", "# toy"), ("solution", "def add(a, b):\n    return a +\n")),
        dojo.workspace / "toy.ipynb",
    )
    checked = dojo("check", "toy", "--notebook")
    assert checked.returncode == 1
    assert "cell 2, line 2" in checked.stdout and "SyntaxError" in checked.stdout, (
        checked.stdout + checked.stderr
    )


# ---- extraction and grading in process -----------------------------------------------------------


def test_no_solution_cell_is_a_clear_error(toy_env):
    """A notebook without a solution-tagged cell cannot be graded, and the grading cell says why"""
    path = save(
        make_nb(("md", "# toy"), ("code", "def add(a, b):\n    return a + b")),
        toy_env.workspace / "toy.ipynb",
    )
    with pytest.raises(NotebookError, match="no code cell tagged 'solution'"):
        nbextract.extract(nbextract.read(path), path.name)
    shown = notebook.grade_here("toy", path)
    assert not shown.passed and "no code cell tagged 'solution'" in repr(shown)
    assert "no code cell tagged" in shown._repr_html_() and not ANSI.search(shown._repr_html_())


@pytest.mark.parametrize(
    "cells, where",
    [
        ([("solution", "x = 1"), ("solution", "from __future__ import annotations")], "cell 2, line 1"),
        ([("md", "# m"), ("solution", "%%bash\necho hi")], "cell 2"),
        ([("md", "# m"), ("code", "ok = 1"), ("solution", "def f(:\n    pass")], "cell 3, line 1"),
    ],
    ids=["future-import-late", "non-python-cell-magic", "bad-def"],
)
def test_extraction_errors_name_the_cell(cells, where):
    """Solution cells that are not Python together give an error naming the cell"""
    with pytest.raises(NotebookError) as info:
        nbextract.extract(make_nb(*cells), "my.ipynb")
    assert f"my.ipynb: {where}" in str(info.value), str(info.value)


def test_line_map_and_ipython_lines_in_solution_cells():
    """Module lines map back to (cell, line); IPython lines inside solution cells keep the line count"""
    nb = make_nb(
        ("md", "# title"),
        ("solution", "%time y = 2\nimport math\n\n\ndef f(x):\n    !echo hi\n    return math.sqrt(x)"),
        ("code", "%load_ext autoreload\n!ls"),
        ("solution", "GOOD = '%d percent' % 5"),
    )
    got = nbextract.extract(nb, "my.ipynb")
    assert got.cells == [2, 4]
    ns: dict = {}
    exec(compile(got.source, "m", "exec"), ns)  # noqa: S102 (the extracted module, run as the grader would)
    assert ns["f"](9) == 3.0 and ns["GOOD"] == "5 percent", "valid Python in a solution cell was changed"
    lines = got.source.splitlines()
    assert got.locate(lines.index("    return math.sqrt(x)") + 1) == (2, 7)
    assert got.locate(lines.index("GOOD = '%d percent' % 5") + 1) == (4, 1)
    module = Path("/tmp/x/toy_ipynb.py")
    n = lines.index("    return math.sqrt(x)") + 1
    message = f"ValueError: math domain error (at toy_ipynb.py:{n}, in f)"
    assert got.rewrite(message, module) == "ValueError: math domain error (at cell 2, line 7, in f)"
    assert got.rewrite(f'File "/tmp/x/toy_ipynb.py", line {n}', module) == "cell 2, line 7"
    assert got.rewrite("toy_ipynb.py raised at import", module) == "my.ipynb raised at import"


def test_runtime_errors_name_the_cell(toy_env):
    """An exception raised in a solution cell is reported at its notebook cell and line, and a name defined
    only in an untagged cell is explained"""
    path = save(
        make_nb(
            ("md", "# toy"),
            ("code", "BASE = 0"),
            ("solution", "def add(a, b):\n    return BASE + a + b"),
            ("solution", "def count_words(text):\n    counts = {}\n    raise ValueError('boom')"),
        ),
        toy_env.workspace / "toy.ipynb",
    )
    result = notebook.grade_notebook(path)
    messages = {t.name: t.message for t in result.tests}
    assert "(at cell 4, line 3, in count_words)" in messages["test_count_words_example"], messages
    assert (
        "NameError" in messages["test_add_example"]
        and "(at cell 3, line 2, in add)" in messages["test_add_example"]
    )
    assert "only cells tagged 'solution' are graded" in messages["test_add_example"]
    assert result.path == str(path.resolve()) and "toy_ipynb" not in json.dumps(result.to_json())


def test_kata_of_and_bad_notebooks(toy_env, tmp_path):
    """A notebook's kata comes from its metadata or file name; a file that is not a notebook is a clear error"""
    assert notebook.kata_of(save(make_nb(("solution", "x = 1")), tmp_path / "whatever.ipynb")) == "toy"
    assert notebook.kata_of(save(make_nb(("solution", "x = 1"), slug=None), tmp_path / "toy.ipynb")) == "toy"
    with pytest.raises(NotebookError, match="cannot tell which kata"):
        notebook.kata_of(save(make_nb(("solution", "x = 1"), slug=None), tmp_path / "mine.ipynb"))
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    result = notebook.grade_notebook(broken, "toy")
    assert result.status == "error" and "not a readable Jupyter notebook" in result.error


def test_render_solutions_writes_read_only_reference_notebooks(tmp_path):
    """make notebooks: one read-only notebook per kata with a reference, its solution cell the reference"""
    written = nbbuild.render_solutions(tmp_path / "notebooks")
    katas = [k for k in catalog.load() if k.reference.is_file()]
    assert sorted(p.stem for p in written) == sorted(k.slug for k in katas)
    for kata in katas:
        path = tmp_path / "notebooks" / f"{kata.slug}.ipynb"
        assert not path.stat().st_mode & 0o222, f"{path.name} is writable"
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        (solution,) = [c for c in nb.cells if nbextract.is_solution(c)]
        assert solution.source == kata.reference.read_text().rstrip("\n")
        assert all(c.metadata.get("editable") is False for c in nb.cells)
    again = nbbuild.render_solutions(tmp_path / "notebooks")  # re-rendering replaces read-only files
    assert len(again) == len(written)


def test_instructions_say_what_is_graded_and_how_to_show_line_numbers(toy_env):
    """The notebook's instructions say the saved notebook is graded, and how to show the line numbers that
    reports name (JupyterLab hides them by default)"""
    nb = nbbuild.build(catalog.get("toy"), "x = 1")
    how = next(c["source"] for c in nb["cells"] if c["id"] == "how")
    assert "View > Show Line Numbers" in how and "*as saved*" in how, how
    grading = next(c["source"] for c in nb["cells"] if c["id"] == "grade")
    assert "SAVED" in grading and max(len(line) for line in grading.splitlines()) <= 80, (
        "the grading cell scrolls"
    )


# ---- notebook mode as a way in: check, welcome, status, list, the prompt ------------------------------


def test_check_grades_the_notebook_when_the_kata_is_only_in_one(toy_env):
    """`dojo check toy` (and plain `dojo check`) with workspace/toy.ipynb and no toy.py grades the notebook;
    welcome, status and list say the kata is in a notebook and how to grade it"""
    dojo = toy_env
    assert dojo("notebook", "toy").returncode == 0
    for args in (("check", "toy"), ("check",)):
        out = dojo(*args)
        assert out.returncode == 1, out.stderr
        assert out.stdout.startswith("Graded toy.ipynb as saved at ") and "Score 0/6 points" in out.stdout, (
            out.stdout
        )
        assert "dojo start" not in out.stdout + out.stderr
    how = "save toy.ipynb and run its last cell (JupyterLab: dojo lab), or: dojo check toy"
    assert how in dojo().stdout
    status = dojo("status").stdout
    assert "toy.ipynb  (a notebook)" in status and f"Next: {how}" in status, status
    assert "(notebook)" in next(line for line in dojo("list").stdout.splitlines() if " toy " in line)
    assert "toy is in a notebook" in dojo("watch", "toy").stderr


def test_check_says_which_command_grades_a_newer_notebook(toy_env):
    """with both a .py and a notebook saved after it, `dojo check` grades the .py and names the notebook's command"""
    dojo = toy_env
    dojo("start", "toy")
    os.utime(dojo.file(), (1, 1))  # the .py saved long ago
    assert dojo("notebook", "toy").returncode == 0
    out = dojo("check", "toy")
    assert (
        str(dojo.file()) in out.stdout
        and "toy.ipynb, saved since, is graded by: dojo check toy --notebook" in out.stdout
    )
    assert "dojo check toy --notebook" in dojo("status").stdout


def test_never_started_names_both_ways_in(toy_env):
    """a kata in neither form: the error names `dojo start` and `dojo notebook`"""
    out = toy_env("check", "toy")
    assert out.returncode == 1 and "dojo start toy" in out.stderr and "dojo notebook toy" in out.stderr


@pytest.mark.parametrize("kata", [k for k in catalog.load() if k.stub.is_file()], ids=lambda k: k.slug)
def test_prompt_fits_the_notebook(kata):
    """the notebook's prompt never says to fill in `<slug>.py` or to run `dojo start <slug>`: the work is the solution cell"""
    prompt = nbbuild.build(kata, "x = 1")["cells"][0]["source"]
    assert f"`{kata.slug}.py`" not in prompt and f"dojo start {kata.slug}" not in prompt
    if f"`{kata.slug}.py`" in kata.readme():
        assert "solution cell" in prompt
