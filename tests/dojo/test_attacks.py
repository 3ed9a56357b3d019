"""Judge mode against a hostile candidate who has read this repository: routes a red team tried that held.

Each grades the toy kata in judge mode (sandboxed=True) with an attack and asserts it scores what the
untouched stub scores (0). Where bwrap cannot run, these skip with the reason (the `toy` fixture).
"""

from __future__ import annotations

import json

from dojo.grading import grade


def submit(toy, source: str) -> grade.GradeResult:
    folder = toy.toy.parent / "submission"
    folder.mkdir(exist_ok=True)
    (folder / "toy.py").write_text(source)
    return grade.grade("toy", str(folder), sandboxed=True, timeout=60)


def test_results_with_their_own_dunders_score_nothing(toy):
    """an object equal to anything, truthy, with __float__, __index__ and __len__: a handle compared by identity"""
    result = submit(
        toy,
        (
            "class Any:\n"
            "    def __eq__(self, other):\n        return True\n"
            "    def __ne__(self, other):\n        return False\n"
            "    def __bool__(self):\n        return True\n"
            "    def __len__(self):\n        return 0\n"
            "    def __float__(self):\n        return 5.0\n"
            "    def __index__(self):\n        return 5\n"
            "    def __hash__(self):\n        return 0\n"
            "def add(a, b):\n    return Any()\n"
            "def count_words(text):\n    return Any()\n"
        ),
    )
    assert result.points == 0 and all(t.outcome == "failed" for t in result.tests), result.to_json()


def test_nan_and_huge_ints_score_nothing(toy):
    """NaN where a number belongs, an int past the 4300-digit limit where a dict belongs: failures, no crash"""
    result = submit(
        toy,
        "def add(a, b):\n    return float('nan')\ndef count_words(text):\n    return {'the': 10**5000}\n",
    )
    assert result.points == 0 and all(t.outcome == "failed" for t in result.tests), result.to_json()
    assert not result.inconclusive, result.to_json()


def test_exceptions_named_like_the_runners_own_are_plain_failures(toy):
    """classes named AssertionError, Skipped, Inconclusive, a NotImplementedError subclass and one whose
    str() raises: each an ordinary failure, never a skip, an inconclusive or a pass"""
    result = submit(
        toy,
        (
            "class Skipped(Exception):\n    pass\n"
            "class Inconclusive(Exception):\n    pass\n"
            "class Loud(NotImplementedError):\n    def __str__(self):\n        raise RuntimeError('no')\n"
            "def add(a, b):\n    raise (Skipped if a > 0 else Inconclusive)('later')\n"
            "def count_words(text):\n    raise Loud()\n"
        ),
    )
    assert result.points == 0 and all(t.outcome == "failed" for t in result.tests), result.to_json()
    assert not result.inconclusive, "an exception named Inconclusive from the candidate was taken as one"


def test_the_worker_sees_no_seed_no_suite_and_no_repository(toy):
    """what the worker can list around it holds only the candidate's own file: no suite, no secret seed"""
    result = submit(
        toy,
        (
            "import os\n"
            "def add(a, b):\n"
            "    seen = []\n"
            "    for top in [os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__)), 'tmp']:\n"
            "        for d, _, files in os.walk(os.path.join(os.sep, top) if top == 'tmp' else top):\n"
            "            seen += [os.path.join(d, f) for f in files]\n"
            "    raise ValueError('SEEN ' + ' '.join(sorted(seen)))\n"
            "def count_words(text):\n    raise NotImplementedError\n"
        ),
    )
    message = next(t.message for t in result.tests if t.property == "add(2, 3) is 5")
    assert "SEEN" in message, result.to_json()
    seen = message.split("SEEN", 1)[1]
    assert "toy.py" in seen, f"the walk did not even find the candidate's own file: {seen[:500]}"
    for leak in ("test_toy", "input-seed", "plugin.py", "channel"):
        assert leak not in seen, f"the worker can see {leak}: {seen[:500]}"
    assert result.points == 0, result.to_json()


HOG = (
    "import os, threading, time\n"
    "hoard, files = [], []\n"
    "try:  # memory: as much as the caps allow, held\n"
    "    while len(hoard) < 48:\n"
    "        hoard.append(bytearray(64 * 2**20))\n"
    "except MemoryError:\n"
    "    pass\n"
    "try:  # descriptors, until refused\n"
    "    while len(files) < 100000:\n"
    "        files.append(open(os.devnull))\n"
    "except OSError:\n"
    "    pass\n"
    "children = 0\n"
    "try:  # processes that sleep, until refused\n"
    "    while children < 200:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30)\n"
    "            os._exit(0)\n"
    "        children += 1\n"
    "except OSError:\n"
    "    pass\n"
    "def spin():\n"
    "    end = time.monotonic() + 20\n"
    "    while time.monotonic() < end:\n"
    "        pass\n"
    "for _ in range(4):  # every core, for the whole grading\n"
    "    threading.Thread(target=spin, daemon=True).start()\n"
    "def add(a, b):\n    raise NotImplementedError\n"
    "def count_words(text):\n    raise NotImplementedError\n"
)


def test_a_neighbour_that_exhausts_the_machine_costs_the_honest_submission_nothing(toy, tmp_path):
    """--jobs 2: one submission hoards memory, descriptors and processes and spins on every core while an
    honest one grades beside it; the honest one gets every point, the hog none, and the run finishes"""
    from dojo.interview import takehome

    honest, hog = tmp_path / "honest", tmp_path / "hog"
    for path, source in ((honest, toy.reference.read_text()), (hog, HOG)):
        path.mkdir()
        (path / "toy.py").write_text(source)
    doc = takehome.grade_submissions([hog, honest], jobs=2, timeout=90)
    by_path = {s["path"]: s for s in doc["submissions"]}
    good, bad = by_path[str(honest)], by_path[str(hog)]
    assert good["points"] == good["total"] > 0, json.dumps(good, indent=1)[:2000]
    assert bad["points"] == 0, json.dumps(bad, indent=1)[:2000]
