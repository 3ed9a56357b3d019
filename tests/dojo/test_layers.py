"""The dojo package in layers: no import cycle, and a grading engine that imports no feature.

Every module's imports are read from its AST, imports inside functions included (a lazy import is
still a dependency). `MAY_IMPORT` says what each layer (a package of dojo/) may import, so imports
flow one way: cli -> features (interview, notebook, tools) -> practice -> grading -> the base
(catalog, targets, the suites' kit). Left out: third-party imports, and imports a module makes of itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dojo

PACKAGE = Path(dojo.__file__).resolve().parent

# what each layer may import (its own modules included); keep in step with docs/contributing.md's layout.
# A module's layer is its package below dojo/ (dojo/grading/grade.py: grading); the top-level modules
# are the base (catalog, targets, errors, the suites' kit: testing, machine, fakeclock), save the CLI.
MAY_IMPORT = {
    "base": {"base"},
    "grading": {"base", "grading"},
    "practice": {"base", "grading", "practice"},
    "notebook": {"base", "grading", "practice", "notebook"},
    "interview": {"base", "grading", "practice", "notebook", "interview"},
    "tools": {"base", "practice", "tools"},
    "cli": {"base", "grading", "practice", "notebook", "interview", "tools", "cli"},
}
FEATURES = ("practice", "interview", "notebook", "tools", "cli")  # what grading may never import


def layer_of(module: str) -> str:
    """dojo.grading.grade -> grading; dojo.cli and dojo.__main__ -> cli; dojo.catalog -> base."""
    parts = module.split(".")
    if len(parts) > 2 or (PACKAGE / parts[-1] / "__init__.py").is_file():
        return parts[1]
    return "cli" if parts[-1] in ("cli", "__main__") else "base"


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
                return path[path.index(n) :] + [n]
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
    assert "dojo.grading.grade" in imports(PACKAGE / "practice" / "check.py", set(modules()))
    assert "dojo.interview.flow" in imports(
        PACKAGE / "cli.py", set(modules())
    )  # imported inside _during_interview


def test_no_import_cycle():
    """No import cycle in dojo/, counting imports inside functions."""
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle in dojo/: " + " -> ".join(cycle)


def test_every_package_is_a_layer():
    """Each package of dojo/ is a layer with a rule (a new package must say what it may import)."""
    missing = sorted({layer_of(m) for m in modules()} - set(MAY_IMPORT))
    assert not missing, f"packages without a rule in MAY_IMPORT: {missing}"


def test_imports_flow_down_the_layers():
    """A module imports only what its layer may: cli -> features (interview, notebook, tools) -> practice
    -> grading -> the base."""
    wrong = [
        f"{m} ({layer_of(m)}) imports {n} ({layer_of(n)})"
        for m, ns in graph().items()
        for n in sorted(ns)
        if layer_of(n) not in MAY_IMPORT[layer_of(m)]
    ]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_grading_imports_no_feature():
    """The grading engine imports nothing from practice, interview, notebook, tools or cli."""
    wrong = [
        f"{m} imports {n}"
        for m, ns in graph().items()
        if layer_of(m) in ("grading", "base")
        for n in sorted(ns)
        if layer_of(n) in FEATURES
    ]
    assert not wrong, "grading reaches into a feature:\n" + "\n".join(wrong)


def test_layer_of_reads_the_package():
    """A module's layer is its package; the top-level modules are the base, save the CLI."""
    assert layer_of("dojo.grading.grade") == "grading" and layer_of("dojo.notebook") == "notebook"
    assert layer_of("dojo.grading.judging.worker") == "grading"
    assert layer_of("dojo.catalog") == "base" and layer_of("dojo.cli") == "cli" and layer_of("dojo") == "base"


def grader_side(module: str) -> bool:
    """The grader that decides: a module at dojo/grading/'s top (grade, child, channel, view ...)."""
    parts = module.split(".")
    return (
        parts[:2] == ["dojo", "grading"]
        and len(parts) == 3
        and (PACKAGE / "grading" / f"{parts[2]}.py").is_file()
    )


def test_grader_side_never_imports_the_judges_internals_nor_the_pytest_side():
    """The grader that decides imports from judging/ only the protocol both sides share, and nothing of
    suite/ (the plugin and its failure text run inside pytest, in the grading child)."""
    assert grader_side("dojo.grading.grade") and not grader_side("dojo.grading.judging.judge")
    wrong = [
        f"{m} imports {n}"
        for m, ns in graph().items()
        if grader_side(m)
        for n in sorted(ns)
        if (
            n.startswith("dojo.grading.judging")
            and n not in ("dojo.grading.judging", "dojo.grading.judging.protocol")
        )
        or n.startswith("dojo.grading.suite")
    ]
    assert not wrong, "the grader reaches into the judge's or pytest's side:\n" + "\n".join(wrong)


def test_no_kata_reference_imports_the_system_wing():
    """solutions/<slug>.py (the grading contract) and its helpers at solutions/'s top never import
    solutions.system: the system is built on the katas, never the reverse."""
    top = Path(dojo.__file__).resolve().parent.parent / "solutions"
    wrong = []
    for path in sorted(top.glob("*.py")):
        if path.stem == "model":  # the model the suites run on; its fast paths (packed GEMM) live in the wing
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else (
                    [f"{node.module}.{a.name}" for a in node.names]
                    if isinstance(node, ast.ImportFrom) and node.module
                    else []
                )
            )
            wrong += [f"{path.name} imports {n}" for n in names if n.startswith("solutions.system")]
    assert not wrong, "a kata reference imports the system wing:\n" + "\n".join(wrong)
