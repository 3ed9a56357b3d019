"""Calls of a file's own pass-through functions, read as the argument they return.

A function the file defines (def or lambda, or a method called on its own receiver) whose result is
one of its arguments, however it says so (`[v][0]`, `{0: v}[0]`, `v if True else v`, `(lambda: v)()`),
is found by evaluating it on symbols (`symbolic`), never by running it. A name bound twice, or a
decorated function (save @staticmethod), is left alone: what it does is not the file's text alone.
"""

from __future__ import annotations

import ast
from collections import Counter

from dojo.grading.scan.symbolic import Arg, Evaluation, Function, Opaque


def inline(tree: ast.Module) -> set[str]:
    """Replace, in place, each call of the file's pass-through functions by the argument it returns.
    Returns the names of the functions so inlined."""
    functions, methods = _definitions(tree)
    inliner = _Inliner(functions, methods)
    inliner.visit(tree)
    return inliner.inlined


def _definitions(tree: ast.Module) -> tuple[dict[str, Function], dict[str, tuple[Function, bool]]]:
    """The file's functions bound exactly once ({name: Function}) and its methods ({name: (Function,
    static)}), leaving out what a decorator (save @staticmethod) or a second binding could change."""
    bound = Counter(bindings(tree))
    functions, methods = {}, {}
    for parent in ast.walk(tree):
        for node in _statements(parent):
            name, fn, static = None, None, False
            if isinstance(node, ast.FunctionDef) and not _generator(node):
                decorators = [ast.unparse(d) for d in node.decorator_list]
                static = decorators == ["staticmethod"]
                name, fn = node.name, (node if static or not decorators else None)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    name, fn = node.targets[0].id, node.value
            if fn is None or bound[name] != 1:
                continue
            if isinstance(parent, ast.ClassDef):
                methods[name] = (Function(fn), static)
            elif not static:
                functions[name] = Function(fn)
    return functions, methods


def _statements(node: ast.AST) -> list[ast.stmt]:
    """The statements directly inside `node` (its body, else and finally blocks)."""
    blocks = (getattr(node, f, None) for f in ("body", "orelse", "finalbody"))
    return [s for block in blocks if isinstance(block, list) for s in block]


def _generator(node: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node))


def bindings(tree: ast.Module):
    """Every name the file binds, once per binding (an attribute stored counts for its name)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            yield node.id
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            yield node.attr
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.alias):
            yield (node.asname or node.name).split(".")[0]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name


class _Inliner(ast.NodeTransformer):
    """Calls `f(...)` of a file function and `self.m(...)` of a method on the enclosing function's first
    parameter, replaced by the argument their evaluation returns."""

    def __init__(self, functions: dict[str, Function], methods: dict[str, tuple[Function, bool]]):
        self.functions, self.methods = functions, methods
        self.receivers: list[str | None] = []  # the first parameter of each enclosing function
        self.inlined: set[str] = set()
        self.results: dict[tuple, object] = {}  # a call's shape: what evaluating it returned

    def visit_FunctionDef(self, node):
        args = node.args.posonlyargs + node.args.args
        self.receivers.append(args[0].arg if args else None)
        self.generic_visit(node)
        self.receivers.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return node
        fn, receiver, name = self._callee(node.func)
        if fn is None:
            return node
        shape = (id(fn.node), receiver, len(node.args), tuple(k.arg for k in node.keywords))
        if shape not in self.results:  # the result depends on the call's shape alone
            self.results[shape] = self._evaluate(fn, receiver, len(node.args), shape[-1])
        result = self.results[shape]
        if not isinstance(result, Arg) or result.index < 0:
            return node
        self.inlined.add(name)
        values = node.args + [k.value for k in node.keywords]
        return values[result.index]

    def _evaluate(self, fn: Function, receiver: Arg | None, count: int, keywords: tuple[str, ...]):
        args = [Arg(i) for i in range(count)]
        kwargs = {key: Arg(count + i) for i, key in enumerate(keywords)}
        try:
            return Evaluation(self.functions).call(
                fn, ([] if receiver is None else [receiver]) + args, kwargs
            )
        except (Opaque, RecursionError):
            return None

    def _callee(self, func: ast.expr) -> tuple[Function | None, Arg | None, str]:
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self.functions[func.id], None, func.id
        if (
            isinstance(func, ast.Attribute)
            and func.attr in self.methods
            and isinstance(func.value, ast.Name)
            and self.receivers
            and func.value.id == self.receivers[-1]
        ):
            fn, static = self.methods[func.attr]
            return fn, (None if static else Arg(-1)), func.attr
        return None, None, ""
