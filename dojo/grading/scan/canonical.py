"""A file's source with a copier's mechanical rewrites undone, read on its AST and never run.

`getattr(x, "name")` becomes `x.name` (and `setattr(x, "name", v)` an assignment), calls of the file's
own pass-through functions become their argument (`passthrough`), and statements nothing reads go:
assignments to names nothing else reads, bare expressions without a call, `pass`, docstrings.
"""

from __future__ import annotations

import ast
import keyword
from collections.abc import Iterator

from dojo.grading.scan import passthrough

BLOCKS = ("body", "orelse", "finalbody")  # the fields of a node that hold statements
EFFECTS = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)  # what a bare expression may do


def source(text: str) -> str:
    """`text` rewritten; as it is when it does not parse (the token stream then reads it raw)."""
    try:
        tree = ast.parse(text)
        _Attributes(set(passthrough.bindings(tree))).visit(tree)
        inlined = passthrough.inline(tree)
        _drop_dead(tree, inlined)
        return ast.unparse(ast.fix_missing_locations(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return text


class _Attributes(ast.NodeTransformer):
    """`getattr(x, "name")` -> `x.name`; the statement `setattr(x, "name", v)` -> `x.name = v`."""

    def __init__(self, bound: set[str]):
        self.bound = bound

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if self._named(node, "getattr", 2):
            return ast.copy_location(ast.Attribute(node.args[0], node.args[1].value, ast.Load()), node)
        return node

    def visit_Expr(self, node: ast.Expr):
        self.generic_visit(node)
        call = node.value
        if self._named(call, "setattr", 3):
            target = ast.Attribute(call.args[0], call.args[1].value, ast.Store())
            return ast.copy_location(ast.Assign([target], call.args[2]), node)
        return node

    def _named(self, node: ast.expr, builtin: str, arity: int) -> bool:
        """A call of the builtin `builtin` with `arity` plain arguments, the second a constant name."""
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == builtin
            and builtin not in self.bound
            and len(node.args) == arity
            and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.isidentifier()
            and not keyword.iskeyword(node.args[1].value)
        )


def _drop_dead(tree: ast.Module, inlined: set[str]) -> None:
    """Drop, in place, the statements whose results nothing reads (a block left empty keeps `pass`)."""
    dead = _dead_assignments(tree, inlined)
    for node in ast.walk(tree):
        for name in BLOCKS:
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                kept = [s for s in block if id(s) not in dead and not _inert(s)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))


def _inert(stmt: ast.stmt) -> bool:
    """`pass`, a docstring, or a bare expression that calls nothing (`x.y`, `[v][0]`, `...`)."""
    if isinstance(stmt, ast.Pass):
        return True
    return isinstance(stmt, ast.Expr) and not any(isinstance(n, EFFECTS) for n in ast.walk(stmt.value))


def _dead_assignments(tree: ast.Module, inlined: set[str]) -> set[int]:
    """ids of the assignments to plain names (and the defs of inlined pass-throughs) whose names are
    read only by other such dead statements: a mark-and-sweep from the reads outside them."""
    candidates = {id(s): (targets, s) for s, targets in _assignments(tree, inlined)}
    inside = {id(n) for _, s in candidates.values() for n in ast.walk(s)}
    live = {name for n in ast.walk(tree) if id(n) not in inside for name in _reads(n)}
    reads = {key: {name for n in ast.walk(s) for name in _reads(n)} for key, (_, s) in candidates.items()}
    binders: dict[str, list[int]] = {}
    for key, (targets, _) in candidates.items():
        for name in targets:
            binders.setdefault(name, []).append(key)
    dead, todo = set(candidates), list(live)
    while todo:  # a live name's assignments are live, and so is what they read
        for key in binders.pop(todo.pop(), ()):
            if key in dead:
                dead.discard(key)
                todo += reads[key] - live
                live |= reads[key]
    return dead


def _assignments(tree: ast.Module, inlined: set[str]) -> Iterator[tuple[ast.stmt, set[str]]]:
    """Statements that only bind plain names, with those names: `x = ...`, `a, b = ...`, `x += ...`,
    `x: T = ...`, and the def of a function whose calls were all inlined."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in inlined:
            yield node, {node.name}
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign) or (isinstance(node, ast.AnnAssign) and node.value)
            else None
        )
        if targets is None:
            continue
        names = [
            n
            for t in targets
            for n in ast.walk(t)
            if not isinstance(n, (ast.Tuple, ast.List, ast.expr_context))
        ]
        if all(isinstance(n, ast.Name) for n in names):
            yield node, {n.id for n in names}


def _reads(node: ast.AST) -> Iterator[str]:
    """The name `node` reads: a loaded name, or any attribute's (a class attribute is read as `self.x`)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
