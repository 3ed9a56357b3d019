"""The grading view: which reference modules a kata's suite is given, and which it is never given.

A kata is graded in isolation: its suite gets the reference modules the suite imports, the README or
stub names and the kata's own reference imports, and what those import in turn (`reference_modules`),
read from the source as an AST. Never the kata's own answer (`hidden`): solutions/<slug>.py and the
twins katas.toml declares. `importable` is what a submission may import; `runner_modules` the dojo
modules a grading copies. Placing the files is dojo.grading.grade's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dojo import catalog, targets


def imports_of(path: Path, package: str, folder: Path | None = None) -> set[str]:
    """The modules of `package` that the file at `path` imports, anywhere in it (function bodies too), as
    dotted names below the package ("model", "grading.channel"); `folder` (the package's folder) tells a
    submodule imported by name (`from dojo.grading import channel`) from a name in a module.
    Nothing for a file that does not parse: the suite's import then fails in the grading, which says why."""
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.partition(".")[2] for a in node.names if a.name.startswith(f"{package}.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:  # from solutions import attention as readable
                found |= {a.name for a in node.names}
            elif node.module.startswith(f"{package}."):
                below = node.module.partition(".")[2]
                subs = {f"{below}.{a.name}" for a in node.names}
                found |= (
                    ({m for m in subs if folder and module_file(folder, m)} or {below}) if folder else {below}
                )
    return found


def module_file(folder: Path, name: str) -> Path | None:
    """The file of module `name` ("grading.channel") under `folder`: a .py, or a package's __init__.py."""
    base = folder.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def solution_imports(path: Path) -> set[str]:
    """The `solutions.<module>` names the file at `path` imports."""
    return imports_of(path, "solutions", targets.solutions_dir())


def _closure(start: set[str], folder: Path, package: str, never: set[str] = frozenset()) -> list[str]:
    """`start` and every module of `folder` they import in turn, without those in `never`; sorted."""
    todo, seen = set(start) - never, set()
    while todo:
        name = todo.pop()
        source = module_file(folder, name)
        if name in seen or source is None:
            continue
        seen.add(name)
        todo |= imports_of(source, package, folder) - never - seen
    return sorted(seen)


def permitted(kata: catalog.Kata) -> set[str]:
    """The reference modules the kata's README or stub names (`solutions.roofline`): the candidate may
    import these, so the view holds them and the integrity scan does not flag them."""
    text = "".join(p.read_text() for p in (kata.folder / "README.md", kata.stub) if p.is_file())
    return set(re.findall(r"\bsolutions\.(\w+)", text)) - hidden(kata)


def allowed(kata: catalog.Kata) -> set[str]:
    """The reference modules a submission for `slug` may import: the ones its README or stub names, and
    the helpers its own reference imports (bpe's `solutions.pretokenize`), never a hidden one."""
    reference = kata.reference
    own = solution_imports(reference) if reference.is_file() else set()
    return (permitted(kata) | own) - hidden(kata)


def importable(kata: catalog.Kata) -> list[str]:
    """What a submission may import at run time: `allowed(kata)` and, in turn, the reference modules those
    import (solutions.model imports packed_gemm), never a hidden one. Sorted names."""
    return _closure(allowed(kata), targets.solutions_dir(), "solutions", hidden(kata))


def hidden(kata: catalog.Kata) -> set[str]:
    """The modules that hold the kata's own answer: its reference and the twins katas.toml declares."""
    return {kata.slug, *kata.twins}


def reference_modules(kata: catalog.Kata) -> list[str]:
    """The reference modules the suite of `slug` sees: what the suite and the README need, and what
    those import in turn, never a hidden one. Sorted names, without `__init__`."""
    start = solution_imports(kata.suite) | allowed(kata)
    return _closure(start, targets.solutions_dir(), "solutions", hidden(kata))


def runner_modules(kata: catalog.Kata) -> list[str]:
    """The dojo modules the grading needs, as dotted names below dojo ("grading.suite.plugin", "testing"): the
    plugin and what it, the suite and the suites' conftest import (dojo.testing ...), in turn. The rest
    of the runner (grading.grade, check_katas ...) stays out; the packages' __init__ files are the
    copier's to add."""
    package = Path(__file__).resolve().parent.parent
    start = {"grading.suite.plugin"} | imports_of(kata.suite, "dojo", package)
    start |= {m for c in targets.suites_dir().glob("conftest.py") for m in imports_of(c, "dojo", package)}
    return _closure(start, package, "dojo")
