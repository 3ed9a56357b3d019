"""The dojo package in layers: no import cycle, and a grading engine that imports no feature.

Every module's imports are read from its AST, imports inside functions included (a lazy import is
still a dependency). `LAYERS` ranks the modules: a module may import only modules of a lower rank,
so imports flow one way: cli -> features -> practice -> grading -> the base (catalog, targets, the
suites' kit). Left out: third-party imports, and imports a module makes of itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dojo

PACKAGE = Path(dojo.__file__).resolve().parent

# rank: a module imports only lower ranks. Keep in step with the README's layout.
LAYERS = {
    "base": 0,  # dojo, errors, catalog, targets, channel, testing, machine, fakeclock
    "grading": 1,
    "practice": 2,
    "features": 3,  # interview, notebook, tools
    "cli": 4,
}
LAYER_OF = {
    "dojo": "base", "dojo.errors": "base", "dojo.targets": "base", "dojo.catalog": "base", "dojo.channel": "base",
    "dojo.testing": "base", "dojo.machine": "base", "dojo.fakeclock": "base", "dojo.prose": "base",
    "dojo.grade": "grading", "dojo.sandbox": "grading", "dojo.integrity": "grading", "dojo.similarity": "grading",
    "dojo.view": "grading", "dojo.plugin": "grading", "dojo.mutant": "grading", "dojo.check_katas": "grading",
    "dojo.rerun": "grading",
    "dojo.report": "practice", "dojo.history": "practice", "dojo.workspace": "practice", "dojo.check": "practice",
    "dojo.interview": "features", "dojo.ask": "features", "dojo.session": "features", "dojo.bank": "features",
    "dojo.takehome": "features", "dojo.notebook": "features", "dojo.nbbuild": "features",
    "dojo.nbextract": "features", "dojo.nbkernel": "features", "dojo.nbreport": "features", "dojo.lab": "features",
    "dojo.demo": "features", "dojo.roofline_tool": "features", "dojo.bench_tool": "features",
    "dojo.cli": "cli", "dojo.__main__": "cli",
}
FEATURES = ("practice", "features", "cli")  # what grading may never import


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def imports(path: Path, known: set[str]) -> set[str]:
    """The dojo modules the file at `path` imports anywhere (top level or inside functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(path, set(mods)) - {"dojo"} for name, path in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, colouring the modules)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_find_cycle_names_a_cycle():
    """The cycle finder itself: it names a cycle through three modules, and finds none in a chain."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_imports_count_those_inside_functions(tmp_path):
    """A lazy import inside a function is an import: the AST walk sees it."""
    assert "dojo.grade" in imports(PACKAGE / "check.py", set(modules()))
    assert "dojo.interview" in imports(PACKAGE / "cli.py", set(modules()))  # imported inside _during_interview


def test_no_import_cycle():
    """No import cycle in dojo/, counting imports inside functions."""
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle in dojo/: " + " -> ".join(cycle)


def test_every_module_has_a_layer():
    """Each module of dojo/ is placed in a layer (a new one must say where it belongs)."""
    missing = sorted(set(modules()) - set(LAYER_OF))
    assert not missing, f"modules without a layer in LAYER_OF: {missing}"


def test_imports_flow_down_the_layers():
    """A module imports only from its own layer or those below: cli -> features -> practice -> grading -> base."""
    wrong = [f"{m} ({LAYER_OF[m]}) imports {n} ({LAYER_OF[n]})"
             for m, ns in graph().items() for n in sorted(ns) if LAYERS[LAYER_OF[n]] > LAYERS[LAYER_OF[m]]]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_grading_imports_no_feature():
    """The grading engine imports nothing from practice, interview, notebook, tools or cli."""
    wrong = [f"{m} imports {n}" for m, ns in graph().items() if LAYER_OF.get(m) in ("grading", "base")
             for n in sorted(ns) if LAYER_OF.get(n) in FEATURES]
    assert not wrong, "grading reaches into a feature:\n" + "\n".join(wrong)
