"""Symbolic evaluation of a small function of the file on its call's arguments, never running it.

Values are constants, tuples, lists, dicts, `Arg` (the call's own arguments) and `Function`s; the
evaluation follows containers, constant subscripts and conditions, small constant arithmetic and
calls of the file's small functions, within a step budget, and anything else is `Opaque`.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

STEPS = 400  # nodes one call site's evaluation may visit: a pass-through is small
SMALL_INT = 2**32  # arithmetic on constants stays this small (an index, never a computation)
ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le}
COMPARE |= {ast.Gt: operator.gt, ast.GtE: operator.ge}
UNARY = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}


class Opaque(Exception):
    """What the evaluation cannot follow: the call is not read as an argument."""


@dataclass(frozen=True)
class Arg:
    """The value of the call site's argument number `index` (-1: the receiver of a method call)."""

    index: int


@dataclass(frozen=True)
class Function:
    """A def or lambda of the file, the names its body sees (`env`: its enclosing function's)."""

    node: ast.FunctionDef | ast.Lambda
    env: dict = field(default_factory=dict, compare=False, hash=False)


class Evaluation:
    """One call site's symbolic evaluation: values are constants, tuples, lists, dicts, `Arg`s and
    `Function`s; anything else is `Opaque`."""

    def __init__(self, functions: dict[str, Function]):
        self.functions, self.steps = functions, STEPS

    def call(self, fn: Function, args: list, kwargs: dict):
        env = {**fn.env, **self._bind(fn.node.args, args, kwargs)}
        if isinstance(fn.node, ast.Lambda):
            return self.value(fn.node.body, env)
        for stmt in fn.node.body:  # a small def: assignments to names, then a return
            if isinstance(stmt, ast.Pass) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            ):
                continue
            if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
                value = self.value(stmt.value, env)
                env.update({t.id: value for t in stmt.targets})
            elif isinstance(stmt, ast.Return):
                return None if stmt.value is None else self.value(stmt.value, env)
            else:
                raise Opaque(stmt)
        return None

    def _bind(self, spec: ast.arguments, args: list, kwargs: dict) -> dict:
        """Python's binding of a call's arguments to the parameters; defaults must be constants."""
        positional = [a.arg for a in spec.posonlyargs + spec.args]
        env = dict(zip(positional, args))
        if len(args) > len(positional):
            if spec.vararg is None:
                raise Opaque("too many arguments")
            env[spec.vararg.arg] = tuple(args[len(positional) :])
        elif spec.vararg:
            env[spec.vararg.arg] = ()
        named = [a.arg for a in spec.args + spec.kwonlyargs]
        extra = {}
        for key, value in kwargs.items():
            if key in env or (key not in named and spec.kwarg is None):
                raise Opaque(key)
            (env if key in named else extra)[key] = value
        if spec.kwarg:
            env[spec.kwarg.arg] = extra
        defaults = dict(zip(positional[::-1], spec.defaults[::-1]))
        defaults |= {a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults) if d is not None}
        for name in positional + [a.arg for a in spec.kwonlyargs]:
            if name not in env:
                if name not in defaults:
                    raise Opaque(name)
                env[name] = self.value(defaults[name], {})
        return env

    def spend(self, steps: int) -> None:
        self.steps -= steps
        if self.steps < 0:
            raise Opaque("too long")

    def value(self, node: ast.expr, env: dict):
        self.spend(1)
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise Opaque(node)
        return method(node, env)

    def _Constant(self, node, env):
        return node.value

    def _Name(self, node, env):
        if node.id in env:
            return env[node.id]
        if node.id in self.functions:
            return self.functions[node.id]
        raise Opaque(node.id)

    def _Lambda(self, node, env):
        return Function(node, dict(env))

    def _NamedExpr(self, node, env):
        env[node.target.id] = self.value(node.value, env)
        return env[node.target.id]

    def _Tuple(self, node, env):
        return tuple(self._items(node.elts, env))

    def _List(self, node, env):
        return list(self._items(node.elts, env))

    def _items(self, elts: list[ast.expr], env: dict) -> list:
        out = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                out += list(self._container(self.value(elt.value, env), (tuple, list)))
            else:
                out.append(self.value(elt, env))
        return out

    def _ListComp(self, node, env):
        rows = [dict(env)]
        for gen in node.generators:  # each generator over a known tuple or list, its conditions known
            if gen.is_async or not isinstance(gen.target, ast.Name):
                raise Opaque(gen)
            rows = [
                {**row, gen.target.id: item}
                for row in rows
                for item in self._container(self.value(gen.iter, row), (tuple, list))
            ]
            self.spend(len(rows))
            rows = [row for row in rows if all(self._truth(self.value(c, row)) for c in gen.ifs)]
        return [self.value(node.elt, row) for row in rows]

    def _truth(self, value) -> bool:
        if not _known(value):
            raise Opaque(value)
        return bool(value)

    def _Dict(self, node, env):
        out = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                out |= self._container(self.value(value, env), (dict,))
            else:
                out[self._key(self.value(key, env))] = self.value(value, env)
        return out

    def _Subscript(self, node, env):
        return self._item(self.value(node.value, env), self.value(node.slice, env))

    def _Slice(self, node, env):
        parts = [None if p is None else self.value(p, env) for p in (node.lower, node.upper, node.step)]
        if not all(p is None or type(p) is int for p in parts):
            raise Opaque(node)
        return slice(*parts)

    def _IfExp(self, node, env):
        test = self.value(node.test, env)
        if _known(test):
            return self.value(node.body if test else node.orelse, env)
        body, orelse = self.value(node.body, env), self.value(node.orelse, env)
        if isinstance(body, Arg) and body == orelse:
            return body
        raise Opaque(node)

    def _BoolOp(self, node, env):
        values = [self.value(v, env) for v in node.values]
        for value in values[:-1]:
            if not _known(value):
                if all(v == value for v in values):
                    return value  # `v and v`, `v or v`
                raise Opaque(node)
            if bool(value) == isinstance(node.op, ast.Or):
                return value
        return values[-1]

    def _UnaryOp(self, node, env):
        value = self.value(node.operand, env)
        if not _known(value) or (not isinstance(node.op, ast.Not) and type(value) is not int):
            raise Opaque(node)
        return UNARY[type(node.op)](value)

    def _BinOp(self, node, env):
        left, right = self.value(node.left, env), self.value(node.right, env)
        op = ARITHMETIC.get(type(node.op))
        if op is None or not all(type(v) is int and abs(v) < SMALL_INT for v in (left, right)):
            raise Opaque(node)
        if isinstance(node.op, ast.Mod) and right == 0:
            raise Opaque(node)
        return op(left, right)

    def _Compare(self, node, env):
        left = self.value(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.value(comparator, env)
            if type(op) not in COMPARE or not (_constant(left) and _constant(right)):
                raise Opaque(node)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _Attribute(self, node, env):
        value = self.value(node.value, env)
        if node.attr == "__getitem__" and isinstance(value, (tuple, list, dict)):
            return lambda key, value=value: self._item(value, key)
        if node.attr == "get" and isinstance(value, dict):
            return lambda key, default=None, value=value: value.get(self._key(key), default)
        raise Opaque(node)

    def _Call(self, node, env):
        fn = self.value(node.func, env)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise Opaque(node)
        args = [self.value(a, env) for a in node.args]
        kwargs = {k.arg: self.value(k.value, env) for k in node.keywords}
        if isinstance(fn, Function):
            return self.call(fn, args, kwargs)
        if callable(fn) and not kwargs and 1 <= len(args) <= 2:  # a container's __getitem__ or get
            return fn(*args)
        raise Opaque(node)

    def _item(self, container, key):
        if isinstance(container, dict):
            key = self._key(key)
            if key not in container:
                raise Opaque(key)
            return container[key]
        if not isinstance(container, (tuple, list)) or type(key) not in (int, bool, slice):
            raise Opaque(key)
        if isinstance(key, slice):
            return container[key]
        if not -len(container) <= key < len(container):
            raise Opaque(key)
        return container[key]

    def _key(self, key):
        if not _constant(key):
            raise Opaque(key)
        return key

    def _container(self, value, kinds: tuple[type, ...]):
        if not isinstance(value, kinds):
            raise Opaque(value)
        return value


def _constant(value) -> bool:
    """A value Python compares and hashes as the constant it is (no symbol inside)."""
    return type(value) in (int, float, bool, str, bytes, type(None)) or (
        type(value) is tuple and all(_constant(v) for v in value)
    )


def _known(value) -> bool:
    """A value whose truth is known: a constant or a container (its truth is its length)."""
    return _constant(value) or type(value) in (tuple, list, dict)
