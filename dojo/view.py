"""The grading view: which reference modules a kata's suite is given, and which it is never given.

A kata is graded in isolation: its suite supplies the reference parts of *other* katas (the
generate suite builds on `solutions.model` and `solutions.kv_cache`), and a README may tell the
candidate to use one (`solutions.roofline.phase_cost` in the latency kata). The view is the
closure of those modules, and of the helpers the kata's own reference imports (bpe's
pretokenize), under their own `solutions.*` imports, read from the source as an AST,
without the kata's own reference: `solutions/<slug>.py` and every twin of it,
`solutions/<slug>_*.py` (such as attention_fast.py). A module in the view that imports a hidden
one (model.py's default cache is the kv_cache reference) keeps that import, which then fails.

Left out: which *names* a module may use (a permitted module is visible whole) and anything
outside solutions/ (the suites, mutants and the runner are placed by dojo.grade).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dojo import catalog, targets


def solution_imports(path: Path) -> set[str]:
    """The `solutions.<module>` names the file at `path` imports, anywhere in it (function bodies too).
    Nothing for a file that does not parse: the suite's import then fails in the grading, which says why."""
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("solutions.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "solutions":  # from solutions import attention as readable
                found |= {a.name for a in node.names}
            elif node.module.startswith("solutions."):
                found.add(node.module.split(".")[1])
    return found


def permitted(slug: str) -> set[str]:
    """The reference modules the kata's README or stub names (`solutions.roofline`): the candidate may
    import these, so the view holds them and the integrity scan does not flag them."""
    kata = catalog.get(slug)
    text = "".join(p.read_text() for p in (kata.folder / "README.md", kata.stub) if p.is_file())
    return set(re.findall(r"\bsolutions\.(\w+)", text)) - hidden(slug)


def allowed(slug: str) -> set[str]:
    """The reference modules a submission for `slug` may import: the ones its README or stub names, and
    the helpers its own reference imports (bpe's `solutions.pretokenize`), never a hidden one."""
    reference = targets.solutions_dir() / f"{slug}.py"
    own = solution_imports(reference) if reference.is_file() else set()
    return (permitted(slug) | own) - hidden(slug)


def hidden(slug: str) -> set[str]:
    """The modules that hold the kata's own answer: its reference and every `<slug>_*` twin."""
    names = {p.stem for p in targets.solutions_dir().glob(f"{slug}_*.py")}
    return names | {slug}


def reference_modules(slug: str) -> list[str]:
    """The reference modules the suite of `slug` sees: what the suite and the README need, and what
    those import in turn, never a hidden one. Sorted names, without `__init__`."""
    kata = catalog.get(slug)
    solutions, secret = targets.solutions_dir(), hidden(slug)
    todo = (solution_imports(kata.suite) | allowed(slug)) - secret
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        source = solutions / f"{name}.py"
        if name in seen or not source.is_file():
            continue
        seen.add(name)
        todo |= solution_imports(source) - secret - seen
    return sorted(seen)
