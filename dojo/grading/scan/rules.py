"""The integrity scan's tables: which modules, dotted names, attributes and builtins a submission
reaching for is a finding, each with the words the finding uses. dojo.grading.scan.integrity applies
them, following aliases and computed strings; this file only says what they are.
"""

from __future__ import annotations

import re

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
    "_posixsubprocess": "imports _posixsubprocess (starts programs)",
    "_thread": "imports _thread (threads outside the grader's sight)",
}
OS_TWINS = ("posix", "nt")  # os's C halves: posix.fork is os.fork
# a module with a flagged member used as a value (`[sys][0].modules`, `f(os)`) escapes alias tracking
VALUE_SENSITIVE = frozenset(
    {
        "sys",
        "os",
        "gc",
        "inspect",
        "importlib",
        "builtins",
        "pickle",
        "operator",
        "posix",
        "nt",
        "types",
        "ctypes",
        "subprocess",
        "marshal",
    }
)
DICT_WRITES = (
    "update",
    "setdefault",
    "__setitem__",
    "__delitem__",
    "pop",
    "popitem",
    "clear",
)  # on X.__dict__, vars(X)
WRITERS = (
    "setattr",
    "delattr",
    "object.__setattr__",
    "type.__setattr__",
    "object.__delattr__",
    "type.__delattr__",
)
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
    "logging.currentframe": "inspects stack frames (logging.currentframe)",
    "traceback.walk_stack": "inspects stack frames (traceback.walk_stack)",
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
RUNNERS = {  # stdlib entry points that run text or trace code for their caller (joined to NAMES below)
    "code.Interactive*": "runs text as Python (code.InteractiveInterpreter)",
    "code.interact": "runs text as Python (code.interact)",
    "code.compile_command": "compiles text (code.compile_command)",
    "codeop.*": "compiles text (codeop)",
    "runpy.run_*": "runs a file or module as Python (runpy)",
    "doctest.run_docstring_examples": "runs docstrings as Python (doctest)",
    "doctest.testmod": "runs docstrings as Python (doctest)",
    "doctest.testfile": "runs a file's examples as Python (doctest)",
    "doctest.DocTest*": "runs docstrings as Python (doctest)",
    "doctest.debug*": "runs docstrings as Python under a debugger (doctest)",
    "pdb.*": "runs text or traces code (pdb)",
    "bdb.*": "runs text or traces code (bdb)",
    "cProfile.run*": "runs text as Python (cProfile.run)",
    "profile.run*": "runs text as Python (profile.run)",
    "trace.Trace": "traces other code (trace)",
    "typing.ForwardRef": "builds an annotation from text, which typing runs as code (typing.ForwardRef)",
}
TEXT_TIMERS = ("timeit.timeit", "timeit.repeat", "timeit.Timer")  # stmt, setup: text here is run as Python
WRAPPERS = ("functools.update_wrapper", "functools.wraps")  # writes the wrapped's attributes onto the wrapper
TYPE_TEXT = ("Name", "Attribute", "Subscript", "Constant", "Tuple", "List", "BinOp", "BitOr", "Load")
ATTRIBUTES = {  # on any object
    "f_back": "walks stack frames (f_back)",
    "f_globals": "reads a frame's globals",
    "f_locals": "reads a frame's locals",
    "f_builtins": "reads a frame's builtins",
    "tb_frame": "walks stack frames (tb_frame)",
    "gi_frame": "walks frames",
    "cr_frame": "walks frames",
    "__globals__": "reads another function's globals (__globals__)",
    "__builtins__": "reaches the builtins by name (__builtins__)",
    "__subclasses__": "walks every class (__subclasses__)",
    "__code__": "reads or swaps code objects (__code__)",
    "__closure__": "reads closures (__closure__)",
    "__loader__": "reaches a module loader (__loader__)",
    "exec_module": "runs a module by hand (exec_module)",
    "rglob": "searches the filesystem (rglob)",
    "tb_next": "walks tracebacks (tb_next)",
    "f_code": "reads a frame's code",
    "gi_code": "reads a generator's code",
    "cr_code": "reads a coroutine's code",
    "ag_frame": "walks frames",
    "f_trace": "traces a frame (f_trace)",
    "co_consts": "reads a code object's constants (co_consts)",
    "co_code": "reads or swaps bytecode (co_code)",
    "co_names": "reads a code object's names (co_names)",
    "runsource": "runs text as Python (code.InteractiveInterpreter.runsource)",
    "runcode": "runs a code object (code.InteractiveInterpreter.runcode)",
    "__annotations__": "reads or writes annotations by hand (dataclasses and typing run them as code)",
}
BUILTINS = {
    "exec": "exec of text",
    "eval": "eval of text",
    "compile": "compile of text",
    "__builtins__": "reaches the builtins by name (__builtins__)",
    "globals": "reads its module's globals() by name",
    "breakpoint": "calls breakpoint()",
}
COMPUTED = ("importlib.import_module", "__import__")  # fine with a constant name (then checked as an import)
SENSITIVE = {n.split(".")[0] for n in (*NAMES, *RUNNERS, *MODULES)} | set(
    PROJECT
)  # getattr(os, name) is a finding
PATH_TEXT = re.compile(
    r"(?:^|[/\\.\s'\"])(?:solutions|dojo)(?:[/\\]|\.\w|$)|tests[/\\]|\bmutants\b|\btest_\w+\.py\b|site-packages"
    r"|\.pth\b|/proc/(?:self|thread-self|\d)|DOJO_|PYTEST_CURRENT_TEST|^(?:tests|katas|mutants|conftest\.py)$",
)

# last parts of flagged dotted names ("system", "_getframe", "fork"): text built from pieces that ends so is a finding
BUILT_NAMES = (
    frozenset(n.rpartition(".")[2].rstrip("*") for n in NAMES) | frozenset(BUILTINS) | frozenset(ATTRIBUTES)
)
NAMES = {**NAMES, **RUNNERS}  # after BUILT_NAMES: "run", "debug" built from pieces are no finding
