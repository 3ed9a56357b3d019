"""Calls across the judge's boundary: each side keeps its objects and lends the other a reference.

An `Endpoint` is one side of a socket: plain data crosses as data (dojo.grading.judging.wire), any
other object stays in its endpoint's export table and the other side gets a `Proxy`, whose attribute
reads, calls and a few protocols travel back as requests. Both sides serve requests while they wait.
The judge's side (`trusted=True`) serves only public reads and calls of what it lent, and turns what
comes back into plain data and exceptions built here (`RemoteError`, or the builtin type it names).
Starting, limiting and restarting the worker are dojo.grading.judging.judge's and .worker's.
"""

from __future__ import annotations

import builtins
import hashlib
import itertools
import os
import re
import socket
import sys
import traceback
import types
from typing import Any

from dojo.grading.judging import wire

OPS = (
    "getattr",
    "setattr",
    "call",
    "len",
    "iter",
    "next",
    "getitem",
    "setitem",
    "contains",
    "enter",
    "exit",
    "str",
)
SAFE_BUILTIN_ERRORS = {
    name: getattr(builtins, name)
    for name in (
        "ValueError",
        "TypeError",
        "KeyError",
        "IndexError",
        "RuntimeError",
        "NotImplementedError",
        "AttributeError",
        "AssertionError",
        "ZeroDivisionError",
        "OverflowError",
        "ArithmeticError",
        "LookupError",
        "MemoryError",
        "RecursionError",
        "StopIteration",
        "OSError",
        "FileNotFoundError",
        "UnicodeError",
        "ImportError",
        "ModuleNotFoundError",  # (not Unicode{De,En}codeError: five arguments)
        "NameError",
        "UnboundLocalError",
        "FloatingPointError",
        "IOError",
        "EOFError",
        "BufferError",
        "Exception",
    )
}


class RemoteError(Exception):
    """An exception the other side raised: its type name, message and, for the candidate's code, where."""

    remote_type = "Exception"
    where = ""


class BoundaryError(RuntimeError):
    """The other side broke the protocol, went away, or sent what may not cross."""


class Proxy:
    """A reference to an object the other side owns. Everything but identity travels as a request."""

    __slots__ = ("_endpoint", "_ref", "__weakref__")

    def __init__(self, endpoint: Endpoint, ref: wire.Ref) -> None:
        object.__setattr__(self, "_endpoint", endpoint)
        object.__setattr__(self, "_ref", ref)

    def __getattr__(self, name: str):
        return self._endpoint.request("getattr", self._ref, name)

    def __setattr__(self, name: str, value) -> None:
        self._endpoint.request("setattr", self._ref, name, value)

    def __call__(self, *args, **kwargs):
        return self._endpoint.request("call", self._ref, list(args), kwargs)

    def __len__(self) -> int:
        n = self._endpoint.request("len", self._ref)
        if type(n) is not int or n < 0:
            raise TypeError(f"len() of {self._ref.kind} gave {type(n).__name__}, not a whole number")
        return n

    def __iter__(self):
        it = self._endpoint.request("iter", self._ref)
        while True:
            try:
                yield self._endpoint.request("next", it._ref) if isinstance(it, Proxy) else next(it)
            except StopIteration:
                return

    def __next__(self):
        return self._endpoint.request("next", self._ref)

    def __getitem__(self, key):
        return self._endpoint.request("getitem", self._ref, key)

    def __setitem__(self, key, value) -> None:
        self._endpoint.request("setitem", self._ref, key, value)

    def __contains__(self, item) -> bool:
        return self._endpoint.request("contains", self._ref, item) is True

    def __enter__(self):
        return self._endpoint.request("enter", self._ref)

    def __exit__(self, *exc) -> bool:
        self._endpoint.request("exit", self._ref)
        return False

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<{self._ref.kind} in {'your code' if self._ref.owner == 'worker' else 'the judge'}>"

    __str__ = __repr__


class Endpoint:
    """One side of the connection. `request` sends and serves until its answer comes; `serve`
    answers requests until the peer closes. `trusted`: the judge's side (see the module docstring)."""

    def __init__(self, sock: socket.socket, side: str, *, trusted: bool, lend=None) -> None:
        """`lend(obj)`: what the judge lends for `obj` (a copy, so the candidate's code cannot change the
        judge's own); asked once per object for each call the judge makes, nested call backs included."""
        self.sock, self.side, self.trusted, self.lend = sock, side, trusted, lend
        self._lent: dict[int, int] = {}  # id(original) -> export id of what was lent for it, this call
        self._lent_keep: list[Any] = []  # the originals, alive while their ids are keys above
        self._depth = 0
        self.peer = "worker" if side == "judge" else "judge"
        self._exports: dict[int, Any] = {}
        self._export_ids: dict[int, int] = {}  # id(obj) -> export id (the table keeps obj alive)
        self._proxies: dict[int, Proxy] = {}
        self._ids = itertools.count(1)
        self._last_id = 0  # the newest export's id (`mark`)
        self._seq = itertools.count(1)
        self._error_classes: dict[tuple[int, str], type] = {}
        self.broken: str | None = None

    # ---- sending and receiving ----

    def _export(self, obj: Any):
        if isinstance(obj, Proxy) and obj._endpoint is self:
            return obj._ref
        if self.trusted and (why := _unlendable(obj)):
            raise TypeError(f"{why} cannot be lent to the candidate's code")
        if self.lend is not None and id(obj) not in self._export_ids:
            if id(obj) not in self._lent:
                lent = self.lend(obj)
                if lent is obj:
                    return self._register(obj)
                self._lent_keep.append(obj)
                self._lent[id(obj)] = self._register(lent).id
            ident = self._lent[id(obj)]
            return wire.Ref(self.side, ident, type(self._exports[ident]).__name__)
        return self._register(obj)

    def mark(self) -> int:
        """Where the exports stand now: `revoke_since(mark)` drops those made after it."""
        return self._last_id

    def revoke_since(self, mark: int) -> None:
        """Drop everything this side exported after `mark`: a later reference to it from the peer is a
        reference to nothing, which breaks the connection. The judge revokes what each test lent when
        the test ends, so nothing a test lent (a counter, an oracle, a callback) outlives it."""
        for ident in [i for i in self._exports if i > mark]:
            self._export_ids.pop(id(self._exports.pop(ident)), None)
        self._lent.clear()
        self._lent_keep.clear()

    def _register(self, obj: Any) -> wire.Ref:
        key = id(obj)
        if key not in self._export_ids:
            ident = self._last_id = next(self._ids)
            self._export_ids[key], self._exports[ident] = ident, obj
        kind = obj.__name__ if isinstance(obj, type) else type(obj).__name__
        if isinstance(obj, type) and issubclass(obj, BaseException):
            kind = f"exception class {obj.__name__}:{_builtin_base(obj)}"
        return wire.Ref(self.side, self._export_ids[key], kind)

    def _resolve(self, ref: wire.Ref):
        if ref.owner == self.side:
            if ref.id not in self._exports:
                raise wire.WireError(f"a reference to nothing this side lent ({ref.id})")
            return self._exports[ref.id]
        if ref.kind.startswith("exception class ") and self.trusted:
            return self._error_class(ref)
        if ref.id not in self._proxies:
            self._proxies[ref.id] = Proxy(self, ref)
        return self._proxies[ref.id]

    def _receive(self) -> dict:
        try:
            message = wire.decode(*wire.recv(self.sock), self._resolve)
        except (EOFError, OSError) as exc:
            self._break(f"the {self.peer} process went away ({exc})")
        except wire.WireError as exc:
            self._break(f"the {self.peer} sent a malformed message: {exc}")
        if type(message) is not dict:
            self._break(f"the {self.peer} sent a {type(message).__name__}, not a message")
        return message

    def _break(self, why: str):
        self.broken = self.broken or why
        raise BoundaryError(self.broken)

    # ---- the two loops ----

    def request(self, op: str, ref: wire.Ref, *args):
        """Ask the peer to do `op` on its object `ref`; serve its requests meanwhile; the answer."""
        if self.broken:
            raise BoundaryError(self.broken)
        seq = next(self._seq)
        if self._depth == 0:  # a new call from the top: what is lent now is lent afresh
            self._lent.clear()
            self._lent_keep.clear()
        self._depth += 1
        try:
            return self._request(seq, op, ref, args)
        finally:
            self._depth -= 1

    def _request(self, seq: int, op: str, ref: wire.Ref, args: tuple):
        text, buffers = wire.encode({"q": seq, "op": op, "ref": ref, "args": list(args)}, self._export)
        if _RECORD and self.trusted:
            _record(text, buffers)
        try:  # (an argument that cannot be sent raised above: nothing went out, the connection is sound)
            wire.send(self.sock, text, buffers)
            while True:
                message = self._receive()
                if "q" in message:
                    self._answer(message)
                elif message.get("a") == seq:
                    break
                else:
                    self._break(f"the {self.peer} answered a question that was not asked")
        except BaseException as exc:  # a time limit, or the peer gone: no later answer can be trusted
            self.broken = self.broken or f"a call was cut short ({type(exc).__name__}: {exc})"
            raise
        if "err" in message:
            raise self._error(message["err"], op)
        return message.get("ok")

    def serve(self) -> None:
        """Answer requests until the peer closes the connection."""
        while True:
            try:
                message = self._receive()
            except BoundaryError:
                return
            if "q" not in message:
                self._break(f"the {self.peer} sent an answer to nothing")
            self._answer(message)

    def _answer(self, message: dict) -> None:
        seq = message.get("q")
        try:
            value = self._do(message.get("op"), message.get("ref"), message.get("args"))
            reply = {"a": seq, "ok": value}
            text, buffers = wire.encode(reply, self._export)  # an unsendable value is this call's error
        except BoundaryError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the other side's error is its answer
            if self.trusted and not isinstance(exc, Exception):  # the test's time limit, ^C: the judge's own
                self.broken = self.broken or f"a call back was cut short ({type(exc).__name__}: {exc})"
                raise
            reply = {"a": seq, "err": self._describe(exc)}
            text, buffers = wire.encode(reply, self._export)
        try:
            wire.send(self.sock, text, buffers)
        except wire.WireError as exc:
            wire.send(self.sock, *wire.encode({"a": seq, "err": self._describe(exc)}, self._export))
        except OSError as exc:
            self._break(f"the connection failed while answering ({exc})")

    def _do(self, op, ref, args):
        if op not in OPS or not isinstance(args, list):
            raise BoundaryError(f"an unknown request {str(op)[:30]!r}")
        ident = self._export_ids.get(id(ref))
        if ident is None or self._exports.get(ident) is not ref:
            raise BoundaryError("a request about an object this side did not lend")
        obj = ref
        if self.trusted:
            _check_lent_use(op, args, obj)
        if op == "getattr":
            return getattr(obj, args[0])
        if op == "setattr":
            return setattr(obj, args[0], args[1])
        if op == "call":
            pos, kw = args
            if not isinstance(pos, list) or not isinstance(kw, dict) or not all(type(k) is str for k in kw):
                raise BoundaryError("a malformed call")
            return obj(*pos, **kw)
        if op == "str":
            return str(obj)[:2000]
        one = {
            "len": len,
            "iter": iter,
            "next": next,
            "enter": lambda o: o.__enter__(),
            "exit": lambda o: o.__exit__(None, None, None),
        }
        if op in one:
            return one[op](obj)
        if op == "getitem":
            return obj[args[0]]
        if op == "setitem":
            obj[args[0]] = args[1]
            return None
        return args[0] in obj  # contains

    # ---- errors ----

    def _describe(self, exc: BaseException) -> dict:
        cls = type(exc)
        frames = [
            f"{line}, in {frame.f_code.co_qualname}"  # "71, in PagedKVCache.__init__"
            for frame, line in traceback.walk_tb(exc.__traceback__)
            if self.side == "worker" and frame.f_code.co_filename == getattr(self, "candidate_file", None)
        ]
        return {
            "type": cls.__name__[:100],
            "base": _builtin_base(cls),
            "message": _text(exc)[:4000],
            "class": self._export(cls) if self.side == "worker" and cls.__module__ != "builtins" else None,
            "where": frames[-1] if frames else "",
        }  # the innermost line of the candidate's file

    def _error(self, err, op: str = "call") -> BaseException:
        if not self.trusted:  # the candidate's side: the judge's builtin errors as themselves, so that
            # hasattr, getattr's default and `except KeyError` behave as they would in one process
            message = str(err.get("message") if isinstance(err, dict) else err)
            builtin = _builtin(err.get("type"), err.get("base")) if isinstance(err, dict) else None
            return (builtin or RemoteError)(message)
        if type(err) is not dict:
            return BoundaryError(f"the {self.peer} sent a malformed error")
        message, name, base = str(err.get("message", "")), str(err.get("type", "?")), str(err.get("base", ""))
        if base == "StopIteration" and op != "next":  # PEP 479's rule at the boundary: only asking for the
            base = "RuntimeError"  # next item may end an iteration; raised by any other call it would end
            # the suite's own loop (a map or a generator over the candidate's calls) early, silently
        cls = err.get("class")
        if isinstance(cls, type) and issubclass(cls, RemoteError):
            exc = cls(message)
        elif builtin := _builtin(name, base):
            exc = builtin(message)
        else:
            exc = self._error_class(wire.Ref(self.peer, -1, f"exception class {name}:{base}"))(message)
        exc.remote_type, exc.where = name, str(err.get("where", ""))
        return exc

    def _error_class(self, ref: wire.Ref) -> type:
        """A class standing here for the candidate's exception class: its name, a subclass of the builtin
        exception it derives from (never of a pytest outcome or any BaseException that is no Exception)."""
        name, _, base = ref.kind.removeprefix("exception class ").partition(":")
        key = (ref.id, ref.kind)
        if key not in self._error_classes:
            parent = SAFE_BUILTIN_ERRORS.get(base, Exception)
            if parent is StopIteration and name != "StopIteration":
                parent = Exception
            cls = type(name if name.isidentifier() else "CandidateError", (RemoteError, parent), {})
            self._error_classes[key] = cls
        return self._error_classes[key]


INTROSPECTION = (types.FrameType, types.CodeType, types.TracebackType)
RUNNING = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
BUILTIN_FUNCTIONS = {id(v): k for k, v in vars(builtins).items() if callable(v) and not isinstance(v, type)}


# The torch.nn.Module methods a lent model offers: reading and casting its weights, training mode,
# iterating its parts, hooks that call back the candidate's code. The rest of the base class's API is
# not lent (compile reaches Dynamo and Inductor, whose options end up in a compiler's command line: a
# red team ran a shell command in the judge that way). A model's own attributes (prefill, config ...)
# are lent as before.
MODULE_API = frozenset(
    {
        "forward",
        "training",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
        "get_submodule",
        "get_parameter",
        "get_buffer",
        "state_dict",
        "load_state_dict",
        "train",
        "eval",
        "zero_grad",
        "requires_grad_",
        "to",
        "float",
        "double",
        "half",
        "bfloat16",
        "apply",
        "register_forward_hook",
        "register_forward_pre_hook",
    }
)


# $DOJO_RECORD_CALLS: a file the judge appends "test<TAB>digest" to for every call it sends, the digest
# blind to sequence numbers and reference ids (dojo.grading.proof.fixed_inputs compares two seeds' runs)
_RECORD = os.environ.get("DOJO_RECORD_CALLS")


def _record(text: str, buffers: list[bytes]) -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST", "")
    test = test.partition("::")[2].rsplit(" (", 1)[0] or "(outside a test)"
    text = re.sub(r'"q":\d+|\["q",\d+\]', '"q":0', text)  # the call's sequence number, however encoded
    text = re.sub(r'\{"R":\["(\w+)",\d+,', r'{"R":["\1",0,', text)
    text = re.sub(r"/tmp/[\w.\-/]*", "/tmp/X", text)  # a test's temporary folder differs every run
    digest = hashlib.sha256(text.encode())
    for b in buffers:
        digest.update(b)
    with open(_RECORD, "a") as f:
        f.write(f"{test}\t{digest.hexdigest()[:16]}\n")


def _torch_module_api(obj, name: str) -> bool:
    """Whether `name` is the torch.nn.Module base class's own API on `obj` (not the model's own)."""
    nn = sys.modules.get("torch.nn")
    return (
        nn is not None
        and isinstance(obj, nn.Module)
        and hasattr(nn.Module, name)
        and not any(
            name in vars(cls)
            for cls in type(obj).__mro__
            if cls is not nn.Module and not issubclass(nn.Module, cls)
        )
    )


def _unlendable(obj) -> str:
    """Why the judge never lends `obj`, or "": a module (its namespace is the judge's), a frame, code
    object or traceback (a frame's f_globals and f_builtins are the judge's namespace and exec), or a
    function of the builtins module (exec, eval, open, setattr, __import__ ... run in the judge)."""
    if isinstance(obj, types.ModuleType):
        return "a module"
    if isinstance(obj, INTROSPECTION):
        return f"a {type(obj).__name__}"
    if BUILTIN_FUNCTIONS.get(id(obj)) and getattr(builtins, BUILTIN_FUNCTIONS[id(obj)], None) is obj:
        return f"the builtin {BUILTIN_FUNCTIONS[id(obj)]}"
    return ""


def _check_lent_use(op: str, args: list, obj=None) -> None:
    """The judge's rule for what the candidate may do with what it lent: read public attributes, call,
    iterate, index; never write an attribute, never read a private or dunder one, nor any attribute of
    a running generator or coroutine (model.parameters() is for iterating: its gi_frame is the judge's
    frame). What it lends is checked too (_unlendable)."""
    if op == "getattr" and isinstance(obj, RUNNING):
        raise AttributeError(
            f"your code may iterate the judge's {type(obj).__name__}, not read its attributes"
        )
    if op == "getattr" and args and args[0] not in MODULE_API and _torch_module_api(obj, args[0]):
        raise AttributeError(
            f"your code may not use {type(obj).__name__}.{args[0]} of the judge's model: its "
            f"torch.nn.Module methods lent are {', '.join(sorted(MODULE_API))}"
        )
    if op == "setattr":
        raise PermissionError("the judge's objects are read-only to your code")
    if op == "setitem":
        raise PermissionError("the judge's objects are read-only to your code")
    if op == "getattr":
        name = args[0] if args else None
        if type(name) is not str or name.startswith("_"):
            raise AttributeError(
                f"your code may read only public attributes of the judge's objects, not {name!r}"
            )


def _builtin(name, base) -> type | None:
    """The builtin exception class an error names, if it is one of SAFE_BUILTIN_ERRORS itself (not a
    subclass of one, which has its own name)."""
    return SAFE_BUILTIN_ERRORS[name] if name in SAFE_BUILTIN_ERRORS and name == base else None


def _builtin_base(cls: type) -> str:
    """The nearest builtin exception class in `cls`'s method resolution order, by name."""
    for c in cls.__mro__:
        if c.__module__ == "builtins" and c.__name__ in SAFE_BUILTIN_ERRORS:
            return c.__name__
    return "BaseException" if not issubclass(cls, Exception) else "Exception"


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        return f"<{type(exc).__name__} whose message could not be read>"
