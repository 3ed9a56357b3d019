"""An audit hook (PEP 578) that refuses, inside the candidate's process, what only a cheat asks for.

`install(candidate_files, record, allowed=...)` adds the hook for the rest of the process: after the
suite is imported, before the candidate's module is. When a candidate file asks for code objects,
frames, the object graph, processes, ctypes, tracing, unpickling or guarded attribute writes
(`EVENTS`), or imports project or pytest code (`FORBIDDEN_IMPORTS`), it calls `record(finding)` and
raises `Refused`. Defence in depth, not the boundary: CPython does not audit everything.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable, Collection

FORBIDDEN_IMPORTS = ("dojo", "solutions", "tests", "katas", "conftest", "_pytest", "pytest", "pluggy")
PROCESS = ("subprocess", "os", "multiprocessing", "concurrent.futures", "pty", "platform", "asyncio")
PASS_THROUGH = {
    "process": PROCESS,
    "ctypes": ("ctypes",),
    "frames": ("inspect", "traceback"),
    "code": ("runpy", "code", "codeop"),
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
    "object.__setattr__": ("direct", "sets a guarded attribute"),
    "object.__delattr__": ("direct", "deletes a guarded attribute"),
}


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

    def candidate_frame(frame: types.FrameType | None) -> bool:
        return frame is not None and frame.f_code.co_filename in files

    def asker(kind: str) -> types.FrameType | None:
        """The frame that asked: below the hook, past the pass-through modules for `kind`."""
        frame = sys._getframe(2)
        modules = PASS_THROUGH[kind]
        while (
            frame is not None
            and (name := frame.f_globals.get("__name__", ""))
            and any(name == m or name.startswith(m + ".") for m in modules)
        ):
            frame = frame.f_back
        return frame

    def refuse(frame: types.FrameType, event: str, what: str) -> None:
        record(
            {
                "event": event,
                "file": os.path.basename(frame.f_code.co_filename),
                "line": frame.f_lineno,
                "what": what,
            }
        )
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
            if kind is None:
                _check_import(args[0], permitted, candidate_frame, refuse)
                return
            frame = asker(kind)
            if not candidate_frame(frame):
                return
            what = EVENTS[event][1] if event in EVENTS else f"calls C directly ({event})"
            if event in ("object.__setattr__", "object.__delattr__"):
                if owned(args[0]):
                    return
                what = f"{what} ({args[1]}) of {getattr(args[0], '__name__', type(args[0]).__name__)}, code it did not define"
            elif event == "object.__getattr__":
                what = f"{what} ({args[1]})"
            refuse(frame, event, what)
        finally:
            busy.on = False

    sys.addaudithook(hook)


def _check_import(name: object, permitted: set[str], candidate_frame, refuse) -> None:
    """Refuse importing a project or pytest module while any candidate frame is on the stack."""
    if not isinstance(name, str) or name in permitted:
        return
    top = name.split(".")[0]
    if top not in FORBIDDEN_IMPORTS and not top.startswith("test_"):
        return
    frame = sys._getframe(2)  # below _check_import and the hook: the frame that imports
    while frame is not None:
        if candidate_frame(frame):
            refuse(frame, "import", f"imports {name}, the project's or the grader's code")
        frame = frame.f_back
