"""The integrity scan: what a submission's source reaches for that an honest solution never needs.

`scan(path, slug)` reads the file as an AST, without running it, and returns findings
("bpe.py:3: imports solutions.bpe, the project's reference"). The tables of what is a finding are
dojo.grading.scan.rules; this file follows aliases and text built from constants, and decodes the
file as Python does (dojo.source). Findings go to results.json and a person judges them: the points
stay as they are. It cannot see what the file builds from data at run time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dojo import catalog, source
from dojo.grading import view
from dojo.grading.scan.rules import (
    ATTRIBUTES,
    BUILT_NAMES,
    BUILTINS,
    COMPUTED,
    DICT_WRITES,
    MODULES,
    NAMES,
    OS_TWINS,
    PATCHABLE,
    PATH_TEXT,
    PROJECT,
    SENSITIVE,
    TEXT_TIMERS,
    TYPE_TEXT,
    VALUE_SENSITIVE,
    WRAPPERS,
    WRITERS,
)


def scan(path: Path, slug: str) -> list[str]:
    """Findings for the file at `path`, graded as kata `slug`: "NAME.py:LINE: what", in line order.
    The file is decoded as Python decodes it (dojo.source): a coding cookie other than UTF-8 is a finding,
    and so are bytes Python would refuse. A file that does not parse gets no other finding (it cannot
    run, and the grading says why)."""
    path = Path(path)
    try:
        text, encoding = source.read_python(path)
    except source.Undecodable as exc:
        return [f"{path.name}:{exc.line}: cannot be read as Python source ({exc}), so what runs is unknown"]
    except OSError:
        return []
    found = [cookie] if (cookie := source.cookie_finding(encoding, text)) else []
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError):
        return [f"{path.name}:{line}: {what}" for line, what in found]
    scanner = _Scanner(view.allowed(catalog.get(slug)))
    scanner.visit(tree)
    return [f"{path.name}:{line}: {what}" for line, what in sorted(set(scanner.found + found))]


def _type_of(node: ast.AST) -> bool:
    """`type(x)` or `x.__class__`: a class reached through an object."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 1
    ) or (isinstance(node, ast.Attribute) and node.attr == "__class__")


class _Scanner(ast.NodeVisitor):
    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.aliases: dict[
            str, str
        ] = {}  # local name -> dotted name it stands for (imported, or assigned: s = sys)
        self.consts: dict[str, ast.AST] = {}  # names bound once, to text the scan can fold ("sol" + "utions")
        self.defined: set[str] = set()  # names the file binds itself (a local `compile` is not the builtin)
        self.callables: set[str] = set()  # names of its own functions, classes and parameters
        self.parent: dict[ast.AST, ast.AST] = {}
        self.found: list[tuple[int, str]] = []

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    # ---- imports ----
    def check_module(self, node: ast.AST, name: str) -> None:
        top = name.split(".")[0]
        if top in PROJECT or top.startswith("test_"):
            if not (top == "solutions" and name.count(".") >= 1 and name.split(".")[1] in self.allowed):
                self.flag(node, f"imports {name}, from the project's {top}/")
        for module, why in MODULES.items():
            if name == module or name.startswith(module + "."):
                self.flag(node, why)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_module(node, a.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            if module == "solutions":
                for a in node.names:
                    self.check_module(node, f"solutions.{a.name}")
            else:
                self.check_module(node, module)
                for a in node.names:  # from unittest import mock
                    if f"{module}.{a.name}" in MODULES:
                        self.check_module(node, f"{module}.{a.name}")
        for a in node.names:
            self.check_name(node, f"{module}.{a.name}")

    # ---- names, attributes, calls ----
    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def check_name(self, node: ast.AST, dotted: str) -> None:
        top, _, rest = dotted.partition(".")
        dotted = f"os.{rest}" if top in OS_TWINS else dotted  # posix.fork is os.fork
        for pattern, why in NAMES.items():
            if dotted == pattern or (pattern.endswith("*") and dotted.startswith(pattern[:-1])):
                self.flag(node, why)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ATTRIBUTES:
            self.flag(node, ATTRIBUTES[node.attr])
        if node.attr == "__dict__" and (self.dotted(node.value) or "").split(".")[0] in SENSITIVE:
            self.flag(node, f"reads module {self.dotted(node.value)}'s namespace (__dict__)")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            owner = self.dotted(node.value)
            if owner and not owner.startswith(PATCHABLE):
                self.flag(node, f"patches {owner}.{node.attr} (code the grader or a library relies on)")
            elif _type_of(
                node.value
            ):  # type(torch.empty(0)).data_ptr = ...: a class reached through an object
                self.flag(node, f"patches the class of an object ({node.attr}), not one this file defines")
        dotted = self.dotted(node)
        if dotted:
            self.check_name(node, dotted)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in BUILTINS and node.id not in self.defined:
            self.flag(node, BUILTINS[node.id])
        if node.id == "__annotations__":  # class K: __annotations__ = {...}, a dataclass's fields as text
            self.flag(node, ATTRIBUTES[node.id])
        module = self.aliases.get(node.id)
        if isinstance(node.ctx, ast.Load) and module in VALUE_SENSITIVE and not self._tracked_use(node):
            self.flag(node, f"uses module {module} as a value ({node.id}): an alias the scan cannot follow")
        self.generic_visit(node)

    def _tracked_use(self, node: ast.Name) -> bool:
        """A use of a module name the scan follows: `sys.x`, getattr(sys, ...), vars(sys), s = sys."""
        parent = self.parent.get(node)
        if isinstance(parent, ast.Attribute):
            return True
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
            return (self.dotted(parent.func) or _plain(parent.func)) in (
                *WRITERS,
                "getattr",
                "hasattr",
                "vars",
            )
        return (
            isinstance(parent, (ast.Assign, ast.NamedExpr))
            and parent.value is node
            and all(
                isinstance(t, ast.Name) for t in getattr(parent, "targets", [getattr(parent, "target", None)])
            )
        )

    def visit_Call(self, node: ast.Call) -> None:
        func = self.dotted(node.func) or _plain(
            node.func
        )  # an alias's target, or the name as written (object.__setattr__)
        first = node.args[0] if node.args else None
        if func in COMPUTED:
            name = self.fold(first) if first is not None else None
            if name is not None:
                self.check_module(node, name)
            else:
                self.flag(node, f"imports a module by a computed name ({func})")
        if func in (*WRITERS, "getattr", "hasattr") and len(node.args) >= 2:
            target, name = node.args[0], self.fold(node.args[1])
            owner = self.dotted(target)
            if func in WRITERS and owner and not owner.startswith(PATCHABLE):
                self.flag(node, f"patches {owner} ({func}), code it did not define")
            if owner and owner.split(".")[0] in SENSITIVE:
                if name is None:
                    self.flag(node, f"reaches into module {owner} by a computed name ({func})")
                else:
                    self.check_name(node, f"{owner}.{name}")
        if func in TEXT_TIMERS:
            given = [*node.args[:2], *(k.value for k in node.keywords if k.arg in ("stmt", "setup"))]
            for arg in given:
                if not self.callable_like(arg):
                    self.flag(arg, f"runs text as Python ({func} of a statement that is not a function)")
        wrapper = self.wrapper_of(node, func)
        if wrapper is not None and (
            self.dotted(wrapper) or _type_of(wrapper) or isinstance(wrapper, ast.Call)
        ):
            onto = self.dotted(wrapper) or "an object's class"
            self.flag(
                node, f"writes attributes onto {onto} through {func or WRAPPERS[1]}, code it did not define"
            )
        if func == "typing.ForwardRef" and first is not None:
            self.check_annotation(first)
        if func == "glob.glob" and any(k.arg == "recursive" for k in node.keywords):
            self.flag(node, "searches the filesystem (glob, recursive)")
        if func == "vars" and first is not None and (self.dotted(first) or "").split(".")[0] in SENSITIVE:
            self.flag(node, f"reads module {self.dotted(first)}'s namespace (vars)")
        if isinstance(node.func, ast.Attribute) and node.func.attr in DICT_WRITES:
            self.check_namespace_write(node, node.func.value)
        self.check_folded(node)
        self.generic_visit(node)

    def callable_like(self, node: ast.AST) -> bool:
        """A timeit statement that is a function (a lambda, its own def or parameter, a method,
        functools.partial), or the default "pass"; anything else may be text."""
        if isinstance(node, (ast.Lambda, ast.Attribute)) or self.fold(node) == "pass":
            return True
        if isinstance(node, ast.Call):
            return (self.dotted(node.func) or _plain(node.func)) in ("functools.partial", "partial")
        return isinstance(node, ast.Name) and node.id in self.callables

    def wrapper_of(self, node: ast.Call, func: str | None) -> ast.AST | None:
        """What functools.update_wrapper(wrapper, ...) or functools.wraps(...)(wrapper) writes onto."""
        if func == WRAPPERS[0]:
            given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "wrapper")]
            return given[0] if given else None
        inner = node.func
        if isinstance(inner, ast.Call) and self.dotted(inner.func) == WRAPPERS[1] and node.args:
            return node.args[0]
        return None

    # ---- annotations: typing.get_type_hints and dataclasses run annotation text as code ----
    def check_annotation(self, node: ast.AST) -> None:
        """An annotation (or text one parses to) that is more than names, attributes, subscripts, | and
        constants runs code when typing evaluates it."""
        for sub in ast.walk(node):
            if type(sub).__name__ not in TYPE_TEXT or (
                isinstance(sub, ast.BinOp) and type(sub.op).__name__ != "BitOr"
            ):
                self.flag(node, "an annotation that runs code when typing evaluates it (get_type_hints)")
                return
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and not self._literal(sub):
                try:
                    inner = ast.parse(sub.value.strip(), mode="eval").body
                except (SyntaxError, ValueError):
                    continue
                if any(type(n).__name__ not in TYPE_TEXT for n in ast.walk(inner)):
                    self.flag(
                        sub, "an annotation in text that runs code when typing evaluates it (get_type_hints)"
                    )
                    return

    def _literal(self, node: ast.Constant) -> bool:
        """A value inside Literal[...], not a type."""
        parent = self.parent.get(node)
        parent = self.parent.get(parent) if isinstance(parent, ast.Tuple) else parent
        return isinstance(parent, ast.Subscript) and (_plain(parent.value) or "").endswith("Literal")

    def visit_arg(self, node: ast.arg) -> None:
        if node.annotation is not None:
            self.check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.returns is not None:
            self.check_annotation(node.returns)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.check_namespace_write(node, node.value)
        self.generic_visit(node)

    def check_namespace_write(self, node: ast.AST, container: ast.AST) -> None:
        """A write through `X.__dict__[k] = v` or `vars(X).update(...)` into an X the file imported."""
        if isinstance(container, ast.Attribute) and container.attr == "__dict__":
            inner = container.value
        elif (
            isinstance(container, ast.Call)
            and getattr(container.func, "id", None) == "vars"
            and container.args
        ):
            inner = container.args[0]
        else:
            return
        owner = self.dotted(inner)
        if owner and not owner.startswith(PATCHABLE):
            self.flag(node, f"writes into {owner}'s namespace, code it did not define")

    # ---- text: constants, and text folded from constants ("ex" + "ec") ----
    def fold(self, node: ast.AST | None) -> str | None:
        """The text `node` always evaluates to, when it is built from constants (and names bound once to
        them) only; else None (dojo.source.fold)."""
        return source.fold(node, self.consts)

    def check_folded(self, node: ast.AST) -> None:
        """Text built from constant pieces (the outermost such node) is checked as if written whole."""
        if isinstance(node, ast.Constant) or self.fold(self.parent.get(node)) is not None:
            return
        text = self.fold(node)
        if text is None:
            return
        self.check_text(node, text)
        last = text.rpartition(".")[2]
        if text in BUILTINS or last in BUILT_NAMES or text in MODULES or text.split(".")[0] in PROJECT:
            self.flag(node, f"builds the name {text!r} from pieces (what a scan of whole names would flag)")

    def visit_BinOp(self, node: ast.AST) -> None:
        self.check_folded(node)
        self.generic_visit(node)

    visit_JoinedStr = visit_BinOp

    def visit_Constant(self, node: ast.Constant) -> None:
        text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if isinstance(text, str):
            self.check_text(node, text)

    def check_text(self, node: ast.AST, text: str) -> None:
        if PATH_TEXT.search(text) and not self._permitted_text(text):
            self.flag(
                node, f"names the project's files or the grader's internals in a string ({text[:40]!r})"
            )
        for part in set(re.split(r"[.\s]", text)) & set(
            ATTRIBUTES
        ):  # getattr(tb, "tb_frame"), attrgetter("f_back")
            self.flag(node, f"names {part} in a string: {ATTRIBUTES[part]}")

    def _permitted_text(self, text: str) -> bool:
        names = re.findall(r"\bsolutions\.(\w+)", text)
        rest = re.sub(r"\bsolutions\.\w+", "", text)
        return bool(names) and all(n in self.allowed for n in names) and not PATH_TEXT.search(rest)

    # ---- bookkeeping: what the file defines and imports, and docstrings (prose, not paths) ----
    def visit_Module(self, node: ast.Module) -> None:
        stores: dict[str, list[ast.AST]] = {}
        for sub in ast.walk(node):
            for child in ast.iter_child_nodes(sub):
                self.parent[child] = sub
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(sub.name)
                self.callables.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                self.defined.add(sub.id)
            elif isinstance(sub, ast.arg):
                self.defined.add(sub.arg)
                self.callables.add(sub.arg)
            elif isinstance(sub, ast.Import):
                for a in sub.names:
                    local = a.asname or a.name.split(".")[0]
                    self.aliases[local] = a.name if a.asname else local
            elif isinstance(sub, ast.ImportFrom):
                for a in sub.names:
                    self.aliases[a.asname or a.name] = f"{sub.module or ''}.{a.name}"
            if isinstance(sub, (ast.Assign, ast.NamedExpr)):
                for target in getattr(sub, "targets", [getattr(sub, "target", None)]):
                    if isinstance(target, ast.Name):
                        stores.setdefault(target.id, []).append(sub.value)
        self.aliases.update({n: "os" for n, m in self.aliases.items() if m in OS_TWINS})
        self.consts = {n: values[0] for n, values in stores.items() if len(values) == 1}
        for _ in range(3):  # s = sys; t = s: follow assignment chains a few links deep
            self.aliases.update(
                {n: d for n, values in stores.items() for v in values if (d := self.dotted(v))}
            )
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        body = getattr(node, "body", None)
        docstring = body[0] if isinstance(body, list) and body and _is_docstring(body[0]) else None
        for child in ast.iter_child_nodes(node):
            if child is docstring:
                continue
            self.visit(child)


def _plain(node: ast.AST) -> str | None:
    """`a.b.c` as written, for a chain of names (builtins and the file's own names), else None."""
    if isinstance(node, ast.Name):
        return node.id
    base = _plain(node.value) if isinstance(node, ast.Attribute) else None
    return f"{base}.{node.attr}" if base else None


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )
