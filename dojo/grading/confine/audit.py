"""An audit hook (PEP 578) that refuses, inside the candidate's process, what only a cheat asks for.

`install(candidate_files, record, allowed=...)` adds the hook for the rest of the process: after the
suite is imported, before the candidate's module is. When candidate code asks for code objects, frames,
the object graph, processes, ctypes, tracing, unpickling or guarded attribute writes (`EVENTS`), or
imports project or pytest code (`FORBIDDEN_IMPORTS`), it calls `record(finding)` and raises `Refused`.
Candidate code: its files, code the stdlib ran from text on its behalf, threads and callbacks it set up.
Defence in depth, not the boundary: CPython does not audit everything.
"""

from __future__ import annotations

import _thread
import atexit
import functools
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Callable, Collection

FORBIDDEN_IMPORTS = ("dojo", "solutions", "tests", "katas", "conftest", "_pytest", "pytest", "pluggy")
PROCESS = ("subprocess", "os", "multiprocessing", "concurrent.futures", "pty", "platform", "asyncio")
# stdlib modules that run text or code their caller gives them, and threads: they carry any request out
# for whoever called them (timeit only when its stmt or setup is text)
TEXT_RUNNERS = ("timeit", "code", "codeop", "runpy", "doctest", "pdb", "bdb", "cmd", "cProfile", "profile")
CARRIERS = (*TEXT_RUNNERS, "trace", "threading", "concurrent.futures")
PASS_THROUGH = {
    "process": PROCESS,
    "ctypes": ("ctypes",),
    "frames": ("inspect", "traceback"),
    "code": (),
    "patch": (
        "functools",
        "dataclasses",
        "typing",
    ),  # update_wrapper, dataclass(cls): write onto what they get
    "direct": (),
}
EVENTS = {  # audit event -> (kind of pass-through, what the finding says)
    "exec": ("code", "runs a code object it built (exec/eval)"),
    "compile": ("code", "compiles source at run time (compile/exec/eval of text)"),
    "code.__new__": ("code", "builds a code object by hand"),
    "function.__new__": ("code", "builds a function around a code object"),
    "marshal.loads": ("code", "loads code objects (marshal)"),
    "marshal.load": ("code", "loads code objects (marshal)"),
    "sys._getframe": ("frames", "inspects stack frames (sys._getframe)"),
    "sys._current_frames": ("frames", "inspects every thread's frames (sys._current_frames)"),
    "object.__getattr__": ("frames", "reads a frame, traceback or code attribute"),
    "gc.get_objects": ("direct", "walks every live object (gc.get_objects)"),
    "gc.get_referrers": ("direct", "walks the object graph (gc.get_referrers)"),
    "gc.get_referents": ("direct", "walks the object graph (gc.get_referents)"),
    "os.system": ("process", "runs a shell command (os.system)"),
    "os.fork": ("process", "forks the process"),
    "os.forkpty": ("process", "forks the process (forkpty)"),
    "os.exec": ("process", "replaces the process (os.exec*)"),
    "os.posix_spawn": ("process", "starts a program (posix_spawn)"),
    "os.spawn": ("process", "starts a program (os.spawn*)"),
    "subprocess.Popen": ("process", "starts a program (subprocess)"),
    "os.kill": ("process", "sends a signal to a process"),
    "os.killpg": ("process", "sends a signal to a process group"),
    "sys.settrace": ("direct", "traces other code (sys.settrace)"),
    "sys.setprofile": ("direct", "traces other code (sys.setprofile)"),
    "sys.addaudithook": ("direct", "adds its own audit hook"),
    "pickle.find_class": ("direct", "unpickles a class (which can import and run any module)"),
    "object.__setattr__": ("patch", "sets a guarded attribute"),
    "object.__delattr__": ("patch", "deletes a guarded attribute"),
}
IMPORT_MACHINERY = ("importlib._bootstrap", "importlib._bootstrap_external", "zipimport")
_STDLIB = tuple(
    {
        os.path.join(p, "")
        for p in (sysconfig.get_path("stdlib"), os.path.realpath(sysconfig.get_path("stdlib")))
    }
)


class Refused(RuntimeError):
    """An operation the candidate's code asked for during grading; the message names the audit event."""


def install(
    candidate_files: Collection[str], record: Callable[[dict], object], *, allowed: Collection[str] = ()
) -> None:
    """Add the hook for the rest of this process. `candidate_files`: the paths of the candidate's source
    (as given, and resolved). `record(finding)` is called once per refusal with {"event", "file",
    "line", "what"} (the candidate's file and line that asked). `allowed`: dotted modules among
    FORBIDDEN_IMPORTS the candidate may import (the reference modules a README names), parents included.
    Raises nothing itself; the hook raises Refused from the refused operation."""
    files = frozenset(candidate_files) | {os.path.realpath(f) for f in candidate_files}
    permitted = {".".join(m.split(".")[:i]) for m in allowed for i in range(1, m.count(".") + 2)}
    busy = threading.local()  # the hook's own frame reads raise events too: never judge those
    ran_from_text: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # code -> the line that asked

    def origin(frame: types.FrameType | None) -> tuple[str, int, str] | None:
        """(file, line, how) of the candidate line behind `frame` when its code is the candidate's: a
        candidate file's, code run from text on its behalf, or the root of a thread or callback it set up."""
        if frame is None:
            return None
        code = frame.f_code
        if code.co_filename in files:
            return os.path.basename(code.co_filename), frame.f_lineno, ""
        if code is carried.__code__:
            return frame.f_locals.get("by")
        return ran_from_text.get(code)

    def requester(frame: types.FrameType | None) -> tuple[str, int, str] | None:
        """The candidate line that reached `frame` through standard-library frames only (a module run by
        an import is its own; a third-party library's frames are its own)."""
        while frame is not None:
            if (found := origin(frame)) is not None:
                return found
            if not _stdlib(frame):
                return None
            frame = frame.f_back
        return None

    def asker(kind: str, frame: types.FrameType | None) -> tuple[types.FrameType | None, str]:
        """The frame that asked, past the pass-through modules for `kind` and the carriers; and the
        outermost text runner it came through ("" if none)."""
        skip, through = PASS_THROUGH[kind] + CARRIERS, ""
        while (
            frame is not None
            and origin(frame) is None
            and (_within(_module(frame), skip) or frame.f_code is update_wrapper.__code__)
        ):
            if _module(frame) == "timeit" and not _timeit_text(frame):
                break
            through = _module(frame) if _within(_module(frame), TEXT_RUNNERS) else through
            frame = frame.f_back
        return frame, through

    def refuse(where: tuple[str, int, str], event: str, what: str) -> None:
        file, line, how = where
        what = f"{what}, in {how}" if how else what
        record({"event": event, "file": file, "line": line, "what": what})
        raise Refused(f"{what}: audit event {event!r} refused during grading")

    def owned(obj: object) -> bool:
        """Whether a candidate file defined this module, class or function (or an instance's class)."""
        if isinstance(obj, types.FunctionType):
            return obj.__code__.co_filename in files
        target = obj if isinstance(obj, (type, types.ModuleType)) else type(obj)
        module = (
            target
            if isinstance(target, types.ModuleType)
            else sys.modules.get(getattr(target, "__module__", ""))
        )
        path = getattr(module, "__file__", None)
        return path is not None and (path in files or os.path.realpath(path) in files)

    def taint(code: types.CodeType, where: tuple[str, int, str]) -> None:
        """`code` and the functions, classes and lambdas inside it count as the candidate's from now on."""
        how = where[2] or "code the standard library ran from its text"
        todo = [code]
        while todo:
            current = todo.pop()
            if current not in ran_from_text:
                ran_from_text[current] = (where[0], where[1], how)
                todo += [c for c in current.co_consts if isinstance(c, types.CodeType)]

    def hook(event: str, args: tuple) -> None:
        if event == "import":
            kind = None
        elif event in EVENTS:
            kind = EVENTS[event][0]
        elif event.startswith("ctypes."):
            kind = "ctypes"
        else:
            return
        if getattr(busy, "on", False):
            return
        busy.on = True
        try:
            caller = sys._getframe(1)  # the frame whose call raised the event
            if kind is None:
                _check_import(args[0], permitted, caller, origin, refuse)
                return
            frame, through = asker(kind, caller)
            where = origin(frame)
            if where is None:
                if event == "exec" and isinstance(args[0], types.CodeType):
                    if (by := requester(caller)) is not None:
                        taint(args[0], by)
                return
            what = EVENTS[event][1] if event in EVENTS else f"calls C directly ({event})"
            if kind == "patch":
                if owned(args[0]):
                    return
                what = f"{what} ({args[1]}) of {getattr(args[0], '__name__', type(args[0]).__name__)}, code it did not define"
            elif event == "object.__getattr__":
                what = f"{what} ({args[1]})"
            refuse(where, event, f"{what} (through {through})" if through else what)
        finally:
            busy.on = False

    def behind() -> tuple[str, int, str] | None:
        """requester() of the frame that called the caller of this (a wrapper below)."""
        was, busy.on = getattr(busy, "on", False), True
        try:
            return None if was else requester(sys._getframe(2))
        finally:
            busy.on = was

    def carried(by: tuple, function: Callable, /, *args, **kwargs) -> object:
        """The root of a thread or callback the candidate set up: its frame is candidate code (origin)."""
        return function(*args, **kwargs)

    def start_new_thread(function: Callable, args: tuple, kwargs: dict | None = None) -> int:
        """_thread.start_new_thread, whose thread carries the candidate line that started it, if any."""
        if (by := behind()) is None:
            return real_start(function, args, kwargs or {})
        return real_start(carried, ((*by[:2], by[2] or "a thread it started"), function, *args), kwargs or {})

    def register(function: Callable, /, *args, **kwargs) -> Callable:
        """atexit.register, whose callback carries the candidate line that registered it, if any."""
        if (by := behind()) is None:
            return real_register(function, *args, **kwargs)
        real_register(
            carried, (*by[:2], by[2] or "an exit callback it registered"), function, *args, **kwargs
        )
        return function

    class finalize(weakref.finalize):
        """weakref.finalize, whose callback carries the candidate line that set it up, if any."""

        __slots__ = ()

        def __init__(self, obj: object, function: Callable, /, *args, **kwargs) -> None:
            if (by := behind()) is not None:
                function, args = carried, ((*by[:2], by[2] or "a finalizer it set up"), function, *args)
            super().__init__(obj, function, *args, **kwargs)

    def update_wrapper(wrapper: object, wrapped: object, *args, **kwargs) -> object:
        """functools.update_wrapper (so wraps too), refused when candidate code has it write onto a class or
        module the candidate did not define: most attribute writes raise no audit event."""
        by = behind()
        if by is not None and isinstance(wrapper, (type, types.ModuleType)) and not owned(wrapper):
            name = getattr(wrapper, "__name__", type(wrapper).__name__)
            refuse(by, "functools.update_wrapper", f"writes attributes onto {name}, code it did not define")
        return real_update(wrapper, wrapped, *args, **kwargs)

    real_start, real_update, real_register = (
        _thread.start_new_thread,
        functools.update_wrapper,
        atexit.register,
    )
    functools.update_wrapper = update_wrapper
    _thread.start_new_thread = _thread.start_new = threading._start_new_thread = start_new_thread
    atexit.register, weakref.finalize = register, finalize
    sys.addaudithook(hook)


def _module(frame: types.FrameType) -> str:
    return frame.f_globals.get("__name__", "") or ""


def _within(name: str, modules: Collection[str]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def _stdlib(frame: types.FrameType) -> bool:
    """Standard-library code (frozen modules included), other than the import machinery."""
    if _within(_module(frame), IMPORT_MACHINERY):
        return False
    path = frame.f_code.co_filename
    if path.startswith("<frozen "):
        return True
    return path.startswith(_STDLIB) and "site-packages" not in path and "dist-packages" not in path


def _timeit_text(frame: types.FrameType) -> bool:
    """Whether this timeit frame was given text to run (not a callable, not the default "pass")."""
    given = frame.f_locals
    return any(isinstance(given.get(k), str) and given[k].strip() != "pass" for k in ("stmt", "setup"))


def _check_import(name: object, permitted: set[str], frame, origin, refuse) -> None:
    """Refuse importing a project or pytest module while any candidate code is on the stack."""
    if not isinstance(name, str) or name in permitted:
        return
    top = name.split(".")[0]
    if top not in FORBIDDEN_IMPORTS and not top.startswith("test_"):
        return
    while frame is not None:
        if (where := origin(frame)) is not None:
            refuse(where, "import", f"imports {name}, the project's or the grader's code")
        frame = frame.f_back
