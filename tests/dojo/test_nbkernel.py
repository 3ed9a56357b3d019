"""What the kernel and JupyterLab see of a kata notebook: metadata equal to the kernel's own, and the
report's saved-version line and unsaved-code warning through the states of an edit, in a real kernel."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from dojo import catalog
from dojo.notebook import build as nbbuild
from dojo.notebook import kernel as nbkernel


@pytest.fixture
def kernel(toy_env):
    """A client of the notebooks' kernel ("decode-dojo"), started in the toy workspace."""
    from jupyter_client.manager import start_new_kernel

    try:
        spec = KernelSpecManager().get_kernel_spec("decode-dojo")
    except NoSuchKernel:
        pytest.fail("no Jupyter kernel 'decode-dojo': `make setup` installs it")
    assert Path(spec.argv[0]).parent == Path(sys.executable).parent, (
        f"kernel 'decode-dojo' runs {spec.argv[0]}, not this venv's python {sys.executable}: run `make setup`"
    )
    try:
        manager, client = start_new_kernel(
            kernel_name="decode-dojo", env=toy_env.env, cwd=str(toy_env.workspace)
        )
    except NoSuchKernel:
        pytest.fail("no Jupyter kernel 'decode-dojo': `make setup` installs it")
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(client, code: str) -> str:
    """Run `code` in the kernel as a notebook cell would (stored in its history); what it displayed, as text."""
    shown = []

    def hook(msg):
        if msg["msg_type"] in ("execute_result", "display_data"):
            shown.append(msg["content"]["data"].get("text/plain", ""))
        elif msg["msg_type"] == "stream":
            shown.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            shown.append("\n".join(msg["content"]["traceback"]))

    reply = client.execute_interactive(code, store_history=True, output_hook=hook, timeout=120)
    assert reply["content"]["status"] == "ok", "\n".join(shown)
    return "\n".join(shown)


def test_fresh_notebook_metadata_is_what_jupyterlab_would_write(kernel):
    """A new notebook's kernelspec and language_info are exactly what the kernel reports, so JupyterLab
    has nothing to change on opening it (no unsaved-changes marker)"""
    nb = nbbuild.build(catalog.get("toy"), "x = 1")
    info = kernel.kernel_info(reply=True, timeout=60)["content"]["language_info"]
    assert nb["metadata"]["language_info"] == info, (
        f"written {nb['metadata']['language_info']}, kernel says {info}"
    )
    spec = KernelSpecManager().get_kernel_spec(nb["metadata"]["kernelspec"]["name"])
    assert nb["metadata"]["kernelspec"] == {
        "name": "decode-dojo",
        "display_name": spec.display_name,
        "language": spec.language,
    }


def test_report_says_which_version_it_graded_and_warns_only_while_true(toy_env, kernel):
    """Through the states of an edit in a real kernel: the report always names the saved version graded, and
    warns exactly while the kernel's last run of the solution differs from the saved cell"""
    dojo = toy_env
    assert dojo("notebook", "toy").returncode == 0
    path = dojo.workspace / "toy.ipynb"
    stub = nbformat.read(path, as_version=4).cells[2].source
    grade = f'from dojo.notebook import grade_here\ngrade_here("toy", {str(path)!r})'

    def graded() -> tuple[str, str]:
        text = run(kernel, grade)
        saved_at = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
        first = text.splitlines()[0]
        assert re.fullmatch(rf"Graded toy\.ipynb as saved at {saved_at}, \d+ s ago", first), first
        return text, "Warning:" in text

    run(kernel, stub)  # saved, and run
    assert graded()[1] is False, "warned with the saved cell run"
    edited = stub.replace("raise NotImplementedError", "return a + b", 1)
    assert edited != stub
    os.utime(path)  # saved just before the run below: the line for a save older than a run is tested apart
    run(kernel, edited)  # edited and run, not saved
    text, warned = graded()
    assert warned and "In [3]" in text and "Score 0/6" in text, (
        f"no warning for a run edit not saved:\n{text}"
    )
    assert "unsaved edits: In [3]" in text and "Run cell" not in text, (
        f"not the one case that applies:\n{text}"
    )
    warning = next(line for line in text.splitlines() if line.startswith("Warning:"))
    assert "ran add as it is in no saved cell" in warning and "count_words" not in warning, (
        f"the warning does not name just the definition edited (add), count_words is as saved:\n{warning}"
    )
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source, nb.cells[2].execution_count = (
        edited,
        3,
    )  # as JupyterLab saves it: the count of its last run
    nbformat.write(nb, path)  # now saved
    text, warned = graded()
    assert not warned and "Score 3/6" in text, f"warned after saving what was run:\n{text}"
    nb.cells[2].source = edited + "\n\nEXTRA = 1\n"
    nbformat.write(nb, path)  # edited and saved, not run: the kernel's add() is not the saved one
    text, warned = graded()
    assert warned and "In [3]" in text, f"no warning while the kernel runs code other than the saved:\n{text}"
    assert "cell 3 was edited and saved since it ran (In [3])" in text and "unsaved" not in text, text
    run(kernel, nb.cells[2].source)  # ... until the saved cell is run
    assert not graded()[1], "warned after running the saved cell"


def test_report_leads_with_a_save_older_than_the_last_solution_run(toy_env, kernel):
    """In a real kernel: when the saved notebook is more than STALE_AFTER_S older than the kernel's last run
    of solution code, the report's first line says so in bold, the run's time known (noted from the first
    grading on) or bounded by the kernel's start; a fresh save, or a read-only solution, gives the usual line"""
    from dojo.notebook.grading import STALE_AFTER_S

    dojo = toy_env
    assert dojo("notebook", "toy").returncode == 0
    path = dojo.workspace / "toy.ipynb"
    stub = nbformat.read(path, as_version=4).cells[2].source
    grade = f'from dojo.notebook import grade_here\ngrade_here("toy", {str(path)!r})'
    saved = time.time() - 150
    assert 150 > STALE_AFTER_S + 60

    def first_line() -> str:
        return run(kernel, grade).splitlines()[0]

    def backdate():
        os.utime(path, (saved, saved))

    def stale(n: int, newer: str) -> str:
        return (
            f"Graded the saved notebook (saved {time.strftime('%H:%M:%S', time.localtime(saved))}); your last "
            f"run of a solution cell (In [{n}]) is {newer}: save (Ctrl-S / Cmd-S) and run this cell again."
        )

    backdate()  # saved 2.5 min ago, before this kernel started
    run(kernel, stub)  # In [1]: run before any grading, so only known to follow the kernel's start
    assert first_line() == stale(1, "at least 2 min newer"), "no bold line for a save older than the kernel"
    backdate()  # grading recorded nothing in the file, but keep the save where it was
    run(kernel, stub)  # In [3], timed
    assert first_line() == stale(3, "2 min newer"), "no bold line for a save older than a timed run"
    os.utime(path)  # saved now
    assert re.fullmatch(r"Graded toy\.ipynb as saved at [\d:]+, \d+ s ago", first_line()), (
        "the bold line stayed after a save"
    )
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].metadata["editable"] = False
    nbformat.write(nb, path)
    run(kernel, stub)
    backdate()
    assert first_line().startswith("Graded toy.ipynb as saved at"), "a read-only solution cannot be unsaved"


def test_changed_definitions_name_only_what_differs_from_the_saved_cells():
    """The unsaved-code warning names the top-level functions, classes and assignments whose source is not
    the saved one (new ones included), never those as saved; decorators count, IPython lines do not"""
    saved = "import math\n\ndef add(a, b):\n    return a - b\n\nclass Box:\n    pass\n\nLIMIT = 3\n"
    changed = nbkernel.changed_definitions
    assert changed(saved, [saved]) == []
    assert changed(saved.replace("a - b", "a + b"), [saved]) == ["add"]
    assert changed(saved.replace("LIMIT = 3", "LIMIT: int = 4"), [saved]) == ["LIMIT"]
    assert changed(saved + "\nx, *rest = 1, 2\nLIMIT += 1\n", [saved]) == ["LIMIT", "rest", "x"]
    assert changed(saved.replace("class Box", "@dataclass\nclass Box"), [saved]) == ["Box"]
    assert changed("%time y = 1\n" + saved, [saved]) == [], "a magic line is not a definition"
    assert changed("def add(a, b):\n    return a - b\n", ["", saved]) == [], "compared with every saved cell"
    assert changed("def add(a, b):\n    return a +", [saved]) is None, "a run that does not parse"


def test_stale_runs_compare_each_saved_cell_with_its_latest_run():
    """For each saved solution cell, the kernel's latest run defining one of its names must be a saved cell:
    split solutions, scratch redefinitions, runs that did not parse, and the grading cell itself"""
    add_v1, add_v2 = "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"
    words = "def count_words(text):\n    return {}"
    grading = 'from dojo.notebook import grade_here\ngrade_here("toy")'
    stale = nbkernel.stale_runs
    assert stale([add_v1], ["", grading]) == [], "nothing run yet is not stale"
    assert stale([add_v1, words], ["", add_v1, words, grading]) == []
    assert stale([add_v2, words], ["", add_v1, words, grading]) == [1], "saved since, not run"
    assert stale([add_v1, words], ["", add_v1, words, add_v2]) == [3], "a scratch cell redefining add()"
    assert stale([add_v1, words], ["", add_v2 + "\n\n" + words]) == [1], "one run covering both cells"
    assert stale([add_v1], ["", add_v1, "def add(a, b):\n    return a +"]) == [2], "a run that did not parse"
    assert stale([add_v1], ["", add_v2, "\n" + add_v1 + "\n\n"]) == [], (
        "whitespace around a cell is not a change"
    )
    assert stale(["x = 1"], ["", "x = 2"]) == [], "a cell defining no function or class is not compared"


def test_why_stale_names_the_one_case_from_the_saved_file():
    """The saved notebook tells the cases apart: a run that is an untagged cell's saved text is a scratch
    redefinition; a solution cell saved with that run's execution count was edited since (saved, not run);
    a run in no saved cell is an unsaved edit"""
    add_v1, add_v2 = "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"
    cell = nbkernel.SavedCell
    why = nbkernel.why_stale
    assert why(4, add_v2, [cell(3, add_v1, 2, True), cell(4, add_v2, 4, False)]) == (
        "scratch",
        cell(4, add_v2, 4, False),
    )
    assert why(4, add_v1, [cell(3, add_v2, 4, True)]) == ("not run", cell(3, add_v2, 4, True))
    assert why(4, add_v2, [cell(3, add_v1, 2, True)]) == ("unsaved", None)
    assert why(4, add_v2, [cell(3, add_v1, None, True)]) == ("unsaved", None), "never run before the save"
