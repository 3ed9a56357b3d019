"""The integrity scan: what a submission's source reaches for that an honest solution never needs.

`scan(path, slug)` reads the file as an AST, without running it, and returns findings
("bpe.py:3: imports solutions.bpe, the project's reference"). It flags:
- importing the project's solutions/, tests/ or dojo/ (a reference module the kata's README names,
  or that the kata's own reference uses, is allowed), or naming their paths in a string;
- importlib or `__import__` with a computed name, or loading a module from a file path;
- exec, eval or compile of text;
- walking sys.modules, `gc.get_objects`/`get_referrers`, frames (inspect, sys._getframe, f_back ...),
  sys.path, sys.argv, dunder escapes (`__globals__`, `__builtins__`, `__subclasses__` ...);
- atexit, `os._exit`, subprocess, `os.system`, fork/setsid/kill, ctypes, signal, sockets;
- assigning to another module's attributes (`torch.allclose = ...`, setattr on a module: patching
  what the suite relies on; `torch.backends.*` settings are allowed);
- importing pytest, _pytest or pluggy; searching the filesystem (os.walk, rglob, recursive glob);
  unpickling; strings naming the project's paths, /proc/self, .pth files or DOJO_ variables.

The points stay as they are: findings go into results.json (`integrity`) and the summaries, and a
person judges them. Left out, on purpose: `gc.disable()`, open() of any path the submission is
given, reading /sys, json/pathlib, `getattr` on the submission's own objects, and anything the
file does not say in its source (a scan cannot see through data it builds at run time: what it
flags is the code needed to run such data).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dojo import source
from dojo.grading import view

PROJECT = ("solutions", "tests", "dojo", "conftest")
MODULES = {  # importing any of these is a finding
    "pytest": "imports pytest (the grader's test runner)",
    "_pytest": "imports _pytest (the grader's test runner)",
    "pluggy": "imports pluggy (pytest's plugin machinery)",
    "subprocess": "imports subprocess (starts programs)",
    "pty": "imports pty (starts programs)",
    "multiprocessing": "imports multiprocessing (starts processes)",
    "ctypes": "imports ctypes (calls C directly)",
    "_ctypes": "imports ctypes (calls C directly)",
    "cffi": "imports cffi (calls C directly)",
    "atexit": "imports atexit (runs code as the process ends)",
    "signal": "imports signal (can silence the grader's time limit)",
    "socket": "imports socket (network)",
    "runpy": "imports runpy (runs other files)",
    "builtins": "imports builtins (reaches exec, eval and __import__ by name)",
    "marshal": "imports marshal (code objects)",
    "_pickle": "imports _pickle (unpickling can import and run any module)",
    "shelve": "imports shelve (unpickling can import and run any module)",
    "dill": "imports dill (unpickling can import and run any module)",
    "cloudpickle": "imports cloudpickle (unpickling can import and run any module)",
    "zipimport": "imports zipimport (loads modules from archives)",
    "unittest.mock": "imports unittest.mock (patches other code)",
    "site": "imports site (the interpreter's package folders and .pth files)",
    "sysconfig": "imports sysconfig (the interpreter's package folders)",
    "pkgutil": "imports pkgutil (finds and reads other packages' files)",
    "pkg_resources": "imports pkg_resources (finds and reads other packages' files)",
    "importlib.metadata": "imports importlib.metadata (installed packages' file lists)",
    "importlib.resources": "imports importlib.resources (reads other packages' files)",
}
PATCHABLE = ("torch.backends",)  # settings an honest solution may assign (torch.backends.mkldnn.enabled)
NAMES = {  # dotted names (after import aliases); a trailing "*" matches any suffix
    "os._exit": "calls os._exit (ends the process before the grader hears back)",
    "os.system": "calls os.system (runs a shell command)",
    "os.popen": "calls os.popen (runs a shell command)",
    "os.exec*": "replaces the process (os.exec*)",
    "os.spawn*": "starts a program (os.spawn*)",
    "os.posix_spawn*": "starts a program (os.posix_spawn)",
    "os.fork*": "forks the process",
    "os.setsid": "leaves the grader's session (os.setsid)",
    "os.setpgrp": "leaves the grader's process group (os.setpgrp)",
    "os.kill*": "sends signals to processes",
    "os.register_at_fork": "hooks process creation",
    "os.walk": "searches the filesystem (os.walk)",
    "os.fwalk": "searches the filesystem (os.fwalk)",
    "sys.modules": "walks sys.modules (the grader's loaded modules)",
    "sys._getframe": "inspects stack frames (sys._getframe)",
    "sys._current_frames": "inspects stack frames (sys._current_frames)",
    "sys.settrace": "traces other code (sys.settrace)",
    "sys.setprofile": "traces other code (sys.setprofile)",
    "sys.path": "reads or edits sys.path (where modules are found)",
    "sys.meta_path": "edits the import system (sys.meta_path)",
    "sys.path_hooks": "edits the import system (sys.path_hooks)",
    "sys.argv": "reads the grader's command line (sys.argv)",
    "sys.orig_argv": "reads the grader's command line (sys.orig_argv)",
    "gc.get_objects": "walks every live object (gc.get_objects)",
    "gc.get_referrers": "walks the object graph (gc.get_referrers)",
    "gc.get_referents": "walks the object graph (gc.get_referents)",
    "inspect.currentframe": "inspects stack frames (inspect.currentframe)",
    "inspect.stack": "inspects stack frames (inspect.stack)",
    "inspect.trace": "inspects stack frames (inspect.trace)",
    "inspect.getouterframes": "inspects stack frames (inspect.getouterframes)",
    "inspect.getinnerframes": "inspects stack frames (inspect.getinnerframes)",
    "inspect.getframeinfo": "inspects stack frames (inspect.getframeinfo)",
    "inspect.getsource*": "reads other code's source (inspect.getsource)",
    "inspect.getfile": "finds other code's files (inspect.getfile)",
    "inspect.getmodule": "finds other code's modules (inspect.getmodule)",
    "pickle.load*": "unpickles data (which can import and run any module)",
    "pickle.Unpickler": "unpickles data (which can import and run any module)",
    "importlib.util.spec_from_file_location": "loads a module from a file path",
    "importlib.util.module_from_spec": "builds a module by hand (importlib.util.module_from_spec)",
    "importlib.machinery*": "loads modules by hand (importlib.machinery)",
    "importlib.reload": "reloads modules (importlib.reload)",
    "importlib.__import__": "imports by a computed name (importlib.__import__)",
}
ATTRIBUTES = {  # on any object
    "f_back": "walks stack frames (f_back)", "f_globals": "reads a frame's globals", "f_locals": "reads a frame's locals",
    "f_builtins": "reads a frame's builtins", "tb_frame": "walks stack frames (tb_frame)", "gi_frame": "walks frames",
    "cr_frame": "walks frames", "__globals__": "reads another function's globals (__globals__)",
    "__builtins__": "reaches the builtins by name (__builtins__)", "__subclasses__": "walks every class (__subclasses__)",
    "__code__": "reads or swaps code objects (__code__)", "__closure__": "reads closures (__closure__)",
    "__loader__": "reaches a module loader (__loader__)", "exec_module": "runs a module by hand (exec_module)",
    "rglob": "searches the filesystem (rglob)",
}
BUILTINS = {"exec": "exec of text", "eval": "eval of text", "compile": "compile of text",
            "__builtins__": "reaches the builtins by name (__builtins__)", "globals": "reads its module's globals() by name",
            "breakpoint": "calls breakpoint()"}
COMPUTED = ("importlib.import_module", "__import__")  # fine with a constant name (then checked as an import)
SENSITIVE = {n.split(".")[0] for n in (*NAMES, *MODULES)} | set(PROJECT)  # getattr(os, name) is a finding
PATH_TEXT = re.compile(
    r"(?:^|[/\\.\s'\"])(?:solutions|dojo)(?:[/\\]|\.\w|$)|tests[/\\]|\bmutants\b|\btest_\w+\.py\b|site-packages"
    r"|\.pth\b|/proc/(?:self|thread-self|\d)|DOJO_|^(?:tests|katas|mutants|conftest\.py)$",
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
    scanner = _Scanner(view.allowed(slug))
    scanner.visit(tree)
    return [f"{path.name}:{line}: {what}" for line, what in sorted(set(scanner.found + found))]


class _Scanner(ast.NodeVisitor):
    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.aliases: dict[str, str] = {}  # local name -> dotted name it was imported as
        self.defined: set[str] = set()  # names the file binds itself (a local `compile` is not the builtin)
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
            local = a.asname or a.name.split(".")[0]
            self.aliases[local] = a.name if a.asname else local

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
            self.aliases[a.asname or a.name] = f"{module}.{a.name}"
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
        dotted = self.dotted(node)
        if dotted:
            self.check_name(node, dotted)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in BUILTINS and node.id not in self.defined:
            self.flag(node, BUILTINS[node.id])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = self.dotted(node.func) or (node.func.id if isinstance(node.func, ast.Name) else None)
        first = node.args[0] if node.args else None
        if func in COMPUTED:
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self.check_module(node, first.value)
            else:
                self.flag(node, f"imports a module by a computed name ({func})")
        if func in ("getattr", "setattr", "delattr") and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            computed = not (isinstance(name, ast.Constant) and isinstance(name.value, str))
            if func == "setattr" and isinstance(target, ast.Name) and target.id in self.aliases:
                self.flag(node, f"patches module {self.aliases[target.id]} (setattr)")
            if isinstance(target, ast.Name) and self.aliases.get(target.id, "").split(".")[0] in SENSITIVE:
                if computed:
                    self.flag(node, f"reaches into module {target.id} by a computed name ({func})")
                else:
                    self.check_name(node, f"{self.aliases[target.id]}.{name.value}")
        if func == "glob.glob" and any(k.arg == "recursive" for k in node.keywords):
            self.flag(node, "searches the filesystem (glob, recursive)")
        if func == "vars" and isinstance(first, ast.Name) and self.aliases.get(first.id, "").split(".")[0] in SENSITIVE:
            self.flag(node, f"reads module {first.id}'s namespace (vars)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if isinstance(text, str) and PATH_TEXT.search(text) and not self._permitted_text(text):
            self.flag(node, f"names the project's files or the grader's internals in a string ({text[:40]!r})")

    def _permitted_text(self, text: str) -> bool:
        names = re.findall(r"\bsolutions\.(\w+)", text)
        rest = re.sub(r"\bsolutions\.\w+", "", text)
        return bool(names) and all(n in self.allowed for n in names) and not PATH_TEXT.search(rest)

    # ---- bookkeeping: what the file defines, and docstrings (prose, not paths) ----
    def visit_Module(self, node: ast.Module) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                self.defined.add(sub.id)
            elif isinstance(sub, ast.arg):
                self.defined.add(sub.arg)
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        body = getattr(node, "body", None)
        docstring = body[0] if isinstance(body, list) and body and _is_docstring(body[0]) else None
        for child in ast.iter_child_nodes(node):
            if child is docstring:
                continue
            self.visit(child)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
